/* Shape and dtype inference: one rule per op, in a table indexed by OpKind.
 *
 * A rule reads its inputs' shapes (already inferred: inputs come first), writes the
 * node's shape and dtype, and reports a problem at the node's .net location naming the
 * op and the shapes involved.  Bound symbols are substituted on the way in, so after
 * graph_bind every shape is concrete. */
#include <assert.h>
#include <string.h>
#include "graph/graph.h"

typedef struct Ctx {
    Graph *g;
    DiagSink *d;
    int errors;
    const Shape *const *in_shapes;  /* run-time check: the inputs' actual shapes */
} Ctx;

typedef bool (*ShapeRule)(Ctx *c, Node *n);

#define SHP(s) shape_str(c->g, (s), buf_##s, sizeof buf_##s)

static bool fail(Ctx *c, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(Ctx *c, const Node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (c->d) diag_vreport(c->d, DIAG_ERROR, n->loc, fmt, ap);
    va_end(ap);
    c->errors++;
    return false;
}

static const Shape *in_shape(Ctx *c, const Node *n, int i)
{
    return c->in_shapes ? c->in_shapes[i] : &c->g->nodes[n->in[i]].shape;
}
static DType in_dtype(Ctx *c, const Node *n, int i) { return c->g->nodes[n->in[i]].dtype; }
static const char *sname(Ctx *c, const Shape *s, char *buf, size_t len) { return shape_str(c->g, s, buf, len); }

/* A bound symbol's value substituted; an overflowing product gives -1, which no rule
 * accepts as a size (graph_bind reports it). */
static Dim subst(const Graph *g, Dim d)
{
    if (d.sym >= 0 && g->sym_value[d.sym] >= 0) {
        Dim r = { -1, -1 };
        if (!gc_mul_i64(d.v, g->sym_value[d.sym], &r.v)) r.v = -1;
        return r;
    }
    return d;
}

static Shape subst_shape(const Graph *g, Shape s)
{
    for (int i = 0; i < s.rank; i++) s.d[i] = subst(g, s.d[i]);
    return s;
}

static bool dim_is(Dim d, int64_t v) { return d.sym < 0 && d.v == v; }

static bool need_f32(Ctx *c, Node *n, int i, const char *what)
{
    if (in_dtype(c, n, i) == DT_F32) return true;
    char b[128];
    return fail(c, n, "%s: %s must be f32, got %s%s", op_name(n->op), what,
                dtype_name(in_dtype(c, n, i)), sname(c, in_shape(c, n, i), b, sizeof b));
}

static bool need_rank(Ctx *c, Node *n, int i, int rank, const char *what)
{
    const Shape *s = in_shape(c, n, i);
    if (s->rank == rank) return true;
    char b[128];
    return fail(c, n, "%s: %s must have rank %d, got %s (rank %d)", op_name(n->op), what, rank,
                sname(c, s, b, sizeof b), s->rank);
}

/* The run of axes of an op along axes (n->a.axes) fits x: its first axis and length
 * into *first, *count when not NULL. */
static bool axes_in_range(Ctx *c, Node *n, const Shape *x)
{
    int first, count;
    if (node_axes(n, x->rank, &first, &count)) return true;
    char b[128];
    return fail(c, n, "%s: axes %d..%d (from the end) are outside %s (rank %d)", op_name(n->op),
                -(n->a.axes.after + (n->a.axes.n > 0 ? n->a.axes.n : 1)), -n->a.axes.after - 1, sname(c, x, b, sizeof b),
                x->rank);
}

/* slice: [off, off + len) within the axis, when its size is a number. */
static bool slice_in_range(Ctx *c, Node *n)
{
    const Shape *x = in_shape(c, n, 0);
    int ax = n->a.slice.axis;
    char b[128];
    if (ax < 0 || ax >= x->rank)
        return fail(c, n, "slice: axis %d is out of range for %s (rank %d)", ax, sname(c, x, b, sizeof b), x->rank);
    Dim d = x->d[ax];
    if (d.sym < 0 && (n->a.slice.off < 0 || n->a.slice.len < 1 || n->a.slice.off > d.v - n->a.slice.len))
        return fail(c, n, "slice: [%lld, %lld) is not a non-empty part of axis %d of %s", (long long)n->a.slice.off,
                    (long long)(n->a.slice.off + n->a.slice.len), ax, sname(c, x, b, sizeof b));
    return true;
}

/* ---- rules ---------------------------------------------------------------------- */

static bool r_source(Ctx *c, Node *n)
{
    Graph *g = c->g;
    if (n->op == OP_CONST) { n->shape.rank = 0; n->dtype = DT_F32; return true; }
    if (n->op == OP_PARAM) { n->shape = g->vars[n->a.param.var].shape; n->dtype = DT_F32; return true; }
    /* INPUT: its declared type is kept in tshape; symbols substituted */
    n->shape = subst_shape(g, n->tshape);
    return true;
}

static bool broadcast(Ctx *c, Node *n, const Shape *a, const Shape *b, Shape *out)
{
    int r = a->rank > b->rank ? a->rank : b->rank;
    out->rank = r;
    for (int i = 0; i < r; i++) {
        int ia = a->rank - r + i, ib = b->rank - r + i;
        Dim da = ia >= 0 ? a->d[ia] : (Dim){1, -1};
        Dim db = ib >= 0 ? b->d[ib] : (Dim){1, -1};
        if (dim_eq(da, db) || dim_is(db, 1)) out->d[i] = da;
        else if (dim_is(da, 1)) out->d[i] = db;
        else {
            char b1[128], b2[128];
            return fail(c, n, "%s: shapes %s and %s do not broadcast (they differ at axis %d, and neither is 1)",
                        op_name(n->op), sname(c, a, b1, sizeof b1), sname(c, b, b2, sizeof b2), i);
        }
    }
    return true;
}

static bool r_binary(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the left operand") || !need_f32(c, n, 1, "the right operand")) return false;
    n->dtype = DT_F32;
    return broadcast(c, n, in_shape(c, n, 0), in_shape(c, n, 1), &n->shape);
}

static bool r_same(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the input")) return false;
    n->dtype = DT_F32;
    n->shape = *in_shape(c, n, 0);
    return true;
}

/* Shape of the last input (dy) for gradient ops that map dy to dx of the same shape. */
static bool r_like_last(Ctx *c, Node *n)
{
    n->dtype = DT_F32;
    n->shape = *in_shape(c, n, n->nin - 1);
    return true;
}

static bool r_like_first(Ctx *c, Node *n)
{
    n->dtype = DT_F32;
    n->shape = *in_shape(c, n, 0);
    return true;
}

static bool r_rows(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the input")) return false;
    if (in_shape(c, n, 0)->rank < 1) return fail(c, n, "%s: needs at least one axis, got a scalar", op_name(n->op));
    if (!axes_in_range(c, n, in_shape(c, n, 0))) return false;
    return r_same(c, n);
}

static bool r_matmul(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the left operand") || !need_f32(c, n, 1, "the right operand")) return false;
    if (!need_rank(c, n, 0, 2, "the left operand") || !need_rank(c, n, 1, 2, "the right operand")) return false;
    const Shape *a = in_shape(c, n, 0), *b = in_shape(c, n, 1);
    Dim m = a->d[n->a.matmul.ta ? 1 : 0], ka = a->d[n->a.matmul.ta ? 0 : 1];
    Dim kb = b->d[n->a.matmul.tb ? 1 : 0], nn = b->d[n->a.matmul.tb ? 0 : 1];
    if (!dim_eq(ka, kb)) {
        char b1[128], b2[128];
        return fail(c, n, "matmul: inner dimensions differ: %s x %s", sname(c, a, b1, sizeof b1), sname(c, b, b2, sizeof b2));
    }
    n->dtype = DT_F32;
    n->shape.rank = 2;
    n->shape.d[0] = m;
    n->shape.d[1] = nn;
    return true;
}

/* Output size and padding of one spatial axis, as TensorFlow defines them. */
static bool window(Ctx *c, Node *n, const char *axis, Dim in, int k, int s, int *pa, int *pb, Dim *out)
{
    if (in.sym >= 0) return fail(c, n, "%s: the %s of the input must be a known size", op_name(n->op), axis);
    if (k < 1 || s < 1) return fail(c, n, "%s: window and stride must be at least 1", op_name(n->op));
    int64_t o, pad = 0;
    if (n->a.win.padding == PAD_VALID) {
        if (in.v < k)
            return fail(c, n, "%s: the window (%d) is larger than the input %s (%lld) with padding \"valid\"",
                        op_name(n->op), k, axis, (long long)in.v);
        o = (in.v - k) / s + 1;
    } else {
        o = (in.v + s - 1) / s;
        pad = (o - 1) * s + k - in.v;
        if (pad < 0) pad = 0;
    }
    *pa = (int)(pad / 2);
    *pb = (int)(pad - pad / 2);
    out->v = o;
    out->sym = -1;
    return true;
}

/* The output [N, OH, OW, channels] of a windowed op over NHWC input x, with n's window,
 * strides and padding (the resolved padding is stored in n). */
static bool spatial(Ctx *c, Node *n, const Shape *x, Dim channels)
{
    Shape y = { 4, { x->d[0], { 0, -1 }, { 0, -1 }, channels } };
    if (!window(c, n, "height", x->d[1], n->a.win.kh, n->a.win.sh, &n->a.win.pt, &n->a.win.pb, &y.d[1]) ||
        !window(c, n, "width", x->d[2], n->a.win.kw, n->a.win.sw, &n->a.win.pl, &n->a.win.pr, &y.d[2]))
        return false;
    n->dtype = DT_F32;
    n->shape = y;
    return true;
}

static bool r_conv2d(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the input") || !need_f32(c, n, 1, "the filter")) return false;
    if (!need_rank(c, n, 0, 4, "the input [N, H, W, C]") || !need_rank(c, n, 1, 4, "the filter [KH, KW, C, F]"))
        return false;
    const Shape *x = in_shape(c, n, 0), *w = in_shape(c, n, 1);
    if (!dim_eq(x->d[3], w->d[2])) {
        char b1[128], b2[128];
        char d1[64], d2[64];
        sname(c, &(Shape){ 1, { x->d[3] } }, d1, sizeof d1);
        sname(c, &(Shape){ 1, { w->d[2] } }, d2, sizeof d2);
        d1[strlen(d1) - 1] = d2[strlen(d2) - 1] = 0;   /* "[3]" -> "3" */
        return fail(c, n, "conv2d: the input %s has %s channels but the filter %s expects %s",
                    sname(c, x, b1, sizeof b1), d1 + 1, sname(c, w, b2, sizeof b2), d2 + 1);
    }
    if (w->d[0].sym >= 0 || w->d[1].sym >= 0) return fail(c, n, "conv2d: the filter size must be known");
    if (w->d[0].v > (1 << 20) || w->d[1].v > (1 << 20))
        return fail(c, n, "conv2d: the filter window %lldx%lld is too large", (long long)w->d[0].v, (long long)w->d[1].v);
    n->a.win.kh = (int)w->d[0].v;
    n->a.win.kw = (int)w->d[1].v;
    return spatial(c, n, x, w->d[3]);
}

static bool r_pool(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the input") || !need_rank(c, n, 0, 4, "the input [N, H, W, C]")) return false;
    const Shape *x = in_shape(c, n, 0);
    return spatial(c, n, x, x->d[3]);
}

/* conv2d_maxpool: the convolution's rule with a.convpool.conv, then the pool's on its
 * output with a.convpool.pool (each window's resolved padding kept). */
static bool r_conv2d_maxpool(Ctx *c, Node *n)
{
    if (n->nin != 2 && n->nin != 3) return fail(c, n, "conv2d_maxpool: takes x, w and an optional bias");
    Node conv = *n, pool = *n;
    conv.a.win = n->a.convpool.conv;
    if (!r_conv2d(c, &conv)) return false;
    pool.a.win = n->a.convpool.pool;
    if (!spatial(c, &pool, &conv.shape, conv.shape.d[3])) return false;
    n->a.convpool.conv = conv.a.win;
    n->a.convpool.pool = pool.a.win;
    n->dtype = DT_F32;
    n->shape = pool.shape;
    return true;
}

/* conv2d_maxpool_argmax: conv2d_maxpool's y, with a leading axis of 2 (y's bits, then
 * the index), i32. */
static bool r_conv2d_maxpool_argmax(Ctx *c, Node *n)
{
    if (!r_conv2d_maxpool(c, n)) return false;
    Shape y = n->shape;
    n->shape.rank = y.rank + 1;
    n->shape.d[0] = (Dim){ .v = 2, .sym = -1 };
    for (int i = 0; i < y.rank; i++) n->shape.d[i + 1] = y.d[i];
    n->dtype = DT_I32;
    return true;
}

/* maxpool_values: the first half of a conv2d_maxpool_argmax, as f32. */
static bool r_maxpool_values(Ctx *c, Node *n)
{
    const Shape *z = in_shape(c, n, 0);
    if (c->g->nodes[n->in[0]].op != OP_CONV2D_MAXPOOL_ARGMAX || z->rank < 2 || z->d[0].v != 2)
        return fail(c, n, "maxpool_values: reads a conv2d_maxpool_argmax");
    n->shape.rank = z->rank - 1;
    for (int i = 1; i < z->rank; i++) n->shape.d[i - 1] = z->d[i];
    n->dtype = DT_F32;
    return true;
}

static bool r_argmax(Ctx *c, Node *n)
{
    if (!r_pool(c, n)) return false;
    n->dtype = DT_I32;
    return true;
}

static bool r_gap(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the input") || !need_rank(c, n, 0, 4, "the input [N, H, W, C]")) return false;
    const Shape *x = in_shape(c, n, 0);
    n->dtype = DT_F32;
    n->shape.rank = 2;
    n->shape.d[0] = x->d[0];
    n->shape.d[1] = x->d[3];
    return true;
}

/* A product of dims with at most one symbol: coefficient and symbol. */
static bool dims_product(const Shape *s, int from, int to, int64_t *coef, int *sym)
{
    *coef = 1;
    *sym = -1;
    for (int i = from; i < to; i++) {
        if (s->d[i].sym >= 0) {
            if (*sym >= 0) return false;
            *sym = s->d[i].sym;
        }
        if (!gc_mul_i64(*coef, s->d[i].v, coef)) return false;
    }
    return true;
}

static bool r_reshape(Ctx *c, Node *n)
{
    const Shape *x = in_shape(c, n, 0);
    Shape t = subst_shape(c->g, n->tshape);
    char b1[128], b2[128];
    int64_t xc, tc = 1;
    int xs, ts = -1, infer = -1;
    if (!dims_product(x, 0, x->rank, &xc, &xs))
        return fail(c, n, "reshape: the size of %s is not a known multiple of one symbol", sname(c, x, b1, sizeof b1));
    for (int i = 0; i < t.rank; i++) {
        if (t.d[i].sym < 0 && t.d[i].v == -1) {
            if (infer >= 0) return fail(c, n, "reshape: only one dimension may be -1");
            infer = i;
            continue;
        }
        if (t.d[i].sym < 0 && t.d[i].v < 1) return fail(c, n, "reshape: dimension %d is %lld; sizes must be positive", i, (long long)t.d[i].v);
        if (t.d[i].sym >= 0) {
            if (ts >= 0) return fail(c, n, "reshape: at most one symbolic dimension");
            ts = t.d[i].sym;
        }
        if (!gc_mul_i64(tc, t.d[i].v, &tc)) {   /* more than 2^40 elements: says how many bytes */
            graph_size_ok(c->g, &t, in_dtype(c, n, 0), "reshape: the target", n->loc, c->d);
            c->errors++;
            return false;
        }
    }
    if (infer >= 0) {
        /* the missing factor: what is left of x's size after the known target dims */
        if (tc == 0 || xc % tc != 0 || (ts >= 0 && ts != xs))
            return fail(c, n, "reshape: cannot reshape %s into %s", sname(c, x, b1, sizeof b1), sname(c, &t, b2, sizeof b2));
        t.d[infer].v = xc / tc;
        t.d[infer].sym = (int16_t)(ts >= 0 ? -1 : xs);
    } else if (xc != tc || xs != ts) {
    {
        Shape count = { 1, { { xc, (int16_t)xs } } };
        char b3[64];
        sname(c, &count, b3, sizeof b3);
        b3[strlen(b3) - 1] = 0;   /* "[4*B]" -> "4*B" */
        return fail(c, n, "reshape: cannot reshape %s (%s elements) into %s", sname(c, x, b1, sizeof b1), b3 + 1,
                    sname(c, &t, b2, sizeof b2));
    }
    }
    n->dtype = in_dtype(c, n, 0);
    n->shape = t;
    return true;
}

static bool r_concat(Ctx *c, Node *n)
{
    const Shape *s0 = in_shape(c, n, 0);
    int axis = n->a.concat.axis;
    if (axis < 0) axis += s0->rank;
    if (axis < 0 || axis >= s0->rank)
        return fail(c, n, "concat: axis %d is out of range for rank %d", n->a.concat.axis, s0->rank);
    n->a.concat.axis = axis;
    Shape y = *s0;
    for (int i = 1; i < n->nin; i++) {
        const Shape *s = in_shape(c, n, i);
        char b1[128], b2[128];
        bool ok = s->rank == s0->rank;
        for (int k = 0; ok && k < s->rank; k++)
            if (k != axis && !dim_eq(s->d[k], s0->d[k])) ok = false;
        if (ok && s->d[axis].sym != y.d[axis].sym) ok = false;
        if (!ok)
            return fail(c, n, "concat: input %d has shape %s, which does not fit %s along axis %d", i + 1,
                        sname(c, s, b1, sizeof b1), sname(c, s0, b2, sizeof b2), axis);
        if (__builtin_add_overflow(y.d[axis].v, s->d[axis].v, &y.d[axis].v))
            return fail(c, n, "concat: the size along axis %d overflows", axis);
    }
    for (int i = 0; i < n->nin; i++)
        if (!need_f32(c, n, i, "every input")) return false;
    n->dtype = DT_F32;
    n->shape = y;
    return true;
}

static bool r_dropout(Ctx *c, Node *n)
{
    if (!(n->a.dropout.rate >= 0 && n->a.dropout.rate < 1))
        return fail(c, n, "dropout: rate must be in [0, 1), got %g", n->a.dropout.rate);
    return r_same(c, n);
}

/* logits [..., classes] and labels i32[...] over the same leading axes (a batch, or a
 * batch of sequences: one label per token). */
static bool r_class_loss(Ctx *c, Node *n)
{
    char b1[128], b2[128];
    if (!need_f32(c, n, 0, "the logits")) return false;
    const Shape *l = in_shape(c, n, 0), *y = in_shape(c, n, 1);
    if (l->rank < 2)
        return fail(c, n, "%s: the logits [N, classes] must have rank 2 or more (a class axis last), got %s (rank %d)",
                    op_name(n->op), sname(c, l, b1, sizeof b1), l->rank);
    Shape lead = *l;
    lead.rank--;
    if (in_dtype(c, n, 1) != DT_I32 || y->rank != lead.rank) {
        if (l->rank == 2)
            return fail(c, n, "%s: the labels must be integer class indices i32[N], got %s%s", op_name(n->op),
                        dtype_name(in_dtype(c, n, 1)), sname(c, y, b1, sizeof b1));
        return fail(c, n, "%s: the labels must be integer class indices i32%s, one per row of the logits %s, got %s%s",
                    op_name(n->op), sname(c, &lead, b2, sizeof b2), sname(c, l, b1, sizeof b1),
                    dtype_name(in_dtype(c, n, 1)), sname(c, y, b2, sizeof b2));
    }
    if (!shape_eq(&lead, y)) {
        if (l->rank == 2)
            return fail(c, n, "%s: logits %s and labels %s have different batch sizes", op_name(n->op),
                        sname(c, l, b1, sizeof b1), sname(c, y, b2, sizeof b2));
        return fail(c, n, "%s: logits %s and labels %s differ in their leading axes", op_name(n->op),
                    sname(c, l, b1, sizeof b1), sname(c, y, b2, sizeof b2));
    }
    if (!(n->a.loss.smoothing >= 0 && n->a.loss.smoothing < 1))
        return fail(c, n, "%s: label_smoothing must be in [0, 1), got %g", op_name(n->op), n->a.loss.smoothing);
    n->dtype = DT_F32;
    n->shape.rank = 0;
    return true;
}

static bool r_mse(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the prediction") || !need_f32(c, n, 1, "the target")) return false;
    const Shape *a = in_shape(c, n, 0), *b = in_shape(c, n, 1);
    if (!shape_eq(a, b)) {
        char b1[128], b2[128];
        return fail(c, n, "mse: prediction %s and target %s differ in shape", sname(c, a, b1, sizeof b1), sname(c, b, b2, sizeof b2));
    }
    n->dtype = DT_F32;
    n->shape.rank = 0;
    return true;
}

static bool r_target(Ctx *c, Node *n)
{
    n->dtype = DT_F32;
    n->shape = subst_shape(c->g, n->tshape);
    return true;
}

static bool r_slice(Ctx *c, Node *n)
{
    Dim len = { n->a.slice.len, -1 };
    if (n->a.slice.slen.v > 0) {   /* multiples of a symbol: elements once it is bound (then checked) */
        Dim off = subst(c->g, n->a.slice.soff);
        len = subst(c->g, n->a.slice.slen);
        n->a.slice.off = off.sym < 0 ? off.v : 0;
        n->a.slice.len = len.sym < 0 ? len.v : 0;
    }
    if (!slice_in_range(c, n)) return false;
    n->dtype = in_dtype(c, n, 0);
    n->shape = *in_shape(c, n, 0);
    n->shape.d[n->a.slice.axis] = len;
    return true;
}

/* An update's inputs: (param, grad) pairs, one (update_all: any number), then the
 * optional clip_scale, a scalar. */
static bool r_update(Ctx *c, Node *n)
{
    int pairs = n->nin / 2;
    if (n->nin < 2 || (n->op != OP_UPDATE_ALL && n->nin > 3))
        return fail(c, n, "%s: takes a parameter, its gradient and optionally the clip scale, got %d inputs",
                    op_name(n->op), n->nin);
    if (n->nin % 2 && in_shape(c, n, n->nin - 1)->rank != 0)
        return fail(c, n, "%s: input %d (the clip scale) must be a scalar", op_name(n->op), n->nin);
    for (int k = 0; k < pairs; k++)
        if (!shape_eq(in_shape(c, n, 2 * k), in_shape(c, n, 2 * k + 1))) {
            char b1[128], b2[128];
            return fail(c, n, "%s: the gradient %s does not have its parameter's shape %s", op_name(n->op),
                        sname(c, in_shape(c, n, 2 * k + 1), b1, sizeof b1), sname(c, in_shape(c, n, 2 * k), b2, sizeof b2));
        }
    n->dtype = DT_F32;
    n->shape.rank = 0;
    return true;
}

/* clip_scale(g1, ..., gn): one factor for all of them, a scalar. */
static bool r_clip_scale(Ctx *c, Node *n)
{
    for (int k = 0; k < n->nin; k++)
        if (!need_f32(c, n, k, "every gradient")) return false;
    n->dtype = DT_F32;
    n->shape.rank = 0;
    return true;
}

/* matmul_update(w, a, b): the product of a and b (with the node's transpose flags) is
 * w's gradient, so it has w's shape; the result, like every update's, is rank 0. */
static bool r_matmul_update(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the parameter") || !need_f32(c, n, 1, "the left operand") ||
        !need_f32(c, n, 2, "the right operand"))
        return false;
    if (!need_rank(c, n, 1, 2, "the left operand") || !need_rank(c, n, 2, 2, "the right operand")) return false;
    const Shape *w = in_shape(c, n, 0), *a = in_shape(c, n, 1), *b = in_shape(c, n, 2);
    bool ta = n->a.update.ta, tb = n->a.update.tb;
    Shape y = { 2, { a->d[ta ? 1 : 0], b->d[tb ? 0 : 1] } };
    if (!dim_eq(a->d[ta ? 0 : 1], b->d[tb ? 1 : 0]) || !shape_eq(&y, w)) {
        char b1[128], b2[128], b3[128];
        return fail(c, n, "matmul_update: %s x %s is not a gradient of %s", sname(c, a, b1, sizeof b1),
                    sname(c, b, b2, sizeof b2), sname(c, w, b3, sizeof b3));
    }
    n->dtype = DT_F32;
    n->shape.rank = 0;
    return true;
}

