/* The compiled executor: a bound graph turned, once, into a flat list of kernel calls
 * with every pointer and size resolved, over one arena planned from the buffers'
 * lifetimes.  A step is a loop over the calls: no allocation, no shape check, no
 * lookup.  See docs/architecture.md for the memory plan. */
#ifndef GRAPHC_COMPILED_H
#define GRAPHC_COMPILED_H
#include "exec/exec.h"

typedef struct CompiledPlan CompiledPlan;

/* The memory plan of a bound graph, for reports and tests. */
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
} MemPlan;

int memplan_build(const Graph *g, MemPlan *mp, DiagSink *d);
void memplan_free(MemPlan *mp);

void memplan_dump_text(const Graph *g, const MemPlan *mp, FILE *out);
void memplan_dump_svg(const Graph *g, const MemPlan *mp, FILE *out);

CompiledPlan *compiled_plan(const Graph *g, Weights *w, DiagSink *d);
int compiled_run(CompiledPlan *p, const void *const *feeds, float *const *outs, const StepEnv *env);
size_t compiled_arena_bytes(const CompiledPlan *p);
const MemPlan *compiled_memplan(const CompiledPlan *p);
void compiled_free(CompiledPlan *p);
/* The graph the plan runs (after fusion); node ids of profiles refer to it. */
const Graph *compiled_graph(const CompiledPlan *p);

#endif
