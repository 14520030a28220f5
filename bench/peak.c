/* bench/peak.c: this machine's limits, measured rather than computed from a data sheet:
 * the fp32 FMA peak of one thread and of one thread per CPU at once, with each vector
 * FMA the CPU has (512-bit and 256-bit vectors, chosen at run time), its memory
 * bandwidth (STREAM's copy and triad on arrays well past the last-level cache), and
 * OpenBLAS's sgemm on large square matrices.  Prints one JSON line (bench/compare.sh
 * records it, bench/report.py turns it into "The machine's limit"), or a summary with
 * --text.  See bench/README.md.
 *
 * Each vector loop is compiled for its instruction set with a target attribute, so the
 * file builds with the project's plain flags on any x86-64 and runs every loop the CPU
 * supports; elsewhere there is no FMA loop, and bandwidth and sgemm are measured.  The
 * loops need the optimizer (unoptimized, every accumulator lives in memory): the JSON
 * says whether it was on.
 */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define PEAK_X86 1
#include <immintrin.h>
#endif

enum { MAX_SIZES = 8, MAX_REPEATS = 101 };

typedef struct {
    int threads;          /* threads of the "all" measurements: one per CPU unless --threads */
    int repeats;          /* measurements per figure; the figure is their median */
    double seconds;       /* target length of one FMA measurement */
    int sizes[MAX_SIZES]; /* sgemm's n, in the order given */
    int nsizes;
    const char *isa;      /* "auto" (every loop the CPU has) or the name of one entry of isas[] */
    double stream_mib;    /* bytes of each STREAM array, in MiB (0: from the last-level cache) */
    int quick, text;
} Options;

/* One measured figure: the median of the repeats and their range. */
typedef struct {
    double median, min, max;
} Stat;

/* ---------------------------------------------------------------- the FMA loops */

/* Each loop steps independent multiply-add chains a = a * m + c, one per accumulator,
 * twice per iteration, iters times: enough chains to cover the FMA latency times the FMA units
 * (4 cycles x 2 units on recent cores: 8 in flight), few enough to stay in registers
 * with m and c (16 vector registers with AVX2, 32 with AVX-512).  With m just below 1 the
 * chains converge to c / (1 - m), about 1: no overflow, no denormals.  The result is
 * the accumulators' sum, stored by the caller into a volatile so the loop stays. */
typedef float (*FmaLoop)(long iters, float m, float c);

#ifdef PEAK_X86
#define ACC12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define ACC16(X) ACC12(X) X(12) X(13) X(14) X(15)

__attribute__((target("avx512f"))) static float loop_avx512(long iters, float mf, float cf)
{
    __m512 m = _mm512_set1_ps(mf), c = _mm512_set1_ps(cf), s = _mm512_setzero_ps();
#define INIT(i) __m512 a##i = _mm512_set1_ps(0.01f * (i));
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, m, c);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    ACC16(INIT)
    for (long it = 0; it < iters; it++) {
        ACC16(STEP)
        ACC16(STEP)
    }
    ACC16(SUM)
#undef INIT
#undef STEP
#undef SUM
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float loop_avx2(long iters, float mf, float cf)
{
    __m256 m = _mm256_set1_ps(mf), c = _mm256_set1_ps(cf), s = _mm256_setzero_ps();
#define INIT(i) __m256 a##i = _mm256_set1_ps(0.01f * (i));
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, m, c);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    ACC12(INIT)
    for (long it = 0; it < iters; it++) {
        ACC12(STEP)
        ACC12(STEP)
    }
    ACC12(SUM)
#undef INIT
#undef STEP
#undef SUM
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

/* No FMA instruction: multiplies and adds, each one flop per lane, as independent chains
 * of each (a multiply and an add apart issue on separate units): six chains multiply by
 * m then by 1 / m, six add c then subtract it, so every value stays near where it began. */