/* matmul_grad_update(x, dy, w): x [B, K] the layer's input, dy [B, N] its output's
 * gradient, w [K, N]; the result is x's gradient, masked, so it has x's shape. */
static bool r_matmul_grad_update(Ctx *c, Node *n)
{
    static const char *const what[3] = { "the layer's input", "the output's gradient", "the parameter" };
    for (int k = 0; k < 3; k++)
        if (!need_f32(c, n, k, what[k]) || !need_rank(c, n, k, 2, what[k])) return false;
    const Shape *x = in_shape(c, n, 0), *dy = in_shape(c, n, 1), *w = in_shape(c, n, 2);
    if (!dim_eq(x->d[0], dy->d[0]) || !dim_eq(x->d[1], w->d[0]) || !dim_eq(dy->d[1], w->d[1])) {
        char b1[128], b2[128], b3[128];
        return fail(c, n, "matmul_grad_update: %s, %s and %s are not a dense layer's input, output gradient and kernel",
                    sname(c, x, b1, sizeof b1), sname(c, dy, b2, sizeof b2), sname(c, w, b3, sizeof b3));
    }
    n->dtype = DT_F32;
    n->shape = *x;
    return true;
}

/* A bucket: every gradient of it, flattened one after the other. */
static bool r_allreduce(Ctx *c, Node *n)
{
    int64_t total = 0;
    for (int i = 0; i < n->nin; i++) {
        const Shape *s = in_shape(c, n, i);
        if (!need_f32(c, n, i, "every gradient")) return false;
        int64_t k = shape_concrete(s) ? shape_numel(s) : -1;
        if (k < 0 || __builtin_add_overflow(total, k, &total))
            return fail(c, n, "allreduce: the gradients must have known sizes that fit in memory");
    }
    n->dtype = DT_F32;
    n->shape.rank = 1;
    n->shape.d[0] = (Dim){ total, -1 };
    return true;
}

