/* Kernel dispatch: one function per op, in a table indexed by OpKind.  Both executors
 * come through here, so the arithmetic is the same in both modes. */
#include <assert.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec/comm.h"
#include "exec/exec.h"
#include "kernels/kern.h"
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

/* ---- splitting memory-bound kernels across the thread pool ----------------------------
 * Elementwise and pooling kernels are serial functions; large calls are cut into one
 * contiguous range (or block of images) per thread.  Each range is computed exactly as
 * the whole would be, so results do not depend on the thread count. */

enum { PAR_MIN = 1 << 15 };   /* fewer elements than this are not worth a wake-up */

typedef struct Range {
    size_t n, unit;   /* elements, and the granule ranges are multiples of */
    int parts;
} Range;

static Range ranges(size_t n, size_t unit)
{
    Range r = { n, unit ? unit : 1, 1 };
    int T = pool_threads();
    if (T > 1 && n >= PAR_MIN && n / r.unit >= (size_t)T) r.parts = T;
    return r;
}

static void range_of(const Range *r, int part, size_t *lo, size_t *hi)
{
    size_t units = r->n / r->unit;
    *lo = units * (size_t)part / (size_t)r->parts * r->unit;
    *hi = part == r->parts - 1 ? r->n : units * (size_t)(part + 1) / (size_t)r->parts * r->unit;
}

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
    static const KUnary map[] = {
        [OP_NEG] = KU_NEG, [OP_RELU] = KU_RELU, [OP_SIGMOID] = KU_SIGMOID, [OP_TANH] = KU_TANH,
        [OP_EXP] = KU_EXP, [OP_LOG] = KU_LOG, [OP_SQRT] = KU_SQRT,
    };
    if (c->n->op == OP_UNARY_GRAD) {
        const float *v = (const float *)c->in[0] + lo;
        kern_unary_grad((KUnary)c->n->a.unary.kop, v, v, (const float *)c->in[1] + lo, (float *)c->out + lo, hi - lo);
    } else {
        kern_unary(map[c->n->op], (const float *)c->in[0] + lo, (float *)c->out + lo, hi - lo);
    }
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
    kern_gemm(ta, tb, M, N, K, 1.0f, fin(c, 0), fin(c, 1), 0.0f, fout(c));
    return 0;
}

typedef struct RowsJob {
    float *y;
    const float *bias;
    int act;
    size_t cols;
    Range r;   /* over rows */
} RowsJob;

static void bias_act_part(void *arg, int part, int worker)
{
    (void)worker;
    const RowsJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    kern_bias_act(j->y + lo * j->cols, hi - lo, j->cols, j->bias, j->act);
}

static int k_matmul_bias_act(const KCall *c)
{
    k_matmul(c);
    size_t rows = (size_t)c->n->shape.d[0].v, cols = (size_t)c->n->shape.d[1].v;
    RowsJob j = { fout(c), fin(c, 2), c->n->a.matmul.act, cols, ranges(rows * cols, cols) };
    j.r.n = rows;
    j.r.unit = 1;
    pool_run(j.r.parts, bias_act_part, &j);
    return 0;
}

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
    const WinAttr *cv = &n->a.convpool.conv, *pl = &n->a.convpool.pool;
    *p = conv_window(cv, x, w, (x->d[1].v + cv->pt + cv->pb - w->d[0].v) / cv->sh + 1,
                     (x->d[2].v + cv->pl + cv->pr - w->d[1].v) / cv->sw + 1);
    *q = (KPool){ .n = p->n, .h = p->oh, .w = p->ow, .c = p->f, .kh = pl->kh, .kw = pl->kw, .sh = pl->sh,
                  .sw = pl->sw, .pt = pl->pt, .pl = pl->pl, .oh = n->shape.d[1].v, .ow = n->shape.d[2].v };
}

static int k_conv2d_maxpool(const KCall *c)
{
    KConv p;
    KPool q;
    convpool_params(c->g, c->n, &p, &q);
    kern_conv2d_maxpool(&p, &q, fin(c, 0), fin(c, 1), c->n->nin == 3 ? fin(c, 2) : NULL, c->n->a.convpool.conv.act,
                        fout(c), c->scratch);
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
        kern_conv2d_bias_act(&p, fin(c, 0), fin(c, 1), fin(c, 2), c->n->a.win.act, fout(c), c->scratch);
    else
        kern_conv2d(&p, fin(c, 0), fin(c, 1), fout(c), c->scratch);
    return 0;
}

