/* The compiler's pass list; rebuilding passes: inference graph (dropout removed, batch
 * norm in its inference form) and dead code elimination. */
#include <string.h>
#include "graph/passes.h"

const GraphPass graph_passes[] = {
    { "cse", pass_cse, "nodes computing the same value merged", false },
    { "folded", pass_fold, "scalar constants folded, dead code removed", false },
    /* batch norm (graph/bnorm.c), before bias_act, which then fuses the folded layer's bias and activation */
    { "bn_fold", pass_bn_fold, "batch norm folded into the conv2d or dense before it (inference)", true },
    { "bn_add", pass_bn_add, "a residual added to a batch norm's output inside it (training)", false },
    { "bn_act", pass_bn_act, "batch norm + activation as one op", false },
    { "bn_relu_grad", pass_bn_relu_grad, "a batch norm's relu taken into its backward (training)", false },
    { "bias_act", pass_fuse_bias_act, "conv2d/matmul + bias + activation as one op", false },
    { "maxpool_grad_relu", pass_fuse_maxpool_grad_relu, "a relu's gradient inside the max pool's gradient", false },
    { "masked_softmax", pass_fuse_masked_softmax, "causal attention's mask and softmax (and their gradients) as one op", false },
    { "attention", pass_fuse_attention, "attention's scores, softmax and weighted sum per head (and their gradients) as one op", false },
    { "ln_grad_add", pass_fuse_ln_grad_add, "a residual's gradient added inside the layer norm's gradient", false },
    { "update_all", pass_fuse_update_all, "the updates at the end of the step as one op", false },
    { "conv_maxpool", pass_fuse_conv_maxpool, "a convolution and its max pool as one op (no training step)", false },
    { "elementwise", pass_fuse_elementwise, "chains of elementwise ops as one loop", false },
    { "pool_indices", pass_pool_indices, "max pooling through the index of each maximum", false },
    { "conv_pool_argmax", pass_conv_pool_argmax, "a convolution with its max pool's argmax and values (training)", false },
    { "pooled_grads", pass_pooled_grads, "a first layer's filter and bias gradients from its max pool's index (training)", false },
    { "early_updates", pass_early_updates, "a large gradient's update right after its last input", false },
    { "gemm_updates", pass_gemm_updates, "a weight gradient's GEMM inside its update", true },
    { "dense_backward", pass_dense_backward, "a dense layer's backward with its update as one op", true },
};
const int graph_npasses = (int)(sizeof graph_passes / sizeof graph_passes[0]);

int graph_pass_index(const char *name)
{
    for (int i = 0; i < graph_npasses; i++)
        if (strcmp(graph_passes[i].name, name) == 0) return i;
    return -1;
}

Graph *graph_run_passes(const Graph *g, uint64_t off, const char *stop_after, bool verify, bool *stopped, DiagSink *d)
{
    *stopped = false;
    Graph *cur = graph_clone(g);
    if (!cur) {
        diag_plain(d, "out of memory");
        return NULL;
    }
    for (int i = 0; i < graph_npasses; i++) {
        if (off & ((uint64_t)1 << i)) continue;
        Graph *next = graph_passes[i].run(cur, d);
        graph_free(cur);
        if (!next) return NULL;
        cur = next;
        cur->stage = graph_passes[i].name;
        if (verify && graph_verify(cur, d) != 0) {
            graph_free(cur);
            return NULL;
        }
        if (stop_after && strcmp(stop_after, graph_passes[i].name) == 0) {
            *stopped = true;
            return cur;
        }
    }
    cur->stage = "fused";
    *stopped = stop_after && strcmp(stop_after, "fused") == 0;
    return cur;
}

int32_t graph_add_inferred(Graph *g, OpKind op, const int32_t *in, int nin, Loc loc,
                           const NodeAttr *attr, const Shape *tshape, DiagSink *d)
{
    int32_t id = graph_add(g, op, in, nin, loc);
    if (id < 0) {
        if (d) diag_plain(d, "out of memory");
        return -1;
    }
    Node *n = &g->nodes[id];
    if (attr) n->a = *attr;
    if (tshape) n->tshape = *tshape;
    if (!graph_infer_node(g, id, d)) return -1;
    return id;
}

/* Copies the nodes of `g` marked in `keep` into a fresh graph, in order, replacing
 * each input i by alias[i] first (alias[i] == i for most nodes).  Outputs and the
 * train spec are remapped; outputs whose node is dropped are dropped. */