/* ---- the transformer ops (issue 14) ---------------------------------------------- */

static bool r_transpose(Ctx *c, Node *n)
{
    const Shape *x = in_shape(c, n, 0);
    char b[128];
    bool seen[MAX_RANK] = { false };
    for (int i = 0; i < x->rank; i++) {
        int p = n->a.transpose.perm[i];
        if (p < 0 || p >= x->rank || seen[p])
            return fail(c, n, "transpose: the permutation is not one of the %d axes of %s", x->rank, sname(c, x, b, sizeof b));
        seen[p] = true;
    }
    n->dtype = in_dtype(c, n, 0);
    n->shape.rank = x->rank;
    for (int i = 0; i < x->rank; i++) n->shape.d[i] = x->d[n->a.transpose.perm[i]];
    return true;
}

static bool r_batch_matmul(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the left operand") || !need_f32(c, n, 1, "the right operand")) return false;
    const Shape *a = in_shape(c, n, 0), *b = in_shape(c, n, 1);
    char b1[128], b2[128];
    if (a->rank < 3 || a->rank != b->rank)
        return fail(c, n, "batch_matmul: the operands must have the same rank, 3 or more ([batch..., rows, columns]), "
                    "got %s and %s; a rank-2 operand takes matmul or dense", sname(c, a, b1, sizeof b1), sname(c, b, b2, sizeof b2));
    int r = a->rank;
    for (int i = 0; i < r - 2; i++)
        if (!dim_eq(a->d[i], b->d[i]))
            return fail(c, n, "batch_matmul: the batch axes of %s and %s differ (axis %d)", sname(c, a, b1, sizeof b1),
                        sname(c, b, b2, sizeof b2), i);
    bool ta = n->a.matmul.ta, tb = n->a.matmul.tb;
    Dim m = a->d[r - (ta ? 1 : 2)], ka = a->d[r - (ta ? 2 : 1)];
    Dim kb = b->d[r - (tb ? 1 : 2)], nn = b->d[r - (tb ? 2 : 1)];
    if (!dim_eq(ka, kb))
        return fail(c, n, "batch_matmul: inner dimensions differ: %s%s x %s%s", sname(c, a, b1, sizeof b1),
                    ta ? " (transposed)" : "", sname(c, b, b2, sizeof b2), tb ? " (transposed)" : "");
    n->dtype = DT_F32;
    n->shape = *a;
    n->shape.d[r - 2] = m;
    n->shape.d[r - 1] = nn;
    return true;
}

