/* Convolution (im2col + sgemm, in bounded chunks of output pixels), NHWC, and the
 * convolution fused with max pooling (conv2d_maxpool; the pooling kernels are pool.c's).
 *
 * The output pixels are the M = n*oh*ow rows of the im2col matrix; the row of pixel
 * (n, oy, ox) is its KH*KW*C input patch in (ky, kx, c) order, zero where the patch
 * hangs over the padding.  With the HWIO filter viewed as W[K, F] row-major,
 *     forward      y[M, F]  = col[M, K] W[K, F]          (y lands in NHWC directly)
 *     grad input   dcol     = dy[M, F] W^T, scatter-added back into dx (col2im)
 *     grad filter  dW[K, F] = col^T dy, summed over chunks with beta = 1.
 * Each chunk holds at most conv_chunk_rows() rows of col, so the scratch is bounded by
 * the filter size, never by the batch or the image.  When the im2col matrix is the
 * input itself (1x1 stride-1 unpadded convolutions, and kernels covering the whole
 * unpadded image) no copy is made and no scratch is needed.
 * Where the sizes take conv_direct.c's kernels (conv_direct_ok: an image network's
 * convolutions), the forward pass, the filter gradient and the stride-1 input gradient
 * run those instead, on whole output rows, one share per thread, in the variant (KIsa)
 * the caller names. */

/* The loops here are written for the auto-vectorizer, which plain -O2 (GCC 12's
 * "very cheap" cost model) leaves off; measured 2-3x on the elementwise kernels.
 * Set before any include so every function in this file has the same options. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include "kernels/kern.h"

#include <string.h>

#include "kernels/conv_bf16.h"
#include "kernels/conv_direct.h"
#include "kernels/pool.h"

#include "util/pool.h"

enum {
    /* Bytes of im2col per chunk, ideally: small enough to stay in cache between
     * im2col writing a chunk and sgemm reading it.  On a Zen core (512 KiB L2) 1 MiB
     * was as fast as or faster than 0.5-4 MiB from K = 25 to K = 2304, and 8 MiB up
     * to 2x slower. */
    CONV_SCRATCH_BUDGET = 1 << 20,
    CONV_MAX_ROWS = 16384,           /* more rows gain nothing for tiny K */
    CONV_MIN_ROWS = 128,             /* sgemm needs some rows to run at speed, even for huge K */
    CONV_IDENTITY_ROWS = 1 << 20,    /* no copy: chunks only keep BLAS sizes in range */
    CONV_TASK_FLOPS = 3000000        /* a direct kernel's least work per thread (useful_threads) */
};

/* Test hook (not in kern.h): force the rows per chunk; 0 restores the automatic choice. */
static size_t chunk_rows_override;
void kern_conv_set_chunk_rows(size_t rows) { chunk_rows_override = rows; }

static int64_t conv_m(const KConv *p) { return p->n * p->oh * p->ow; }
static int64_t conv_k(const KConv *p) { return p->kh * p->kw * p->c; }

/* Is the im2col matrix of these sizes the input tensor itself, viewed as [M, K]? */
static bool conv_is_identity(const KConv *p)
{
    if (p->pt != 0 || p->pl != 0)
        return false;
    if (p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->oh == p->h && p->ow == p->w)
        return true;
    return p->kh == p->h && p->kw == p->w && p->oh == 1 && p->ow == 1;
}

static int64_t conv_chunk_rows(const KConv *p)
{
    int64_t m = conv_m(p), k = conv_k(p), rows;
    if (chunk_rows_override)
        rows = (int64_t)chunk_rows_override;
    else if (conv_is_identity(p))
        rows = CONV_IDENTITY_ROWS;
    else {
        rows = k > 0 ? (int64_t)CONV_SCRATCH_BUDGET / (k * (int64_t)sizeof(float)) : CONV_MAX_ROWS;
        if (rows > CONV_MAX_ROWS)
            rows = CONV_MAX_ROWS;
        if (rows < CONV_MIN_ROWS)
            rows = CONV_MIN_ROWS;
    }
    return rows < m ? rows : m;
}

/* The direct kernels (conv_direct.c) where they apply: not for the identity cases,
 * where sgemm reads the input as it is. */
static bool conv_direct(const KConv *p) { return !conv_is_identity(p) && conv_direct_ok(p); }

static bool conv_direct_gi(const KConv *p, KConv *q) { return !conv_is_identity(p) && conv_direct_grad_input_ok(p, q); }

static int64_t nchunks(int64_t m, int64_t rows) { return (m + rows - 1) / rows; }

