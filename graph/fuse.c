/* The fusion passes, each a pass of its own in the compiler's list (graph/passes.c),
 * in this order:
 *   bias_act           conv2d(x, w) -> add(., b) [-> act]  =>  conv2d_bias_act(x, w, b)
 *                      matmul(a, w) -> add(., b) [-> act]  =>  matmul_bias_act(a, w, b)
 *   maxpool_grad_relu  maxpool_grad(x, y, dy) -> unary_grad[relu](x, .)  =>  maxpool_grad_relu(x, y, dy)
 *   ln_grad_add        add(r, layer_norm_grad(x, gamma, dy))  =>  layer_norm_grad_add(r, x, gamma, dy)
 *   update_all         the updates of the step that stay at its end  =>  update_all(p1, g1, ...)
 *   conv_maxpool       conv2d_bias_act(x, w, b) or conv2d(x, w) -> maxpool  =>  conv2d_maxpool(x, w[, b])
 *                      (graphs without a training step)
 *   elementwise        a chain of elementwise ops  =>  fused_elemwise
 *   pool_indices       maxpool and its gradient through an index of the maxima
 *   conv_pool_argmax   conv2d_bias_act(x, w, b) or conv2d(x, w) read by maxpool_argmax and
 *                      maxpool_gather only  =>  conv2d_maxpool_argmax(x, w[, b]) and
 *                      maxpool_values of it (a training step)
 *   pooled_grads       maxpool_scatter(_relu)(a, ...) of a conv2d_maxpool_argmax a, read only by
 *                      the convolution's conv2d_grad_filter and sum_to (its bias gradient)
 *                      =>  conv2d_grad_filter_pooled(x, a, dy) and sum_to_pooled(a, dy);
 *                      through windows of fewer cells, the sum_to alone => sum_to_pooled
 *   early_updates      a large gradient's update moved to right after its last input
 *   gemm_updates       matmul(a, b) -> an optimizer's *_update(w, .)  =>  matmul_update(w, a, b)
 *   dense_backward     matmul(dy, w) -> unary_grad[relu](x, .), and w's sgd/momentum update
 *                      from matmul(x, dy)  =>  matmul_grad_update(x, dy, w)
 * where b is a vector over the last axis and act any elementwise unary function.  The
 * fused node takes the place of the last node of its pattern, so everything that read
 * that node reads the fused one; the other nodes of the pattern are dropped.  Fusion is
 * decided here, from the graph alone: which kernel runs a fused op is the executor's
 * choice. */
#include <string.h>
#include "graph/passes.h"

/* The single consumer of node i, or -1. */
static int32_t sole_consumer(const Graph *g, const int32_t *uses, int32_t i)
{
    if (uses[i] != 1) return -1;
    for (int k = i + 1; k < g->nnodes; k++)
        for (int j = 0; j < g->nodes[k].nin; j++)
            if (g->nodes[k].in[j] == i) return k;
    return -1;
}

/* A GEMM's epilogue may be any elementwise unary function (the kernels apply it to each
 * block of the output while it is in cache). */
static bool is_act(OpKind op) { return op_has(op, OPT_UNARY); }

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

/* A large gradient's update runs as soon as it can (see pass_early_updates) instead of in
 * the one update_all at the end. */
static bool runs_early(const Graph *g, const Node *update)
{
    /* matmul_update's gradient is not an input: it has the parameter's shape */
    const Node *grad = &g->nodes[update->in[update->op == OP_MATMUL_UPDATE ? 0 : 1]];
    return shape_concrete(&grad->shape) && shape_numel(&grad->shape) * 4 >= UPDATE_EARLY_BYTES;
}

/* The memory-aware order of the updates: a gradient lives from the op that makes it to
 * the update that reads it, and in the autodiff order every update comes last, so
 * every gradient is alive at once at the end of the backward pass.  An update whose
 * gradient is large (runs_early) is moved to just after the last op it must follow:
 * its gradient, and every reader of its parameter (the update writes the parameter in
 * place).  Its gradient's buffer is then free for the rest of the backward pass.
 * Small gradients cost little to keep: their updates stay one update_all at the end. */
Graph *pass_early_updates(const Graph *g, DiagSink *d)
{
    int n = g->nnodes;
    int32_t *after = gc_calloc((size_t)(n ? n : 1), sizeof *after);   /* update -> node it follows, or -1 */
    int32_t *order = gc_calloc((size_t)(n ? n : 1), sizeof *order);
    Graph *out = NULL;
    if (!after || !order) { diag_plain(d, "out of memory"); goto done; }
    int moved = 0;
    for (int u = 0; u < n; u++) {
        const Node *up = &g->nodes[u];
        after[u] = -1;
        if (!(op_info[up->op].traits & OPT_UPDATE) || up->op == OP_UPDATE_ALL || !runs_early(g, up)) continue;
        int var = up->a.update.var;
        int32_t last = 0;
        for (int k = 0; k < up->nin; k++) last = up->in[k] > last ? up->in[k] : last;
        for (int j = 0; j < n; j++) {
            const Node *r = &g->nodes[j];
            if (j == u || (op_info[r->op].traits & OPT_UPDATE)) continue;
            for (int k = 0; k < r->nin; k++) {
                const Node *src = &g->nodes[r->in[k]];
                if (src->op == OP_PARAM && src->a.param.var == var && j > last) last = j;
            }
        }
        if (last < u - 1) {
            after[u] = last;
            moved++;
        }
    }
    if (!moved) {
        out = graph_clone(g);
        if (!out) diag_plain(d, "out of memory");
        goto done;
    }
    int no = 0;
    for (int i = 0; i < n; i++) {
        if (after[i] >= 0) continue;
        order[no++] = i;
        for (int u = i + 1; u < n; u++)
            if (after[u] == i) order[no++] = u;
    }
    out = graph_reorder(g, order, no, g->stage, d);
done:
    gc_free(after);
    gc_free(order);
    return out;
}

