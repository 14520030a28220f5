/* graphc bench.  The two executors run the same bound graph on the same random feeds,
 * alternating step by step after a warm-up, so that noise on a shared machine hits
 * both alike; each reports the median.  See docs/benchmarks.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "run/bench.h"
#include "run/ablate.h"
#include "exec/pipeline.h"
#include "kernels/kern.h"
#include "util/rng.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct Row {
    OpKind op;
    int line;
    int calls;
    bool staged;   /* its ops ran in parallel stages */
    double ns, flops, bytes, moved;   /* bytes: of the outputs; moved: read and written (exec_node_bytes) */
    double idle, cpu;                 /* thread-ns idle while it ran (EnvStep.prof_idle), CPU ns */
} Row;

static int by_time(const void *a, const void *b)
{
    const Row *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

/* mp: the compiled plan's memory plan (its parallel stages), NULL for the interpreter. */
static void profile_table(FILE *out, const Graph *g, const MemPlan *mp, int threads, const double *ns,
                          const double *idle, const double *cpu, int steps, double step_ns, double step_cpu,
                          const char *mode)
{
    Row *rows = gc_calloc((size_t)g->nnodes, sizeof *rows);
    if (!rows) return;
    int nr = 0, staged = 0;
    double kernel_wall = 0, kernel_idle = 0, kernel_cpu = 0, serial_idle = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->op == OP_INPUT || n->op == OP_PARAM) continue;
        int line = 0, col = 0;
        if (g->src) diag_line_col(g->src, n->loc.start, &line, &col);
        int r = 0;
        bool in_stage = mp && mp->parallel > 0 && stage_calls(g, mp, mp->stage[i]) > 1;
        while (r < nr && !(rows[r].op == n->op && rows[r].line == line && rows[r].staged == in_stage)) r++;
        if (r == nr) { rows[nr].op = n->op; rows[nr].line = line; rows[nr].staged = in_stage; nr++; }
        staged += in_stage;
        rows[r].calls++;
        rows[r].ns += ns[i] / steps;
        rows[r].idle += idle[i] / steps;
        rows[r].cpu += cpu[i] / steps;
        kernel_idle += idle[i] / steps;
        kernel_cpu += cpu[i] / steps;
        /* an op that left all but one thread idle throughout ran serially */
        if (!in_stage && idle[i] >= (threads - 1) * ns[i] * 0.98) serial_idle += idle[i] / steps;
        rows[r].flops += node_flops(g, n);
        rows[r].bytes += (double)node_bytes(n);
        rows[r].moved += exec_node_bytes(g, n, threads);
        /* a stage's threads are busy or idle throughout it: its wall is their sum over T */
        kernel_wall += (in_stage ? (ns[i] + idle[i]) / threads : ns[i]) / steps;
    }
    qsort(rows, (size_t)nr, sizeof *rows, by_time);
    fprintf(out, "\n  profile, %s mode (per step; %d steps)\n", mode, steps);
    fprintf(out, "  %-20s %5s %5s %9s %6s %8s %8s %9s %8s %9s %9s %7s\n", "op", "line", "calls", "ms", "share", "idle ms",
            "CPU ms", "MFLOP", "GFLOP/s", "MB out", "MB moved", "GB/s");
    for (int r = 0; r < nr; r++) {
        if (rows[r].ns < 1e3 && r > 20) continue;
        char name[32];
        snprintf(name, sizeof name, "%s%s", op_name(rows[r].op), rows[r].staged ? " *" : "");
        fprintf(out, "  %-20s %5d %5d %9.3f %5.1f%% %8.3f %8.3f %9.1f %8.1f %9.2f %9.2f %7.1f\n", name, rows[r].line,
                rows[r].calls, rows[r].ns / 1e6, 100 * rows[r].ns / step_ns, rows[r].idle / 1e6, rows[r].cpu / 1e6,
                rows[r].flops / 1e6,
                rows[r].ns > 0 ? rows[r].flops / rows[r].ns : 0, rows[r].bytes / 1e6, rows[r].moved / 1e6,
                rows[r].ns > 0 ? rows[r].moved / rows[r].ns : 0);
    }
    /* outside the kernels the workers wait while the caller does the executor's work */
    double other = step_ns - kernel_wall;
    fprintf(out, "  %-20s %5s %5s %9.3f %5.1f%%   (allocation, shape checks, dispatch, copies of outputs)\n",
            "outside kernels", "", "", other / 1e6, 100 * other / step_ns);
    if (threads > 1) {
        double idle_all = kernel_idle + (threads - 1) * other;
        fprintf(out, "  threads idle: %.3f of %d x %.3f thread-ms (%.1f%%): %.3f in ops run on one thread, %.3f in split "
                     "ops%s, %.3f outside kernels; CPU %.3f ms, %.3f of it in kernels\n",
                idle_all / 1e6, threads, step_ns / 1e6, 100 * idle_all / (threads * step_ns), serial_idle / 1e6,
                (kernel_idle - serial_idle) / 1e6, staged ? " and stages" : "", (threads - 1) * other / 1e6,
                step_cpu / 1e6, kernel_cpu / 1e6);
    }
    if (staged)
        fprintf(out, "  * %d op%s ran in parallel stages, at the same time as another op: their times overlap, so the\n"
                     "    shares add up to more than the step; a stage's idle is on each thread's last op in it\n",
                staged, staged == 1 ? "" : "s");
    gc_free(rows);
}

