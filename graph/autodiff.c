/* Reverse-mode differentiation as a graph pass.
 *
 * The forward graph is copied, then walked from the loss back to the parameters;
 * each op's gradient rule (a table indexed by OpKind) emits ordinary ops that map the
 * gradient of its output to gradients of its inputs.  A value used twice receives the
 * sum of its gradients.  Only nodes that lie on a path from a parameter to the loss
 * get gradients.  Last come the optimizer updates, one per parameter, which write the
 * parameters and their state in place: they are the last ops of the step, so every
 * read of a parameter (forward or backward) happens before it is written. */
#include <assert.h>
#include <string.h>
#include "graph/passes.h"

typedef struct AD {
    Graph *g;
    DiagSink *d;
    int32_t *grad;     /* gradient node of each forward node, or -1 */
    bool *needs;       /* on a path from a parameter to the loss */
    int32_t cur;       /* forward node being differentiated (for n->fwd) */
    int nfwd;          /* the forward graph's nodes: those below it */
    bool failed;
} AD;

typedef void (*GradRule)(AD *ad, int32_t id, int32_t dy);

static int32_t emit(AD *ad, OpKind op, const int32_t *in, int nin, const NodeAttr *attr, const Shape *tshape)
{
    if (ad->failed) return -1;
    Loc loc = ad->g->nodes[ad->cur].loc;
    int32_t id = graph_add_inferred(ad->g, op, in, nin, loc, attr, tshape, ad->d);
    if (id < 0) { ad->failed = true; return -1; }
    ad->g->nodes[id].fwd = ad->cur;
    return id;
}

static int32_t emit1(AD *ad, OpKind op, int32_t a) { return emit(ad, op, &a, 1, NULL, NULL); }
static int32_t emit2(AD *ad, OpKind op, int32_t a, int32_t b)
{
    int32_t in[2] = { a, b };
    return emit(ad, op, in, 2, NULL, NULL);
}

static const Node *N(AD *ad, int32_t id) { return &ad->g->nodes[id]; }

/* Adds `dx` into the gradient of forward node x. */
static void accum(AD *ad, int32_t x, int32_t dx)
{
    if (dx < 0 || !ad->needs[x]) return;
    if (ad->grad[x] < 0) ad->grad[x] = dx;
    else ad->grad[x] = emit2(ad, OP_ADD, ad->grad[x], dx);
}

/* The adjoint of broadcasting: sums dy down to the shape of x. */
static int32_t unbroadcast(AD *ad, int32_t dy, int32_t x)
{
    if (dy < 0) return -1;
    Shape xs = N(ad, x)->shape;
    if (shape_eq(&xs, &N(ad, dy)->shape)) return dy;
    return emit(ad, OP_SUM_TO, &dy, 1, NULL, &xs);
}

static void g_none(AD *ad, int32_t id, int32_t dy) { (void)ad; (void)id; (void)dy; }

static void g_add(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t a = n->in[0], b = n->in[1];
    if (ad->needs[a]) accum(ad, a, unbroadcast(ad, dy, a));
    if (ad->needs[b]) accum(ad, b, unbroadcast(ad, n->op == OP_SUB ? emit1(ad, OP_NEG, dy) : dy, b));
}

static void g_mul(AD *ad, int32_t id, int32_t dy)
{
    int32_t a = N(ad, id)->in[0], b = N(ad, id)->in[1];
    if (ad->needs[a]) accum(ad, a, unbroadcast(ad, emit2(ad, OP_MUL, dy, b), a));
    if (ad->needs[b]) accum(ad, b, unbroadcast(ad, emit2(ad, OP_MUL, dy, a), b));
}

