/* graphc bench --ablate.  See ablate.h.
 *
 * A configuration is a set of optimizations (bits of ablate_steps), turned into the
 * CompileOptions of one prepare(): the executor (the interpreter, or the compiled call
 * list), the memory plan's switches (per-op allocation, no reuse, no in-place, stages)
 * and the passes switched off.  Every configuration has weights of its own, made
 * alike, so all compute the same steps; the compiled ones borrow one arena, as only
 * one runs at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "run/ablate.h"
#include "run/plot.h"
#include "exec/pipeline.h"
#include "graph/passes.h"
#include "kernels/kern.h"

/* The steps, in the adding table's order: what the runtime does per op, then the
 * passes in graph_passes order, then the stages.  Every pass of graph_passes belongs to
 * exactly one step (checked when the ablation starts). */
enum {
    S_CALLS, S_ARENA, S_REUSE, S_INPLACE, S_CLEANUP, S_EPILOGUES, S_ELEMWISE, S_MAXPOOL, S_UPDATES, S_GEMM, S_STAGES,
    S_COUNT
};
const AblateStep ablate_steps[S_COUNT] = {
    [S_CALLS] = { "calls", "compiled call list, no per-op checks", "" },
    [S_ARENA] = { "arena", "one arena, no malloc/free per op", "" },
    [S_REUSE] = { "reuse", "arena shared by lifetimes", "" },
    [S_INPLACE] = { "inplace", "outputs written in place", "" },
    [S_CLEANUP] = { "cleanup", "cse and constant folding", "cse,folded" },
    [S_EPILOGUES] = { "epilogues", "epilogues: bias, act, batch norm", "bn_fold,bn_add,bn_act,bn_relu_grad,bias_act" },
    [S_ELEMWISE] = { "elementwise", "elementwise, masked softmax, attention", "elementwise,masked_softmax,attention,ln_grad_add" },
    [S_MAXPOOL] = { "maxpool", "max pool by indices / with its conv", "maxpool_grad_relu,pool_indices,conv_maxpool,conv_pool_argmax,pooled_grads" },
    [S_UPDATES] = { "updates", "updates in one pass, large ones early", "update_all,early_updates" },
    [S_GEMM] = { "gemm_updates", "updates fused into their GEMMs", "gemm_updates,dense_backward" },
    [S_STAGES] = { "stages", "parallel stages", "" },
};
const int ablate_nsteps = S_COUNT;
_Static_assert(S_COUNT <= ABLATE_MAX_STEPS, "ABLATE_MAX_STEPS");

#define BIT(k) (1u << (k))
#define ALL_ON ((1u << S_COUNT) - 1)

/* The passes of each step, as passes_off bits; -1 (reported) when a pass of the list
 * belongs to no step or two, or a step names a pass that is not there. */