void bench_free_feeds(const Graph *g, void **f)
{
    if (!f) return;
    for (int i = 0; i < g->ninputs; i++) gc_free(f[i]);
    gc_free(f);
}

/* Random inputs for every input of the bound graph; NULL (reported) if they do not fit
 * in memory. */
static void **random_feeds(const Graph *g, int32_t classes, DiagSink *d)
{
    void **f = gc_calloc((size_t)g->ninputs + 1, sizeof *f);
    if (!f) { diag_plain(d, "out of memory"); return NULL; }
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        int64_t cnt = shape_numel(&n->shape);
        size_t bytes;
        char what[256];
        snprintf(what, sizeof what, "input '%s'", n->name ? n->name : "?");
        if (cnt < 0 || !exec_fits_memory((double)cnt * 4, what, d)) {
            bench_free_feeds(g, f);
            return NULL;
        }
        f[i] = gc_mul_size((size_t)cnt, 4, &bytes) ? gc_malloc_pages(bytes, 64) : NULL;
        if (!f[i]) {
            char b[128];
            diag_plain(d, "out of memory: input '%s' %s needs %.1f GB", n->name ? n->name : "?",
                       shape_str(g, &n->shape, b, sizeof b), (double)cnt * 4 / 1e9);
            bench_free_feeds(g, f);
            return NULL;
        }
        for (int64_t k = 0; k < cnt; k++) {
            uint64_t bits = rng_at(1234, (uint64_t)i, (uint64_t)k);
            if (n->dtype == DT_F32) ((float *)f[i])[k] = rng_unit(bits);
            else ((int32_t *)f[i])[k] = (int32_t)rng_below(bits, (uint64_t)classes);
        }
    }
    return f;
}

void **bench_feeds(const Graph *fwd, const Graph *g, DiagSink *d)
{
    int32_t classes = 2;
    if (fwd->logits >= 0 && fwd->nodes[fwd->logits].shape.rank == 2) classes = (int32_t)fwd->nodes[fwd->logits].shape.d[1].v;
    return random_feeds(g, classes, d);
}

StepEnv bench_env(const Graph *g, Weights *w, const BenchOptions *o, DiagSink *d)
{
    /* the model's optimizer, at a small learning rate so the weights stay sane */
    StepEnv e = { .w = w, .seed = 1, .training = !o->infer, .d = d, .isa = o->isa };
    step_env_train(&e, &g->train, 0);
    e.lr = 1e-4f;
    return e;
}

