/* torch_run: graphc's side of the PyTorch comparisons (tests/torch_ops.py).
 *
 *   torch_run MODEL.net BATCH SEED DIR
 *
 * Compiles the model, makes its training step (the loss's gradient with respect to every
 * parameter) for BATCH examples, and runs it once in the interpreter on weights and
 * inputs drawn from SEED: each parameter uniform (init_range: no bias zero, no scale
 * one, so no gradient is special); each f32 input uniform
 * in [-1, 1); each i32 input in [0, N), N the vocabulary of the embedding it feeds or
 * the classes of the cross_entropy it labels.  Writes into DIR (raw little-endian, rows
 * first): param.K.f32 and grad.K.f32 for parameter K, in.K.f32 or in.K.i32 for input
 * K, loss.f32, and manifest.json naming each with its shape.  The step's updates run
 * with a learning rate of 0, so what is written is the step's own gradient.
 * Exit 0, or 1 with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/exec.h"
#include "exec/pipeline.h"
#include "graph/lower.h"
#include "graph/passes.h"
#include "util/file.h"
#include "util/rng.h"
#include "tests/model_file.h"

static int fail(DiagSink *d)
{
    diag_flush(d, stderr);
    return 1;
}

/* The range [0, N) of the i32 input node `in`: its readers' vocabulary or classes. */
static int64_t int_range(const Graph *g, int32_t in)
{
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->op == OP_EMBEDDING && n->in[0] == in) return g->nodes[n->in[1]].shape.d[0].v;
        if (n->op == OP_CROSS_ENTROPY && n->in[1] == in) {
            const Shape *l = &g->nodes[n->in[0]].shape;
            return l->d[l->rank - 1].v;
        }
    }
    return -1;
}

static void json_shape(FILE *f, const Shape *s)
{
    fputc('[', f);
    for (int i = 0; i < s->rank; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)s->d[i].v);
    fputc(']', f);
}

