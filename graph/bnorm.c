/* Batch norm: its training and inference forms, and its passes.
 *
 * The language's batch_norm(x) (graph/lower.c) makes two nodes:
 *   s = batch_norm_stats(x)       the batch's mean and (biased) variance per channel, [2, C]
 *   y = batch_norm(x, s, gamma, beta, moving_mean, moving_variance)
 * the training form, which normalizes with s.  pass_autodiff differentiates it
 * (g_batch_norm: the backward in two passes over the data, and the update of the
 * running statistics from s, one per layer and step).  A graph without a training step
 * (evaluation, prediction, `graphc bench --infer`) starts from pass_inference, which
 * calls bn_inference_form: each batch_norm becomes
 *   y = batch_norm_infer(x, gamma, beta, moving_mean, moving_variance)
 * which normalizes with the running statistics; s is then read by nothing and goes.
 * Among the compiler's passes, before bias_act (graph/passes.c):
 *   bn_fold   batch_norm_infer(conv2d(x, w) [+ b])  =>  conv2d(x, w * k) + t
 *             (and matmul), graphs without a training step only
 *   bn_add    batch_norm(...) + r, the batch norm read only by the add  =>  one batch_norm
 *             with r as its seventh input (training)
 *   bn_act    batch_norm[_infer](...) read only by an activation  =>  one batch_norm[_infer]
 *             that applies it (a.bn.act), in training too */
#include <string.h>
#include "graph/passes.h"

void bn_inference_form(Graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = &g->nodes[i];
        if (n->op != OP_BATCH_NORM) continue;
        n->op = OP_BATCH_NORM_INFER;
        memmove(&n->in[1], &n->in[2], 4 * sizeof *n->in);   /* the statistics go */
        n->nin = 5;
    }
}

/* pass_uses, with the logits counted twice too: a batch norm that makes them keeps
 * its output.  NULL when out of memory. */
static int32_t *readers(const Graph *g)
{
    int32_t *r = pass_uses(g);
    if (r && g->logits >= 0) r[g->logits] += 2;
    return r;
}

/* The convolution or matmul that batch_norm_infer node b normalizes, read by nothing
 * else, whose output channels are its weight's last axis; with its bias (a [C] vector
 * added to it, that sum read only by b) in *bias, else -1.  -1 if none. */
static int32_t folds_into(const Graph *g, const int32_t *nreaders, int n0, int32_t b, int32_t *bias)
{
    int32_t y = g->nodes[b].in[0];
    *bias = -1;
    if (y >= n0 || nreaders[y] != 1) return -1;   /* (y >= n0: another batch norm's folded form) */
    const Node *n = &g->nodes[y];
    if (n->op == OP_ADD) {
        for (int k = 0; k < 2 && *bias < 0; k++) {
            const Node *gemm = &g->nodes[n->in[k]], *v = &g->nodes[n->in[1 - k]];
            if ((gemm->op == OP_CONV2D || gemm->op == OP_MATMUL) && n->in[k] < n0 && nreaders[n->in[k]] == 1 && v->shape.rank == 1 &&
                shape_eq(&gemm->shape, &n->shape)) {
                *bias = n->in[1 - k];
                y = n->in[k];
            }
        }
        if (*bias < 0) return -1;
    }
    n = &g->nodes[y];
    if (n->op == OP_MATMUL && n->a.matmul.tb) return -1;   /* w [N, K]: its channels are rows */
    return n->op == OP_CONV2D || n->op == OP_MATMUL ? y : -1;
}

/* Appends op(in) to c, inferred, at batch norm b's line; -1 after reporting. */
static int32_t add_at(Graph *c, int32_t b, OpKind op, int32_t a0, int32_t a1, const NodeAttr *attr, DiagSink *d)
{
    int32_t in[2] = { a0, a1 };
    return graph_add_inferred(c, op, in, op_info[op].arity, c->nodes[b].loc, attr, NULL, d);
}

/* The folded form of batch_norm_infer node b over gemm (with bias, or -1), appended to
 * c: k = gamma / sqrt(moving_variance + eps); the gemm again on w * k; its bias
 * (bias - moving_mean) * k + beta, or beta - moving_mean * k.  Returns the last node
 * (their sum), -1 after reporting. */