static bool r_reduce(Ctx *c, Node *n)
{
    const Shape *x = in_shape(c, n, 0);
    int first, count;
    if (!need_f32(c, n, 0, "the input")) return false;
    if (x->rank < 1) return fail(c, n, "%s: needs at least one axis, got a scalar", op_name(n->op));
    if (!axes_in_range(c, n, x)) return false;
    node_axes(n, x->rank, &first, &count);
    n->dtype = DT_F32;
    n->shape = *x;
    if (n->a.axes.keepdims) {
        for (int i = first; i < first + count; i++) n->shape.d[i] = (Dim){ 1, -1 };
    } else {
        n->shape.rank = x->rank - count;
        for (int i = first; i < n->shape.rank; i++) n->shape.d[i] = x->d[i + count];
    }
    return true;
}

/* The broadcast shape of where's three operands. */
static bool r_where(Ctx *c, Node *n)
{
    static const char *const what[3] = { "the condition", "the first value", "the second value" };
    for (int k = 0; k < 3; k++)
        if (!need_f32(c, n, k, what[k])) return false;
    Shape ab;
    if (!broadcast(c, n, in_shape(c, n, 1), in_shape(c, n, 2), &ab)) return false;
    n->dtype = DT_F32;
    return broadcast(c, n, in_shape(c, n, 0), &ab, &n->shape);
}

