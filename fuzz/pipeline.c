/* The fuzz targets' pipeline.  See pipeline.h. */
#include "fuzz/pipeline.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/executor.h"
#include "exec/memplan.h"
#include "graph/lower.h"
#include "graph/passes.h"
#include "util/pool.h"
#include "util/rng.h"

static void violated(const char *what, const DiagSink *d)
{
    fprintf(stderr, "fuzz_pipeline: %s\n%s", what, d && d->buf ? d->buf : "");
    abort();
}

static FILE *null_out(void)
{
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    if (!f) violated("cannot open /dev/null", NULL);
    return f;
}

static void dump_graph(const Graph *g)
{
    graph_dump_text(g, null_out());
    graph_dump_dot(g, null_out());
    graph_dump_json(g, null_out());
}

static void verify(const Graph *g, DiagSink *d, const char *stage)
{
    if (graph_verify(g, d) != 0) {
        char what[96];
        snprintf(what, sizeof what, "the %s graph does not verify", stage);
        violated(what, d);
    }
    dump_graph(g);
}

/* A stage that returned nothing must have said why. */
static void refused(const DiagSink *d, int errors_before, const char *stage)
{
    if (d->nerrors <= errors_before) {
        char what[96];
        snprintf(what, sizeof what, "%s failed without an error", stage);
        violated(what, d);
    }
}

/* Small enough to run a step of under the sanitizers in a fuzzer's time. */
static bool small_enough(const Graph *g)
{
    int64_t total = 0;
    for (int i = 0; i < g->nnodes; i++) {
        int64_t n = shape_numel(&g->nodes[i].shape);
        if (n < 0 || n > (1 << 16)) return false;
        total += n;
    }
    for (int v = 0; v < g->nvars; v++) total += shape_numel(&g->vars[v].shape);
    return total <= (1 << 22) && g->nnodes <= 4000;
}

typedef struct Step {
    int rc;
    int nerrors;
    Weights w;
    float *out[8];
} Step;

/* One step of g in `mode`: weights from seed 7, inputs from `feeds`. */
static void run_step(const Graph *g, ExecMode mode, void **feeds, Step *s)
{
    DiagSink d;
    diag_init(&d, g->src);
    memset(s, 0, sizeof *s);
    s->rc = -1;
    if (weights_init(&s->w, g, 7, &d) == 0) {
        for (int i = 0; i < g->noutputs && i < 8; i++)
            s->out[i] = calloc((size_t)shape_numel(&g->nodes[g->outputs[i].node].shape) + 1, sizeof(float));
        Executor *ex = executor_plan(mode, g, &s->w, &d);
        const TrainSpec *t = &g->train;
        StepEnv env = { .w = &s->w, .seed = t->seed, .lr = t->lr, .momentum = t->momentum, .beta1 = t->beta1,
                        .beta2 = t->beta2, .eps = t->eps, .nesterov = t->nesterov, .training = t->minimize >= 0, .d = &d };
        if (ex) s->rc = executor_run(ex, (const void *const *)feeds, s->out, &env);
        executor_free(ex);
    }
    s->nerrors = d.nerrors;
    if (s->rc != 0 && d.nerrors == 0) violated(mode == MODE_INTERP ? "the interpreter failed without an error"
                                                                   : "the compiled plan failed without an error", &d);
    diag_free(&d);
}

static void step_free(Step *s)
{
    weights_free(&s->w);
    for (int i = 0; i < 8; i++) free(s->out[i]);
}

/* Random inputs for bound graph g: f32 in [-1, 1), labels below the logits' width. */
static void **make_feeds(const Graph *g)
{
    void **feeds = calloc((size_t)g->ninputs + 1, sizeof *feeds);
    int32_t classes = 2;
    if (g->logits >= 0 && g->nodes[g->logits].shape.rank == 2) classes = (int32_t)g->nodes[g->logits].shape.d[1].v;
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        int64_t cnt = shape_numel(&n->shape);
        feeds[i] = calloc((size_t)cnt + 1, 4);
        for (int64_t k = 0; k < cnt; k++) {
            uint64_t r = rng_at(11, (uint64_t)i, (uint64_t)k);
            if (n->dtype == DT_I32) ((int32_t *)feeds[i])[k] = (int32_t)rng_below(r, (uint64_t)(classes > 0 ? classes : 1));
            else ((float *)feeds[i])[k] = rng_unit(r) * 2 - 1;
        }
    }
    return feeds;
}

static void free_feeds(const Graph *g, void **feeds)
{
    for (int i = 0; i < g->ninputs; i++) free(feeds[i]);
    free(feeds);
}