/* Can n be a step of a fused elementwise loop?  An elementwise function, a unary
 * function's gradient or dropout, over same-shape operands (or scalars of a binary
 * function), f32. */
static bool ew_candidate(const Graph *g, const Node *n)
{
    if (!op_has(n->op, OPT_UNARY | OPT_BINARY) && n->op != OP_UNARY_GRAD && n->op != OP_DROPOUT &&
        n->op != OP_DROPOUT_GRAD)
        return false;
    if (n->dtype != DT_F32) return false;
    for (int k = 0; k < n->nin; k++) {
        const Node *in = &g->nodes[n->in[k]];
        bool scalar = true;
        for (int i = 0; i < in->shape.rank; i++) scalar &= in->shape.d[i].v == 1 && in->shape.d[i].sym < 0;
        if (in->dtype != DT_F32 || !(shape_eq(&in->shape, &n->shape) || (scalar && op_has(n->op, OPT_BINARY)))) return false;
    }
    return true;
}

/* Elementwise chains into one loop: a same-shape elementwise node and the elementwise
 * nodes that feed only it and come right before it (recursively, up to EW_MAX_STEPS)
 * become one fused_elemwise node that runs their kernels block by block, so the
 * intermediates stay in cache and are never written to memory.  Each step is the same
 * kernel on a slice, so the values are the same bit for bit. */
Graph *pass_fuse_elementwise(const Graph *g, DiagSink *d)
{
    int n = g->nnodes;
    Graph *c = graph_clone(g);
    int32_t *uses = pass_uses(g);
    bool *keep = gc_calloc((size_t)(n ? n : 1), sizeof *keep), *taken = gc_calloc((size_t)(n ? n : 1), sizeof *taken);
    int32_t *alias = gc_calloc((size_t)(n ? n : 1), sizeof *alias);
    Graph *out = NULL;
    if (!c || !uses || !keep || !taken || !alias) { diag_plain(d, "out of memory"); goto done; }
    for (int i = 0; i < n; i++) {
        keep[i] = true;
        alias[i] = i;
    }
    for (int root = n - 1; root >= 0; root--) {
        if (taken[root] || !ew_candidate(c, &c->nodes[root])) continue;
        int32_t mem[EW_MAX_STEPS];
        int nm = 1;
        mem[0] = root;
        for (int q = 0; q < nm; q++) {
            const Node *m = &c->nodes[mem[q]];
            for (int k = 0; k < m->nin && nm < EW_MAX_STEPS; k++) {
                int32_t p = m->in[k];
                bool dup = false;
                for (int j = 0; j < nm; j++) dup |= mem[j] == p;
                /* only with nothing else between p and the root: moving p's work later
                 * would keep p's operands alive longer */
                bool adjacent = true;
                for (int32_t j = p + 1; j < root && adjacent; j++) {
                    bool in_group = false;
                    for (int q2 = 0; q2 < nm; q2++) in_group |= mem[q2] == j;
                    adjacent = in_group;
                }
                if (!dup && adjacent && !taken[p] && uses[p] == 1 && ew_candidate(c, &c->nodes[p]) &&
                    shape_eq(&c->nodes[p].shape, &c->nodes[root].shape))
                    mem[nm++] = p;
            }
        }
        if (nm < 2) continue;
        for (int a = 1; a < nm; a++)   /* node order is an order of the steps */
            for (int b = a; b > 0 && mem[b - 1] > mem[b]; b--) {
                int32_t t = mem[b];
                mem[b] = mem[b - 1];
                mem[b - 1] = t;
            }
        EwStep *st = arena_alloc(&c->arena, (size_t)nm * sizeof *st);
        int32_t ext[2 * EW_MAX_STEPS];
        int next = 0;
        if (!st) { diag_plain(d, "out of memory"); goto done; }
        for (int s = 0; s < nm; s++) {
            const Node *m = &c->nodes[mem[s]];
            st[s] = (EwStep){ .op = (int16_t)m->op, .arg = { 0, 0 }, .of = -1 };
            if (m->op == OP_UNARY_GRAD) st[s].of = (int16_t)m->a.unary.op;
            if (m->op == OP_UNARY_GRAD || op_has(m->op, OPT_UNARY)) st[s].p = m->a.unary.p;
            if (m->op == OP_DROPOUT || m->op == OP_DROPOUT_GRAD) {
                st[s].p = m->a.dropout.rate;
                st[s].stream = m->a.dropout.stream;
            }
            for (int k = 0; k < m->nin; k++) {
                int32_t p = m->in[k], ref = 0;
                bool inside = false;
                for (int j = 0; j < s; j++)
                    if (mem[j] == p) ref = -1 - j, inside = true;
                if (!inside) {   /* an outside operand: an input of the fused node */
                    int e = 0;
                    while (e < next && ext[e] != p) e++;
                    if (e == next) ext[next++] = p;
                    ref = e;
                }
                st[s].arg[k] = (int16_t)ref;
            }
        }
        int32_t *in = arena_alloc(&c->arena, (size_t)next * sizeof *in);
        if (!in) { diag_plain(d, "out of memory"); goto done; }
        memcpy(in, ext, (size_t)next * sizeof *in);
        Node *r = &c->nodes[root];
        r->tshape = r->shape;
        r->op = OP_FUSED_ELEMWISE;
        r->in = in;
        r->nin = next;
        memset(&r->a, 0, sizeof r->a);
        r->a.ew.step = st;
        r->a.ew.nstep = nm;
        for (int j = 0; j < nm; j++) {
            taken[mem[j]] = true;
            if (mem[j] != root) keep[mem[j]] = false;
        }
    }
    out = graph_rebuild(c, keep, alias, g->stage, d);
done:
    graph_free(c);
    gc_free(uses);
    gc_free(keep);
    gc_free(taken);
    gc_free(alias);
    return out;
}