static bool r_causal_mask(Ctx *c, Node *n)
{
    const Shape *x = in_shape(c, n, 0);
    char b[128];
    if (!need_f32(c, n, 0, "the scores")) return false;
    if (x->rank < 2)
        return fail(c, n, "causal_mask: the scores must have rank 2 or more ([..., queries, keys]), got %s",
                    sname(c, x, b, sizeof b));
    Dim t = x->d[x->rank - 2], s = x->d[x->rank - 1];
    if (t.sym >= 0 || s.sym >= 0 || t.v > s.v)
        return fail(c, n, "causal_mask: the last two axes of %s must be known sizes, no more queries than keys",
                    sname(c, x, b, sizeof b));
    return r_same(c, n);
}

static bool r_embedding(Ctx *c, Node *n)
{
    const Shape *ids = in_shape(c, n, 0), *t = in_shape(c, n, 1);
    char b1[128], b2[128];
    if (in_dtype(c, n, 0) != DT_I32)
        return fail(c, n, "embedding: the ids must be i32, got %s%s", dtype_name(in_dtype(c, n, 0)), sname(c, ids, b1, sizeof b1));
    if (!need_f32(c, n, 1, "the table") || !need_rank(c, n, 1, 2, "the table [vocab, dim]")) return false;
    if (ids->rank >= MAX_RANK)
        return fail(c, n, "embedding: ids %s leave no room for the embedding's axis (at most %d axes)", sname(c, ids, b1, sizeof b1),
                    MAX_RANK);
    if (t->d[0].sym >= 0 || t->d[1].sym >= 0)
        return fail(c, n, "embedding: the table %s must have a known size", sname(c, t, b2, sizeof b2));
    n->dtype = DT_F32;
    n->shape = *ids;
    n->shape.d[n->shape.rank++] = t->d[1];
    return true;
}

