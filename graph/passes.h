/* Passes over the graph: each takes a graph and returns a new one (the input is left
 * as it was), with a name, so that every stage can be dumped and verified. */
#ifndef GRAPHC_PASSES_H
#define GRAPHC_PASSES_H
#include "graph/graph.h"

/* Reverse-mode differentiation: the training step as one static graph of forward,
 * backward and optimizer-update ops ("train" stage).  Outputs: "loss", and "accuracy"
 * when the loss is a cross-entropy over an input of labels.  NULL after reporting. */
Graph *pass_autodiff(const Graph *g, DiagSink *d);
/* Whether an op has a gradient rule (every op a .net file can write must: tests check). */
bool autodiff_has_rule(OpKind op);

/* The inference graph ("infer" stage): dropout removed, only what the outputs need.
 * With with_metrics, also outputs "loss" and "accuracy" (for evaluation). */
Graph *pass_inference(const Graph *g, bool with_metrics, DiagSink *d);

/* Dead code elimination: keeps what the outputs, the loss and the updates need. */
Graph *pass_dce(const Graph *g, DiagSink *d);

/* Common subexpression elimination ("cse" stage). */
Graph *pass_cse(const Graph *g, DiagSink *d);
/* Constant folding of scalar elementwise ops, then dead code elimination ("folded"). */
Graph *pass_fold(const Graph *g, DiagSink *d);
/* The compiler's pipeline before planning: cse, fold (with dce), fuse.  NULL after
 * reporting.  `upto` stops after the named stage ("cse", "folded", "fused"). */
Graph *pass_optimize(const Graph *g, const char *upto, DiagSink *d);

/* Fusion, decided at compile time ("fused" stage): a GEMM (conv2d, matmul) followed by
 * a bias add and an activation becomes one op that applies them while the GEMM's
 * output is in cache; a relu gradient whose incoming gradient is made by a maxpool
 * gradient is folded into it.  Only where each intermediate has one consumer and is
 * not an output.  The arithmetic is unchanged (same operations, same order), except
 * for the gradient GEMMs fused into their updates (below). */
Graph *pass_fuse(const Graph *g, DiagSink *d);
/* Also, last: a large weight gradient made by a matmul and read only by its SGD,
 * (not Nesterov) momentum or Adam update is made inside the update (matmul_update):
 * one GEMM that adds into the parameter or the velocity, or for Adam a panel of rows at
 * a time into scratch, each panel's rows of w, m and v updated from it; so the gradient
 * is never stored.  That rounds differently from the two ops apart: the one fusion the
 * interpreter does not match bit for bit (within 1e-5 of the loss curve;
 * tests/test_train.c).  After it, a dense layer's backward whose input is a relu output
 * (its input gradient, relu's mask, and its weight's SGD or momentum update from such a
 * GEMM or a small gradient's in update_all) becomes one matmul_grad_update that writes
 * the masked gradient over the layer's input; with SGD it rounds differently too.
 * pass_fuse_set_gemm_update(false) turns both off (on by default), for the tests that
 * compare the plan with the interpreter bit for bit, and for benchmarks. */
void pass_fuse_set_gemm_update(bool on);

/* Gradients of at least this many bytes are not kept to the end of the step: their
 * update runs as soon as they are complete (graph/fuse.c, early_updates). */
#define UPDATE_EARLY_BYTES ((int64_t)64 << 10)

/* Copies the nodes of `g` marked in `keep` into a fresh graph, in order, replacing
 * each input i by alias[i] first.  Outputs, inputs and the train spec are remapped. */
Graph *graph_rebuild(const Graph *g, const bool *keep, const int32_t *alias, const char *stage, DiagSink *d);

/* A copy of g with its nodes in `order` (n distinct node ids, each after its inputs);
 * nodes not in `order` are dropped.  NULL after reporting if the order is not
 * topological or leaves out an input or output. */
Graph *graph_reorder(const Graph *g, const int32_t *order, int n, const char *stage, DiagSink *d);

/* Data-parallel training ("train" stage, when the job has several ranks): the gradient
 * of every update is summed over the ranks and divided by their number before the
 * update reads it.  Gradients are packed, in the order the backward pass makes them,
 * into buckets of at least bucket_bytes (the last may be smaller); a bucket's
 * allreduce op comes right after its last gradient, so its communication overlaps the
 * rest of the backward pass, and its wait comes just before the updates.  See
 * docs/distributed.md. */
Graph *pass_allreduce(const Graph *g, int64_t bucket_bytes, DiagSink *d);
#define ALLREDUCE_DEFAULT_BUCKET ((int64_t)4 << 20)

/* Adds a node to g and infers its shape; -1 after reporting to d.  `attr` and
 * `tshape` may be NULL. */
int32_t graph_add_inferred(Graph *g, OpKind op, const int32_t *in, int nin, Loc loc,
                           const NodeAttr *attr, const Shape *tshape, DiagSink *d);

#endif
