/* graphc bench --ablate: where the compiled plan's speed over the interpreter comes
 * from.  The optimizations are taken one at a time, in two tables: starting from the
 * interpreter and adding one at a time, and removing one at a time from the full plan.
 * Every configuration runs in one process on the same feeds, the configurations
 * alternating step by step as graphc bench's modes do; each row has the median time
 * per step, the share of the interpreter-to-compiled gap it closes, page faults, bytes
 * allocated per step, peak memory, and whether its outputs are the interpreter's bit
 * for bit.  See docs/why-graph-mode.md. */
#ifndef GRAPHC_ABLATE_H
#define GRAPHC_ABLATE_H
#include "run/bench.h"
#include "util/pool.h"

/* One optimization, in the order the adding table takes them. */
typedef struct AblateStep {
    const char *name;     /* one word (JSON) */
    const char *what;     /* the table's label */
    const char *passes;   /* the passes of graph_passes it is, comma-separated; "" for the runtime's own */
} AblateStep;
extern const AblateStep ablate_steps[];
extern const int ablate_nsteps;
#define ABLATE_MAX_STEPS 16
#define ABLATE_MAX_CONFIGS (2 * ABLATE_MAX_STEPS + 1)

/* A configuration measured. */
typedef struct AblateConfig {
    unsigned on;          /* bit k: ablate_steps[k] on (bits a configuration cannot use cleared) */
    double ms, ms_p25, ms_p75;   /* step time: median and quartiles */
    double cpu_ms;        /* CPU time of the process per step (every thread, user and system): median */
    double faults;        /* minor page faults per step (the whole process, every thread) */
    double allocs, alloc_bytes;  /* allocations of activations and scratch per step, and their bytes */
    int64_t peak;         /* activation bytes: the interpreter's measured peak, the arena, or with per-op
                           * allocation the most bytes alive at once */
    bool rounds;          /* a pass marked `rounds` runs: its outputs may differ in the last bits */
    bool same_bits;       /* every output of every step equal to the interpreter's, bit for bit */
    double max_rel;       /* the largest difference from the interpreter's outputs, relative to the largest
                           * magnitude of the output it is in */
} AblateConfig;

typedef struct Ablation {
    const char *model;
    bool infer;
    int64_t batch;
    int threads, steps, warmup, cpus;
    double load[2];       /* 1-minute load average before and after the measurement */
    int64_t shared_arena; /* the one arena the compiled configurations share (they never run at once) */
    long max_rss_kb;
    int ncfg;
    AblateConfig cfg[ABLATE_MAX_CONFIGS];   /* cfg[0]: the interpreter */
    int add[ABLATE_MAX_STEPS + 1];   /* adding table: add[k] has steps 0..k-1 on; add[nsteps] the full plan */
    int remove[ABLATE_MAX_STEPS];    /* removal table: every step on but k */
} Ablation;

/* Measures every configuration of fwd (batch examples; o: steps, warm-up, --infer) on
 * pool.  0, or -1 after reporting to d. */
int ablate_measure(const Graph *fwd, const BenchOptions *o, int64_t batch, Pool *pool, Ablation *a, DiagSink *d);
/* The two tables as text, or one JSON object on a line. */
void ablate_print(const Ablation *a, FILE *out, bool json);
/* The waterfall of the adding table as an SVG at path.  0, or -1 after reporting. */
int ablate_plot(const Ablation *a, const char *path, DiagSink *d);
/* graphc bench --ablate for one batch size: measure, print to o->out, plot to o->plot. */
int ablate_batch(const Graph *fwd, const BenchOptions *o, int64_t batch, Pool *pool, DiagSink *d);

#endif