static bool r_layer_norm(Ctx *c, Node *n)
{
    const Shape *x = in_shape(c, n, 0);
    int first, count;
    char b1[128], b2[128];
    if (!need_f32(c, n, 0, "the input") || !need_f32(c, n, 1, "the scale") || !need_f32(c, n, 2, "the shift")) return false;
    if (n->a.axes.after != 0 || !node_axes(n, x->rank, &first, &count))
        return fail(c, n, "layer_norm: normalizes over the last axes of its input; %s has %d", sname(c, x, b1, sizeof b1), x->rank);
    Shape p = { count, { { 0, -1 } } };
    for (int i = 0; i < count; i++) p.d[i] = x->d[first + i];
    for (int k = 1; k < 3; k++)
        if (!shape_eq(in_shape(c, n, k), &p))
            return fail(c, n, "layer_norm: the %s must have the shape %s of the normalized axes, got %s", k == 1 ? "scale" : "shift",
                        sname(c, &p, b1, sizeof b1), sname(c, in_shape(c, n, k), b2, sizeof b2));
    if (!(n->a.axes.eps > 0)) return fail(c, n, "layer_norm: eps must be above 0, got %g", n->a.axes.eps);
    n->dtype = DT_F32;
    n->shape = *x;
    return true;
}

/* binary_cross_entropy(logits, targets): the same shape, a scalar mean. */
static bool r_bce(Ctx *c, Node *n)
{
    if (!need_f32(c, n, 0, "the logits") || !need_f32(c, n, 1, "the targets")) return false;
    const Shape *a = in_shape(c, n, 0), *b = in_shape(c, n, 1);
    if (!shape_eq(a, b)) {
        char b1[128], b2[128];
        return fail(c, n, "%s: logits %s and targets %s differ in shape", op_name(n->op), sname(c, a, b1, sizeof b1),
                    sname(c, b, b2, sizeof b2));
    }
    n->dtype = DT_F32;
    n->shape.rank = 0;
    return true;
}

/* ---- batch norm (graph/bnorm.c) ------------------------------------------------------ */

