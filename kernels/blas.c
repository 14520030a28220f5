/* Matrix product and BLAS housekeeping.  Every BLAS call in graphc lives here. */
#include "kernels/kern.h"
#include "kernels/variant.h"
#include "util/mem.h"
#include "util/pool.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* BLAS runs single-threaded: the caller's pool supplies the threads (OpenBLAS's own
 * busy-wait, and split small-M products badly).  Set once, before the first call. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void)
{
    if (openblas_get_num_threads() != 1)
        openblas_set_num_threads(1);
}

/* A panel: an [rows, N] block of a product made into scratch for its consumer (see
 * kern_gemm_panel_rows).  Half of a Zen core's 512 KiB L2, so the panel is still in
 * cache when its consumer reads it.  Each call packs the other operand ([K, N]) again,
 * so small panels cost more: on the MNIST CNN's 3136 x 1024 Adam update, one thread,
 * with [K, N] = [128, 1024] 128 KiB panels took 5-9% longer than the product and the
 * update apart, 256 KiB within 2%, 1 MiB 5% less; with [16, 1024], 192 KiB and more
 * 6% less. */
enum { GEMM_PANEL_BYTES = 256 << 10 };

/* One BLAS call on a block: explicit leading dimensions.  A single row of C (a dense
 * layer at batch 1) is a matrix-vector product: sgemv reads B once where sgemm would
 * first pack all of it (the 3136 x 1024 layer of the MNIST CNN: 1.7 ms as a GEMM, a
 * third of that as a GEMV). */
static void sgemm_block(bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
                        const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    pthread_once(&blas_once, blas_single);
    if (M == 1) {
        /* C[1, N] = A[1, K] op(B): y = op(B)^T x, x = op(A)'s one row (A's first
         * column, stride lda, when A is stored transposed).  beta = 0 must overwrite
         * whatever C holds, NaN included, which sgemv's scaling need not do: clear C
         * first. */
        if (beta == 0.0f)
            memset(C, 0, N * sizeof *C);
        blasint incx = ta ? (blasint)lda : 1;
        if (tb)   /* B stored [N, K] */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)N, (blasint)K, alpha, B, (blasint)ldb, A, incx, beta, C, 1);
        else      /* B stored [K, N] */
            cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)K, (blasint)N, alpha, B, (blasint)ldb, A, incx, beta, C, 1);
        (void)ldc;
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

/* Nothing to multiply: C = beta*C, with beta = 0 overwriting (even NaN). */
static void scale_only(float *C, size_t n, float beta)
{
    if (beta == 0.0f)
        memset(C, 0, n * sizeof *C);
    else if (beta != 1.0f)
        for (size_t i = 0; i < n; i++)
            C[i] *= beta;
}

typedef struct GemmJob {
    bool ta, tb, split_m;
    size_t M, N, K, parts;
    float alpha, beta;
    const float *A, *B;
    float *C;
} GemmJob;

/* Part `part` of C: a block of rows (split_m) or of columns, each computed whole over K.
 * Not the same bits as one call: sgemm rounds a row by its place in the call. */
static void gemm_part(void *arg, int part, int worker)
{
    (void)worker;
    const GemmJob *j = arg;
    size_t total = j->split_m ? j->M : j->N;
    size_t lo = total * (size_t)part / j->parts / 16 * 16, hi = part + 1 == (int)j->parts ? total
                                                                 : total * (size_t)(part + 1) / j->parts / 16 * 16;
    if (hi <= lo)
        return;
    if (j->split_m) {
        const float *A = j->ta ? j->A + lo : j->A + lo * j->K;
        sgemm_block(j->ta, j->tb, hi - lo, j->N, j->K, j->alpha, A, j->ta ? j->M : j->K, j->B, j->tb ? j->K : j->N,
                    j->beta, j->C + lo * j->N, j->N);
    } else {
        size_t lda = j->ta ? j->M : j->K, ldb = j->tb ? j->K : j->N;
        const float *B = j->tb ? j->B + lo * j->K : j->B + lo;
        sgemm_block(j->ta, j->tb, j->M, hi - lo, j->K, j->alpha, j->A, lda, B, ldb, j->beta, j->C + lo, j->N);
    }
}

/* A matrix-vector product (M = 1: a dense layer at batch 1) over the pool: the K rows of
 * op(B) cut into one contiguous block per thread, each thread's sgemv reading its
 * block once (a stream of rows, where blocks of columns would read every row in strided
 * pieces: on the AVX2 machine two such column blocks on two threads took 1.4x the time
 * of one call on one), into a partial [1, N] of its own; then C = alpha * (the partials
 * summed in block order) + beta C.  The cut depends on K and the thread count only, so
 * the bits do too.  Worth a wake-up of the pool from GEMV_SPLIT_BYTES of B on: below
 * it, one sgemv from the cache is faster than the hand-off. */
enum { GEMV_SPLIT_BYTES = 1 << 20, GEMV_MAX_N = 4096 };

typedef struct GemvJob {
    bool ta, tb;
    size_t N, K, parts, lda;
    const float *A, *B;
    float (*part)[GEMV_MAX_N];
} GemvJob;

