/* The public C API (include/graphc.h) over the library's modules.
 *
 * Every call on a model takes its lock and clears its DiagSink first, so what the sink
 * holds afterwards is that call's report (graphc_message).  A model owns its graphs,
 * weights, pool and one compiled step per purpose (for the last batch size asked). */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include "config.h"
#include "exec/pipeline.h"
#include "graph/lower.h"
#include "include/graphc.h"
#include "run/train.h"
#ifdef HAVE_ONNX
#include "onnx/onnx.h"
#endif

_Static_assert(MAX_RANK <= GRAPHC_MAX_RANK, "graphc_tensor_info.dims must hold every rank");
_Static_assert(DT_COUNT == 2, "graphc_dtype must name every DType");

struct graphc_model {
    pthread_mutex_t lock;      /* held by every call but graphc_message and graphc_free */
    Source src;                /* the .net text (an ONNX model's: the text import made) */
    DiagSink diag;             /* the current call's messages */
    Graph *fwd;                /* the model as lowered: symbols unbound */
    Graph *layout;             /* the graph whose vars w holds: the training step's (with the
                                * optimizer's state) when the model has a train block, else NULL (fwd's) */
    Weights w;
    Pool *pool;                /* the model's threads: two models never share one */
    bool *label;               /* per input of fwd: no output depends on it */
    float **outs;              /* executor_run's output pointers: fwd's outputs, loss, accuracy */
    Step step[PURPOSE_COUNT];  /* each purpose's step, for the last batch size asked */
    int64_t steps;             /* training steps taken */
};

const char *graphc_version(void) { return PACKAGE_VERSION; }

const char *graphc_message(const graphc_model *m)
{
    if (!m) return "graphc: no model (NULL): memory ran out while making it, or NULL was given\n";
    return m->diag.buf ? m->diag.buf : "";
}

static void begin(graphc_model *m)
{
    pthread_mutex_lock(&m->lock);
    diag_clear(&m->diag);
}

static graphc_status end(graphc_model *m, graphc_status st)
{
    if (m->diag.suppressed) {
        /* what diag_flush says on a terminal, said in the message */
        int more = m->diag.suppressed, max = m->diag.max_errors;
        m->diag.max_errors = 0;
        diag_plain(&m->diag, "too many errors (%d more not shown)", more);
        m->diag.max_errors = max;
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}

static const Graph *layout(const graphc_model *m) { return m->layout ? m->layout : m->fwd; }

/* ---- loading ------------------------------------------------------------------------ */

static graphc_model *model_new(void)
{
    graphc_model *m = gc_calloc(1, sizeof *m);
    if (!m) return NULL;
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        gc_free(m);
        return NULL;
    }
    diag_init(&m->diag, NULL);
    return m;
}

/* What every model needs once its graph and (for an import) weights are there: which
 * inputs are labels, the buffers of a run, the pool, the weights. */
static graphc_status finish_load(graphc_model *m)
{
    Graph *g = m->fwd;
    m->diag.src = g->src = &m->src;
    bool *reach = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *reach);
    m->label = gc_calloc((size_t)(g->ninputs ? g->ninputs : 1), sizeof *m->label);
    m->outs = gc_calloc((size_t)g->noutputs + 2, sizeof *m->outs);
    m->pool = pool_new(0);
    if (!reach || !m->label || !m->outs || !m->pool) {
        gc_free(reach);
        diag_plain(&m->diag, "out of memory");
        return GRAPHC_ERR_MEMORY;
    }
    /* nodes are in topological order: one backward sweep from the outputs */
    for (int i = 0; i < g->noutputs; i++) reach[g->outputs[i].node] = true;
    for (int i = g->nnodes - 1; i >= 0; i--)
        for (int k = 0; reach[i] && k < g->nodes[i].nin; k++) reach[g->nodes[i].in[k]] = true;
    for (int i = 0; i < g->ninputs; i++) m->label[i] = !reach[g->inputs[i]];
    gc_free(reach);
    if (m->w.data) return GRAPHC_OK;
    /* the weights of the training step when there is one, so optimizer state exists */
    if (g->train.minimize >= 0 && !(m->layout = pipeline_base(g, FOR_TRAINING, 1, 0, &m->diag))) return GRAPHC_ERR_MODEL;
    return weights_init(&m->w, layout(m), g->train.seed, &m->diag) == 0 ? GRAPHC_OK : GRAPHC_ERR_MEMORY;
}

