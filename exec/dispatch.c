/* Kernel dispatch: one function per op, in a table made from the op table
 * (graph/ops.def names each op's k_ function).  Both executors come through here, so
 * the arithmetic is the same in both modes.  These functions only turn a node into a
 * kernel's arguments and split memory-bound kernels over the call's pool; the
 * algorithms are the kernels' (kernels/). */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec/comm.h"
#include "exec/dispatch_bnorm.h"
#include "exec/exec.h"
#include "kernels/kern.h"
#include "kernels/split.h"
#include "util/pool.h"
#include "util/rng.h"

typedef int (*KernelFn)(const KCall *c);

static const Shape *ishape(const KCall *c, int k) { return &c->g->nodes[c->n->in[k]].shape; }
static size_t numel(const Shape *s) { return (size_t)shape_numel(s); }
static const float *fin(const KCall *c, int k) { return (const float *)c->in[k]; }
static float *fout(const KCall *c) { return (float *)c->out; }

size_t node_bytes(const Node *n) { return (size_t)shape_numel(&n->shape) * 4; }

bool exec_fits_memory(double bytes, const char *what, DiagSink *d)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double phys = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (phys == 0 || bytes <= phys) return true;
    diag_plain(d, "%s needs %.1f GB, more than this machine's %.1f GB of memory", what, bytes / 1e9, phys / 1e9);
    return false;
}

double exec_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

static void dims64(const Shape *s, int64_t *out)
{
    for (int i = 0; i < s->rank; i++) out[i] = s->d[i].v;
}

/* ---- splitting memory-bound kernels across the call's pool ----------------------------
 * Elementwise and pooling kernels are serial functions; large calls are cut into one
 * contiguous range (or block of images) per thread (kernels/split.h). */

static Range ranges(const KCall *c, size_t n, size_t unit) { return split_range(n, unit, pool_threads(c->pool)); }

/* Over `rows` rows of `len` elements each: split as their elements would be (SPLIT_MIN
 * counts elements), the ranges counted in whole rows. */
static Range row_ranges(const KCall *c, size_t rows, size_t len)
{
    Range r = ranges(c, rows * len, len);
    r.n = rows;
    r.unit = 1;
    return r;
}

/* A unary function of the op table as the kernels call it, and a GEMM's epilogue. */
static EwUnary ew_of(int op) { return (EwUnary)op_info[op].ew; }
static EwAct act_of(int op, float p) { return op >= 0 ? (EwAct){ op_info[op].ew, p } : EW_NO_ACT; }

typedef struct ElemJob {
    const KCall *c;
    Range r;
    size_t bvec;   /* k_binary: length of a trailing-vector operand (0: same size) */
} ElemJob;

static void unary_part(void *arg, int part, int worker)
{
    (void)worker;
    const ElemJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    const KCall *c = j->c;
    const Node *n = c->n;
    if (n->op == OP_UNARY_GRAD)
        kern_unary_grad(ew_of(n->a.unary.op), n->a.unary.p, fin(c, 0) + lo, fin(c, 1) + lo, fout(c) + lo, hi - lo);
    else
        kern_unary(ew_of(n->op), n->a.unary.p, fin(c, 0) + lo, fout(c) + lo, hi - lo);
}

static int k_nop(const KCall *c) { (void)c; return 0; }

static int k_const(const KCall *c)
{
    fout(c)[0] = c->n->a.cnst.value;
    return 0;
}

static int k_param(const KCall *c)
{
    /* Executors bind PARAM outputs to the var storage directly; a copy only if not. */
    const float *src = c->env->w->data[c->n->a.param.var];
    if (c->out != src) memcpy(c->out, src, node_bytes(c->n));
    return 0;
}

static int k_matmul(const KCall *c)
{
    const Shape *a = ishape(c, 0), *b = ishape(c, 1);
    bool ta = c->n->a.matmul.ta, tb = c->n->a.matmul.tb;
    size_t M = (size_t)c->n->shape.d[0].v, N = (size_t)c->n->shape.d[1].v;
    size_t K = (size_t)a->d[ta ? 0 : 1].v;
    (void)b;
    kern_gemm(c->pool, c->env->isa, ta, tb, M, N, K, 1.0f, fin(c, 0), fin(c, 1), 0.0f, fout(c));
    return 0;
}

/* The bias added as the GEMM stores each tile, the activation by each thread on its
 * part of the product: the bits of the product, then kern_bias_act. */
static int k_matmul_bias_act(const KCall *c)
{
    const Shape *a = ishape(c, 0);
    bool ta = c->n->a.matmul.ta, tb = c->n->a.matmul.tb;
    size_t M = (size_t)c->n->shape.d[0].v, N = (size_t)c->n->shape.d[1].v, K = (size_t)a->d[ta ? 0 : 1].v;
    if (c->pack && !tb)   /* the compiled plan's weights packed once: the same bits */
        kern_gemm_bias_act_packed(c->pool, c->env->isa, ta, M, N, K, fin(c, 0), c->pack, fin(c, 1), fin(c, 2),
                                  act_of(c->n->a.matmul.act, c->n->a.matmul.act_p), fout(c));
    else
        kern_gemm_bias_act(c->pool, c->env->isa, ta, tb, M, N, K, fin(c, 0), fin(c, 1), fin(c, 2),
                           act_of(c->n->a.matmul.act, c->n->a.matmul.act_p), fout(c));
    return 0;
}

static int run_images(const KCall *c, KPool p, OpKind op, const float *x);

static KConv conv_window(const WinAttr *a, const Shape *x, const Shape *w, int64_t oh, int64_t ow)
{
    KConv p = {
        .n = x->d[0].v, .h = x->d[1].v, .w = x->d[2].v, .c = x->d[3].v,
        .kh = w->d[0].v, .kw = w->d[1].v, .f = w->d[3].v,
        .sh = a->sh, .sw = a->sw, .pt = a->pt, .pl = a->pl,
        .oh = oh, .ow = ow,
    };
    return p;
}

static KConv conv_params(const Node *n, const Shape *x, const Shape *w, const Shape *y)
{
    return conv_window(&n->a.win, x, w, y->d[1].v, y->d[2].v);
}

/* conv2d_maxpool: the convolution (its output size from the resolved padding), and the
 * pooling of its output. */
static void convpool_params(const Graph *g, const Node *n, KConv *p, KPool *q)
{
    const Shape *x = &g->nodes[n->in[0]].shape, *w = &g->nodes[n->in[1]].shape;
    const Dim *y = n->shape.d + (n->op == OP_CONV2D_MAXPOOL_ARGMAX);   /* its leading 2 skipped */
    const WinAttr *cv = &n->a.convpool.conv, *pl = &n->a.convpool.pool;
    *p = conv_window(cv, x, w, (x->d[1].v + cv->pt + cv->pb - w->d[0].v) / cv->sh + 1,
                     (x->d[2].v + cv->pl + cv->pr - w->d[1].v) / cv->sw + 1);
    *q = (KPool){ .n = p->n, .h = p->oh, .w = p->ow, .c = p->f, .kh = pl->kh, .kw = pl->kw, .sh = pl->sh,
                  .sw = pl->sw, .pt = pl->pt, .pl = pl->pl, .oh = y[1].v, .ow = y[2].v };
}

/* conv2d_maxpool: band by band (kern_conv2d_maxpool) where the kernel that takes the
 * convolution gives the bits of the two ops apart; elsewhere the two ops apart, the
 * convolution's output in the node's scratch (the fusion is the graph's decision; how
 * to keep its promise of the same bits is the executor's). */
/* The convolution's output when the two ops run apart, in floats, rounded up to 64
 * bytes so the convolution's own scratch after it stays aligned. */
static size_t convpool_apart_floats(const KConv *p) { return ((size_t)(p->n * p->oh * p->ow * p->f) + 15) / 16 * 16; }

static size_t convpool_scratch(const Graph *g, const Node *n, int threads)
{
    KConv p;
    KPool q;
    convpool_params(g, n, &p, &q);
    if (kern_conv2d_maxpool_exact(&p)) return kern_conv2d_maxpool_scratch(&p, &q, threads);
    return convpool_apart_floats(&p) * sizeof(float) + kern_conv_scratch(&p, KCONV_FORWARD, threads);
}

/* sum_to's parts (split_sum_to, below) and the widest bias it splits */
enum { SUMTO_PARTS = 8, SUMTO_MAX_COLS = 256 };

/* conv2d_grad_filter_pooled and sum_to_pooled: the convolution and the pool of their
 * conv2d_maxpool_argmax (input 1 of the first, input 0 of the second). */
static const Node *pooled_of(const Graph *g, const Node *n)
{
    return &g->nodes[n->in[n->op == OP_CONV2D_GRAD_FILTER_POOLED ? 1 : 0]];
}

/* Where the pooled kernel pays, its scratch; elsewhere the scatter made in the
 * scratch, then the dense kernel (after it, its scratch): the same bits either way. */
