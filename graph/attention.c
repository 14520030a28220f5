/* The attention pass: multi_head_attention's chain per (example, head), and its
 * backward, as one op each (kernels/attention.c runs them).  What graph/lower.c's
 * b_mha makes, after masked_softmax:
 *   qt, kt, vt = transpose(xq), transpose(xk), transpose(xv)     [B, T, H, d] -> [B, H, T, d]
 *   s = batch_matmul(mul(qt, scale), kt, tb);  p = softmax_causal(s) (or softmax, of
 *   causal_mask(s) or of s);  o = batch_matmul(p, vt);  ot = transpose(o)
 * becomes ot = attention(xq, xk, xv): the heads are read in place, the scores and
 * probabilities never leave the thread's scratch, and the five transposes are gone.
 * In a training step the forward's intermediates are also read by autodiff's chain
 *   dot = transpose(dy);  dp = batch_matmul(dot, vt, tb);  dvt = batch_matmul(p, dot, ta)
 *   ds = softmax_grad_causal(p, dp) (or causal_mask(softmax_grad(p, dp), 0), or
 *   softmax_grad);  dqt = mul(batch_matmul(ds, kt), scale);  dkt = batch_matmul(ds, qs, ta)
 *   gq, gk, gv = transpose(dqt), transpose(dkt), transpose(dvt)
 * and then the forward keeps its probabilities for it: p = attention_probs(xq, xk)
 * [B, H, T, T] in p's place, ot = attention_out(p, xv), and the chain becomes g =
 * attention_grad(xq, xk, xv, p, dy) [3, B, T, H, d] in dot's place, gq, gk, gv reshapes
 * of slices of it (a copy each: a value has one buffer).  (Making P again in the
 * backward instead cost more than keeping it: kernels/attention.c.)  Both or neither:
 * the pattern's inner nodes must be read by nothing outside it (nor be outputs).  Each
 * step is the kernel of the op it replaces, so the bits do not change. */
#include <string.h>
#include "graph/passes.h"

/* Every node of a match, -1 where the form has none. */
typedef struct Attn {
    int32_t xq, xk, xv, qt, kt, vt, cst, qs, s, mask, p, o, ot;   /* forward */
    int32_t dy, dot, dp, dvt, ds, dmask, dqs, dqt, dkt, gq, gk, gv;   /* backward */
    float scale, value;
    bool causal;
} Attn;

enum { ATTN_NODES = 25 };

static const int32_t *attn_nodes(const Attn *m) { return &m->xq; }

/* A heads transpose ([B, T, H, d] <-> [B, H, T, d]): its input, or -1. */
static int32_t heads_of(const Graph *g, int32_t id)
{
    const Node *n = &g->nodes[id];
    static const int8_t perm[4] = { 0, 2, 1, 3 };
    if (n->op != OP_TRANSPOSE || n->shape.rank != 4 || memcmp(n->a.transpose.perm, perm, sizeof perm) != 0) return -1;
    return n->in[0];
}

static bool is_bmm(const Graph *g, int32_t id, bool ta, bool tb)
{
    const Node *n = &g->nodes[id];
    return n->op == OP_BATCH_MATMUL && n->shape.rank == 4 && n->a.matmul.ta == ta && n->a.matmul.tb == tb;
}

static bool last_axis(const Node *n) { return n->a.axes.after == 0 && n->a.axes.n <= 1; }

/* The first node after `from` with op `op` whose inputs are a and b (b -1: any), or -1. */
static int32_t reader(const Graph *g, int32_t from, OpKind op, int32_t a, int32_t b)
{
    for (int32_t j = from + 1; j < g->nnodes; j++) {
        const Node *n = &g->nodes[j];
        if (n->op == op && n->nin >= 1 && n->in[0] == a && (b < 0 || (n->nin >= 2 && n->in[1] == b))) return j;
    }
    return -1;
}

/* mul(x, c) or mul(c, x) with c the scalar constant cst: the node, or -1. */
static int32_t scaled(const Graph *g, int32_t from, int32_t x, int32_t cst)
{
    int32_t j = reader(g, from, OP_MUL, x, cst);
    return j >= 0 ? j : reader(g, from, OP_MUL, cst, x);
}

