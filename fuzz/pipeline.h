/* The whole of graphc on one .net text, for the fuzz targets and the model campaign:
 * parse, lower and infer; verify; every dump; the training (or inference) graph,
 * binding, the optimizer's passes and the memory plan, each verified; and for a small
 * training model, one step in the interpreter and one in the compiled plan, which must
 * agree bit for bit, and its gradients, which must agree with finite differences.
 *
 * The contract it checks: a text is either refused with at least one error and no
 * graph, or every stage after it succeeds or refuses with an error (never silently),
 * and what runs, runs the same on both executors, with the right gradients.  A
 * violation calls abort() after printing what it was to stderr (libFuzzer and the
 * campaign report it). */
#ifndef GRAPHC_FUZZ_PIPELINE_H
#define GRAPHC_FUZZ_PIPELINE_H
#include <stdbool.h>
#include <stddef.h>

/* How far a text went: refused, compiled (every stage checked), or also ran a step on
 * both executors (with `run`, the small models do). */
typedef enum FuzzOutcome { FUZZ_REFUSED, FUZZ_COMPILED, FUZZ_RAN, FUZZ_OUTCOME_COUNT } FuzzOutcome;
FuzzOutcome fuzz_pipeline(const char *text, size_t len, bool run);

#endif