static int k_conv2d_grad_input(const KCall *c)
{
    KConv p = call_conv(c);
    kern_conv2d_grad_input(&p, fin(c, 0), fin(c, 1), fout(c), c->scratch);
    return 0;
}

static int k_conv2d_grad_filter(const KCall *c)
{
    KConv p = call_conv(c);
    kern_conv2d_grad_filter(&p, fin(c, 0), fin(c, 1), fout(c), c->scratch);
    return 0;
}

static size_t matmul_update_scratch(const Graph *g, const Node *n);
static size_t matmul_grad_update_scratch(const Node *n);

/* A convolution's scratch, sized by the path its kernel takes at these sizes (a direct
 * kernel needs no im2col chunks); Adam's matmul_update's panels; matmul_grad_update's
 * (x's signs, or SGD's panels); 0 for every other op. */
size_t dispatch_scratch_bytes(const Graph *g, const Node *n)
{
    if (n->op == OP_MATMUL_UPDATE) return matmul_update_scratch(g, n);
    if (n->op == OP_MATMUL_GRAD_UPDATE) return matmul_grad_update_scratch(n);
    if (n->op == OP_CONV2D_MAXPOOL) {
        KConv p;
        KPool q;
        convpool_params(g, n, &p, &q);
        return kern_conv2d_maxpool_scratch(&p, &q);
    }
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
    return kern_conv_scratch(&p, op);
}

static void binary_part(void *arg, int part, int worker)
{
    (void)worker;
    const ElemJob *j = arg;
    const KCall *c = j->c;
    static const KBinary map[] = { [OP_ADD] = KB_ADD, [OP_SUB] = KB_SUB, [OP_MUL] = KB_MUL, [OP_DIV] = KB_DIV };
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
    kern_binary(map[c->n->op], a, ad, 2, b, bd, 2, fout(c) + lo, yd, 2);
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
    ElemJob j = { c, ranges(ny, small > 1 && small != ny ? small : 16), small > 1 && small != ny ? small : 0 };
    if (j.r.parts < 2) return false;
    pool_run(j.r.parts, binary_part, &j);
    return true;
}

static int k_binary(const KCall *c)
{
    if (split_binary(c)) return 0;
    static const KBinary map[] = { [OP_ADD] = KB_ADD, [OP_SUB] = KB_SUB, [OP_MUL] = KB_MUL, [OP_DIV] = KB_DIV };
    const Shape *a = ishape(c, 0), *b = ishape(c, 1), *y = &c->n->shape;
    int64_t ad[MAX_RANK], bd[MAX_RANK], yd[MAX_RANK];
    dims64(a, ad);
    dims64(b, bd);
    dims64(y, yd);
    kern_binary(map[c->n->op], fin(c, 0), ad, a->rank, fin(c, 1), bd, b->rank, fout(c), yd, y->rank);
    return 0;
}

/* unary ops and unary_grad: contiguous ranges */
static int k_unary(const KCall *c)
{
    ElemJob j = { c, ranges(numel(&c->n->shape), 16), 0 };
    pool_run(j.r.parts, unary_part, &j);
    return 0;
}

static void rows_cols(const Shape *s, size_t *rows, size_t *cols)
{
    *cols = (size_t)s->d[s->rank - 1].v;
    *rows = *cols ? numel(s) / *cols : 0;
}

static int k_softmax(const KCall *c)
{
    size_t r, k;
    rows_cols(&c->n->shape, &r, &k);
    if (c->n->op == OP_SOFTMAX) kern_softmax(fin(c, 0), fout(c), r, k);
    else kern_log_softmax(fin(c, 0), fout(c), r, k);
    return 0;
}