static void g_div(AD *ad, int32_t id, int32_t dy)
{
    int32_t a = N(ad, id)->in[0], b = N(ad, id)->in[1];
    if (ad->needs[a]) accum(ad, a, unbroadcast(ad, emit2(ad, OP_DIV, dy, b), a));
    if (ad->needs[b]) {
        /* d(a/b)/db = -(a/b)/b */
        int32_t t = emit2(ad, OP_MUL, dy, emit2(ad, OP_DIV, id, b));
        accum(ad, b, unbroadcast(ad, emit1(ad, OP_NEG, t), b));
    }
}

/* Any elementwise unary function: unary_grad(v, dy), v its input or its output as its
 * gradient reads (util/elemwise.def).  Negation's gradient is a negation of dy: no
 * value of the forward pass to keep. */
static void g_unary(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    if (n->op == OP_NEG) {
        accum(ad, n->in[0], emit1(ad, OP_NEG, dy));
        return;
    }
    NodeAttr a = { .unary = { n->op, n->a.unary.p } };
    int32_t in[2] = { op_info[n->op].reads == EW_READS_X ? n->in[0] : id, dy };
    accum(ad, n->in[0], emit(ad, OP_UNARY_GRAD, in, 2, &a, NULL));
}

static void g_rows(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    NodeAttr a = n->a;   /* the axis */
    int32_t in[2] = { id, dy };
    accum(ad, n->in[0], emit(ad, n->op == OP_SOFTMAX ? OP_SOFTMAX_GRAD : OP_LOG_SOFTMAX_GRAD, in, 2, &a, NULL));
}

/* matmul and batch_matmul (the same rule over the last two axes) */
static void g_matmul(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    OpKind op = n->op;
    int32_t A = n->in[0], B = n->in[1];
    bool ta = n->a.matmul.ta, tb = n->a.matmul.tb;
    if (ad->needs[A]) {
        NodeAttr at = { .matmul = { ta ? tb : false, ta ? true : !tb } };
        int32_t in[2] = { ta ? B : dy, ta ? dy : B };
        accum(ad, A, emit(ad, op, in, 2, &at, NULL));
    }
    if (ad->needs[B]) {
        NodeAttr at = { .matmul = { tb ? true : !ta, tb ? ta : false } };
        int32_t in[2] = { tb ? dy : A, tb ? A : dy };
        accum(ad, B, emit(ad, op, in, 2, &at, NULL));
    }
}

static void g_conv2d(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t x = n->in[0], w = n->in[1];
    NodeAttr a = n->a;
    if (ad->needs[x]) {
        Shape xs = N(ad, x)->shape;
        int32_t in[2] = { dy, w };
        accum(ad, x, emit(ad, OP_CONV2D_GRAD_INPUT, in, 2, &a, &xs));
    }
    if (ad->needs[w]) {
        Shape ws = N(ad, w)->shape;
        int32_t in[2] = { x, dy };
        accum(ad, w, emit(ad, OP_CONV2D_GRAD_FILTER, in, 2, &a, &ws));
    }
}

static void g_pool(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t x = n->in[0];
    NodeAttr a = n->a;
    Shape xs = N(ad, x)->shape;
    if (n->op == OP_MAXPOOL) {
        int32_t in[3] = { x, id, dy };
        accum(ad, x, emit(ad, OP_MAXPOOL_GRAD, in, 3, &a, NULL));
    } else if (n->op == OP_AVGPOOL) {
        accum(ad, x, emit(ad, OP_AVGPOOL_GRAD, &dy, 1, &a, &xs));
    } else {
        accum(ad, x, emit(ad, OP_GLOBAL_AVGPOOL_GRAD, &dy, 1, NULL, &xs));
    }
}

static void g_reshape(AD *ad, int32_t id, int32_t dy)
{
    int32_t x = N(ad, id)->in[0];
    Shape xs = N(ad, x)->shape;
    accum(ad, x, emit(ad, OP_RESHAPE, &dy, 1, NULL, &xs));
}