static graphc_status compile(graphc_model *m)
{
    m->diag.src = &m->src;
    if (compile_source(&m->src, &m->diag, NULL, &m->fwd) != 0 || m->diag.nerrors) return GRAPHC_ERR_MODEL;
    return finish_load(m);
}

static bool is_onnx(const char *path)
{
    size_t n = strlen(path);
    return n >= 5 && strcasecmp(path + n - 5, ".onnx") == 0;
}

/* An ONNX model through onnx/: its .net text, graph and weights become the model's.
 * Messages about the text name it FILE.onnx.net. */
static graphc_status load_onnx(graphc_model *m, const char *path)
{
#ifdef HAVE_ONNX
    size_t n = strlen(path);
    char *net_name = gc_malloc(n + 5);
    if (!net_name) {
        diag_plain(&m->diag, "out of memory");
        return GRAPHC_ERR_MEMORY;
    }
    memcpy(net_name, path, n);
    memcpy(net_name + n, ".net", 5);
    OnnxImport im;
    int rc = onnx_import_file(path, net_name, &im, &m->diag);
    gc_free(net_name);
    if (rc != 0) return rc == -1 ? GRAPHC_ERR_FILE : GRAPHC_ERR_MODEL;
    m->src = im.net;
    m->fwd = im.graph;
    m->w = im.w;
    return finish_load(m);
#else
    diag_plain(&m->diag, "%s: this graphc was built without ONNX support (configure --without-onnx, or protobuf-c "
               "missing)", path);
    return GRAPHC_ERR_UNSUPPORTED;
#endif
}

graphc_status graphc_load(const char *path, graphc_model **out)
{
    if (!out) return GRAPHC_ERR_ARG;
    graphc_model *m = *out = model_new();
    if (!m) return GRAPHC_ERR_MEMORY;
    if (!path) {
        diag_plain(&m->diag, "graphc_load: the path is NULL");
        return GRAPHC_ERR_ARG;
    }
    if (is_onnx(path)) return load_onnx(m, path);
    if (source_load(&m->src, path, &m->diag) != 0) return GRAPHC_ERR_FILE;
    return compile(m);
}

graphc_status graphc_load_string(const char *name, const char *source, graphc_model **out)
{
    if (!out) return GRAPHC_ERR_ARG;
    graphc_model *m = *out = model_new();
    if (!m) return GRAPHC_ERR_MEMORY;
    if (!name || !source) {
        diag_plain(&m->diag, "graphc_load_string: the name and the source must not be NULL");
        return GRAPHC_ERR_ARG;
    }
    if (source_from_string(&m->src, name, source) != 0) {
        diag_plain(&m->diag, "out of memory");
        return GRAPHC_ERR_MEMORY;
    }
    return compile(m);
}

void graphc_free(graphc_model *m)
{
    if (!m) return;
    for (int p = 0; p < PURPOSE_COUNT; p++) step_free(&m->step[p]);
    weights_free(&m->w);
    pool_free(m->pool);
    graph_free(m->layout);
    graph_free(m->fwd);
    gc_free(m->label);
    gc_free(m->outs);
    diag_free(&m->diag);
    source_free(&m->src);
    pthread_mutex_destroy(&m->lock);
    gc_free(m);
}

/* Whether the model loaded (else the call fails with a message). */
static bool ready(graphc_model *m, const char *fn)
{
    if (m->fwd && m->w.data && m->pool) return true;
    diag_plain(&m->diag, "%s: the model did not load; free it", fn);
    return false;
}

/* ---- weights ------------------------------------------------------------------------ */

/* Loads or saves the weights (and the optimizer's state and step) as a checkpoint. */
static graphc_status weights_file(graphc_model *m, const char *path, bool save)
{
    if (!m) return GRAPHC_ERR_ARG;
    begin(m);
    const char *fn = save ? "graphc_save_weights" : "graphc_load_weights";
    if (!ready(m, fn)) return end(m, GRAPHC_ERR_ARG);
    if (!path) {
        diag_plain(&m->diag, "%s: the path is NULL", fn);
        return end(m, GRAPHC_ERR_ARG);
    }
    int rc;
    if (save) {
        m->w.step = m->steps;
        rc = checkpoint_save(path, layout(m), &m->w, m->fwd->train.seed, &m->diag);
    } else if ((rc = checkpoint_load(path, layout(m), &m->w, &m->diag)) == 0) {
        m->steps = m->w.step;
    }
    return end(m, rc == 0 ? GRAPHC_OK : GRAPHC_ERR_FILE);
}