Graph *graph_rebuild(const Graph *g, const bool *keep, const int32_t *alias, const char *stage, DiagSink *d)
{
    Graph *c = graph_clone(g);
    int32_t *map = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *map);
    if (!c || !map) {
        graph_free(c);
        gc_free(map);
        diag_plain(d, "out of memory");
        return NULL;
    }
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        map[i] = -1;
        if (!keep[i]) continue;
        Node *dst = &c->nodes[n];
        *dst = c->nodes[i];
        for (int k = 0; k < dst->nin; k++) dst->in[k] = map[alias[dst->in[k]]];
        dst->fwd = dst->fwd >= 0 ? map[dst->fwd] : -1;
        map[i] = n++;
    }
    c->nnodes = n;
    int no = 0;
    for (int i = 0; i < c->noutputs; i++) {
        int32_t m = map[alias[c->outputs[i].node]];
        if (m >= 0) { c->outputs[no] = c->outputs[i]; c->outputs[no++].node = m; }
    }
    c->noutputs = no;
    int ni = 0;
    for (int i = 0; i < c->ninputs; i++)
        if (map[c->inputs[i]] >= 0) c->inputs[ni++] = map[c->inputs[i]];
    c->ninputs = ni;
    c->train.minimize = c->train.minimize >= 0 ? map[alias[c->train.minimize]] : -1;
    c->logits = c->logits >= 0 ? map[alias[c->logits]] : -1;
    c->label_input = c->label_input >= 0 ? map[c->label_input] : -1;
    c->stage = stage;
    gc_free(map);
    return c;
}

int32_t *pass_uses(const Graph *g)
{
    int32_t *uses = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *uses);
    if (!uses) return NULL;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) uses[g->nodes[i].in[k]]++;
    for (int i = 0; i < g->noutputs; i++) uses[g->outputs[i].node] += 2;
    if (g->train.minimize >= 0) uses[g->train.minimize] += 2;
    return uses;
}

bool rewrite_begin(Rewrite *r, const Graph *g, DiagSink *d)
{
    size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
    r->c = graph_clone(g);
    r->uses = pass_uses(g);
    r->keep = gc_calloc(n, sizeof *r->keep);
    r->alias = gc_calloc(n, sizeof *r->alias);
    if (!r->c || !r->uses || !r->keep || !r->alias) {
        diag_plain(d, "out of memory");
        rewrite_end(r, false, NULL, d);
        return false;
    }
    for (int i = 0; i < g->nnodes; i++) {
        r->keep[i] = true;
        r->alias[i] = i;
    }
    return true;
}

Graph *rewrite_end(Rewrite *r, bool ok, const char *stage, DiagSink *d)
{
    Graph *out = ok ? graph_rebuild(r->c, r->keep, r->alias, stage, d) : NULL;
    graph_free(r->c);
    gc_free(r->uses);
    gc_free(r->keep);
    gc_free(r->alias);
    return out;
}

/* Marks everything that `roots` need, walking inputs backwards. */
static void mark_needed(const Graph *g, bool *keep)
{
    for (int i = g->nnodes - 1; i >= 0; i--)
        if (keep[i])
            for (int k = 0; k < g->nodes[i].nin; k++) keep[g->nodes[i].in[k]] = true;
}

Graph *pass_dce(const Graph *g, DiagSink *d)
{
    bool *keep = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *keep);
    int32_t *alias = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *alias);
    if (!keep || !alias) { gc_free(keep); gc_free(alias); diag_plain(d, "out of memory"); return NULL; }
    for (int i = 0; i < g->nnodes; i++) {
        alias[i] = i;
        if (op_info[g->nodes[i].op].traits & OPT_UPDATE) keep[i] = true;
        /* inputs stay: they are the model's interface even when unused */
        if (g->nodes[i].op == OP_INPUT) keep[i] = true;
    }
    for (int i = 0; i < g->noutputs; i++) keep[g->outputs[i].node] = true;
    if (g->train.minimize >= 0) keep[g->train.minimize] = true;
    mark_needed(g, keep);
    Graph *c = graph_rebuild(g, keep, alias, g->stage, d);
    gc_free(keep);
    gc_free(alias);
    return c;
}

