/* bench/peak.c: this machine's arithmetic limit, measured rather than computed from a
 * data sheet: the fp32 FMA peak of one thread and of one thread per CPU at once, with the
 * widest vector FMA the CPU has (chosen at run time), and OpenBLAS's sgemm on large
 * square matrices.  Prints one JSON line (bench/compare.sh records it, bench/report.py
 * turns it into "The machine's limit"), or a summary with --text.  See bench/README.md.
 *
 * Each vector loop is compiled for its instruction set with a target attribute, so the
 * file builds with the project's plain flags on any x86-64 and runs the widest loop the
 * CPU supports; elsewhere there is no vector path and only sgemm is measured.  The
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
    const char *isa;      /* "auto" or the name of one entry of isas[] */
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
    pthread_t *tid = xcalloc((size_t)nthreads, sizeof *tid);
    pthread_barrier_t start;
    if (pthread_barrier_init(&start, NULL, (unsigned)nthreads) != 0) {
        fprintf(stderr, "peak: cannot make a barrier for %d threads\n", nthreads);
        exit(1);
    }
    for (int i = 0; i < nthreads; i++) {
        w[i] = (Worker){isa, iters, &start, 0, 0, 0};
        if (pthread_create(&tid[i], NULL, worker_run, &w[i]) != 0) {
            /* the ones started wait at the barrier for good */
            fprintf(stderr, "peak: cannot start thread %d of %d\n", i + 1, nthreads);
            exit(1);
        }
    }
    double first = 0, last = 0;
    float sum = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(tid[i], NULL);
        if (i == 0 || w[i].t0 < first)
            first = w[i].t0;
        if (i == 0 || w[i].t1 > last)
            last = w[i].t1;
        sum += w[i].result;
    }
    sink = sum;
    pthread_barrier_destroy(&start);
    free(w);
    free(tid);
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
          "Measures this machine's fp32 FMA peak (the widest vector FMA the CPU has, 1 thread\n"
          "and one thread per CPU at once) and OpenBLAS sgemm on n x n matrices (1 thread and\n"
          "all threads); prints one JSON line of medians, or a summary with --text.\n"
          "\n"
          "  --threads N     threads of the all-threads figures (default: the CPUs this\n"
          "                  process may run on)\n"
          "  --repeats N     measurements per figure, the median is reported (default 7)\n"
          "  --seconds S     length of one FMA measurement (default 0.2)\n"
          "  --sizes L       sgemm sizes, comma-separated (default 2048,4096)\n"
          "  --isa NAME      auto (default), avx512f, avx2+fma or sse\n"
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

/* The loop to run: the widest the CPU supports, or the one asked for if it does. */
static const struct Isa *choose(const char *name)
{
    for (const struct Isa *i = isas; i->name; i++) {
        if (!strcmp(name, "auto") ? i->supported() : !strcmp(name, i->name)) {
            if (i->supported())
                return i;
            fprintf(stderr, "peak: --isa %s: this CPU does not support it\n", name);
            exit(2);
        }
    }
    if (strcmp(name, "auto") != 0) {
        fprintf(stderr, "peak: --isa: expected auto, avx512f, avx2+fma or sse, got '%s'%s\n", name,
                isas[0].name ? "" : " (this build has no vector loops: not x86-64)");
        exit(2);
    }
    return NULL;   /* auto on a machine without a vector loop */
}

int main(int argc, char **argv)
{
    Options o;
    parse(argc, argv, &o);
    const struct Isa *isa = choose(o.isa);
    double t_start = now();

    Stat fma1 = {0, 0, 0}, fmaN = {0, 0, 0};
    long iters = 0;
    if (isa) {
        iters = fma_calibrate(isa, o.seconds);
        fma1 = fma_measure(isa, iters, 1, o.repeats);
        fmaN = fma_measure(isa, iters, o.threads, o.repeats);
    }

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

    if (o.text) {
        printf("cpu: %s, %d threads for the all-threads figures\n", cpu[0] ? cpu : "?", o.threads);
        if (isa)
            printf("FMA peak (fp32, %s, %d-bit vectors, %d chains): %.1f GFLOP/s on 1 thread, %.1f on %d threads\n",
                   isa->name, isa->bits, isa->accumulators, fma1.median, fmaN.median, o.threads);
        else
            printf("FMA peak: no vector path on this machine (not x86-64): not measured\n");
        printf("OpenBLAS: %s, core %s\n", config, core);
        for (int s = 0; s < o.nsizes; s++)
            printf("sgemm n=%d: %.1f GFLOP/s on 1 thread, %.1f on %d threads\n", gemm[s].n, gemm[s].one.median,
                   gemm[s].all.median, o.threads);
        printf("medians of %d measurements (FMA: %.2f s each)%s%s; %.1f s in all\n", o.repeats, o.seconds,
               o.quick ? "; --quick: a smoke test, not a result" : "",
               optimized ? "" : "; WARNING: compiled without optimization, the FMA figures are too low", seconds);
        return 0;
    }

    printf("{\"program\": \"bench/peak\", \"cpu\": ");
    json_str(stdout, cpu);
    printf(", \"threads\": %d, \"isa\": ", o.threads);
    json_str(stdout, isa ? isa->name : "none");
    printf(", \"vector_bits\": %d, \"accumulators\": %d, \"statistic\": \"median\", \"repeats\": %d, "
           "\"fma_seconds\": %.3f, \"fma_iterations\": %ld",
           isa ? isa->bits : 0, isa ? isa->accumulators : 0, o.repeats, o.seconds, iters);
    json_stat(stdout, "fma_gflops_1t", isa ? &fma1 : NULL);
    json_stat(stdout, "fma_gflops_all", isa ? &fmaN : NULL);
    printf(", \"openblas_core\": ");
    json_str(stdout, core);
    printf(", \"openblas_config\": ");
    json_str(stdout, config);
    printf(", \"sgemm_n\": %d", gemm[big].n);
    json_stat(stdout, "sgemm_gflops_1t", &gemm[big].one);
    json_stat(stdout, "sgemm_gflops_all", &gemm[big].all);
    printf(", \"sgemm\": [");
    for (int s = 0; s < o.nsizes; s++) {
        printf("%s{\"n\": %d", s ? ", " : "", gemm[s].n);
        json_stat(stdout, "gflops_1t", &gemm[s].one);
        json_stat(stdout, "gflops_all", &gemm[s].all);
        printf("}");
    }
    printf("], \"optimized\": %s, \"quick\": %s, \"seconds\": %.3f}\n", optimized ? "true" : "false",
           o.quick ? "true" : "false", seconds);
    return 0;
}