/* The direct forward's filter, packed into wp where the kernel that runs reads a copy:
 * in bf16 pairs under --dtype bf16 (conv_bf16.c), else conv_pack's where needed. */
static const float *direct_filter(KIsa isa, const KConv *p, const float *w, float *wp)
{
    if (conv_bf16_ok(isa, p))
        conv_bf16_pack(p, w, wp);
    else if (conv_pack_needed(p, w))
        conv_pack(p, w, wp);
    else
        return w;
    return wp;
}

/* The direct forward's rows [r0, r0 + rc), on direct_filter's filter. */
static void direct_rows(KIsa isa, const KConv *p, const float *x, const float *w, const float *bias, EwAct act,
                        float *y, int64_t r0, int64_t rc)
{
    if (conv_bf16_ok(isa, p))
        conv_bf16_forward(p, x, w, bias, act, y, r0, rc);
    else
        conv_direct_forward(kern_variant(isa), p, x, w, bias, act, y, r0, rc);
}

/* How one of the three kernels runs for given sizes at the pool's thread count, decided
 * here only: the kernels follow it and kern_conv_scratch sizes their scratch by it, so
 * the scratch is what the path taken touches.  The scratch is `regions` worker regions
 * (task t runs on worker t % T, so min(T, tasks) of them), each an im2col chunk then a
 * private [K, F] sum, and after them the filter packed once per call (unless the
 * direct forward reads it as stored: conv_pack_needed). */
typedef struct ConvPath {
    bool direct;        /* the direct kernels: forward, grad filter, stride-1 grad input */
    int64_t rows;       /* per task: output pixels, or whole output rows (n, oy) when direct */
    int64_t per_task;   /* grad input through im2col: whole images per task */
    int64_t tasks;
    bool single;        /* grad filter: one worker sums straight into dw */
    size_t col, acc;    /* floats of a worker region: im2col chunk, [K, F] partial sum */
    int64_t regions;
    size_t pack;        /* floats of the packed filter after the regions */
    KConv q;            /* direct grad input: the forward convolution it runs */
    int threads;        /* of the pool the kernel runs on: regions are per thread */
} ConvPath;

/* Threads worth waking for a direct kernel of p's size, at most T: each should get at
 * least CONV_TASK_FLOPS, about 15 us of work, as long as handing a share to a sleeping
 * worker and waiting for it (8-17 us measured on the 2-core Zen 5).  The first layer of
 * the MNIST CNN at batch 1 (1.3 MFLOP) runs on the calling thread. */
static int useful_threads(const KConv *p, int T)
{
    const double flops = 2.0 * (double)conv_m(p) * (double)conv_k(p) * (double)p->f;
    const double most = flops / CONV_TASK_FLOPS;
    return most < 1 ? 1 : most < T ? (int)most : T;
}

/* Whole output rows (n, oy) of r in all, one equal share per thread worth waking. */
static void share_rows(ConvPath *c, const KConv *p, int64_t r, int T)
{
    int t = useful_threads(p, T);
    c->rows = (r + t - 1) / t;
    c->tasks = nchunks(r, c->rows);
}

static ConvPath conv_path(const KConv *p, KConvOp op, int T)
{
    ConvPath c = { .threads = T };
    const int64_t M = conv_m(p), K = conv_k(p), F = p->f;
    if (M <= 0 || F <= 0)
        return c;   /* the kernels return at once (grad input: zeroes dx) */
    c.rows = conv_chunk_rows(p);
    c.tasks = nchunks(M, c.rows);
    switch (op) {
    case KCONV_FORWARD:
        if (conv_direct(p)) {
            c.direct = true;
            share_rows(&c, p, p->n * p->oh, T);
            c.pack = conv_pack_floats(p);   /* kept where no copy is made (conv_pack_needed) */
            return c;
        }
        c.col = conv_is_identity(p) ? 0 : (size_t)(c.rows * K);
        break;
    case KCONV_GRAD_INPUT:
        if (conv_direct_gi(p, &c.q)) {   /* dx = q(dy), the flipped filter packed first */
            c.direct = true;
            share_rows(&c, p, c.q.n * c.q.oh, T);
            c.pack = conv_pack_floats(&c.q);
            return c;
        }
        {   /* a few tasks per thread, of whole images */
            int64_t tasks = p->n < 4 * (int64_t)T ? p->n : 4 * (int64_t)T;
            if (tasks < 1)
                tasks = 1;
            c.per_task = (p->n + tasks - 1) / tasks;
            c.tasks = nchunks(p->n, c.per_task);
        }
        if (c.rows > c.per_task * p->oh * p->ow)   /* a chunk never spans two tasks */
            c.rows = c.per_task * p->oh * p->ow;
        c.col = conv_is_identity(p) ? 0 : (size_t)(c.rows * K);
        break;
    default:   /* KCONV_GRAD_FILTER */
        c.direct = conv_direct(p);
        if (c.direct)
            share_rows(&c, p, p->n * p->oh, T);
        c.single = c.tasks == 1 || T == 1;
        c.col = c.direct || conv_is_identity(p) ? 0 : (size_t)(c.rows * K);
        c.acc = c.single ? 0 : (size_t)(K * F);
        break;
    }
    if (c.col + c.acc > 0)
        c.regions = c.single ? 1 : (c.tasks < T ? c.tasks : T);
    return c;
}

