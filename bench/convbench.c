/* bench/convbench.c: each convolution of the benchmark networks alone, through the
 * kernels' interface (kernels/kern.h), in one variant: the figures of docs/kernels.md
 * "Measured".  On a machine shared with other work, wall time says how much of a core
 * the process got; CPU time (the default) says what the kernel cost, so each figure is
 * the median of --reps calls' process CPU time (--wall: wall time, for latency at
 * small batches).  Built on demand: make bench/convbench.
 *
 *   bench/convbench [--threads N] [--reps N] [--batch N] [--isa NAME] [--bf16]
 *                   [--ops LETTERS] [--wall] [NAME...]
 *
 * NAME: a convolution of the table below (a prefix picks several; none: all).  LETTERS:
 * f forward, b forward with bias and relu, i input gradient, g filter gradient, m the
 * convolution and the max pool after it as one (kern_conv2d_maxpool; the pooled
 * layers only), a the same with the pool's index (kern_conv2d_maxpool_argmax), p the
 * filter gradient through that pool (kern_conv2d_grad_filter_pooled: its flops are
 * the dense gradient's), s the bias gradient through it (kern_maxpool_scatter_colsum_d,
 * the 8 parts of sum_to in one call), d the pool's dense gradient (kern_maxpool_scatter with relu's mask) that
 * those two spare.  --bf16: as --dtype bf16 runs them (docs/bf16.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kern.h"
#include "util/pool.h"

typedef struct Shape {
    const char *name;
    int64_t n, h, w, c, k, f, stride, pad;   /* pad: top and left ("same": the rest after) */
    int64_t pool;   /* the max pool that follows it in its network (size = stride), or 0 */
} Shape;

/* models/mnist.net at batch 256, models/fashion-resnet.net at 128 (its .net lines),
 * models/large.net at 4 */
static const Shape shapes[] = {
    { "mnist-conv1", 256, 28, 28, 1, 5, 32, 1, 2, 2 },  { "mnist-conv2", 256, 14, 14, 32, 5, 64, 1, 2, 2 },
    { "fr-10", 128, 28, 28, 1, 3, 32, 1, 1, 0 },        { "fr-13", 128, 28, 28, 32, 3, 32, 1, 1, 0 },
    { "fr-19", 128, 14, 14, 32, 3, 64, 1, 1, 0 },       { "fr-20", 128, 14, 14, 64, 3, 64, 1, 1, 0 },
    { "fr-21", 128, 14, 14, 32, 1, 64, 1, 0, 0 },       { "fr-25", 128, 7, 7, 64, 3, 128, 1, 1, 0 },
    { "fr-26", 128, 7, 7, 128, 3, 128, 1, 1, 0 },       { "fr-27", 128, 7, 7, 64, 1, 128, 1, 0, 0 },
    { "large-conv1", 4, 1080, 1920, 3, 3, 8, 2, 0, 4 }, { "large-conv2", 4, 135, 240, 8, 3, 16, 1, 1, 4 },
};

static double now_ns(bool wall)
{
    struct timespec t;
    clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &t);
    return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* n floats in [-0.5, 0.5), 64-byte aligned as graphc's tensors are */