static size_t gemv_k0(size_t K, size_t parts, size_t p) { return K * p / parts; }

static void gemv_part(void *arg, int part, int worker)
{
    (void)worker;
    const GemvJob *j = arg;
    size_t k0 = gemv_k0(j->K, j->parts, (size_t)part), k1 = gemv_k0(j->K, j->parts, (size_t)part + 1);
    /* A's elements k0.. (stride lda when A is stored transposed), B's rows k0.. ([K, N])
     * or columns k0.. ([N, K]) */
    const float *a = j->ta ? j->A + k0 * j->lda : j->A + k0;
    const float *b = j->tb ? j->B + k0 : j->B + k0 * j->N;
    sgemm_block(j->ta, j->tb, 1, j->N, k1 - k0, 1.0f, a, j->lda, b, j->tb ? j->K : j->N, 0.0f, j->part[part], j->N);
}

/* parts > 1 when the product splits (see above). */
static size_t gemv_parts(size_t N, size_t K, int threads)
{
    if (threads < 2 || N > GEMV_MAX_N || (double)N * (double)K * sizeof(float) < GEMV_SPLIT_BYTES)
        return 1;
    size_t parts = (size_t)threads < POOL_MAX_THREADS ? (size_t)threads : POOL_MAX_THREADS;
    return K / parts >= 64 ? parts : 1;
}

static void gemv_split(Pool *pool, size_t parts, bool ta, bool tb, size_t N, size_t K, float alpha, const float *A,
                       const float *B, float beta, float *C)
{
    /* on the caller's stack: the pool's threads write it while this one waits */
    float part[POOL_MAX_THREADS < 8 ? POOL_MAX_THREADS : 8][GEMV_MAX_N];
    if (parts > sizeof part / sizeof part[0])
        parts = sizeof part / sizeof part[0];
    GemvJob j = { ta, tb, N, K, parts, ta ? 1 : K, A, B, part };
    pool_run(pool, (int)parts, gemv_part, &j);
    for (size_t n = 0; n < N; n++) {
        float s = part[0][n];
        for (size_t p = 1; p < parts; p++)
            s += part[p][n];
        C[n] = beta == 0.0f ? alpha * s : alpha * s + beta * C[n];
    }
}

/* ---- graphc's own GEMM (kernels/gemm_micro.h, docs/kernels.md "GEMM") --------------
 * The x86 variants run it for every product, OpenBLAS only in the portable one (no FMA
 * to build the kernel on) and for one row of C times B stored transposed (sgemv reads
 * it in place; the kernel would pack all of B).  Measured one thread at a time, side by
 * side on the Zen 5 machine (bench/gemm, CPU time, medians): the avx512 variant against
 * OpenBLAS's Haswell core (what OPENBLAS_CORETYPE=Haswell gives) 1.6-1.8x on the MNIST
 * dense layer's three products at batch 256 and 1.3-1.5x at batch 2 to 16, and level
 * with its Cooperlake (AVX-512) core (0.88-1.05x), so graphc's speed no longer depends
 * on which core the environment picks; the avx2 variant is level with the Haswell core
 * (0.97-1.04x at batch 256, 1.0-1.3x at batch 4 to 16) and takes the same path, so that
 * the two variants give the same bits.  Nothing about the path depends on the variant.
 * Without its packing buffer (gc_malloc failed), sgemm runs instead. */
static int own_mode;   /* test hook: kern_gemm_set_own */
void kern_gemm_set_own(int mode) { own_mode = mode; }

typedef enum OwnPath { OWN_NONE, OWN_GEMM, OWN_GEMV } OwnPath;

static OwnPath own_path(const KernVariant *kv, size_t M, bool tb)
{
    if (!kv->gemm || own_mode < 0)
        return OWN_NONE;
    if (M == 1)
        return !tb ? OWN_GEMV : own_mode > 0 ? OWN_GEMM : OWN_NONE;
    return OWN_GEMM;
}

static KGemm own_args(bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
                      const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    KGemm g = { ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc, NULL };
    return g;
}

/* A packing buffer of `floats`, 64-byte aligned, from *raw (gc_free it); NULL when out
 * of memory. */
static float *own_buffer(size_t floats, void **raw)
{
    *raw = floats < SIZE_MAX / sizeof(float) - 16 ? gc_malloc((floats + 16) * sizeof(float)) : NULL;
    if (!*raw)
        return NULL;
    return (float *)(((uintptr_t)*raw + 63) & ~(uintptr_t)63);
}

/* g on this thread through the variant's GEMM; false (C untouched) when its buffer
 * cannot be had: the caller runs sgemm. */
static bool own_serial(const KernVariant *kv, const KGemm *g)
{
    void *raw;
    float *buf = own_buffer(kv->gemm_buf(g), &raw);
    if (!buf)
        return false;
    kv->gemm(g, buf);
    gc_free(raw);
    return true;
}

/* The product on this thread: the variant's GEMM or GEMV where own_path says, else
 * sgemm_block. */