static int write_raw(const char *dir, const char *kind, int k, const char *ext, const void *data, size_t bytes, DiagSink *d)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%d.%s", dir, kind, k, ext);
    return file_write_atomic(path, data, bytes, d);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* Where a parameter is drawn: around mid, within +-a.  Kernels and explicit parameters
 * +-sqrt(3 / fan_in) (activations stay of order 1); biases and shifts +-0.1, scales 1
 * +-0.1, as trained ones are (a bias as large as its layer's signal would make a sum
 * such as attention's query gradient cancel, ill-conditioned in any float32 program). */
static void init_range(const Var *var, float *mid, float *a)
{
    int64_t n = shape_numel(&var->shape), fan = var->shape.rank >= 2 ? var->fan_in : n;
    *mid = ends_with(var->name, "/gamma") ? 1.0f : 0.0f;
    *a = ends_with(var->name, "/bias") || ends_with(var->name, "/beta") || ends_with(var->name, "/gamma")
             ? 0.1f
             : sqrtf(3.0f / (float)(fan > 0 ? fan : 1));
}

/* The gradient node of each parameter var: the second input of its update. */
static int add_gradient_outputs(Graph *tg, int32_t *grad_of_var)
{
    for (int v = 0; v < tg->nvars; v++) grad_of_var[v] = -1;
    for (int i = 0; i < tg->nnodes; i++) {
        const Node *n = &tg->nodes[i];
        if ((op_info[n->op].traits & OPT_UPDATE) && n->op != OP_UPDATE_ALL) grad_of_var[n->a.update.var] = n->in[1];
    }
    for (int v = 0; v < tg->nvars; v++)
        if (tg->vars[v].role == VAR_PARAM && grad_of_var[v] >= 0 && graph_add_output(tg, tg->vars[v].name, grad_of_var[v]) < 0)
            return -1;
    return 0;
}

/* The same step through the compiled plan, every pass on but those that round
 * otherwise (graph_passes' `rounds`), on a copy of w, its outputs into outs[noutputs
 * ..]: the fused ops (attention, the masked softmax...) must give the interpreter's
 * bits, so what PyTorch is compared with holds for both.  0, or 1 after reporting. */
static int compiled_agrees(const Graph *tg, int64_t batch, const Weights *w, void **feeds, float **outs, DiagSink *d)
{
    uint64_t off = 0;
    for (int i = 0; i < graph_npasses; i++)
        if (graph_passes[i].rounds) off |= (uint64_t)1 << i;
    Pool *pool = pool_new(1);
    Graph *g = graph_clone(tg);
    Weights wc = { 0 };
    Step s;
    CompileOptions co = { .mode = MODE_COMPILED, .pool = pool, .passes_off = off, .seed = 1 };
    int rc = !pool || !g || prepare_from(g, FOR_TRAINING, batch, &co, &wc, &s, d) != 0;
    if (rc == 0) {
        weights_copy_matching(&wc, w);
        StepEnv env = { .w = &wc, .lr = 0.0f, .training = true, .d = d };
        rc = executor_run(s.ex, (const void *const *)feeds, outs + tg->noutputs, &env) != 0;
        step_free(&s);
    }
    weights_free(&wc);
    pool_free(pool);
    return rc;
}

static int run(const Graph *fwd, int64_t batch, uint64_t seed, const char *dir, DiagSink *d)
{
    Graph *tg = pass_autodiff(fwd, d);
    if (!tg) return fail(d);
    int rc = 1, nvars = tg->nvars;
    Weights w = { 0 };
    void **feeds = NULL;
    float **outs = NULL;
    int32_t *grad_of = gc_calloc((size_t)nvars + 1, sizeof *grad_of);
    FILE *js = NULL;
    char path[1024];
    if (!grad_of || add_gradient_outputs(tg, grad_of) != 0 || graph_bind(tg, "B", batch, d) != 0) goto out;
    if (weights_init(&w, tg, seed, d) != 0) goto out;
    feeds = gc_calloc((size_t)tg->ninputs + 1, sizeof *feeds);
    outs = gc_calloc(2 * (size_t)tg->noutputs + 1, sizeof *outs);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (!feeds || !outs || !(js = fopen(path, "w"))) {
        diag_plain(d, "cannot write %s", path);
        goto out;
    }
    fprintf(js, "{\"params\": [");
    int np = 0;
    for (int v = 0; v < nvars; v++) {
        const Var *var = &tg->vars[v];
        if (var->role != VAR_PARAM) continue;
        int64_t n = shape_numel(&var->shape);
        float a, mid;
        init_range(var, &mid, &a);
        for (int64_t i = 0; i < n; i++)
            w.data[v][i] = mid + a * (2 * (float)rng_unit(rng_at(seed, (uint64_t)v + 1, (uint64_t)i)) - 1);
        if (write_raw(dir, "param", v, "f32", w.data[v], (size_t)n * 4, d) != 0) goto out;
        fprintf(js, "%s\n  {\"k\": %d, \"name\": \"%s\", \"shape\": ", np++ ? "," : "", v, var->name);
        json_shape(js, &var->shape);
        fprintf(js, ", \"grad\": %s}", grad_of[v] >= 0 ? "true" : "false");
    }
    fprintf(js, "],\n\"inputs\": [");
    for (int i = 0; i < tg->ninputs; i++) {
        const Node *in = &tg->nodes[tg->inputs[i]];
        size_t n = (size_t)shape_numel(&in->shape);
        if (!(feeds[i] = gc_calloc(n ? n : 1, 4))) goto out;
        if (in->dtype == DT_I32) {
            int64_t range = int_range(tg, tg->inputs[i]);
            if (range < 1) {
                diag_plain(d, "input '%s' is i32 but feeds no embedding or cross_entropy", in->name);
                goto out;
            }
            for (size_t k = 0; k < n; k++)
                ((int32_t *)feeds[i])[k] = (int32_t)rng_below(rng_at(seed ^ 0x1d5, (uint64_t)i, k), (uint64_t)range);
        } else {
            for (size_t k = 0; k < n; k++) ((float *)feeds[i])[k] = 2 * (float)rng_unit(rng_at(seed ^ 0xf32, (uint64_t)i, k)) - 1;
        }
        if (write_raw(dir, "in", i, in->dtype == DT_I32 ? "i32" : "f32", feeds[i], n * 4, d) != 0) goto out;
        fprintf(js, "%s\n  {\"k\": %d, \"name\": \"%s\", \"dtype\": \"%s\", \"shape\": ", i ? "," : "", i, in->name,
                dtype_name(in->dtype));
        json_shape(js, &in->shape);
        fputc('}', js);
    }
    fprintf(js, "]}\n");
    if (fclose(js) != 0) {
        js = NULL;
        diag_plain(d, "cannot write %s", path);
        goto out;
    }
    js = NULL;
    for (int o = 0; o < 2 * tg->noutputs; o++)
        if (!(outs[o] = gc_calloc((size_t)shape_numel(&tg->nodes[tg->outputs[o % tg->noutputs].node].shape) + 1, 4))) goto out;
    StepEnv env = { .w = &w, .lr = 0.0f, .training = true, .d = d };
    if (compiled_agrees(tg, batch, &w, feeds, outs, d) != 0) goto out;
    Pool *pool = pool_new(1);
    int st = interp_run(tg, (const void *const *)feeds, outs, &env, pool, NULL);
    pool_free(pool);
    if (st != 0) goto out;
    for (int o = 0; o < tg->noutputs; o++)
        if (memcmp(outs[o], outs[tg->noutputs + o], (size_t)shape_numel(&tg->nodes[tg->outputs[o].node].shape) * 4) != 0) {
            diag_plain(d, "the compiled plan's %s differs from the interpreter's", tg->outputs[o].name);
            goto out;
        }
    if (write_raw(dir, "loss", 0, "f32", outs[0], 4, d) != 0) goto out;
    for (int o = 0; o < tg->noutputs; o++)
        for (int v = 0; v < nvars; v++)
            if (tg->vars[v].role == VAR_PARAM && strcmp(tg->vars[v].name, tg->outputs[o].name) == 0 &&
                write_raw(dir, "grad", v, "f32", outs[o], (size_t)shape_numel(&tg->vars[v].shape) * 4, d) != 0)
                goto out;
    rc = 0;
out:
    if (js) fclose(js);
    if (rc) diag_flush(d, stderr);
    for (int i = 0; feeds && i < tg->ninputs; i++) gc_free(feeds[i]);
    for (int o = 0; outs && o < 2 * tg->noutputs; o++) gc_free(outs[o]);
    gc_free(feeds);
    gc_free(outs);
    gc_free(grad_of);
    weights_free(&w);
    graph_free(tg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: torch_run MODEL.net BATCH SEED DIR\n");
        return 2;
    }
    Source src;
    DiagSink d;
    Graph *g;
    if (model_file(argv[1], &src, &d, &g) != 0) return 1;
    int rc = run(g, strtoll(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), argv[4], &d);
    graph_free(g);
    diag_free(&d);
    source_free(&src);
    return rc;
}