static void g_concat(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int axis = n->a.concat.axis;
    Dim off = { 0, -1 };
    for (int k = 0; k < n->nin; k++) {
        int32_t x = n->in[k];
        Dim len = N(ad, x)->shape.d[axis];   /* along the batch, a multiple of B: every input's */
        if (ad->needs[x]) {
            NodeAttr a = { .slice = { .axis = axis, .off = off.v, .len = len.v } };
            if (len.sym >= 0) {
                a.slice.soff = (Dim){ off.v, len.sym };
                a.slice.slen = len;
            }
            accum(ad, x, emit(ad, OP_SLICE, &dy, 1, &a, NULL));
        }
        off.v += len.v;
    }
}

static void g_dropout(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    NodeAttr a = n->a;
    accum(ad, n->in[0], emit(ad, OP_DROPOUT_GRAD, &dy, 1, &a, NULL));
}

static void g_cross_entropy(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t in[3] = { n->in[0], n->in[1], dy };
    NodeAttr a = n->a;   /* label smoothing */
    accum(ad, n->in[0], emit(ad, OP_CROSS_ENTROPY_GRAD, in, 3, &a, NULL));
}

static void g_mse(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t in[3] = { n->in[0], n->in[1], dy };
    int32_t da = emit(ad, OP_MSE_GRAD, in, 3, NULL, NULL);
    accum(ad, n->in[0], da);
    if (ad->needs[n->in[1]]) accum(ad, n->in[1], emit1(ad, OP_NEG, da));
}

/* ---- the transformer ops (issue 14) ---------------------------------------------- */

static int32_t zero(AD *ad) { return emit(ad, OP_CONST, NULL, 0, &(NodeAttr){ .cnst = { 0.0f } }, NULL); }

/* where(cond, dy, 0) summed down to x: dy where cond holds (or where it does not). */
static void accum_where(AD *ad, int32_t x, int32_t cond, int32_t dy, bool where_true)
{
    if (!ad->needs[x]) return;
    int32_t z = zero(ad);
    int32_t in[3] = { cond, where_true ? dy : z, where_true ? z : dy };
    accum(ad, x, unbroadcast(ad, emit(ad, OP_WHERE, in, 3, NULL, NULL), x));
}

/* pow(a, b): da = dy b a^(b-1), db = dy a^b log(a) */
static void g_pow(AD *ad, int32_t id, int32_t dy)
{
    int32_t a = N(ad, id)->in[0], b = N(ad, id)->in[1];
    if (ad->needs[a]) {
        int32_t one = emit(ad, OP_CONST, NULL, 0, &(NodeAttr){ .cnst = { 1.0f } }, NULL);
        int32_t t = emit2(ad, OP_POW, a, emit2(ad, OP_SUB, b, one));
        accum(ad, a, unbroadcast(ad, emit2(ad, OP_MUL, emit2(ad, OP_MUL, dy, b), t), a));
    }
    if (ad->needs[b]) accum(ad, b, unbroadcast(ad, emit2(ad, OP_MUL, emit2(ad, OP_MUL, dy, id), emit1(ad, OP_LOG, a)), b));
}

/* max(a, b) picks a where a >= b (ties: a), min(a, b) where a <= b: the picked operand
 * gets dy, the other 0 (as clip's gradient, min(max(x, lo), hi), passes dy at a bound). */
static void g_max(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t a = n->in[0], b = n->in[1];
    if (!ad->needs[a] && !ad->needs[b]) return;
    int32_t other = emit2(ad, n->op == OP_MAX ? OP_LESS : OP_GREATER, a, b);   /* where b is picked */
    accum_where(ad, a, other, dy, false);
    accum_where(ad, b, other, dy, true);
}
#define g_min g_max
/* masks: no gradient */
#define g_greater g_none
#define g_less g_none

static void g_where(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    accum_where(ad, n->in[1], n->in[0], dy, true);
    accum_where(ad, n->in[2], n->in[0], dy, false);
}

static void g_transpose(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    NodeAttr a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < n->shape.rank; i++) a.transpose.perm[n->a.transpose.perm[i]] = (int8_t)i;
    accum(ad, n->in[0], emit(ad, OP_TRANSPOSE, &dy, 1, &a, NULL));
}

