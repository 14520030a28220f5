/* graphc bench: the interpreter and the compiled plan, side by side in one process. */
#ifndef GRAPHC_BENCH_H
#define GRAPHC_BENCH_H
#include <stdio.h>
#include "exec/exec.h"
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
    bool ablate;           /* run/ablate.c's tables instead: the optimizations one at a time */
    const char *plot;      /* with ablate: the waterfall's SVG is written here (NULL: none) */
    FILE *out;
} BenchOptions;

int bench_run(const Graph *fwd, const BenchOptions *o, DiagSink *d);

/* Shared with run/ablate.c. */
/* The median of v[0..n) (sorts v). */
double bench_median(double *v, int n);
/* Random data for every input of the bound graph g, labels below the class count of
 * the model fwd's logits; NULL (reported) if they do not fit in memory. */
void **bench_feeds(const Graph *fwd, const Graph *g, DiagSink *d);
void bench_free_feeds(const Graph *g, void **f);
/* The environment of every benchmarked step of g (bound) over weights w: o's kind of
 * step and kernels' variant. */
StepEnv bench_env(const Graph *g, Weights *w, const BenchOptions *o, DiagSink *d);
/* The process's CPU time so far (every thread, user and system), in ns; with
 * minor_faults, its minor page faults so far.  On a shared machine a step's CPU time
 * is steadier than its wall time, which includes the waits for a core. */
double bench_cpu_ns(long *minor_faults);
/* Which of nm modes runs m-th in measured step s: the first rotates and the order
 * reverses every other step, so none always follows another. */
int bench_turn(int s, int m, int nm);

#endif
