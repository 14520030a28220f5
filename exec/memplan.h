/* The memory plan of a bound graph: every buffer's lifetime and its offset in one
 * arena, and the parallel stages (stages.c) that group independent ops.  The compiled
 * executor (compiled.c) runs on it; reports and tests read it. */
#ifndef GRAPHC_MEMPLAN_H
#define GRAPHC_MEMPLAN_H
#include "exec/exec.h"

/* Every buffer's offset and size in the arena is a multiple of this (cache lines; the
 * vector kernels' aligned loads). */
#define MEMPLAN_ALIGN 64
static inline int64_t memplan_align(int64_t v) { return (v + MEMPLAN_ALIGN - 1) & ~(int64_t)(MEMPLAN_ALIGN - 1); }

typedef struct MemPlan {
    int n;                /* nodes */
    int nbuf;             /* buffers: 2n, node i's output at i and its scratch at n + i */
    int64_t *offset;      /* arena offset of each buffer, -1 if not in the arena */
    int64_t *size;        /* bytes (aligned; 0 for a view, a source, or no scratch) */
    int32_t *first, *last;/* lifetime: defining node index .. last reader (inclusive) */
    int64_t *scratch_offset; /* = offset + n: where node i's scratch is */
    int64_t arena;        /* planned arena bytes, scratch included */
    int64_t naive;        /* sum of every buffer */
    int64_t lower_bound;  /* most bytes live at any one time */
    int64_t scratch;      /* the largest scratch of one node (for reports) */
    int inplace;          /* outputs written over their first input */
    int32_t *stage;       /* parallel stage of each node (see stages_build) */
    int32_t *bin;         /* within a stage of several ops: the thread that runs the node */
    int nstages;          /* stages in all */
    int parallel;         /* stages of more than one op */
    int threads;          /* the pool's threads it was made for: the scratch is sized for them */
    int32_t *root;        /* the buffer node i's value is in: i, the input an in-place op wrote over, what a view
                           * reads (a source: no buffer); n + i: node i's scratch */
    bool per_op;          /* no arena: the executor allocates each buffer for its lifetime (PlanOptions.per_op);
                           * offsets are -1 and `arena` is the lower bound, the most bytes it holds at once */
    void *external;       /* set by the caller before the plan runs: memory of at least `arena` bytes the
                           * plan borrows instead of allocating its own (plans that never run at once, such
                           * as graphc bench --ablate's, share one); NULL: its own */
} MemPlan;

/* Whether the plan runs a kernel for a node (sources and reshape views run none). */
static inline bool plan_runs(const Node *n) { return n->op != OP_INPUT && n->op != OP_PARAM && n->op != OP_RESHAPE; }

/* How a plan groups ops: STAGES_COST (the default) as the cost model says; STAGES_OFF
 * every op alone (benchmarks: what the stages buy); STAGES_ALL every group that
 * dependencies and memory allow, whatever the cost (tests). */
typedef enum StageMode { STAGES_COST, STAGES_OFF, STAGES_ALL, STAGE_MODE_COUNT } StageMode;
/* The most ops a parallel stage holds (exec/stages.c). */
#define STAGE_MAX 32

/* What a plan may do; zeroed: everything, on one thread. */
typedef struct PlanOptions {
    int threads;          /* of the pool the plan will run on (< 1: one) */
    StageMode stages;
    bool no_inplace;      /* every output a buffer of its own (what in-place reuse buys) */
    /* The two below take apart what one planned arena buys (graphc bench --ablate): */
    bool no_reuse;        /* every buffer alive for the whole step: an arena of the naive sum, nothing shared */
    bool per_op;          /* no arena: each buffer allocated before the op that writes it and freed after its
                           * last reader, as the interpreter does (no_reuse is then moot) */
} PlanOptions;

/* Plans the arena: stages, lifetimes, offsets.  If the stages leave the arena above
 * the lower bound and the plan without them is smaller, that plan is kept. */
int memplan_build(const Graph *g, const PlanOptions *o, MemPlan *mp, DiagSink *d);
void memplan_free(MemPlan *mp);

/* Parallel stages (exec/stages.c): groups consecutive calls that do not depend on one
 * another into stages whose ops run at once, each on one thread, where a cost model
 * says that is faster and the bytes alive at once do not grow past the peak of the
 * plan without stages (mp: buffers sized, lifetimes in node order).  inplace[i]: node
 * i writes over an input (it runs alone).  Writes stage[i] (non-decreasing; sources and
 * views join the current stage) and bin[i] (which of `threads` threads runs it; 0 in
 * a stage of one op); returns the number of stages, -1 out of memory. */
int stages_build(const Graph *g, const MemPlan *mp, const bool *inplace, int threads, StageMode m, int32_t *stage,
                 int32_t *bin);
/* How many calls stage s of a plan runs. */
int stage_calls(const Graph *g, const MemPlan *mp, int s);

void memplan_dump_text(const Graph *g, const MemPlan *mp, FILE *out);
void memplan_dump_svg(const Graph *g, const MemPlan *mp, FILE *out);
/* The planned graph's dot and json forms: the graph's (graph_dump_dot, graph_dump_json)
 * with each node's buffer, scratch and stage, and the plan's totals. */
void memplan_dump_dot(const Graph *g, const MemPlan *mp, FILE *out);
void memplan_dump_json(const Graph *g, const MemPlan *mp, FILE *out);

#endif