static size_t path_floats(const ConvPath *c) { return (size_t)c->regions * (c->col + c->acc) + c->pack; }

size_t kern_conv_scratch(const KConv *p, KConvOp op, int threads)
{
    ConvPath c = conv_path(p, op, threads);
    return path_floats(&c) * sizeof(float);
}

size_t kern_conv2d_scratch(const KConv *p, int threads)
{
    size_t most = 0;
    for (int op = 0; op < KCONV_OP_COUNT; op++) {
        size_t b = kern_conv_scratch(p, (KConvOp)op, threads);
        if (b > most)
            most = b;
    }
    return most;
}

/* Where the packed filter goes: after the worker regions. */
static float *pack_at(const ConvPath *c, float *scratch) { return scratch + (size_t)c->regions * (c->col + c->acc); }

/* The part [*lo, *hi) of a kernel window of size k starting at input index i0 that
 * falls inside [0, size). */
static void window_span(int64_t i0, int64_t k, int64_t size, int64_t *lo, int64_t *hi)
{
    int64_t l = i0 < 0 ? -i0 : 0, h = size - i0 < k ? size - i0 : k;
    if (l > k)
        l = k;
    if (h < l)
        h = l;
    *lo = l;
    *hi = h;
}

/* Rows [m0, m0 + rows) of the im2col matrix into col[rows, K]. */
static void im2col(const KConv *p, const float *x, int64_t m0, int64_t rows, float *restrict col)
{
    const int64_t C = p->c, K = conv_k(p), rowlen = p->kw * C;
    int64_t ox = m0 % p->ow, t = m0 / p->ow, oy = t % p->oh, n = t / p->oh;
    for (int64_t m = 0; m < rows; m++) {
        float *dst = col + m * K;
        const float *xn = x + n * p->h * p->w * C;
        int64_t iy0 = oy * p->sh - p->pt, ix0 = ox * p->sw - p->pl, kxl, kxh;
        window_span(ix0, p->kw, p->w, &kxl, &kxh);
        for (int64_t ky = 0; ky < p->kh; ky++) {
            int64_t iy = iy0 + ky;
            float *d = dst + ky * rowlen;
            if (iy < 0 || iy >= p->h || kxh == kxl) {
                memset(d, 0, (size_t)rowlen * sizeof *d);
                continue;
            }
            if (kxl > 0)
                memset(d, 0, (size_t)(kxl * C) * sizeof *d);
            memcpy(d + kxl * C, xn + (iy * p->w + ix0 + kxl) * C, (size_t)((kxh - kxl) * C) * sizeof *d);
            if (kxh < p->kw)
                memset(d + kxh * C, 0, (size_t)((p->kw - kxh) * C) * sizeof *d);
        }
        if (++ox == p->ow) {
            ox = 0;
            if (++oy == p->oh) {
                oy = 0;
                n++;
            }
        }
    }
}

/* The adjoint of im2col for rows [m0, m0 + rows): dx += scatter(col). */
static void col2im_add(const KConv *p, const float *restrict col, int64_t m0, int64_t rows, float *dx)
{
    const int64_t C = p->c, K = conv_k(p), rowlen = p->kw * C;
    int64_t ox = m0 % p->ow, t = m0 / p->ow, oy = t % p->oh, n = t / p->oh;
    for (int64_t m = 0; m < rows; m++) {
        const float *src = col + m * K;
        float *dxn = dx + n * p->h * p->w * C;
        int64_t iy0 = oy * p->sh - p->pt, ix0 = ox * p->sw - p->pl, kxl, kxh;
        window_span(ix0, p->kw, p->w, &kxl, &kxh);
        int64_t len = (kxh - kxl) * C;
        if (len > 0) {
            for (int64_t ky = 0; ky < p->kh; ky++) {
                int64_t iy = iy0 + ky;
                if (iy < 0 || iy >= p->h)
                    continue;
                const float *s = src + ky * rowlen + kxl * C;
                float *d = dxn + (iy * p->w + ix0 + kxl) * C;
                for (int64_t j = 0; j < len; j++)
                    d[j] += s[j];
            }
        }
        if (++ox == p->ow) {
            ox = 0;
            if (++oy == p->oh) {
                oy = 0;
                n++;
            }
        }
    }
}