/* x [..., C] normalized over every axis but the last: f32, rank 2 or more, C known. */
static bool bn_input(Ctx *c, Node *n, int i, Dim *channels)
{
    const Shape *x = in_shape(c, n, i);
    char b[128];
    if (!need_f32(c, n, i, "the input")) return false;
    if (x->rank < 2)
        return fail(c, n, "%s: the input must be [batch, ..., channels], got %s", op_name(n->op), sname(c, x, b, sizeof b));
    *channels = x->d[x->rank - 1];
    if (channels->sym >= 0)
        return fail(c, n, "%s: the number of channels (the last axis) must be known, got %s", op_name(n->op),
                    sname(c, x, b, sizeof b));
    return true;
}

/* Input i has `want` (a [C] vector or the [2, C] statistics). */
static bool bn_operand(Ctx *c, Node *n, int i, const Shape *want, const char *what)
{
    const Shape *s = in_shape(c, n, i);
    if (in_dtype(c, n, i) == DT_F32 && shape_eq(s, want)) return true;
    char b1[128], b2[128];
    return fail(c, n, "%s: %s must be f32%s, got %s%s", op_name(n->op), what, sname(c, want, b1, sizeof b1),
                dtype_name(in_dtype(c, n, i)), sname(c, s, b2, sizeof b2));
}

/* The backward's inputs: `plain` of them, or `with_relu` with the batch norm's relu
 * (a.bn.act, pass bn_relu_grad), gamma and beta among them at `gamma` and `beta`. */
static bool bn_grad_arity(Ctx *c, Node *n, int plain, int with_relu, int gamma, int beta, const Shape *vec)
{
    bool relu = n->a.bn.act == OP_RELU;
    if (n->a.bn.act >= 0 && !relu) return fail(c, n, "%s: relu is the only activation its backward takes", op_name(n->op));
    int want = relu ? with_relu : plain;
    if (n->nin != want)
        return fail(c, n, "%s: %d inputs, it takes %d%s", op_name(n->op), n->nin, want, relu ? " with relu" : "");
    return !relu || (bn_operand(c, n, gamma, vec, "gamma") && bn_operand(c, n, beta, vec, "beta"));
}

/* batch_norm_stats(x) and batch_norm_grad_params(x, stats, dy [, gamma, beta]): [2, C] */
static bool r_bn_stats(Ctx *c, Node *n)
{
    Dim ch;
    if (!bn_input(c, n, 0, &ch)) return false;
    Shape st = { 2, { { 2, -1 }, ch } }, vec = { 1, { ch } };
    if (n->op == OP_BATCH_NORM_GRAD_PARAMS &&
        (!bn_grad_arity(c, n, 3, 5, 3, 4, &vec) || !bn_operand(c, n, 1, &st, "the statistics") ||
         !bn_operand(c, n, 2, in_shape(c, n, 0), "the gradient")))
        return false;
    n->dtype = DT_F32;
    n->shape = st;
    return true;
}

/* batch_norm(x, stats, gamma, beta, moving_mean, moving_variance [, residual]) and
 * batch_norm_infer(x, gamma, beta, moving_mean, moving_variance): x's shape */
static bool r_batch_norm(Ctx *c, Node *n)
{
    static const char *const what[4] = { "gamma", "beta", "the moving mean", "the moving variance" };
    Dim ch;
    if (!bn_input(c, n, 0, &ch)) return false;
    int first = n->op == OP_BATCH_NORM ? 2 : 1;
    if (n->nin != first + 4 && !(first == 2 && n->nin == 7))
        return fail(c, n, "%s: %d inputs, it takes %d%s", op_name(n->op), n->nin, first + 4, first == 2 ? " or 7" : "");
    Shape vec = { 1, { ch } }, st = { 2, { { 2, -1 }, ch } };
    if (first == 2 && !bn_operand(c, n, 1, &st, "the statistics")) return false;
    for (int k = 0; k < 4; k++)
        if (!bn_operand(c, n, first + k, &vec, what[k])) return false;
    if (n->nin == 7 && !bn_operand(c, n, 6, in_shape(c, n, 0), "the residual")) return false;
    n->dtype = DT_F32;
    n->shape = *in_shape(c, n, 0);
    return true;
}

/* batch_norm_grad(dy, x, stats, gamma, dparams [, beta]): dy's shape */
static bool r_bn_grad(Ctx *c, Node *n)
{
    Dim ch;
    if (!bn_input(c, n, 1, &ch)) return false;
    Shape vec = { 1, { ch } }, st = { 2, { { 2, -1 }, ch } };
    if (!bn_grad_arity(c, n, 5, 6, 3, 5, &vec) || !bn_operand(c, n, 0, in_shape(c, n, 1), "the gradient") || !bn_operand(c, n, 2, &st, "the statistics") ||
        !bn_operand(c, n, 3, &vec, "gamma") || !bn_operand(c, n, 4, &st, "the parameters' gradients"))
        return false;
    n->dtype = DT_F32;
    n->shape = *in_shape(c, n, 0);
    return true;
}

/* batch_norm_update(moving_mean, stats): rank 0 like every update; tshape is the
 * normalized input's shape, whose values per channel (bound) are a.update.count. */
static bool r_bn_update(Ctx *c, Node *n)
{
    Shape x = subst_shape(c->g, n->tshape);
    if (x.rank < 2) return fail(c, n, "batch_norm_update: the input's shape has rank %d", x.rank);
    Shape vec = { 1, { x.d[x.rank - 1] } }, st = { 2, { { 2, -1 }, x.d[x.rank - 1] } };
    if (!bn_operand(c, n, 0, &vec, "the moving mean") || !bn_operand(c, n, 1, &st, "the statistics")) return false;
    int64_t per = 1;
    for (int i = 0; i + 1 < x.rank && per > 0; i++)
        if (x.d[i].sym >= 0 || !gc_mul_i64(per, x.d[i].v, &per)) per = -1;
    n->a.update.count = per;   /* -1 until the batch is bound */
    n->dtype = DT_F32;
    n->shape.rank = 0;
    return true;
}

