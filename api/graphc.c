/* The public C API (include/graphc.h) over the library's modules. */
#include <string.h>
#include "config.h"
#include "exec/pipeline.h"
#include "run/train.h"
#include "graph/lower.h"
#include "include/graphc.h"

struct graphc_model {
    Source src;
    DiagSink diag;
    Graph *fwd;                /* the model as lowered: symbols unbound */
    Graph *layout;             /* the graph whose vars w holds: the training step's (with the
                                * optimizer's state) when the model has a train block, else NULL (fwd's) */
    Weights w;
    Pool *pool;                /* the model's threads: two models never share one */
    int x_input;               /* the example input, in fwd->inputs */
    /* the inference and training steps, for the last batch size of each */
    Step infer, train;
    int64_t steps;             /* training steps taken */
};

const char *graphc_version(void) { return PACKAGE_VERSION; }

const char *graphc_diagnostics(const graphc_model *m)
{
    return m && m->diag.buf ? m->diag.buf : "";
}

static const Graph *layout(const graphc_model *m) { return m->layout ? m->layout : m->fwd; }

static graphc_status finish_compile(graphc_model *m)
{
    if (compile_source(&m->src, &m->diag, NULL, &m->fwd) != 0) return GRAPHC_ERR_MODEL;
    m->x_input = -1;
    for (int i = 0; i < m->fwd->ninputs && m->x_input < 0; i++)
        if (m->fwd->nodes[m->fwd->inputs[i]].dtype == DT_F32) m->x_input = i;
    /* the weights of the training step when there is one, so optimizer state exists */
    if (m->fwd->train.minimize >= 0 && !(m->layout = pipeline_base(m->fwd, FOR_TRAINING, 1, 0, &m->diag)))
        return GRAPHC_ERR_MODEL;
    m->pool = pool_new(0);
    if (!m->pool) return GRAPHC_ERR_MEMORY;
    return weights_init(&m->w, layout(m), m->fwd->train.seed, &m->diag) == 0 ? GRAPHC_OK : GRAPHC_ERR_MEMORY;
}

graphc_status graphc_compile_string(const char *name, const char *source, graphc_model **out)
{
    if (!out) return GRAPHC_ERR_ARG;
    graphc_model *m = *out = gc_calloc(1, sizeof *m);
    if (!m) return GRAPHC_ERR_MEMORY;
    diag_init(&m->diag, NULL);
    if (!name || !source) {
        diag_plain(&m->diag, "graphc_compile_string: name and source must not be NULL");
        return GRAPHC_ERR_ARG;
    }
    if (source_from_string(&m->src, name, source) != 0) return GRAPHC_ERR_MEMORY;
    m->diag.src = &m->src;
    return finish_compile(m);
}

graphc_status graphc_compile_file(const char *path, graphc_model **out)
{
    if (!out) return GRAPHC_ERR_ARG;
    graphc_model *m = *out = gc_calloc(1, sizeof *m);
    if (!m) return GRAPHC_ERR_MEMORY;
    diag_init(&m->diag, NULL);
    if (!path) {
        diag_plain(&m->diag, "graphc_compile_file: path must not be NULL");
        return GRAPHC_ERR_ARG;
    }
    if (source_load(&m->src, path, &m->diag) != 0) return GRAPHC_ERR_FILE;
    m->diag.src = &m->src;
    return finish_compile(m);
}

void graphc_free(graphc_model *m)
{
    if (!m) return;
    step_free(&m->infer);
    step_free(&m->train);
    weights_free(&m->w);
    pool_free(m->pool);
    graph_free(m->layout);
    graph_free(m->fwd);
    diag_free(&m->diag);
    source_free(&m->src);
    gc_free(m);
}

static bool ready(graphc_model *m)
{
    if (m && m->fwd && m->w.data) return true;
    if (m) diag_plain(&m->diag, "the model did not compile");
    return false;
}

graphc_status graphc_load_weights(graphc_model *m, const char *path)
{
    if (!ready(m)) return GRAPHC_ERR_ARG;
    int rc = checkpoint_load(path, layout(m), &m->w, &m->diag);
    if (rc == 0) m->steps = m->w.step;
    return rc == 0 ? GRAPHC_OK : GRAPHC_ERR_FILE;
}

graphc_status graphc_save_weights(graphc_model *m, const char *path)
{
    if (!ready(m)) return GRAPHC_ERR_ARG;
    m->w.step = m->steps;
    int rc = checkpoint_save(path, layout(m), &m->w, m->fwd->train.seed, &m->diag);
    return rc == 0 ? GRAPHC_OK : GRAPHC_ERR_FILE;
}