static size_t pooled_scratch(const Graph *g, const Node *n, int threads)
{
    KConv p;
    KPool q;
    convpool_params(g, pooled_of(g, n), &p, &q);
    if (n->op == OP_CONV2D_GRAD_FILTER_POOLED && kern_conv2d_grad_filter_pooled_pays(&p, &q))
        return kern_conv_scratch(&p, KCONV_GRAD_FILTER, threads);
    if (n->op == OP_SUM_TO_POOLED)
        return kern_maxpool_scatter_sum_ok(&q) && p.f <= SUMTO_MAX_COLS ? 0 : convpool_apart_floats(&p) * sizeof(float);
    return convpool_apart_floats(&p) * sizeof(float) + kern_conv_scratch(&p, KCONV_GRAD_FILTER, threads);
}

size_t dispatch_scratch_traffic(const Graph *g, const Node *n, int threads)
{
    if (n->op == OP_CONV2D_GRAD_FILTER_POOLED) {
        KConv p;
        KPool q;
        convpool_params(g, pooled_of(g, n), &p, &q);
        return kern_conv2d_grad_filter_pooled_pays(&p, &q) ? 0 : 2 * (size_t)(p.n * p.oh * p.ow * p.f) * sizeof(float);
    }
    if (n->op == OP_SUM_TO_POOLED) {
        KConv p;
        KPool q;
        convpool_params(g, pooled_of(g, n), &p, &q);
        return kern_maxpool_scatter_sum_ok(&q) && p.f <= SUMTO_MAX_COLS ? 0 : 2 * (size_t)(p.n * p.oh * p.ow * p.f) * sizeof(float);
    }
    (void)threads;   /* no path counted here depends on it */
    if (n->op == OP_MATMUL_GRAD_UPDATE && n->a.update.kind == OP_MOMENTUM_UPDATE)
        return 2 * kern_dense_backward_scratch((size_t)n->shape.d[0].v, (size_t)n->shape.d[1].v, false, 1);
    if (n->op != OP_CONV2D_MAXPOOL && n->op != OP_CONV2D_MAXPOOL_ARGMAX) return 0;
    KConv p;
    KPool q;
    convpool_params(g, n, &p, &q);
    return kern_conv2d_maxpool_exact(&p) ? 0 : 2 * (size_t)(p.n * p.oh * p.ow * p.f) * sizeof(float);
}

/* conv2d_maxpool, and conv2d_maxpool_argmax: y then the index in its output. */
static int k_conv2d_maxpool(const KCall *c)
{
    KConv p;
    KPool q;
    convpool_params(c->g, c->n, &p, &q);
    const float *bias = c->n->nin == 3 ? fin(c, 2) : NULL;
    EwAct act = bias ? act_of(c->n->a.convpool.conv.act, c->n->a.convpool.conv.act_p) : EW_NO_ACT;
    const bool argmax = c->n->op == OP_CONV2D_MAXPOOL_ARGMAX;
    int32_t *idx = argmax ? (int32_t *)c->out + q.n * q.oh * q.ow * q.c : NULL;
    if (kern_conv2d_maxpool_exact(&p)) {
        if (argmax)
            kern_conv2d_maxpool_argmax(c->pool, c->env->isa, &p, &q, fin(c, 0), fin(c, 1), bias, act, fout(c), idx,
                                       c->scratch);
        else
            kern_conv2d_maxpool(c->pool, c->env->isa, &p, &q, fin(c, 0), fin(c, 1), bias, act, fout(c), c->scratch);
        return 0;
    }
    float *conv = c->scratch;
    kern_conv2d_bias_act(c->pool, c->env->isa, &p, fin(c, 0), fin(c, 1), bias, act, conv, conv + convpool_apart_floats(&p));
    return run_images(c, q, c->n->op == OP_CONV2D_MAXPOOL ? OP_MAXPOOL : OP_CONV2D_MAXPOOL_ARGMAX, conv);
}

static void copy_part(void *arg, int part, int worker)
{
    (void)worker;
    const ElemJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    memcpy(fout(j->c) + lo, fin(j->c, 0) + lo, (hi - lo) * sizeof(float));
}

/* maxpool_values: the first half of its input, copied, in ranges over the pool (one
 * thread copied MNIST's 6.4 MB in 0.7 ms of a 72 ms training step while the other
 * waited). */
static int k_maxpool_values(const KCall *c)
{
    ElemJob j = { c, ranges(c, numel(&c->n->shape), 16), 0 };
    pool_run(c->pool, j.r.parts, copy_part, &j);
    return 0;
}

/* conv2d(x, w) -> y; grad_input(dy, w) -> dx [x]; grad_filter(x, dy) -> dw [w] */
static KConv call_conv(const KCall *c)
{
    const Node *n = c->n;
    switch (n->op) {
    case OP_CONV2D: case OP_CONV2D_BIAS_ACT: return conv_params(n, ishape(c, 0), ishape(c, 1), &n->shape);
    case OP_CONV2D_GRAD_INPUT: return conv_params(n, &n->shape, ishape(c, 1), ishape(c, 0));
    default: return conv_params(n, ishape(c, 0), &n->shape, ishape(c, 1));
    }
}

static int k_conv2d(const KCall *c)
{
    KConv p = call_conv(c);
    if (c->n->op == OP_CONV2D_BIAS_ACT)
        kern_conv2d_bias_act(c->pool, c->env->isa, &p, fin(c, 0), fin(c, 1), fin(c, 2), act_of(c->n->a.win.act, c->n->a.win.act_p),
                             fout(c), c->scratch);
    else
        kern_conv2d(c->pool, c->env->isa, &p, fin(c, 0), fin(c, 1), fout(c), c->scratch);
    return 0;
}

static int k_conv2d_grad_input(const KCall *c)
{
    KConv p = call_conv(c);
    kern_conv2d_grad_input(c->pool, c->env->isa, &p, fin(c, 0), fin(c, 1), fout(c), c->scratch);
    return 0;
}

static int k_conv2d_grad_filter(const KCall *c)
{
    KConv p = call_conv(c);
    kern_conv2d_grad_filter(c->pool, c->env->isa, &p, fin(c, 0), fin(c, 1), fout(c), c->scratch);
    return 0;
}

/* conv2d_grad_filter_pooled: the pooled kernel where it pays, else the scatter into
 * the scratch and the dense kernel (the same bits). */
static int k_conv2d_grad_filter_pooled(const KCall *c)
{
    KConv p;
    KPool q;
    convpool_params(c->g, pooled_of(c->g, c->n), &p, &q);
    const float *y = fin(c, 1), *dy = fin(c, 2);
    const int32_t *idx = (const int32_t *)c->in[1] + q.n * q.oh * q.ow * q.c;
    const float *mask = c->n->a.convpool.pool.act >= 0 ? y : NULL;
    if (kern_conv2d_grad_filter_pooled_pays(&p, &q)) {
        kern_conv2d_grad_filter_pooled(c->pool, c->env->isa, &p, &q, fin(c, 0), idx, mask, dy, fout(c), c->scratch);
        return 0;
    }
    float *dense = c->scratch;
    kern_maxpool_scatter(c->env->isa, &q, idx, mask, dy, dense);
    kern_conv2d_grad_filter(c->pool, c->env->isa, &p, fin(c, 0), dense, fout(c), dense + convpool_apart_floats(&p));
    return 0;
}

static size_t update_scratch(const Graph *g, const Node *n, int threads);
static size_t layer_norm_scale_scratch(const Node *n);
static size_t clip_tasks(const Graph *g, const Node *n);
static size_t attention_scratch(const Graph *g, const Node *n, int threads);

/* A convolution's scratch, sized by the path its kernel takes at these sizes (a direct
 * kernel needs no im2col chunks); the fused updates' (Adam's panels, a dense backward's
 * signs or panels); 0 for every other op. */
size_t dispatch_scratch_bytes(const Graph *g, const Node *n, int threads)
{
    if (n->op == OP_MATMUL_UPDATE || n->op == OP_MATMUL_GRAD_UPDATE) return update_scratch(g, n, threads);
    if (n->op == OP_CLIP_SCALE) return clip_tasks(g, n) * sizeof(double);
    if (n->op == OP_CONV2D_MAXPOOL || n->op == OP_CONV2D_MAXPOOL_ARGMAX) return convpool_scratch(g, n, threads);
    if (n->op == OP_CONV2D_GRAD_FILTER_POOLED || n->op == OP_SUM_TO_POOLED) return pooled_scratch(g, n, threads);
    if (n->op == OP_LAYER_NORM_GRAD_SCALE) return layer_norm_scale_scratch(n);
    if (n->op == OP_ATTENTION || n->op == OP_ATTENTION_PROBS || n->op == OP_ATTENTION_OUT || n->op == OP_ATTENTION_GRAD)
        return attention_scratch(g, n, threads);
    if (dispatch_bn_scratch(g, n)) return dispatch_bn_scratch(g, n);
    KConvOp op;
    switch (n->op) {
    case OP_CONV2D: case OP_CONV2D_BIAS_ACT: op = KCONV_FORWARD; break;
    case OP_CONV2D_GRAD_INPUT: op = KCONV_GRAD_INPUT; break;
    case OP_CONV2D_GRAD_FILTER: op = KCONV_GRAD_FILTER; break;
    default: return 0;
    }
    const void *none[3] = { 0 };
    KCall c = { .g = g, .n = n, .in = none };
    KConv p = call_conv(&c);
    return kern_conv_scratch(&p, op, threads);
}