static float *random_floats(size_t n, unsigned *seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 127) / 64 * 64);
    if (!p) {
        fprintf(stderr, "convbench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rand_r(seed) / (float)RAND_MAX - 0.5f;
    return p;
}

static const char *op_name(char op)
{
    switch (op) {
    case 'f': return "forward";
    case 'b': return "bias_relu";
    case 'i': return "grad_input";
    case 'g': return "grad_filter";
    case 'a': return "conv_pool_argmax";
    case 'p': return "grad_filter_pooled";
    case 's': return "bias_grad_pooled";
    case 'd': return "scatter_relu";
    default: return "conv_maxpool";
    }
}

typedef struct Options {
    int threads, reps;
    int64_t batch;   /* 0: the network's */
    KIsa isa;
    const char *ops;
    bool wall;
    char **names;
    int nnames;
} Options;

static bool wanted(const Options *o, const char *name)
{
    if (o->nnames == 0) return true;
    for (int i = 0; i < o->nnames; i++)
        if (strncmp(name, o->names[i], strlen(o->names[i])) == 0) return true;
    return false;
}

/* One convolution, each op of o->ops: median of o->reps calls after one unmeasured. */
static void bench_shape(const Options *o, Pool *pool, const Shape *s)
{
    /* "same" output sizes; 1x1 shortcuts unpadded */
    const int64_t oh = (s->h + s->stride - 1) / s->stride, ow = (s->w + s->stride - 1) / s->stride;
    const int64_t n = o->batch ? o->batch : s->n, z = s->pool ? s->pool : 1;
    const KConv p = { n, s->h, s->w, s->c, s->k, s->k, s->f, s->stride, s->stride, s->pad, s->pad, oh, ow };
    const KPool q = { n, oh, ow, s->f, z, z, z, z, 0, 0, oh / z, ow / z };
    const size_t nx = (size_t)(n * s->h * s->w * s->c), nw = (size_t)(s->k * s->k * s->c * s->f);
    const size_t ny = (size_t)(n * oh * ow * s->f);
    unsigned seed = 1;
    float *x = random_floats(nx, &seed), *w = random_floats(nw, &seed), *dy = random_floats(ny, &seed);
    float *b = random_floats((size_t)s->f, &seed), *y = random_floats(ny, &seed), *dx = random_floats(nx, &seed);
    float *dw = random_floats(nw, &seed);
    int32_t *idx = malloc(ny * sizeof *idx);
    size_t sb = kern_conv2d_scratch(&p, pool_threads(pool)), sp = kern_conv2d_maxpool_scratch(&p, &q, pool_threads(pool));
    float *scratch = random_floats((sb > sp ? sb : sp) / sizeof(float) + 1, &seed);
    const double flop = 2.0 * (double)ny * (double)(s->k * s->k * s->c);
    const EwAct relu = { EW_RELU, 0.0f };
    double *t = malloc((size_t)(o->reps + 1) * sizeof *t);
    for (const char *op = o->ops; t && *op; op++) {
        const bool pooled = *op == 'p' || *op == 's' || *op == 'd';
        if ((*op == 'm' || *op == 'a' || pooled) && !s->pool) continue;
        if (pooled) {   /* the index and the values of a relu'd convolution, a random gradient */
            kern_conv2d_maxpool_argmax(pool, o->isa, &p, &q, x, w, b, relu, y, idx, scratch);
            if (!kern_conv2d_grad_filter_pooled_exact(&p, &q)) continue;
        }
        double bsum[8 * 256];
        const int64_t M = n * oh * ow, parts[9] = { 0, M / 8, M * 2 / 8, M * 3 / 8, M * 4 / 8, M * 5 / 8, M * 6 / 8, M * 7 / 8, M };
        float *dd = *op == 'd' ? random_floats(ny, &seed) : NULL;
        if (*op == 'd' && !dd) continue;
        for (int r = 0; r <= o->reps; r++) {
            double t0 = now_ns(o->wall);
            switch (*op) {
            case 'f': kern_conv2d(pool, o->isa, &p, x, w, y, scratch); break;
            case 'b': kern_conv2d_bias_act(pool, o->isa, &p, x, w, b, relu, y, scratch); break;
            case 'i': kern_conv2d_grad_input(pool, o->isa, &p, dy, w, dx, scratch); break;
            case 'g': kern_conv2d_grad_filter(pool, o->isa, &p, x, dy, dw, scratch); break;
            case 'a': kern_conv2d_maxpool_argmax(pool, o->isa, &p, &q, x, w, b, relu, y, idx, scratch); break;
            case 'p': kern_conv2d_grad_filter_pooled(pool, o->isa, &p, &q, x, idx, y, dy, dw, scratch); break;
            case 's':
                if (s->f <= 256) kern_maxpool_scatter_colsum_d(o->isa, &q, idx, y, dy, parts, 8, bsum);
                break;
            case 'd': kern_maxpool_scatter(o->isa, &q, idx, y, dy, dd); break;
            default: kern_conv2d_maxpool(pool, o->isa, &p, &q, x, w, b, relu, y, scratch); break;
            }
            t[r] = now_ns(o->wall) - t0;
        }
        free(dd);
        qsort(t + 1, (size_t)o->reps, sizeof *t, cmp_double);
        double med = t[1 + o->reps / 2];
        printf("%-12s batch %-4lld %-11s %-12s %9.4f ms %7.1f GFLOP/s\n", s->name, (long long)n,
               kern_isa_label(o->isa), op_name(*op), med / 1e6, flop / med);
        fflush(stdout);
    }
    free(t);
    free(x), free(w), free(dy), free(b), free(y), free(dx), free(dw), free(scratch), free(idx);
}

int main(int argc, char **argv)
{
    Options o = { .threads = 1, .reps = 7, .ops = "figm" };
    bool bf16 = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--wall") == 0) o.wall = true;
        else if (strcmp(a, "--bf16") == 0) bf16 = true;
        else if (strcmp(a, "--threads") == 0 && v) o.threads = atoi(argv[++i]);
        else if (strcmp(a, "--reps") == 0 && v) o.reps = atoi(argv[++i]);
        else if (strcmp(a, "--batch") == 0 && v) o.batch = atoll(argv[++i]);
        else if (strcmp(a, "--ops") == 0 && v) o.ops = argv[++i];
        else if (strcmp(a, "--isa") == 0 && v) {
            if (kern_isa_parse(argv[++i], kern_isa_cpu(), &o.isa) != 0) {
                fprintf(stderr, "convbench: --isa %s: this CPU runs %s\n", argv[i], kern_isa_names());
                return 2;
            }
        } else if (a[0] != '-' && o.nnames == 0) {
            o.names = argv + i;
            o.nnames = argc - i;
            break;
        } else {
            fprintf(stderr, "usage: bench/convbench [--threads N] [--reps N] [--batch N] [--isa NAME] "
                            "[--bf16] [--ops fbigm] [--wall] [NAME...]\n");
            return 2;
        }
    }
    if (o.threads < 1 || o.reps < 1 || o.batch < 0) {
        fprintf(stderr, "convbench: --threads and --reps at least 1, --batch at least 0\n");
        return 2;
    }
    if (bf16) {
        o.isa = (KIsa)(o.isa | KISA_BF16);
        if (kern_dtype_check(o.isa)) {
            fprintf(stderr, "convbench: %s\n", kern_dtype_check(o.isa));
            return 2;
        }
    }
    /* one product first: kern_gemm makes BLAS single-threaded, whose idle threads would
     * otherwise yield in a loop, in the process's CPU time, until its first call */
    float one = 1.0f, out;
    kern_gemm(NULL, o.isa, false, false, 1, 1, 1, 1.0f, &one, &one, 0.0f, &out);
    Pool *pool = o.threads > 1 ? pool_new(o.threads) : NULL;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        if (wanted(&o, shapes[s].name)) bench_shape(&o, pool, &shapes[s]);
    pool_free(pool);
    return 0;
}
