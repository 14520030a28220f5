/* The fusion pass.  See passes.h.
 *
 * Patterns, matched on the node list in order:
 *   conv2d(x, w) -> add(., b) [-> act]      =>  conv2d_bias_act(x, w, b)
 *   matmul(a, w) -> add(., b) [-> act]      =>  matmul_bias_act(a, w, b)
 *   maxpool_grad(x, y, dy) -> unary_grad[relu](x, .)  =>  maxpool_grad_relu(x, y, dy)
 *   every sgd/momentum/adam update of the step     =>  update_all(p1, g1, p2, g2, ...)
 * where b is a vector over the last axis and act is relu, sigmoid or tanh.  The fused
 * node takes the place of the last node of its pattern, so everything that read that
 * node reads the fused one; the other nodes of the pattern are dropped. */
#include <string.h>
#include "exec/kern.h"
#include "graph/passes.h"

/* Uses of each node: inputs of other nodes, outputs, the loss. */
static int32_t *count_uses(const Graph *g)
{
    int32_t *uses = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *uses);
    if (!uses) return NULL;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) uses[g->nodes[i].in[k]]++;
    for (int i = 0; i < g->noutputs; i++) uses[g->outputs[i].node] += 2;   /* never fused away */
    if (g->train.minimize >= 0) uses[g->train.minimize] += 2;
    return uses;
}

/* The single consumer of node i, or -1. */
static int32_t sole_consumer(const Graph *g, const int32_t *uses, int32_t i)
{
    if (uses[i] != 1) return -1;
    for (int k = i + 1; k < g->nnodes; k++)
        for (int j = 0; j < g->nodes[k].nin; j++)
            if (g->nodes[k].in[j] == i) return k;
    return -1;
}

static int act_of(OpKind op)
{
    switch (op) {
    case OP_RELU: return KU_RELU;
    case OP_SIGMOID: return KU_SIGMOID;
    case OP_TANH: return KU_TANH;
    default: return -1;
    }
}

/* Is node `add` = gemm_out + b with b a vector over gemm_out's last axis? Returns b. */
static int32_t bias_of(const Graph *g, int32_t add, int32_t gemm_out)
{
    const Node *n = &g->nodes[add];
    if (n->op != OP_ADD) return -1;
    int32_t b = n->in[0] == gemm_out ? n->in[1] : n->in[1] == gemm_out ? n->in[0] : -1;
    if (b < 0 || b == gemm_out) return -1;
    const Shape *bs = &g->nodes[b].shape, *ys = &g->nodes[gemm_out].shape;
    if (bs->rank != 1 || ys->rank < 1 || !dim_eq(bs->d[0], ys->d[ys->rank - 1])) return -1;
    if (!shape_eq(&n->shape, ys)) return -1;
    return b;
}