/* A slice's gradient: its piece in zeros (slice_grad).  Where x's gradient so far is a
 * slice_grad along the same axis (split's other parts), the sum is one slice_grad of
 * all the pieces (up to SLICE_GRAD_MAX, in order of offset), not an add of padded copies: a copy of
 * each piece when they tile the axis.  The earlier one is then dead unless something
 * else reads it. */
static void g_slice(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t x = n->in[0], prev = ad->grad[x];
    Shape xs = N(ad, x)->shape;
    NodeAttr a;
    memset(&a, 0, sizeof a);
    a.pieces.axis = n->a.slice.axis;
    int32_t in[SLICE_GRAD_MAX];
    int k = 0;
    if (prev >= 0 && N(ad, prev)->op == OP_SLICE_GRAD && N(ad, prev)->a.pieces.axis == a.pieces.axis &&
        N(ad, prev)->nin < SLICE_GRAD_MAX) {
        a = N(ad, prev)->a;
        for (; k < N(ad, prev)->nin; k++) in[k] = N(ad, prev)->in[k];
        ad->grad[x] = -1;
    }
    int nin = k + 1;
    for (; k > 0 && a.pieces.off[k - 1] > n->a.slice.off; k--) {   /* in order of offset */
        in[k] = in[k - 1];
        a.pieces.off[k] = a.pieces.off[k - 1];
    }
    in[k] = dy;
    a.pieces.off[k] = n->a.slice.off;
    a.pieces.n++;
    accum(ad, x, emit(ad, OP_SLICE_GRAD, in, nin, &a, &xs));
}

static void g_reduce(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t x = n->in[0];
    NodeAttr a = n->a;
    if (n->op == OP_REDUCE_MAX) {
        int32_t in[3] = { x, id, dy };
        accum(ad, x, emit(ad, OP_REDUCE_MAX_GRAD, in, 3, &a, NULL));
        return;
    }
    Shape xs = N(ad, x)->shape;
    a.axes.mean = n->op == OP_REDUCE_MEAN;
    accum(ad, x, emit(ad, OP_EXPAND, &dy, 1, &a, &xs));
}

static void g_causal_mask(AD *ad, int32_t id, int32_t dy)
{
    accum(ad, N(ad, id)->in[0], emit(ad, OP_CAUSAL_MASK, &dy, 1, &(NodeAttr){ .mask = { 0.0f } }, NULL));
}

/* Only the table has a gradient: dy's rows added into the rows of their ids. */
static void g_embedding(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t t = n->in[1];
    Shape ts = N(ad, t)->shape;
    int32_t in[2] = { n->in[0], dy };
    accum(ad, t, emit(ad, OP_EMBEDDING_GRAD, in, 2, NULL, &ts));
}

static void g_layer_norm(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t x = n->in[0], gamma = n->in[1], beta = n->in[2];
    NodeAttr a = n->a;
    if (ad->needs[x]) {
        int32_t in[3] = { x, gamma, dy };
        accum(ad, x, emit(ad, OP_LAYER_NORM_GRAD, in, 3, &a, NULL));
    }
    if (ad->needs[gamma]) {
        Shape gs = N(ad, gamma)->shape;
        int32_t in[2] = { x, dy };
        accum(ad, gamma, emit(ad, OP_LAYER_NORM_GRAD_SCALE, in, 2, &a, &gs));
    }
    if (ad->needs[beta]) accum(ad, beta, unbroadcast(ad, dy, beta));
}

static void g_bce(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t in[3] = { n->in[0], n->in[1], dy };
    for (int k = 0; k < 2; k++)
        if (ad->needs[n->in[k]]) {
            NodeAttr a = { .loss = { .wrt_target = k == 1 } };
            accum(ad, n->in[k], emit(ad, OP_BCE_LOGITS_GRAD, in, 3, &a, NULL));
        }
}

