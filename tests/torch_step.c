/* torch_step: graphc's side of tests/bnorm_torch.py, which holds graphc against PyTorch
 * on the same weights and batch.
 *
 *   torch_step MODEL.net CKPT BATCH DIR MODE SEED
 *       MODE interp or compiled.  Reads the weights (every parameter and buffer) from
 *       CKPT, and each input of BATCH examples from DIR/in.NAME.bin (raw little-endian
 *       f32 or i32, NHWC).  Runs the inference graph and writes each output to
 *       DIR/MODE.out.NAME.bin; then one training step of the model's loss with its
 *       optimizer made SGD with lr 0 (the parameters stay; the running statistics are
 *       updated), step 0 with seed SEED (dropout's mask), and writes the loss to
 *       DIR/MODE.loss.bin, each parameter's gradient to DIR/MODE.grad.VAR.bin and each
 *       buffer after the step to DIR/MODE.buffer.VAR.bin ('/' in VAR as '.').
 * Exit 0, or 1 with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "graph/lower.h"
#include "graph/passes.h"
#include "run/train.h"

static int write_file(const char *dir, const char *mode, const char *what, const char *name, const void *data,
                      size_t bytes, DiagSink *d)
{
    char path[1024], file[300] = "";
    for (size_t i = 0; name && name[i] && i + 1 < sizeof file; i++) file[i] = name[i] == '/' ? '.' : name[i];
    snprintf(path, sizeof path, "%s/%s.%s%s%s.bin", dir, mode, what, name ? "." : "", file);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
        diag_plain(d, "cannot write %s", path);
        return -1;
    }
    return 0;
}

/* The inputs of g (bound) from DIR/in.NAME.bin, each exactly its size. */
static void **read_feeds(const Graph *g, const char *dir, DiagSink *d)
{
    void **feeds = calloc((size_t)g->ninputs + 1, sizeof *feeds);
    for (int i = 0; feeds && i < g->ninputs; i++) {
        const Node *in = &g->nodes[g->inputs[i]];
        char path[1024];
        snprintf(path, sizeof path, "%s/in.%s.bin", dir, in->name);
        size_t bytes = node_bytes(in);
        FILE *f = fopen(path, "rb");
        feeds[i] = malloc(bytes + 1);
        if (!f || !feeds[i] || fread(feeds[i], 1, bytes + 1, f) != bytes) {
            diag_plain(d, "%s: cannot read %zu bytes (exactly)", path, bytes);
            if (f) fclose(f);
            return NULL;
        }
        fclose(f);
    }
    return feeds;
}

static float **alloc_outs(const Graph *g)
{
    float **outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
    for (int i = 0; outs && i < g->noutputs; i++) outs[i] = malloc(node_bytes(&g->nodes[g->outputs[i].node]) + 4);
    return outs;
}

static int infer(const Graph *model, Weights *w, int64_t batch, const char *dir, const char *mode,
                 const CompileOptions *co, DiagSink *d)
{
    Step st;
    if (prepare(model, FOR_INFERENCE, batch, co, w, &st, d) != 0) return -1;
    const Graph *g = st.graph;
    void **feeds = read_feeds(g, dir, d);
    float **outs = alloc_outs(g);
    StepEnv env = { .w = w, .training = false, .d = d };
    int rc = feeds && outs ? executor_run(st.ex, (const void *const *)feeds, outs, &env) : -1;
    for (int i = 0; rc == 0 && i < g->noutputs; i++)
        rc = write_file(dir, mode, "out", g->outputs[i].name, outs[i], node_bytes(&g->nodes[g->outputs[i].node]), d);
    for (int i = 0; feeds && i < g->ninputs; i++) free(feeds[i]);
    for (int i = 0; outs && i < g->noutputs; i++) free(outs[i]);
    free(feeds);
    free(outs);
    step_free(&st);
    return rc;
}

