/* Executing a graph: the kernel dispatch shared by both executors, persistent state
 * (parameters and optimizer state), and the op-by-op interpreter.
 *
 * Ownership: a Weights owns the storage of every Var of the graph it was made for;
 * graphs derived from the same forward graph (train, infer) share var indices, so one
 * Weights serves them all.  An executor never owns a graph: the caller keeps it alive
 * for the executor's lifetime. */
#ifndef GRAPHC_EXEC_H
#define GRAPHC_EXEC_H
#include "graph/graph.h"
#include "kernels/kern.h"
#include "util/pool.h"

typedef struct Weights {
    int n;               /* vars */
    float **data;        /* data[v]: numel(vars[v].shape) floats */
    const char **names;  /* borrowed from the graph they were made for */
    Shape *shapes;
    VarRole *roles;
    int64_t step;        /* optimizer steps taken (Adam's t) */
    uint64_t *version;   /* version[v]: bumped by every write of var v after weights_init
                          * (weights_touch), so that a copy made from it (a compiled
                          * plan's packed weights) is made again, never used stale */
} Weights;

/* Allocates and initialises every var of g (Glorot etc. seeded by `seed`; the values
 * of var v depend only on (seed, v's name), not on other vars).  0 or -1 with d. */
int weights_init(Weights *w, const Graph *g, uint64_t seed, DiagSink *d);
void weights_free(Weights *w);
/* Copies values of vars present in both by name and shape (e.g. a trained forward
 * model into a fresh train graph's weights). */
void weights_copy_matching(Weights *dst, const Weights *src);
/* Var v's storage was written (v < 0: every var's): every writer outside a graph's own
 * updates calls it (checkpoint loads, imports, copies); executor_run calls it after a
 * graph that has an update op. */
void weights_touch(Weights *w, int v);

typedef struct Comm Comm;   /* exec/comm.h */

/* What a step needs besides tensors. */
typedef struct StepEnv {
    Weights *w;
    int64_t step;        /* global step number, 0-based */
    uint64_t seed;       /* the run's seed (dropout masks derive from it and step) */
    float lr, momentum, beta1, beta2, eps;   /* lr: this step's (graph/optim.c: optim_lr) */
    bool nesterov;
    float weight_decay, rho;  /* TrainSpec's (issue 14's optimizers) */
    bool centered;
    bool training;       /* dropout active */
    DiagSink *d;         /* run-time errors (a label out of range) */
    double *prof_ns;     /* if set: nanoseconds spent per node are added here */
    double *prof_idle;   /* with prof_ns, if set: per node, the thread-ns of the pool's
                          * threads idle while it ran (threads x wall - busy); a
                          * parallel stage's are its members' (compiled.c) */
    double *prof_cpu;    /* with prof_idle: per node, the pool's threads' CPU ns while it ran
                          * (pool_cpu_ns; a stage's shared out by its members' times) */
    bool check_numerics; /* stop at the first NaN or Inf a node produces, naming it */
    Comm *comm;          /* data-parallel ranks (allreduce ops); NULL: one process */
    int shard;           /* this rank's index in the global batch: the rows it holds are
                          * shard*B .. shard*B+B-1, and dropout masks are those rows' */
    KIsa isa;            /* the kernels' variant (0: the best the CPU runs); the same
                          * scratch for all, so it may change from step to step */
} StepEnv;

/* The environment of training step `step` (0-based) of a run with train block t: the
 * optimizer's hyperparameters and the step's learning rate (t->lr through the schedule).
 * The other fields are the caller's (weights, seed, diagnostics...). */
void step_env_train(StepEnv *e, const TrainSpec *t, int64_t step);

/* One kernel call with everything resolved. */
typedef struct KCall {
    const Graph *g;
    const Node *n;
    const void *const *in;   /* data of each input */
    void *out;               /* data of the output */
    float *scratch;          /* dispatch_scratch_bytes(g, n, pool_threads(pool)) bytes */
    Pool *pool;              /* the threads the kernel may split its work over */
    const StepEnv *env;
    const KGemmPack *pack;   /* a dense layer's weights packed once (compiled.c), or NULL */
} KCall;

/* Runs one node's kernel.  0, or -1 after reporting to c->env->d. */
int dispatch_run(const KCall *c);
/* dispatch_run in two halves: the kernel (timed when profiling), then the numerics
 * check when the step asks for it.  0, or -1 after reporting to c->env->d. */
int dispatch_kernel(const KCall *c);
int dispatch_check(const KCall *c);
size_t dispatch_scratch_bytes(const Graph *g, const Node *n, int threads);
/* Bytes of the scratch that node n's kernel, on a pool of `threads`, fills whole and
 * reads back (written once and read once, both counted): the convolution's output
 * inside a conv2d_maxpool that runs the two ops apart, a dense backward's relu signs.
 * Chunks a kernel keeps in cache and reuses (im2col, pooling bands, panels, a packed
 * filter) are not counted. */
size_t dispatch_scratch_traffic(const Graph *g, const Node *n, int threads);
bool dispatch_has_kernel(OpKind op);
/* Bytes of a node's output (f32 or i32, 4 bytes each); 0 for rank-0 update results. */
size_t node_bytes(const Node *n);
/* Refuses (false, with a message naming `what` and both sizes) a request for more bytes
 * than the machine's physical memory: Linux would promise them and then kill the
 * process while they are touched. */
bool exec_fits_memory(double bytes, const char *what, DiagSink *d);
/* The bytes node n's kernel must read and write at least, on a pool of `threads` (exec/
 * traffic.c), counted as STREAM counts its loops (the bytes named, not the cache lines
 * a store first reads): every buffer among its inputs read once (a parameter too, and
 * a buffer named twice once), its output written once, and as the op implies an
 * optimizer's parameter written back and its state read and written, and the scratch
 * traffic of dispatch_scratch_traffic.  An in-place output counts as read and written.
 * Sources and views move nothing.  With the step's flops (graph_flops) it places a step
 * against the machine's limits: its bytes at the measured bandwidth. */
double exec_node_bytes(const Graph *g, const Node *n, int threads);
/* The sum over g's nodes: a step's bytes (g as it runs: the compiled plan's graph after
 * the passes, where a fused op moves no intermediate). */
double exec_step_bytes(const Graph *g, int threads);
/* Monotonic clock in nanoseconds, for profiles and benchmarks. */
double exec_now_ns(void);

/* ---- the interpreter: the reference executor and the "eager" mode ---------------------
 * Walks the graph one node at a time: checks the node's input shapes at run time with
 * the op's shape rule, allocates its output, dispatches its kernel through the op
 * table, and frees every buffer after its last use.  Reshape is a view (no copy),
 * as in eager frameworks. */
typedef struct InterpStats {
    size_t peak_bytes;    /* most bytes of activations live at once */
    size_t live_bytes;
    int64_t allocs;       /* allocations of outputs and scratch, over every run */
    int64_t alloc_bytes;  /* and their bytes */
} InterpStats;

/* feeds[i]: data of input i (g->inputs order).  outs[i] receives output i (numel of its
 * shape, copied).  Kernels split their work over pool.  0 or -1 with the error in
 * env->d. */
int interp_run(const Graph *g, const void *const *feeds, float *const *outs, const StepEnv *env, Pool *pool,
               InterpStats *st);

#endif