Graph *pass_fuse(const Graph *g, DiagSink *d)
{
    Graph *c = graph_clone(g);
    int32_t *uses = count_uses(g);
    bool *keep = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *keep);
    int32_t *alias = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *alias);
    if (!c || !uses || !keep || !alias) {
        diag_plain(d, "out of memory");
        graph_free(c);
        gc_free(uses);
        gc_free(keep);
        gc_free(alias);
        return NULL;
    }
    for (int i = 0; i < c->nnodes; i++) {
        keep[i] = true;
        alias[i] = i;
    }
    for (int i = 0; i < c->nnodes; i++) {
        Node *n = &c->nodes[i];
        if (!keep[i]) continue;
        if (n->op == OP_CONV2D || n->op == OP_MATMUL) {
            int32_t add = sole_consumer(c, uses, i);
            int32_t b = add >= 0 ? bias_of(c, add, i) : -1;
            if (b < 0) continue;
            int32_t last = add, act = -1;
            int32_t next = sole_consumer(c, uses, add);
            if (next >= 0 && act_of(c->nodes[next].op) >= 0) {
                act = act_of(c->nodes[next].op);
                last = next;
            }
            /* the fused node replaces `last`; the gemm and the add go */
            Node *f = &c->nodes[last];
            Shape y = f->shape;
            const char *name = f->name;
            int32_t ins[3] = { n->in[0], n->in[1], b };
            int32_t *in = arena_alloc(&c->arena, sizeof ins);
            if (!in) continue;
            memcpy(in, ins, sizeof ins);
            NodeAttr a = n->a;
            if (n->op == OP_CONV2D) {
                f->op = OP_CONV2D_BIAS_ACT;
                a.win.act = act;
            } else {
                f->op = OP_MATMUL_BIAS_ACT;
                a.matmul.act = act;
            }
            f->a = a;
            f->in = in;
            f->nin = 3;
            f->shape = y;
            f->name = name ? name : n->name;
            f->loc = n->loc;
            keep[i] = false;
            if (last != add) keep[add] = false;
        } else if (n->op == OP_UNARY_GRAD && n->a.unary.kop == KU_RELU) {
            int32_t m = n->in[1];
            const Node *mg = &c->nodes[m];
            /* relu's output is maxpool's input: the mask is x > 0 on the same tensor */
            if (mg->op != OP_MAXPOOL_GRAD || uses[m] != 1 || mg->in[0] != n->in[0]) continue;
            NodeAttr a = mg->a;
            int32_t *in = arena_alloc(&c->arena, 3 * sizeof *in);
            if (!in) continue;
            memcpy(in, mg->in, 3 * sizeof *in);
            n->op = OP_MAXPOOL_GRAD_RELU;
            n->a = a;
            n->in = in;
            n->nin = 3;
            keep[m] = false;
        }
    }
    /* All optimizer updates of the step (one kind per step) become one op, in place of
     * the last of them: they run last anyway, and one op updates every parameter in one
     * pass over the pool. */
    int nup = 0, last_up = -1;
    OpKind kind = OP_COUNT;
    for (int i = 0; i < c->nnodes; i++) {
        const Node *n = &c->nodes[i];
        if (!keep[i] || n->op == OP_UPDATE_ALL || !(op_info[n->op].traits & OPT_UPDATE)) continue;
        if (kind != OP_COUNT && n->op != kind) { nup = 0; break; }   /* mixed kinds: leave them */
        kind = n->op;
        nup++;
        last_up = i;
    }
    if (nup > 1) {
        int32_t *in = arena_alloc(&c->arena, (size_t)(2 * nup) * sizeof *in);
        if (in) {
            int k = 0;
            for (int i = 0; i < c->nnodes; i++) {
                const Node *n = &c->nodes[i];
                if (!keep[i] || n->op != kind) continue;
                in[k++] = n->in[0];
                in[k++] = n->in[1];
                if (i != last_up) keep[i] = false;
            }
            Node *f = &c->nodes[last_up];
            f->op = OP_UPDATE_ALL;
            f->in = in;
            f->nin = 2 * nup;
            memset(&f->a, 0, sizeof f->a);
            f->a.update.var = -1;
            f->a.update.state[0] = (int)kind;
            f->a.update.state[1] = -1;
        }
    }
    Graph *out = graph_rebuild(c, keep, alias, "fused", d);
    graph_free(c);
    gc_free(uses);
    gc_free(keep);
    gc_free(alias);
    return out;
}

Graph *pass_optimize(const Graph *g, const char *upto, DiagSink *d)
{
    static const struct {
        const char *stage;
        Graph *(*pass)(const Graph *, DiagSink *);
    } pipeline[] = { { "cse", pass_cse }, { "folded", pass_fold }, { "fused", pass_fuse } };
    Graph *cur = graph_clone(g);
    if (!cur) { diag_plain(d, "out of memory"); return NULL; }
    for (size_t i = 0; i < sizeof pipeline / sizeof pipeline[0]; i++) {
        Graph *next = pipeline[i].pass(cur, d);
        graph_free(cur);
        if (!next) return NULL;
        next->stage = pipeline[i].stage;
        cur = next;
        if (upto && strcmp(upto, pipeline[i].stage) == 0) break;
    }
    return cur;
}