/* The three convolution kernels split their rows of output pixels into chunks and
 * the chunks across the thread pool, each thread with its own scratch region; BLAS
 * runs single-threaded inside (util/pool.h).  One chunk alone runs on the calling
 * thread with BLAS's own threads.  Each follows its ConvPath. */
typedef struct ConvJob {
    const KConv *p;
    const ConvPath *path;
    KIsa isa;           /* the variant of the direct kernels and of kern_gemm's */
    const float *bias;  /* forward epilogue: bias per filter, or NULL */
    EwAct act;          /* forward epilogue */
    Pool *pool;
    const float *x, *w, *dy;
    float *y, *dx, *dw;
    float *scratch;
    const KPool *q;        /* grad filter through a max pool: dy is q's gradient, routed by idx */
    const int32_t *idx;
    const float *yv;       /* the pooled values for relu's mask, or NULL */
} ConvJob;

static float *worker_scratch(const ConvJob *j, int worker)
{
    return j->scratch + (size_t)worker * (j->path->col + j->path->acc);
}

/* Output pixels [m0, m0 + mc) of the forward convolution into y (pixel m0 at y[0]),
 * then the bias and activation, by im2col (into col, mc rows of K) and sgemm. */
static void conv_pixels(Pool *pool, KIsa isa, const KConv *p, const float *x, const float *w, const float *bias,
                        EwAct act, int64_t m0, int64_t mc, float *col, float *y)
{
    const int64_t K = conv_k(p), F = p->f;
    const float *a = x + m0 * K;
    if (!conv_is_identity(p)) {
        im2col(p, x, m0, mc, col);
        a = col;
    }
    kern_gemm(pool, isa, false, false, (size_t)mc, (size_t)F, (size_t)K, 1.0f, a, w, 0.0f, y);
    if (bias)
        kern_bias_act(y, (size_t)mc, (size_t)F, bias, act);
}

static void conv_task(void *arg, int task, int worker)
{
    const ConvJob *j = arg;
    const KConv *p = j->p;
    const int64_t M = conv_m(p), rows = j->path->rows;
    int64_t m0 = (int64_t)task * rows, mc = M - m0 < rows ? M - m0 : rows;
    conv_pixels(j->pool, j->isa, p, j->x, j->w, j->bias, j->act, m0, mc, j->path->col ? worker_scratch(j, worker) : NULL,
                j->y + m0 * p->f);
}

/* The direct forward: whole output rows (n, oy), one equal share per thread, on the
 * filter as stored or packed into the scratch. */
static void conv_direct_task(void *arg, int task, int worker)
{
    (void)worker;
    const ConvJob *j = arg;
    const int64_t R = j->p->n * j->p->oh, r0 = (int64_t)task * j->path->rows;
    direct_rows(j->isa, j->p, j->x, j->w, j->bias, j->act, j->y + r0 * j->p->ow * j->p->f, r0,
                R - r0 < j->path->rows ? R - r0 : j->path->rows);
}

static void conv_forward(Pool *pool, KIsa isa, const KConv *p, const float *x, const float *w, const float *bias,
                         EwAct act, float *y, float *scratch)
{
    if (conv_m(p) <= 0 || p->f <= 0)
        return;
    const ConvPath path = conv_path(p, KCONV_FORWARD, pool_threads(pool));
    ConvJob j = { .p = p, .path = &path, .isa = isa, .bias = bias, .act = act, .pool = pool, .x = x, .w = w,
                  .y = y, .scratch = scratch };
    if (path.direct) {
        j.w = direct_filter(isa, p, w, pack_at(&path, scratch));
        pool_run(pool, (int)path.tasks, conv_direct_task, &j);
        return;
    }
    pool_run(pool, (int)path.tasks, conv_task, &j);
}

void kern_conv2d(Pool *pool, KIsa isa, const KConv *p, const float *x, const float *w, float *y, float *scratch)
{
    conv_forward(pool, isa, p, x, w, NULL, EW_NO_ACT, y, scratch);
}

void kern_conv2d_bias_act(Pool *pool, KIsa isa, const KConv *p, const float *x, const float *w, const float *bias,
                          EwAct act, float *y, float *scratch)
{
    conv_forward(pool, isa, p, x, w, bias, act, y, scratch);
}