/* Pool node p (a maxpool, or a training step's maxpool_argmax) becomes `op`, the
 * convolution conv with p's window after it: conv's inputs (copied into c's arena), both
 * windows, and conv's line (the work is the convolution's: its line in a profile).
 * False (with d) when out of memory. */
static bool take_conv(Graph *c, Node *p, const Node *conv, OpKind op, DiagSink *d)
{
    int32_t *in = arena_alloc(&c->arena, (size_t)conv->nin * sizeof *in);
    if (!in) {
        diag_plain(d, "out of memory");
        return false;
    }
    memcpy(in, conv->in, (size_t)conv->nin * sizeof *in);
    NodeAttr a;
    memset(&a, 0, sizeof a);
    a.convpool.conv = conv->a.win;
    if (conv->op == OP_CONV2D) a.convpool.conv.act = -1;
    a.convpool.pool = p->a.win;
    p->op = op;
    p->a = a;
    p->in = in;
    p->nin = conv->nin;
    p->loc = conv->loc;
    return true;
}

/* Max pooling into the convolution before it, in a graph without a training step
 * (inference and evaluation): a conv2d or conv2d_bias_act read only by a maxpool
 * becomes one conv2d_maxpool in the maxpool's place, which the executor runs band by
 * band (the convolution's rows made in scratch and pooled there), so the
 * full-resolution output, a CNN's largest tensor, is never written and read back.
 * Whether that gives the bits of the two ops apart depends on the kernel that takes
 * the convolution; where it would not, the executor runs the two ops apart inside the
 * fused node instead (exec/dispatch.c), so the fusion is decided here from the graph
 * alone.  A training step needs that output for the gradients (relu's, the pool's),
 * so there it has other readers anyway; updates mark a training step. */

Graph *pass_fuse_conv_maxpool(const Graph *g, DiagSink *d)
{
    if (graph_has_updates(g)) {
        Graph *same = graph_clone(g);
        if (!same) diag_plain(d, "out of memory");
        return same;
    }
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    const int32_t *uses = r.uses;
    bool *keep = r.keep;
    bool ok = true;
    for (int m = 0; m < c->nnodes && ok; m++) {
        Node *pool = &c->nodes[m];
        if (pool->op != OP_MAXPOOL || pool->dtype != DT_F32) continue;
        int32_t x = pool->in[0];
        const Node *conv = &c->nodes[x];
        if ((conv->op != OP_CONV2D && conv->op != OP_CONV2D_BIAS_ACT) || uses[x] != 1 || x == c->logits) continue;
        const char *name = pool->name ? pool->name : conv->name;
        if (!take_conv(c, pool, conv, OP_CONV2D_MAXPOOL, d)) {
            ok = false;
            break;
        }
        pool->name = name;
        keep[x] = false;
    }
    return rewrite_end(&r, ok, g->stage, d);
}

/* Max pooling through indices, for memory: a training step keeps maxpool's input x
 * alive until maxpool_grad(x, y, dy), and x is the largest tensor of a CNN (the first
 * convolution's output).  Instead
 *   i = maxpool_argmax(x); y = maxpool_gather(x, i)        (in place of y = maxpool(x))
 *   dx = maxpool_scatter(i, dy)  or  maxpool_scatter_relu(i, y, dy)
 * so x dies after the forward pass and an i32 index of y's size is kept instead.
 * The values are the same bit for bit (kernels/conv.c). */
Graph *pass_pool_indices(const Graph *g, DiagSink *d)
{
    Graph *c = graph_clone(g);
    int n0 = g->nnodes;
    int32_t *order = gc_calloc((size_t)(2 * n0 + 1), sizeof *order);
    int32_t *first_of = gc_calloc((size_t)(n0 + 1), sizeof *first_of);   /* maxpool -> its argmax, or -1 */
    Graph *out = NULL;
    if (!c || !order || !first_of) { diag_plain(d, "out of memory"); goto done; }
    int changed = 0;
    for (int m = 0; m < n0; m++) {
        first_of[m] = -1;
        if (c->nodes[m].op != OP_MAXPOOL) continue;
        int32_t x = c->nodes[m].in[0];
        bool has_grad = false;
        for (int j = m + 1; j < n0; j++) {
            const Node *r = &c->nodes[j];
            if ((r->op == OP_MAXPOOL_GRAD || r->op == OP_MAXPOOL_GRAD_RELU) && r->in[0] == x && r->in[1] == m) has_grad = true;
        }
        if (!has_grad) continue;
        NodeAttr a = c->nodes[m].a;
        Loc loc = c->nodes[m].loc;
        const char *name = c->nodes[m].name;
        int32_t i = graph_add_inferred(c, OP_MAXPOOL_ARGMAX, &x, 1, loc, &a, NULL, d);
        int32_t in2[2] = { x, i };
        int32_t y = i < 0 ? -1 : graph_add_inferred(c, OP_MAXPOOL_GATHER, in2, 2, loc, &a, NULL, d);
        if (y < 0) goto done;
        c->nodes[y].name = name;
        first_of[m] = i;
        /* every reader of m reads y; the gradients read the index */
        for (int j = m + 1; j < n0; j++) {
            Node *r = &c->nodes[j];
            if ((r->op == OP_MAXPOOL_GRAD || r->op == OP_MAXPOOL_GRAD_RELU) && r->in[0] == x && r->in[1] == m) {
                int32_t *in = arena_alloc(&c->arena, 3 * sizeof *in);
                if (!in) { diag_plain(d, "out of memory"); goto done; }
                r->tshape = c->nodes[x].shape;
                if (r->op == OP_MAXPOOL_GRAD) {
                    in[0] = i, in[1] = r->in[2];
                    r->nin = 2;
                    r->op = OP_MAXPOOL_SCATTER;
                } else {
                    in[0] = i, in[1] = y, in[2] = r->in[2];
                    r->op = OP_MAXPOOL_SCATTER_RELU;
                }
                r->in = in;
                continue;
            }
            for (int k = 0; k < r->nin; k++)
                if (r->in[k] == m) r->in[k] = y;
        }
        for (int k = 0; k < c->noutputs; k++)
            if (c->outputs[k].node == m) c->outputs[k].node = y;
        if (c->logits == m) c->logits = y;
        changed++;
    }
    if (!changed) {
        out = c;
        c = NULL;
        goto done;
    }
    int no = 0;
    for (int m = 0; m < n0; m++) {
        if (first_of[m] >= 0) {
            order[no++] = first_of[m];
            order[no++] = first_of[m] + 1;   /* its gather, appended right after it */
        } else {
            order[no++] = m;
        }
    }
    out = graph_reorder(c, order, no, g->stage, d);
done:
    graph_free(c);
    gc_free(order);
    gc_free(first_of);
    return out;
}