static int32_t append_folded(Graph *c, int32_t b, int32_t gemm, int32_t bias, DiagSink *d)
{
    const Node *bn = &c->nodes[b];
    int32_t gamma = bn->in[1], beta = bn->in[2], mean = bn->in[3], var = bn->in[4];
    NodeAttr eps = { .cnst = { bn->a.bn.eps } }, gemm_attr = c->nodes[gemm].a;
    int32_t x = c->nodes[gemm].in[0], w = c->nodes[gemm].in[1];
    OpKind gemm_op = c->nodes[gemm].op;
    Loc gemm_loc = c->nodes[gemm].loc;
    int32_t e = add_at(c, b, OP_CONST, -1, -1, &eps, d);
    int32_t t = e < 0 ? -1 : add_at(c, b, OP_ADD, var, e, NULL, d);
    int32_t r = t < 0 ? -1 : add_at(c, b, OP_SQRT, t, -1, NULL, d);
    int32_t k = r < 0 ? -1 : add_at(c, b, OP_DIV, gamma, r, NULL, d);
    int32_t wk = k < 0 ? -1 : add_at(c, b, OP_MUL, w, k, NULL, d);
    int32_t y = wk < 0 ? -1 : add_at(c, b, gemm_op, x, wk, &gemm_attr, d);
    if (y < 0) return -1;
    c->nodes[y].loc = gemm_loc;   /* the work is the layer's: its line in a profile */
    int32_t shift;
    if (bias >= 0) {
        int32_t u = add_at(c, b, OP_SUB, bias, mean, NULL, d);
        int32_t uk = u < 0 ? -1 : add_at(c, b, OP_MUL, u, k, NULL, d);
        shift = uk < 0 ? -1 : add_at(c, b, OP_ADD, uk, beta, NULL, d);
    } else {
        int32_t mk = add_at(c, b, OP_MUL, mean, k, NULL, d);
        shift = mk < 0 ? -1 : add_at(c, b, OP_SUB, beta, mk, NULL, d);
    }
    return shift < 0 ? -1 : add_at(c, b, OP_ADD, y, shift, NULL, d);
}

/* Every reader of node `from` (nodes after it, the outputs, the logits) reads `to`. */
static void redirect(Graph *c, int32_t from, int32_t to)
{
    for (int j = from + 1; j < c->nnodes; j++)
        for (int k = 0; k < c->nodes[j].nin; k++)
            if (c->nodes[j].in[k] == from) c->nodes[j].in[k] = to;
    for (int i = 0; i < c->noutputs; i++)
        if (c->outputs[i].node == from) c->outputs[i].node = to;
    if (c->logits == from) c->logits = to;
}

/* Batch norm folded into the convolution or dense layer before it, where that layer's
 * output (and its bias add) is read by the batch norm alone, in a graph without a
 * training step (updates mark one):
 *   batch_norm_infer(conv2d(x, w) [+ b], gamma, beta, mean, var)
 *     =>  conv2d(x, w * k) + ((b - mean) * k + beta),   k = gamma / sqrt(var + eps)
 * (without b: beta - mean * k; matmul(a, w) alike, w not transposed).  The graph holds
 * no values, so the scaled weights are ordinary ops on the parameters, made each step:
 * O(weights), where the convolution is O(weights x pixels x batch).  The new nodes take
 * the batch norm's place, after its parameters; bias_act then fuses the add and a
 * following activation into the convolution's epilogue.  Rounding differs from the ops
 * apart (the weights are scaled before the products), hence `rounds`. */
Graph *pass_bn_fold(const Graph *g, DiagSink *d)
{
    int n = g->nnodes;
    Graph *c = graph_clone(g), *out = NULL;
    int32_t *nreaders = readers(g);
    int32_t *first = gc_calloc((size_t)(n ? n : 1), sizeof *first);   /* batch norm -> its folded form's first node */
    int32_t *order = NULL;
    bool *drop = gc_calloc((size_t)(n ? n : 1), sizeof *drop);
    if (!c || !nreaders || !first || !drop) { diag_plain(d, "out of memory"); goto done; }
    for (int32_t b = 0; b < n; b++) first[b] = -1;
    int folded = 0;
    bool training = graph_has_updates(g);
    for (int32_t b = 0; b < n && !training; b++) {
        int32_t bias, gemm = c->nodes[b].op == OP_BATCH_NORM_INFER ? folds_into(c, nreaders, n, b, &bias) : -1;
        if (gemm < 0) continue;
        first[b] = c->nnodes;
        int32_t y = append_folded(c, b, gemm, bias, d);
        if (y < 0) goto done;
        c->nodes[y].name = c->nodes[b].name;
        redirect(c, b, y);
        drop[b] = drop[gemm] = true;
        drop[c->nodes[b].in[0]] = true;   /* the bias add, if any */
        folded++;
    }
    if (!folded) {
        out = c;
        c = NULL;
        goto done;
    }
    order = gc_calloc((size_t)c->nnodes, sizeof *order);
    if (!order) { diag_plain(d, "out of memory"); goto done; }
    int no = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!drop[i]) order[no++] = i;
        if (drop[i] && first[i] >= 0) {   /* the folded form in the batch norm's place */
            int32_t last = c->nnodes;
            for (int32_t j = i + 1; j < n; j++)
                if (first[j] >= 0) { last = first[j]; break; }
            for (int32_t j = first[i]; j < last; j++) order[no++] = j;
        }
    }
    out = graph_reorder(c, order, no, g->stage, d);
