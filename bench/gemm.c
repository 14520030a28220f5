/* bench/gemm.c: graphc's own GEMM (kernels/gemm_micro.h) against OpenBLAS's sgemm, the
 * two measured in turn on each shape, so a loaded machine slows both alike.  Prints, per
 * shape, the median CPU time of each (getrusage-like: the process's CPU clock, so the
 * time the threads spent computing, robust to the load where wall time is not) and
 * GFLOP/s per CPU-second, and the median wall time.
 *   bench/gemm [--threads T] [--isa NAME] [--reps R] [M,N,K[,ta,tb,beta]] ...
 * Without shapes: the MNIST CNN's dense layer (3136 x 1024) at batch 256 (forward, the
 * input's gradient, the weight's fused with SGD), 16 and 1.
 *
 * On one thread, each repeat also runs an FMA loop of the kernels' vector width (16
 * independent chains, 2 FLOPs a lane) on the same CPU-time clock, between the two
 * products, and the last columns hold its median and each product's share of it.
 * bench/peak's FMA figure is wall time: under the shared VM's load (5-7) it read 71
 * GFLOP/s where a thread's CPU time gave 225, so only a peak taken this way, in the
 * same minute as the products, says how far from the FMAs a product is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/kern.h"
#include "util/pool.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BENCH_X86 1
#endif

typedef struct Shape {
    size_t M, N, K;
    int ta, tb;
    float beta;
} Shape;

static double now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef BENCH_X86
/* Read at run time, so the compiler cannot fold the chains. */
static volatile float fma_m = 0.999999f, fma_c = 1e-6f;

