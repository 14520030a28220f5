/* bench/gemm.c: graphc's own GEMM (kernels/gemm_micro.h) against OpenBLAS's sgemm, the
 * two measured in turn on each shape, so a loaded machine slows both alike.  Prints, per
 * shape, the median CPU time of each (getrusage-like: the process's CPU clock, so the
 * time the threads spent computing, robust to the load where wall time is not) and
 * GFLOP/s per CPU-second, and the median wall time.
 *   bench/gemm [--threads T] [--isa NAME] [--reps R] [M,N,K[,ta,tb,beta]] ...
 * Without shapes: the MNIST CNN's dense layer (3136 x 1024) at batch 256 (forward, the
 * input's gradient, the weight's fused with SGD), 16 and 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/kern.h"
#include "util/pool.h"

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
    printf("%-28s %9s %7s %9s | %9s %7s %9s\n", "M,N,K,ta,tb,beta", "own cpu", "GF/s", "own wall", "blas cpu",
           "GF/s", "blas wall");
    for (int s = 0; s < ns; s++) {
        const Shape *sh = &shapes[s];
        size_t na = sh->M * sh->K, nb = sh->K * sh->N, nc = sh->M * sh->N;
        float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
        if (!A || !B || !C)
            return 1;
        for (size_t i = 0; i < na; i++) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < nb; i++) B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < nc; i++) C[i] = 0.0f;
        double cpu[2][101], wall[2][101];
        for (int r = 0; r < reps + 1; r++)
            for (int w = 0; w < 2; w++) {
                kern_gemm_set_own(w == 0 ? 1 : -1);
                double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
                kern_gemm(pool, isa, sh->ta, sh->tb, sh->M, sh->N, sh->K, 0.001f, A, B, sh->beta, C);
                if (r > 0) {   /* the first: a warm-up */
                    cpu[w][r - 1] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                    wall[w][r - 1] = now(CLOCK_MONOTONIC) - w0;
                }
            }
        double flops = 2.0 * (double)sh->M * (double)sh->N * (double)sh->K, c[2], wl[2];
        for (int w = 0; w < 2; w++) {
            c[w] = median(cpu[w], reps);
            wl[w] = median(wall[w], reps);
        }
        char name[64];
        snprintf(name, sizeof name, "%zu,%zu,%zu,%d,%d,%g", sh->M, sh->N, sh->K, sh->ta, sh->tb, (double)sh->beta);
        printf("%-28s %9.3f %7.1f %9.3f | %9.3f %7.1f %9.3f\n", name, 1e3 * c[0], flops / c[0] * 1e-9, 1e3 * wl[0],
               1e3 * c[1], flops / c[1] * 1e-9, 1e3 * wl[1]);
        free(A);
        free(B);
        free(C);
    }
    pool_free(pool);
    return 0;
}