/* Batch norm in training (graph/bnorm.c): its backward in two passes over the data,
 * the [2, C] rows of dgamma and dbeta from x, the batch's statistics and dy, then dx,
 * which takes in the path through the statistics (so they get no gradient of their
 * own).  The update of the running statistics is part of the training step as the
 * backward is, so it is emitted here, once per layer, from the batch's statistics. */
static void g_batch_norm(AD *ad, int32_t id, int32_t dy)
{
    const Node *n = N(ad, id);
    int32_t x = n->in[0], st = n->in[1], gamma = n->in[2], beta = n->in[3], mm = n->in[4], mv = n->in[5];
    NodeAttr a = { .bn = n->a.bn };
    Shape xs = N(ad, x)->shape, cs = N(ad, gamma)->shape;
    assert(N(ad, mm)->op == OP_PARAM && N(ad, mv)->op == OP_PARAM);
    NodeAttr u = { .update = { .var = N(ad, mm)->a.param.var, .state = { N(ad, mv)->a.param.var, -1 },
                               .kind = OP_BATCH_NORM_UPDATE, .momentum = a.bn.momentum } };
    int32_t in_p[3] = { x, st, dy };
    int32_t p = emit(ad, OP_BATCH_NORM_GRAD_PARAMS, in_p, 3, &a, NULL);
    if (ad->needs[x]) {
        int32_t in[5] = { dy, x, st, gamma, p };
        accum(ad, x, emit(ad, OP_BATCH_NORM_GRAD, in, 5, &a, NULL));
    }
    for (int k = 0; k < 2; k++) {   /* row 0 is gamma's gradient, row 1 beta's */
        int32_t v = k == 0 ? gamma : beta;
        if (!ad->needs[v]) continue;
        NodeAttr sa = { .slice = { 0, k, 1 } };
        int32_t row = emit(ad, OP_SLICE, &p, 1, &sa, NULL);
        accum(ad, v, row < 0 ? -1 : emit(ad, OP_RESHAPE, &row, 1, NULL, &cs));
    }
    int32_t in_u[2] = { mm, st };
    emit(ad, OP_BATCH_NORM_UPDATE, in_u, 2, &u, &xs);
}

/* Subtraction's rule is addition's (it negates the second operand's gradient). */
#define g_sub g_add
/* Ops made by passes after autodiff (gradients, updates, fused ops): no rule, no
 * second order. */
#define g_internal NULL

/* One rule per op, named by its row of the op table. */
static const GradRule rules[OP_COUNT] = {
#define OP(e, name, arity, traits, shape, grad, kernel) [OP_##e] = g_##grad,
#include "graph/ops.def"
#undef OP
};

bool autodiff_has_rule(OpKind op) { return rules[op] != NULL; }

static int add_state(Graph *g, int param, const char *suffix)
{
    char name[300];
    snprintf(name, sizeof name, "%s:%s", g->vars[param].name, suffix);
    int v = graph_add_var(g, name, g->vars[param].shape, INIT_ZEROS, g->vars[param].loc);
    if (v >= 0) {
        g->vars[v].role = VAR_STATE;
        g->vars[v].of = param;
    }
    return v;
}

/* ---- the optimizer's part of the step (issue 14) --------------------------------------- */

/* The factor every update multiplies its gradient by when the step clips them: one
 * clip_scale over the gradients gsum[v] (those >= 0), after the last of them; -1 when
 * there is none. */
static int32_t clip_scale(AD *ad, const int32_t *gsum, int nvars)
{
    int32_t *in = gc_calloc((size_t)(nvars ? nvars : 1), sizeof *in);
    int n = 0;
    if (!in) { ad->failed = true; diag_plain(ad->d, "out of memory"); return -1; }
    for (int v = 0; v < nvars; v++)
        if (gsum[v] >= 0) in[n++] = gsum[v];
    int32_t s = -1;
    if (n > 0) {
        ad->cur = ad->g->train.minimize;
        s = emit(ad, OP_CLIP_SCALE, in, n, &(NodeAttr){ .clip = { ad->g->train.clip_norm } }, NULL);
        if (s >= 0) ad->g->nodes[s].loc = ad->g->train.loc;   /* the train block says clip_norm */
    }
    gc_free(in);
    return s;
}