/* A weight gradient's GEMM into its update, for memory and a pass less over the
 * gradient: an SGD, (not Nesterov) momentum, Adam, AdamW or RMSprop update whose
 * gradient is a matmul
 * read by nothing else and not an output becomes matmul_update(w, a, b), which makes
 * the gradient inside the update (exec/dispatch.c), so the gradient's buffer never
 * exists: SGD and momentum in one GEMM into w or the velocity, Adam (which reads the
 * gradient itself) a panel of rows at a time into scratch, each panel's rows of w, m
 * and v updated from it.  Only updates that run early (large gradients): they are
 * already placed after every reader of their parameter, and the fused node takes the
 * update's place, so the matmul's operands live until then; a small gradient's update
 * is in the update_all at the end, where its operands would have to live to.
 * Nesterov's update reads the gradient itself besides the velocity and keeps both ops
 * (Adam's panels would do for it too; no model here uses it).  The rounding differs
 * from the two ops apart (the GEMM accumulates into w or v; Adam's panels cut the GEMM
 * into other BLAS calls), so this is the one fusion that does not agree with the
 * interpreter bit for bit. */
Graph *pass_gemm_updates(const Graph *g, DiagSink *d)
{
    int n = g->nnodes;
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    bool ok = true;
    for (int u = 0; u < n && ok; u++) {
        Node *up = &c->nodes[u];
        if (up->op != OP_SGD_UPDATE && up->op != OP_ADAM_UPDATE && up->op != OP_ADAMW_UPDATE &&
            up->op != OP_RMSPROP_UPDATE && (up->op != OP_MOMENTUM_UPDATE || c->train.nesterov))
            continue;
        /* a clipped gradient is read by the clip_scale too (so not fused below): the
         * norm needs every gradient before the first update */
        if (!runs_early(c, up) || up->nin != 2) continue;
        int32_t m = up->in[1];
        const Node *mm = &c->nodes[m];
        if (mm->op != OP_MATMUL || r.uses[m] != 1 || !shape_eq(&mm->shape, &c->nodes[up->in[0]].shape)) continue;
        int32_t *in = arena_alloc(&c->arena, 3 * sizeof *in);
        if (!in) {
            diag_plain(d, "out of memory");
            ok = false;
            break;
        }
        in[0] = up->in[0];
        in[1] = mm->in[0];
        in[2] = mm->in[1];
        NodeAttr a = up->a;
        a.update.kind = (int)up->op;
        a.update.ta = mm->a.matmul.ta;
        a.update.tb = mm->a.matmul.tb;
        up->op = OP_MATMUL_UPDATE;
        up->a = a;
        up->in = in;
        up->nin = 3;
        r.keep[m] = false;
    }
    return rewrite_end(&r, ok, g->stage, d);
}

/* Does any node of c other than skip_a and skip_b read v (the parameter var if var >= 0,
 * else node v) at or after node `from`? */
static bool read_from(const Graph *c, int32_t v, int var, int32_t from, int32_t skip_a, int32_t skip_b)
{
    for (int32_t j = from; j < c->nnodes; j++) {
        if (j == skip_a || j == skip_b) continue;
        const Node *r = &c->nodes[j];
        for (int k = 0; k < r->nin; k++) {
            const Node *src = &c->nodes[r->in[k]];
            if (var >= 0 ? src->op == OP_PARAM && src->a.param.var == var : r->in[k] == v) return true;
        }
    }
    return false;
}

/* W's update from the gradient x^T dy, as pass_dense_backward can take it into its fused
 * node: matmul_update(w, x, dy) (transpose=a), or in update_all, a pair (w, g) with
 * g = matmul(x, dy) (transpose=a) read by nothing else.  SGD or plain momentum.  Sets
 * *u to the update node, *grad to the node that reads x and dy to make the gradient
 * (the update itself for matmul_update), *pair to the pair's index in update_all (or
 * -1); false if there is none. */