static void binary_part(void *arg, int part, int worker)
{
    (void)worker;
    const ElemJob *j = arg;
    const KCall *c = j->c;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    size_t na = numel(ishape(c, 0)), nb = numel(ishape(c, 1));
    /* each side is the same size as y (offset with the range), or a trailing vector
     * or a scalar (whole, since ranges are multiples of its length) */
    int64_t ad[2] = { 1, (int64_t)(na == j->r.n ? hi - lo : na) };
    int64_t bd[2] = { 1, (int64_t)(nb == j->r.n ? hi - lo : nb) };
    int64_t yd[2] = { (int64_t)((hi - lo) / (j->bvec ? j->bvec : hi - lo)), (int64_t)(j->bvec ? j->bvec : hi - lo) };
    const float *a = fin(c, 0) + (na == j->r.n ? lo : 0), *b = fin(c, 1) + (nb == j->r.n ? lo : 0);
    if (na == j->r.n) { ad[0] = yd[0]; ad[1] = yd[1]; }
    if (nb == j->r.n) { bd[0] = yd[0]; bd[1] = yd[1]; }
    kern_binary((EwBinary)op_info[c->n->op].ew, a, ad, 2, b, bd, 2, fout(c) + lo, yd, 2);
}

/* The common large cases (same sizes, a scalar, a bias vector over rows) are split into
 * ranges; anything else runs whole. */
static bool split_binary(const KCall *c)
{
    size_t ny = numel(&c->n->shape), na = numel(ishape(c, 0)), nb = numel(ishape(c, 1));
    size_t small = na == ny ? nb : nb == ny ? na : 0;
    if (small == 0 || (small > 1 && small != ny)) {
        /* a trailing vector: the last dims of y must equal the small side's */
        const Shape *v = na == ny ? ishape(c, 1) : ishape(c, 0), *y = &c->n->shape;
        if (small == 0 || v->rank > y->rank) return false;
        int lead = 0;
        while (lead < v->rank && v->d[lead].v == 1) lead++;
        for (int i = lead; i < v->rank; i++)
            if (v->d[i].v != y->d[y->rank - v->rank + i].v) return false;
    }
    ElemJob j = { c, ranges(c, ny, small > 1 && small != ny ? small : 16), small > 1 && small != ny ? small : 0 };
    if (j.r.parts < 2) return false;
    pool_run(c->pool, j.r.parts, binary_part, &j);
    return true;
}

static int k_binary(const KCall *c)
{
    if (split_binary(c)) return 0;
    const Shape *a = ishape(c, 0), *b = ishape(c, 1), *y = &c->n->shape;
    int64_t ad[MAX_RANK], bd[MAX_RANK], yd[MAX_RANK];
    dims64(a, ad);
    dims64(b, bd);
    dims64(y, yd);
    kern_binary((EwBinary)op_info[c->n->op].ew, fin(c, 0), ad, a->rank, fin(c, 1), bd, b->rank, fout(c), yd, y->rank);
    return 0;
}

/* unary functions and their gradients: contiguous ranges */
static int k_unary(const KCall *c)
{
    ElemJob j = { c, ranges(c, numel(&c->n->shape), 16), 0 };
    pool_run(c->pool, j.r.parts, unary_part, &j);
    return 0;
}

static int k_unary_grad(const KCall *c) { return k_unary(c); }

/* softmax and log-softmax along their axis: rows (outer x inner positions) are
 * independent, so blocks of the outer axes go to different threads. */
typedef struct AxisJob {
    const KCall *c;
    size_t outer, len, inner;
    Range r;   /* over outer */
} AxisJob;

static void axis_dims(const Node *n, const Shape *s, size_t *outer, size_t *len, size_t *inner);

static void softmax_part(void *arg, int part, int worker)
{
    (void)worker;
    const AxisJob *j = arg;
    const KCall *c = j->c;
    size_t lo, hi, blk = j->len * j->inner;
    range_of(&j->r, part, &lo, &hi);
    bool is_log = c->n->op == OP_LOG_SOFTMAX || c->n->op == OP_LOG_SOFTMAX_GRAD;
    if (c->n->op == OP_SOFTMAX || c->n->op == OP_LOG_SOFTMAX)
        kern_softmax_axis(fin(c, 0) + lo * blk, fout(c) + lo * blk, hi - lo, j->len, j->inner, is_log);
    else
        kern_softmax_axis_grad(fin(c, 0) + lo * blk, fin(c, 1) + lo * blk, fout(c) + lo * blk, hi - lo, j->len, j->inner,
                               is_log);
}

/* The op's [outer, len, inner] over the pool, in blocks of whole outer rows. */
static int run_axis(const KCall *c, const Shape *s, void (*part)(void *, int, int))
{
    AxisJob j = { .c = c };
    axis_dims(c->n, s, &j.outer, &j.len, &j.inner);
    j.r = row_ranges(c, j.outer, j.len * j.inner);
    pool_run(c->pool, j.r.parts, part, &j);
    return 0;
}

static int k_softmax(const KCall *c) { return run_axis(c, &c->n->shape, softmax_part); }
static int k_softmax_grad(const KCall *c) { return run_axis(c, &c->n->shape, softmax_part); }

static KPool pool_params(const Node *n, const Shape *x, const Shape *y)
{
    KPool p = {
        .n = x->d[0].v, .h = x->d[1].v, .w = x->d[2].v, .c = x->d[3].v,
        .kh = n->a.win.kh, .kw = n->a.win.kw, .sh = n->a.win.sh, .sw = n->a.win.sw,
        .pt = n->a.win.pt, .pl = n->a.win.pl, .oh = y->d[1].v, .ow = y->d[2].v,
    };
    return p;
}

/* Pooling and its gradients: images are independent, so blocks of images go to
 * different threads. */
typedef struct PoolJob {
    const KCall *c;
    OpKind op;          /* the kernel: the node's op, or MAXPOOL inside conv2d_maxpool */
    const float *x;     /* input 0 */
    KPool p;
    Range r;            /* over images */
    size_t idx_at;      /* a scatter's index: its place in input 0 (past y's bits in a conv2d_maxpool_argmax) */
} PoolJob;

static void pool_part(void *arg, int part, int worker)
{
    (void)worker;
    const PoolJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    KPool p = j->p;
    p.n = (int64_t)(hi - lo);
    size_t xs = (size_t)(p.h * p.w * p.c) * lo, ys = (size_t)(p.oh * p.ow * p.c) * lo;
    const KCall *c = j->c;
    const float *x0 = j->x;
    switch (j->op) {
    case OP_MAXPOOL: kern_maxpool(c->env->isa, &p, x0 + xs, fout(c) + ys); break;
    case OP_CONV2D_MAXPOOL_ARGMAX:   /* the two ops apart: y, then the index after it */
        kern_maxpool(c->env->isa, &p, x0 + xs, fout(c) + ys);
        kern_maxpool_argmax(c->env->isa, &p, x0 + xs, (int32_t *)c->out + (size_t)(j->p.n * p.oh * p.ow * p.c) + ys);
        break;
    case OP_AVGPOOL: kern_avgpool(&p, x0 + xs, fout(c) + ys); break;
    case OP_MAXPOOL_GRAD: kern_maxpool_grad(&p, x0 + xs, fin(c, 1) + ys, fin(c, 2) + ys, fout(c) + xs); break;
    case OP_MAXPOOL_ARGMAX: kern_maxpool_argmax(c->env->isa, &p, x0 + xs, (int32_t *)c->out + ys); break;
    case OP_MAXPOOL_GATHER:
        kern_maxpool_gather(c->env->isa, &p, x0 + xs, (const int32_t *)c->in[1] + ys, fout(c) + ys);
        break;
    case OP_MAXPOOL_SCATTER:
        kern_maxpool_scatter(c->env->isa, &p, (const int32_t *)c->in[0] + j->idx_at + ys, NULL, fin(c, 1) + ys,
                             fout(c) + xs);
        break;
    case OP_MAXPOOL_SCATTER_RELU:
        kern_maxpool_scatter(c->env->isa, &p, (const int32_t *)c->in[0] + j->idx_at + ys, fin(c, 1) + ys, fin(c, 2) + ys,
                             fout(c) + xs);
        break;
    case OP_MAXPOOL_GRAD_RELU: kern_maxpool_grad_relu(&p, x0 + xs, fin(c, 1) + ys, fin(c, 2) + ys, fout(c) + xs); break;
    default: kern_avgpool_grad(&p, x0 + ys, fout(c) + xs); break;
    }
}

/* Pooling kernel `op` over blocks of images, input 0 at x. */
static int run_images_at(const KCall *c, KPool p, OpKind op, const float *x, size_t idx_at)
{
    PoolJob j = { c, op, x, p, row_ranges(c, (size_t)p.n, (size_t)(p.h * p.w * p.c)), idx_at };   /* in images */
    pool_run(c->pool, j.r.parts, pool_part, &j);
    return 0;
}

static int run_images(const KCall *c, KPool p, OpKind op, const float *x) { return run_images_at(c, p, op, x, 0); }

static int run_pool_job(const KCall *c, KPool p) { return run_images(c, p, c->n->op, fin(c, 0)); }