done:
    graph_free(c);
    gc_free(nreaders);
    gc_free(first);
    gc_free(drop);
    gc_free(order);
    return out;
}

/* bn_add, bn_act and bn_relu_grad rewrite g with readers() as the uses. */
static bool fold_begin(Rewrite *r, const Graph *g, DiagSink *d)
{
    if (!rewrite_begin(r, g, d)) return false;
    if (g->logits >= 0) r->uses[g->logits] += 2;
    return true;
}

/* Appends `extra` to node j's inputs (in c's arena); false when out of memory. */
static bool add_inputs(Graph *c, int32_t j, const int32_t *extra, int nextra)
{
    Node *n = &c->nodes[j];
    int32_t *in = arena_alloc(&c->arena, (size_t)(n->nin + nextra) * sizeof *in);
    if (!in) return false;
    memcpy(in, n->in, (size_t)n->nin * sizeof *in);
    memcpy(in + n->nin, extra, (size_t)nextra * sizeof *in);
    n->in = in;
    n->nin += nextra;
    return true;
}

/* A residual join into the batch norm on one side of it: add(batch_norm(...), r) (or
 * r + batch_norm), training form, the batch norm without an activation and read by the
 * add alone, becomes one batch_norm with r as a seventh input, in the add's place: it
 * adds r to each value as it is made, so the normalized values are never written and
 * read back (2n floats less a join; bn_act then takes the join's relu too).  Where both
 * operands qualify (a 1x1 shortcut), the first goes in.  The batch norm's backward
 * reads its input and statistics, never its output, and an add's gradient is the
 * incoming one, so nothing else changes; bn_relu_grad leaves such a node's relu alone
 * (its mask would need r).  The same arithmetic as the two ops apart: the normalized
 * value in float, then the add. */
Graph *pass_bn_add(const Graph *g, DiagSink *d)
{
    Rewrite f;
    if (!fold_begin(&f, g, d)) return NULL;
    int n = g->nnodes;
    Graph *c = f.c;
    const int32_t *nreaders = f.uses;
    for (int32_t u = 0; u < n; u++) {
        Node *add = &c->nodes[u];
        if (add->op != OP_ADD || add->nin != 2) continue;
        for (int k = 0; k < 2; k++) {
            int32_t b = add->in[k], r = add->in[1 - k];
            const Node *bn = &c->nodes[b];
            if (bn->op != OP_BATCH_NORM || bn->nin != 6 || bn->a.bn.act >= 0 || nreaders[b] != 1 || b == r ||
                c->nodes[r].dtype != DT_F32 || !shape_eq(&c->nodes[r].shape, &bn->shape) ||
                !shape_eq(&add->shape, &bn->shape))
                continue;
            if (!add_inputs(c, b, &r, 1)) {
                diag_plain(d, "out of memory");
                return rewrite_end(&f, false, g->stage, d);
            }
            bn = &c->nodes[b];
            add->op = OP_BATCH_NORM;
            add->a = bn->a;
            add->in = bn->in;
            add->nin = 7;
            add->loc = bn->loc;
            add->name = add->name ? add->name : bn->name;
            f.keep[b] = false;
            break;
        }
    }
    return rewrite_end(&f, true, g->stage, d);
}

/* An activation into the batch norm before it: batch_norm or batch_norm_infer read by
 * nothing but an elementwise unary function becomes one node that applies it to each
 * value as it is made (a.bn.act), in the function's place, so the normalized values
 * are never written and read back.  In training too: the batch norm's backward reads
 * its input and statistics, not its output, and a function whose gradient reads its
 * input (gelu) reads the batch norm's output, which then has two readers and stays.
 * The same arithmetic as the two ops apart. */