/* Parameter var v's update from its gradient (times scale, when >= 0), with the state
 * vars its optimizer keeps, named as PyTorch's optimizers name their state (Keras' for
 * the older two). */
static void emit_update(AD *ad, int v, int32_t pnode, int32_t grad, int32_t scale)
{
    Graph *g = ad->g;
    const TrainSpec *t = &g->train;
    NodeAttr a = { .update = { .var = v, .state = { -1, -1, -1 } } };
    OpKind op = OP_SGD_UPDATE;
    const char *names[OPTIM_MAX_STATE] = { NULL, NULL, NULL };
    switch (t->optim) {
    case OPTIM_ADAM: case OPTIM_ADAMW:
        op = t->optim == OPTIM_ADAM ? OP_ADAM_UPDATE : OP_ADAMW_UPDATE;
        names[0] = "m", names[1] = "v";
        break;
    case OPTIM_RMSPROP: {
        int k = 0;
        op = OP_RMSPROP_UPDATE;
        names[k++] = "square_avg";
        if (t->momentum > 0) names[k++] = "momentum_buffer";
        if (t->centered) names[k++] = "grad_avg";
        break;
    }
    default:
        if (t->momentum > 0) {
            op = OP_MOMENTUM_UPDATE;
            names[0] = "velocity";
        }
        break;
    }
    for (int k = 0; k < OPTIM_MAX_STATE && names[k]; k++)
        if ((a.update.state[k] = add_state(g, v, names[k])) < 0) { ad->failed = true; return; }
    ad->cur = pnode;
    int32_t in[3] = { pnode, grad, scale };
    emit(ad, op, in, scale >= 0 ? 3 : 2, &a, NULL);
}

/* needs[i]: node i depends on a parameter (forward) and the loss depends on it
 * (backward), and is a float: the nodes that get a gradient.  grad[i] = -1. */
static void mark_needs(AD *ad, int32_t loss)
{
    const Graph *g = ad->g;
    int nf = g->nnodes;
    bool *from_param = gc_calloc((size_t)nf, sizeof *from_param);
    bool *to_loss = gc_calloc((size_t)nf, sizeof *to_loss);
    if (!from_param || !to_loss) {
        ad->failed = true;
        diag_plain(ad->d, "out of memory");
    }
    for (int i = 0; i < nf && !ad->failed; i++) {
        const Node *n = &g->nodes[i];
        from_param[i] = n->op == OP_PARAM;
        for (int k = 0; k < n->nin; k++) from_param[i] |= from_param[n->in[k]];
    }
    if (!ad->failed) to_loss[loss] = true;
    for (int i = loss; i >= 0 && !ad->failed; i--)
        if (to_loss[i])
            for (int k = 0; k < g->nodes[i].nin; k++) to_loss[g->nodes[i].in[k]] = true;
    for (int i = 0; i < nf && !ad->failed; i++) {
        ad->needs[i] = from_param[i] && to_loss[i] && g->nodes[i].dtype == DT_F32;
        ad->grad[i] = -1;
    }
    gc_free(from_param);
    gc_free(to_loss);
}

/* The backward pass: from d(loss) = 1, each node's rule, in reverse order, on the
 * nodes that need a gradient. */
static void backward(AD *ad, int32_t loss)
{
    ad->cur = loss;
    ad->grad[loss] = emit(ad, OP_CONST, NULL, 0, &(NodeAttr){ .cnst = { 1.0f } }, NULL);
    for (int i = loss; i >= 0 && !ad->failed; i--) {
        if (ad->grad[i] < 0 || !ad->needs[i]) continue;
        ad->cur = i;
        assert(rules[ad->g->nodes[i].op]);
        rules[ad->g->nodes[i].op](ad, i, ad->grad[i]);
    }
}

