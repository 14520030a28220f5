/* Both executors behind one interface: plan (once per bound graph), then run (once per
 * step).  The interpreter's plan is empty: all its work happens per step, as in an
 * eager framework.  The compiled executor resolves everything at plan time. */
#ifndef GRAPHC_EXECUTOR_H
#define GRAPHC_EXECUTOR_H
#include "exec/exec.h"

typedef enum ExecMode { MODE_INTERP, MODE_COMPILED, EXEC_MODE_COUNT } ExecMode;
const char *exec_mode_name(ExecMode m);

typedef struct Executor Executor;

/* `g` must be bound (every shape concrete) and outlive the executor. */
Executor *executor_plan(ExecMode mode, const Graph *g, Weights *w, DiagSink *d);
/* feeds[i]: input i's data; outs[i]: where output i is copied (may be NULL). */
int executor_run(Executor *e, const void *const *feeds, float *const *outs, const StepEnv *env);
/* Peak bytes of activations: measured (interpreter) or planned (compiled). */
size_t executor_peak_bytes(const Executor *e);
void executor_free(Executor *e);
/* The graph the executor runs: the compiled plan's is the fused graph. */
const Graph *executor_graph(const Executor *e);
/* The compiled plan's memory plan (stages included); NULL for the interpreter. */
const struct MemPlan *executor_memplan(const Executor *e);

#endif