#define MUL6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define ADD6(X) X(6) X(7) X(8) X(9) X(10) X(11)
__attribute__((target("sse2"))) static float loop_sse(long iters, float mf, float cf)
{
    __m128 m = _mm_set1_ps(mf), r = _mm_set1_ps(1.0f / mf), c = _mm_set1_ps(cf), s = _mm_setzero_ps();
#define INIT(i) __m128 a##i = _mm_set1_ps(1.0f + 0.01f * (i));
#define MUL(i) a##i = _mm_mul_ps(a##i, m);
#define UNMUL(i) a##i = _mm_mul_ps(a##i, r);
#define ADD(i) a##i = _mm_add_ps(a##i, c);
#define SUB(i) a##i = _mm_sub_ps(a##i, c);
#define SUM(i) s = _mm_add_ps(s, a##i);
    ACC12(INIT)
    for (long it = 0; it < iters; it++) {
        MUL6(MUL)
        ADD6(ADD)
        MUL6(UNMUL)
        ADD6(SUB)
    }
    ACC12(SUM)
#undef INIT
#undef MUL
#undef UNMUL
#undef ADD
#undef SUB
#undef SUM
    float v[4];
    _mm_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3];
}

static int has_avx512(void) { return __builtin_cpu_supports("avx512f"); }
static int has_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
static int has_sse(void) { return __builtin_cpu_supports("sse2"); }
#endif

/* Widest first: "auto" takes the first the CPU supports. */
static const struct Isa {
    const char *name;
    int bits;            /* vector width */
    int accumulators;    /* independent chains, each stepped twice per iteration */
    int flops;           /* flops per lane of one step: 2 for an FMA, 1 for a multiply or an add */
    FmaLoop loop;
    int (*supported)(void);
} isas[] = {
#ifdef PEAK_X86
    {"avx512f", 512, 16, 2, loop_avx512, has_avx512},
    {"avx2+fma", 256, 12, 2, loop_avx2, has_avx2},
    {"sse", 128, 12, 1, loop_sse, has_sse},
#endif
    {NULL, 0, 0, 0, NULL, NULL},
};

/* flops of one iteration of a loop: every chain stepped twice */
static double flops_per_iter(const struct Isa *isa)
{
    return 2.0 * isa->accumulators * (isa->bits / 32) * isa->flops;
}

/* Read at run time, so the compiler cannot fold the chains. */
static volatile float fma_m = 0.999999f, fma_c = 1e-6f;
static volatile float sink;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static Stat stat_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    Stat s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

typedef struct {
    const struct Isa *isa;
    long iters;
    pthread_barrier_t *start;
    double t0, t1;
    float result;
} Worker;

static void *worker_run(void *arg)
{
    Worker *w = arg;
    pthread_barrier_wait(w->start);
    w->t0 = now();
    w->result = w->isa->loop(w->iters, fma_m, fma_c);
    w->t1 = now();
    return NULL;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "peak: out of memory\n");
        exit(1);
    }
    return p;
}

/* A barrier for n threads to start together at; exits with a message if it cannot. */
static void barrier_for(pthread_barrier_t *b, int n)
{
    if (pthread_barrier_init(b, NULL, (unsigned)n) != 0) {
        fprintf(stderr, "peak: cannot make a barrier for %d threads\n", n);
        exit(1);
    }
}

/* Runs fn on n threads at once, thread i on the i-th of n arguments of `size` bytes at
 * args, and returns when all have ended. */
static void run_threads(int n, void *(*fn)(void *), void *args, size_t size)
{
    pthread_t *tid = xcalloc((size_t)n, sizeof *tid);
    for (int i = 0; i < n; i++)
        if (pthread_create(&tid[i], NULL, fn, (char *)args + (size_t)i * size) != 0) {
            /* the ones started wait at their barrier for good */
            fprintf(stderr, "peak: cannot start thread %d of %d\n", i + 1, n);
            exit(1);
        }
    for (int i = 0; i < n; i++)
        pthread_join(tid[i], NULL);
    free(tid);
}