/* The training step with every parameter's gradient as an output "grad:VAR". */
static int train_step(Graph *model, Weights *w, int64_t batch, uint64_t seed, const char *dir, const char *mode,
                      const CompileOptions *co, DiagSink *d)
{
    model->train.optim = OPTIM_SGD;
    model->train.momentum = 0;
    model->train.nesterov = false;
    Graph *tg = pipeline_base(model, FOR_TRAINING, 1, 0, d);
    if (!tg) return -1;
    for (int i = 0, n = tg->nnodes; i < n; i++) {
        const Node *u = &tg->nodes[i];
        char name[300];
        if (u->op != OP_SGD_UPDATE) continue;
        snprintf(name, sizeof name, "grad:%s", tg->vars[u->a.update.var].name);
        if (graph_add_output(tg, name, u->in[1]) < 0) { graph_free(tg); return -1; }
    }
    int sym = graph_batch_sym(model);
    if (sym >= 0 && graph_bind(tg, model->syms[sym], batch, d) != 0) { graph_free(tg); return -1; }
    Step st;
    if (prepare_from(tg, FOR_TRAINING, batch, co, w, &st, d) != 0) return -1;
    const Graph *g = st.graph;
    void **feeds = read_feeds(g, dir, d);
    float **outs = alloc_outs(g);
    StepEnv env = { .w = w, .step = 0, .seed = seed, .lr = 0.0f, .training = true, .d = d };
    int rc = feeds && outs ? executor_run(st.ex, (const void *const *)feeds, outs, &env) : -1;
    for (int i = 0; rc == 0 && i < g->noutputs; i++) {
        const char *name = g->outputs[i].name;
        size_t bytes = node_bytes(&g->nodes[g->outputs[i].node]);
        if (strcmp(name, "loss") == 0) rc = write_file(dir, mode, "loss", NULL, outs[i], 4, d);
        else if (strncmp(name, "grad:", 5) == 0) rc = write_file(dir, mode, "grad", name + 5, outs[i], bytes, d);
    }
    for (int v = 0; rc == 0 && v < g->nvars; v++)
        if (g->vars[v].role == VAR_BUFFER)
            rc = write_file(dir, mode, "buffer", g->vars[v].name, w->data[v], (size_t)shape_numel(&g->vars[v].shape) * 4, d);
    for (int i = 0; feeds && i < g->ninputs; i++) free(feeds[i]);
    for (int i = 0; outs && i < g->noutputs; i++) free(outs[i]);
    free(feeds);
    free(outs);
    step_free(&st);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 7 || (strcmp(argv[5], "interp") != 0 && strcmp(argv[5], "compiled") != 0)) {
        fprintf(stderr, "usage: torch_step MODEL.net CKPT BATCH DIR interp|compiled SEED\n");
        return 2;
    }
    DiagSink d;
    Source src;
    diag_init(&d, NULL);
    Graph *g = NULL;
    Weights w = { 0 };
    int rc = 1;
    if (source_load(&src, argv[1], &d) != 0) goto out_diag;
    d.src = &src;
    if (compile_source(&src, &d, NULL, &g) != 0) goto out;
    Pool *pool = pool_new(2);
    CompileOptions co = { .mode = argv[5][0] == 'i' ? MODE_INTERP : MODE_COMPILED, .pool = pool, .verify = true };
    int64_t batch = atoll(argv[3]);
    Graph *tg = pipeline_base(g, FOR_TRAINING, 1, 0, &d);   /* its vars: every one a step can read */
    if (tg && weights_init(&w, tg, 1, &d) == 0 && checkpoint_load(argv[2], g, &w, &d) == 0 &&
        infer(g, &w, batch, argv[4], argv[5], &co, &d) == 0 &&
        train_step(g, &w, batch, strtoull(argv[6], NULL, 10), argv[4], argv[5], &co, &d) == 0)
        rc = 0;
    graph_free(tg);
    weights_free(&w);
    pool_free(pool);
out:
    graph_free(g);
    source_free(&src);
out_diag:
    diag_flush(&d, stderr);
    diag_free(&d);
    return rc;
}