static int k_pool(const KCall *c) { return run_pool_job(c, pool_params(c->n, ishape(c, 0), &c->n->shape)); }
static int k_maxpool_grad(const KCall *c) { return run_pool_job(c, pool_params(c->n, ishape(c, 0), ishape(c, 1))); }
/* The index is a maxpool_argmax's, or the second half of a conv2d_maxpool_argmax's
 * [2, N, OH, OW, C] (its y, the first half, is then input 1 of maxpool_scatter_relu). */
static int k_maxpool_scatter(const KCall *c)
{
    const Shape *i = ishape(c, 0);
    Shape y = *i;
    size_t at = 0;
    if (i->rank == 5) {
        y.rank = 4;
        memmove(y.d, i->d + 1, 4 * sizeof *y.d);
        at = numel(&y);
    }
    return run_images_at(c, pool_params(c->n, &c->n->shape, &y), c->n->op, fin(c, 0), at);
}
static int k_avgpool_grad(const KCall *c) { return run_pool_job(c, pool_params(c->n, &c->n->shape, ishape(c, 0))); }

static int k_gap(const KCall *c)
{
    const Shape *x = ishape(c, 0);
    kern_global_avgpool(fin(c, 0), fout(c), (size_t)x->d[0].v, (size_t)(x->d[1].v * x->d[2].v), (size_t)x->d[3].v);
    return 0;
}

static int k_gap_grad(const KCall *c)
{
    const Shape *x = &c->n->shape;
    kern_global_avgpool_grad(fin(c, 0), fout(c), (size_t)x->d[0].v, (size_t)(x->d[1].v * x->d[2].v), (size_t)x->d[3].v);
    return 0;
}

static int k_reshape(const KCall *c)
{
    if (c->out != c->in[0]) memcpy(c->out, c->in[0], node_bytes(c->n));
    return 0;
}

/* concat/slice along `axis`: outer = product of dims before it, inner = after it */
static void outer_inner(const Shape *s, int axis, size_t *outer, size_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= (size_t)s->d[i].v;
    for (int i = axis + 1; i < s->rank; i++) *inner *= (size_t)s->d[i].v;
}

static int k_concat(const KCall *c)
{
    int axis = c->n->a.concat.axis, nx = c->n->nin;
    int64_t lens[64];
    const float *xs[64];
    if (nx > 64) return -1;
    for (int i = 0; i < nx; i++) {
        lens[i] = ishape(c, i)->d[axis].v;
        xs[i] = fin(c, i);
    }
    size_t outer, inner;
    outer_inner(&c->n->shape, axis, &outer, &inner);
    kern_concat(xs, lens, nx, outer, inner, fout(c));
    return 0;
}

static int k_slice(const KCall *c)
{
    const Shape *y = ishape(c, 0);
    int axis = c->n->a.slice.axis;
    size_t outer, inner;
    outer_inner(y, axis, &outer, &inner);
    kern_slice(fin(c, 0), y->d[axis].v, c->n->a.slice.off, c->n->a.slice.len, outer, inner, fout(c));
    return 0;
}

/* A different mask every step, the same for the same (seed, step, dropout node). */
static uint64_t step_seed(const StepEnv *e) { return rng_mix(e->seed ^ rng_mix((uint64_t)e->step + 0x51ED270B27A5A1ull)); }

/* dropout and its gradient (the same mask): ranges over the pool, each placed by its
 * first element's index so the mask is the whole tensor's. */
static void dropout_part(void *arg, int part, int worker)
{
    (void)worker;
    const ElemJob *j = arg;
    const KCall *c = j->c;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    uint64_t first = (uint64_t)c->env->shard * j->r.n + lo;
    if (c->n->op == OP_DROPOUT)
        kern_dropout(fin(c, 0) + lo, fout(c) + lo, hi - lo, c->n->a.dropout.rate, step_seed(c->env),
                     (uint64_t)c->n->a.dropout.stream, first);
    else
        kern_dropout_grad(fin(c, 0) + lo, fout(c) + lo, hi - lo, c->n->a.dropout.rate, step_seed(c->env),
                          (uint64_t)c->n->a.dropout.stream, first);
}

static int k_dropout(const KCall *c)
{
    size_t n = numel(&c->n->shape);
    if (!c->env->training || c->n->a.dropout.rate == 0) {
        if (c->out != c->in[0]) memcpy(c->out, c->in[0], n * 4);
        return 0;
    }
    ElemJob j = { c, ranges(c, n, 16), 0 };
    pool_run(c->pool, j.r.parts, dropout_part, &j);
    return 0;
}