static int k_softmax_grad(const KCall *c)
{
    size_t r, k;
    rows_cols(&c->n->shape, &r, &k);
    if (c->n->op == OP_SOFTMAX_GRAD) kern_softmax_grad(fin(c, 0), fin(c, 1), fout(c), r, k);
    else kern_log_softmax_grad(fin(c, 0), fin(c, 1), fout(c), r, k);
    return 0;
}

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
    KPool p;
    Range r;    /* over images */
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
    switch (c->n->op) {
    case OP_MAXPOOL: kern_maxpool(&p, fin(c, 0) + xs, fout(c) + ys); break;
    case OP_AVGPOOL: kern_avgpool(&p, fin(c, 0) + xs, fout(c) + ys); break;
    case OP_MAXPOOL_GRAD: kern_maxpool_grad(&p, fin(c, 0) + xs, fin(c, 1) + ys, fin(c, 2) + ys, fout(c) + xs); break;
    case OP_MAXPOOL_ARGMAX: kern_maxpool_argmax(&p, fin(c, 0) + xs, (int32_t *)c->out + ys); break;
    case OP_MAXPOOL_GATHER: kern_maxpool_gather(&p, fin(c, 0) + xs, (const int32_t *)c->in[1] + ys, fout(c) + ys); break;
    case OP_MAXPOOL_SCATTER: kern_maxpool_scatter(&p, (const int32_t *)c->in[0] + ys, NULL, fin(c, 1) + ys, fout(c) + xs); break;
    case OP_MAXPOOL_SCATTER_RELU:
        kern_maxpool_scatter(&p, (const int32_t *)c->in[0] + ys, fin(c, 1) + ys, fin(c, 2) + ys, fout(c) + xs);
        break;
    case OP_MAXPOOL_GRAD_RELU: kern_maxpool_grad_relu(&p, fin(c, 0) + xs, fin(c, 1) + ys, fin(c, 2) + ys, fout(c) + xs); break;
    default: kern_avgpool_grad(&p, fin(c, 0) + ys, fout(c) + xs); break;
    }
}

static int run_pool_job(const KCall *c, KPool p)
{
    PoolJob j = { c, p, ranges((size_t)p.n * (size_t)(p.h * p.w * p.c), (size_t)(p.h * p.w * p.c)) };
    j.r.n = (size_t)p.n;   /* ranges count images */
    j.r.unit = 1;
    pool_run(j.r.parts, pool_part, &j);
    return 0;
}

static int k_pool(const KCall *c) { return run_pool_job(c, pool_params(c->n, ishape(c, 0), &c->n->shape)); }
static int k_maxpool_grad(const KCall *c) { return run_pool_job(c, pool_params(c->n, ishape(c, 0), ishape(c, 1))); }
static int k_maxpool_scatter(const KCall *c) { return run_pool_job(c, pool_params(c->n, &c->n->shape, ishape(c, 0))); }
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
    ElemJob j = { c, ranges(n, 16), 0 };
    pool_run(j.r.parts, dropout_part, &j);
    return 0;
}

static int bad_label(const KCall *c, int rc)
{
    int64_t row = -1 - rc;
    const int32_t *labels = (const int32_t *)c->in[1];
    int line = 0, col = 0;
    if (c->g->src) diag_line_col(c->g->src, c->n->loc.start, &line, &col);
    diag_plain(c->env->d, "%s:%d:%d: %s: label %d in row %lld is outside [0, %lld)", c->g->src ? c->g->src->name : "?",
               line, col, op_name(c->n->op), labels[row], (long long)row, (long long)ishape(c, 0)->d[1].v);
    return -1;
}

static int k_cross_entropy(const KCall *c)
{
    const Shape *l = ishape(c, 0);
    int rc = kern_cross_entropy(fin(c, 0), (const int32_t *)c->in[1], (size_t)l->d[0].v, (size_t)l->d[1].v, fout(c));
    return rc ? bad_label(c, rc) : 0;
}

static int k_cross_entropy_grad(const KCall *c)
{
    const Shape *l = ishape(c, 0);
    int rc = kern_cross_entropy_grad(fin(c, 0), (const int32_t *)c->in[1], fin(c, 2)[0], fout(c), (size_t)l->d[0].v,
                                     (size_t)l->d[1].v);
    return rc ? bad_label(c, rc) : 0;
}

