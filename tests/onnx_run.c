/* onnx_run: graphc's side of the ONNX tests (tests/onnx.sh, tests/onnx_torch.py).
 *
 *   onnx_run init MODEL.net CKPT SEED
 *       a checkpoint of the model's params with random values, biases included
 *       (uniform in +-sqrt(3 / fan_in), so that activations stay of order 1), and its
 *       buffers (batch norm's running statistics) uniform in [0.5, 1.5)
 *   onnx_run run MODEL.net CKPT BATCH PREFIX
 *       runs the inference graph (graphc predict's: compiled plan) on BATCH examples:
 *       each input the outputs need is read from PREFIX.in.NAME.f32 (raw little-endian
 *       floats, NHWC), or made uniform in [0, 1) and written there when the file does
 *       not exist; each output is written to PREFIX.out.NAME.f32, and PREFIX.json says
 *       the names and dimensions of both, for the ONNX Runtime script.
 * Exit 0, or 1 with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "graph/lower.h"
#include "graph/passes.h"
#include "run/train.h"
#include "util/file.h"
#include "util/rng.h"
#include "tests/model_file.h"

static int fail(DiagSink *d)
{
    diag_flush(d, stderr);
    return 1;
}

static int init(const Graph *g, const char *ckpt, uint64_t seed, DiagSink *d)
{
    Weights w;
    if (weights_init(&w, g, seed, d) != 0) return fail(d);
    for (int v = 0; v < g->nvars; v++) {
        const Var *var = &g->vars[v];
        int64_t n = shape_numel(&var->shape), fan = var->shape.rank >= 2 ? var->fan_in : n;
        float a = sqrtf(3.0f / (float)(fan > 0 ? fan : 1));
        for (int64_t i = 0; i < n; i++) w.data[v][i] = a * (2 * (float)rng_unit(rng_at(seed, (uint64_t)v + 1, (uint64_t)i)) - 1);
        if (var->role == VAR_BUFFER)   /* batch norm's running statistics: a variance is positive */
            for (int64_t i = 0; i < n; i++) w.data[v][i] = 0.5f + (float)rng_unit(rng_at(seed, (uint64_t)v + 1, (uint64_t)i));
    }
    int rc = checkpoint_save(ckpt, g, &w, seed, d);
    weights_free(&w);
    return rc ? fail(d) : 0;
}

static void json_dims(FILE *f, const Shape *s)
{
    fputc('[', f);
    for (int i = 0; i < s->rank; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)s->d[i].v);
    fputc(']', f);
}

static int run(const Graph *fwd, const char *ckpt, int64_t batch, const char *prefix, DiagSink *d)
{
    Step step = { 0 };
    const Graph *g = NULL;
    Weights w = { 0 };
    int rc = 1;
    void **feeds = NULL;
    float **outs = NULL;
    if (weights_init(&w, fwd, 0, d) != 0 || checkpoint_load(ckpt, fwd, &w, d) != 0) goto out;
    CompileOptions co = { .mode = MODE_COMPILED };
    if (prepare(fwd, FOR_INFERENCE, batch, &co, &w, &step, d) != 0) goto out;
    g = step.graph;
    bool *need = gc_calloc((size_t)g->nnodes, sizeof *need);
    feeds = gc_calloc((size_t)g->ninputs + 1, sizeof *feeds);
    outs = gc_calloc((size_t)g->noutputs + 1, sizeof *outs);
    if (!need || !feeds || !outs) { gc_free(need); goto out; }
    for (int i = 0; i < g->noutputs; i++) need[g->outputs[i].node] = true;
    for (int i = g->nnodes - 1; i >= 0; i--)
        for (int k = 0; need[i] && k < g->nodes[i].nin; k++) need[g->nodes[i].in[k]] = true;
    char path[1024];
    snprintf(path, sizeof path, "%s.json", prefix);
    FILE *js = fopen(path, "w");
    if (!js) { gc_free(need); diag_plain(d, "cannot write %s", path); goto out; }
    fprintf(js, "{\"inputs\": [");
    int nj = 0;
    for (int i = 0; i < g->ninputs; i++) {
        const Node *in = &g->nodes[g->inputs[i]];
        size_t bytes = node_bytes(in);
        feeds[i] = gc_calloc(bytes ? bytes : 1, 1);
        if (!feeds[i]) break;
        if (!need[g->inputs[i]]) continue;   /* labels: not read at inference */
        snprintf(path, sizeof path, "%s.in.%s.f32", prefix, in->name);
        void *data;
        size_t len;
        DiagSink quiet;
        diag_init(&quiet, NULL);
        if (file_read_all(path, bytes, &data, &len, &quiet) == 0 && len == bytes) {
            memcpy(feeds[i], data, bytes);
            gc_free(data);
        } else {
            float *f = feeds[i];
            for (size_t k = 0; k < bytes / 4; k++) f[k] = (float)rng_unit(rng_at(7, (uint64_t)i, k));
            if (file_write_atomic(path, f, bytes, d) != 0) { diag_free(&quiet); break; }
        }
        diag_free(&quiet);
        fprintf(js, "%s{\"name\": \"%s\", \"dims\": ", nj++ ? ", " : "", in->name);
        json_dims(js, &in->shape);
        fprintf(js, ", \"type\": \"%s\"}", in->dtype == DT_I32 ? "int32" : "float32");
    }
    fprintf(js, "], \"outputs\": [");
    for (int i = 0; i < g->noutputs; i++) {
        fprintf(js, "%s{\"name\": \"%s\", \"dims\": ", i ? ", " : "", g->outputs[i].name);
        json_dims(js, &g->nodes[g->outputs[i].node].shape);
        fprintf(js, "}");
        outs[i] = gc_calloc((size_t)shape_numel(&g->nodes[g->outputs[i].node].shape), sizeof(float));
    }
    fprintf(js, "]}\n");
    fclose(js);
    gc_free(need);
    StepEnv env = { .w = &w, .d = d };
    if (executor_run(step.ex, (const void *const *)feeds, outs, &env) != 0) goto out;
    for (int i = 0; i < g->noutputs; i++) {
        snprintf(path, sizeof path, "%s.out.%s.f32", prefix, g->outputs[i].name);
        if (file_write_atomic(path, outs[i], node_bytes(&g->nodes[g->outputs[i].node]), d) != 0) goto out;
    }
    rc = 0;
out:
    if (rc) diag_flush(d, stderr);
    for (int i = 0; feeds && i < g->ninputs; i++) gc_free(feeds[i]);
    for (int i = 0; outs && i < g->noutputs; i++) gc_free(outs[i]);
    gc_free(feeds);
    gc_free(outs);
    step_free(&step);
    weights_free(&w);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 5 || (strcmp(argv[1], "init") != 0 && strcmp(argv[1], "run") != 0) || (strcmp(argv[1], "run") == 0 && argc != 6)) {
        fprintf(stderr, "usage: onnx_run init MODEL.net CKPT SEED | onnx_run run MODEL.net CKPT BATCH PREFIX\n");
        return 2;
    }
    Source src;
    DiagSink d;
    Graph *g;
    if (model_file(argv[2], &src, &d, &g) != 0) return 1;
    int rc = strcmp(argv[1], "init") == 0 ? init(g, argv[3], strtoull(argv[4], NULL, 10), &d)
                                          : run(g, argv[3], strtoll(argv[4], NULL, 10), argv[5], &d);
    graph_free(g);
    diag_free(&d);
    source_free(&src);
    return rc;
}
