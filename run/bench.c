/* graphc bench.  The two executors run the same bound graph on the same random feeds,
 * alternating step by step after a warm-up, so that noise on a shared machine hits
 * both alike; each reports the median.  See docs/benchmarks.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "run/bench.h"
#include "exec/compiled.h"
#include "exec/executor.h"
#include "kernels/kern.h"
#include "graph/passes.h"
#include "util/rng.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct Row {
    OpKind op;
    int line;
    int calls;
    bool staged;   /* its ops ran in parallel stages */
    double ns, flops, bytes;
} Row;

static int by_time(const void *a, const void *b)
{
    const Row *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

/* mp: the compiled plan's memory plan (its parallel stages), NULL for the interpreter. */
static void profile_table(FILE *out, const Graph *g, const MemPlan *mp, const double *ns, int steps, double step_ns,
                          const char *mode)
{
    Row *rows = calloc((size_t)g->nnodes, sizeof *rows);
    if (!rows) return;
    int nr = 0, staged = 0;
    double kernel_ns = 0;
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
        rows[r].flops += node_flops(g, n);
        rows[r].bytes += (double)node_bytes(n);
        kernel_ns += ns[i] / steps;
    }
    qsort(rows, (size_t)nr, sizeof *rows, by_time);
    fprintf(out, "\n  profile, %s mode (per step; %d steps)\n", mode, steps);
    fprintf(out, "  %-20s %5s %5s %9s %6s %9s %8s %9s\n", "op", "line", "calls", "ms", "share", "MFLOP", "GFLOP/s", "MB out");
    for (int r = 0; r < nr; r++) {
        if (rows[r].ns < 1e3 && r > 20) continue;
        char name[32];
        snprintf(name, sizeof name, "%s%s", op_name(rows[r].op), rows[r].staged ? " *" : "");
        fprintf(out, "  %-20s %5d %5d %9.3f %5.1f%% %9.1f %8.1f %9.2f\n", name, rows[r].line, rows[r].calls,
                rows[r].ns / 1e6, 100 * rows[r].ns / step_ns, rows[r].flops / 1e6,
                rows[r].ns > 0 ? rows[r].flops / rows[r].ns : 0, rows[r].bytes / 1e6);
    }
    double other = step_ns - kernel_ns;
    fprintf(out, "  %-20s %5s %5s %9.3f %5.1f%%   (allocation, shape checks, dispatch, copies of outputs)\n",
            "outside kernels", "", "", other / 1e6, 100 * other / step_ns);
    if (staged)
        fprintf(out, "  * %d op%s ran in parallel stages, at the same time as another op: their times overlap, so the\n"
                     "    shares add up to more than the step and 'outside kernels' is less than the real overhead\n",
                staged, staged == 1 ? "" : "s");
    free(rows);
}

static void free_feeds(const Graph *g, void **f)
{
    if (!f) return;
    for (int i = 0; i < g->ninputs; i++) free(f[i]);
    free(f);
}

/* Random inputs for every input of the bound graph; NULL (reported) if they do not fit
 * in memory. */