static const Node *x_node(const graphc_model *m) { return &m->fwd->nodes[m->fwd->inputs[m->x_input]]; }

graphc_status graphc_input_shape(const graphc_model *m, int64_t dims[6], int *rank)
{
    if (!m || !m->fwd || m->x_input < 0 || !dims || !rank) return GRAPHC_ERR_ARG;
    const Shape *s = &x_node(m)->shape;
    *rank = s->rank - 1;
    for (int i = 1; i < s->rank; i++) dims[i - 1] = s->d[i].sym < 0 ? s->d[i].v : -1;
    return GRAPHC_OK;
}

int64_t graphc_output_size(const graphc_model *m)
{
    if (!m || !m->fwd || m->fwd->noutputs == 0) return -1;
    const Shape *s = &m->fwd->nodes[m->fwd->outputs[0].node].shape;
    int64_t n = 1;
    for (int i = 1; i < s->rank; i++) n *= s->d[i].sym < 0 ? s->d[i].v : 1;
    return n;
}

/* Compiles (once per batch size) the step of a purpose. */
static graphc_status step_for(graphc_model *m, Purpose purpose, int64_t batch)
{
    Step *s = purpose == FOR_TRAINING ? &m->train : &m->infer;
    if (s->ex && s->batch == batch) return GRAPHC_OK;
    step_free(s);
    CompileOptions co = { .mode = MODE_COMPILED, .pool = m->pool };
    return prepare(m->fwd, purpose, batch, &co, &m->w, s, &m->diag) == 0 ? GRAPHC_OK : GRAPHC_ERR_ARG;
}

graphc_status graphc_predict(graphc_model *m, int64_t batch, const float *input, float *output, size_t output_len)
{
    if (!ready(m)) return GRAPHC_ERR_ARG;
    if (m->x_input < 0 || m->fwd->noutputs == 0 || batch < 1 || !input || !output) {
        diag_plain(&m->diag, "graphc_predict: needs an f32 input, an output, batch >= 1 and buffers");
        return GRAPHC_ERR_ARG;
    }
    if ((double)output_len < (double)batch * (double)graphc_output_size(m)) {
        diag_plain(&m->diag, "graphc_predict: output holds %zu floats, %lld needed", output_len,
                   (long long)(batch * graphc_output_size(m)));
        return GRAPHC_ERR_ARG;
    }
    graphc_status st = step_for(m, FOR_INFERENCE, batch);
    if (st != GRAPHC_OK) return st;
    /* the labels input (if any) is not read at inference; give it the example buffer */
    const void *feeds[8];
    if (m->infer.graph->ninputs > 8) return GRAPHC_ERR_ARG;
    for (int i = 0; i < m->infer.graph->ninputs; i++) feeds[i] = input;
    float *outs[16] = { output };
    StepEnv env = { .w = &m->w, .d = &m->diag };
    return executor_run(m->infer.ex, feeds, outs, &env) == 0 ? GRAPHC_OK : GRAPHC_ERR_RUN;
}

graphc_status graphc_train_step(graphc_model *m, int64_t batch, const float *input, const int32_t *labels,
                                float *loss, float *accuracy)
{
    if (!ready(m)) return GRAPHC_ERR_ARG;
    if (m->fwd->train.minimize < 0 || m->fwd->label_input < 0 || m->fwd->ninputs != 2 || batch < 1 || !input || !labels) {
        diag_plain(&m->diag, "graphc_train_step: needs a train block, one input of examples, one of labels, and buffers");
        return GRAPHC_ERR_ARG;
    }
    graphc_status st = step_for(m, FOR_TRAINING, batch);
    if (st != GRAPHC_OK) return st;
    const void *feeds[2];
    for (int i = 0; i < 2; i++) feeds[i] = m->fwd->inputs[i] == m->fwd->label_input ? (const void *)labels : input;
    float lv = 0, av = 0;
    float *outs[2] = { &lv, &av };
    const TrainSpec *t = &m->fwd->train;
    StepEnv env = { .w = &m->w, .seed = t->seed, .training = true, .d = &m->diag };
    step_env_train(&env, t, m->steps);
    if (executor_run(m->train.ex, feeds, outs, &env) != 0) return GRAPHC_ERR_RUN;
    m->steps++;
    if (loss) *loss = lv;
    if (accuracy) *accuracy = av;
    return GRAPHC_OK;
}