/* GFLOP/s of nthreads threads running the loop at once: all the threads' flops over the
 * time from the first one's start to the last one's end. */
static double fma_once(const struct Isa *isa, long iters, int nthreads)
{
    if (nthreads == 1) {
        double t0 = now();
        sink = isa->loop(iters, fma_m, fma_c);
        return flops_per_iter(isa) * (double)iters / (now() - t0) / 1e9;
    }
    Worker *w = xcalloc((size_t)nthreads, sizeof *w);
    pthread_barrier_t start;
    barrier_for(&start, nthreads);
    for (int i = 0; i < nthreads; i++)
        w[i] = (Worker){isa, iters, &start, 0, 0, 0};
    run_threads(nthreads, worker_run, w, sizeof *w);
    double first = w[0].t0, last = w[0].t1;
    float sum = 0;
    for (int i = 0; i < nthreads; i++) {
        if (w[i].t0 < first)
            first = w[i].t0;
        if (w[i].t1 > last)
            last = w[i].t1;
        sum += w[i].result;
    }
    sink = sum;
    pthread_barrier_destroy(&start);
    free(w);
    return flops_per_iter(isa) * (double)iters * nthreads / (last - first) / 1e9;
}

/* Iterations for one measurement of about `seconds` on one thread: double until a run
 * takes a tenth of it, then scale. */
static long fma_calibrate(const struct Isa *isa, double seconds)
{
    long iters = 1000;
    for (;;) {
        double t0 = now();
        sink = isa->loop(iters, fma_m, fma_c);
        double t = now() - t0;
        if (t >= seconds / 10 || iters > LONG_MAX / 4) {
            double n = (double)iters * seconds / (t > 0 ? t : 1e-9);
            return n < 1 ? 1 : n > (double)(LONG_MAX / 2) ? LONG_MAX / 2 : (long)n;
        }
        iters *= 2;
    }
}

static Stat fma_measure(const struct Isa *isa, long iters, int nthreads, int repeats)
{
    double v[MAX_REPEATS];
    for (int r = 0; r < repeats; r++)
        v[r] = fma_once(isa, iters, nthreads);
    return stat_of(v, repeats);
}

/* ---------------------------------------------------------------- sgemm */

typedef struct {
    int n;
    Stat one, all;   /* GFLOP/s on 1 thread and on opt->threads */
} Gemm;

static float *matrix(int n, unsigned *seed)
{
    float *a;
    if (posix_memalign((void **)&a, 64, (size_t)n * (size_t)n * sizeof *a) != 0)
        return NULL;
    for (size_t i = 0; i < (size_t)n * (size_t)n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        a[i] = (float)(*seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;   /* [-1, 1) */
    }
    return a;
}

static Stat gemm_measure(int n, const float *a, const float *b, float *c, int threads, int repeats)
{
    double v[MAX_REPEATS];
    openblas_set_num_threads(threads);
    /* untimed: OpenBLAS starts its threads and C's pages are touched */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        v[r] = 2.0 * n * (double)n * n / (now() - t0) / 1e9;
        sink = c[(size_t)r % ((size_t)n * n)];
    }
    return stat_of(v, repeats);
}

/* ---------------------------------------------------------------- memory bandwidth */

/* STREAM's copy (a = b) and triad (a = b + s c) on float arrays, each thread on its own
 * contiguous slice (which it touched first, so its pages are its own), counted as
 * STREAM counts them: the bytes the loop names, 8 a copied element, 12 a triad's (the
 * cache line a store first reads is not counted, so a figure is below the bytes the
 * bus really moves).  The step's bytes that graphc bench counts follow the same rule,
 * which makes the two comparable.  The vector type makes the loops 16-byte loads and
 * stores whatever the flags; a thread is far from issue-bound on them. */
