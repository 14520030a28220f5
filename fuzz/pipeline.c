/* The fuzz targets' pipeline.  See pipeline.h.  Everything after lowering goes through
 * prepare() (exec/pipeline.h), as graphc's own commands do. */
#include "fuzz/pipeline.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "graph/lower.h"
#include "graph/passes.h"
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

/* A stage that returned nothing must have said why. */
static void refused(const DiagSink *d, int errors_before, const char *stage)
{
    if (d->nerrors <= errors_before) {
        char what[96];
        snprintf(what, sizeof what, "%s failed without an error", stage);
        violated(what, d);
    }
}

/* The passes that round otherwise than the ops apart: off, both executors give the
 * same bits. */
static uint64_t rounding_passes(void)
{
    uint64_t off = 0;
    for (int i = 0; i < graph_npasses; i++)
        if (graph_passes[i].rounds) off |= (uint64_t)1 << i;
    return off;
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
    return total <= (1 << 22) && g->nnodes <= 4000 && g->noutputs <= 8;
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

typedef struct Run {
    int rc;
    Weights w;
    int nout;
    int64_t numel[8];   /* of each output */
    float *out[8];
    Step s;             /* kept until run_free: the weights' names are its graph's */
    bool prepared;
} Run;

/* One step of `model` prepared for `purpose` in `mode` at batch 2 (weights from seed
 * 7, inputs from `feeds` made for the first mode's graph); its outputs and weights. */
static void run_step(const Graph *model, Purpose purpose, ExecMode mode, uint64_t passes_off, void ***feeds, int *ninputs,
                     Run *r)
{
    DiagSink d;
    diag_init(&d, model->src);
    memset(r, 0, sizeof *r);
    r->rc = -1;
    CompileOptions co = { .mode = mode, .passes_off = passes_off, .seed = 7 };
    r->prepared = prepare(model, purpose, 2, &co, &r->w, &r->s, &d) == 0;
    if (r->prepared) {
        const Graph *g = r->s.graph;
        if (!*feeds) {
            *feeds = make_feeds(g);
            *ninputs = g->ninputs;
        }
        r->nout = g->noutputs < 8 ? g->noutputs : 8;
        for (int i = 0; i < r->nout; i++) {
            r->numel[i] = shape_numel(&g->nodes[g->outputs[i].node].shape);
            r->out[i] = calloc((size_t)r->numel[i] + 1, sizeof(float));
        }
        StepEnv env;
        memset(&env, 0, sizeof env);
        step_env_train(&env, &model->train, 0);   /* the optimizer's settings, step 0's lr */
        env.w = &r->w;
        env.seed = model->train.seed;
        env.training = purpose == FOR_TRAINING;
        env.d = &d;
        r->rc = executor_run(r->s.ex, (const void *const *)*feeds, r->out, &env);
    }
    if (r->rc != 0 && d.nerrors == 0)
        violated(mode == MODE_INTERP ? "the interpreter failed without an error" : "the compiled plan failed without an error", &d);
    diag_free(&d);
}

static void run_free(Run *r)
{
    weights_free(&r->w);
    if (r->prepared) step_free(&r->s);
    for (int i = 0; i < 8; i++) free(r->out[i]);
}

/* A step in both executors, which must agree bit for bit (the passes that round
 * otherwise, a gradient GEMM inside its update, are off here). */
static void run_both(const Graph *model, Purpose purpose)
{
    void **feeds = NULL;
    int ninputs = 0;
    Run a, b;
    run_step(model, purpose, MODE_INTERP, 0, &feeds, &ninputs, &a);
    run_step(model, purpose, MODE_COMPILED, rounding_passes(), &feeds, &ninputs, &b);
    if ((a.rc == 0) != (b.rc == 0)) violated("one executor ran the step and the other did not", NULL);
    if (a.rc == 0) {
        for (int i = 0; i < a.nout; i++)
            if (a.numel[i] != b.numel[i] || memcmp(a.out[i], b.out[i], (size_t)a.numel[i] * 4) != 0) {
                fprintf(stderr, "output %d: interpreter %g, compiled %g\n", i, a.out[i][0], b.out[i][0]);
                violated("the executors' outputs differ", NULL);
            }
        /* After a step whose loss is not finite the weights are never kept (the run
         * stops at it); where a NaN reaches a max pool the executors still route its
         * gradient apart (docs/fuzzing.md), so they are compared only after a finite one. */
        bool finite = true;
        for (int i = 0; i < a.nout; i++)
            for (int64_t k = 0; k < a.numel[i]; k++) finite &= isfinite(a.out[i][k]) != 0;
        for (int v = 0; finite && v < a.w.n; v++) {
            int64_t n = shape_numel(&a.w.shapes[v]), k = 0;
            while (k < n && memcmp(&a.w.data[v][k], &b.w.data[v][k], 4) == 0) k++;
            if (k < n) {
                fprintf(stderr, "%s[%lld]: interpreter %g, compiled %g\n", a.w.names[v], (long long)k, a.w.data[v][k],
                        b.w.data[v][k]);
                violated("the executors' weights differ after a step", NULL);
            }
        }
    }
    run_free(&a);
    run_free(&b);
    for (int i = 0; i < ninputs; i++) free(feeds[i]);
    free(feeds);
}

/* The loss of evaluation step s (an output "loss") for its weights; NaN if it fails. */
static double loss_of(const Step *s, Weights *w, void **feeds)
{
    const Graph *g = s->graph;
    float out[8] = { 0 };
    float *outs[8] = { 0 };
    int li = -1;
    for (int i = 0; i < g->noutputs && i < 8; i++)
        if (strcmp(g->outputs[i].name, "loss") == 0) li = i;
    if (li < 0) return NAN;
    outs[li] = &out[li];
    DiagSink d;
    diag_init(&d, NULL);
    StepEnv env = { .w = w, .training = false, .d = &d };
    double l = executor_run(s->ex, (const void *const *)feeds, outs, &env) == 0 ? out[li] : NAN;
    diag_free(&d);
    return l;
}

/* Whether g's training step computes another function than its evaluation: dropout
 * drops, batch_norm normalizes with the batch's statistics. */
static bool trains_otherwise(const Graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if ((g->nodes[i].op == OP_DROPOUT && g->nodes[i].a.dropout.rate > 0) || g->nodes[i].op == OP_BATCH_NORM) return true;
    return false;
}

/* Whether `analytic`, the gradient of the loss (`base` at the weights) by element *p, is
 * wrong: central differences of the loss through evaluation step es, at steps of 1e-3
 * and, while they move with the step, smaller ones.  At a kink (relu at 0, a tie in a
 * max) the one-sided differences part, and any value between them is a gradient (a
 * subgradient): only one outside both is wrong.  Where the loss is steep at a scale
 * below the step (a division by 1e-8 ahead of a softmax), the differences change with
 * it: they are judged only once two steps agree, never before. */
static bool gradient_wrong(const Step *es, Weights *we, void **feeds, float *p, double base, double analytic, double *numeric_out)
{
    float keep = *p;
    double prev = NAN;
    for (int k = 0; k < 7; k++) {
        float eps = 1e-3f / (float)(1 << (3 * k));
        *p = keep + eps;
        double lp = loss_of(es, we, feeds);
        *p = keep - eps;
        double lm = loss_of(es, we, feeds);
        *p = keep;
        double numeric = (lp - lm) / (2.0 * eps);
        *numeric_out = numeric;
        if (!isfinite(numeric) || !isfinite(analytic) || fabs(lp - lm) > 1e3) return false;
        double right = (lp - base) / eps, left = (base - lm) / eps;
        double tol = 5e-2 * fabs(numeric) + 2e-3 + 1e-7 * fabs(base) / eps;   /* + the loss's rounding */
        double lo = (left < right ? left : right) - tol, hi = (left < right ? right : left) + tol;
        if (fabs(analytic - numeric) <= tol || (analytic >= lo && analytic <= hi)) return false;
        if (isfinite(prev) && fabs(numeric - prev) <= tol) return true;   /* settled, elsewhere */
        prev = numeric;
    }
    return false;   /* never settled: not smooth at any step tried */
}

/* Every parameter's gradient, at a few elements, against finite differences of the
 * loss through the evaluation graph (tests/test_autodiff.c's check, on any model): a step
 * of plain SGD with lr 1 (no weight decay, no clipping) moves a parameter by minus its
 * gradient.  For a model whose step is the same in training and evaluation
 * (trains_otherwise) and whose loss is finite and moderate. */
static void check_gradients(const Graph *model, DiagSink *d)
{
    if (model->train.minimize < 0 || trains_otherwise(model)) return;
    Graph *g = graph_clone(model);
    if (!g) return;
    g->train.optim = OPTIM_SGD;   /* plain: a step moves a parameter by minus lr times its gradient */
    g->train.momentum = 0;
    g->train.nesterov = false;
    g->train.weight_decay = 0;
    g->train.clip_norm = 0;
    CompileOptions co = { .mode = MODE_INTERP, .seed = 7 };
    Weights w = { 0 }, before = { 0 }, we = { 0 };
    Step ts = { 0 }, es = { 0 };
    void **feeds = NULL;
    bool ready = prepare(g, FOR_TRAINING, 2, &co, &w, &ts, d) == 0 && prepare(g, FOR_EVALUATION, 2, &co, &we, &es, d) == 0 &&
                 small_enough(ts.graph) && weights_init(&before, ts.graph, 7, d) == 0;
    if (ready) {
        feeds = make_feeds(ts.graph);
        float out[8][1];
        float *outs[8];
        for (int i = 0; i < 8; i++) outs[i] = out[i];
        StepEnv env = { .w = &w, .lr = 1, .training = true, .d = d };
        ready = executor_run(ts.ex, (const void *const *)feeds, outs, &env) == 0;
    }
    double base = ready ? loss_of(&es, &we, feeds) : NAN;
    for (int v = 0; fabs(base) < 1e4 && v < before.n; v++) {
        int vi = -1;
        for (int k = 0; k < we.n; k++)
            if (strcmp(we.names[k], before.names[v]) == 0) vi = k;
        if (before.roles[v] != VAR_PARAM || vi < 0) continue;
        int64_t n = shape_numel(&before.shapes[v]), at[3] = { 0, n / 2, n - 1 };
        for (int j = 0; j < 3; j++) {
            double analytic = (double)before.data[v][at[j]] - (double)w.data[v][at[j]], numeric;
            if (gradient_wrong(&es, &we, feeds, &we.data[vi][at[j]], base, analytic, &numeric)) {
                fprintf(stderr, "d loss / d %s[%lld]: autodiff %.6g, finite differences %.6g (loss %.6g)\n",
                        before.names[v], (long long)at[j], analytic, numeric, base);
                violated("a gradient disagrees with finite differences", NULL);
            }
        }
    }
    if (feeds) free_feeds(ts.graph, feeds);
    step_free(&ts);
    step_free(&es);
    weights_free(&w);
    weights_free(&before);
    weights_free(&we);
    graph_free(g);
}

/* prepare() for `purpose` without weights (so up to the memory plan), verified after
 * every pass, each graph dumped; false when it refused (with an error). */
static bool stages(const Graph *model, Purpose purpose, int ranks, DiagSink *d)
{
    CompileOptions co = { .mode = MODE_COMPILED, .threads = 2, .ranks = ranks, .verify = true };
    Step s;
    int before = d->nerrors;
    if (prepare(model, purpose, 2, &co, NULL, &s, d) != 0) {
        refused(d, before, "prepare");
        if (d->buf && strstr(d->buf, "verifier")) violated("a pass's graph does not verify", d);
        return false;
    }
    dump_graph(s.graph);
    dump_graph(s.run);
    const MemPlan *mp = step_memplan(&s);
    if (mp) {
        memplan_dump_text(s.run, mp, null_out());
        memplan_dump_svg(s.run, mp, null_out());
    }
    bool small = small_enough(s.graph);
    step_free(&s);
    return small;
}

/* Everything after the forward graph g; true when a step also ran. */
static bool later_stages(const Graph *g, DiagSink *d, bool run)
{
    bool train = g->train.minimize >= 0;
    Purpose purpose = train ? FOR_TRAINING : FOR_INFERENCE;
    bool small = stages(g, purpose, 1, d);
    if (train) {
        stages(g, FOR_EVALUATION, 1, d);
        stages(g, FOR_TRAINING, 2, d);   /* data-parallel: the allreduce pass */
    } else {
        stages(g, FOR_INFERENCE, 1, d);
    }
    if (!run || !small) return false;
    run_both(g, purpose);
    if (train) check_gradients(g, d);
    return true;
}

FuzzOutcome fuzz_pipeline(const char *text, size_t len, bool run)
{
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
        if (graph_verify(g, &d) != 0) violated("the forward graph does not verify", &d);
        dump_graph(g);
        if (later_stages(g, &d, run)) how = FUZZ_RAN;
    }
    graph_free(g);
    ast_free(prog);
    diag_free(&d);
    source_free(&src);
    return how;
}