static bool update_from(const Graph *c, const int32_t *uses, int var, int32_t x, int32_t dy, int32_t *u,
                        int32_t *grad, int *pair)
{
    for (int32_t j = 0; j < c->nnodes; j++) {
        const Node *up = &c->nodes[j];
        if (up->op == OP_MATMUL_UPDATE && up->a.update.var == var) {
            *u = *grad = j;
            *pair = -1;
            return up->in[1] == x && up->in[2] == dy && up->a.update.ta && !up->a.update.tb &&
                   (up->a.update.kind == OP_SGD_UPDATE || (up->a.update.kind == OP_MOMENTUM_UPDATE && !c->train.nesterov));
        }
        if (up->op != OP_UPDATE_ALL) continue;
        for (int k = 0; k + 1 < up->nin; k += 2) {
            if (c->nodes[up->in[k]].a.param.var != var) continue;
            const Node *g = &c->nodes[up->in[k + 1]];
            OpKind kind = (OpKind)up->a.update.kind;
            *u = j;
            *grad = up->in[k + 1];
            *pair = k / 2;
            return g->op == OP_MATMUL && uses[*grad] == 1 && g->in[0] == x && g->in[1] == dy && g->a.matmul.ta &&
                   !g->a.matmul.tb && (kind == OP_SGD_UPDATE || (kind == OP_MOMENTUM_UPDATE && !c->train.nesterov));
        }
    }
    return false;
}

/* A dense layer's backward where its input x is a relu output, for memory:
 *   dx = matmul(dy, w) (transpose=b), read only by  unary_grad[relu](x, dx),  and
 *   w's update from x^T dy (update_from: matmul_update, or a small gradient's pair in
 *   update_all)
 * become matmul_grad_update(x, dy, w) in the mask's place, whose kernel writes the
 * masked gradient where x was (exec/dispatch.c): dx never has a buffer of its own, and
 * the output takes x's, which would otherwise be alive beside dx (nor, from
 * update_all, is the gradient kept to the end of the step).  Only where w's update can
 * move to the fused node (no other reader of w after the earlier of the two:
 * matmul_update already follows every reader of its parameter, see pass_early_updates, and
 * update_all comes last) and nothing reads x after it, nor is x an output: then the
 * planner can put the output over x.  After pass_gemm_updates, and off with it: SGD's
 * kernel rounds differently from the ops apart, and taking a gradient out of
 * update_all makes it inside the update as matmul_update does. */
Graph *pass_dense_backward(const Graph *g, DiagSink *d)
{
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    bool ok = true;
    for (int32_t m = 0; m < c->nnodes && ok; m++) {
        Node *mask = &c->nodes[m];
        if (mask->op != OP_UNARY_GRAD || mask->a.unary.op != OP_RELU) continue;
        int32_t x = mask->in[0], dx = mask->in[1];
        const Node *mm = &c->nodes[dx];
        if (mm->op != OP_MATMUL || mm->a.matmul.ta || !mm->a.matmul.tb || r.uses[dx] != 1 ||
            c->nodes[mm->in[1]].op != OP_PARAM || !shape_eq(&c->nodes[x].shape, &mm->shape))
            continue;
        int32_t dy = mm->in[0], w = mm->in[1], u, grad;
        int var = c->nodes[w].a.param.var, pair;
        if (!update_from(c, r.uses, var, x, dy, &u, &grad, &pair)) continue;
        bool out = x == c->train.minimize || x == c->logits;
        for (int k = 0; k < c->noutputs; k++) out |= c->outputs[k].node == x;
        if (out || read_from(c, w, var, u < m ? u : m, dx, u) || read_from(c, x, -1, m + 1, u, grad)) continue;
        Node *up = &c->nodes[u];
        int32_t *in = arena_alloc(&c->arena, 3 * sizeof *in);
        int32_t *rest = pair < 0 ? NULL : arena_alloc(&c->arena, (size_t)(up->nin > 2 ? up->nin - 2 : 1) * sizeof *rest);
        if (!in || (pair >= 0 && !rest)) {
            diag_plain(d, "out of memory");
            ok = false;
            break;
        }
        in[0] = x;
        in[1] = dy;
        in[2] = w;
        NodeAttr a = up->a;
        if (pair >= 0) {   /* out of update_all: the attributes its own update would have had */
            a.update.var = var;
            a.update.kind = up->a.update.kind;
            graph_state_vars(c, var, a.update.state);   /* SGD: none; momentum: the velocity */
            a.update.ta = true;
            a.update.tb = false;
            int nr = 0;
            for (int k = 0; k < up->nin; k++)
                if (k / 2 != pair) rest[nr++] = up->in[k];
            up->in = rest;
            up->nin = nr;
            if (nr < 2) r.keep[u] = false;   /* no pair left (at most the clip scale) */
        } else {
            r.keep[u] = false;
        }
        r.keep[dx] = false;
        r.keep[grad] = false;
        mask->op = OP_MATMUL_GRAD_UPDATE;
        mask->a = a;
        mask->in = in;
        mask->nin = 3;
        mask->loc = mm->loc;   /* the work is the layer's GEMMs: its line in a profile */
    }
    return rewrite_end(&r, ok, g->stage, d);
}

/* GEMM epilogues: a conv2d or matmul whose sole reader adds a bias vector over its last
 * axis, and optionally whose sum's sole reader is a unary function (directly, or
 * through a reshape read only by it), becomes one conv2d_bias_act / matmul_bias_act in
 * the last node's place (the add's, when a reshape stands between: the reshape then
 * reads the fused node and the function's readers read the reshape). */