typedef float v4f __attribute__((vector_size(16)));

typedef enum { STREAM_COPY, STREAM_TRIAD, STREAM_COUNT } StreamOp;
static const char *const stream_names[STREAM_COUNT] = {"copy", "triad"};
static const int stream_arrays[STREAM_COUNT] = {2, 3};   /* arrays a loop names */

static volatile float stream_s = 3.0f;

static void stream_pass(StreamOp op, v4f *restrict a, const v4f *restrict b, const v4f *restrict c, size_t n)
{
    if (op == STREAM_COPY) {
        for (size_t i = 0; i < n; i++)
            a[i] = b[i];
    } else {
        float s = stream_s;
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] + s * c[i];
    }
}

typedef struct {
    StreamOp op;
    v4f *a, *b, *c;          /* this thread's slices */
    size_t n;                /* vectors in each */
    int repeats;
    pthread_barrier_t *start;
    double t0[MAX_REPEATS], t1[MAX_REPEATS];
} StreamWorker;

static void *stream_worker(void *arg)
{
    StreamWorker *w = arg;
    for (size_t i = 0; i < w->n; i++) {   /* first touch, then one untimed pass */
        w->a[i] = (v4f){0, 0, 0, 0};
        w->b[i] = (v4f){1, 2, 3, 4};
        w->c[i] = (v4f){0.5f, 0.25f, 0.125f, 1};
    }
    stream_pass(w->op, w->a, w->b, w->c, w->n);
    for (int r = 0; r < w->repeats; r++) {
        pthread_barrier_wait(w->start);
        w->t0[r] = now();
        stream_pass(w->op, w->a, w->b, w->c, w->n);
        w->t1[r] = now();
    }
    return NULL;
}

/* GB/s (1e9 bytes) of `op` on nthreads threads over arrays of `bytes` each (rounded
 * down to whole vectors per thread): per repeat, all the threads' bytes over the time
 * from the first start to the last end, all starting together at a barrier. */
static Stat stream_measure(StreamOp op, size_t bytes, int nthreads, int repeats)
{
    size_t per = bytes / sizeof(v4f) / (size_t)nthreads;   /* vectors a thread */
    v4f *mem[3];
    for (int k = 0; k < 3; k++)
        if (posix_memalign((void **)&mem[k], 64, per * (size_t)nthreads * sizeof(v4f) + 64) != 0) {
            fprintf(stderr, "peak: out of memory for the bandwidth arrays (3 x %.0f MB)\n", bytes / 1e6);
            exit(1);
        }
    StreamWorker *w = xcalloc((size_t)nthreads, sizeof *w);
    pthread_barrier_t start;
    barrier_for(&start, nthreads);
    for (int i = 0; i < nthreads; i++) {
        size_t at = per * (size_t)i;
        w[i] = (StreamWorker){.op = op, .a = mem[0] + at, .b = mem[1] + at, .c = mem[2] + at, .n = per,
                              .repeats = repeats, .start = &start};
    }
    run_threads(nthreads, stream_worker, w, sizeof *w);
    double v[MAX_REPEATS];
    double moved = (double)stream_arrays[op] * (double)(per * (size_t)nthreads * sizeof(v4f));
    for (int r = 0; r < repeats; r++) {
        double first = w[0].t0[r], last = w[0].t1[r];
        for (int i = 1; i < nthreads; i++) {
            if (w[i].t0[r] < first)
                first = w[i].t0[r];
            if (w[i].t1[r] > last)
                last = w[i].t1[r];
        }
        v[r] = moved / (last - first) / 1e9;
    }
    sink = ((float *)mem[0])[per * (size_t)nthreads * 4 / 2];
    pthread_barrier_destroy(&start);
    for (int k = 0; k < 3; k++)
        free(mem[k]);
    free(w);
    return stat_of(v, repeats);
}