/* A run-time error at the node's .net line: "FILE:LINE:COL: OP: MESSAGE". */
static int run_error(const KCall *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_error(const KCall *c, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = 0, col = 0;
    if (c->g->src) diag_line_col(c->g->src, c->n->loc.start, &line, &col);
    diag_plain(c->env->d, "%s:%d:%d: %s: %s", c->g->src ? c->g->src->name : "?", line, col, op_name(c->n->op), msg);
    return -1;
}

static int bad_label(const KCall *c, int rc)
{
    int64_t row = -1 - rc;
    const int32_t *labels = (const int32_t *)c->in[1];
    const Shape *l = ishape(c, 0);
    return run_error(c, "label %d in row %lld is outside [0, %lld)", labels[row], (long long)row,
                     (long long)l->d[l->rank - 1].v);
}

/* logits [..., classes]: the rows of every leading axis (a sequence's tokens too) */
static void class_rows(const KCall *c, size_t *rows, size_t *cols)
{
    const Shape *l = ishape(c, 0);
    *cols = (size_t)l->d[l->rank - 1].v;
    *rows = *cols ? numel(l) / *cols : 0;
}

static int k_cross_entropy(const KCall *c)
{
    size_t rows, cols;
    class_rows(c, &rows, &cols);
    int rc = kern_cross_entropy_ls(fin(c, 0), (const int32_t *)c->in[1], rows, cols, c->n->a.loss.smoothing, fout(c));
    return rc ? bad_label(c, rc) : 0;
}

/* The gradient's rows over the pool, as an elementwise op's (charlm's 1024 x 256 logits:
 * 0.2 ms on one thread while the other waited); the first bad label is reported. */
typedef struct CeJob {
    const KCall *c;
    Range r;
    size_t cols;
    int rc[POOL_MAX_THREADS];
} CeJob;

static void ce_grad_part(void *arg, int part, int worker)
{
    (void)worker;
    CeJob *j = arg;
    const KCall *c = j->c;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    j->rc[part] = kern_cross_entropy_ls_grad_rows(fin(c, 0), (const int32_t *)c->in[1], fin(c, 2)[0], fout(c), lo, hi,
                                                  j->r.n, j->cols, c->n->a.loss.smoothing);
}

static int k_cross_entropy_grad(const KCall *c)
{
    size_t rows, cols;
    class_rows(c, &rows, &cols);
    CeJob j = { .c = c, .r = row_ranges(c, rows, cols), .cols = cols };
    pool_run(c->pool, j.r.parts, ce_grad_part, &j);
    for (int p = 0; p < j.r.parts; p++)
        if (j.rc[p]) return bad_label(c, j.rc[p]);
    return 0;
}

static int k_accuracy(const KCall *c)
{
    size_t rows, cols;
    class_rows(c, &rows, &cols);
    size_t ok = kern_count_correct(fin(c, 0), (const int32_t *)c->in[1], rows, cols);
    fout(c)[0] = rows ? (float)ok / (float)rows : 0.0f;
    return 0;
}

static int k_mse(const KCall *c)
{
    kern_mse(fin(c, 0), fin(c, 1), numel(ishape(c, 0)), fout(c));
    return 0;
}

static int k_mse_grad(const KCall *c)
{
    kern_mse_grad(fin(c, 0), fin(c, 1), fin(c, 2)[0], fout(c), numel(ishape(c, 0)));
    return 0;
}

/* sum_to of [rows, cols] onto its last dims [cols] (a bias gradient) reads a large
 * tensor to write a few numbers: the rows are cut into SUMTO_PARTS blocks, summed in
 * double on the pool, and the blocks' sums added in block order.  The blocks do not
 * depend on the thread count, so neither do the bits. */

typedef struct SumToJob {
    const float *x;
    size_t rows, cols;
    double (*part)[SUMTO_MAX_COLS];
} SumToJob;

static void sum_to_part(void *arg, int part, int worker)
{
    (void)worker;
    const SumToJob *j = arg;
    size_t lo = j->rows * (size_t)part / SUMTO_PARTS, hi = j->rows * (size_t)(part + 1) / SUMTO_PARTS;
    kern_colsum_d(j->x + lo * j->cols, hi - lo, j->cols, j->part[part]);
}

/* Is y (after its leading 1s) the last dims of x, with more elements in x? */
static bool trailing_dims(const Shape *y, const Shape *x)
{
    int lead = 0;
    while (lead < y->rank && y->d[lead].v == 1) lead++;
    if (y->rank - lead > x->rank || numel(x) <= numel(y)) return false;
    for (int i = lead; i < y->rank; i++)
        if (y->d[i].v != x->d[x->rank - y->rank + i].v) return false;
    return true;
}

static bool split_sum_to(const KCall *c)
{
    const Shape *x = ishape(c, 0), *y = &c->n->shape;
    size_t cols = numel(y);
    if (cols == 0 || cols > SUMTO_MAX_COLS || numel(x) < SPLIT_MIN || !trailing_dims(y, x)) return false;
    double part[SUMTO_PARTS][SUMTO_MAX_COLS];
    SumToJob j = { fin(c, 0), numel(x) / cols, cols, part };
    pool_run(c->pool, SUMTO_PARTS, sum_to_part, &j);
    for (size_t k = 0; k < cols; k++) {
        double s = part[0][k];
        for (int p = 1; p < SUMTO_PARTS; p++) s += part[p][k];
        fout(c)[k] = (float)s;
    }
    return true;
}

/* sum_to_pooled: split_sum_to's parts (or kern_colsum's one chain) of the scatter's
 * pixels, summed by kern_maxpool_scatter_colsum_d two parts a task (it runs two parts'
 * chains together), the same bits. */
typedef struct PooledSumJob {
    KIsa isa;
    const KPool *q;
    const int32_t *idx;
    const float *mask, *dy;
    int64_t pixels;
    int parts;
    double *part;   /* part t's sums at t * cols */
    int64_t cols;
} PooledSumJob;

static void pooled_sum_parts(void *arg, int task, int worker)
{
    (void)worker;
    const PooledSumJob *j = arg;
    const int t0 = 2 * task, nt = j->parts - t0 < 2 ? j->parts - t0 : 2;
    int64_t m[3];
    for (int t = 0; t <= nt; t++)
        m[t] = j->pixels * (t0 + t) / j->parts;
    kern_maxpool_scatter_colsum_d(j->isa, j->q, j->idx, j->mask, j->dy, m, nt, j->part + t0 * j->cols);
}

static int k_sum_to_pooled(const KCall *c)
{
    KConv p;
    KPool q;
    convpool_params(c->g, pooled_of(c->g, c->n), &p, &q);
    const size_t cols = (size_t)p.f, pixels = (size_t)(p.n * p.oh * p.ow);
    double part[SUMTO_PARTS * SUMTO_MAX_COLS];
    /* the dense sum_to's path: split_sum_to's parts, or one chain */
    PooledSumJob j = { c->env->isa, &q, (const int32_t *)c->in[0] + q.n * q.oh * q.ow * q.c,
                       c->n->a.convpool.pool.act >= 0 ? fin(c, 0) : NULL, fin(c, 1), (int64_t)pixels,
                       cols <= SUMTO_MAX_COLS && pixels * cols >= SPLIT_MIN && pixels > 1 ? SUMTO_PARTS : 1, part,
                       (int64_t)cols };
    if (!kern_maxpool_scatter_sum_ok(&q) || cols > SUMTO_MAX_COLS) {   /* the scatter, then sum_to's path */
        float *dense = c->scratch;
        int64_t xd[4] = { p.n, p.oh, p.ow, p.f }, yd[1] = { p.f };
        kern_maxpool_scatter(c->env->isa, &q, j.idx, j.mask, j.dy, dense);
        kern_sum_to(dense, xd, 4, fout(c), yd, 1);
        return 0;
    }
    pool_run(c->pool, (j.parts + 1) / 2, pooled_sum_parts, &j);
    for (size_t k = 0; k < cols; k++) {
        double s = part[k];
        for (int t = 1; t < j.parts; t++) s += part[t * cols + k];
        fout(c)[k] = (float)s;
    }
    return 0;
}

static int k_sum_to(const KCall *c)
{
    if (split_sum_to(c)) return 0;
    const Shape *x = ishape(c, 0), *y = &c->n->shape;
    int64_t xd[MAX_RANK], yd[MAX_RANK];
    dims64(x, xd);
    dims64(y, yd);
    kern_sum_to(fin(c, 0), xd, x->rank, fout(c), yd, y->rank);
    return 0;
}

static_assert(OPTIM_MAX_STATE == KOPTIM_MAX_STATE, "a parameter's optimizer state: the graph's and the kernels' bound");

/* The optimizer of an update of kind `op` (an optimizer's *_UPDATE) at this step, its
 * gradient multiplied by scale (clipping).  Weight decay is L2 except AdamW's. */
static KOptim optim_of(const StepEnv *e, OpKind op, float scale)
{
    KOptim o = { .kind = KOPT_RMSPROP, .lr = e->lr, .mu = e->momentum, .nesterov = e->nesterov, .beta1 = e->beta1,
                 .beta2 = e->beta2, .rho = e->rho, .centered = e->centered, .eps = e->eps, .t = e->step + 1,
                 .scale = scale, .l2 = e->weight_decay, .decay = 1.0f, .isa = e->isa };
    switch (op) {
    case OP_SGD_UPDATE: o.kind = KOPT_SGD; break;
    case OP_MOMENTUM_UPDATE: o.kind = KOPT_MOMENTUM; break;
    case OP_ADAM_UPDATE: o.kind = KOPT_ADAM; break;
    case OP_ADAMW_UPDATE:
        o.kind = KOPT_ADAM;
        o.l2 = 0.0f;
        o.decay = (float)(1.0 - (double)e->lr * (double)e->weight_decay);
        break;
    default: break;
    }
    return o;
}

/* An update's clip scale: its input after the (param, grad) pairs, if any. */
static float clip_of(const KCall *c) { return c->n->nin % 2 ? fin(c, c->n->nin - 1)[0] : 1.0f; }

/* Elements [lo, hi) of var's update (the kernels are elementwise), st its state vars
 * (-1 past the last), g those elements' gradient (g[0] is element lo's). */
static void update_range(const StepEnv *e, const KOptim *o, int var, const int *st, const float *g, size_t lo,
                         size_t hi)
{
    float *s[KOPTIM_MAX_STATE];
    for (int k = 0; k < KOPTIM_MAX_STATE; k++) s[k] = st[k] >= 0 ? e->w->data[st[k]] + lo : NULL;
    kern_optim(o, e->w->data[var] + lo, s, g, hi - lo);
}

typedef struct UpdateJob {
    const KCall *c;
    Range r;
    KOptim o;
} UpdateJob;

static void update_part(void *arg, int part, int worker)
{
    (void)worker;
    const UpdateJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    update_range(j->c->env, &j->o, j->c->n->a.update.var, j->c->n->a.update.state, fin(j->c, 1) + lo, lo, hi);
}

/* One parameter's update: a large one split into ranges over the pool. */
static int k_update(const KCall *c)
{
    UpdateJob j = { c, ranges(c, numel(ishape(c, 1)), 16), optim_of(c->env, c->n->op, 1.0f) };
    j.o.scale = clip_of(c);
    pool_run(c->pool, j.r.parts, update_part, &j);
    fout(c)[0] = 0;
    return 0;
}

/* update_all: the parameters are independent, so they are spread over the pool, one
 * task per parameter; each is updated exactly as its own update op would. */
static void update_all_part(void *arg, int task, int worker)
{
    (void)worker;
    const UpdateJob *j = arg;
    const KCall *c = j->c;
    int var = c->g->nodes[c->n->in[2 * task]].a.param.var, st[OPTIM_MAX_STATE];
    graph_state_vars(c->g, var, st);
    update_range(c->env, &j->o, var, st, fin(c, 2 * task + 1), 0, numel(ishape(c, 2 * task + 1)));
}

static int k_update_all(const KCall *c)
{
    UpdateJob j = { c, { 0, 1, 1 }, optim_of(c->env, (OpKind)c->n->a.update.kind, 1.0f) };
    j.o.scale = clip_of(c);
    pool_run(c->pool, c->n->nin / 2, update_all_part, &j);
    fout(c)[0] = 0;
    return 0;
}

/* clip_scale: the sum of the squares of every gradient, in blocks of CLIP_BLOCK
 * elements of one gradient each, spread over the pool, each block's sum into the node's
 * scratch and those added in block order: the bits do not depend on the thread count. */
enum { CLIP_BLOCK = 1 << 16 };

static size_t clip_blocks(const Graph *g, const Node *n, int k)
{
    return (numel(&g->nodes[n->in[k]].shape) + CLIP_BLOCK - 1) / CLIP_BLOCK;
}

static size_t clip_tasks(const Graph *g, const Node *n)
{
    size_t t = 0;
    for (int k = 0; k < n->nin; k++) t += clip_blocks(g, n, k);
    return t;
}

static void clip_part(void *arg, int task, int worker)
{
    (void)worker;
    const KCall *c = arg;
    size_t b = (size_t)task;
    int k = 0;
    while (b >= clip_blocks(c->g, c->n, k)) b -= clip_blocks(c->g, c->n, k++);
    size_t len = numel(ishape(c, k)), lo = b * CLIP_BLOCK, hi = lo + CLIP_BLOCK < len ? lo + CLIP_BLOCK : len;
    ((double *)c->scratch)[task] = kern_sumsq(fin(c, k) + lo, hi - lo);
}

static int k_clip_scale(const KCall *c)
{
    size_t tasks = clip_tasks(c->g, c->n);
    pool_run(c->pool, (int)tasks, clip_part, (void *)c);
    double sum = 0;
    for (size_t t = 0; t < tasks; t++) sum += ((const double *)c->scratch)[t];
    fout(c)[0] = kern_clip_factor(sum, c->n->a.clip.max_norm);
    return 0;
}

/* The optimizer updates fused into their gradient's GEMM (kernels/update.c): the
 * gradient op(a) op(b) of matmul_update(w, a, b) is made inside the update, so it never
 * exists whole (SGD: one GEMM into w, alpha -lr, beta 1 - lr weight_decay; momentum,
 * and Adam, AdamW, RMSprop by panels: their kernels); matmul_grad_update(x, dy, w) is a
 * dense layer's backward with w's update.  Neither is ever clipped (graph/fuse.c). */
static size_t update_scratch(const Graph *g, const Node *n, int threads)
{
    const Shape *w = &g->nodes[n->in[n->op == OP_MATMUL_UPDATE ? 0 : 2]].shape;
    if (n->op == OP_MATMUL_GRAD_UPDATE)
        return kern_dense_backward_scratch((size_t)n->shape.d[0].v, (size_t)n->shape.d[1].v,
                                           n->a.update.kind == OP_SGD_UPDATE, threads);
    if (n->a.update.kind == OP_SGD_UPDATE || n->a.update.kind == OP_MOMENTUM_UPDATE) return 0;
    const Shape *a = &g->nodes[n->in[1]].shape;
    return kern_gemm_optim_scratch(n->a.update.ta, n->a.update.tb, (size_t)w->d[0].v, (size_t)w->d[1].v,
                                   (size_t)a->d[n->a.update.ta ? 0 : 1].v, threads);
}

static int fused_with(const KCall *c, OpKind kind)
{
    if (kind == OP_MOMENTUM_UPDATE && c->env->nesterov)
        diag_plain(c->env->d, "internal error: %s fused with a Nesterov momentum update", op_name(c->n->op));
    else
        diag_plain(c->env->d, "internal error: %s fused with %s", op_name(c->n->op), op_name(kind));
    return -1;
}

static int k_matmul_update(const KCall *c)
{
    const Node *n = c->n;
    const StepEnv *e = c->env;
    const Shape *w = ishape(c, 0), *a = ishape(c, 1);
    bool ta = n->a.update.ta, tb = n->a.update.tb;
    size_t M = (size_t)w->d[0].v, N = (size_t)w->d[1].v, K = (size_t)a->d[ta ? 0 : 1].v;
    float *wd = e->w->data[n->a.update.var], *st[KOPTIM_MAX_STATE];
    for (int k = 0; k < KOPTIM_MAX_STATE; k++) st[k] = n->a.update.state[k] >= 0 ? e->w->data[n->a.update.state[k]] : NULL;
    KOptim o = optim_of(e, (OpKind)n->a.update.kind, 1.0f);
    switch (n->a.update.kind) {
    case OP_SGD_UPDATE:   /* w = (1 - lr l2) w - lr op(a) op(b) */
        kern_gemm(c->pool, e->isa, ta, tb, M, N, K, -e->lr, fin(c, 1), fin(c, 2), 1.0f - e->lr * e->weight_decay, wd);
        break;
    case OP_MOMENTUM_UPDATE:
        if (e->nesterov) return fused_with(c, OP_MOMENTUM_UPDATE);
        kern_gemm_momentum(c->pool, e->isa, ta, tb, M, N, K, fin(c, 1), fin(c, 2), wd, st[0], e->lr, e->momentum,
                           e->weight_decay);
        break;
    case OP_ADAM_UPDATE: case OP_ADAMW_UPDATE: case OP_RMSPROP_UPDATE:
        kern_gemm_optim(c->pool, ta, tb, M, N, K, fin(c, 1), fin(c, 2), &o, wd, st, c->scratch);
        break;
    default:
        return fused_with(c, (OpKind)n->a.update.kind);
    }
    fout(c)[0] = 0;
    return 0;
}

static int k_matmul_grad_update(const KCall *c)
{
    const Node *n = c->n;
    const StepEnv *e = c->env;
    const Shape *x = ishape(c, 0), *dy = ishape(c, 1);
    size_t B = (size_t)x->d[0].v, K = (size_t)x->d[1].v, N = (size_t)dy->d[1].v;
    float *w = e->w->data[n->a.update.var];
    if (n->a.update.kind == OP_SGD_UPDATE) {
        kern_dense_backward_sgd(c->pool, e->isa, fin(c, 0), fin(c, 1), w, fout(c), B, K, N, e->lr, e->weight_decay, c->scratch);
        return 0;
    }
    if (n->a.update.kind != OP_MOMENTUM_UPDATE || e->nesterov) return fused_with(c, (OpKind)n->a.update.kind);
    kern_dense_backward_momentum(c->pool, c->env->isa, fin(c, 0), fin(c, 1), w, e->w->data[n->a.update.state[0]], fout(c), B, K, N,
                                 e->lr, e->momentum, e->weight_decay, c->scratch);
    return 0;
}

/* fused_elemwise: the program's steps, block by block, each step the op's own kernel
 * on the block (so the same values as the ops apart); intermediates stay in a stack
 * buffer; blocks are split over the pool like any elementwise op. */
enum { EW_BLOCK = 512 };

static const float *ew_operand(const KCall *c, int arg, size_t at, float (*tmp)[EW_BLOCK])
{
    if (arg < 0) return tmp[-1 - arg];
    return numel(ishape(c, arg)) == 1 ? fin(c, arg) : fin(c, arg) + at;
}

static void ew_part(void *arg, int part, int worker)
{
    (void)worker;
    const ElemJob *j = arg;
    const KCall *c = j->c;
    const Node *n = c->n;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    float tmp[EW_MAX_STEPS][EW_BLOCK];
    for (size_t at = lo; at < hi; at += EW_BLOCK) {
        size_t len = hi - at < EW_BLOCK ? hi - at : EW_BLOCK;
        for (int s = 0; s < n->a.ew.nstep; s++) {
            const EwStep *st = &n->a.ew.step[s];
            const float *a = ew_operand(c, st->arg[0], at, tmp);
            float *dst = s == n->a.ew.nstep - 1 ? fout(c) + at : tmp[s];
            if (op_has((OpKind)st->op, OPT_BINARY)) {
                const float *b = ew_operand(c, st->arg[1], at, tmp);
                bool as = st->arg[0] >= 0 && numel(ishape(c, st->arg[0])) == 1;
                bool bs = st->arg[1] >= 0 && numel(ishape(c, st->arg[1])) == 1;
                int64_t ad[2] = { 1, as ? 1 : (int64_t)len }, bd[2] = { 1, bs ? 1 : (int64_t)len }, yd[2] = { 1, (int64_t)len };
                kern_binary((EwBinary)op_info[st->op].ew, a, ad, 2, b, bd, 2, dst, yd, 2);
            } else if (st->op == OP_UNARY_GRAD) {
                kern_unary_grad(ew_of(st->of), st->p, a, ew_operand(c, st->arg[1], at, tmp), dst, len);
            } else if (st->op == OP_DROPOUT || st->op == OP_DROPOUT_GRAD) {
                if (!c->env->training || st->p == 0) {
                    if (dst != a) memcpy(dst, a, len * sizeof *dst);
                } else {
                    kern_dropout(a, dst, len, st->p, step_seed(c->env), (uint64_t)st->stream,
                                 (uint64_t)c->env->shard * j->r.n + at);
                }
            } else {
                kern_unary(ew_of(st->op), st->p, a, dst, len);
            }
        }
    }
}

static int k_fused_elemwise(const KCall *c)
{
    ElemJob j = { c, ranges(c, numel(&c->n->shape), EW_BLOCK), 0 };
    pool_run(c->pool, j.r.parts, ew_part, &j);
    return 0;
}

/* allreduce: packs the bucket's gradients into its buffer and starts their sum over
 * the ranks (exec/comm.c); the wait divides the sum by the number of ranks.  With one
 * process (no Comm) the wait is a copy, so the graph computes what it would without
 * the allreduce, bit for bit. */
static int k_allreduce(const KCall *c)
{
    float *y = fout(c);
    size_t off = 0;
    for (int k = 0; k < c->n->nin; k++) {
        size_t len = numel(ishape(c, k));
        memcpy(y + off, fin(c, k), len * sizeof *y);
        off += len;
    }
    comm_start(c->env->comm, c->n->a.allreduce.bucket, y, off, c->env->step);
    return 0;
}

static int k_allreduce_wait(const KCall *c)
{
    size_t len = numel(&c->n->shape);
    comm_wait(c->env->comm, c->n->a.allreduce.bucket);
    int ranks = comm_size(c->env->comm);
    if (ranks > 1) kern_scale(fin(c, 0), 1.0f / (float)ranks, fout(c), len);
    else if (c->out != c->in[0]) memcpy(c->out, c->in[0], len * sizeof(float));
    return 0;
}

/* ---- the transformer ops (issue 14) ---------------------------------------------- */

/* [outer, len, inner] of shape s around the node's run of axes (shape rules checked it). */
static void axis_dims(const Node *n, const Shape *s, size_t *outer, size_t *len, size_t *inner)
{
    int first, count;
    node_axes(n, s->rank, &first, &count);
    *outer = *len = *inner = 1;
    for (int i = 0; i < s->rank; i++) {
        size_t d = (size_t)s->d[i].v;
        if (i < first) *outer *= d;
        else if (i < first + count) *len *= d;
        else *inner *= d;
    }
}

typedef struct TransposeJob {
    const KCall *c;
    int64_t dims[MAX_RANK];
    Range r;   /* over the output's first axis */
} TransposeJob;

static void transpose_part(void *arg, int part, int worker)
{
    (void)worker;
    const TransposeJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    kern_transpose(j->c->in[0], j->dims, ishape(j->c, 0)->rank, j->c->n->a.transpose.perm, j->c->out, lo, hi);
}

static int k_transpose(const KCall *c)
{
    const Shape *x = ishape(c, 0), *y = &c->n->shape;
    TransposeJob j = { .c = c };
    dims64(x, j.dims);
    size_t rows = y->rank ? (size_t)y->d[0].v : 1, n = numel(y);
    j.r = row_ranges(c, rows, rows ? n / rows : 1);
    pool_run(c->pool, j.r.parts, transpose_part, &j);
    return 0;
}

static int k_batch_matmul(const KCall *c)
{
    const Shape *a = ishape(c, 0), *y = &c->n->shape;
    int r = y->rank;
    bool ta = c->n->a.matmul.ta, tb = c->n->a.matmul.tb;
    size_t M = (size_t)y->d[r - 2].v, N = (size_t)y->d[r - 1].v, K = (size_t)a->d[r - (ta ? 2 : 1)].v;
    size_t batch = M && N ? numel(y) / (M * N) : 0;
    kern_gemm_batch(c->pool, c->env->isa, ta, tb, batch, M, N, K, 1.0f, fin(c, 0), fin(c, 1), 0.0f, fout(c));
    return 0;
}

static int k_reduce(const KCall *c)
{
    size_t outer, len, inner;
    axis_dims(c->n, ishape(c, 0), &outer, &len, &inner);
    if (c->n->op == OP_REDUCE_MAX) kern_reduce_max(fin(c, 0), outer, len, inner, fout(c));
    else kern_reduce_sum(fin(c, 0), outer, len, inner, c->n->op == OP_REDUCE_MEAN ? 1.0f / (float)len : 1.0f, fout(c));
    return 0;
}

static int k_expand(const KCall *c)
{
    size_t outer, len, inner;
    axis_dims(c->n, &c->n->shape, &outer, &len, &inner);
    kern_expand(fin(c, 0), outer, len, inner, c->n->a.axes.mean ? 1.0f / (float)len : 1.0f, fout(c));
    return 0;
}

static int k_reduce_max_grad(const KCall *c)
{
    size_t outer, len, inner;
    axis_dims(c->n, &c->n->shape, &outer, &len, &inner);
    kern_reduce_max_grad(fin(c, 0), fin(c, 1), fin(c, 2), outer, len, inner, fout(c));
    return 0;
}

static int k_where(const KCall *c)
{
    int64_t d[4][MAX_RANK];
    const Shape *s[4] = { ishape(c, 0), ishape(c, 1), ishape(c, 2), &c->n->shape };
    for (int k = 0; k < 4; k++) dims64(s[k], d[k]);
    kern_where(fin(c, 0), d[0], s[0]->rank, fin(c, 1), d[1], s[1]->rank, fin(c, 2), d[2], s[2]->rank, fout(c), d[3],
               s[3]->rank);
    return 0;
}

static int k_causal_mask(const KCall *c)
{
    const Shape *y = &c->n->shape;
    size_t T = (size_t)y->d[y->rank - 2].v, S = (size_t)y->d[y->rank - 1].v;
    kern_causal_mask(fin(c, 0), fout(c), T && S ? numel(y) / (T * S) : 0, T, S, c->n->a.mask.value);
    return 0;
}

/* The fused causal softmax (forward or gradient) over the pool, in blocks of rows. */
typedef struct MaskedSoftmaxJob {
    const KCall *c;
    size_t T, S;
    Range r;   /* over the rows of the [mats * T, S] scores */
} MaskedSoftmaxJob;

static void masked_softmax_part(void *arg, int part, int worker)
{
    (void)worker;
    const MaskedSoftmaxJob *j = arg;
    const KCall *c = j->c;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    if (c->n->op == OP_SOFTMAX_CAUSAL)
        kern_softmax_causal(fin(c, 0), fout(c), lo, hi, j->T, j->S, c->n->a.mask.value);
    else
        kern_softmax_grad_causal(fin(c, 0), fin(c, 1), fout(c), lo, hi, j->T, j->S, c->n->a.mask.value);
}

static int k_masked_softmax(const KCall *c)
{
    const Shape *y = &c->n->shape;
    MaskedSoftmaxJob j = { c, (size_t)y->d[y->rank - 2].v, (size_t)y->d[y->rank - 1].v, { 0 } };
    if (j.S == 0) return 0;
    j.r = row_ranges(c, numel(y) / j.S, j.S);
    pool_run(c->pool, j.r.parts, masked_softmax_part, &j);
    return 0;
}

/* Fused attention: the (example, head) blocks in one run per thread, each thread's
 * scratch its own (a block's products are compute-bound: split from 2 blocks on). */
typedef struct AttnJob {
    const KCall *c;
    KAttn p;
    size_t blocks, per;   /* per: scratch floats per part */
    int parts;
} AttnJob;

static KAttnStep attention_step(OpKind op)
{
    return op == OP_ATTENTION ? KATTN_FUSED : op == OP_ATTENTION_PROBS ? KATTN_PROBS : op == OP_ATTENTION_OUT ? KATTN_OUT : KATTN_GRAD;
}

static size_t attention_parts(size_t blocks, int threads) { return blocks < (size_t)threads ? blocks : (size_t)threads; }

/* q's shape (attention_out: v's, its second input) */
static const Shape *attention_q(const Graph *g, const Node *n) { return &g->nodes[n->in[n->op == OP_ATTENTION_OUT]].shape; }

static size_t attention_scratch(const Graph *g, const Node *n, int threads)
{
    const Shape *q = attention_q(g, n);
    size_t blocks = (size_t)q->d[0].v * (size_t)q->d[2].v, parts = attention_parts(blocks, threads);
    return (parts ? parts : 1) * kern_attention_scratch(attention_step(n->op), (size_t)q->d[1].v, (size_t)q->d[3].v) *
           sizeof(float);
}

static void attention_part(void *arg, int part, int worker)
{
    (void)worker;
    const AttnJob *j = arg;
    const KCall *c = j->c;
    size_t lo = j->blocks * (size_t)part / (size_t)j->parts, hi = j->blocks * (size_t)(part + 1) / (size_t)j->parts;
    float *scratch = c->scratch ? c->scratch + (size_t)part * j->per : NULL;   /* none when a block is empty */
    size_t n = j->p.B * j->p.T * j->p.H * j->p.d;
    switch (c->n->op) {
    case OP_ATTENTION: kern_attention(&j->p, fin(c, 0), fin(c, 1), fin(c, 2), fout(c), lo, hi, scratch); break;
    case OP_ATTENTION_PROBS: kern_attention_probs(&j->p, fin(c, 0), fin(c, 1), fout(c), lo, hi, scratch); break;
    case OP_ATTENTION_OUT: kern_attention_out(&j->p, fin(c, 0), fin(c, 1), fout(c), lo, hi); break;
    default:
        kern_attention_grad(&j->p, fin(c, 0), fin(c, 1), fin(c, 2), fin(c, 3), fin(c, 4), fout(c), fout(c) + n,
                            fout(c) + 2 * n, lo, hi, scratch);
        break;
    }
}

static int k_attention(const KCall *c)
{
    const Node *n = c->n;
    const Shape *q = attention_q(c->g, n);
    AttnJob j = { c, { (size_t)q->d[0].v, (size_t)q->d[1].v, (size_t)q->d[2].v, (size_t)q->d[3].v, n->a.attn.scale,
                       n->a.attn.causal, n->a.attn.value, c->env->isa }, 0, 0, 0 };
    j.blocks = j.p.B * j.p.H;
    if (j.blocks == 0 || j.p.T == 0 || j.p.d == 0) return 0;
    j.parts = (int)attention_parts(j.blocks, pool_threads(c->pool));
    j.per = kern_attention_scratch(attention_step(n->op), j.p.T, j.p.d);
    if (j.parts > 1)
        pool_run(c->pool, j.parts, attention_part, &j);
    else
        attention_part(&j, 0, 0);
    return 0;
}

static int k_softmax_causal(const KCall *c) { return k_masked_softmax(c); }
static int k_softmax_grad_causal(const KCall *c) { return k_masked_softmax(c); }

static int bad_id(const KCall *c, int rc, size_t vocab)
{
    const int32_t *ids = (const int32_t *)c->in[0];
    return run_error(c, "id %d at position %lld of the ids is outside [0, %zu)", ids[-1 - rc], (long long)(-1 - rc), vocab);
}

static int k_embedding(const KCall *c)
{
    const Shape *t = ishape(c, 1);
    size_t vocab = (size_t)t->d[0].v;
    int rc = kern_embedding((const int32_t *)c->in[0], numel(ishape(c, 0)), fin(c, 1), vocab, (size_t)t->d[1].v, fout(c));
    return rc ? bad_id(c, rc, vocab) : 0;
}

/* The table's gradient: columns to threads (each column's rows added in the ids' order,
 * so the bits do not depend on the split). */
typedef struct EmbedJob {
    const KCall *c;
    size_t vocab, dim;
    int parts, rc;
} EmbedJob;

static void embedding_grad_part(void *arg, int part, int worker)
{
    (void)worker;
    EmbedJob *j = arg;
    size_t c0 = j->dim * (size_t)part / (size_t)j->parts, c1 = j->dim * (size_t)(part + 1) / (size_t)j->parts;
    int rc = kern_embedding_grad((const int32_t *)j->c->in[0], numel(ishape(j->c, 0)), fin(j->c, 1), j->vocab, j->dim, c0, c1,
                                 fout(j->c));
    if (rc && part == 0) j->rc = rc;
}

static int k_embedding_grad(const KCall *c)
{
    const Shape *t = &c->n->shape;
    EmbedJob j = { c, (size_t)t->d[0].v, (size_t)t->d[1].v, 1, 0 };
    Range r = ranges(c, numel(ishape(c, 1)), 1);
    if (r.parts > 1 && j.dim >= 16 * (size_t)r.parts) j.parts = r.parts;
    pool_run(c->pool, j.parts, embedding_grad_part, &j);
    return j.rc ? bad_id(c, j.rc, j.vocab) : 0;
}

static void layer_norm_part(void *arg, int part, int worker)
{
    (void)worker;
    const AxisJob *j = arg;
    const KCall *c = j->c;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    size_t cols = j->len, off = lo * cols;
    if (c->n->op == OP_LAYER_NORM)
        kern_layer_norm(fin(c, 0) + off, fin(c, 1), fin(c, 2), hi - lo, cols, c->n->a.axes.eps, fout(c) + off);
    else if (c->n->op == OP_LAYER_NORM_GRAD)
        kern_layer_norm_grad(fin(c, 0) + off, fin(c, 1), fin(c, 2) + off, NULL, hi - lo, cols, c->n->a.axes.eps,
                             fout(c) + off);
    else   /* layer_norm_grad_add (res, x, gamma, dy) */
        kern_layer_norm_grad(fin(c, 1) + off, fin(c, 2), fin(c, 3) + off, fin(c, 0) + off, hi - lo, cols,
                             c->n->a.axes.eps, fout(c) + off);
}

static int k_layer_norm(const KCall *c) { return run_axis(c, ishape(c, 0), layer_norm_part); }
static int k_layer_norm_grad(const KCall *c) { return run_axis(c, ishape(c, 0), layer_norm_part); }
static int k_layer_norm_grad_add(const KCall *c) { return run_axis(c, ishape(c, 1), layer_norm_part); }

/* gamma's gradient, a sum over every row: as sum_to's, the rows cut into a fixed number
 * of blocks summed in double on the pool (each into its part of the scratch), then the
 * blocks added in order, so the bits do not depend on the thread count. */
enum { LN_PARTS = 8 };

static size_t layer_norm_scale_scratch(const Node *n) { return (size_t)LN_PARTS * (size_t)shape_numel(&n->shape) * sizeof(double); }

typedef struct LnScaleJob {
    const KCall *c;
    size_t rows, cols;
} LnScaleJob;

static void layer_norm_scale_part(void *arg, int part, int worker)
{
    (void)worker;
    const LnScaleJob *j = arg;
    double *acc = (double *)(void *)j->c->scratch + (size_t)part * j->cols;
    size_t lo = j->rows * (size_t)part / LN_PARTS, hi = j->rows * (size_t)(part + 1) / LN_PARTS;
    memset(acc, 0, j->cols * sizeof *acc);
    kern_layer_norm_grad_scale(fin(j->c, 0) + lo * j->cols, fin(j->c, 1) + lo * j->cols, hi - lo, j->cols,
                               j->c->n->a.axes.eps, acc);
}

static int k_layer_norm_grad_scale(const KCall *c)
{
    size_t cols = numel(&c->n->shape);
    LnScaleJob j = { c, cols ? numel(ishape(c, 0)) / cols : 0, cols };
    pool_run(numel(ishape(c, 0)) >= SPLIT_MIN ? c->pool : NULL, LN_PARTS, layer_norm_scale_part, &j);
    const double *acc = (const double *)(const void *)c->scratch;
    for (size_t k = 0; k < cols; k++) {
        double s = acc[k];
        for (int p = 1; p < LN_PARTS; p++) s += acc[(size_t)p * cols + k];
        fout(c)[k] = (float)s;
    }
    return 0;
}

static int k_bce(const KCall *c)
{
    kern_bce_logits(fin(c, 0), fin(c, 1), numel(ishape(c, 0)), fout(c));
    return 0;
}

static int k_bce_grad(const KCall *c)
{
    kern_bce_logits_grad(fin(c, 0), fin(c, 1), fin(c, 2)[0], numel(ishape(c, 0)), c->n->a.loss.wrt_target, fout(c));
    return 0;
}

/* slice_grad: the pieces copied side by side when they tile the axis in order (a
 * split's gradient: a concat); otherwise zeros, each piece added at its offset. */
static int k_slice_grad(const KCall *c)
{
    const Node *n = c->n;
    int axis = n->a.pieces.axis, k = n->nin;
    int64_t lens[SLICE_GRAD_MAX], at = 0;
    const float *xs[SLICE_GRAD_MAX];
    bool tiles = true;
    for (int i = 0; i < k; i++) {
        lens[i] = ishape(c, i)->d[axis].v;
        xs[i] = fin(c, i);
        tiles &= n->a.pieces.off[i] == at;
        at += lens[i];
    }
    tiles &= at == n->shape.d[axis].v;
    size_t outer, inner;
    outer_inner(&n->shape, axis, &outer, &inner);
    if (tiles) {
        kern_concat(xs, lens, k, outer, inner, fout(c));
        return 0;
    }
    kern_fill(fout(c), 0.0f, numel(&n->shape));
    for (int i = 0; i < k; i++) kern_slice_add(xs[i], n->shape.d[axis].v, n->a.pieces.off[i], lens[i], outer, inner, fout(c));
    return 0;
}

/* One kernel per op, named by its row of the op table. */
static const KernelFn kernels[OP_COUNT] = {
#define OP(e, name, arity, traits, shape, grad, kernel) [OP_##e] = k_##kernel,
#include "graph/ops.def"
#undef OP
};

bool dispatch_has_kernel(OpKind op) { return kernels[op] != NULL; }

/* --check-numerics: the first non-finite value in a node's output stops the step, with
 * the op, its .net line and the step number. */
static int check_finite(const KCall *c)
{
    const Node *n = c->n;
    /* an update's own value is a placeholder, except matmul_grad_update's (a gradient) */
    if (n->dtype != DT_F32 || ((op_info[n->op].traits & OPT_UPDATE) && n->op != OP_MATMUL_GRAD_UPDATE)) return 0;
    const float *y = c->out;
    size_t len = numel(&n->shape);
    for (size_t i = 0; i < len; i++) {
        if (isfinite(y[i])) continue;
        int line = 0, col = 0;
        if (c->g->src) diag_line_col(c->g->src, n->loc.start, &line, &col);
        char b[128];
        diag_plain(c->env->d, "%s:%d:%d: step %lld: %s produced %s at element %zu of its output %s", c->g->src ? c->g->src->name : "?",
                   line, col, (long long)c->env->step, op_name(n->op), isnan(y[i]) ? "NaN" : "Inf", i,
                   shape_str(c->g, &n->shape, b, sizeof b));
        return -1;
    }
    return 0;
}

int dispatch_kernel(const KCall *c)
{
    assert(kernels[c->n->op]);
    if (!c->env->prof_ns) return kernels[c->n->op](c);
    int64_t i = c->n - c->g->nodes;
    if (!c->env->prof_idle || pool_in_job()) {   /* a stage's member: run_stage counts the idle */
        double t0 = exec_now_ns();
        int rc = kernels[c->n->op](c);
        c->env->prof_ns[i] += exec_now_ns() - t0;
        return rc;
    }
    /* the caller is busy but while it waits in pool_run; the workers while they run shares */
    int T = pool_threads(c->pool);
    int64_t b0[POOL_MAX_THREADS], b1[POOL_MAX_THREADS], w0, w1;
    pool_stats(c->pool, b0, &w0);
    int64_t cpu0 = pool_cpu_ns(c->pool);
    double t0 = exec_now_ns();
    int rc = kernels[c->n->op](c);
    double wall = exec_now_ns() - t0;
    c->env->prof_cpu[i] += (double)(pool_cpu_ns(c->pool) - cpu0);
    pool_stats(c->pool, b1, &w1);
    double busy = wall - (double)(w1 - w0);
    for (int t = 1; t < T; t++) busy += (double)(b1[t] - b0[t]);
    c->env->prof_ns[i] += wall;
    c->env->prof_idle[i] += T * wall - busy;
    return rc;
}

int dispatch_check(const KCall *c) { return c->env->check_numerics ? check_finite(c) : 0; }

int dispatch_run(const KCall *c)
{
    int rc = dispatch_kernel(c);
    return rc == 0 ? dispatch_check(c) : rc;
}

void step_env_train(StepEnv *e, const TrainSpec *t, int64_t step)
{
    e->step = step;
    e->lr = (float)optim_lr(t, step);
    e->momentum = t->momentum;
    e->nesterov = t->nesterov;
    e->beta1 = t->beta1;
    e->beta2 = t->beta2;
    e->eps = t->eps;
    e->weight_decay = t->weight_decay;
    e->rho = t->rho;
    e->centered = t->centered;
}