Graph *pass_bn_act(const Graph *g, DiagSink *d)
{
    Rewrite f;
    if (!fold_begin(&f, g, d)) return NULL;
    int n = g->nnodes;
    Graph *c = f.c;
    const int32_t *nreaders = f.uses;
    for (int32_t u = 0; u < n; u++) {
        Node *act = &c->nodes[u];
        int32_t b = act->nin == 1 ? act->in[0] : -1;
        if (!op_has(act->op, OPT_UNARY) || b < 0 || nreaders[b] != 1) continue;
        const Node *bn = &c->nodes[b];
        if ((bn->op != OP_BATCH_NORM && bn->op != OP_BATCH_NORM_INFER) || bn->a.bn.act >= 0) continue;
        NodeAttr a = bn->a;
        a.bn.act = (int)act->op;
        a.bn.act_p = act->a.unary.p;
        act->op = bn->op;
        act->a = a;
        act->in = bn->in;
        act->nin = bn->nin;
        act->loc = bn->loc;
        act->name = act->name ? act->name : bn->name;
        f.keep[b] = false;
    }
    return rewrite_end(&f, true, g->stage, d);
}

/* Node j is one of batch norm b's backward ops that reads u as its dy, without an
 * activation of its own yet. */
static bool grad_reads(const Graph *g, int32_t j, int32_t b, int32_t u)
{
    const Node *n = &g->nodes[j], *bn = &g->nodes[b];
    int32_t x = bn->in[0], st = bn->in[1], gamma = bn->in[2];
    if (n->a.bn.act >= 0 || n->a.bn.eps != bn->a.bn.eps) return false;
    if (n->op == OP_BATCH_NORM_GRAD_PARAMS)
        return n->nin == 3 && n->in[0] == x && n->in[1] == st && n->in[2] == u;
    return n->op == OP_BATCH_NORM_GRAD && n->nin == 5 && n->in[0] == u && n->in[1] == x && n->in[2] == st &&
           n->in[3] == gamma;
}

/* relu's gradient taken into the backward of the batch norm that applied it (bn_act's
 * a.bn.act relu):
 *   dy = unary_grad[relu](y, g),  batch_norm_grad_params(x, s, dy),  batch_norm_grad(dy, x, s, gamma, p)
 *     =>  batch_norm_grad_params(x, s, g, gamma, beta),  batch_norm_grad(g, x, s, gamma, p, beta)
 * both through=relu, where dy is read by nothing else: they mask g where (x - mean) *
 * scale + beta is not positive, as the forward computed it, so dy is g or +0 as relu's
 * gradient made it and the bits are those of the ops apart.  Per layer of n floats:
 * relu's gradient read y and g and wrote dy, and both ops read dy, 8n in all with x;
 * now 5n (g and x twice, dx once), and y is read by one op fewer. */
Graph *pass_bn_relu_grad(const Graph *g, DiagSink *d)
{
    Rewrite f;
    if (!fold_begin(&f, g, d)) return NULL;
    int n = g->nnodes;
    Graph *c = f.c;
    const int32_t *nreaders = f.uses;
    for (int32_t u = 0; u < n; u++) {
        const Node *un = &c->nodes[u];
        if (un->op != OP_UNARY_GRAD || un->a.unary.op != OP_RELU) continue;
        int32_t b = un->in[0], gin = un->in[1];
        if (c->nodes[b].op != OP_BATCH_NORM || c->nodes[b].a.bn.act != OP_RELU || c->nodes[b].nin != 6) continue;
        int found = 0;
        for (int32_t j = u + 1; j < n; j++)
            for (int k = 0; k < c->nodes[j].nin; k++)
                if (c->nodes[j].in[k] == u) found += grad_reads(c, j, b, u) ? 1 : n + 1;
        if (found == 0 || found != nreaders[u]) continue;   /* another reader, or an output */
        const Node *bn = &c->nodes[b];
        int32_t gamma_beta[2] = { bn->in[2], bn->in[3] };
        for (int32_t j = u + 1; j < n; j++) {
            Node *r = &c->nodes[j];
            bool params = r->op == OP_BATCH_NORM_GRAD_PARAMS;
            if (!(params ? r->in[2] == u : r->op == OP_BATCH_NORM_GRAD && r->in[0] == u)) continue;
            r->in[params ? 2 : 0] = gin;
            if (!add_inputs(c, j, params ? gamma_beta : gamma_beta + 1, params ? 2 : 1)) {
                diag_plain(d, "out of memory");
                return rewrite_end(&f, false, g->stage, d);
            }
            r->a.bn.act = OP_RELU;
            r->a.bn.act_p = bn->a.bn.act_p;
        }
        f.keep[u] = false;
    }
    return rewrite_end(&f, true, g->stage, d);
}