/* The forward chain whose output is the batch_matmul o. */
static bool match_forward(const Graph *g, int32_t o, Attn *m)
{
    memset(m, 0xff, sizeof *m);   /* every node -1 */
    m->o = o;
    m->scale = 1.0f;
    m->value = 0.0f;
    m->causal = false;
    if (!is_bmm(g, o, false, false)) return false;
    m->p = g->nodes[o].in[0];
    m->vt = g->nodes[o].in[1];
    const Node *p = &g->nodes[m->p];
    if (p->op == OP_SOFTMAX_CAUSAL) {
        m->causal = true;
        m->value = p->a.mask.value;
        m->s = p->in[0];
    } else if (p->op == OP_SOFTMAX && last_axis(p)) {
        m->s = p->in[0];
        if (g->nodes[m->s].op == OP_CAUSAL_MASK) {
            m->mask = m->s;
            m->causal = true;
            m->value = g->nodes[m->mask].a.mask.value;
            m->s = g->nodes[m->mask].in[0];
        }
    } else {
        return false;
    }
    if (!is_bmm(g, m->s, false, true)) return false;
    m->qs = g->nodes[m->s].in[0];
    m->kt = g->nodes[m->s].in[1];
    const Node *qs = &g->nodes[m->qs];
    m->qt = m->qs;
    if (qs->op == OP_MUL) {
        for (int k = 0; k < 2; k++) {
            const Node *c = &g->nodes[qs->in[k]];
            if (c->op == OP_CONST && c->shape.rank == 0) {
                m->cst = qs->in[k];
                m->qt = qs->in[1 - k];
                m->scale = c->a.cnst.value;
            }
        }
        if (m->cst < 0) return false;
    }
    m->xq = heads_of(g, m->qt);
    m->xk = heads_of(g, m->kt);
    m->xv = heads_of(g, m->vt);
    if (m->xq < 0 || m->xk < 0 || m->xv < 0) return false;
    const Shape *x = &g->nodes[m->xq].shape;
    if (!shape_eq(x, &g->nodes[m->xk].shape) || !shape_eq(x, &g->nodes[m->xv].shape)) return false;
    m->ot = reader(g, o, OP_TRANSPOSE, o, -1);
    return m->ot >= 0 && heads_of(g, m->ot) == o;
}

/* Autodiff's chain for m's forward, if there is one. */
static bool match_backward(const Graph *g, Attn *m)
{
    for (int32_t j = m->o + 1; j < g->nnodes && m->dp < 0; j++)
        if (is_bmm(g, j, false, true) && g->nodes[j].in[1] == m->vt && heads_of(g, g->nodes[j].in[0]) >= 0) m->dp = j;
    if (m->dp < 0) return false;
    m->dot = g->nodes[m->dp].in[0];
    m->dy = heads_of(g, m->dot);
    m->dvt = reader(g, m->dot, OP_BATCH_MATMUL, m->p, m->dot);
    if (m->dvt < 0 || !is_bmm(g, m->dvt, true, false)) return false;
    int32_t ds = m->mask < 0 && m->causal ? reader(g, m->dp, OP_SOFTMAX_GRAD_CAUSAL, m->p, m->dp)
                                           : reader(g, m->dp, OP_SOFTMAX_GRAD, m->p, m->dp);
    if (ds < 0) return false;
    m->ds = ds;
    if (m->mask >= 0) {   /* the mask's gradient: the mask again, with 0 */
        m->dmask = reader(g, ds, OP_CAUSAL_MASK, ds, -1);
        if (m->dmask < 0 || g->nodes[m->dmask].a.mask.value != 0.0f) return false;
        ds = m->dmask;
    }
    m->dqs = reader(g, ds, OP_BATCH_MATMUL, ds, m->kt);
    m->dkt = reader(g, ds, OP_BATCH_MATMUL, ds, m->qs);
    if (m->dqs < 0 || m->dkt < 0 || !is_bmm(g, m->dqs, false, false) || !is_bmm(g, m->dkt, true, false)) return false;
    m->dqt = m->cst >= 0 ? scaled(g, m->dqs, m->dqs, m->cst) : m->dqs;
    if (m->dqt < 0) return false;
    m->gq = reader(g, m->dqt, OP_TRANSPOSE, m->dqt, -1);
    m->gk = reader(g, m->dkt, OP_TRANSPOSE, m->dkt, -1);
    m->gv = reader(g, m->dvt, OP_TRANSPOSE, m->dvt, -1);
    return m->gq >= 0 && m->gk >= 0 && m->gv >= 0 && heads_of(g, m->gq) == m->dqt && heads_of(g, m->gk) == m->dkt &&
           heads_of(g, m->gv) == m->dvt && shape_eq(&g->nodes[m->dy].shape, &g->nodes[m->xq].shape);
}

/* The nodes a rewrite drops (or reuses): all but the inputs, the constant and the exits. */
static bool is_inner(const Attn *m, int k)
{
    int32_t id = attn_nodes(m)[k];
    return id >= 0 && id != m->xq && id != m->xk && id != m->xv && id != m->cst && id != m->dy && id != m->ot &&
           id != m->gq && id != m->gk && id != m->gv;
}

static bool in_match(const Attn *m, int32_t id)
{
    for (int k = 0; k < ATTN_NODES; k++)
        if (attn_nodes(m)[k] == id && id >= 0) return true;
    return false;
}

/* Is every reader of an inner node in the match (and none an output)? */
static bool closed(const Graph *g, const int32_t *uses, const Attn *m)
{
    for (int k = 0; k < ATTN_NODES; k++) {
        if (!is_inner(m, k)) continue;
        int32_t id = attn_nodes(m)[k], inside = 0;
        for (int32_t j = id + 1; j < g->nnodes; j++)
            if (in_match(m, j))
                for (int i = 0; i < g->nodes[j].nin; i++) inside += g->nodes[j].in[i] == id;
        if (inside != uses[id]) return false;
    }
    return true;
}

