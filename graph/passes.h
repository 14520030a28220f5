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

/* The inference graph ("infer" stage): dropout removed, batch norm in its inference form
 * (bn_inference_form), only what the outputs need.
 * With with_metrics, also outputs "loss" and "accuracy" (for evaluation). */
Graph *pass_inference(const Graph *g, bool with_metrics, DiagSink *d);

/* Batch norm (graph/bnorm.c): each batch_norm of g (the training form) becomes
 * batch_norm_infer, which normalizes with the running statistics (pass_inference);
 * folded into the convolution or dense layer before it where there is no training step
 * ("bn_fold"); a residual added to it taken inside it ("bn_add"); an activation after
 * it applied by it ("bn_act"); that relu's gradient taken into its backward
 * ("bn_relu_grad"). */
void bn_inference_form(Graph *g);
Graph *pass_bn_fold(const Graph *g, DiagSink *d);
Graph *pass_bn_add(const Graph *g, DiagSink *d);
Graph *pass_bn_act(const Graph *g, DiagSink *d);
Graph *pass_bn_relu_grad(const Graph *g, DiagSink *d);

/* Dead code elimination: keeps what the outputs, the loss and the updates need. */
Graph *pass_dce(const Graph *g, DiagSink *d);

/* Common subexpression elimination ("cse" stage). */
Graph *pass_cse(const Graph *g, DiagSink *d);
/* Constant folding of scalar elementwise ops, then dead code elimination ("folded"). */
Graph *pass_fold(const Graph *g, DiagSink *d);

/* Fusion, decided at compile time (graph/fuse.c, which describes each pattern): only
 * where each intermediate has one consumer and is not an output.  The arithmetic is
 * unchanged (same operations, same order), except for the gradient GEMMs fused into
 * their updates (gemm_updates, and dense_backward with SGD), which round otherwise
 * than the ops apart. */
Graph *pass_fuse_bias_act(const Graph *g, DiagSink *d);
Graph *pass_fuse_maxpool_grad_relu(const Graph *g, DiagSink *d);
Graph *pass_fuse_masked_softmax(const Graph *g, DiagSink *d);
/* multi_head_attention's chain per head, and its backward, as one op each (graph/attention.c) */
Graph *pass_fuse_attention(const Graph *g, DiagSink *d);
/* add(r, layer_norm_grad(...)) as one layer_norm_grad_add (graph/fuse.c) */
Graph *pass_fuse_ln_grad_add(const Graph *g, DiagSink *d);
Graph *pass_fuse_update_all(const Graph *g, DiagSink *d);
Graph *pass_fuse_conv_maxpool(const Graph *g, DiagSink *d);
Graph *pass_fuse_elementwise(const Graph *g, DiagSink *d);
Graph *pass_pool_indices(const Graph *g, DiagSink *d);
Graph *pass_conv_pool_argmax(const Graph *g, DiagSink *d);
Graph *pass_pooled_grads(const Graph *g, DiagSink *d);
Graph *pass_early_updates(const Graph *g, DiagSink *d);
Graph *pass_gemm_updates(const Graph *g, DiagSink *d);
Graph *pass_dense_backward(const Graph *g, DiagSink *d);

/* The compiler's passes after autodiff (or the inference graph), in the order the
 * compiled plan runs them.  Each is a stage of its own (graphc dump --stage NAME, the
 * graph's stage label), can be switched off by name, and is verified after it runs in
 * the tests; exec/pipeline.c runs the list. */
typedef struct GraphPass {
    const char *name;
    Graph *(*run)(const Graph *g, DiagSink *d);
    const char *what;      /* one line for --help and the docs */
    bool rounds;           /* may round otherwise than the ops apart (the interpreter) */
} GraphPass;
extern const GraphPass graph_passes[];
extern const int graph_npasses;
/* The index of the pass named `name` in graph_passes, or -1. */
int graph_pass_index(const char *name);
/* Runs graph_passes over g in order, but those whose bit is set in `off` (bit i for
 * graph_passes[i]), verifying the graph after each when `verify`; stops after the one
 * named stop_after (NULL: none; "fused": after them all), and then sets *stopped.  The
 * result's stage is the last pass's name, or "fused" when the list ran to its end.  A
 * new graph; NULL after reporting. */
Graph *graph_run_passes(const Graph *g, uint64_t off, const char *stop_after, bool verify, bool *stopped, DiagSink *d);

/* Gradients of at least this many bytes are not kept to the end of the step: their
 * update runs as soon as they are complete (graph/fuse.c, early_updates). */
#define UPDATE_EARLY_BYTES ((int64_t)64 << 10)

/* Copies the nodes of `g` marked in `keep` into a fresh graph, in order, replacing
 * each input i by alias[i] first.  Outputs, inputs and the train spec are remapped. */
Graph *graph_rebuild(const Graph *g, const bool *keep, const int32_t *alias, const char *stage, DiagSink *d);

/* Readers of each node: inputs of other nodes; an output or the loss counts twice, so
 * that a pattern pass never fuses it away.  NULL when out of memory. */
int32_t *pass_uses(const Graph *g);
/* What a pattern pass (graph/fuse.c, graph/bnorm.c) works on: a clone of the graph to
 * rewrite in place, each node's readers (pass_uses), and graph_rebuild's keep and
 * alias (every node kept, as itself, until the pass drops one). */
typedef struct Rewrite {
    Graph *c;
    int32_t *uses;
    bool *keep;
    int32_t *alias;
} Rewrite;
/* false after reporting (everything freed) */
bool rewrite_begin(Rewrite *r, const Graph *g, DiagSink *d);
/* The rewritten graph (its kept nodes, renumbered) if ok, else NULL; frees the rest. */
Graph *rewrite_end(Rewrite *r, bool ok, const char *stage, DiagSink *d);

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