graphc_status graphc_load_weights(graphc_model *m, const char *path) { return weights_file(m, path, false); }
graphc_status graphc_save_weights(graphc_model *m, const char *path) { return weights_file(m, path, true); }

/* ---- inputs and outputs ------------------------------------------------------------- */

static graphc_status count(graphc_model *m, bool inputs, int *n)
{
    if (!m) return GRAPHC_ERR_ARG;
    begin(m);
    const char *fn = inputs ? "graphc_input_count" : "graphc_output_count";
    if (!ready(m, fn)) return end(m, GRAPHC_ERR_ARG);
    if (!n) {
        diag_plain(&m->diag, "%s: the count pointer is NULL", fn);
        return end(m, GRAPHC_ERR_ARG);
    }
    *n = inputs ? m->fwd->ninputs : m->fwd->noutputs;
    return end(m, GRAPHC_OK);
}

graphc_status graphc_input_count(graphc_model *m, int *n) { return count(m, true, n); }
graphc_status graphc_output_count(graphc_model *m, int *n) { return count(m, false, n); }

/* Input or output i as the caller sees it, for `batch` examples (0: unbound). */
static graphc_status tensor_info(graphc_model *m, bool input, int i, int64_t batch, graphc_tensor_info *info)
{
    if (!m) return GRAPHC_ERR_ARG;
    begin(m);
    const char *fn = input ? "graphc_input_info" : "graphc_output_info";
    if (!ready(m, fn)) return end(m, GRAPHC_ERR_ARG);
    const Graph *g = m->fwd;
    int n = input ? g->ninputs : g->noutputs;
    if (!info || i < 0 || i >= n || batch < 0) {
        if (!info) diag_plain(&m->diag, "%s: the info pointer is NULL", fn);
        else if (batch < 0) diag_plain(&m->diag, "%s: the batch is negative (%lld)", fn, (long long)batch);
        else diag_plain(&m->diag, "%s: %d is not an index of the model's %d %s", fn, i, n, input ? "inputs" : "outputs");
        return end(m, GRAPHC_ERR_ARG);
    }
    const Node *node = &g->nodes[input ? g->inputs[i] : g->outputs[i].node];
    memset(info, 0, sizeof *info);
    info->name = input ? node->name : g->outputs[i].name;
    info->dtype = node->dtype == DT_I32 ? GRAPHC_I32 : GRAPHC_F32;
    info->rank = node->shape.rank;
    info->label = input && m->label[i];
    info->count = 1;
    int bsym = graph_batch_sym(g);
    for (int k = 0; k < node->shape.rank; k++) {
        Dim d = node->shape.d[k];
        int64_t v = d.v;
        if (d.sym >= 0 && (d.sym != bsym || batch == 0)) v = -1;
        else if (d.sym >= 0 && !gc_mul_i64(d.v, batch, &v)) {
            diag_plain(&m->diag, "%s: a batch of %lld is too large", fn, (long long)batch);
            return end(m, GRAPHC_ERR_ARG);
        }
        info->dims[k] = v;
        if (v < 0 || info->count < 0) info->count = -1;
        else if (!gc_mul_i64(info->count, v, &info->count)) {
            diag_plain(&m->diag, "%s: a batch of %lld is too large", fn, (long long)batch);
            return end(m, GRAPHC_ERR_ARG);
        }
    }
    return end(m, GRAPHC_OK);
}

graphc_status graphc_input_info(graphc_model *m, int i, int64_t batch, graphc_tensor_info *info)
{
    return tensor_info(m, true, i, batch, info);
}

graphc_status graphc_output_info(graphc_model *m, int i, int64_t batch, graphc_tensor_info *info)
{
    return tensor_info(m, false, i, batch, info);
}

/* ---- running ------------------------------------------------------------------------ */

static const char *const purpose_fn[PURPOSE_COUNT] = {
    [FOR_TRAINING] = "graphc_train_step", [FOR_EVALUATION] = "graphc_evaluate", [FOR_INFERENCE] = "graphc_run",
};

/* The step of a purpose at `batch` examples, compiled when the batch size changes, and
 * the inputs it reads checked against those given. */
