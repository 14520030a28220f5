/* The compiled executor: a bound graph turned, once, into a flat list of kernel calls
 * with every pointer and size resolved, over one arena planned from the buffers'
 * lifetimes.  A step is a loop over the calls: no allocation, no shape check, no
 * lookup.  See docs/architecture.md for the memory plan. */
#ifndef GRAPHC_COMPILED_H
#define GRAPHC_COMPILED_H
#include "exec/memplan.h"

typedef struct CompiledPlan CompiledPlan;

/* The plan of g (bound, after the compiler's passes; it must outlive the plan) over
 * memory plan mp, which the plan takes over (*mp is zeroed, even on failure), made for
 * pool's threads; w's storage is bound into the calls. */
CompiledPlan *compiled_plan(const Graph *g, Weights *w, Pool *pool, MemPlan *mp, DiagSink *d);
int compiled_run(CompiledPlan *p, const void *const *feeds, float *const *outs, const StepEnv *env);
size_t compiled_arena_bytes(const CompiledPlan *p);
/* With per-op allocation (MemPlan.per_op): the allocations made over every run so far
 * and their bytes; 0 with an arena. */
void compiled_alloc_stats(const CompiledPlan *p, int64_t *allocs, int64_t *bytes);
const MemPlan *compiled_memplan(const CompiledPlan *p);
void compiled_free(CompiledPlan *p);
/* The graph the plan runs; node ids of profiles refer to it. */
const Graph *compiled_graph(const CompiledPlan *p);

#endif