Graph *pass_fuse_bias_act(const Graph *g, DiagSink *d)
{
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    int32_t *uses = r.uses;
    bool *keep = r.keep;
    bool ok = true;
    for (int i = 0; i < c->nnodes && ok; i++) {
        Node *n = &c->nodes[i];
        if (!keep[i] || (n->op != OP_CONV2D && n->op != OP_MATMUL)) continue;
        int32_t add = sole_consumer(c, uses, i);
        int32_t b = add >= 0 ? bias_of(c, add, i) : -1;
        if (b < 0) continue;
        int32_t last = add, act = -1, view = -1;
        float act_p = 0;
        int32_t next = sole_consumer(c, uses, add);
        /* a dense layer over [B, T, C] is reshape, matmul, add, reshape: its activation
         * reads the reshape, a view, which then reads the fused node instead */
        if (next >= 0 && c->nodes[next].op == OP_RESHAPE) {
            int32_t after = sole_consumer(c, uses, next);
            if (after >= 0 && is_act(c->nodes[after].op)) {
                view = next;
                next = after;
            }
        }
        if (next >= 0 && is_act(c->nodes[next].op)) {
            act = (int)c->nodes[next].op;
            act_p = c->nodes[next].a.unary.p;
            last = view >= 0 ? add : next;
        } else {
            view = -1;
        }
        /* the fused node replaces `last`; the gemm and the add go */
        Node *f = &c->nodes[last];
        Shape y = f->shape;
        const char *name = f->name;
        int32_t ins[3] = { n->in[0], n->in[1], b };
        int32_t *in = arena_alloc(&c->arena, sizeof ins);
        if (!in) {
            diag_plain(d, "out of memory");
            ok = false;
            break;
        }
        memcpy(in, ins, sizeof ins);
        NodeAttr a = n->a;
        if (n->op == OP_CONV2D) {
            f->op = OP_CONV2D_BIAS_ACT;
            a.win.act = act;
            a.win.act_p = act_p;
        } else {
            f->op = OP_MATMUL_BIAS_ACT;
            a.matmul.act = act;
            a.matmul.act_p = act_p;
        }
        f->a = a;
        f->in = in;
        f->nin = 3;
        f->shape = y;
        f->name = name ? name : n->name;
        f->loc = n->loc;
        keep[i] = false;
        if (last != add) keep[add] = false;
        if (view >= 0) {
            keep[next] = false;
            r.alias[next] = view;
            if (!c->nodes[view].name) c->nodes[view].name = c->nodes[next].name;
        }
    }
    return rewrite_end(&r, ok, g->stage, d);
}

/* A convolution read only by a max pool's argmax and gather (pool_indices' pattern, a
 * training step) becomes one conv2d_maxpool_argmax in the argmax's place: the executor
 * makes the convolution band by band in scratch as for conv2d_maxpool and writes only
 * the pooled values and the index, so the full-resolution output (the MNIST CNN's
 * first: 25.7 MB at batch 256) is neither written nor read back twice.  The gather
 * becomes maxpool_values, a copy of the values out of the fused node's output; the
 * scatters read the index there, and maxpool_scatter_relu its y there too.  The same
 * bits as the ops apart (exec/dispatch.c runs them apart inside the node where the band
 * by band kernel would not give them). */
Graph *pass_conv_pool_argmax(const Graph *g, DiagSink *d)
{
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    bool ok = true;
    for (int32_t a = 0; a < c->nnodes && ok; a++) {
        Node *am = &c->nodes[a];
        if (am->op != OP_MAXPOOL_ARGMAX) continue;
        int32_t x = am->in[0], gather = -1;
        const Node *conv = &c->nodes[x];
        if ((conv->op != OP_CONV2D && conv->op != OP_CONV2D_BIAS_ACT) || conv->dtype != DT_F32 || r.uses[x] != 2 ||
            x == c->logits)
            continue;
        for (int32_t j = a + 1; j < c->nnodes && gather < 0; j++)
            if (c->nodes[j].op == OP_MAXPOOL_GATHER && c->nodes[j].in[0] == x && c->nodes[j].in[1] == a) gather = j;
        if (gather < 0) continue;
        if (!take_conv(c, am, conv, OP_CONV2D_MAXPOOL_ARGMAX, d)) {
            ok = false;
            break;
        }
        Node *gn = &c->nodes[gather];
        gn->op = OP_MAXPOOL_VALUES;
        gn->nin = 1;   /* in[0] = a: the gather's own array, shortened */
        gn->in[0] = a;
        for (int32_t j = gather + 1; j < c->nnodes; j++)
            if (c->nodes[j].op == OP_MAXPOOL_SCATTER_RELU && c->nodes[j].in[0] == a) c->nodes[j].in[1] = a;
        r.keep[x] = false;
        ok = graph_infer_node(c, a, d) && graph_infer_node(c, gather, d);
    }
    return rewrite_end(&r, ok, g->stage, d);
}

/* The scatter of a pooled gradient is as large as the convolution's output (large.net's
 * first layer: 66 MB at batch 4), and fifteen of every sixteen of its elements are
 * zeros under a 4x4 pool; a first layer's only readers of it are its filter gradient
 * and its bias gradient, which then read it whole.  Where the windows neither overlap
 * nor pad (each cell has one window at most) and nothing else reads the scatter, those
 * two read the pool's index and gradient instead: conv2d_grad_filter_pooled(x, a, dy)
 * and sum_to_pooled(a, dy), a the conv2d_maxpool_argmax (its y, for relu's mask, and
 * its index), a.convpool its windows, pool.act OP_RELU for the scatter's relu mask.
 * The same sums in the same order, their zero terms left out: the same bits for a
 * finite input (kernels/kern.h; a zero times an infinity would be a NaN there).
 * The filter gradient only through windows of POOLED_MIN_CELLS cells or more: its terms
 * are found cell by cell, and through a 2x2 pool (a quarter of the cells) that cost more
 * than it spared: the MNIST CNN's filter gradient took 15-18 ms against 2.2 (batch 256,
 * one thread); large's conv1 through a 4x4 pool 3.6 + 10.5 ms against 7.4 + 15.5 + a
 * dense sum's 7 (batch 4).  Through smaller windows the bias gradient alone reads the
 * pool (the scatter stays, for the filter gradient): bench/convbench --ops s, the MNIST
 * CNN's conv1 at batch 256 on one thread, 0.9-1.0 ms against the dense sum's 2.8-3.6. */