static graphc_status step_for(graphc_model *m, Purpose purpose, int64_t batch, const void *const *inputs, Step **out)
{
    const char *fn = purpose_fn[purpose];
    const Graph *g = m->fwd;
    if (batch < 1) {
        diag_plain(&m->diag, "%s: the batch must be at least 1, not %lld", fn, (long long)batch);
        return GRAPHC_ERR_ARG;
    }
    if (purpose != FOR_INFERENCE && g->train.minimize < 0) {
        diag_plain(&m->diag, "%s: %s has no train block with a loss to minimize", fn, m->src.name);
        return GRAPHC_ERR_ARG;
    }
    Step *s = &m->step[purpose];
    if (!s->ex || s->batch != batch) {
        step_free(s);
        CompileOptions co = { .mode = MODE_COMPILED, .pool = m->pool };
        if (prepare(g, purpose, batch, &co, &m->w, s, &m->diag) != 0) return GRAPHC_ERR_ARG;
        if (s->run->ninputs != g->ninputs) {
            diag_plain(&m->diag, "%s: internal error: the compiled step has %d inputs, the model %d", fn,
                       s->run->ninputs, g->ninputs);
            step_free(s);
            return GRAPHC_ERR_RUN;
        }
    }
    /* every input a node of the step reads (or an output is) must be given */
    const Graph *r = s->run;
    for (int i = 0; i < r->nnodes + r->noutputs; i++) {
        const int32_t *in = i < r->nnodes ? r->nodes[i].in : &r->outputs[i - r->nnodes].node;
        int nin = i < r->nnodes ? r->nodes[i].nin : 1;
        for (int k = 0; k < nin; k++) {
            const Node *x = &r->nodes[in[k]];
            if (x->op != OP_INPUT || (inputs && inputs[x->a.input.index])) continue;
            diag_plain(&m->diag, "%s: input %d ('%s') is needed, and %s", fn, x->a.input.index, x->name,
                       inputs ? "its pointer is NULL" : "the inputs array is NULL");
            return GRAPHC_ERR_ARG;
        }
    }
    *out = s;
    return GRAPHC_OK;
}

graphc_status graphc_run(graphc_model *m, int64_t batch, const void *const *inputs, void *const *outputs)
{
    if (!m) return GRAPHC_ERR_ARG;
    begin(m);
    if (!ready(m, "graphc_run")) return end(m, GRAPHC_ERR_ARG);
    Step *s;
    graphc_status st = step_for(m, FOR_INFERENCE, batch, inputs, &s);
    if (st != GRAPHC_OK) return end(m, st);
    for (int j = 0; j < m->fwd->noutputs; j++) m->outs[j] = outputs ? (float *)outputs[j] : NULL;
    StepEnv env = { .w = &m->w, .step = m->steps, .seed = m->fwd->train.seed, .d = &m->diag };
    return end(m, executor_run(s->ex, inputs, m->outs, &env) == 0 ? GRAPHC_OK : GRAPHC_ERR_RUN);
}

/* A training step or an evaluation: the step's loss and accuracy outputs are the last
 * ones (autodiff's metrics; pass_inference's after the model's outputs). */
static graphc_status metrics(graphc_model *m, Purpose purpose, int64_t batch, const void *const *inputs, float *loss,
                             float *accuracy)
{
    if (!m) return GRAPHC_ERR_ARG;
    begin(m);
    if (!ready(m, purpose_fn[purpose])) return end(m, GRAPHC_ERR_ARG);
    Step *s;
    graphc_status st = step_for(m, purpose, batch, inputs, &s);
    if (st != GRAPHC_OK) return end(m, st);
    float lv = NAN, av = NAN;
    int first = purpose == FOR_TRAINING ? 0 : m->fwd->noutputs;
    for (int j = 0; j < s->run->noutputs; j++) m->outs[j] = j == first ? &lv : j == first + 1 ? &av : NULL;
    const TrainSpec *t = &m->fwd->train;
    StepEnv env = { .w = &m->w, .step = m->steps, .seed = t->seed, .training = purpose == FOR_TRAINING, .d = &m->diag };
    if (purpose == FOR_TRAINING) step_env_train(&env, t, m->steps);
    if (executor_run(s->ex, inputs, m->outs, &env) != 0) return end(m, GRAPHC_ERR_RUN);
    if (purpose == FOR_TRAINING) m->steps++;
    if (loss) *loss = lv;
    if (accuracy) *accuracy = av;
    return end(m, GRAPHC_OK);
}

graphc_status graphc_train_step(graphc_model *m, int64_t batch, const void *const *inputs, float *loss, float *accuracy)
{
    return metrics(m, FOR_TRAINING, batch, inputs, loss, accuracy);
}

graphc_status graphc_evaluate(graphc_model *m, int64_t batch, const void *const *inputs, float *loss, float *accuracy)
{
    return metrics(m, FOR_EVALUATION, batch, inputs, loss, accuracy);
}
