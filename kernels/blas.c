/* Matrix product and BLAS housekeeping.  Every BLAS call in graphc lives here. */
#include "kernels/kern.h"
#include "util/pool.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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

void kern_gemm_rows(bool ta, bool tb, size_t M, size_t N, size_t K, size_t r0, size_t r1, float alpha,
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
    sgemm_block(ta, tb, r1 - r0, N, K, alpha, Ar, ta ? M : K, B, tb ? K : N, beta, C, N);
}

void kern_gemm_block(bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
                     const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    sgemm_block(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
        kern_gemm_rows(j->ta, j->tb, j->M, j->N, j->K, lo, hi, j->alpha, j->A, j->B, j->beta, j->C + lo * j->N);
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

/* ---- a few rows times a large matrix: a dense layer at a small batch -----------------
 * C[M, N] = alpha A[M, K] B[K, N], no transposes, beta 0, M from 2 to SMALLM_MAX and at
 * least SMALLM_MIN_B_BYTES of B.  sgemm would first pack all of B (the 12.8 MB of the
 * MNIST CNN's 3136 x 1024 layer, for a few rows of work): here B is read as it is stored,
 * a panel of columns at a time (smallm_panel), SMALLM_KB rows of the panel at a time
 * (a block that stays in L1 while every pair of A's rows uses it).  For a pair of rows
 * of A, the block's 2 x KB elements sit broadcast in registers, and each vector of C's
 * two rows is loaded (but for the first block), given its KB fused multiply-adds and
 * stored.  So each element
 * of C is one chain of FMAs over k in order, the vector lanes and the scalar columns
 * past the last whole vector alike: its bits depend neither on how the columns are cut
 * over the pool's threads nor on their number.  One body per vector width, compiled
 * with target attributes (AVX-512; AVX2 + FMA) and taken when the CPU has one;
 * elsewhere sgemm. */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define SMALLM 1
#endif
/* Up to 4 rows: against sgemm on the MNIST CNN's 3136 x 1024 layer, one thread, both
 * measured in turn on the (loaded) Zen 5 machine, medians: 2 rows 0.35 ms against 0.90,
 * 4 rows 0.53 against 0.86, 8 rows 1.0 against 1.06, 16 rows 1.7 against 1.6; from 8
 * rows on, sgemm's packing is paid back. */
enum { SMALLM_MAX = 4, SMALLM_KB = 8, SMALLM_MIN_B_BYTES = 1 << 20 };

#ifdef SMALLM
/* Columns per panel: C's rows over a panel (about 16 KiB) stay in L1 while every block
 * of B's rows goes by, so C costs no traffic beyond L1 and B is read once, 8 runs of a
 * panel's width at a time.  Whole vectors, at least 2. */
static size_t smallm_panel(size_t M, size_t W)
{
    size_t nb = (16 << 10) / (M * sizeof(float)) / W * W;
    return nb < 2 * W ? 2 * W : nb;
}

/* Rows m, m + 1 (mb of them) of C, columns [n0, n1), over B's rows [k0, k0 + kb): when
 * first, C is not read (the chains start at 0); when last, alpha scales the result.
 * NAME##_pair is the common case (2 rows, SMALLM_KB = 8 rows of B), written out so the
 * 16 broadcasts stay in registers; NAME##_tile any other (M odd, the last rows of B). */
#define SMALLM_EIGHT(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define SMALLM_TILE(NAME, TARGET, W, V, LOAD, STORE, FMA, BCAST, ZERO, MUL)                              \
    __attribute__((target(TARGET))) static void NAME##_pair(size_t n0, size_t n1, size_t N, size_t K,      \
                                                            const float *A, const float *B, float *C,      \
                                                            bool first, bool last, float alpha)           \
    {                                                                                                    \
        _Static_assert(SMALLM_KB == 8, "the pair's body is written for 8 rows of B");                    \
        SMALLM_EIGHT(NAME##_A)                                                                           \
        V va = BCAST(alpha);                                                                             \
        bool scale = last && alpha != 1.0f;                                                              \
        size_t n = n0;                                                                                   \
        for (; n + W <= n1; n += W) {                                                                    \
            V c0 = first ? ZERO() : LOAD(C + n), c1 = first ? ZERO() : LOAD(C + N + n), b;               \
            SMALLM_EIGHT(NAME##_F)                                                                       \
            STORE(C + n, scale ? MUL(c0, va) : c0);                                                      \
            STORE(C + N + n, scale ? MUL(c1, va) : c1);                                                  \
        }                                                                                                \
        NAME##_tail(2, SMALLM_KB, n, n1, N, K, A, B, C, first, last, alpha);                             \
    }
#define SMALLM_SCALAR(NAME)                                                                              \
    static void NAME##_tail(int mb, int kb, size_t n0, size_t n1, size_t N, size_t K, const float *A,     \
                            const float *B, float *C, bool first, bool last, float alpha)                \
    {                                                                                                    \
        for (size_t n = n0; n < n1; n++)                                                                 \
            for (int r = 0; r < mb; r++) {                                                               \
                float c = first ? 0.0f : C[(size_t)r * N + n];                                           \
                for (int i = 0; i < kb; i++)                                                             \
                    c = __builtin_fmaf(A[(size_t)r * K + (size_t)i], B[(size_t)i * N + n], c);           \
                C[(size_t)r * N + n] = last && alpha != 1.0f ? c * alpha : c;                            \
            }                                                                                            \
    }
#define SMALLM_DRIVER(NAME, TARGET, W, V, LOAD, STORE, FMA, BCAST, ZERO, MUL)                            \
    /* any tile: whole vectors with the k loop inside, then the scalar columns */                        \
    __attribute__((target(TARGET))) static void NAME##_tile(int mb, int kb, size_t n0, size_t n1, size_t N, \
                                                            size_t K, const float *A, const float *B,     \
                                                            float *C, bool first, bool last, float alpha) \
    {                                                                                                    \
        V va = BCAST(alpha);                                                                             \
        size_t n = n0;                                                                                   \
        for (; n + W <= n1; n += W)                                                                      \
            for (int r = 0; r < mb; r++) {                                                               \
                V c = first ? ZERO() : LOAD(C + (size_t)r * N + n);                                      \
                for (int i = 0; i < kb; i++)                                                             \
                    c = FMA(BCAST(A[(size_t)r * K + (size_t)i]), LOAD(B + (size_t)i * N + n), c);        \
                STORE(C + (size_t)r * N + n, last && alpha != 1.0f ? MUL(c, va) : c);                    \
            }                                                                                            \
        NAME##_tail(mb, kb, n, n1, N, K, A, B, C, first, last, alpha);                                   \
    }                                                                                                    \
    __attribute__((target(TARGET))) static void NAME(size_t M, size_t n0, size_t n1, size_t N, size_t K,  \
                                                     float alpha, const float *A, const float *B, float *C) \
    {                                                                                                    \
        size_t nb = smallm_panel(M, W);                                                                  \
        for (size_t p0 = n0; p0 < n1; p0 += nb) {                                                        \
            size_t p1 = n1 - p0 < nb ? n1 : p0 + nb;                                                     \
            for (size_t k0 = 0; k0 < K; k0 += SMALLM_KB) {                                               \
                int kb = K - k0 < SMALLM_KB ? (int)(K - k0) : SMALLM_KB;                                 \
                bool first = k0 == 0, last = k0 + (size_t)kb == K;                                       \
                for (size_t m = 0; m < M; m += 2) {                                                      \
                    if (m + 1 < M && kb == SMALLM_KB)                                                    \
                        NAME##_pair(p0, p1, N, K, A + m * K + k0, B + k0 * N, C + m * N, first, last, alpha); \
                    else                                                                                 \
                        NAME##_tile(m + 1 < M ? 2 : 1, kb, p0, p1, N, K, A + m * K + k0, B + k0 * N,      \
                                    C + m * N, first, last, alpha);                                      \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
    }

#define V512_LOAD(p) _mm512_loadu_ps(p)
#define V512_STORE(p, v) _mm512_storeu_ps(p, v)
#define V512_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V512_BCAST(x) _mm512_set1_ps(x)
#define V512_ZERO() _mm512_setzero_ps()
#define V512_MUL(a, b) _mm512_mul_ps(a, b)
#define V256_LOAD(p) _mm256_loadu_ps(p)
#define V256_STORE(p, v) _mm256_storeu_ps(p, v)
#define V256_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V256_BCAST(x) _mm256_set1_ps(x)
#define V256_ZERO() _mm256_setzero_ps()
#define V256_MUL(a, b) _mm256_mul_ps(a, b)
SMALLM_SCALAR(smallm_avx512)
SMALLM_SCALAR(smallm_avx2)
#define smallm_avx512_A(i) __m512 a0##i = _mm512_set1_ps(A[i]), a1##i = _mm512_set1_ps(A[K + i]);
#define smallm_avx512_F(i) b = _mm512_loadu_ps(B + i * N + n); c0 = _mm512_fmadd_ps(a0##i, b, c0); c1 = _mm512_fmadd_ps(a1##i, b, c1);
#define smallm_avx2_A(i) __m256 a0##i = _mm256_set1_ps(A[i]), a1##i = _mm256_set1_ps(A[K + i]);
#define smallm_avx2_F(i) b = _mm256_loadu_ps(B + i * N + n); c0 = _mm256_fmadd_ps(a0##i, b, c0); c1 = _mm256_fmadd_ps(a1##i, b, c1);
SMALLM_TILE(smallm_avx512, "avx512f", 16, __m512, V512_LOAD, V512_STORE, V512_FMA, V512_BCAST, V512_ZERO, V512_MUL)
SMALLM_TILE(smallm_avx2, "avx2,fma", 8, __m256, V256_LOAD, V256_STORE, V256_FMA, V256_BCAST, V256_ZERO, V256_MUL)
SMALLM_DRIVER(smallm_avx512, "avx512f", 16, __m512, V512_LOAD, V512_STORE, V512_FMA, V512_BCAST, V512_ZERO, V512_MUL)
SMALLM_DRIVER(smallm_avx2, "avx2,fma", 8, __m256, V256_LOAD, V256_STORE, V256_FMA, V256_BCAST, V256_ZERO, V256_MUL)

typedef void (*SmallMFn)(size_t M, size_t n0, size_t n1, size_t N, size_t K, float alpha, const float *A,
                         const float *B, float *C);

/* Test hook: mode < 0 turns the path off (0: automatic). */
static int smallm_mode;

/* The widest variant this CPU runs and its vector width in floats; NULL without one. */
static SmallMFn smallm_fn(size_t *width)
{
    if (smallm_mode < 0)
        return NULL;
    if (__builtin_cpu_supports("avx512f")) {
        *width = 16;
        return smallm_avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *width = 8;
        return smallm_avx2;
    }
    return NULL;
}

typedef struct SmallMJob {
    size_t M, N, K, parts, unit;
    float alpha;
    const float *A, *B;
    float *C;
    SmallMFn fn;
} SmallMJob;

static void smallm_part(void *arg, int part, int worker)
{
    (void)worker;
    const SmallMJob *j = arg;
    size_t units = (j->N + j->unit - 1) / j->unit;
    size_t n0 = units * (size_t)part / j->parts * j->unit, n1 = units * ((size_t)part + 1) / j->parts * j->unit;
    j->fn(j->M, n0, n1 < j->N ? n1 : j->N, j->N, j->K, j->alpha, j->A, j->B, j->C);
}
#endif

void kern_gemm_set_small_m(int mode)
{
#ifdef SMALLM
    smallm_mode = mode;
#else
    (void)mode;
#endif
}

/* The small-M path where it applies (true: C is made), its columns cut over the pool
 * in blocks of whole vectors when the product is worth a wake-up (as kern_gemm's). */
static bool small_m(Pool *pool, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                    const float *B, float beta, float *C)
{
#ifdef SMALLM
    size_t W = 0;
    SmallMFn fn = ta || tb || beta != 0.0f || M < 2 || M > SMALLM_MAX ||
                          (double)K * (double)N * sizeof(float) < SMALLM_MIN_B_BYTES
                      ? NULL
                      : smallm_fn(&W);
    if (!fn || N < W)
        return false;
    size_t T = (size_t)pool_threads(pool), units = (N + W - 1) / W;
    size_t parts = 2.0 * (double)M * (double)N * (double)K >= 4e6 ? T : 1;
    SmallMJob j = { M, N, K, parts < units ? parts : units, W, alpha, A, B, C, fn };
    pool_run(pool, (int)j.parts, smallm_part, &j);
    return true;
#else
    (void)pool, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)B, (void)beta, (void)C;
    return false;
#endif
}

void kern_gemm(Pool *pool, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha,
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
     * along K (gemv_split). */
    size_t T = (size_t)pool_threads(pool), longer = M >= N ? M : N;
    if (M == 1) {
        size_t parts = gemv_parts(N, K, (int)T);
        if (parts > 1) {
            gemv_split(pool, parts, ta, tb, N, K, alpha, A, B, beta, C);
            return;
        }
    }
    if (small_m(pool, ta, tb, M, N, K, alpha, A, B, beta, C))
        return;
    GemmJob j = { ta, tb, M >= N, M, N, K, 1, alpha, beta, A, B, C };
    if (T > 1 && M > 1 && 2.0 * (double)M * (double)N * (double)K >= 4e6 && longer >= 32 * T)
        j.parts = T;
    if (j.parts == 1) {
        sgemm_block(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
        return;
    }
    pool_run(pool, (int)j.parts, gemm_part, &j);
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