static void gemm_any(const KernVariant *kv, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha,
                     const float *A, size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    KGemm g = own_args(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    switch (own_path(kv, M, tb)) {
    case OWN_GEMV: kv->gemv(&g, 0, N); return;
    case OWN_GEMM: if (own_serial(kv, &g)) return; break;
    default: break;
    }
    sgemm_block(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* act over g's C block, row by row (kern_unary is elementwise: the bits do not depend
 * on the block). */
static void own_act(const KGemm *g, EwAct act)
{
    if (act.fn < 0)
        return;
    for (size_t i = 0; i < g->M; i++)
        kern_unary((EwUnary)act.fn, act.p, g->C + i * g->ldc, g->C + i * g->ldc, g->N);
}

/* The parts of a product cut over the pool: rows (split_m) or columns, in units. */
typedef struct OwnJob {
    KGemm g;
    EwAct act;   /* applied by each part to its block of C after its product */
    const KernVariant *kv;
    bool split_m;
    size_t parts, unit, stride;   /* stride: floats of buffer per part */
    float *buf;
} OwnJob;

/* Part `part` of j's product: its rows or columns [lo, hi), as a product of its own. */
static bool own_part_args(const OwnJob *j, int part, KGemm *g)
{
    size_t total = j->split_m ? j->g.M : j->g.N, units = (total + j->unit - 1) / j->unit;
    size_t lo = units * (size_t)part / j->parts * j->unit, hi = units * ((size_t)part + 1) / j->parts * j->unit;
    hi = hi < total ? hi : total;
    if (hi <= lo)
        return false;
    *g = j->g;
    if (j->split_m) {
        g->M = hi - lo;
        g->A += j->g.ta ? lo : lo * j->g.lda;
        g->C += lo * j->g.ldc;
    } else {
        g->N = hi - lo;
        g->B += j->g.tb ? lo * j->g.ldb : lo;
        g->C += lo;
        if (g->bias)
            g->bias += lo;
    }
    return true;
}

static void own_part(void *arg, int part, int worker)
{
    (void)worker;
    const OwnJob *j = arg;
    KGemm g;
    if (!own_part_args(j, part, &g))
        return;
    j->kv->gemm(&g, j->buf + (size_t)part * j->stride);
    own_act(&g, j->act);
}

/* One row over the pool (a dense layer at batch 1): B's rows cut into one contiguous
 * block per thread, each thread's GEMV streaming its block into a partial row of its
 * own, then C = alpha (the partials summed in block order) + beta C.  Cutting the
 * columns instead had each thread read half of every 4 KB row of the MNIST CNN's
 * 3136 x 1024 layer, no faster than one thread: 0.160-0.174 ms on two threads against
 * 0.105-0.110 ms for blocks of rows (bench/gemm, Zen 5, quiet, 2026-12-02).  The bits
 * are each block's chain of FMAs, summed: they depend on K and the thread count, not
 * on the variant. */
typedef struct OwnGemvJob {
    KGemm g;
    const KernVariant *kv;
    size_t parts, stride;
    float *part;
} OwnGemvJob;

static void gemv_rows_part(void *arg, int part, int worker)
{
    (void)worker;
    const OwnGemvJob *j = arg;
    size_t k0 = j->g.K * (size_t)part / j->parts, k1 = j->g.K * ((size_t)part + 1) / j->parts;
    KGemm g = j->g;
    g.A += k0 * (g.ta ? g.lda : 1);
    g.B += k0 * g.ldb;
    g.K = k1 - k0;
    g.alpha = 1.0f;
    g.beta = 0.0f;
    g.C = j->part + (size_t)part * j->stride;
    if (g.K == 0)
        memset(g.C, 0, g.N * sizeof *g.C);
    else
        j->kv->gemv(&g, 0, g.N);
}

static bool gemv_rows_split(Pool *pool, const KernVariant *kv, const KGemm *g, size_t parts)
{
    void *raw;
    OwnGemvJob j = { *g, kv, parts, (g->N + 15) / 16 * 16, NULL };
    j.part = own_buffer(j.stride * parts, &raw);
    if (!j.part)
        return false;
    pool_run(pool, (int)parts, gemv_rows_part, &j);
    for (size_t n = 0; n < g->N; n++) {
        float s = j.part[n];
        for (size_t p = 1; p < parts; p++)
            s += j.part[p * j.stride + n];
        g->C[n] = g->beta == 0.0f ? g->alpha * s : fmaf(g->beta, g->C[n], g->alpha * s);
    }
    gc_free(raw);
    return true;
}

/* Few rows, few columns, long K (large.net's dense layer at batch 4: 4 x 31680 by
 * 31680 x 64, 8 MB of weights): cut along M or N the product has one part, so one
 * thread read B, at 9-10 GB/s (two panels of 32 columns, each half of every row).
 * Here K is cut into KSPLIT_ROWS-row parts, each one contiguous block of B read once,
 * row by row, whole (kv->gemm_kpart), into a partial [M, N] of its own, the threads
 * taking consecutive parts; then C = alpha (the partials summed in part order) (+ beta
 * C) (+ bias), act.  The parts depend on K alone, not on the thread count, so the
 * bits are the same on any pool (a parallel stage's op runs it on one thread), in
 * both executors and both x86 variants; they are not the one chain over K that the
 * other paths make (a row of C at batch 4 no longer has the bits it has at batch 32). */
enum { KSPLIT_MAX_M = 16, KSPLIT_MAX_N = 128, KSPLIT_ROWS = 2048, KSPLIT_MAX_PARTS = 64,
       KSPLIT_BYTES = 1 << 20 };

static bool ksplit_ok(size_t M, size_t N, size_t K, bool tb)
{
    return !tb && M >= 2 && M <= KSPLIT_MAX_M && N <= KSPLIT_MAX_N && K >= 2 * KSPLIT_ROWS &&
           (double)N * (double)K * sizeof(float) >= KSPLIT_BYTES;
}

static size_t ksplit_parts(size_t K)
{
    size_t parts = (K + KSPLIT_ROWS - 1) / KSPLIT_ROWS;
    return parts < KSPLIT_MAX_PARTS ? parts : KSPLIT_MAX_PARTS;
}

typedef struct KsplitJob {
    KGemm g;
    const KernVariant *kv;
    size_t parts, workers;
    float *part;   /* parts x [M, N] */
} KsplitJob;

static void ksplit_part(void *arg, int worker_task, int worker)
{
    (void)worker;
    const KsplitJob *j = arg;
    const size_t w = (size_t)worker_task, mn = j->g.M * j->g.N;
    for (size_t p = j->parts * w / j->workers; p < j->parts * (w + 1) / j->workers; p++)
        j->kv->gemm_kpart(&j->g, j->g.K * p / j->parts, j->g.K * (p + 1) / j->parts, j->part + p * mn, j->g.N);
}

/* g (ldc N) by parts of K, then the epilogue; false: no buffer (C untouched). */
static bool own_ksplit(Pool *pool, const KernVariant *kv, const KGemm *g, const float *bias, EwAct act)
{
    const size_t parts = ksplit_parts(g->K), mn = g->M * g->N, T = (size_t)pool_threads(pool);
    void *raw;
    KsplitJob j = { *g, kv, parts, T < parts ? T : parts, NULL };
    j.part = own_buffer(parts * mn, &raw);
    if (!j.part)
        return false;
    pool_run(pool, (int)j.workers, ksplit_part, &j);
    for (size_t m = 0; m < g->M; m++) {
        float *c = g->C + m * g->ldc;
        for (size_t n = 0; n < g->N; n++) {
            float s = j.part[m * g->N + n];
            for (size_t p = 1; p < parts; p++)
                s += j.part[p * mn + m * g->N + n];
            float out = g->beta == 0.0f ? g->alpha * s : fmaf(g->beta, c[n], g->alpha * s);
            c[n] = bias ? out + bias[n] : out;
        }
        if (act.fn >= 0)
            kern_unary((EwUnary)act.fn, act.p, c, c, g->N);
    }
    gc_free(raw);
    return true;
}

/* A weight's gradient over many tokens: A stored [K, M] (x^T dy), a long K and a small
 * C (charlm: K = 1024 tokens, C [64, 256], [256, 64], [64, 64]).  Cut along M or N,
 * each thread packed all of B [K, N] again for its part of C and ran fewer rows per
 * panel of B.  Instead K is cut into parts of about WKSPLIT_ROWS rows, their number
 * from K alone; each part's whole [M, N] product is one call of the variant's GEMM
 * (one chain of FMAs over its k, from +0) into a partial of its own, the threads
 * taking consecutive parts; then C = alpha (the partials summed in part order)
 * (+ beta C), on the calling thread (16K floats: less than a hand-off).  The bits
 * depend on K, not on the thread count, in both executors and both x86 variants; they
 * are not the one chain over K of the other paths.  kernels/update.c's Adam makes the
 * same parts and the same sum (kern_gemm_kparts), so the fused update keeps the bits
 * of the product and the update apart.  Not with bf16 operands nor in the portable
 * variant (sgemm), and not for up to 16 rows of C (a batch's rows: gemm_rows and
 * own_ksplit stream B for those). */
enum { WKSPLIT_ROWS = 512, WKSPLIT_MAX_PARTS = 8, WKSPLIT_MAX_MN = 1 << 16 };

size_t kern_gemm_kparts_of(bool ta, bool tb, size_t M, size_t N, size_t K)
{
    if (!ta || tb || M <= KSPLIT_MAX_M || K < 2 * WKSPLIT_ROWS || M * N > WKSPLIT_MAX_MN)
        return 1;
    size_t parts = K / WKSPLIT_ROWS;
    return parts < WKSPLIT_MAX_PARTS ? parts : WKSPLIT_MAX_PARTS;
}

size_t kern_gemm_kparts(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K)
{
    if (kern_isa_bf16(isa) || own_path(kern_variant(isa), M, tb) != OWN_GEMM)
        return 1;
    return kern_gemm_kparts_of(ta, tb, M, N, K);
}

/* part p of `parts`: rows k0.. of op(A) and op(B) (A's rows when it is stored [K, M],
 * else its columns) */
static void gemm_kpart(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, size_t parts, size_t p,
                       const float *A, const float *B, float *part)
{
    size_t k0 = K * p / parts, k1 = K * (p + 1) / parts;
    gemm_any(kern_variant(isa), ta, tb, M, N, k1 - k0, 1.0f, A + k0 * (ta ? M : 1), ta ? M : K,
             B + k0 * (tb ? 1 : N), tb ? K : N, 0.0f, part, N);
}

typedef struct KpartsJob {
    bool ta, tb;
    KIsa isa;
    size_t M, N, K, parts, tasks;
    const float *A, *B;
    float *part;   /* parts x [M, N] */
} KpartsJob;

static void kparts_task(void *arg, int task, int worker)
{
    (void)worker;
    const KpartsJob *j = arg;
    for (size_t p = j->parts * (size_t)task / j->tasks; p < j->parts * ((size_t)task + 1) / j->tasks; p++)
        gemm_kpart(j->isa, j->ta, j->tb, j->M, j->N, j->K, j->parts, p, j->A, j->B, j->part + p * j->M * j->N);
}

void kern_gemm_kparts_sum(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, size_t parts,
                          const float *A, const float *B, float *part)
{
    const size_t T = (size_t)pool_threads(pool), mn = M * N;
    KpartsJob j = { ta, tb, isa, M, N, K, parts, T < parts ? T : parts, A, B, part };
    pool_run(pool, (int)j.tasks, kparts_task, &j);
    for (size_t p = 1; p < parts; p++)   /* the threads' parts, summed in part order here */
        for (size_t i = 0; i < mn; i++) part[i] += part[p * mn + i];
}

/* false: no buffer (C untouched) */
static bool own_wksplit(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, size_t parts,
                        float alpha, const float *A, const float *B, float beta, float *C)
{
    const size_t mn = M * N;
    void *raw;
    float *part = own_buffer(parts * mn, &raw);
    if (!part)
        return false;
    kern_gemm_kparts_sum(pool, isa, ta, tb, M, N, K, parts, A, B, part);
    for (size_t i = 0; i < mn; i++)
        C[i] = beta == 0.0f ? alpha * part[i] : fmaf(beta, C[i], alpha * part[i]);
    gc_free(raw);
    return true;
}

/* kern_gemm's product through the variant's GEMM, cut over the pool along the longer
 * of M and N (each part packs the other operand whole: cutting the longer packs the
 * least) when it is worth a wake-up; one row through its GEMV, by blocks of B's rows
 * from GEMV_SPLIT_BYTES on (gemv_rows_split).  false: a buffer could not be had. */
static bool own_split(Pool *pool, const KernVariant *kv, OwnPath path, bool ta, bool tb, size_t M, size_t N, size_t K,
                      float alpha, const float *A, const float *B, float beta, float *C, const float *bias, EwAct act)
{
    KGemm g = own_args(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
    size_t T = (size_t)pool_threads(pool);
    if (path == OWN_GEMV) {   /* bias and act: the caller's, after */
        if (T > 1 && K >= T && (double)N * (double)K * sizeof(float) >= GEMV_SPLIT_BYTES)
            return gemv_rows_split(pool, kv, &g, T);
        kv->gemv(&g, 0, N);
        return true;
    }
    if (ksplit_ok(M, N, K, tb))
        return own_ksplit(pool, kv, &g, bias, act);
    g.bias = bias;
    OwnJob j = { g, act, kv, M > N, 1, 1, 0, NULL };
    size_t longer = j.split_m ? M : N;
    j.unit = j.split_m ? 1 : (size_t)kv->gemm_nr;
    if (T > 1 && 2.0 * (double)M * (double)N * (double)K >= 4e6 && longer >= 2 * j.unit * T)
        j.parts = T;
    if (j.parts > (longer + j.unit - 1) / j.unit)
        j.parts = (longer + j.unit - 1) / j.unit;
    for (size_t p = 0; p < j.parts; p++) {
        KGemm pg;
        if (own_part_args(&j, (int)p, &pg)) {
            size_t f = kv->gemm_buf(&pg);
            j.stride = f > j.stride ? f : j.stride;
        }
    }
    j.stride = (j.stride + 15) / 16 * 16;
    void *raw;
    j.buf = own_buffer(j.stride * j.parts, &raw);
    if (!j.buf)
        return false;
    pool_run(pool, (int)j.parts, own_part, &j);
    gc_free(raw);
    return true;
}

void kern_gemm_rows(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, size_t r0, size_t r1, float alpha,
                    const float *A, const float *B, float beta, float *C)
{
    if (r1 <= r0 || N == 0)
        return;
    if (K == 0 || alpha == 0.0f) {
        scale_only(C, (r1 - r0) * N, beta);
        return;
    }
    /* rows r0.. of op(A): A's columns from r0 when it is stored [K, M] (lda M) */
    const float *Ar = ta ? A + r0 : A + r0 * K;
    if (kern_isa_bf16(isa) &&
        kern_gemm_bf16(NULL, ta, tb, r1 - r0, N, K, alpha, Ar, ta ? M : K, B, tb ? K : N, beta, C, N, NULL, EW_NO_ACT))
        return;
    gemm_any(kern_variant(isa), ta, tb, r1 - r0, N, K, alpha, Ar, ta ? M : K, B, tb ? K : N, beta, C, N);
}

void kern_gemm_block(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
                     const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (kern_isa_bf16(isa) && kern_gemm_bf16(NULL, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, EW_NO_ACT))
        return;
    gemm_any(kern_variant(isa), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void kern_gemm(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha,
               const float *A, const float *B, float beta, float *C)
{
    if (M == 0 || N == 0)
        return;
    if (K == 0 || alpha == 0.0f) {
        scale_only(C, M * N, beta);
        return;
    }
    /* Row-major: A is [M,K] (lda K) or, transposed, stored [K,M] (lda M); same for B.
     * Dimensions must fit the BLAS integer (int); callers chunk big products.
     * Large products are split across the pool along the larger of M and N, in blocks
     * of whole rows or columns (OpenBLAS's own threads are not used: they busy-wait,
     * and split small-M products badly); a single row of C (a dense layer at batch 1)
     * along K (gemv_split).  graphc's own GEMM where own_path says, cut its own way. */
    if (kern_isa_bf16(isa) && kern_gemm_bf16(pool, ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N,
                                             NULL, EW_NO_ACT))
        return;
    const KernVariant *kv = kern_variant(isa);
    OwnPath path = own_path(kv, M, tb);
    size_t kparts = kern_gemm_kparts(isa, ta, tb, M, N, K);
    if (kparts > 1 && own_wksplit(pool, isa, ta, tb, M, N, K, kparts, alpha, A, B, beta, C))
        return;
    if (path != OWN_NONE && own_split(pool, kv, path, ta, tb, M, N, K, alpha, A, B, beta, C, NULL, EW_NO_ACT))
        return;
    size_t T = (size_t)pool_threads(pool), longer = M >= N ? M : N;
    if (M == 1) {
        size_t parts = gemv_parts(N, K, (int)T);
        if (parts > 1) {
            gemv_split(pool, parts, ta, tb, N, K, alpha, A, B, beta, C);
            return;
        }
    }
    GemmJob j = { ta, tb, M >= N, M, N, K, 1, alpha, beta, A, B, C };
    if (T > 1 && M > 1 && 2.0 * (double)M * (double)N * (double)K >= 4e6 && longer >= 32 * T)
        j.parts = T;
    if (j.parts == 1) {
        sgemm_block(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
        return;
    }
    pool_run(pool, (int)j.parts, gemm_part, &j);
}

/* kern_gemm_bias_act's epilogue where the GEMM did not take it: rows of C cut over
 * the pool (from BIAS_SPLIT_FLOATS on: below, the hand-off costs more). */
enum { BIAS_SPLIT_FLOATS = 1 << 17 };

typedef struct BiasJob {
    float *C;
    const float *bias;
    EwAct act;
    size_t M, N, parts;
} BiasJob;

static void bias_part(void *arg, int part, int worker)
{
    (void)worker;
    const BiasJob *j = arg;
    size_t lo = j->M * (size_t)part / j->parts, hi = j->M * ((size_t)part + 1) / j->parts;
    kern_bias_act(j->C + lo * j->N, hi - lo, j->N, j->bias, j->act);
}

void kern_gemm_bias_act(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, const float *A,
                        const float *B, const float *bias, EwAct act, float *C)
{
    if (M == 0 || N == 0)
        return;
    if (kern_isa_bf16(isa) && kern_gemm_bf16(pool, ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 0.0f, C, N,
                                             bias, act))
        return;
    const KernVariant *kv = kern_variant(isa);
    if (K > 0 && own_path(kv, M, tb) == OWN_GEMM &&
        own_split(pool, kv, OWN_GEMM, ta, tb, M, N, K, 1.0f, A, B, 0.0f, C, bias, act))
        return;
    kern_gemm(pool, isa, ta, tb, M, N, K, 1.0f, A, B, 0.0f, C);
    size_t T = (size_t)pool_threads(pool);
    BiasJob j = { C, bias, act, M, N, M * N >= BIAS_SPLIT_FLOATS && M >= T ? T : 1 };
    if (j.parts > 1)
        pool_run(pool, (int)j.parts, bias_part, &j);
    else
        bias_part(&j, 0, 0);
}

/* ---- B packed once (kernels/gemm_micro.h "B packed once") ----------------------------
 * Where the product streams B (gemm_rows: M <= 16; the GEMV: M = 1) and B is a dense
 * layer's weights that a plan reads unchanged from call to call, its panels are made
 * once.  The cut and the chains are the unpacked path's: columns cut over the pool by
 * whole panels for M >= 2 (any cut gives the same bits), K cut into one block per
 * thread for M = 1 with the partials summed in block order exactly as gemv_rows_split
 * does (bits that depend on K and the thread count, as there). */

enum { PACK_PAGE = 2 << 20 };

/* The sizes from which the unpacked path streams B as stored. */
static bool pack_sizes(bool tb, size_t M, size_t N, size_t K)
{
    return !tb && M >= 1 && M <= 16 && (double)N * (double)K * sizeof(float) >= GEMV_SPLIT_BYTES &&
           !ksplit_ok(M, N, K, tb);
}

bool kern_gemm_pack_ok(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K)
{
    (void)ta;
    if (kern_isa_bf16(isa))
        return false;
    const KernVariant *kv = kern_variant(isa);
    return kv->gemm_rows_packed && own_path(kv, M, tb) != OWN_NONE && pack_sizes(tb, M, N, K);
}

void kern_gemm_pack_free(KGemmPack *pk)
{
    gc_free(pk->raw);
    memset(pk, 0, sizeof *pk);
}

bool kern_gemm_pack(KIsa isa, size_t K, size_t N, const float *B, KGemmPack *pk)
{
    const KernVariant *kv = kern_variant(isa);
    const size_t np = (size_t)kv->gemm_pack_np;
    if (!kv->gemm_rows_packed || np == 0) {
        kern_gemm_pack_free(pk);
        return false;
    }
    const size_t panels = (N + np - 1) / np;
    if (!pk->data || pk->np != (int)np || pk->K != K || pk->N != N) {
        kern_gemm_pack_free(pk);
        if ((double)panels * (double)K * (double)np >= (double)(SIZE_MAX / sizeof(float) / 2))
            return false;
        const size_t bytes = (panels * K * np * sizeof(float) + PACK_PAGE - 1) / PACK_PAGE * PACK_PAGE;
        if (!(pk->raw = pk->data = gc_malloc_aligned(bytes, PACK_PAGE)))
            return false;
        madvise(pk->data, bytes, MADV_HUGEPAGE);   /* advice only: 4 KiB pages if refused */
    }
    pk->isa = isa;
    pk->np = (int)np;
    pk->K = K;
    pk->N = N;
    for (size_t p = 0; p < panels; p++) {
        const size_t n0 = p * np, w = N - n0 < np ? N - n0 : np;
        float *dst = pk->data + p * K * np;
        for (size_t k = 0; k < K; k++, dst += np) {
            memcpy(dst, B + k * N + n0, w * sizeof *dst);
            if (w < np)
                memset(dst + w, 0, (np - w) * sizeof *dst);
        }
    }
    return true;
}

typedef struct PackJob {
    KGemm g;
    const KernVariant *kv;
    const KGemmPack *pk;
    EwAct act;
    size_t parts, panels, stride;
    float *part;   /* M = 1: parts x stride floats */
} PackJob;

static void pack_part(void *arg, int part, int worker)
{
    (void)worker;
    const PackJob *j = arg;
    const size_t t = (size_t)part;
    if (j->g.M == 1) {   /* K's block t into partial row t (K >= parts: never empty) */
        j->kv->gemv_packed(&j->g, j->pk->data, j->g.K * t / j->parts, j->g.K * (t + 1) / j->parts,
                           j->part + t * j->stride);
        return;
    }
    const size_t p0 = j->panels * t / j->parts, p1 = j->panels * (t + 1) / j->parts;
    if (p1 <= p0)
        return;
    j->kv->gemm_rows_packed(&j->g, j->pk->data, p0, p1);
    KGemm c = j->g;   /* the activation over this part's columns */
    const size_t n0 = p0 * (size_t)j->pk->np, n1 = p1 * (size_t)j->pk->np;
    c.C += n0;
    c.N = (n1 < j->g.N ? n1 : j->g.N) - n0;
    own_act(&c, j->act);
}

void kern_gemm_bias_act_packed(Pool *pool, KIsa isa, bool ta, size_t M, size_t N, size_t K, const float *A,
                               const KGemmPack *pk, const float *B, const float *bias, EwAct act, float *C)
{
    const KernVariant *kv = kern_variant(isa);
    if (!pk || !pk->data || pk->isa != isa || pk->K != K || pk->N != N || pk->np != kv->gemm_pack_np ||
        !kern_gemm_pack_ok(isa, ta, false, M, N, K)) {
        kern_gemm_bias_act(pool, isa, ta, false, M, N, K, A, B, bias, act, C);
        return;
    }
    const size_t T = (size_t)pool_threads(pool);
    PackJob j = { own_args(ta, false, M, N, K, 1.0f, A, ta ? M : K, NULL, N, 0.0f, C, N), kv, pk, act, 1,
                  (N + (size_t)pk->np - 1) / (size_t)pk->np, (N + 15) / 16 * 16, NULL };
    if (M > 1) {   /* own_split's rule for a wake-up of the pool, in panels */
        j.g.bias = bias;
        if (T > 1 && 2.0 * (double)M * (double)N * (double)K >= 4e6)
            j.parts = T < j.panels ? T : j.panels;
        if (j.parts > 1)
            pool_run(pool, (int)j.parts, pack_part, &j);
        else
            pack_part(&j, 0, 0);
        return;
    }
    /* one row: gemv_rows_split's cut (own_split's rule), the partials, then the pass
     * of kern_bias_act */
    if (T > 1 && K >= T)
        j.parts = T;
    void *raw;
    j.part = own_buffer(j.stride * j.parts, &raw);
    if (!j.part) {
        kern_gemm_bias_act(pool, isa, ta, false, M, N, K, A, B, bias, act, C);
        return;
    }
    if (j.parts > 1)
        pool_run(pool, (int)j.parts, pack_part, &j);
    else
        pack_part(&j, 0, 0);
    for (size_t n = 0; n < N; n++) {
        float s = j.part[n];
        for (size_t p = 1; p < j.parts; p++)
            s += j.part[p * j.stride + n];
        C[n] = 1.0f * s;
    }
    gc_free(raw);
    kern_bias_act(C, 1, N, bias, act);
}

typedef struct BatchJob {
    bool ta, tb;
    size_t batch, M, N, K, parts;
    float alpha, beta;
    const float *A, *B;
    float *C;
    const KernVariant *kv;
} BatchJob;

/* Part `part` of the batch: its run of whole matrices, one call of the variant's GEMM
 * each (on one buffer) where own_path says, else of BLAS. */
static void batch_part(void *arg, int part, int worker)
{
    (void)worker;
    const BatchJob *j = arg;
    size_t lo = j->batch * (size_t)part / j->parts, hi = j->batch * (size_t)(part + 1) / j->parts;
    size_t sa = j->M * j->K, sb = j->K * j->N, sc = j->M * j->N;
    KGemm g = own_args(j->ta, j->tb, j->M, j->N, j->K, j->alpha, j->A, j->ta ? j->M : j->K, j->B, j->tb ? j->K : j->N,
                       j->beta, j->C, j->N);
    void *raw = NULL;
    OwnPath path = own_path(j->kv, j->M, j->tb);
    float *buf = path == OWN_GEMM && lo < hi ? own_buffer(j->kv->gemm_buf(&g), &raw) : NULL;
    for (size_t b = lo; b < hi; b++) {
        g.A = j->A + b * sa;
        g.B = j->B + b * sb;
        g.C = j->C + b * sc;
        if (path == OWN_GEMV || buf) {
            if (buf)
                j->kv->gemm(&g, buf);
            else
                j->kv->gemv(&g, 0, j->N);
            continue;
        }
        sgemm_block(j->ta, j->tb, j->M, j->N, j->K, j->alpha, j->A + b * sa, j->ta ? j->M : j->K, j->B + b * sb,
                    j->tb ? j->K : j->N, j->beta, j->C + b * sc, j->N);
    }
    gc_free(raw);
}

void kern_gemm_batch(Pool *pool, KIsa isa, bool ta, bool tb, size_t batch, size_t M, size_t N, size_t K, float alpha,
                     const float *A, const float *B, float beta, float *C)
{
    if (batch == 0 || M == 0 || N == 0)
        return;
    if (K == 0 || alpha == 0.0f) {
        scale_only(C, batch * M * N, beta);
        return;
    }
    /* Attention's products are many small ones ([T, dk] x [dk, T] per head and example):
     * whole matrices to each thread.  A batch smaller than the pool: each product as
     * kern_gemm splits it. */
    size_t T = (size_t)pool_threads(pool);
    if (batch < T) {
        for (size_t b = 0; b < batch; b++)
            kern_gemm(pool, isa, ta, tb, M, N, K, alpha, A + b * M * K, B + b * K * N, beta, C + b * M * N);
        return;
    }
    BatchJob j = { ta, tb, batch, M, N, K, T, alpha, beta, A, B, C, kern_variant(isa) };
    if (T <= 1 || 2.0 * (double)batch * (double)M * (double)N * (double)K < 1e5)
        j.parts = 1;
    if (j.parts == 1)
        batch_part(&j, 0, 0);
    else
        pool_run(pool, (int)j.parts, batch_part, &j);
}

size_t kern_gemm_panel_rows(size_t M, size_t N)
{
    size_t rows = N ? GEMM_PANEL_BYTES / (N * sizeof(float)) : M;
    if (rows >= 16)
        rows = rows / 16 * 16;
    if (rows < 1)
        rows = 1;
    return rows < M ? rows : M ? M : 1;
}

const char *kern_blas_info(void)
{
    static char buf[256];
    const char *config = openblas_get_config();
    const char *core = openblas_get_corename();
    char version[64] = "OpenBLAS";
    if (config) {
        /* The config string starts "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": keep two words. */
        size_t len = 0;
        int words = 0;
        while (config[len] && len < sizeof version - 1) {
            if (config[len] == ' ' && ++words == 2)
                break;
            len++;
        }
        memcpy(version, config, len);
        version[len] = '\0';
    }
    snprintf(buf, sizeof buf, "%s, core %s", version, core ? core : "unknown");
    return buf;
}