/* The last-level cache, in bytes: the highest level sysfs lists for CPU 0 (what this
 * machine's cores see; a virtual machine's may be one part of the host's), else what
 * sysconf says, else 0. */
static double llc_bytes(void)
{
    int best_level = 0;
    double best = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], buf[64];
        int level = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        if (fscanf(f, "%d", &level) != 1)
            level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f)
            continue;
        double size = 0;
        char unit = 0;
        if (fgets(buf, sizeof buf, f) && sscanf(buf, "%lf%c", &size, &unit) >= 1) {
            size *= unit == 'K' ? 1024.0 : unit == 'M' ? 1048576.0 : unit == 'G' ? 1073741824.0 : 1.0;
            if (level > best_level || (level == best_level && size > best))
                best_level = level, best = size;
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best == 0) {
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        best = l3 > 0 ? (double)l3 : l2 > 0 ? (double)l2 : 0;
    }
#endif
    return best;
}

/* ---------------------------------------------------------------- output */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* "median": m, "median_range": [lo, hi] (four significant digits: a quick run under load
 * can measure well under 1 GFLOP/s, which one decimal would print as 0), or nulls when
 * not measured */
static void json_stat(FILE *f, const char *name, const Stat *s)
{
    if (s)
        fprintf(f, ", \"%s\": %.4g, \"%s_range\": [%.4g, %.4g]", name, s->median, name, s->min, s->max);
    else
        fprintf(f, ", \"%s\": null, \"%s_range\": null", name, name);
}

/* /proc/cpuinfo's first "model name", or "" */
static void cpu_model(char *buf, size_t len)
{
    buf[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            v[strcspn(v, "\n")] = 0;
            snprintf(buf, len, "%s", v);
            break;
        }
    }
    fclose(f);
}

/* OpenBLAS's config string without the trailing space it has */
static void openblas_config(char *buf, size_t len)
{
    snprintf(buf, len, "%s", openblas_get_config() ? openblas_get_config() : "");
    for (size_t n = strlen(buf); n > 0 && buf[n - 1] == ' '; n--)
        buf[n - 1] = 0;
}

/* ---------------------------------------------------------------- arguments */

static void usage(FILE *f)
{
    fputs("usage: bench/peak [options]\n"
          "\n"
          "Measures this machine's fp32 FMA peak (each vector FMA the CPU has, 1 thread and\n"
          "one thread per CPU at once), its memory bandwidth (STREAM copy and triad on arrays\n"
          "past the last-level cache, 1 thread and all threads) and OpenBLAS sgemm on n x n\n"
          "matrices (1 thread and all threads); prints one JSON line of medians, or a summary\n"
          "with --text.\n"
          "\n"
          "  --threads N     threads of the all-threads figures (default: the CPUs this\n"
          "                  process may run on)\n"
          "  --repeats N     measurements per figure, the median is reported (default 7)\n"
          "  --seconds S     length of one FMA measurement (default 0.2)\n"
          "  --sizes L       sgemm sizes, comma-separated (default 2048,4096)\n"
          "  --isa NAME      auto (default: every loop the CPU has, the widest first),\n"
          "                  avx512f, avx2+fma or sse (that loop only)\n"
          "  --stream-mb N   MiB of each of the three bandwidth arrays (default: 4 times the\n"
          "                  last-level cache, at least 64)\n"
          "  --quick         short measurements: 3 repeats, 0.02 s, sgemm 1024 (a smoke test)\n"
          "  --text          a summary for people instead of the JSON line\n"
          "  -h, --help      this text\n",
          f);
}

static void bad(const char *opt, const char *why, const char *val)
{
    fprintf(stderr, "peak: %s: %s, got '%s' (see --help)\n", opt, why, val ? val : "");
    exit(2);
}

static int posint(const char *opt, const char *s, int max)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < 1 || v > max) {
        char why[64];
        snprintf(why, sizeof why, "expected an integer from 1 to %d", max);
        bad(opt, why, s);
    }
    return (int)v;
}