/* Node id rewritten in place as op(in[0 .. nin)) with attributes a (and target shape t). */
static bool remake(Graph *c, int32_t id, OpKind op, const int32_t *in, int nin, const NodeAttr *a, const Shape *t,
                   DiagSink *d)
{
    int32_t *ins = arena_alloc(&c->arena, (size_t)nin * sizeof *ins);
    if (!ins) {
        diag_plain(d, "out of memory");
        return false;
    }
    memcpy(ins, in, (size_t)nin * sizeof *ins);
    Node *n = &c->nodes[id];
    n->op = op;
    n->in = ins;
    n->nin = nin;
    n->a = *a;
    if (t) n->tshape = *t;
    return graph_infer_node(c, id, d);
}

static bool rewrite(Graph *c, const Attn *m, bool *keep, DiagSink *d)
{
    NodeAttr a;
    memset(&a, 0, sizeof a);
    a.attn.scale = m->scale;
    a.attn.causal = m->causal;
    a.attn.value = m->value;
    int32_t x[5] = { m->xq, m->xk, m->xv, m->p, m->dy }, pv[2] = { m->p, m->xv };
    for (int k = 0; k < ATTN_NODES; k++)
        if (is_inner(m, k)) keep[attn_nodes(m)[k]] = false;
    if (m->dot < 0) return remake(c, m->ot, OP_ATTENTION, x, 3, &a, NULL, d);
    /* training: P in p's place, kept for g in dot's place (after dy and the forward);
     * each slice in the place of the node its exit read, which comes after dot */
    keep[m->p] = keep[m->dot] = true;
    if (!remake(c, m->p, OP_ATTENTION_PROBS, x, 2, &a, NULL, d) || !remake(c, m->ot, OP_ATTENTION_OUT, pv, 2, &a, NULL, d) ||
        !remake(c, m->dot, OP_ATTENTION_GRAD, x, 5, &a, NULL, d))
        return false;
    int32_t slot[3] = { m->dqt, m->dkt, m->dvt }, exit[3] = { m->gq, m->gk, m->gv };
    for (int k = 0; k < 3; k++) {
        NodeAttr sa;
        memset(&sa, 0, sizeof sa);
        sa.slice.axis = 0;
        sa.slice.off = k;
        sa.slice.len = 1;
        NodeAttr none;
        memset(&none, 0, sizeof none);
        Shape t = c->nodes[exit[k]].shape;
        keep[slot[k]] = true;
        if (!remake(c, slot[k], OP_SLICE, &m->dot, 1, &sa, NULL, d) ||
            !remake(c, exit[k], OP_RESHAPE, &slot[k], 1, &none, &t, d))
            return false;
    }
    return true;
}

Graph *pass_fuse_attention(const Graph *g, DiagSink *d)
{
    Graph *c = graph_clone(g);
    size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
    int32_t *uses = gc_calloc(n, sizeof *uses), *alias = gc_calloc(n, sizeof *alias);
    bool *keep = gc_calloc(n, sizeof *keep), ok = true;
    Graph *out = NULL;
    if (!c || !uses || !alias || !keep) {
        diag_plain(d, "out of memory");
        goto done;
    }
    for (int i = 0; i < g->nnodes; i++) {
        keep[i] = true;
        alias[i] = i;
        for (int k = 0; k < g->nodes[i].nin; k++) uses[g->nodes[i].in[k]]++;
    }
    for (int i = 0; i < g->noutputs; i++) uses[g->outputs[i].node] += 2;   /* never fused away */
    if (g->train.minimize >= 0) uses[g->train.minimize] += 2;
    int ncst = 0;
    int32_t csts[64];
    for (int32_t i = 0; i < g->nnodes && ok; i++) {
        Attn m;
        if (!match_forward(c, i, &m)) continue;
        Attn f = m;
        if (!match_backward(c, &m)) m = f;
        if (!closed(c, uses, &m)) continue;
        ok = rewrite(c, &m, keep, d);
        if (m.cst >= 0 && ncst < 64) csts[ncst++] = m.cst;
    }
    /* a scale constant read only by the fused chains goes with them */
    for (int k = 0; k < ncst; k++) {
        int32_t id = csts[k], left = 0;
        for (int32_t j = id + 1; j < c->nnodes; j++)
            if (keep[j])
                for (int i = 0; i < c->nodes[j].nin; i++) left += c->nodes[j].in[i] == id;
        for (int i = 0; i < c->noutputs; i++) left += c->outputs[i].node == id;
        if (left == 0) keep[id] = false;
    }
    if (ok) out = graph_rebuild(c, keep, alias, g->stage, d);
done:
    graph_free(c);
    gc_free(uses);
    gc_free(alias);
    gc_free(keep);
    return out;
}