enum { POOLED_MIN_CELLS = 16 };

/* Windows that neither overlap nor pad: every cell has one window at most. */
static bool pooled_window(const WinAttr *w)
{
    return w->kh == w->sh && w->kw == w->sw && w->pt == 0 && w->pb == 0 && w->pl == 0 && w->pr == 0;
}

/* Does reader r of scatter s read it as a gradient pooled_grads takes (x: the
 * convolution's input)? */
static bool pooled_reader(const Graph *c, const Node *r, int32_t s, int32_t x)
{
    if (r->op == OP_CONV2D_GRAD_FILTER) return r->in[1] == s && r->in[0] == x;
    return r->op == OP_SUM_TO && r->shape.rank == 1 && r->shape.d[0].v <= 1024 &&
           dim_eq(r->shape.d[0], c->nodes[s].shape.d[c->nodes[s].shape.rank - 1]);
}

Graph *pass_pooled_grads(const Graph *g, DiagSink *d)
{
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    bool ok = true;
    for (int32_t s = 0; s < c->nnodes && ok; s++) {
        const Node *sn = &c->nodes[s];
        if (sn->op != OP_MAXPOOL_SCATTER && sn->op != OP_MAXPOOL_SCATTER_RELU) continue;
        const int32_t a = sn->in[0], dy = sn->in[sn->nin - 1];
        const bool relu = sn->op == OP_MAXPOOL_SCATTER_RELU;
        if (c->nodes[a].op != OP_CONV2D_MAXPOOL_ARGMAX || (relu && sn->in[1] != a) || !pooled_window(&sn->a.win))
            continue;
        const int32_t x = c->nodes[a].in[0];
        int readers = 0, filters = 0;
        for (int32_t j = s + 1; j < c->nnodes; j++)
            for (int k = 0; k < c->nodes[j].nin; k++)
                if (c->nodes[j].in[k] == s) {
                    if (!pooled_reader(c, &c->nodes[j], s, x)) readers = -c->nnodes;
                    readers++;
                    filters += c->nodes[j].op == OP_CONV2D_GRAD_FILTER;
                }
        /* all of the scatter's readers, or (small windows, or another reader) its bias
         * gradients alone */
        const bool whole = readers == r.uses[s] && filters > 0 && sn->a.win.kh * sn->a.win.kw >= POOLED_MIN_CELLS;
        for (int32_t j = s + 1; j < c->nnodes && ok; j++) {
            Node *rn = &c->nodes[j];
            if (rn->nin < 1 || (rn->in[0] != s && (rn->nin < 2 || rn->in[1] != s))) continue;
            if (!pooled_reader(c, rn, s, x) || (!whole && rn->op != OP_SUM_TO)) continue;
            const bool filter = rn->op == OP_CONV2D_GRAD_FILTER;
            int32_t *in = arena_alloc(&c->arena, 3 * sizeof *in);
            if (!in) {
                diag_plain(d, "out of memory");
                ok = false;
                break;
            }
            NodeAttr at;
            memset(&at, 0, sizeof at);
            at.convpool = c->nodes[a].a.convpool;
            at.convpool.pool = sn->a.win;
            at.convpool.pool.act = relu ? OP_RELU : -1;
            rn->tshape = rn->shape;
            if (filter) {
                in[0] = x, in[1] = a, in[2] = dy;
                rn->nin = 3;
                rn->op = OP_CONV2D_GRAD_FILTER_POOLED;
            } else {
                in[0] = a, in[1] = dy;
                rn->nin = 2;
                rn->op = OP_SUM_TO_POOLED;
            }
            rn->in = in;
            rn->a = at;
            ok = graph_infer_node(c, j, d);
        }
        if (whole) r.keep[s] = false;
    }
    return rewrite_end(&r, ok, g->stage, d);
}

/* A relu gradient whose incoming gradient is a maxpool gradient read by nothing else,
 * on the same tensor (relu's output is the pool's input: the mask is x > 0 on it),
 * becomes one maxpool_grad_relu. */
Graph *pass_fuse_maxpool_grad_relu(const Graph *g, DiagSink *d)
{
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    bool ok = true;
    for (int i = 0; i < c->nnodes && ok; i++) {
        Node *n = &c->nodes[i];
        if (n->op != OP_UNARY_GRAD || n->a.unary.op != OP_RELU) continue;
        int32_t m = n->in[1];
        const Node *mg = &c->nodes[m];
        if (mg->op != OP_MAXPOOL_GRAD || r.uses[m] != 1 || mg->in[0] != n->in[0]) continue;
        NodeAttr a = mg->a;
        int32_t *in = arena_alloc(&c->arena, 3 * sizeof *in);
        if (!in) {
            diag_plain(d, "out of memory");
            ok = false;
            break;
        }
        memcpy(in, mg->in, 3 * sizeof *in);
        n->op = OP_MAXPOOL_GRAD_RELU;
        n->a = a;
        n->in = in;
        n->nin = 3;
        r.keep[m] = false;
    }
    return rewrite_end(&r, ok, g->stage, d);
}

/* Causal attention's scores: a causal_mask read only by a softmax over the last axis
 * becomes one softmax_causal, and a softmax_grad over the last axis read only by a
 * causal_mask (the mask's gradient) one softmax_grad_causal.  Each row is masked and
 * normalized (or differentiated and masked) in one pass while in cache, with the bits
 * of the two ops. */