static int cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void parse(int argc, char **argv, Options *o)
{
    int repeats = 0, sizes = 0, seconds = 0;
    *o = (Options){.threads = cpus(), .repeats = 7, .seconds = 0.2, .isa = "auto"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads")) {
            o->threads = posint(a, v, 1024), i++;
        } else if (!strcmp(a, "--repeats")) {
            o->repeats = posint(a, v, MAX_REPEATS), i++, repeats = 1;
        } else if (!strcmp(a, "--seconds")) {
            char *end;
            double s = v ? strtod(v, &end) : 0;
            if (!v || !*v || *end || !(s >= 0.001 && s <= 60))
                bad(a, "expected seconds from 0.001 to 60", v);
            o->seconds = s, i++, seconds = 1;
        } else if (!strcmp(a, "--sizes")) {
            char buf[256], *save, *tok;
            if (!v || strlen(v) >= sizeof buf)
                bad(a, "expected a list like 2048,4096", v);
            strcpy(buf, v);
            o->nsizes = 0;
            for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (o->nsizes == MAX_SIZES)
                    bad(a, "at most 8 sizes", v);
                o->sizes[o->nsizes++] = posint(a, tok, 16384);
            }
            if (o->nsizes == 0 || v[0] == ',' || v[strlen(v) - 1] == ',' || strstr(v, ",,"))
                bad(a, "expected a list like 2048,4096", v);
            i++, sizes = 1;
        } else if (!strcmp(a, "--isa")) {
            if (!v)
                bad(a, "expected auto, avx512f, avx2+fma or sse", v);
            o->isa = v, i++;
        } else if (!strcmp(a, "--stream-mb")) {
            o->stream_mib = posint(a, v, 65536), i++;
        } else if (!strcmp(a, "--quick")) {
            o->quick = 1;
        } else if (!strcmp(a, "--text")) {
            o->text = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "peak: unknown option '%s'\n", a);
            usage(stderr);
            exit(2);
        }
    }
    /* --quick shortens what was not given explicitly */
    if (!repeats)
        o->repeats = o->quick ? 3 : 7;
    if (!seconds)
        o->seconds = o->quick ? 0.02 : 0.2;
    if (!sizes) {
        o->nsizes = o->quick ? 1 : 2;
        o->sizes[0] = o->quick ? 1024 : 2048;
        o->sizes[1] = 4096;
    }
}

/* The loops to run, widest first: every one the CPU supports, or the one asked for if
 * it does.  Returns how many (0: auto on a machine without a vector loop). */
static int choose(const char *name, const struct Isa **out)
{
    int n = 0;
    for (const struct Isa *i = isas; i->name; i++) {
        if (!strcmp(name, "auto")) {
            if (i->supported())
                out[n++] = i;
        } else if (!strcmp(name, i->name)) {
            if (i->supported()) {
                out[0] = i;
                return 1;
            }
            fprintf(stderr, "peak: --isa %s: this CPU does not support it\n", name);
            exit(2);
        }
    }
    if (strcmp(name, "auto") != 0) {
        fprintf(stderr, "peak: --isa: expected auto, avx512f, avx2+fma or sse, got '%s'%s\n", name,
                isas[0].name ? "" : " (this build has no vector loops: not x86-64)");
        exit(2);
    }
    return n;
}

/* One loop's FMA peak. */
typedef struct {
    const struct Isa *isa;
    long iters;
    Stat one, all;
} Fma;

enum { MAX_ISAS = sizeof isas / sizeof isas[0] };

/* The bandwidth figures: each STREAM loop on 1 thread and on all. */
typedef struct {
    double llc, array;       /* bytes: the last-level cache, each array */
    Stat one[STREAM_COUNT], all[STREAM_COUNT];
} Bandwidth;