static int k_accuracy(const KCall *c)
{
    const Shape *l = ishape(c, 0);
    size_t rows = (size_t)l->d[0].v;
    size_t ok = kern_count_correct(fin(c, 0), (const int32_t *)c->in[1], rows, (size_t)l->d[1].v);
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
enum { SUMTO_PARTS = 8, SUMTO_MAX_COLS = 256 };

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
    if (cols == 0 || cols > SUMTO_MAX_COLS || numel(x) < PAR_MIN || !trailing_dims(y, x)) return false;
    double part[SUMTO_PARTS][SUMTO_MAX_COLS];
    SumToJob j = { fin(c, 0), numel(x) / cols, cols, part };
    pool_run(SUMTO_PARTS, sum_to_part, &j);
    for (size_t k = 0; k < cols; k++) {
        double s = part[0][k];
        for (int p = 1; p < SUMTO_PARTS; p++) s += part[p][k];
        fout(c)[k] = (float)s;
    }
    return true;
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

/* Elements [lo, hi) of one parameter's update (the kernels are elementwise): `op` is
 * SGD, MOMENTUM or ADAM_UPDATE, s0 and s1 its state vars, g those elements' gradient
 * (g[0] is element lo's). */
static void update_range(const StepEnv *e, OpKind op, int var, int s0, int s1, const float *g, size_t lo, size_t hi)
{
    float *w = e->w->data[var] + lo;
    switch (op) {
    case OP_SGD_UPDATE: kern_sgd(w, g, hi - lo, e->lr); break;
    case OP_MOMENTUM_UPDATE: kern_momentum(w, e->w->data[s0] + lo, g, hi - lo, e->lr, e->momentum, e->nesterov); break;
    default:
        kern_adam(w, e->w->data[s0] + lo, e->w->data[s1] + lo, g, hi - lo, e->lr, e->beta1, e->beta2, e->eps,
                  e->step + 1);
        break;
    }
}

static void update_part(void *arg, int part, int worker)
{
    (void)worker;
    const ElemJob *j = arg;
    const Node *n = j->c->n;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    update_range(j->c->env, n->op, n->a.update.var, n->a.update.state[0], n->a.update.state[1], fin(j->c, 1) + lo, lo,
                 hi);
}

/* One parameter's update: a large one split into ranges over the pool. */
static int k_update(const KCall *c)
{
    ElemJob j = { c, ranges(numel(ishape(c, 1)), 16), 0 };
    pool_run(j.r.parts, update_part, &j);
    fout(c)[0] = 0;
    return 0;
}

/* update_all: the parameters are independent, so they are spread over the pool, one
 * task per parameter; each is updated exactly as its own update op would. */
static void update_all_part(void *arg, int task, int worker)
{
    (void)worker;
    const KCall *c = arg;
    const Graph *g = c->g;
    int var = g->nodes[c->n->in[2 * task]].a.param.var, st[2];
    graph_state_vars(g, var, st);
    update_range(c->env, (OpKind)c->n->a.update.state[0], var, st[0], st[1], fin(c, 2 * task + 1), 0,
                 numel(ishape(c, 2 * task + 1)));
}

static int k_update_all(const KCall *c)
{
    pool_run(c->n->nin / 2, update_all_part, (void *)c);
    fout(c)[0] = 0;
    return 0;
}

/* matmul_update(w, a, b): the gradient op(a) op(b) is made inside the update, so it never
 * exists whole.  SGD: w = w - lr * op(a) op(b), one GEMM into w (alpha -lr, beta 1).
 * Momentum (not Nesterov, which needs the gradient itself): v = op(a) op(b) + mu * v,
 * one GEMM into the velocity (alpha 1, beta mu), then w -= lr * v over the pool, as
 * kern_momentum updates w.  Adam reads the gradient itself (g and g^2), so no GEMM's
 * beta can hold it: see adam_panels.  Each element of the gradient is computed whole
 * over K in one BLAS call, but which call depends on kern_gemm's split over the pool
 * (and sgemm rounds a row by its place in the call), so SGD's and momentum's bits may
 * depend on the thread count; Adam's panels do not. */
typedef struct AxpyJob {
    float *w;
    const float *v;
    float lr;
    Range r;
} AxpyJob;

static void axpy_part(void *arg, int part, int worker)
{
    (void)worker;
    const AxpyJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    kern_sgd(j->w + lo, j->v + lo, hi - lo, j->lr);
}

/* Adam's matmul_update: the [M, N] gradient a panel of a.update.panel rows at a time
 * into scratch (one BLAS call each, kern_gemm_rows), then kern_adam on those rows of w,
 * m and v while the panel is in cache, so only a panel per thread exists.  The panels
 * are a fixed grid of the rows, whatever the thread count, so the bits do not depend on
 * it; each pool task takes a run of whole panels and makes them in its own panel of the
 * scratch. */
typedef struct AdamPanels {
    size_t rows, panels;   /* rows per panel (the last may have fewer), panels */
    int tasks;
} AdamPanels;

static AdamPanels adam_panels(const Node *n, size_t M)
{
    AdamPanels p = { (size_t)n->a.update.panel, 0, 1 };
    if (p.rows < 1 || p.rows > M) p.rows = M ? M : 1;
    p.panels = (M + p.rows - 1) / p.rows;
    size_t T = (size_t)pool_threads();
    p.tasks = (int)(p.panels < T ? p.panels : T);
    if (p.tasks < 1) p.tasks = 1;
    return p;
}

typedef struct AdamJob {
    const KCall *c;
    bool ta, tb;
    size_t M, N, K;
    AdamPanels p;
} AdamJob;

static void adam_part(void *arg, int task, int worker)
{
    (void)worker;
    const AdamJob *j = arg;
    const KCall *c = j->c;
    const Node *n = c->n;
    float *panel = c->scratch + (size_t)task * j->p.rows * j->N;
    size_t tasks = (size_t)j->p.tasks, first = j->p.panels * (size_t)task / tasks;
    size_t end = j->p.panels * (size_t)(task + 1) / tasks;
    for (size_t q = first; q < end; q++) {
        size_t r0 = q * j->p.rows, r1 = r0 + j->p.rows < j->M ? r0 + j->p.rows : j->M;
        kern_gemm_rows(j->ta, j->tb, j->M, j->N, j->K, r0, r1, 1.0f, fin(c, 1), fin(c, 2), 0.0f, panel);
        update_range(c->env, OP_ADAM_UPDATE, n->a.update.var, n->a.update.state[0], n->a.update.state[1], panel,
                     r0 * j->N, r1 * j->N);
    }
}

/* A matmul_update's scratch: Adam's panels, one per task */
static size_t matmul_update_scratch(const Graph *g, const Node *n)
{
    if (n->a.update.kind != OP_ADAM_UPDATE) return 0;
    const Shape *w = &g->nodes[n->in[0]].shape;
    AdamPanels p = adam_panels(n, (size_t)w->d[0].v);
    return (size_t)p.tasks * p.rows * (size_t)w->d[1].v * sizeof(float);
}

static int k_matmul_update(const KCall *c)
{
    const Node *n = c->n;
    const StepEnv *e = c->env;
    const Shape *w = ishape(c, 0), *a = ishape(c, 1);
    bool ta = n->a.update.ta, tb = n->a.update.tb;
    size_t M = (size_t)w->d[0].v, N = (size_t)w->d[1].v, K = (size_t)a->d[ta ? 0 : 1].v;
    float *wd = e->w->data[n->a.update.var];
    switch (n->a.update.kind) {
    case OP_SGD_UPDATE:
        kern_gemm(ta, tb, M, N, K, -e->lr, fin(c, 1), fin(c, 2), 1.0f, wd);
        break;
    case OP_MOMENTUM_UPDATE: {
        if (e->nesterov) {
            diag_plain(e->d, "internal error: %s fused with a Nesterov momentum update", op_name(n->op));
            return -1;
        }
        float *v = e->w->data[n->a.update.state[0]];
        kern_gemm(ta, tb, M, N, K, 1.0f, fin(c, 1), fin(c, 2), e->momentum, v);
        AxpyJob j = { wd, v, e->lr, ranges(M * N, 16) };
        pool_run(j.r.parts, axpy_part, &j);
        break;
    }
    case OP_ADAM_UPDATE: {
        AdamJob j = { c, ta, tb, M, N, K, adam_panels(n, M) };
        pool_run(j.p.tasks, adam_part, &j);
        break;
    }
    default:
        diag_plain(e->d, "internal error: %s fused with %s", op_name(n->op),
                   (unsigned)n->a.update.kind < OP_COUNT ? op_name((OpKind)n->a.update.kind) : "?");
        return -1;
    }
    fout(c)[0] = 0;
    return 0;
}

/* matmul_grad_update(x, dy, w): a dense layer's backward whose input x is a relu
 * output, the three ops apart being dx = dy w^T, the mask x > 0 ? dx : 0 and w's update
 * from x^T dy, as k_matmul_update makes it.  The output may be x's buffer, so x must be
 * read whole (the update's GEMM, the mask) before dx is written where it was, while dx
 * needs w as it was before its update.  How depends on the update:
 *
 * Momentum puts x^T dy into the velocity and leaves w alone until w -= lr v, so the
 * order  signs of x -> v = x^T dy + mu v -> dx = dy w^T (over x) -> w -= lr v -> mask
 * by the signs  reads each in time, and its GEMMs are the very calls of the ops apart
 * (kern_gemm, split over the pool the same way): the same bits.  The scratch keeps only
 * x > 0, a bit per element.
 *
 * SGD adds x^T dy into w itself, so dx must be made first, while x is still needed.
 * Column j of dx needs only row j of w, and row j of w's update only column j of x, so
 * the work goes panel by panel of P columns of x (rows of w), the panels spread over
 * the pool; panel J:
 *   1. S = dy w[J,:]^T into this thread's scratch, [B, |J|], with the rows not yet updated;
 *   2. w[J,:] -= lr x[:,J]^T dy, one GEMM into those rows (alpha -lr, beta 1);
 *   3. out[:,J] = x[:,J] > 0 ? S : 0.
 * A panel reads its columns of x (2, 3) before it writes them (3) and no other panel
 * touches them.  The panels are cut by the sizes alone and each GEMM is one BLAS call,
 * so the bits do not depend on the thread count; they are not the ops apart's (sgemm
 * rounds a value by its place in the call, and the calls are cut otherwise). */
typedef struct DenseBackJob {
    const float *x, *dy;
    float *w, *out, *scratch;
    uint32_t *sign;   /* momentum: bit i % 32 of sign[i / 32] is x[i] > 0 */
    size_t B, K, N, P;
    float lr;
    Range r;          /* momentum: over the elements of x, in multiples of 32 */
} DenseBackJob;

/* SGD's panel width, from the sizes alone.  Each thread's scratch holds one panel's
 * [B, P] product, and that scratch counts in the plan's naive sum and in its peak like
 * any buffer, so at a small batch the panel stays narrow (32 columns: 2 KiB a thread at
 * batch 16); at a large batch it widens to 64 so both GEMMs of a panel have rows enough
 * to run at speed, and dy, which each panel's GEMMs pack again, is packed fewer times.
 * Never wider than x. */
static size_t dense_panel(size_t B, size_t K)
{
    size_t p = (B + 15) / 16 * 16;
    p = p < 32 ? 32 : p > 64 ? 64 : p;
    return p < K ? p : K;
}

/* matmul_grad_update's scratch: momentum's signs of x, a bit each; SGD's [B, P] panel
 * for each thread that runs one.  The pool runs task t on worker t mod its threads (a
 * job of one task, or one inside a job, on worker 0), so with fewer panels than threads
 * only the first `panels` workers take one: dense_back_panel's region is the worker's. */
static size_t matmul_grad_update_scratch(const Node *n)
{
    size_t B = (size_t)n->shape.d[0].v, K = (size_t)n->shape.d[1].v;
    if (n->a.update.kind != OP_SGD_UPDATE) return (B * K + 31) / 32 * sizeof(uint32_t);
    size_t P = dense_panel(B, K), panels = (K + P - 1) / P, T = (size_t)pool_threads();
    return (panels < T ? panels : T) * B * P * sizeof(float);
}

static void dense_back_panel(void *arg, int panel, int worker)
{
    const DenseBackJob *j = arg;
    size_t j0 = (size_t)panel * j->P, p = j->K - j0 < j->P ? j->K - j0 : j->P;
    float *s = j->scratch + (size_t)worker * j->B * j->P, *w = j->w + j0 * j->N;
    kern_gemm_block(false, true, j->B, p, j->N, 1.0f, j->dy, j->N, w, j->N, 0.0f, s, p);
    kern_gemm_block(true, false, p, j->N, j->B, -j->lr, j->x + j0, j->K, j->dy, j->N, 1.0f, w, j->N);
    for (size_t b = 0; b < j->B; b++) {
        const float *xb = j->x + b * j->K + j0;
        kern_unary_grad(KU_RELU, xb, xb, s + b * p, j->out + b * j->K + j0, p);
    }
}

static void dense_signs_part(void *arg, int part, int worker)
{
    (void)worker;
    const DenseBackJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);   /* lo a multiple of 32: whole words */
    kern_sign_bits(j->x + lo, j->sign + lo / 32, hi - lo);
}