Graph *pass_inference(const Graph *g, bool with_metrics, DiagSink *d)
{
    Graph *tmp = graph_clone(g);
    if (!tmp) {
        diag_plain(d, "out of memory");
        return NULL;
    }
    /* Dropout is the identity at inference: whatever read a dropout reads its input.
     * Nodes are in order, so a dropout's own input is already rewired. */
    for (int i = 0; i < tmp->nnodes; i++) {
        Node *n = &tmp->nodes[i];
        for (int k = 0; k < n->nin; k++)
            if (tmp->nodes[n->in[k]].op == OP_DROPOUT) n->in[k] = tmp->nodes[n->in[k]].in[0];
    }
    for (int i = 0; i < tmp->noutputs; i++)
        if (tmp->nodes[tmp->outputs[i].node].op == OP_DROPOUT) tmp->outputs[i].node = tmp->nodes[tmp->outputs[i].node].in[0];
    if (tmp->logits >= 0 && tmp->nodes[tmp->logits].op == OP_DROPOUT) tmp->logits = tmp->nodes[tmp->logits].in[0];
    bn_inference_form(tmp);
    if (with_metrics) {
        if (tmp->train.minimize >= 0 && graph_add_output(tmp, "loss", tmp->train.minimize) < 0) goto oom;
        if (tmp->logits >= 0 && tmp->label_input >= 0) {
            int32_t in[2] = { tmp->logits, tmp->label_input };
            int32_t acc = graph_add_inferred(tmp, OP_ACCURACY, in, 2, tmp->nodes[tmp->logits].loc, NULL, NULL, d);
            if (acc < 0 || graph_add_output(tmp, "accuracy", acc) < 0) goto fail;
        }
    } else {
        tmp->train.minimize = -1;
    }
    /* keep what the outputs need, and the inputs (the model's interface) */
    size_t nn = (size_t)(tmp->nnodes ? tmp->nnodes : 1);
    bool *keep = gc_calloc(nn, sizeof *keep);
    int32_t *alias = gc_calloc(nn, sizeof *alias);
    if (!keep || !alias) {
        gc_free(keep);
        gc_free(alias);
        goto oom;
    }
    for (int i = 0; i < tmp->nnodes; i++) alias[i] = i;
    for (int i = 0; i < tmp->noutputs; i++) keep[tmp->outputs[i].node] = true;
    for (int i = 0; i < tmp->ninputs; i++) keep[tmp->inputs[i]] = true;
    mark_needed(tmp, keep);
    Graph *c = graph_rebuild(tmp, keep, alias, "infer", d);
    graph_free(tmp);
    gc_free(keep);
    gc_free(alias);
    return c;
oom:
    diag_plain(d, "out of memory");
fail:
    graph_free(tmp);
    return NULL;
}

Graph *graph_reorder(const Graph *g, const int32_t *order, int n, const char *stage, DiagSink *d)
{
    Graph *c = graph_clone(g);
    Node *old = gc_malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *old);
    int32_t *map = gc_malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *map);
    if (!c || !old || !map) {
        graph_free(c);
        gc_free(old);
        gc_free(map);
        diag_plain(d, "out of memory");
        return NULL;
    }
    memcpy(old, c->nodes, (size_t)g->nnodes * sizeof *old);
    for (int i = 0; i < g->nnodes; i++) map[i] = -1;
    bool ok = true;
    for (int j = 0; j < n && ok; j++) {
        int32_t i = order[j];
        ok = i >= 0 && i < g->nnodes && map[i] < 0;
        Node *dst = &c->nodes[j];
        *dst = old[i < 0 || i >= g->nnodes ? 0 : i];
        for (int k = 0; ok && k < dst->nin; k++) {
            ok = map[dst->in[k]] >= 0;   /* every input placed before its reader */
            dst->in[k] = map[dst->in[k]];
        }
        dst->fwd = dst->fwd >= 0 ? map[dst->fwd] : -1;
        map[i] = j;
    }
    for (int i = 0; ok && i < c->noutputs; i++) ok = (c->outputs[i].node = map[c->outputs[i].node]) >= 0;
    for (int i = 0; ok && i < c->ninputs; i++) ok = (c->inputs[i] = map[c->inputs[i]]) >= 0;
    if (!ok) {
        diag_plain(d, "internal error: %s: the new order of the nodes is not a topological order of the graph", stage);
        graph_free(c);
        gc_free(old);
        gc_free(map);
        return NULL;
    }
    c->nnodes = n;
    c->train.minimize = c->train.minimize >= 0 ? map[c->train.minimize] : -1;
    c->logits = c->logits >= 0 ? map[c->logits] : -1;
    c->label_input = c->label_input >= 0 ? map[c->label_input] : -1;
    c->stage = stage;
    gc_free(old);
    gc_free(map);
    return c;
}
