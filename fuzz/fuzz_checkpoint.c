/* libFuzzer target: the checkpoint reader, against a small fixed model.  Any input is
 * loaded whole or refused with a message; a refused load changes no weight. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run/train.h"
#include "graph/lower.h"
#include "exec/pipeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static Source src;
static Graph *train;
static Weights w, before;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    DiagSink d;
    Graph *g;
    source_from_string(&src, "fuzz.net",
                       "input x: f32[B, 3]\ninput y: i32[B]\n"
                       "loss = cross_entropy(dense(relu(dense(x, units=4)), units=2), y)\n"
                       "train { data = synthetic(count=8)\noptimizer = adam()\nminimize = loss }\n");
    diag_init(&d, &src);
    if (compile_source(&src, &d, NULL, &g) != 0) abort();
    train = pipeline_base(g, FOR_TRAINING, 1, 0, &d);
    if (!train || weights_init(&w, train, 1, &d) != 0 || weights_init(&before, train, 1, &d) != 0) abort();
    graph_free(g);
    diag_free(&d);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/graphc-fuzz-ckpt-%ld", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    DiagSink d;
    diag_init(&d, NULL);
    weights_copy_matching(&w, &before);
    if (checkpoint_load(path, train, &w, &d) != 0) {
        if (d.nerrors == 0) abort();
        for (int v = 0; v < w.n; v++)
            if (memcmp(w.data[v], before.data[v], (size_t)shape_numel(&w.shapes[v]) * 4) != 0) abort();
    }
    diag_free(&d);
    unlink(path);
    return 0;
}
