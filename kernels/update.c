/* Optimizer updates fused into the GEMM that makes their gradient, so the gradient is
 * never stored whole (graph/fuse.c's matmul_update and matmul_grad_update; the story of
 * each fusion, its conditions and its rounding, is in docs/architecture.md). */
#include <stdint.h>
#include "kernels/kern.h"
#include "kernels/split.h"

/* ---- momentum: v = op(A) op(B) + mu v (+ l2 w), then w -= lr v --------------------- */
typedef struct AxpyJob {
    float *w, *v;
    float lr, l2;
    Range r;
} AxpyJob;

static void axpy_part(void *arg, int part, int worker)
{
    (void)worker;
    const AxpyJob *j = arg;
    size_t lo, hi;
    range_of(&j->r, part, &lo, &hi);
    if (j->l2 != 0.0f)   /* weight decay into the velocity, before w changes */
        for (size_t i = lo; i < hi; i++) j->v[i] += j->l2 * j->w[i];
    kern_sgd(j->w + lo, j->v + lo, hi - lo, j->lr);
}

/* v += l2 w (when l2 is not 0), then w -= lr v, over the pool, as kern_momentum updates w. */
static void sgd_split(Pool *pool, float *w, float *v, size_t n, float lr, float l2)
{
    AxpyJob j = { w, v, lr, l2, split_range(n, 16, pool_threads(pool)) };
    pool_run(pool, j.r.parts, axpy_part, &j);
}

void kern_gemm_momentum(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, const float *A,
                        const float *B, float *w, float *v, float lr, float mu, float l2)
{
    kern_gemm(pool, isa, ta, tb, M, N, K, 1.0f, A, B, mu, v);
    sgd_split(pool, w, v, M * N, lr, l2);
}

/* ---- Adam, AdamW, RMSprop: the gradient a panel of rows at a time ----------------------
 * (or, at a long K and a small weight, by kern_gemm's parts of K: optim_kparts below).
 * The [M, N] gradient is made kern_gemm_panel_rows(M, N) rows at a time into scratch
 * (one BLAS call each, kern_gemm_rows), then kern_optim runs on those rows of w and its
 * state while the panel is in cache, so only a panel per thread exists.  The panels are
 * a fixed grid of the rows, whatever the thread count, so the bits do not depend on it;
 * each pool task takes a run of whole panels and makes them in its own panel of the
 * scratch. */
typedef struct OptimPanels {
    size_t rows, panels;   /* rows per panel (the last may have fewer), panels */
    int tasks;
} OptimPanels;

static size_t panel_override;   /* test hook: kern_gemm_optim_set_panel */
void kern_gemm_optim_set_panel(size_t rows) { panel_override = rows; }

/* A weight that fits one panel is still made in two (from PANEL_HALVE_ROWS rows on:
 * a transformer's [64, 256] and [256, 64] gradients of K = 1024 rows ran on one
 * thread); the grid depends on M and N only, as before. */
enum { PANEL_HALVE_ROWS = 32 };

static OptimPanels optim_panels(size_t M, size_t N, int threads)
{
    OptimPanels p = { kern_gemm_panel_rows(M, N), 0, 1 };
    if (p.rows >= M && M >= PANEL_HALVE_ROWS) p.rows = (M + 1) / 2;
    if (panel_override) p.rows = panel_override < M ? panel_override : M ? M : 1;
    p.panels = (M + p.rows - 1) / p.rows;
    size_t T = (size_t)threads;
    p.tasks = (int)(p.panels < T ? p.panels : T);
    if (p.tasks < 1) p.tasks = 1;
    return p;
}

/* A long K and a small weight (a transformer's x^T dy over its tokens): kern_gemm cuts
 * K into parts (kern_gemm_kparts, kernels/blas.c), each thread packing its own rows of
 * dy once, where panels of rows each packed all of dy.  The same parts here, each
 * part's [M, N] into scratch, summed in part order on this thread and handed to
 * kern_optim whole: the product's bits, so those of the ops apart.  Never with the
 * test hook's panels. */
static size_t optim_kparts(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K)
{
    return panel_override ? 1 : kern_gemm_kparts(isa, ta, tb, M, N, K);
}

size_t kern_gemm_optim_scratch(bool ta, bool tb, size_t M, size_t N, size_t K, int threads)
{
    OptimPanels p = optim_panels(M, N, threads);
    size_t panels = (size_t)p.tasks * p.rows * N, kparts = kern_gemm_kparts_of(ta, tb, M, N, K);
    size_t parts = kparts > 1 ? kparts * M * N : 0;   /* the isa's, or the panels (bf16, portable) */
    return (panels > parts ? panels : parts) * sizeof(float);
}

typedef struct OptimJob {
    bool ta, tb;
    size_t M, N, K;
    const float *A, *B;
    float *w, *const *st, *scratch;
    const KOptim *o;
    OptimPanels p;
} OptimJob;