/* Grad input scatters each chunk into overlapping patches of dx, so tasks are whole
 * images: different tasks never write the same element of dx. */
static void conv_grad_input_task(void *arg, int task, int worker)
{
    const ConvJob *j = arg;
    const KConv *p = j->p;
    const int64_t K = conv_k(p), F = p->f, per_image = p->oh * p->ow, rows = j->path->rows;
    const int64_t per_task = j->path->per_task;
    const bool ident = j->path->col == 0;   /* the im2col matrix is dx itself */
    int64_t n0 = (int64_t)task * per_task, n1 = n0 + per_task < p->n ? n0 + per_task : p->n;
    if (!ident)
        memset(j->dx + n0 * p->h * p->w * p->c, 0, (size_t)((n1 - n0) * p->h * p->w * p->c) * sizeof(float));
    for (int64_t m0 = n0 * per_image; m0 < n1 * per_image; m0 += rows) {
        int64_t mc = n1 * per_image - m0 < rows ? n1 * per_image - m0 : rows;
        /* dcol[mc, K] = dy[mc, F] W^T; the identity case writes it straight into dx. */
        float *dcol = ident ? j->dx + m0 * K : worker_scratch(j, worker);
        kern_gemm(j->pool, j->isa, false, true, (size_t)mc, (size_t)K, (size_t)F, 1.0f, j->dy + m0 * F, j->w, 0.0f, dcol);
        if (!ident)
            col2im_add(p, dcol, m0, mc, j->dx);
    }
}

void kern_conv2d_grad_input(Pool *pool, KIsa isa, const KConv *p, const float *dy, const float *w, float *dx,
                            float *scratch)
{
    if (conv_m(p) <= 0 || p->f <= 0) {
        memset(dx, 0, (size_t)(p->n * p->h * p->w * p->c) * sizeof *dx);
        return;
    }
    const ConvPath path = conv_path(p, KCONV_GRAD_INPUT, pool_threads(pool));
    if (path.direct) {   /* dx = q(dy), the flipped filter packed first */
        float *wp = pack_at(&path, scratch);
        if (conv_bf16_ok(isa, &path.q))
            conv_bf16_pack_flipped(p, w, wp);
        else
            conv_pack_flipped(p, w, wp);
        ConvJob j = { .p = &path.q, .path = &path, .isa = isa, .act = EW_NO_ACT, .pool = pool, .x = dy,
                      .w = wp, .y = dx };
        pool_run(pool, (int)path.tasks, conv_direct_task, &j);
        return;
    }
    ConvJob j = { .p = p, .path = &path, .isa = isa, .pool = pool, .w = w, .dy = dy, .dx = dx, .scratch = scratch };
    pool_run(pool, (int)path.tasks, conv_grad_input_task, &j);
}

/* Grad filter: task t sums its chunks into partial sum t mod T (the T threads' [K, F]
 * regions of the scratch); the partial sums are added in order afterwards, so the
 * result is the same at every run.  The slot is the task's, not the worker's: inside
 * a parallel stage (exec/stages.c) the pool runs every task on one thread, and the
 * partial sums, and so the bits, must be those of the split run. */
static void conv_grad_filter_task(void *arg, int task, int worker)
{
    const ConvJob *j = arg;
    const KConv *p = j->p;
    const ConvPath *path = j->path;
    const int64_t M = conv_m(p), K = conv_k(p), F = p->f, rows = path->rows;
    const int T = path->threads;
    int64_t m0 = (int64_t)task * rows, mc = M - m0 < rows ? M - m0 : rows;
    float *acc = path->single ? j->dw : worker_scratch(j, task % T) + path->col;
    /* the first task of each slot overwrites it */
    bool first = path->single ? task == 0 : task < T;
    if (path->direct) {   /* whole output rows: m0 is row m0 */
        if (first)
            memset(acc, 0, (size_t)(K * F) * sizeof *acc);
        const int64_t R = p->n * p->oh, rc = R - m0 < rows ? R - m0 : rows;
        if (j->q)
            conv_direct_grad_filter_pooled(kern_variant(j->isa), p, j->q, j->x, j->idx, j->yv, j->dy, acc, m0, rc);
        else if (conv_bf16_grad_filter_ok(j->isa, p))
            conv_bf16_grad_filter(p, j->x, j->dy, acc, m0, rc);
        else
            conv_direct_grad_filter(kern_variant(j->isa), p, j->x, j->dy, acc, m0, rc);
        return;
    }
    const float *col = j->x + m0 * K;
    if (path->col) {
        float *buf = worker_scratch(j, worker);
        im2col(p, j->x, m0, mc, buf);
        col = buf;
    }
    kern_gemm(j->pool, j->isa, true, false, (size_t)K, (size_t)F, (size_t)mc, 1.0f, col, j->dy + m0 * F, first ? 0.0f : 1.0f, acc);
}