static void bandwidth_measure(const Options *o, Bandwidth *bw)
{
    bw->llc = llc_bytes();
    double mib = o->stream_mib;
    if (mib == 0) {
        mib = 4 * bw->llc / 1048576.0;
        if (mib < 64)
            mib = 64;
    }
    bw->array = mib * 1048576.0;
    for (int k = 0; k < STREAM_COUNT; k++) {
        bw->one[k] = stream_measure((StreamOp)k, (size_t)bw->array, 1, o->repeats);
        bw->all[k] = stream_measure((StreamOp)k, (size_t)bw->array, o->threads, o->repeats);
    }
}

static void print_text(const Options *o, const char *cpu, const Fma *fma, int nfma, const Bandwidth *bw,
                       const char *config, const char *core, const Gemm *gemm, int optimized, double seconds)
{
    printf("cpu: %s, %d threads for the all-threads figures\n", cpu[0] ? cpu : "?", o->threads);
    for (int k = 0; k < nfma; k++)
        printf("FMA peak (fp32, %s, %d-bit vectors, %d chains): %.1f GFLOP/s on 1 thread, %.1f on %d threads\n",
               fma[k].isa->name, fma[k].isa->bits, fma[k].isa->accumulators, fma[k].one.median, fma[k].all.median,
               o->threads);
    if (nfma == 0)
        printf("FMA peak: no vector path on this machine (not x86-64): not measured\n");
    for (int k = 0; k < STREAM_COUNT; k++)
        printf("bandwidth (%s, 3 arrays of %.0f MiB, last-level cache %.0f MiB): %.1f GB/s on 1 thread, %.1f on %d "
               "threads\n",
               stream_names[k], bw->array / 1048576.0, bw->llc / 1048576.0, bw->one[k].median, bw->all[k].median,
               o->threads);
    printf("OpenBLAS: %s, core %s\n", config, core);
    for (int s = 0; s < o->nsizes; s++)
        printf("sgemm n=%d: %.1f GFLOP/s on 1 thread, %.1f on %d threads\n", gemm[s].n, gemm[s].one.median,
               gemm[s].all.median, o->threads);
    printf("medians of %d measurements (FMA: %.2f s each)%s%s; %.1f s in all\n", o->repeats, o->seconds,
           o->quick ? "; --quick: a smoke test, not a result" : "",
           optimized ? "" : "; WARNING: compiled without optimization, the FMA figures are too low", seconds);
}

