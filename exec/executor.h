/* Both executors behind one interface: made once per bound graph, then run once per
 * step.  The interpreter's making is empty: all its work happens per step, as in an
 * eager framework.  The compiled executor resolves everything when it is made.  Both
 * run their kernels on the pool they are given.  exec/pipeline.h makes them. */
#ifndef GRAPHC_EXECUTOR_H
#define GRAPHC_EXECUTOR_H
#include "exec/memplan.h"

typedef enum ExecMode { MODE_INTERP, MODE_COMPILED, EXEC_MODE_COUNT } ExecMode;
const char *exec_mode_name(ExecMode m);

typedef struct Executor Executor;

/* `g` must be bound (every shape concrete) and outlive the executor, as must w and
 * pool.  The compiled executor runs memory plan mp (made for pool's threads), which it
 * takes over; the interpreter ignores it (mp may be NULL). */
Executor *executor_new(ExecMode mode, const Graph *g, Weights *w, Pool *pool, MemPlan *mp, DiagSink *d);
/* feeds[i]: input i's data; outs[i]: where output i is copied (may be NULL). */
int executor_run(Executor *e, const void *const *feeds, float *const *outs, const StepEnv *env);
/* Peak bytes of activations: measured (interpreter) or planned (compiled). */
size_t executor_peak_bytes(const Executor *e);
/* Allocations of activations and scratch made by the runs so far, and their bytes: the
 * interpreter's, or a compiled plan's with per-op allocation (0 with an arena). */
void executor_alloc_stats(const Executor *e, int64_t *allocs, int64_t *bytes);
void executor_free(Executor *e);
/* The graph the executor runs. */
const Graph *executor_graph(const Executor *e);
/* The compiled plan's memory plan (stages included); NULL for the interpreter. */
const MemPlan *executor_memplan(const Executor *e);

#endif