__attribute__((target("avx512f"))) static float fma_avx512(long iters)
{
    const __m512 m = _mm512_set1_ps(fma_m), c = _mm512_set1_ps(fma_c);
    __m512 a[16];
    for (int i = 0; i < 16; i++)
        a[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < iters; k++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            a[i] = _mm512_fmadd_ps(a[i], m, c);
    for (int i = 1; i < 16; i++)
        a[0] = _mm512_add_ps(a[0], a[i]);
    return _mm512_reduce_add_ps(a[0]);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(long iters)
{
    const __m256 m = _mm256_set1_ps(fma_m), c = _mm256_set1_ps(fma_c);
    __m256 a[16];
    for (int i = 0; i < 16; i++)
        a[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < iters; k++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            a[i] = _mm256_fmadd_ps(a[i], m, c);
    float out[8];
    for (int i = 1; i < 16; i++)
        a[0] = _mm256_add_ps(a[0], a[i]);
    _mm256_storeu_ps(out, a[0]);
    return out[0];
}
#endif

/* The FMA loop of isa's width for `iters` steps; its FLOPs, 0 when there is none (the
 * portable variant, another architecture). */
static double fma_run(KIsa isa, long iters, volatile float *sink)
{
#ifdef BENCH_X86
    if (isa == KISA_AVX512) {
        *sink += fma_avx512(iters);
        return 16.0 * 16 * 2 * (double)iters;
    }
    if (isa == KISA_AVX2) {
        *sink += fma_avx2(iters);
        return 16.0 * 8 * 2 * (double)iters;
    }
#else
    (void)isa;
    (void)iters;
    (void)sink;
#endif
    return 0.0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    int threads = 1, reps = 9;
    KIsa isa = KISA_AUTO;
    Shape shapes[32];
    int ns = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            if (kern_isa_parse(argv[++i], kern_isa_cpu(), &isa) != 0) {
                fprintf(stderr, "bench/gemm: --isa: %s (this CPU: %s)\n", kern_isa_names(), kern_isa_name(kern_isa_cpu()));
                return 2;
            }
        } else if (ns < 32) {
            Shape s = { 0, 0, 0, 0, 0, 0.0f };
            if (sscanf(argv[i], "%zu,%zu,%zu,%d,%d,%f", &s.M, &s.N, &s.K, &s.ta, &s.tb, &s.beta) < 3) {
                fprintf(stderr, "bench/gemm: %s: expected M,N,K[,ta,tb,beta]\n", argv[i]);
                return 2;
            }
            shapes[ns++] = s;
        }
    }
    if (reps < 1 || reps > 101)
        reps = 9;
    if (ns == 0) {
        static const Shape mnist[] = {
            { 256, 1024, 3136, 0, 0, 0.0f }, { 256, 3136, 1024, 0, 1, 0.0f }, { 3136, 1024, 256, 1, 0, 1.0f },
            { 16, 1024, 3136, 0, 0, 0.0f },  { 1, 1024, 3136, 0, 0, 0.0f },
        };
        ns = (int)(sizeof mnist / sizeof mnist[0]);
        memcpy(shapes, mnist, sizeof mnist);
    }
    Pool *pool = pool_new(threads);
    if (!pool)
        return 1;
    printf("%s kernels, %d thread%s, %s; CPU ms and GFLOP/s per CPU-second, wall ms (medians of %d)\n",
           kern_isa_name(kern_isa_resolve(isa)), pool_threads(pool), pool_threads(pool) > 1 ? "s" : "",
           kern_blas_info(), reps);
    const KIsa vis = kern_isa_resolve(isa);
    volatile float sink = 0.0f;
    const bool peak = pool_threads(pool) == 1 && fma_run(vis, 1, &sink) > 0.0;
    printf("%-28s %9s %7s %9s | %9s %7s %9s", "M,N,K,ta,tb,beta", "own cpu", "GF/s", "own wall", "blas cpu", "GF/s",
           "blas wall");
    printf(peak ? " | %7s %5s %5s\n" : "\n", "FMA", "own%", "blas%");
    for (int s = 0; s < ns; s++) {
        const Shape *sh = &shapes[s];
        size_t na = sh->M * sh->K, nb = sh->K * sh->N, nc = sh->M * sh->N;
        float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
        if (!A || !B || !C)
            return 1;
        for (size_t i = 0; i < na; i++) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < nb; i++) B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < nc; i++) C[i] = 0.0f;
        double cpu[2][101], wall[2][101], fma[101];
        long iters = 1000;   /* the FMA loop's, grown in the warm-up to a product's time, 1 ms at least (the
                               * clock's own cost out of the figure) */
        for (int r = 0; r < reps + 1; r++)
            for (int w = 0; w < 2; w++) {
                if (peak && w == 1) {
                    double c0 = now(CLOCK_PROCESS_CPUTIME_ID), f = fma_run(vis, iters, &sink);
                    double t = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                    if (r > 0)
                        fma[r - 1] = f / t * 1e-9;
                    else
                        for (; (t < cpu[0][0] || t < 1e-3) && iters < (1L << 30); iters *= 2, t *= 2) {}
                }
                kern_gemm_set_own(w == 0 ? 1 : -1);
                double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
                kern_gemm(pool, isa, sh->ta, sh->tb, sh->M, sh->N, sh->K, 0.001f, A, B, sh->beta, C);
                /* the first: a warm-up (its CPU time sizes the FMA loop) */
                cpu[w][r > 0 ? r - 1 : 0] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                wall[w][r > 0 ? r - 1 : 0] = now(CLOCK_MONOTONIC) - w0;
            }
        double flops = 2.0 * (double)sh->M * (double)sh->N * (double)sh->K, c[2], wl[2];
        for (int w = 0; w < 2; w++) {
            c[w] = median(cpu[w], reps);
            wl[w] = median(wall[w], reps);
        }
        char name[64];
        snprintf(name, sizeof name, "%zu,%zu,%zu,%d,%d,%g", sh->M, sh->N, sh->K, sh->ta, sh->tb, (double)sh->beta);
        printf("%-28s %9.3f %7.1f %9.3f | %9.3f %7.1f %9.3f", name, 1e3 * c[0], flops / c[0] * 1e-9, 1e3 * wl[0],
               1e3 * c[1], flops / c[1] * 1e-9, 1e3 * wl[1]);
        if (peak) {
            const double f = median(fma, reps);
            printf(" | %7.1f %5.0f %5.0f", f, 100.0 * flops / c[0] * 1e-9 / f, 100.0 * flops / c[1] * 1e-9 / f);
        }
        printf("\n");
        free(A);
        free(B);
        free(C);
    }
    pool_free(pool);
    return 0;
}