/* Both filter gradients: dy dense, or (j.q) routed through a max pool. */
static void grad_filter_run(ConvJob j, float *dw)
{
    const KConv *p = j.p;
    const int64_t M = conv_m(p), K = conv_k(p), F = p->f;
    if (M <= 0 || F <= 0) {
        if (K > 0 && F > 0)
            memset(dw, 0, (size_t)(K * F) * sizeof *dw);
        return;
    }
    Pool *pool = j.pool;
    const ConvPath path = conv_path(p, KCONV_GRAD_FILTER, pool_threads(pool));
    j.path = &path;
    j.dw = dw;
    if (path.single) {   /* one worker: accumulate straight into dw, chunk after chunk */
        for (int64_t t = 0; t < path.tasks; t++)
            conv_grad_filter_task(&j, (int)t, 0);
        return;
    }
    pool_run(pool, (int)path.tasks, conv_grad_filter_task, &j);
    memcpy(dw, worker_scratch(&j, 0) + path.col, (size_t)(K * F) * sizeof *dw);
    for (int w = 1; w < path.regions; w++) {
        const float *acc = worker_scratch(&j, w) + path.col;
        for (int64_t i = 0; i < K * F; i++)
            dw[i] += acc[i];
    }
}

void kern_conv2d_grad_filter(Pool *pool, KIsa isa, const KConv *p, const float *x, const float *dy, float *dw,
                             float *scratch)
{
    grad_filter_run((ConvJob){ .p = p, .isa = isa, .pool = pool, .x = x, .dy = dy, .scratch = scratch }, dw);
}

/* The direct path only: its sums are the ones conv_direct_grad_filter_pooled follows. */
bool kern_conv2d_grad_filter_pooled_exact(const KConv *p, const KPool *q) { return conv_direct(p) && conv_pooled_ok(p, q); }

/* Measured against the dense kernel alone (bench/convbench, one thread, avx512, CPU
 * time, loaded Zen 5), beside which the scatter and a dense bias gradient are saved:
 * large's conv1 (960 pixels a row, K = 27, 8 filters) through its 4x4 pool 10.5 ms
 * against 15.5, through a 2x2 pool 24 against 16; the MNIST CNN's conv1 (28 pixels,
 * K = 25, 32 filters) through its 2x2 pool 15-18 ms against 2.2, through a 4x4 one
 * 8.7 against 2.0 (each row's K x F sums added to the accumulator, for a handful of
 * terms).  So windows of 16 cells or more and rows of 16 K pixels or more. */
static int pooled_mode;   /* test hook (kern.h) */
void kern_conv_set_pooled(int mode) { pooled_mode = mode; }

bool kern_conv2d_grad_filter_pooled_pays(const KConv *p, const KPool *q)
{
    if (pooled_mode != 0)
        return pooled_mode > 0 && kern_conv2d_grad_filter_pooled_exact(p, q);
    return kern_conv2d_grad_filter_pooled_exact(p, q) && q->kh * q->kw >= 16 && p->ow >= 16 * conv_k(p);
}

void kern_conv2d_grad_filter_pooled(Pool *pool, KIsa isa, const KConv *p, const KPool *q, const float *x,
                                    const int32_t *idx, const float *y, const float *dpool, float *dw, float *scratch)
{
    grad_filter_run((ConvJob){ .p = p, .isa = isa, .pool = pool, .x = x, .dy = dpool, .scratch = scratch, .q = q,
                               .idx = idx, .yv = y },
                    dw);
}

/* ---- convolution and max pooling in one (conv2d_maxpool) ------------------------------
 * Each thread takes one share of the pooled rows (n, py) and goes through them in bands
 * of up to `band` rows of one image: the convolution rows their windows read, made by
 * the forward kernels above (conv_direct_forward, conv_pixels: the same choice of kernel
 * as kern_conv2d_bias_act, and each output pixel's value does not depend on how the
 * rows are cut) into the thread's scratch, then pooled by maxpool_rows as kern_maxpool
 * pools them.  Where windows overlap (stride < size), the rows the next band of the
 * same image needs again are moved to the front instead of made twice.
 * On im2col + sgemm the values are right but not always the same bits: OpenBLAS's
 * sgemm rounds a row differently by its place in the call (its M blocking), and the
 * bands cut the calls differently from kern_conv2d's chunks; hence
 * kern_conv2d_maxpool_exact, which the fusion pass asks. */