Graph *pass_fuse_masked_softmax(const Graph *g, DiagSink *d)
{
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    for (int i = 0; i < c->nnodes; i++) {
        Node *n = &c->nodes[i];
        bool last_axis = n->a.axes.after == 0 && n->a.axes.n <= 1;
        if (n->op == OP_SOFTMAX && last_axis) {
            int32_t m = n->in[0];
            const Node *mask = &c->nodes[m];
            if (mask->op != OP_CAUSAL_MASK || r.uses[m] != 1) continue;
            n->op = OP_SOFTMAX_CAUSAL;
            n->in[0] = mask->in[0];
            n->a = (NodeAttr){ .mask = mask->a.mask };
            r.keep[m] = false;
        } else if (n->op == OP_CAUSAL_MASK) {
            int32_t s = n->in[0];
            const Node *sg = &c->nodes[s];
            if (sg->op != OP_SOFTMAX_GRAD || r.uses[s] != 1 || sg->a.axes.after != 0 || sg->a.axes.n > 1) continue;
            int32_t *in = arena_alloc(&c->arena, 2 * sizeof *in);
            if (!in) {
                diag_plain(d, "out of memory");
                return rewrite_end(&r, false, g->stage, d);
            }
            memcpy(in, sg->in, 2 * sizeof *in);
            n->op = OP_SOFTMAX_GRAD_CAUSAL;
            n->in = in;
            n->nin = 2;
            r.keep[s] = false;
        }
    }
    return rewrite_end(&r, true, g->stage, d);
}

/* A residual join in the backward pass: add(r, layer_norm_grad(x, gamma, dy)), the
 * layer norm's gradient read by the add alone and of the add's shape, becomes one
 * layer_norm_grad_add(r, x, gamma, dy), which adds r to each row of dx as it makes it
 * (the add's bits: the gradient rounded, then r added), in place over r as the add
 * was.  The add's pass over three arrays and its call go: charlm has six. */
Graph *pass_fuse_ln_grad_add(const Graph *g, DiagSink *d)
{
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    for (int i = 0; i < c->nnodes; i++) {
        Node *n = &c->nodes[i];
        if (n->op != OP_ADD || n->nin != 2) continue;
        int32_t ln = -1, res = -1;
        for (int k = 1; k >= 0 && ln < 0; k--) {   /* either side; the later operand first */
            const Node *m = &c->nodes[n->in[k]];
            if (m->op == OP_LAYER_NORM_GRAD && r.uses[n->in[k]] == 1 && shape_eq(&m->shape, &n->shape) &&
                shape_eq(&c->nodes[n->in[1 - k]].shape, &n->shape) && n->in[0] != n->in[1]) {
                ln = n->in[k];
                res = n->in[1 - k];
            }
        }
        if (ln < 0) continue;
        int32_t *in = arena_alloc(&c->arena, 4 * sizeof *in);
        if (!in) {
            diag_plain(d, "out of memory");
            return rewrite_end(&r, false, g->stage, d);
        }
        const Node *m = &c->nodes[ln];
        in[0] = res;
        memcpy(in + 1, m->in, 3 * sizeof *in);
        n->op = OP_LAYER_NORM_GRAD_ADD;
        n->a = m->a;
        n->in = in;
        n->nin = 4;
        r.keep[ln] = false;
    }
    return rewrite_end(&r, true, g->stage, d);
}

/* All optimizer updates of the step that stay at the end (one kind per step; a large
 * gradient's runs early, see pass_early_updates) become one update_all in place of the last
 * of them: they run last anyway, and one op updates every parameter in one pass over
 * the pool. */
Graph *pass_fuse_update_all(const Graph *g, DiagSink *d)
{
    Rewrite r;
    if (!rewrite_begin(&r, g, d)) return NULL;
    Graph *c = r.c;
    bool *keep = r.keep, ok = true;
    int nup = 0, last_up = -1;
    OpKind kind = OP_COUNT;
    for (int i = 0; i < c->nnodes; i++) {
        const Node *n = &c->nodes[i];
        if (n->op == OP_UPDATE_ALL || !op_has(n->op, OPT_UPDATE) || n->op == OP_MATMUL_UPDATE ||
            n->op == OP_MATMUL_GRAD_UPDATE || n->op == OP_BATCH_NORM_UPDATE || runs_early(c, n))
            continue;
        if (kind != OP_COUNT && n->op != kind) { nup = 0; break; }   /* mixed kinds: leave them */
        kind = n->op;
        nup++;
        last_up = i;
    }
    if (nup > 1) {
        /* every update of a step is clipped by the same clip_scale or none is: one input
         * after the pairs */
        int32_t scale = c->nodes[last_up].nin > 2 ? c->nodes[last_up].in[2] : -1;
        int32_t *in = arena_alloc(&c->arena, (size_t)(2 * nup + 1) * sizeof *in);
        if (!in) {
            diag_plain(d, "out of memory");
            ok = false;
        } else {
            int k = 0;
            for (int i = 0; i < c->nnodes; i++) {
                const Node *n = &c->nodes[i];
                if (n->op != kind || runs_early(c, n)) continue;
                in[k++] = n->in[0];
                in[k++] = n->in[1];
                if (i != last_up) keep[i] = false;
            }
            if (scale >= 0) in[k++] = scale;
            Node *f = &c->nodes[last_up];
            f->op = OP_UPDATE_ALL;
            f->in = in;
            f->nin = k;
            memset(&f->a, 0, sizeof f->a);
            f->a.update.var = -1;
            f->a.update.state[0] = f->a.update.state[1] = -1;
            f->a.update.kind = (int)kind;
        }
    }
    return rewrite_end(&r, ok, g->stage, d);
}