static void optim_part(void *arg, int task, int worker)
{
    (void)worker;
    const OptimJob *j = arg;
    float *panel = j->scratch + (size_t)task * j->p.rows * j->N;
    size_t tasks = (size_t)j->p.tasks, first = j->p.panels * (size_t)task / tasks;
    size_t end = j->p.panels * (size_t)(task + 1) / tasks;
    for (size_t q = first; q < end; q++) {
        size_t r0 = q * j->p.rows, r1 = r0 + j->p.rows < j->M ? r0 + j->p.rows : j->M, at = r0 * j->N;
        kern_gemm_rows(j->o->isa, j->ta, j->tb, j->M, j->N, j->K, r0, r1, 1.0f, j->A, j->B, 0.0f, panel);
        float *st[KOPTIM_MAX_STATE];
        for (int k = 0; k < KOPTIM_MAX_STATE; k++) st[k] = j->st[k] ? j->st[k] + at : NULL;
        kern_optim(j->o, j->w + at, st, panel, (r1 - r0) * j->N);
    }
}

void kern_gemm_optim(Pool *pool, bool ta, bool tb, size_t M, size_t N, size_t K, const float *A, const float *B,
                     const KOptim *o, float *w, float *const *st, float *scratch)
{
    const int T = pool_threads(pool);
    const size_t parts = optim_kparts(o->isa, ta, tb, M, N, K);
    if (parts > 1) {   /* kern_gemm's parts and sum */
        kern_gemm_kparts_sum(pool, o->isa, ta, tb, M, N, K, parts, A, B, scratch);
        kern_optim(o, w, st, scratch, M * N);
        return;
    }
    OptimJob j = { ta, tb, M, N, K, A, B, w, st, scratch, o, optim_panels(M, N, T) };
    pool_run(pool, j.p.tasks, optim_part, &j);
}

/* ---- a dense layer's backward with its weight's update (matmul_grad_update) ------------
 * A dense layer's backward whose input x is a relu output, the three ops apart being
 * dx = dy w^T, the mask x > 0 ? dx : 0 and w's update from x^T dy.  The output may be x's buffer, so x must be
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
    float lr, l2;     /* l2: weight decay (SGD: w's rows scaled by 1 - lr l2 in their GEMM) */
    KIsa isa;         /* SGD: the variant of its GEMMs */
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

/* The scratch: momentum's signs of x, a bit each; SGD's [B, P] panel
 * for each thread that runs one.  The pool runs task t on worker t mod its threads (a
 * job of one task, or one inside a job, on worker 0), so with fewer panels than threads
 * only the first `panels` workers take one: dense_back_panel's region is the worker's. */
size_t kern_dense_backward_scratch(size_t B, size_t K, bool sgd, int threads)
{
    if (!sgd) return (B * K + 31) / 32 * sizeof(uint32_t);
    size_t P = dense_panel(B, K), panels = (K + P - 1) / P, T = (size_t)threads;
    return (panels < T ? panels : T) * B * P * sizeof(float);
}

static void dense_back_panel(void *arg, int panel, int worker)
{
    const DenseBackJob *j = arg;
    size_t j0 = (size_t)panel * j->P, p = j->K - j0 < j->P ? j->K - j0 : j->P;
    float *s = j->scratch + (size_t)worker * j->B * j->P, *w = j->w + j0 * j->N;
    kern_gemm_block(j->isa, false, true, j->B, p, j->N, 1.0f, j->dy, j->N, w, j->N, 0.0f, s, p);
    kern_gemm_block(j->isa, true, false, p, j->N, j->B, -j->lr, j->x + j0, j->K, j->dy, j->N, 1.0f - j->lr * j->l2, w, j->N);
    for (size_t b = 0; b < j->B; b++) {
        const float *xb = j->x + b * j->K + j0;
        kern_unary_grad(EW_RELU, 0.0f, xb, s + b * p, j->out + b * j->K + j0, p);
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


void kern_dense_backward_sgd(Pool *pool, KIsa isa, const float *x, const float *dy, float *w, float *out, size_t B,
                             size_t K, size_t N, float lr, float l2, float *scratch)
{
    DenseBackJob j = { x, dy, w, out, scratch, NULL, B, K, N, dense_panel(B, K), lr, l2, isa, { 0, 1, 1 } };
    pool_run(pool, (int)((K + j.P - 1) / j.P), dense_back_panel, &j);
}

void kern_dense_backward_momentum(Pool *pool, KIsa isa, const float *x, const float *dy, float *w, float *v, float *out,
                                  size_t B, size_t K, size_t N, float lr, float mu, float l2, float *scratch)
{
    DenseBackJob j = { x, dy, w, out, scratch, (uint32_t *)scratch, B, K, N, 0, lr, l2, isa,
                       split_range(B * K, 32, pool_threads(pool)) };
    pool_run(pool, j.r.parts, dense_signs_part, &j);
    kern_gemm(pool, isa, true, false, K, N, B, 1.0f, x, dy, mu, v);
    kern_gemm(pool, isa, false, true, B, K, N, 1.0f, dy, w, 0.0f, out);
    sgd_split(pool, w, v, K * N, lr, l2);
    pool_run(pool, j.r.parts, dense_mask_part, &j);
}