/* Binds every symbol of g: the first to 2, the others to 3.  false after reporting. */
static bool bind_all(Graph *g, DiagSink *d)
{
    for (int i = 0; i < g->nsyms; i++) {
        int before = d->nerrors;
        if (graph_bind(g, g->syms[i], i == 0 ? 2 : 3, d) != 0) {
            refused(d, before, "binding");
            return false;
        }
    }
    return true;
}

/* A step in both executors, which must agree bit for bit (the one fusion that rounds
 * differently, a gradient GEMM inside its update, is off in the fuzz targets). */
static void run_both(const Graph *g, void **feeds)
{
    Step a, b;
    run_step(g, MODE_INTERP, feeds, &a);
    run_step(g, MODE_COMPILED, feeds, &b);
    if ((a.rc == 0) != (b.rc == 0)) violated("one executor ran the step and the other did not", NULL);
    if (a.rc == 0) {
        for (int i = 0; i < g->noutputs; i++)
            if (memcmp(a.out[i], b.out[i], (size_t)shape_numel(&g->nodes[g->outputs[i].node].shape) * 4) != 0) {
                fprintf(stderr, "output %s: interpreter %g, compiled %g\n", g->outputs[i].name, a.out[i][0], b.out[i][0]);
                violated("the executors' outputs differ", NULL);
            }
        for (int v = 0; v < a.w.n; v++)
            if (memcmp(a.w.data[v], b.w.data[v], (size_t)shape_numel(&a.w.shapes[v]) * 4) != 0) {
                fprintf(stderr, "var %s\n", a.w.names[v]);
                violated("the executors' weights differ after a step", NULL);
            }
    }
    step_free(&a);
    step_free(&b);
}

/* The loss of inference graph ig (an output "loss") for weights w; NaN if it fails. */
static double loss_of(const Graph *ig, Weights *w, void **feeds)
{
    float out[8] = { 0 };
    float *outs[8] = { 0 };
    int li = -1;
    for (int i = 0; i < ig->noutputs && i < 8; i++)
        if (strcmp(ig->outputs[i].name, "loss") == 0) li = i;
    if (li < 0) return NAN;
    outs[li] = &out[li];
    DiagSink d;
    diag_init(&d, NULL);
    StepEnv env = { .w = w, .training = false, .d = &d };
    double l = interp_run(ig, (const void *const *)feeds, outs, &env, NULL) == 0 ? out[li] : NAN;
    diag_free(&d);
    return l;
}

static bool has_dropout(const Graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == OP_DROPOUT && g->nodes[i].a.dropout.rate > 0) return true;
    return false;
}

/* Every parameter's gradient, at a few elements, against central differences of the
 * loss through the inference graph (tests/test_train.c's check, on any model): a step
 * of plain SGD with lr 1 moves a parameter by minus its gradient.  For a model whose
 * step is the same in training and inference (no dropout) and whose loss is finite
 * and moderate; a kink (relu at 0, a tie in a max) within the difference's step could
 * make a true gradient look wrong, so the tolerance is that of the tests. */
