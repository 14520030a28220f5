/* The compiler's pipeline.  See pipeline.h. */
#include <string.h>
#include "exec/pipeline.h"
#include "graph/passes.h"

Graph *pipeline_base(const Graph *model, Purpose purpose, int ranks, int64_t bucket_bytes, DiagSink *d)
{
    if (purpose != FOR_TRAINING) return pass_inference(model, purpose == FOR_EVALUATION, d);
    Graph *t = pass_autodiff(model, d);
    if (!t || ranks <= 1) return t;
    Graph *dp = pass_allreduce(t, bucket_bytes > 0 ? bucket_bytes : ALLREDUCE_DEFAULT_BUCKET, d);
    graph_free(t);
    return dp;
}

const char *pipeline_stage(int i)
{
    if (i == 0) return "train";
    if (i >= 1 && i <= graph_npasses) return graph_passes[i - 1].name;
    return i == graph_npasses + 1 ? "fused" : NULL;
}

/* Binds the model's batch symbol in g; a model whose batch is fixed takes that batch. */
static int bind_batch(const Graph *model, Graph *g, int64_t batch, DiagSink *d)
{
    int sym = graph_batch_sym(model);
    if (sym >= 0) return graph_bind(g, model->syms[sym], batch, d) == 0 ? 0 : -1;
    int64_t fixed = model->ninputs ? model->nodes[model->inputs[0]].shape.d[0].v : batch;
    if (fixed != batch) {
        diag_plain(d, "the model's batch is fixed at %lld, not %lld", (long long)fixed, (long long)batch);
        return -1;
    }
    return 0;
}

static int64_t weights_bytes(const Graph *g)
{
    int64_t b = 0;
    for (int v = 0; v < g->nvars; v++) b += shape_numel(&g->vars[v].shape) * 4;
    return b;
}

/* The step's memory against --max-memory, before any of it is allocated. */
static int check_memory(const Step *s, const CompileOptions *o, const MemPlan *mp, DiagSink *d)
{
    if (o->max_memory <= 0 || s->bytes <= o->max_memory) return 0;
    const char *what = s->purpose == FOR_TRAINING ? "the training step" : s->purpose == FOR_EVALUATION ? "evaluation"
                                                                                                      : "inference";
    diag_plain(d, "%s needs %lld bytes (%.1f MB: parameters%s, %s %lld bytes of activations%s), more than "
               "--max-memory %lld",
               what, (long long)s->bytes, (double)s->bytes / 1e6, s->purpose == FOR_TRAINING ? ", optimizer state" : "",
               o->mode == MODE_COMPILED ? "a plan of" : "at least", (long long)mp->arena,
               o->extra_bytes ? " and the data" : "", (long long)o->max_memory);
    return -1;
}

int prepare(const Graph *model, Purpose purpose, int64_t batch, const CompileOptions *o, Weights *w, Step *s,
            DiagSink *d)
{
    memset(s, 0, sizeof *s);
    Graph *g = pipeline_base(model, purpose, o->ranks, o->bucket_bytes, d);
    if (!g) return -1;
    if (batch > 0 && bind_batch(model, g, batch, d) != 0) {
        graph_free(g);
        return -1;
    }
    return prepare_from(g, purpose, batch, o, w, s, d);
}

int prepare_from(Graph *g, Purpose purpose, int64_t batch, const CompileOptions *o, Weights *w, Step *s, DiagSink *d)
{
    memset(s, 0, sizeof *s);
    s->purpose = purpose;
    s->batch = batch;
    s->graph = s->run = g;
    if (o->verify && graph_verify(s->graph, d) != 0) goto fail;
    /* the base stage is "train" in dumps whatever the purpose ("infer" too) */
    if (o->stop_after && (strcmp(o->stop_after, "train") == 0 || strcmp(o->stop_after, "infer") == 0)) return 0;
    if (o->mode == MODE_COMPILED || o->interp_passes) {
        bool stopped;
        s->run = graph_run_passes(s->graph, o->passes_off, o->stop_after, o->verify, &stopped, d);
        if (!s->run) {
            s->run = s->graph;
            goto fail;
        }
        if (stopped) return 0;
    }
    if (batch <= 0) {
        diag_plain(d, "internal error: planning a step whose batch is not bound");
        goto fail;
    }
    /* the memory plan: the compiled plan's arena, or the interpreter's least peak (its
     * lower bound), counted before anything is allocated */
    bool need_plan = o->mode == MODE_COMPILED || o->max_memory > 0 || !w;
    PlanOptions po = { o->pool ? pool_threads(o->pool) : o->threads, o->stages, o->no_inplace, o->no_reuse, o->per_op };
    if (need_plan && memplan_build(s->run, &po, &s->plan, d) != 0) goto fail;
    s->bytes = weights_bytes(s->graph) + (o->mode == MODE_COMPILED ? s->plan.arena : s->plan.lower_bound) + o->extra_bytes;
    if (check_memory(s, o, &s->plan, d) != 0) goto fail;
    if (!w) return 0;
    if (!w->data && weights_init(w, s->graph, o->seed, d) != 0) goto fail;
    if (o->arena && o->mode == MODE_COMPILED && !s->plan.per_op) {
        if (o->arena_bytes < s->plan.arena) {
            diag_plain(d, "internal error: a borrowed arena of %lld bytes for a plan of %lld",
                       (long long)o->arena_bytes, (long long)s->plan.arena);
            goto fail;
        }
        s->plan.external = o->arena;
    }
    s->ex = executor_new(o->mode, s->run, w, o->pool, need_plan ? &s->plan : NULL, d);
    if (!s->ex) goto fail;
    return 0;
fail:
    step_free(s);
    return -1;
}

const MemPlan *step_memplan(const Step *s)
{
    if (s->ex) return executor_memplan(s->ex);
    return s->plan.offset ? &s->plan : NULL;
}

void step_free(Step *s)
{
    executor_free(s->ex);
    memplan_free(&s->plan);
    if (s->run != s->graph) graph_free(s->run);
    graph_free(s->graph);
    memset(s, 0, sizeof *s);
}