static void print_json(const Options *o, const char *cpu, const Fma *fma, int nfma, const Bandwidth *bw,
                       const char *config, const char *core, const Gemm *gemm, int big, int optimized, double seconds)
{
    const Fma *head = nfma ? &fma[0] : NULL;   /* the widest loop: the headline figures */
    printf("{\"program\": \"bench/peak\", \"cpu\": ");
    json_str(stdout, cpu);
    printf(", \"threads\": %d, \"isa\": ", o->threads);
    json_str(stdout, head ? head->isa->name : "none");
    printf(", \"vector_bits\": %d, \"accumulators\": %d, \"statistic\": \"median\", \"repeats\": %d, "
           "\"fma_seconds\": %.3f, \"fma_iterations\": %ld",
           head ? head->isa->bits : 0, head ? head->isa->accumulators : 0, o->repeats, o->seconds,
           head ? head->iters : 0);
    json_stat(stdout, "fma_gflops_1t", head ? &head->one : NULL);
    json_stat(stdout, "fma_gflops_all", head ? &head->all : NULL);
    printf(", \"fma\": [");
    for (int k = 0; k < nfma; k++) {
        printf("%s{\"isa\": ", k ? ", " : "");
        json_str(stdout, fma[k].isa->name);
        printf(", \"vector_bits\": %d, \"accumulators\": %d, \"iterations\": %ld", fma[k].isa->bits,
               fma[k].isa->accumulators, fma[k].iters);
        json_stat(stdout, "gflops_1t", &fma[k].one);
        json_stat(stdout, "gflops_all", &fma[k].all);
        printf("}");
    }
    printf("], \"llc_bytes\": %.0f, \"stream_array_bytes\": %.0f, \"stream_element_bytes\": %zu",
           bw->llc, bw->array, sizeof(float));
    for (int k = 0; k < STREAM_COUNT; k++) {
        char name[32];
        snprintf(name, sizeof name, "%s_gbs_1t", stream_names[k]);
        json_stat(stdout, name, &bw->one[k]);
        snprintf(name, sizeof name, "%s_gbs_all", stream_names[k]);
        json_stat(stdout, name, &bw->all[k]);
    }
    printf(", \"bandwidth_gbs\": %.4g", bw->all[STREAM_TRIAD].median);
    printf(", \"openblas_core\": ");
    json_str(stdout, core);
    printf(", \"openblas_config\": ");
    json_str(stdout, config);
    printf(", \"sgemm_n\": %d", gemm[big].n);
    json_stat(stdout, "sgemm_gflops_1t", &gemm[big].one);
    json_stat(stdout, "sgemm_gflops_all", &gemm[big].all);
    printf(", \"sgemm\": [");
    for (int s = 0; s < o->nsizes; s++) {
        printf("%s{\"n\": %d", s ? ", " : "", gemm[s].n);
        json_stat(stdout, "gflops_1t", &gemm[s].one);
        json_stat(stdout, "gflops_all", &gemm[s].all);
        printf("}");
    }
    printf("], \"optimized\": %s, \"quick\": %s, \"seconds\": %.3f}\n", optimized ? "true" : "false",
           o->quick ? "true" : "false", seconds);
}

int main(int argc, char **argv)
{
    Options o;
    parse(argc, argv, &o);
    const struct Isa *chosen[MAX_ISAS];
    int nfma = choose(o.isa, chosen);
    double t_start = now();

    Fma fma[MAX_ISAS];
    for (int k = 0; k < nfma; k++) {
        fma[k].isa = chosen[k];
        fma[k].iters = fma_calibrate(chosen[k], o.seconds);
        fma[k].one = fma_measure(chosen[k], fma[k].iters, 1, o.repeats);
        fma[k].all = fma_measure(chosen[k], fma[k].iters, o.threads, o.repeats);
    }

    Bandwidth bw;
    bandwidth_measure(&o, &bw);

    Gemm gemm[MAX_SIZES];
    unsigned seed = 12345;
    for (int s = 0; s < o.nsizes; s++) {
        int n = o.sizes[s];
        float *a = matrix(n, &seed), *b = matrix(n, &seed), *c = matrix(n, &seed);
        if (!a || !b || !c) {
            fprintf(stderr, "peak: out of memory for sgemm n=%d (%.0f MB)\n", n, 3.0 * 4 * n * (double)n / 1e6);
            return 1;
        }
        gemm[s].n = n;
        gemm[s].one = gemm_measure(n, a, b, c, 1, o.repeats);
        gemm[s].all = gemm_measure(n, a, b, c, o.threads, o.repeats);
        free(a);
        free(b);
        free(c);
    }
    /* the headline sgemm figure: the largest size */
    int big = 0;
    for (int s = 1; s < o.nsizes; s++)
        if (gemm[s].n > gemm[big].n)
            big = s;

    char cpu[256], config[512];
    cpu_model(cpu, sizeof cpu);
    openblas_config(config, sizeof config);
    const char *core = openblas_get_corename() ? openblas_get_corename() : "";
#ifdef __OPTIMIZE__
    const int optimized = 1;
#else
    const int optimized = 0;
#endif
    double seconds = now() - t_start;
    if (o.text)
        print_text(&o, cpu, fma, nfma, &bw, config, core, gemm, optimized, seconds);
    else
        print_json(&o, cpu, fma, nfma, &bw, config, core, gemm, big, optimized, seconds);
    return 0;
}
