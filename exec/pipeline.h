/* The compiler's pipeline: the one way from a lowered model to a step that runs.
 *
 *   model ─┬─ training:   autodiff (+ allreduce over ranks) ─┐
 *          ├─ evaluation: inference graph with loss, accuracy ├─ bind the batch ─ passes ─ memory plan ─ executor
 *          └─ inference:  inference graph                    ─┘   (compiled only)  (compiled)
 *
 * Every caller (the training loop, evaluation, prediction, the benchmark, the C API,
 * `graphc check` and `dump`, the fuzz targets) goes through prepare(); what they may
 * vary is in CompileOptions, passed in, never read from globals.  Ownership: a Step
 * owns its graphs and executor; it borrows the model, the weights and the pool, which
 * must outlive it. */
#ifndef GRAPHC_PIPELINE_H
#define GRAPHC_PIPELINE_H
#include "exec/executor.h"

typedef enum Purpose { FOR_TRAINING, FOR_EVALUATION, FOR_INFERENCE, PURPOSE_COUNT } Purpose;

typedef struct CompileOptions {
    ExecMode mode;              /* the compiled plan (the passes run) or the interpreter */
    Pool *pool;                 /* the threads the step runs on; NULL: the calling thread */
    int threads;                /* without a pool: the threads to plan for (no executor then) */
    int ranks;                  /* training data-parallel over this many ranks (> 1: allreduce ops) */
    int64_t bucket_bytes;       /* their gradient buckets (0: ALLREDUCE_DEFAULT_BUCKET) */
    uint64_t passes_off;        /* bit i set: graph_passes[i] does not run */
    StageMode stages;           /* parallel stages of the compiled plan */
    bool no_inplace;            /* the compiled plan writes no output over an input */
    bool no_reuse;              /* the compiled plan's buffers share nothing (PlanOptions.no_reuse) */
    bool per_op;                /* the compiled plan allocates per op, no arena (PlanOptions.per_op) */
    bool interp_passes;         /* the interpreter runs the graph after the compiler's passes too */
    void *arena;                /* non-NULL: memory of arena_bytes the compiled plan borrows for its arena
                                 * (refused if smaller), as plans that never run at once can share one */
    int64_t arena_bytes;
    int64_t max_memory;         /* > 0: refuse a step that needs more bytes (weights, plan, extra) */
    int64_t extra_bytes;        /* what the caller allocates for the step besides (data, batches) */
    const char *stop_after;     /* a stage name: compile only that far, no executor (dumps) */
    bool verify;                /* graph_verify after every pass (tests) */
    uint64_t seed;              /* initialises the weights when prepare() allocates them */
} CompileOptions;

typedef struct Step {
    Purpose purpose;
    int64_t batch;
    Graph *graph;               /* bound: the training step as autodiff made it, or the inference graph */
    Graph *run;                 /* what runs: graph after the compiler's passes (compiled mode), or graph */
    int64_t bytes;              /* the step's need: weights (and optimizer state), activations, extra_bytes */
    MemPlan plan;               /* the memory plan, until the executor takes it (then zeroed) */
    Executor *ex;               /* NULL when the options stop before it, or without weights */
} Step;

/* Compiles `model` (lowered, symbols unbound) for `purpose` at `batch` examples (its
 * batch symbol bound; a model whose inputs have a fixed batch must be given that;
 * batch 0 leaves it unbound, for dumps that stop before the memory plan).  With w: the
 * executor, over w's storage; when w holds nothing yet (w->data NULL), it is allocated
 * and initialised (o->seed) for the step's vars, after the memory check.  Without w
 * the step stops at its memory plan (s->plan).  0, or -1 after reporting to d (nothing
 * left allocated in s). */
int prepare(const Graph *model, Purpose purpose, int64_t batch, const CompileOptions *o, Weights *w, Step *s,
            DiagSink *d);
/* prepare() from the step's base graph on: g (made by pipeline_base, or changed by the
 * caller: tests), bound to `batch` already (or not, for dumps), is taken over, freed
 * with the step or on failure. */
int prepare_from(Graph *g, Purpose purpose, int64_t batch, const CompileOptions *o, Weights *w, Step *s, DiagSink *d);
void step_free(Step *s);
/* The step's memory plan: its executor's, or s->plan; NULL for the interpreter. */
const MemPlan *step_memplan(const Step *s);

/* The graph a purpose starts from, before binding (the training step's vars include the
 * optimizer state: weights for training are made from it).  NULL after reporting. */
Graph *pipeline_base(const Graph *model, Purpose purpose, int ranks, int64_t bucket_bytes, DiagSink *d);
/* The stages prepare() can stop after, in order, for `graphc dump --stage`: "train" or
 * "infer" (the base), each pass of graph_passes, "fused" (after them all); NULL past the
 * end. */
const char *pipeline_stage(int i);

#endif