enum { CONVPOOL_BAND_BYTES = 96 << 10 };   /* conv rows per thread: well inside L2 */

/* Test hook (kern.h): pooled rows per band; 0 restores the automatic choice. */
static int64_t band_override;
void kern_conv_set_pool_band(size_t rows) { band_override = (int64_t)rows; }

/* Pooled rows per band: as many as fit their conv rows in CONVPOOL_BAND_BYTES, >= 1. */
static int64_t convpool_band(const KConv *p, const KPool *q)
{
    int64_t rowb = p->ow * p->f * (int64_t)sizeof(float), fit = rowb > 0 ? CONVPOOL_BAND_BYTES / rowb : 1;
    int64_t g = band_override ? band_override : fit > q->kh ? (fit - q->kh) / q->sh + 1 : 1;
    return g < q->oh ? g : q->oh > 0 ? q->oh : 1;
}

/* Conv rows that band pooled rows can read: at most the image's. */
static int64_t convpool_band_rows(const KConv *p, const KPool *q)
{
    int64_t rows = (convpool_band(p, q) - 1) * q->sh + q->kh;
    return rows < p->oh ? rows : p->oh;
}

/* Per thread: the band of conv rows, then (im2col only) one chunk of im2col; in whole
 * 64 bytes, so that the packed filter after the regions is as aligned as the scratch. */
static size_t convpool_worker_floats(const KConv *p, const KPool *q)
{
    size_t band = (size_t)convpool_band_rows(p, q) * (size_t)(p->ow * p->f), ring = conv_direct_pool_floats(p, q);
    band = band > ring ? band : ring;   /* or the planar path's planes (conv_direct_pool) */
    bool col = !conv_direct(p) && !conv_is_identity(p);
    return (band + (col ? (size_t)conv_chunk_rows(p) * (size_t)conv_k(p) : 0) + 15) / 16 * 16;
}

bool kern_conv2d_maxpool_exact(const KConv *p) { return conv_direct(p); }

size_t kern_conv2d_maxpool_scratch(const KConv *p, const KPool *q, int threads)
{
    size_t pack = conv_direct(p) ? conv_pack_floats(p) : 0;
    return ((size_t)threads * convpool_worker_floats(p, q) + pack) * sizeof(float);
}

typedef struct ConvPoolJob {
    const KConv *p;
    const KPool *q;
    const float *x, *w, *bias;  /* w: packed on the direct path where conv_pack_needed */
    EwAct act;
    Pool *pool;
    KIsa isa;
    bool direct;                /* the direct kernels, else im2col + sgemm */
    bool planar;                /* in one pass, pooled as made (conv_direct_pool) */
    float *y, *scratch;
    int32_t *idx;               /* NULL, or the pool's argmax (kern_conv2d_maxpool_argmax) */
    int64_t rows;               /* pooled rows (n, py) per task */
    int64_t band;               /* pooled rows per band */
    int shares;                 /* tasks of convpool_rows_task */
} ConvPoolJob;

/* Conv rows [a, b) of image n into dst (row a at dst[0]). */
static void convpool_conv_rows(const ConvPoolJob *j, int64_t n, int64_t a, int64_t b, float *col, float *dst)
{
    const KConv *p = j->p;
    if (j->direct) {
        direct_rows(j->isa, p, j->x, j->w, j->bias, j->act, dst, n * p->oh + a, b - a);
        return;
    }
    const int64_t m0 = (n * p->oh + a) * p->ow, m1 = (n * p->oh + b) * p->ow, chunk = conv_chunk_rows(p);
    for (int64_t m = m0; m < m1; m += chunk) {
        int64_t mc = m1 - m < chunk ? m1 - m : chunk;
        conv_pixels(j->pool, j->isa, p, j->x, j->w, j->bias, j->act, m, mc, col, dst + (m - m0) * p->f);
    }
}