static void dense_mask_part(void *arg, int part, int worker)
{
    (void)worker;
    const DenseBackJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    kern_mask_bits(j->sign + lo / 32, j->out + lo, hi - lo);
}

static int k_matmul_grad_update(const KCall *c)
{
    const Node *n = c->n;
    const StepEnv *e = c->env;
    const Shape *x = ishape(c, 0), *dy = ishape(c, 1);
    size_t B = (size_t)x->d[0].v, K = (size_t)x->d[1].v, N = (size_t)dy->d[1].v;
    DenseBackJob j = { fin(c, 0), fin(c, 1), e->w->data[n->a.update.var], fout(c), c->scratch, (uint32_t *)c->scratch,
                       B, K, N, dense_panel(B, K), e->lr, ranges(B * K, 32) };
    if (n->a.update.kind == OP_SGD_UPDATE) {
        pool_run((int)((K + j.P - 1) / j.P), dense_back_panel, &j);
        return 0;
    }
    if (e->nesterov) {
        diag_plain(e->d, "internal error: %s fused with a Nesterov momentum update", op_name(n->op));
        return -1;
    }
    float *v = e->w->data[n->a.update.state[0]];
    pool_run(j.r.parts, dense_signs_part, &j);
    kern_gemm(true, false, K, N, B, 1.0f, j.x, j.dy, e->momentum, v);
    kern_gemm(false, true, B, K, N, 1.0f, j.dy, j.w, 0.0f, j.out);
    AxpyJob aj = { j.w, v, e->lr, ranges(K * N, 16) };
    pool_run(aj.r.parts, axpy_part, &aj);
    pool_run(j.r.parts, dense_mask_part, &j);
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
    static const KUnary unary[] = {
        [OP_NEG] = KU_NEG, [OP_RELU] = KU_RELU, [OP_SIGMOID] = KU_SIGMOID, [OP_TANH] = KU_TANH,
        [OP_EXP] = KU_EXP, [OP_LOG] = KU_LOG, [OP_SQRT] = KU_SQRT,
    };
    static const KBinary binary[] = { [OP_ADD] = KB_ADD, [OP_SUB] = KB_SUB, [OP_MUL] = KB_MUL, [OP_DIV] = KB_DIV };
    float tmp[EW_MAX_STEPS][EW_BLOCK];
    for (size_t at = lo; at < hi; at += EW_BLOCK) {
        size_t len = hi - at < EW_BLOCK ? hi - at : EW_BLOCK;
        for (int s = 0; s < n->a.ew.nstep; s++) {
            const EwStep *st = &n->a.ew.step[s];
            const float *a = ew_operand(c, st->arg[0], at, tmp);
            float *dst = s == n->a.ew.nstep - 1 ? fout(c) + at : tmp[s];
            switch ((OpKind)st->op) {
            case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: {
                const float *b = ew_operand(c, st->arg[1], at, tmp);
                bool as = st->arg[0] >= 0 && numel(ishape(c, st->arg[0])) == 1;
                bool bs = st->arg[1] >= 0 && numel(ishape(c, st->arg[1])) == 1;
                int64_t ad[2] = { 1, as ? 1 : (int64_t)len }, bd[2] = { 1, bs ? 1 : (int64_t)len }, yd[2] = { 1, (int64_t)len };
                kern_binary(binary[st->op], a, ad, 2, b, bd, 2, dst, yd, 2);
                break;
            }
            case OP_UNARY_GRAD:
                kern_unary_grad((KUnary)st->kop, a, a, ew_operand(c, st->arg[1], at, tmp), dst, len);
                break;
            case OP_DROPOUT: case OP_DROPOUT_GRAD:
                if (!c->env->training || st->rate == 0) {
                    if (dst != a) memcpy(dst, a, len * sizeof *dst);
                } else {
                    kern_dropout(a, dst, len, st->rate, step_seed(c->env), (uint64_t)st->stream,
                                 (uint64_t)c->env->shard * j->r.n + at);
                }
                break;
            default:
                kern_unary(unary[st->op], a, dst, len);
                break;
            }
        }
    }
}

