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
     * and split small-M products badly).  A single row of C (a dense layer at batch 1)
     * stays one sgemv: cut into blocks of columns, each part reads B in strided pieces
     * of rows, and the two parts on two threads took 1.4x the time of one call on one
     * (3136 x 1024, B warm in the cache: 0.33-0.36 against 0.24-0.25 ms). */
    GemmJob j = { ta, tb, M >= N, M, N, K, 1, alpha, beta, A, B, C };
    size_t T = (size_t)pool_threads(pool), longer = M >= N ? M : N;
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