static void convpool_task(void *arg, int task, int worker)
{
    const ConvPoolJob *j = arg;
    const KConv *p = j->p;
    const KPool *q = j->q;
    const int64_t R = p->n * q->oh, r0 = (int64_t)task * j->rows, r1 = R - r0 < j->rows ? R : r0 + j->rows;
    const int64_t rowf = p->ow * p->f;
    float *band = j->scratch + (size_t)worker * convpool_worker_floats(p, q);
    float *col = band + (size_t)convpool_band_rows(p, q) * (size_t)rowf;
    if (j->planar) {
        const int64_t at = r0 * q->ow * q->c;
        conv_direct_pool(kern_variant(j->isa), p, q, j->x, j->w, j->bias, j->y + at, j->idx ? j->idx + at : NULL, r0,
                         r1 - r0, band);
        return;
    }
    int64_t have_n = -1, have0 = 0, have1 = 0;   /* conv rows [have0, have1) of image have_n in band */
    for (int64_t r = r0; r < r1;) {
        const int64_t n = r / q->oh, py0 = r % q->oh;
        int64_t py1 = py0 + j->band < q->oh ? py0 + j->band : q->oh;
        if (py1 - py0 > r1 - r)
            py1 = py0 + (r1 - r);
        /* the conv rows the windows of pooled rows [py0, py1) read */
        int64_t c0 = py0 * q->sh - q->pt, c1 = (py1 - 1) * q->sh - q->pt + q->kh;
        c0 = c0 < 0 ? 0 : c0 > p->oh ? p->oh : c0;
        c1 = c1 > p->oh ? p->oh : c1 < c0 ? c0 : c1;
        int64_t from = c0;
        if (have_n == n && c0 >= have0 && c0 < have1) {
            memmove(band, band + (c0 - have0) * rowf, (size_t)((have1 - c0) * rowf) * sizeof *band);
            from = have1;
        }
        if (c1 > from)
            convpool_conv_rows(j, n, from, c1, col, band + (from - c0) * rowf);
        have_n = n, have0 = c0, have1 = c1 > from ? c1 : from;
        const int64_t at = (n * q->oh + py0) * q->ow * q->c;
        maxpool_rows(j->isa, q, band, c0, py0, py1, j->y + at, j->idx ? j->idx + at : NULL);
        r += py1 - py0;
    }
}

/* One image whose pooled rows do not share evenly over the threads (the MNIST CNN's
 * second convolution at batch 1: 7 pooled rows, 4 + 3 on two threads) but whose
 * convolution rows fit one worker's band (14 of them, 7 + 7): the threads make the
 * convolution rows in equal shares into that band, then the caller pools them all.
 * The same values as the bands (a pixel's value does not depend on how rows are cut),
 * pooled by the same maxpool_rows. */
static bool convpool_whole(const ConvPoolJob *j, int t)
{
    const KConv *p = j->p;
    return j->direct && t > 1 && p->n == 1 && j->q->oh % t != 0 && p->oh >= t &&
           convpool_band_rows(p, j->q) >= p->oh;
}

static void convpool_rows_task(void *arg, int task, int worker)
{
    (void)worker;
    const ConvPoolJob *j = arg;
    const KConv *p = j->p;
    const int64_t a = p->oh * task / j->shares, b = p->oh * (task + 1) / j->shares;
    if (b > a)
        direct_rows(j->isa, p, j->x, j->w, j->bias, j->act, j->scratch + a * p->ow * p->f, a, b - a);
}

static void convpool_run(Pool *pool, KIsa isa, const KConv *p, const KPool *q, const float *x, const float *w,
                         const float *bias, EwAct act, float *y, int32_t *idx, float *scratch)
{
    const int64_t R = p->n * q->oh;
    if (R <= 0 || q->ow <= 0 || p->f <= 0)
        return;
    const int T = pool_threads(pool), t = useful_threads(p, T);
    ConvPoolJob j = { .p = p, .q = q, .x = x, .w = w, .bias = bias, .act = bias ? act : EW_NO_ACT, .pool = pool,
                      .isa = isa, .direct = conv_direct(p), .y = y, .scratch = scratch, .idx = idx,
                      .rows = (R + t - 1) / t, .band = convpool_band(p, q) };
    if (j.direct)
        j.w = direct_filter(isa, p, w, scratch + (size_t)T * convpool_worker_floats(p, q));
    j.planar = j.direct && conv_direct_pool_ok(kern_variant(isa), p, q, j.bias, j.act);
    if (!j.planar && convpool_whole(&j, t)) {
        j.shares = t;
        pool_run(pool, t, convpool_rows_task, &j);
        maxpool_rows(isa, q, scratch, 0, 0, q->oh, y, idx);
        return;
    }
    pool_run(pool, (int)nchunks(R, j.rows), convpool_task, &j);
}

void kern_conv2d_maxpool(Pool *pool, KIsa isa, const KConv *p, const KPool *q, const float *x, const float *w,
                         const float *bias, EwAct act, float *y, float *scratch)
{
    convpool_run(pool, isa, p, q, x, w, bias, act, y, NULL, scratch);
}

void kern_conv2d_maxpool_argmax(Pool *pool, KIsa isa, const KConv *p, const KPool *q, const float *x, const float *w,
                                const float *bias, EwAct act, float *y, int32_t *idx, float *scratch)
{
    convpool_run(pool, isa, p, q, x, w, bias, act, y, idx, scratch);
}