static int k_fused_elemwise(const KCall *c)
{
    ElemJob j = { c, ranges(numel(&c->n->shape), EW_BLOCK), 0 };
    pool_run(j.r.parts, ew_part, &j);
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

/* Sized by its entries (see the static_assert); dispatch_has_kernel() lets the tests
 * check that no op in the middle lacks one. */
static const KernelFn kernels[] = {
    [OP_INPUT] = k_nop, [OP_PARAM] = k_param, [OP_CONST] = k_const,
    [OP_MATMUL] = k_matmul, [OP_CONV2D] = k_conv2d,
    [OP_ADD] = k_binary, [OP_SUB] = k_binary, [OP_MUL] = k_binary, [OP_DIV] = k_binary,
    [OP_NEG] = k_unary, [OP_RELU] = k_unary, [OP_SIGMOID] = k_unary, [OP_TANH] = k_unary,
    [OP_EXP] = k_unary, [OP_LOG] = k_unary, [OP_SQRT] = k_unary,
    [OP_SOFTMAX] = k_softmax, [OP_LOG_SOFTMAX] = k_softmax,
    [OP_MAXPOOL] = k_pool, [OP_AVGPOOL] = k_pool, [OP_GLOBAL_AVGPOOL] = k_gap,
    [OP_RESHAPE] = k_reshape, [OP_CONCAT] = k_concat, [OP_DROPOUT] = k_dropout,
    [OP_CROSS_ENTROPY] = k_cross_entropy, [OP_MSE] = k_mse, [OP_ACCURACY] = k_accuracy,
    [OP_SUM_TO] = k_sum_to, [OP_UNARY_GRAD] = k_unary,
    [OP_SOFTMAX_GRAD] = k_softmax_grad, [OP_LOG_SOFTMAX_GRAD] = k_softmax_grad,
    [OP_MAXPOOL_GRAD] = k_maxpool_grad, [OP_AVGPOOL_GRAD] = k_avgpool_grad, [OP_GLOBAL_AVGPOOL_GRAD] = k_gap_grad,
    [OP_CONV2D_GRAD_INPUT] = k_conv2d_grad_input, [OP_CONV2D_GRAD_FILTER] = k_conv2d_grad_filter,
    [OP_SLICE] = k_slice, [OP_DROPOUT_GRAD] = k_dropout,
    [OP_CROSS_ENTROPY_GRAD] = k_cross_entropy_grad, [OP_MSE_GRAD] = k_mse_grad,
    [OP_SGD_UPDATE] = k_update, [OP_MOMENTUM_UPDATE] = k_update, [OP_ADAM_UPDATE] = k_update,
    [OP_CONV2D_BIAS_ACT] = k_conv2d, [OP_MATMUL_BIAS_ACT] = k_matmul_bias_act, [OP_MAXPOOL_GRAD_RELU] = k_maxpool_grad,
    [OP_UPDATE_ALL] = k_update_all,
    [OP_ALLREDUCE] = k_allreduce, [OP_ALLREDUCE_WAIT] = k_allreduce_wait,
    [OP_MAXPOOL_ARGMAX] = k_pool, [OP_MAXPOOL_GATHER] = k_pool, [OP_MAXPOOL_SCATTER] = k_maxpool_scatter,
    [OP_MAXPOOL_SCATTER_RELU] = k_maxpool_scatter, [OP_FUSED_ELEMWISE] = k_fused_elemwise,
    [OP_CONV2D_MAXPOOL] = k_conv2d_maxpool,
    [OP_MATMUL_UPDATE] = k_matmul_update, [OP_MATMUL_GRAD_UPDATE] = k_matmul_grad_update,
};
static_assert(sizeof kernels / sizeof kernels[0] == OP_COUNT, "one kernel per op");

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
    double t0 = exec_now_ns();
    int rc = kernels[c->n->op](c);
    c->env->prof_ns[c->n - c->g->nodes] += exec_now_ns() - t0;
    return rc;
}

int dispatch_check(const KCall *c) { return c->env->check_numerics ? check_finite(c) : 0; }

int dispatch_run(const KCall *c)
{
    int rc = dispatch_kernel(c);
    return rc == 0 ? dispatch_check(c) : rc;
}