double bench_cpu_ns(long *minor_faults)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    if (minor_faults) *minor_faults = u.ru_minflt;
    return 1e9 * (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e3 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int bench_turn(int s, int m, int nm) { return (s % 2) ? (nm - 1 - (m + s / 2) % nm) : (m + s / 2) % nm; }

/* The modes measured side by side: the interpreter, the compiled plan, and with
 * --compare-stages the compiled plan without parallel stages (each op alone, split
 * over the pool).  A training step writes its weights, so each mode has its own, made
 * alike.  An inference step only reads them, and the modes share the first mode's:
 * with a copy each, every step read weights the other modes' steps had pushed out of
 * the cache (MNIST's 12.8 MB dense layer, three copies against a 32 MiB L3: the
 * compiled plan's batch-1 step took 0.32-0.45 ms alternating, 0.19-0.20 ms alone), a
 * cost that a peer running its steps back to back, or a server, does not pay. */
enum { NM_MAX = 3 };
static const char *const mode_names[NM_MAX] = { "interp", "compiled", "one op at a time" };

typedef struct Bench {
    const Graph *fwd;
    const BenchOptions *o;
    int64_t batch;
    int nm;
    Step step[NM_MAX];
    Weights w[NM_MAX];
    Weights *wp[NM_MAX];       /* the weights mode m runs on: its own w[m], or w[0] */
    StepEnv env[NM_MAX];
    double *times[NM_MAX];     /* per measured step */
    double *cpu[NM_MAX];       /* and the process's CPU time in it */
    double med[NM_MAX], cpu_med[NM_MAX];
    size_t mem[NM_MAX];
    double compile_ns;         /* the compiled plan's prepare(): step graph, passes, plan, calls */
    int threads;               /* the pool's */
    Pool *pool;
    double bytes;              /* the compiled plan's bytes per step (exec_step_bytes) */
    void **feeds;
    float *outs[16];
    float scratch_out[16][1];
} Bench;

static void bench_free(Bench *b)
{
    bench_free_feeds(b->step[0].graph, b->feeds);   /* made from the first step's graph */
    for (int m = 0; m < NM_MAX; m++) {
        step_free(&b->step[m]);
        if (b->wp[m] == &b->w[m]) weights_free(&b->w[m]);
        gc_free(b->times[m]);
        gc_free(b->cpu[m]);
    }
}

/* Every mode's step, weights and environment, and the random feeds. */
static int bench_setup(Bench *b, Pool *pool, DiagSink *d)
{
    const BenchOptions *o = b->o;
    b->nm = o->compare_stages ? 3 : 2;
    for (int m = 0; m < b->nm; m++) {
        CompileOptions co = { .mode = m == 0 ? MODE_INTERP : MODE_COMPILED, .pool = pool, .seed = 1,
                              .stages = m == 2 ? STAGES_OFF : STAGES_COST };
        double t0 = exec_now_ns();
        b->wp[m] = o->infer ? &b->w[0] : &b->w[m];
        if (prepare(b->fwd, o->infer ? FOR_INFERENCE : FOR_TRAINING, b->batch, &co, b->wp[m], &b->step[m], d) != 0)
            return -1;
        if (m == 1) b->compile_ns = exec_now_ns() - t0;
        b->times[m] = gc_calloc((size_t)o->steps, sizeof(double));
        b->cpu[m] = gc_calloc((size_t)o->steps, sizeof(double));
        if (!b->times[m] || !b->cpu[m]) {
            diag_plain(d, "out of memory");
            return -1;
        }
        b->env[m] = bench_env(b->step[m].graph, b->wp[m], o, d);
    }
    b->threads = pool_threads(pool);
    b->pool = pool;
    b->bytes = exec_step_bytes(executor_graph(b->step[1].ex), b->threads);
    const Graph *g = b->step[0].graph;
    b->feeds = bench_feeds(b->fwd, g, d);
    if (!b->feeds) return -1;
    for (int i = 0; i < g->noutputs && i < 16; i++)
        b->outs[i] = shape_numel(&g->nodes[g->outputs[i].node].shape) == 1 ? b->scratch_out[i] : NULL;
    return 0;
}

static int bench_step(Bench *b, int m) { return executor_run(b->step[m].ex, (const void *const *)b->feeds, b->outs, &b->env[m]); }

/* The warm-up, then the measured steps, the modes alternating step by step (which
 * goes first rotates, so none always follows another); medians. */
static int bench_time(Bench *b)
{
    int n = b->o->steps, nm = b->nm;
    for (int s = 0; s < b->o->warmup; s++)
        for (int m = 0; m < nm; m++)
            if (bench_step(b, m) != 0) return -1;
    for (int s = 0; s < n; s++)
        for (int m = 0; m < nm; m++) {
            int mm = bench_turn(s, m, nm);
            b->env[mm].step = s;
            double t0 = exec_now_ns(), c0 = bench_cpu_ns(NULL);
            if (bench_step(b, mm) != 0) return -1;
            b->times[mm][s] = exec_now_ns() - t0;
            b->cpu[mm][s] = bench_cpu_ns(NULL) - c0;
        }
    for (int m = 0; m < nm; m++) {
        b->med[m] = bench_median(b->times[m], n);
        b->cpu_med[m] = bench_median(b->cpu[m], n);
        b->mem[m] = executor_peak_bytes(b->step[m].ex);
    }
    return 0;
}

static void bench_report(const Bench *b, int threads)
{
    const BenchOptions *o = b->o;
    FILE *out = o->out;
    const Graph *g = b->step[0].graph;
    const double *med = b->med;
    const size_t *mem = b->mem;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const char *model = b->fwd->model_name ? b->fwd->model_name : "model";
    const char *isa = kern_isa_label(o->isa);   /* the variant that ran ("avx512+bf16" with --dtype bf16) */
    if (o->json) {
        char serial[192] = "";   /* the fields before "ratio" that only some runs have, and the CPU times */
        int len = b->nm == 3 ? snprintf(serial, sizeof serial, "\"one_op_at_a_time_ms\": %.3f, ", med[2] / 1e6) : 0;
        snprintf(serial + len, sizeof serial - (size_t)len, "\"interp_cpu_ms\": %.3f, \"compiled_cpu_ms\": %.3f, "
                 "\"cpu_ratio\": %.3f, ", b->cpu_med[0] / 1e6, b->cpu_med[1] / 1e6, b->cpu_med[0] / b->cpu_med[1]);
        fprintf(out, "{\"model\": \"%s\", \"step\": \"%s\", \"batch\": %lld, \"threads\": %d, \"blas\": \"%s\", \"isa\": \"%s\", "
                "\"interp_ms\": %.3f, \"compiled_ms\": %.3f, %s\"ratio\": %.3f, \"interp_images_per_s\": %.1f, "
                "\"compiled_images_per_s\": %.1f, \"interp_peak_bytes\": %zu, \"compiled_arena_bytes\": %zu, "
                "\"max_rss_kb\": %ld, \"steps\": %d, \"gflop_per_step\": %.4f, \"bytes_per_step\": %.0f, "
                "\"compile_ms\": %.3f}\n",
                model, o->infer ? "inference" : "training", (long long)b->batch, threads, kern_blas_info(), isa, med[0] / 1e6,
                med[1] / 1e6, serial, med[0] / med[1], 1e9 * (double)b->batch / med[0], 1e9 * (double)b->batch / med[1],
                mem[0], mem[1], ru.ru_maxrss, o->steps, graph_flops(g) / 1e9, b->bytes, b->compile_ns / 1e6);
        return;
    }
    fprintf(out, "%s, %s step, batch %lld: %.2f GFLOP/step, %.1f MB/step moved (compiled), %d steps after %d warm-up, %s, "
            "%s kernels, %d thread%s\n",
            model, o->infer ? "inference" : "training", (long long)b->batch, graph_flops(g) / 1e9, b->bytes / 1e6,
            o->steps, o->warmup, kern_blas_info(), isa, threads, threads == 1 ? "" : "s");
    fprintf(out, "  %-16s %12s %10s %9s %16s %8s\n", "mode", "median ms", "images/s", "GFLOP/s", "activations MB",
            "CPU ms");
    for (int m = 0; m < b->nm; m++)
        fprintf(out, "  %-16s %12.2f %10.1f %9.1f %16.1f %8.2f  (%s)\n", mode_names[m], med[m] / 1e6,
                1e9 * (double)b->batch / med[m], graph_flops(g) / med[m], (double)mem[m] / 1e6, b->cpu_med[m] / 1e6,
                m == 0 ? "peak live" : "arena, scratch in it");
    fprintf(out, "  interp / compiled: %.2fx, in CPU time %.2fx   (process peak resident memory %.1f MB)\n",
            med[0] / med[1], b->cpu_med[0] / b->cpu_med[1], (double)ru.ru_maxrss / 1024);
    if (b->nm == 3) {
        const MemPlan *mp = executor_memplan(b->step[1].ex);
        fprintf(out, "  one op at a time / compiled: %.2fx   (%d of %d stages run several ops at once)\n",
                med[2] / med[1], mp ? mp->parallel : 0, mp ? mp->nstages : 0);
    }
    fprintf(out, "  compile: %.2f ms (step graph, passes, memory plan and calls)\n", b->compile_ns / 1e6);
}

/* --profile: each op's time, the steps run again with the kernels timed. */
static int bench_profile(Bench *b)
{
    int n = b->o->steps;
    for (int m = 0; m < 2; m++) {
        const Graph *eg = executor_graph(b->step[m].ex);
        double *prof = gc_calloc((size_t)eg->nnodes * 3, sizeof(double));
        if (!prof) return -1;
        b->env[m].prof_ns = prof;
        b->env[m].prof_idle = prof + eg->nnodes;
        b->env[m].prof_cpu = prof + 2 * eg->nnodes;
        pool_set_stats(b->pool, true);
        double t0 = exec_now_ns(), c0 = (double)pool_cpu_ns(b->pool);
        int rc = 0;
        for (int s = 0; s < n && rc == 0; s++) rc = bench_step(b, m);
        double step_ns = (exec_now_ns() - t0) / n, step_cpu = ((double)pool_cpu_ns(b->pool) - c0) / n;
        pool_set_stats(b->pool, false);
        b->env[m].prof_ns = b->env[m].prof_idle = b->env[m].prof_cpu = NULL;
        if (rc == 0)
            profile_table(b->o->out, eg, executor_memplan(b->step[m].ex), b->threads, prof, prof + eg->nnodes,
                          prof + 2 * eg->nnodes, n, step_ns, step_cpu, mode_names[m]);
        gc_free(prof);
        if (rc != 0) return -1;
    }
    return 0;
}

static int bench_batch(const Graph *fwd, const BenchOptions *o, int64_t batch, Pool *pool, DiagSink *d)
{
    Bench b = { .fwd = fwd, .o = o, .batch = batch };
    int rc = -1;
    if (bench_setup(&b, pool, d) == 0 && bench_time(&b) == 0) {
        bench_report(&b, pool_threads(pool));
        rc = o->profile ? bench_profile(&b) : 0;
        fflush(o->out);
    }
    bench_free(&b);
    return rc;
}

int bench_run(const Graph *fwd, const BenchOptions *o, DiagSink *d)
{
    Pool *pool = pool_new(o->threads > 0 ? o->threads : 0);
    if (!pool) {
        diag_plain(d, "out of memory");
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < o->nbatches && rc == 0; i++) {
        rc = o->ablate ? ablate_batch(fwd, o, o->batches[i], pool, d) : bench_batch(fwd, o, o->batches[i], pool, d);
        if (rc == 0 && !o->json && i + 1 < o->nbatches) fputc('\n', o->out);
    }
    pool_free(pool);
    return rc;
}
