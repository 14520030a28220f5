/* Matrix product and BLAS housekeeping.  Every BLAS call in graphc lives here. */
#include "exec/kern.h"
#include "util/pool.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

void kern_gemm(bool ta, bool tb, size_t M, size_t N, size_t K, float alpha,
               const float *A, const float *B, float beta, float *C)
{
    if (M == 0 || N == 0)
        return;
    if (K == 0 || alpha == 0.0f) {
        /* Nothing to multiply: C = beta*C, with beta = 0 overwriting (even NaN). */
        size_t n = M * N;
        if (beta == 0.0f)
            memset(C, 0, n * sizeof *C);
        else if (beta != 1.0f)
            for (size_t i = 0; i < n; i++)
                C[i] *= beta;
        return;
    }
    /* Row-major: A is [M,K] (lda K) or, transposed, stored [K,M] (lda M); same for B.
     * Dimensions must fit the BLAS integer (int); callers chunk big products. */
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha,
                A, (blasint)(ta ? M : K), B, (blasint)(tb ? K : N),
                beta, C, (blasint)N);
}

static int blas_default_threads = -1;   /* OpenBLAS's own count, saved before the first change */
static int blas_threads = 1;            /* what BLAS uses outside the pool's parallel regions */

/* Inside a parallel region every pool thread calls BLAS on its own share: BLAS must not
 * start threads of its own there, or the cores are oversubscribed. */
static void region_enter(void) { openblas_set_num_threads(1); }
static void region_leave(void) { openblas_set_num_threads(blas_threads); }

void kern_blas_threads(int n)
{
    if (blas_default_threads < 0)
        blas_default_threads = openblas_get_num_threads();
    if (n <= 0)
        n = blas_default_threads;
    if (n < 1)
        n = 1;
    blas_threads = n;
    if (n != openblas_get_num_threads())
        openblas_set_num_threads(n);
    pool_set_threads(n);
    pool_set_region_hooks(region_enter, region_leave);
}

const char *kern_blas_info(void)
{
    static char buf[256];
    const char *config = openblas_get_config();
    const char *core = openblas_get_corename();
    int threads = openblas_get_num_threads();
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
    snprintf(buf, sizeof buf, "%s, core %s, %d thread%s", version, core ? core : "unknown",
             threads, threads == 1 ? "" : "s");
    return buf;
}