/* One update per parameter var; a var behind several PARAM nodes (a shared layer) gets
 * the sum of their gradients; a var not reachable from the loss, none.  Each update
 * right after its gradient's sum, or with clipping, all of them after the clip_scale,
 * which reads every gradient. */
static void emit_updates(AD *ad)
{
    Graph *g = ad->g;
    int nparams = g->nvars, nf = ad->nfwd;
    bool clip = g->train.clip_norm > 0;
    int32_t *pnode = gc_calloc((size_t)(nparams ? nparams : 1), sizeof *pnode);
    int32_t *gsum = gc_calloc((size_t)(nparams ? nparams : 1), sizeof *gsum);
    if (!pnode || !gsum) { ad->failed = true; diag_plain(ad->d, "out of memory"); }
    for (int v = 0; v < nparams && !ad->failed; v++) {
        gsum[v] = pnode[v] = -1;
        for (int i = 0; i < nf; i++) {
            if (g->nodes[i].op != OP_PARAM || g->nodes[i].a.param.var != v) continue;
            if (pnode[v] < 0) pnode[v] = i;
            if (ad->grad[i] < 0) continue;
            ad->cur = i;
            gsum[v] = gsum[v] < 0 ? ad->grad[i] : emit2(ad, OP_ADD, gsum[v], ad->grad[i]);
        }
        if (!clip && gsum[v] >= 0) emit_update(ad, v, pnode[v], gsum[v], -1);
    }
    int32_t scale = clip && !ad->failed ? clip_scale(ad, gsum, nparams) : -1;
    for (int v = 0; clip && v < nparams && !ad->failed; v++)
        if (gsum[v] >= 0) emit_update(ad, v, pnode[v], gsum[v], scale);
    gc_free(pnode);
    gc_free(gsum);
}

Graph *pass_autodiff(const Graph *fwd, DiagSink *d)
{
    if (fwd->train.minimize < 0) {
        diag_plain(d, "the model has no loss to minimize: add a train block with 'minimize = LOSS'");
        return NULL;
    }
    Graph *g = graph_clone(fwd);
    if (!g) { diag_plain(d, "out of memory"); return NULL; }
    g->stage = "train";
    int32_t loss = g->train.minimize;
    AD ad = { .g = g, .d = d, .nfwd = g->nnodes };
    ad.grad = gc_calloc((size_t)g->nnodes, sizeof *ad.grad);
    ad.needs = gc_calloc((size_t)g->nnodes, sizeof *ad.needs);
    if (!ad.grad || !ad.needs) { ad.failed = true; diag_plain(d, "out of memory"); }
    if (!ad.failed) mark_needs(&ad, loss);

    /* The batch accuracy reads the logits and the labels only: made here, before the
     * backward pass, the logits' last reader is the loss's gradient (which the compiled
     * plan then writes over them) instead of a metric at the end of the step. */
    int32_t acc = -1;
    if (!ad.failed && g->logits >= 0 && g->label_input >= 0) {
        ad.cur = g->logits;
        acc = emit2(&ad, OP_ACCURACY, g->logits, g->label_input);
    }
    if (!ad.failed) backward(&ad, loss);
    if (!ad.failed) emit_updates(&ad);
    gc_free(ad.grad);
    gc_free(ad.needs);
    if (ad.failed || g->arena.failed) {
        graph_free(g);
        return NULL;
    }
    /* The step's outputs are its metrics; the model's own outputs (probabilities and
     * the like) are not computed while training. */
    g->noutputs = 0;
    graph_add_output(g, "loss", loss);
    if (acc >= 0) graph_add_output(g, "accuracy", acc);
    Graph *t = pass_dce(g, d);
    graph_free(g);
    return t;
}
