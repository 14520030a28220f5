/* graphc bench: the interpreter and the compiled plan, side by side in one process. */
#ifndef GRAPHC_BENCH_H
#define GRAPHC_BENCH_H
#include <stdio.h>
#include "graph/graph.h"
#include "kernels/kern.h"

typedef struct BenchOptions {
    bool infer;            /* inference instead of a training step */
    int threads;           /* 0: all cores */
    const int64_t *batches;
    int nbatches;
    int steps;             /* measured steps per mode */
    int warmup;            /* unmeasured steps per mode first */
    bool profile;          /* per-op tables */
    bool compare_stages;   /* also the compiled plan without parallel stages */
    bool json;             /* one JSON object per batch size instead of tables */
    KIsa isa;              /* the kernels' variant (KISA_AUTO: the best the CPU runs) */
    FILE *out;
} BenchOptions;

int bench_run(const Graph *fwd, const BenchOptions *o, DiagSink *d);

#endif
