/* optim_run: graphc's side of tests/optim_torch.py, which holds the train block's
 * optimizers, clipping and schedules against PyTorch on the same weights and batches.
 *
 *   optim_run MODEL.net INIT.ckpt DATA.bin MODE OUT.ckpt
 *       MODE interp, compiled (every pass) or exact (the compiled plan without the
 *       passes that round otherwise than the interpreter).  The model's parameters
 *       from INIT.ckpt (its optimizer state starts at zero); DATA.bin holds u32 steps,
 *       u32 batch, u32 features, then per step the batch's f32 examples [batch,
 *       features] and its i32 labels [batch].  Runs that many training steps as
 *       `graphc run` does (the step's hyperparameters and learning rate from the train
 *       block, step_env_train) and writes the training graph's vars to OUT.ckpt.
 * Exit 0, or 1 with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "graph/lower.h"
#include "graph/passes.h"
#include "run/train.h"

static int fail(DiagSink *d, const char *msg)
{
    if (msg) diag_plain(d, "%s", msg);
    diag_flush(d, stderr);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: optim_run MODEL.net INIT.ckpt DATA.bin interp|compiled|exact OUT.ckpt\n");
        return 2;
    }
    DiagSink d;
    diag_init(&d, NULL);
    Source src;
    Graph *g = NULL;
    if (source_load(&src, argv[1], &d) != 0) return fail(&d, NULL);
    d.src = &src;
    if (compile_source(&src, &d, NULL, &g) != 0) return fail(&d, NULL);
    FILE *f = fopen(argv[3], "rb");
    uint32_t head[3];
    if (!f || fread(head, 4, 3, f) != 3 || head[0] == 0 || head[1] == 0) return fail(&d, "cannot read the data file");
    uint32_t steps = head[0], batch = head[1], features = head[2];
    float *x = malloc((size_t)batch * features * 4);
    int32_t *y = malloc((size_t)batch * 4);
    ExecMode mode = strcmp(argv[4], "interp") == 0 ? MODE_INTERP : MODE_COMPILED;
    uint64_t off = 0;
    if (strcmp(argv[4], "exact") == 0)
        for (int i = 0; i < graph_npasses; i++)
            if (graph_passes[i].rounds) off |= (uint64_t)1 << i;
    Pool *pool = pool_new(2);
    CompileOptions co = { .mode = mode, .pool = pool, .passes_off = off, .seed = 1 };
    Weights w = { 0 };
    Step st;
    if (!x || !y || !pool) return fail(&d, "out of memory");
    if (prepare(g, FOR_TRAINING, batch, &co, &w, &st, &d) != 0) return fail(&d, NULL);
    if (checkpoint_load(argv[2], st.graph, &w, &d) != 0) return fail(&d, NULL);
    w.step = 0;
    const Graph *tg = st.graph;
    int xi = tg->nodes[tg->inputs[0]].dtype == DT_F32 ? 0 : 1;
    for (uint32_t s = 0; s < steps; s++) {
        if (fread(x, 4, (size_t)batch * features, f) != (size_t)batch * features || fread(y, 4, batch, f) != batch)
            return fail(&d, "the data file is short");
        const void *feeds[2];
        feeds[xi] = x;
        feeds[1 - xi] = y;
        float loss = 0, acc = 0;
        float *outs[2] = { &loss, &acc };
        StepEnv env = { .w = &w, .seed = g->train.seed, .training = true, .d = &d };
        step_env_train(&env, &g->train, s);
        if (executor_run(st.ex, feeds, outs, &env) != 0) return fail(&d, NULL);
        w.step = s + 1;
    }
    fclose(f);
    if (checkpoint_save(argv[5], tg, &w, g->train.seed, &d) != 0) return fail(&d, NULL);
    step_free(&st);
    weights_free(&w);
    pool_free(pool);
    free(x);
    free(y);
    graph_free(g);
    source_free(&src);
    diag_free(&d);
    return 0;
}