static int step_masks(uint64_t *mask, DiagSink *d)
{
    uint64_t seen = 0;
    for (int k = 0; k < S_COUNT; k++) {
        mask[k] = 0;
        char names[128];
        snprintf(names, sizeof names, "%s", ablate_steps[k].passes);
        char *save = NULL;
        for (char *t = strtok_r(names, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int i = graph_pass_index(t);
            if (i < 0 || (seen >> i & 1)) {
                diag_plain(d, "internal error: ablation step '%s': pass '%s' %s", ablate_steps[k].name, t,
                           i < 0 ? "does not exist" : "is in another step too");
                return -1;
            }
            mask[k] |= (uint64_t)1 << i;
            seen |= (uint64_t)1 << i;
        }
    }
    for (int i = 0; i < graph_npasses; i++)
        if (!(seen >> i & 1)) {
            diag_plain(d, "internal error: pass '%s' is in no ablation step (run/ablate.c)", graph_passes[i].name);
            return -1;
        }
    return 0;
}

/* What a configuration can use: the interpreter has no arena, reuse, in-place or
 * stages; per-op allocation has nothing to reuse (the allocator does). */
static unsigned canonical(unsigned on)
{
    if (!(on & BIT(S_CALLS))) on &= ~(BIT(S_ARENA) | BIT(S_REUSE) | BIT(S_INPLACE) | BIT(S_STAGES));
    if (!(on & BIT(S_ARENA))) on &= ~BIT(S_REUSE);
    return on;
}

static CompileOptions options_of(unsigned on, const uint64_t *mask, Pool *pool)
{
    CompileOptions co = { .pool = pool, .seed = 1 };
    co.mode = on & BIT(S_CALLS) ? MODE_COMPILED : MODE_INTERP;
    co.per_op = !(on & BIT(S_ARENA));
    co.no_reuse = !(on & BIT(S_REUSE));
    co.no_inplace = !(on & BIT(S_INPLACE));
    co.stages = on & BIT(S_STAGES) ? STAGES_COST : STAGES_OFF;
    for (int k = 0; k < S_COUNT; k++)
        if (!(on & BIT(k))) co.passes_off |= mask[k];
        else if (mask[k]) co.interp_passes = true;
    return co;
}

static bool rounds_of(unsigned on, const uint64_t *mask)
{
    for (int k = 0; k < S_COUNT; k++)
        if (on & BIT(k))
            for (int i = 0; i < graph_npasses; i++)
                if ((mask[k] >> i & 1) && graph_passes[i].rounds) return true;
    return false;
}

/* The configuration with bits `on`: an existing one, or a new one. */
static int config_of(Ablation *a, unsigned on)
{
    on = canonical(on);
    for (int c = 0; c < a->ncfg; c++)
        if (a->cfg[c].on == on) return c;
    a->cfg[a->ncfg].on = on;
    return a->ncfg++;
}

static void make_tables(Ablation *a)
{
    a->ncfg = 0;
    for (int k = 0; k <= S_COUNT; k++) a->add[k] = config_of(a, (1u << k) - 1);
    for (int k = 0; k < S_COUNT; k++) a->remove[k] = config_of(a, ALL_ON & ~BIT(k));
}

/* ---- the measurement ------------------------------------------------------------- */

typedef struct Run {
    Step step;
    Weights w;
    StepEnv env;
    double *times;        /* per measured step */
    double *cpu;          /* and its CPU time */
    float **outs;         /* the step's outputs, copied */
    size_t *out_n;        /* floats of each */
    long faults;
    int64_t allocs0, bytes0;
} Run;

typedef struct Meas {
    const Graph *fwd;
    Ablation *a;
    const BenchOptions *o;
    uint64_t mask[S_COUNT];
    Run *run;
    void *arena;
    void **feeds;
} Meas;

static void meas_free(Meas *m)
{
    if (m->run) {
        bench_free_feeds(m->run[0].step.graph, m->feeds);
        for (int c = 0; c < m->a->ncfg; c++) {
            Run *r = &m->run[c];
            for (int i = 0; r->outs && i < r->step.graph->noutputs; i++) gc_free(r->outs[i]);
            gc_free(r->outs);
            gc_free(r->out_n);
            gc_free(r->times);
            gc_free(r->cpu);
            step_free(&r->step);
            weights_free(&r->w);
        }
    }
    gc_free(m->run);
    free(m->arena);
}

/* The arena the compiled configurations share: the largest of their plans, each made
 * once without weights to learn its size. */
static int shared_arena(Meas *m, Pool *pool, DiagSink *d)
{
    Ablation *a = m->a;
    int64_t most = 0;
    for (int c = 0; c < a->ncfg; c++) {
        CompileOptions co = options_of(a->cfg[c].on, m->mask, pool);
        if (co.mode != MODE_COMPILED || co.per_op) continue;
        Step s;
        if (prepare(m->fwd, m->o->infer ? FOR_INFERENCE : FOR_TRAINING, a->batch, &co, NULL, &s, d) != 0)
            return -1;
        if (s.plan.arena > most) most = s.plan.arena;
        step_free(&s);
    }
    a->shared_arena = most;
    if (!exec_fits_memory((double)most, "the compiled plans' arena", d)) return -1;
    m->arena = aligned_alloc(MEMPLAN_ALIGN, (size_t)memplan_align(most ? most : MEMPLAN_ALIGN));
    if (!m->arena) {
        diag_plain(d, "out of memory: the compiled plans' arena needs %lld bytes", (long long)most);
        return -1;
    }
    return 0;
}

static int run_setup(Meas *m, int c, Pool *pool, DiagSink *d)
{
    Run *r = &m->run[c];
    CompileOptions co = options_of(m->a->cfg[c].on, m->mask, pool);
    co.arena = m->arena;
    co.arena_bytes = m->a->shared_arena;
    if (prepare(m->fwd, m->o->infer ? FOR_INFERENCE : FOR_TRAINING, m->a->batch, &co, &r->w, &r->step, d) != 0)
        return -1;
    const Graph *g = r->step.graph;
    r->env = bench_env(g, &r->w, m->o, d);
    r->times = gc_calloc((size_t)m->o->steps, sizeof *r->times);
    r->cpu = gc_calloc((size_t)m->o->steps, sizeof *r->cpu);
    r->outs = gc_calloc((size_t)g->noutputs + 1, sizeof *r->outs);
    r->out_n = gc_calloc((size_t)g->noutputs + 1, sizeof *r->out_n);
    if (!r->times || !r->cpu || !r->outs || !r->out_n) goto oom;
    for (int i = 0; i < g->noutputs; i++) {
        r->out_n[i] = (size_t)shape_numel(&g->nodes[g->outputs[i].node].shape);
        r->outs[i] = gc_calloc(r->out_n[i] ? r->out_n[i] : 1, sizeof(float));
        if (!r->outs[i]) goto oom;
    }
    m->a->cfg[c].rounds = rounds_of(m->a->cfg[c].on, m->mask);
    m->a->cfg[c].same_bits = true;
    return 0;
oom:
    diag_plain(d, "out of memory");
    return -1;
}

/* One step of configuration c, timed (wall and CPU), its page faults counted; s < 0:
 * a warm-up step, not recorded. */
static int run_step(Meas *m, int c, int s)
{
    Run *r = &m->run[c];
    long f0, f1;
    r->env.step = s < 0 ? 0 : s;
    double c0 = bench_cpu_ns(&f0), t0 = exec_now_ns();
    int rc = executor_run(r->step.ex, (const void *const *)m->feeds, r->outs, &r->env);
    double t1 = exec_now_ns(), c1 = bench_cpu_ns(&f1);
    if (s >= 0) {
        r->faults += f1 - f0;
        r->times[s] = t1 - t0;
        r->cpu[s] = c1 - c0;
    }
    return rc;
}

/* x against the interpreter's y (n floats each) into cf: the bits, or the largest
 * difference relative to the largest |y|. */
static void compare(AblateConfig *cf, const float *x, const float *y, size_t n)
{
    if (memcmp(x, y, n * sizeof *x) == 0) return;
    cf->same_bits = false;
    double diff = 0, scale = 0;
    for (size_t k = 0; k < n; k++) {
        if (isnan(x[k]) != isnan(y[k])) diff = INFINITY;
        else if (!isnan(x[k])) diff = fmax(diff, fabs((double)x[k] - (double)y[k]));
        scale = fmax(scale, fabs((double)y[k]));
    }
    double rel = scale > 0 ? diff / scale : diff;
    if (!(rel <= cf->max_rel)) cf->max_rel = rel;
}

/* Every configuration's outputs of this step against the interpreter's (cfg 0); at the
 * end, its weights too (the sum of every step's updates). */
static void compare_outputs(Meas *m, bool weights)
{
    const Run *ref = &m->run[0];
    for (int c = 1; c < m->a->ncfg; c++) {
        AblateConfig *cf = &m->a->cfg[c];
        const Run *r = &m->run[c];
        for (int i = 0; i < ref->step.graph->noutputs; i++) {
            if (i < r->step.graph->noutputs && r->out_n[i] == ref->out_n[i]) {
                compare(cf, r->outs[i], ref->outs[i], ref->out_n[i]);
            } else {
                cf->same_bits = false;
                cf->max_rel = INFINITY;
            }
        }
        for (int v = 0; weights && v < ref->w.n; v++)
            compare(cf, r->w.data[v], ref->w.data[v], (size_t)shape_numel(&ref->w.shapes[v]));
    }
}

/* The warm-up, then the measured steps, alternating as graphc bench does. */
static int measure(Meas *m)
{
    int nc = m->a->ncfg, n = m->o->steps;
    for (int s = 0; s < m->o->warmup; s++) {
        for (int c = 0; c < nc; c++)
            if (run_step(m, c, -1) != 0) return -1;
        compare_outputs(m, false);
    }
    for (int c = 0; c < nc; c++) {
        executor_alloc_stats(m->run[c].step.ex, &m->run[c].allocs0, &m->run[c].bytes0);
    }
    for (int s = 0; s < n; s++) {
        for (int k = 0; k < nc; k++) {
            int c = bench_turn(s, k, nc);
            if (run_step(m, c, s) != 0) return -1;
        }
        compare_outputs(m, s == n - 1);
    }
    return 0;
}

static double quantile(const double *sorted, int n, double q)
{
    double x = q * (n - 1);
    int i = (int)x;
    return i + 1 < n ? sorted[i] + (x - i) * (sorted[i + 1] - sorted[i]) : sorted[n - 1];
}

static void summarise(Meas *m)
{
    int n = m->o->steps;
    for (int c = 0; c < m->a->ncfg; c++) {
        Run *r = &m->run[c];
        AblateConfig *cf = &m->a->cfg[c];
        cf->ms = bench_median(r->times, n) / 1e6;   /* sorts the times */
        cf->ms_p25 = quantile(r->times, n, 0.25) / 1e6;
        cf->ms_p75 = quantile(r->times, n, 0.75) / 1e6;
        cf->cpu_ms = bench_median(r->cpu, n) / 1e6;
        cf->faults = (double)r->faults / n;
        int64_t allocs, bytes;
        executor_alloc_stats(r->step.ex, &allocs, &bytes);
        cf->allocs = (double)(allocs - r->allocs0) / n;
        cf->alloc_bytes = (double)(bytes - r->bytes0) / n;
        cf->peak = (int64_t)executor_peak_bytes(r->step.ex);
    }
}

static double load_now(void)
{
    double l[1];
    return getloadavg(l, 1) == 1 ? l[0] : -1;
}

int ablate_measure(const Graph *fwd, const BenchOptions *o, int64_t batch, Pool *pool, Ablation *a, DiagSink *d)
{
    memset(a, 0, sizeof *a);
    a->model = fwd->model_name ? fwd->model_name : "model";
    a->infer = o->infer;
    a->batch = batch;
    a->threads = pool_threads(pool);
    a->steps = o->steps;
    a->warmup = o->warmup;
    a->cpus = pool_cores();
    Meas m = { .fwd = fwd, .a = a, .o = o };
    if (step_masks(m.mask, d) != 0) return -1;
    make_tables(a);
    m.run = gc_calloc((size_t)a->ncfg, sizeof *m.run);
    int rc = -1;
    if (!m.run) {
        diag_plain(d, "out of memory");
        goto out;
    }
    if (shared_arena(&m, pool, d) != 0) goto out;
    for (int c = 0; c < a->ncfg; c++)
        if (run_setup(&m, c, pool, d) != 0) goto out;
    m.feeds = bench_feeds(fwd, m.run[0].step.graph, d);
    if (!m.feeds) goto out;
    a->load[0] = load_now();
    if (measure(&m) != 0) goto out;
    a->load[1] = load_now();
    summarise(&m);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    a->max_rss_kb = ru.ru_maxrss;
    rc = 0;
out:
    meas_free(&m);
    return rc;
}

/* ---- the tables ------------------------------------------------------------------ */

/* A configuration's time: wall or CPU. */
static double ms_of(const AblateConfig *cf, bool cpu) { return cpu ? cf->cpu_ms : cf->ms; }
static double gap_of(const Ablation *a, bool cpu)
{
    return ms_of(&a->cfg[a->add[0]], cpu) - ms_of(&a->cfg[a->add[S_COUNT]], cpu);
}
/* What configuration c gains over ref (adding: c has one more step) or costs against
 * it (removing: c has one fewer). */
static double delta_of(const Ablation *a, int c, int ref, bool adding, bool cpu)
{
    double x = ms_of(&a->cfg[c], cpu), r = ms_of(&a->cfg[ref], cpu);
    return adding ? r - x : x - r;
}
static double share_of(const Ablation *a, double delta, bool cpu)
{
    double g = gap_of(a, cpu);
    return g != 0 ? delta / g : 0;
}
/* The sum of a table's gains or costs, and the spreads of its rows in quadrature. */
static double table_sum(const Ablation *a, bool adding, bool cpu, double *spread)
{
    const AblateConfig *full = &a->cfg[a->add[S_COUNT]];
    double sum = 0, s2 = 0, sf = (full->ms_p75 - full->ms_p25) / 2;
    for (int k = 0; k < S_COUNT; k++) {
        int c = adding ? a->add[k + 1] : a->remove[k], ref = adding ? a->add[k] : a->add[S_COUNT];
        const AblateConfig *cf = &a->cfg[c];
        sum += delta_of(a, c, ref, adding, cpu);
        s2 += pow((cf->ms_p75 - cf->ms_p25) / 2, 2) + (adding ? 0 : sf * sf);
    }
    if (spread) *spread = sqrt(s2);
    return sum;
}

static void outputs_text(const Ablation *a, int c, char *buf, size_t cap)
{
    const AblateConfig *cf = &a->cfg[c];
    if (c == 0) snprintf(buf, cap, "reference");
    else if (cf->same_bits) snprintf(buf, cap, "same bits");
    else snprintf(buf, cap, "rel %.1e%s", cf->max_rel, cf->rounds ? "" : " !");
}

static void text_row(const Ablation *a, FILE *out, const char *label, int c, int ref, bool adding)
{
    const AblateConfig *cf = &a->cfg[c];
    char o[32], wall[40] = "", cpu[40] = "";
    outputs_text(a, c, o, sizeof o);
    if (ref >= 0) {
        double dw = delta_of(a, c, ref, adding, false), dc = delta_of(a, c, ref, adding, true);
        snprintf(wall, sizeof wall, "%9.3f %6.1f%%", dw, 100 * share_of(a, dw, false));
        snprintf(cpu, sizeof cpu, "%9.3f %6.1f%%", dc, 100 * share_of(a, dc, true));
    }
    fprintf(out, "  %-40s %9.3f %7.3f %17s %9.3f %17s %11.0f %9.2f %8.2f  %s\n", label, cf->ms,
            (cf->ms_p75 - cf->ms_p25) / 2, wall, cf->cpu_ms, cpu, cf->faults, cf->alloc_bytes / 1e6,
            (double)cf->peak / 1e6, o);
}

static void text_header(FILE *out, const char *title, const char *delta)
{
    fprintf(out, "\n  %s\n", title);
    fprintf(out, "  %-40s %9s %7s %9s %7s %9s %9s %7s %11s %9s %8s  %s\n", "configuration", "ms/step", "spread", delta,
            "share", "CPU ms", delta, "share", "faults/step", "MB alloc", "peak MB", "outputs");
}

static void text_sum(const Ablation *a, FILE *out, bool adding)
{
    double spread, w = table_sum(a, adding, false, &spread), c = table_sum(a, adding, true, NULL);
    fprintf(out, "  %-40s %9s %7s %9.3f %6.1f%% %9s %9.3f %6.1f%%   ", adding ? "sum of the gains" : "sum of the costs", "",
            "", w, 100 * share_of(a, w, false), "", c, 100 * share_of(a, c, true));
    if (adding) fprintf(out, "(each row against the one above: the gap, exactly)\n");
    else fprintf(out, "(the rows' spreads in quadrature: %.3f ms)\n", spread);
}

static void print_text(const Ablation *a, FILE *out)
{
    const AblateConfig *in = &a->cfg[a->add[0]], *full = &a->cfg[a->add[S_COUNT]];
    fprintf(out, "%s, %s step, batch %lld, %d thread%s, %s: %d configurations alternating step by step, %d steps each "
            "after %d warm-up\n",
            a->model, a->infer ? "inference" : "training", (long long)a->batch, a->threads, a->threads == 1 ? "" : "s",
            kern_blas_info(), a->ncfg, a->steps, a->warmup);
    fprintf(out, "  load average %.2f before, %.2f after, on %d CPU%s; the compiled configurations share one arena of "
            "%.1f MB (one runs at a time); process peak resident %.1f MB\n",
            a->load[0], a->load[1], a->cpus, a->cpus == 1 ? "" : "s", (double)a->shared_arena / 1e6,
            (double)a->max_rss_kb / 1024);
    fprintf(out, "  interpreter %.2f ms, compiled plan %.2f ms: a gap of %.2f ms (%.2fx); CPU time %.2f and %.2f ms: "
            "%.2f ms (%.2fx)\n", in->ms, full->ms, gap_of(a, false), in->ms / full->ms, in->cpu_ms, full->cpu_ms,
            gap_of(a, true), in->cpu_ms / full->cpu_ms);
    fprintf(out, "  (ms/step: median wall time; spread: half its interquartile range; gain, cost and share: against the "
            "row above\n   or the full plan, share of the gap; CPU ms: median CPU time of the process (every thread, "
            "user and\n   system), then its gain and share; faults: minor page faults per step; MB alloc: bytes "
            "allocated per step;\n   peak MB: activations and scratch at their peak; outputs: against the "
            "interpreter's, bit for bit or the\n   largest relative difference)\n");

    text_header(out, "adding one optimization at a time, from the interpreter", "gain ms");
    text_row(a, out, "interpreter", a->add[0], -1, true);
    for (int k = 0; k < S_COUNT; k++) {
        char label[64];
        snprintf(label, sizeof label, "+ %s", ablate_steps[k].what);
        text_row(a, out, label, a->add[k + 1], a->add[k], true);
    }
    text_sum(a, out, true);

    text_header(out, "removing one optimization from the full plan", "cost ms");
    text_row(a, out, "compiled plan, everything on", a->add[S_COUNT], -1, false);
    for (int k = 0; k < S_COUNT; k++) {
        char label[64];
        snprintf(label, sizeof label, "- %s%s", ablate_steps[k].what, k == S_CALLS || k == S_ARENA ? " *" : "");
        text_row(a, out, label, a->remove[k], a->add[S_COUNT], false);
    }
    text_sum(a, out, false);
    fprintf(out, "  over 100%%: optimizations that need each other each lose their joint gain when removed alone, so "
            "it counts twice;\n  under 100%%: ones that stand in for each other cost little removed alone, and what "
            "either gives is in no row\n");
    fprintf(out, "  * without the call list the interpreter runs the fused graph (no arena, reuse, in-place or stages "
            "either);\n    without the arena, buffers are allocated per op (nothing for the plan to reuse)\n");
}

static void json_row(const Ablation *a, FILE *out, const char *step, const char *what, int c, int ref, bool adding)
{
    const AblateConfig *cf = &a->cfg[c];
    double dw = ref >= 0 ? delta_of(a, c, ref, adding, false) : 0, dc = ref >= 0 ? delta_of(a, c, ref, adding, true) : 0;
    fprintf(out, "{\"step\": \"%s\", \"what\": \"%s\", \"ms\": %.3f, \"ms_p25\": %.3f, \"ms_p75\": %.3f, "
            "\"delta_ms\": %.3f, \"share\": %.4f, \"cpu_ms\": %.3f, \"cpu_delta_ms\": %.3f, \"cpu_share\": %.4f, "
            "\"minor_faults_per_step\": %.1f, \"allocs_per_step\": %.1f, \"alloc_bytes_per_step\": %.0f, "
            "\"peak_bytes\": %lld, \"same_bits\": %s, \"max_rel_diff\": %.3g, \"rounds\": %s}",
            step, what, cf->ms, cf->ms_p25, cf->ms_p75, dw, share_of(a, dw, false), cf->cpu_ms, dc,
            share_of(a, dc, true), cf->faults, cf->allocs, cf->alloc_bytes, (long long)cf->peak,
            c == 0 || cf->same_bits ? "true" : "false", isfinite(cf->max_rel) ? cf->max_rel : 1e300,
            cf->rounds ? "true" : "false");
}

static void print_json(const Ablation *a, FILE *out)
{
    const AblateConfig *in = &a->cfg[a->add[0]], *full = &a->cfg[a->add[S_COUNT]];
    fprintf(out, "{\"model\": \"%s\", \"step\": \"%s\", \"batch\": %lld, \"threads\": %d, \"cpus\": %d, \"blas\": \"%s\", "
            "\"steps\": %d, \"warmup\": %d, \"configurations\": %d, \"load_before\": %.2f, \"load_after\": %.2f, "
            "\"shared_arena_bytes\": %lld, \"max_rss_kb\": %ld, \"interp_ms\": %.3f, \"compiled_ms\": %.3f, "
            "\"gap_ms\": %.3f, \"ratio\": %.3f, \"interp_cpu_ms\": %.3f, \"compiled_cpu_ms\": %.3f, "
            "\"cpu_gap_ms\": %.3f, \"add_sum_ms\": %.3f, \"remove_sum_ms\": %.3f, \"remove_sum_cpu_ms\": %.3f, "
            "\"add\": [",
            a->model, a->infer ? "inference" : "training", (long long)a->batch, a->threads, a->cpus, kern_blas_info(),
            a->steps, a->warmup, a->ncfg, a->load[0], a->load[1], (long long)a->shared_arena, a->max_rss_kb, in->ms,
            full->ms, gap_of(a, false), in->ms / full->ms, in->cpu_ms, full->cpu_ms, gap_of(a, true),
            table_sum(a, true, false, NULL), table_sum(a, false, false, NULL), table_sum(a, false, true, NULL));
    json_row(a, out, "interpreter", "interpreter", a->add[0], -1, true);
    for (int k = 0; k < S_COUNT; k++) {
        fputs(", ", out);
        json_row(a, out, ablate_steps[k].name, ablate_steps[k].what, a->add[k + 1], a->add[k], true);
    }
    fputs("], \"remove\": [", out);
    for (int k = 0; k < S_COUNT; k++) {
        if (k) fputs(", ", out);
        json_row(a, out, ablate_steps[k].name, ablate_steps[k].what, a->remove[k], a->add[S_COUNT], false);
    }
    fputs("]}\n", out);
}

void ablate_print(const Ablation *a, FILE *out, bool json)
{
    if (json) print_json(a, out);
    else print_text(a, out);
}

int ablate_plot(const Ablation *a, const char *path, DiagSink *d)
{
    WaterfallBar bars[ABLATE_MAX_STEPS + 2];
    char notes[ABLATE_MAX_STEPS + 2][64];
    const AblateConfig *in = &a->cfg[a->add[0]], *full = &a->cfg[a->add[S_COUNT]];
    int nb = 0, dec = in->ms < 1 ? 3 : in->ms < 10 ? 2 : 1;
    snprintf(notes[nb], sizeof notes[nb], "%.*f ms (CPU %.*f)", dec, in->ms, dec, in->cpu_ms);
    bars[nb++] = (WaterfallBar){ "interpreter", 0, in->ms, 0, in->cpu_ms, true, notes[0] };
    for (int k = 0; k < S_COUNT; k++) {
        const AblateConfig *p = &a->cfg[a->add[k]], *c = &a->cfg[a->add[k + 1]];
        double dw = delta_of(a, a->add[k + 1], a->add[k], true, false);
        double dc = delta_of(a, a->add[k + 1], a->add[k], true, true);
        snprintf(notes[nb], sizeof notes[nb], "%+.*f (%.0f%%), CPU %+.*f (%.0f%%)", dec, -dw,
                 100 * share_of(a, dw, false), dec, -dc, 100 * share_of(a, dc, true));
        bars[nb] = (WaterfallBar){ ablate_steps[k].what, p->ms, c->ms, p->cpu_ms, c->cpu_ms, false, notes[nb] };
        nb++;
    }
    snprintf(notes[nb], sizeof notes[nb], "%.*f ms, %.2fx (CPU %.*f, %.2fx)", dec, full->ms, in->ms / full->ms, dec,
             full->cpu_ms, in->cpu_ms / full->cpu_ms);
    bars[nb] = (WaterfallBar){ "compiled plan", 0, full->ms, 0, full->cpu_ms, true, notes[nb] };
    nb++;
    char title[160], sub[240];
    snprintf(title, sizeof title, "%s, %s step, batch %lld: from the interpreter to the compiled plan", a->model,
             a->infer ? "inference" : "training", (long long)a->batch);
    snprintf(sub, sizeof sub, "median of %d steps, %d configurations alternating, %d thread%s; load %.1f-%.1f on %d "
             "CPUs.  Wide bars: wall time; thin: CPU time (every thread)", a->steps, a->ncfg, a->threads,
             a->threads == 1 ? "" : "s", a->load[0], a->load[1], a->cpus);
    Waterfall w = { .title = title, .subtitle = sub, .axis = "ms per step", .bars = bars, .nbars = nb };
    return plot_waterfall(path, &w, d);
}

int ablate_batch(const Graph *fwd, const BenchOptions *o, int64_t batch, Pool *pool, DiagSink *d)
{
    Ablation *a = gc_calloc(1, sizeof *a);
    if (!a) {
        diag_plain(d, "out of memory");
        return -1;
    }
    int rc = ablate_measure(fwd, o, batch, pool, a, d);
    if (rc == 0) {
        ablate_print(a, o->out, o->json);
        fflush(o->out);
        if (o->plot) rc = ablate_plot(a, o->plot, d);
    }
    gc_free(a);
    return rc;
}