static void **random_feeds(const Graph *g, int32_t classes, DiagSink *d)
{
    void **f = calloc((size_t)g->ninputs + 1, sizeof *f);
    if (!f) { diag_plain(d, "out of memory"); return NULL; }
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        int64_t cnt = shape_numel(&n->shape);
        size_t bytes;
        char what[256];
        snprintf(what, sizeof what, "input '%s'", n->name ? n->name : "?");
        if (cnt < 0 || !exec_fits_memory((double)cnt * 4, what, d)) {
            free_feeds(g, f);
            return NULL;
        }
        f[i] = gc_mul_size((size_t)cnt, 4, &bytes) ? malloc(bytes) : NULL;
        if (!f[i]) {
            char b[128];
            diag_plain(d, "out of memory: input '%s' %s needs %.1f GB", n->name ? n->name : "?",
                       shape_str(g, &n->shape, b, sizeof b), (double)cnt * 4 / 1e9);
            free_feeds(g, f);
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

static int bench_batch(const Graph *fwd, const BenchOptions *o, int64_t batch, DiagSink *d)
{
    FILE *out = o->out;
    double tc0 = exec_now_ns();
    Graph *g = o->infer ? pass_inference(fwd, false, d) : pass_autodiff(fwd, d);
    if (!g) return -1;
    const char *sym = NULL;
    for (int i = 0; i < g->ninputs && !sym; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        if (n->tshape.rank > 0 && n->tshape.d[0].sym >= 0) sym = g->syms[n->tshape.d[0].sym];
    }
    if (!sym || graph_bind(g, sym, batch, d) != 0) {
        if (!sym) diag_plain(d, "the model has no batch dimension to bind");
        graph_free(g);
        return -1;
    }
    int32_t classes = 2;
    if (fwd->logits >= 0 && fwd->nodes[fwd->logits].shape.rank == 2) classes = (int32_t)fwd->nodes[fwd->logits].shape.d[1].v;
    /* modes: the interpreter, the compiled plan, and with --compare-stages the
     * compiled plan without parallel stages (each op alone, split over the pool) */
    enum { NM_MAX = 3 };
    const int NM = o->compare_stages ? 3 : 2;
    static const char *const names[NM_MAX] = { "interp", "compiled", "one op at a time" };
    Weights w[NM_MAX];
    Executor *ex[NM_MAX] = { NULL, NULL, NULL };
    int rc = -1;
    memset(w, 0, sizeof w);
    /* compile time: the step's graph (autodiff or inference pass, binding) and the
     * compiled plan (cse, fold, fuse, memory plan, call list); not the random inputs,
     * not the weights */
    double graph_ns = exec_now_ns() - tc0, plan_ns = 0;
    void **feeds = random_feeds(g, classes, d);
    int n = o->steps;
    if (!feeds) {
        graph_free(g);
        return -1;
    }
    double *times[NM_MAX] = { NULL, NULL, NULL }, *prof[NM_MAX] = { NULL, NULL, NULL };
    for (int m = 0; m < NM; m++) {
        times[m] = calloc((size_t)n, sizeof(double));
        if (!times[m] || weights_init(&w[m], g, 1, d) != 0) goto out;
        double t0 = exec_now_ns();
        stages_set_mode(m == 2 ? STAGES_OFF : STAGES_COST);
        ex[m] = executor_plan(m == 0 ? MODE_INTERP : MODE_COMPILED, g, &w[m], d);
        stages_set_mode(STAGES_COST);
        if (m == 1) plan_ns = exec_now_ns() - t0;
        if (!ex[m]) goto out;
    }
    float scratch_out[16][1];
    float *outs[16] = { 0 };
    for (int i = 0; i < g->noutputs && i < 16; i++)
        outs[i] = shape_numel(&g->nodes[g->outputs[i].node].shape) == 1 ? scratch_out[i] : NULL;
    StepEnv env[NM_MAX];
    for (int m = 0; m < NM; m++)
        env[m] = (StepEnv){ .w = &w[m], .seed = 1, .lr = 1e-4f, .momentum = g->train.momentum, .beta1 = 0.9f,
                            .beta2 = 0.999f, .eps = 1e-7f, .nesterov = g->train.nesterov, .training = !o->infer, .d = d };
    for (int s = 0; s < o->warmup; s++)
        for (int m = 0; m < NM; m++)
            if (executor_run(ex[m], (const void *const *)feeds, outs, &env[m]) != 0) goto out;
    for (int s = 0; s < n; s++)
        for (int m = 0; m < NM; m++) {
            /* rotate which mode goes first, so none always follows another */
            int mm = (s % 2) ? (NM - 1 - (m + s / 2) % NM) : (m + s / 2) % NM;
            env[mm].step = s;
            double t0 = exec_now_ns();
            if (executor_run(ex[mm], (const void *const *)feeds, outs, &env[mm]) != 0) goto out;
            times[mm][s] = exec_now_ns() - t0;
        }
    double med[NM_MAX] = { 0 };
    size_t mem[NM_MAX] = { 0 };
    for (int m = 0; m < NM; m++) {
        med[m] = median(times[m], n);
        mem[m] = executor_peak_bytes(ex[m]);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (o->json) {
        char serial[96] = "";
        if (NM == 3) snprintf(serial, sizeof serial, "\"one_op_at_a_time_ms\": %.3f, ", med[2] / 1e6);
        fprintf(out, "{\"model\": \"%s\", \"step\": \"%s\", \"batch\": %lld, \"threads\": %d, \"blas\": \"%s\", "
                "\"interp_ms\": %.3f, \"compiled_ms\": %.3f, %s\"ratio\": %.3f, \"interp_images_per_s\": %.1f, "
                "\"compiled_images_per_s\": %.1f, \"interp_peak_bytes\": %zu, \"compiled_arena_bytes\": %zu, "
                "\"max_rss_kb\": %ld, \"steps\": %d, \"gflop_per_step\": %.4f, \"compile_ms\": %.3f}\n",
                fwd->model_name ? fwd->model_name : "model", o->infer ? "inference" : "training", (long long)batch,
                o->threads, kern_blas_info(), med[0] / 1e6, med[1] / 1e6, serial, med[0] / med[1],
                1e9 * (double)batch / med[0], 1e9 * (double)batch / med[1], mem[0], mem[1], ru.ru_maxrss, n,
                graph_flops(g) / 1e9, (graph_ns + plan_ns) / 1e6);
    } else {
        fprintf(out, "%s, %s step, batch %lld: %.2f GFLOP/step, %d steps after %d warm-up, %s\n",
                fwd->model_name ? fwd->model_name : "model", o->infer ? "inference" : "training", (long long)batch,
                graph_flops(g) / 1e9, n, o->warmup, kern_blas_info());
        fprintf(out, "  %-16s %12s %10s %9s %16s\n", "mode", "median ms", "images/s", "GFLOP/s", "activations MB");
        for (int m = 0; m < NM; m++)
            fprintf(out, "  %-16s %12.2f %10.1f %9.1f %16.1f  (%s)\n", names[m], med[m] / 1e6,
                    1e9 * (double)batch / med[m], graph_flops(g) / med[m], (double)mem[m] / 1e6,
                    m == 0 ? "peak live" : "arena, scratch in it");
        fprintf(out, "  interp / compiled: %.2fx   (process peak resident memory %.1f MB)\n", med[0] / med[1],
                (double)ru.ru_maxrss / 1024);
        if (NM == 3) {
            const MemPlan *mp = executor_memplan(ex[1]);
            fprintf(out, "  one op at a time / compiled: %.2fx   (%d of %d stages run several ops at once)\n",
                    med[2] / med[1], mp ? mp->parallel : 0, mp ? mp->nstages : 0);
        }
        fprintf(out, "  compile: %.2f ms (step graph and binding %.2f ms, plan %.2f ms)\n", (graph_ns + plan_ns) / 1e6,
                graph_ns / 1e6, plan_ns / 1e6);
    }
    if (o->profile) {
        for (int m = 0; m < 2; m++) {
            const Graph *eg = executor_graph(ex[m]);
            prof[m] = calloc((size_t)eg->nnodes, sizeof(double));
            if (!prof[m]) goto out;
            env[m].prof_ns = prof[m];
            double t0 = exec_now_ns();
            for (int s = 0; s < n; s++)
                if (executor_run(ex[m], (const void *const *)feeds, outs, &env[m]) != 0) goto out;
            double step_ns = (exec_now_ns() - t0) / n;
            env[m].prof_ns = NULL;
            profile_table(out, eg, executor_memplan(ex[m]), prof[m], n, step_ns, names[m]);
        }
    }
    fflush(out);
    rc = 0;
out:
    for (int m = 0; m < NM; m++) {
        executor_free(ex[m]);
        weights_free(&w[m]);
        free(times[m]);
        free(prof[m]);
    }
    free_feeds(g, feeds);
    graph_free(g);
    return rc;
}

int bench_run(const Graph *fwd, const BenchOptions *o, DiagSink *d)
{
    kern_blas_threads(o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < o->nbatches; i++) {
        if (bench_batch(fwd, o, o->batches[i], d) != 0) return -1;
        if (!o->json && i + 1 < o->nbatches) fputc('\n', o->out);
    }
    return 0;
}