/* slice_grad: every piece fits tshape at its offset along the axis. */
static bool r_slice_grad(Ctx *c, Node *n)
{
    Shape t = subst_shape(c->g, n->tshape);
    int ax = n->a.pieces.axis;
    if (n->nin != n->a.pieces.n || n->nin < 1 || n->nin > SLICE_GRAD_MAX || ax < 0 || ax >= t.rank)
        return fail(c, n, "slice_grad: %d pieces along axis %d of rank %d", n->nin, ax, t.rank);
    for (int k = 0; k < n->nin; k++) {
        const Shape *p = in_shape(c, n, k);
        bool ok = p->rank == t.rank && n->a.pieces.off[k] >= 0 && p->d[ax].sym < 0 && t.d[ax].sym < 0 &&
                  n->a.pieces.off[k] + p->d[ax].v <= t.d[ax].v;
        for (int i = 0; ok && i < t.rank; i++) ok = i == ax || dim_eq(p->d[i], t.d[i]);
        if (!ok) {
            char b1[128], b2[128];
            return fail(c, n, "slice_grad: piece %s at %lld does not fit %s", sname(c, p, b1, sizeof b1),
                        (long long)n->a.pieces.off[k], sname(c, &t, b2, sizeof b2));
        }
    }
    n->dtype = DT_F32;
    n->shape = t;
    return true;
}

/* Fused attention: q, k, v (and dy) the same [B, T, H, d], P [B, H, T, T]; the output
 * q's shape, P's (attention_probs), or [3, B, T, H, d] (attention_grad: the gradients
 * of q, k, v, one after the other). */
static bool r_attention(Ctx *c, Node *n)
{
    int qi = n->op == OP_ATTENTION_OUT ? 1 : 0, pi = n->op == OP_ATTENTION_OUT ? 0 : n->op == OP_ATTENTION_GRAD ? 3 : -1;
    const Shape *q = in_shape(c, n, qi);
    char b1[128], b2[128];
    if (!need_rank(c, n, qi, 4, "q [batch, positions, heads, dim]")) return false;
    Shape ps = { 4, { q->d[0], q->d[2], q->d[1], q->d[1] } };
    for (int i = 0; i < n->nin; i++) {
        const Shape *want = i == pi ? &ps : q;
        if (!need_f32(c, n, i, "every input")) return false;
        if (!shape_eq(in_shape(c, n, i), want))
            return fail(c, n, "%s: input %d is %s, not %s", op_name(n->op), i + 1, sname(c, in_shape(c, n, i), b1, sizeof b1),
                        sname(c, want, b2, sizeof b2));
    }
    n->dtype = DT_F32;
    n->shape = n->op == OP_ATTENTION_PROBS ? ps : *q;
    if (n->op == OP_ATTENTION_GRAD) {
        n->shape.rank = 5;
        for (int i = 4; i > 0; i--) n->shape.d[i] = q->d[i - 1];
        n->shape.d[0] = (Dim){ 3, -1 };
    }
    return true;
}

/* One rule per op, named by its row of the op table. */
static const ShapeRule rules[OP_COUNT] = {
#define OP(e, name, arity, traits, shape, grad, kernel) [OP_##e] = r_##shape,
#include "graph/ops.def"
#undef OP
};

bool graph_has_shape_rule(OpKind op) { return rules[op] != NULL; }

/* Node n's rule, then whether its result can exist at all (graph_size_ok). */
static bool infer(Ctx *c, Node *n)
{
    if (!rules[n->op] || !rules[n->op](c, n)) return false;
    if (graph_node_size_ok(c->g, n, c->d)) return true;
    c->errors++;
    return false;
}

int graph_infer_shapes(Graph *g, DiagSink *d)
{
    Ctx c = { g, d, 0, NULL };
    /* A node whose input failed is skipped: one mistake, one message. */
    bool *bad = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *bad);
    if (!bad) { if (d) diag_plain(d, "out of memory"); return 1; }
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = &g->nodes[i];
        bool skip = false;
        for (int k = 0; k < n->nin; k++) skip |= bad[n->in[k]];
        if (skip || !infer(&c, n)) bad[i] = true;
    }
    gc_free(bad);
    return c.errors;
}

bool graph_infer_node(Graph *g, int32_t id, DiagSink *d)
{
    Ctx c = { g, d, 0, NULL };
    return infer(&c, &g->nodes[id]);
}

bool shape_check_runtime(const Graph *g, int32_t id, const Shape *const *in_shapes, Shape *out, DiagSink *d)
{
    Node tmp = g->nodes[id];
    Ctx c = { (Graph *)g, d, 0, in_shapes };
    if (!infer(&c, &tmp)) return false;
    *out = tmp.shape;
    return true;
}

int graph_bind(Graph *g, const char *sym, int64_t value, DiagSink *d)
{
    if (value < 1) {
        if (d) diag_plain(d, "size '%s' must be at least 1, got %lld", sym, (long long)value);
        return 1;
    }
    for (int i = 0; i < g->nsyms; i++) {
        if (strcmp(g->syms[i], sym) == 0) {
            g->sym_value[i] = value;
            int errs = graph_infer_shapes(g, d);
            for (int k = 0; !errs && k < g->nnodes; k++) {
                const Shape *s = &g->nodes[k].shape;
                bool bad = shape_concrete(s) && shape_numel(s) < 0;
                for (int j = 0; j < s->rank; j++) bad |= s->d[j].sym < 0 && s->d[j].v < 0;
                if (bad) {
                    if (d) diag_plain(d, "binding %s = %lld makes the size of a tensor overflow", sym, (long long)value);
                    errs = 1;
                }
            }
            return errs;
        }
    }
    return graph_infer_shapes(g, d);
}