static void check_gradients(const Graph *model, DiagSink *d)
{
    if (model->train.minimize < 0 || has_dropout(model)) return;
    Graph *g = graph_clone(model);
    if (!g) return;
    g->train.optim = OPTIM_SGD;
    g->train.momentum = 0;
    g->train.nesterov = false;
    Graph *tg = pass_autodiff(g, d), *ig = pass_inference(g, true, d);
    Weights w = { 0 }, before = { 0 }, wi = { 0 };
    void **feeds = NULL;
    if (!tg || !ig || !bind_all(tg, d) || !bind_all(ig, d) || !small_enough(tg)) goto done;
    if (weights_init(&w, tg, 7, d) || weights_init(&before, tg, 7, d) || weights_init(&wi, ig, 7, d)) goto done;
    feeds = make_feeds(tg);
    float out[8][1];
    float *outs[8];
    for (int i = 0; i < 8; i++) outs[i] = out[i];
    StepEnv env = { .w = &w, .lr = 1, .training = true, .d = d };
    if (tg->noutputs > 8 || interp_run(tg, (const void *const *)feeds, outs, &env, NULL) != 0) goto done;
    weights_copy_matching(&wi, &before);
    double base = loss_of(ig, &wi, feeds);
    if (!(fabs(base) < 1e4)) goto done;
    for (int v = 0; v < before.n; v++) {
        if (before.roles[v] != VAR_PARAM) continue;
        int64_t n = shape_numel(&before.shapes[v]);
        int64_t at[3] = { 0, n / 2, n - 1 };
        int vi = -1;
        for (int k = 0; k < wi.n; k++)
            if (strcmp(wi.names[k], before.names[v]) == 0) vi = k;
        if (vi < 0) continue;
        for (int j = 0; j < 3; j++) {
            float *p = &wi.data[vi][at[j]], keep = *p;
            const float eps = 1e-3f;
            *p = keep + eps;
            double lp = loss_of(ig, &wi, feeds);
            *p = keep - eps;
            double lm = loss_of(ig, &wi, feeds);
            *p = keep;
            double numeric = (lp - lm) / (2.0 * eps), analytic = (double)before.data[v][at[j]] - (double)w.data[v][at[j]];
            if (!isfinite(numeric) || !isfinite(analytic) || fabs(lp - lm) > 1e3) continue;
            /* at a kink the one-sided differences part, and any value between them is a
             * gradient (a subgradient): only one outside both is wrong */
            double right = (lp - base) / eps, left = (base - lm) / eps;
            double tol = 5e-2 * fabs(numeric) + 2e-3 + 1e-4 * fabs(base);   /* + the loss's rounding */
            double lo = (left < right ? left : right) - tol, hi = (left < right ? right : left) + tol;
            if (fabs(analytic - numeric) > tol && !(analytic >= lo && analytic <= hi)) {
                fprintf(stderr, "d loss / d %s[%lld]: autodiff %.6g, finite differences %.6g (loss %.6g)\n",
                        before.names[v], (long long)at[j], analytic, numeric, base);
                violated("a gradient disagrees with finite differences", NULL);
            }
        }
    }
done:
    if (feeds) free_feeds(tg, feeds);
    weights_free(&w);
    weights_free(&before);
    weights_free(&wi);
    graph_free(tg);
    graph_free(ig);
    graph_free(g);
}

/* The graph after g (training or inference), bound, optimized and planned; true when
 * it also ran. */
static bool later_stages(const Graph *g, DiagSink *d, bool run)
{
    int before = d->nerrors;
    Graph *t = g->train.minimize >= 0 ? pass_autodiff(g, d) : pass_inference(g, false, d);
    if (!t) {
        refused(d, before, "autodiff or the inference pass");
        return false;
    }
    verify(t, d, "train or infer");
    bool bound = bind_all(t, d);
    if (bound) verify(t, d, "bound");
    before = d->nerrors;
    Graph *o = pass_optimize(t, NULL, d);
    if (!o) refused(d, before, "the optimizer's passes");
    if (o && bound) {
        verify(o, d, "fused");
        MemPlan mp;
        before = d->nerrors;
        if (memplan_build(o, &mp, d) == 0) {
            memplan_dump_text(o, &mp, null_out());
            memplan_dump_svg(o, &mp, null_out());
            memplan_free(&mp);
        } else {
            refused(d, before, "memory planning");
        }
    }
    bool ran = o && bound && run && small_enough(t) && t->noutputs <= 8;
    if (ran) {
        void **feeds = make_feeds(t);
        run_both(t, feeds);
        free_feeds(t, feeds);
        check_gradients(g, d);
    }
    graph_free(o);
    graph_free(t);
    return ran;
}

FuzzOutcome fuzz_pipeline(const char *text, size_t len, bool run)
{
    static bool once;
    if (!once) {
        once = true;
        pool_set_threads(1);
        pass_fuse_set_gemm_update(false);
    }
    Source src;
    DiagSink d;
    Graph *g = NULL;
    Program *prog = NULL;
    if (source_from_memory(&src, "fuzz.net", text, len) != 0) return FUZZ_REFUSED;
    diag_init(&d, &src);
    int rc = compile_source(&src, &d, &prog, &g);
    FuzzOutcome how = rc == 0 ? FUZZ_COMPILED : FUZZ_REFUSED;
    if (prog) {   /* a tree, partial or whole, always dumps */
        ast_dump_text(prog, &src, null_out());
        ast_dump_json(prog, &src, null_out());
    }
    if (rc != 0) {
        if (d.nerrors == 0 || g) violated("compile_source failed without an error, or with a graph", &d);
    } else {
        if (d.nerrors != 0 || !g) violated("compile_source succeeded with errors, or without a graph", &d);
        verify(g, &d, "forward");
        if (later_stages(g, &d, run)) how = FUZZ_RAN;
    }
    graph_free(g);
    ast_free(prog);
    diag_free(&d);
    source_free(&src);
    return how;
}
