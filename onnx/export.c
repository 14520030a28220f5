/* graphc export: an inference graph as an ONNX model (docs/onnx.md).
 *
 * graphc is NHWC with HWIO filters; ONNX's Conv and pools are NCHW with OIHW filters.
 * The model keeps graphc's interface (its inputs and outputs are NHWC, as the .net file
 * declares them) and runs NCHW inside: each value has the layout it is made in, and a
 * Transpose is made where a reader needs the other one, once per value.  So an image
 * is transposed where it enters the first convolution and where it leaves the last
 * pool (before a flatten, whose element order is NHWC's), and elementwise ops,
 * softmax and concat between them stay NCHW.  Filters that are weights are stored
 * OIHW, and a convolution's bias add is the Conv's bias input. */
#include <assert.h>
#include <stdarg.h>
#include <string.h>
#include "config.h"
#include "onnx/onnx.h"
#include "onnx/opmap.h"
#include "onnx/pb.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "raw_data is little-endian");

typedef enum Lay { LAY_NHWC, LAY_NCHW } Lay;   /* graphc's order, or ONNX's for images */

typedef struct Ex {
    const Graph *g;
    const Weights *w;
    DiagSink *d;
    Arena ar;                  /* every message and string of the model */
    Onnx__GraphProto *gp;
    size_t node_cap, init_cap;
    bool oom;
    /* per graphc node */
    bool *need;                /* an output needs it */
    const char **out_name;     /* the first output it is, or NULL */
    Lay *nat;                  /* the layout it is made in */
    const char **val;          /* its ONNX value in layout nat (NULL: not made yet) */
    const char **other;        /* ... in the other layout, once a reader needed it */
    const char **oihw;         /* a filter's OIHW value, once made */
    int32_t *bias_of;          /* an add made by its conv's bias input: the conv; else -1 */
} Ex;

static char *xprintf(Ex *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *xprintf(Ex *e, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    char *s = arena_strdup(&e->ar, tmp);
    if (!s) e->oom = true;
    return s;
}

static void *xnew(Ex *e, const ProtobufCMessageDescriptor *desc)
{
    void *m = pb_new(&e->ar, desc);
    if (!m) e->oom = true;
    return m;
}

static void *xalloc(Ex *e, size_t count, size_t size)
{
    size_t bytes;
    void *p = gc_mul_size(count ? count : 1, size, &bytes) ? arena_alloc(&e->ar, bytes) : NULL;
    if (!p) e->oom = true;
    return p;
}

/* The stem of a node's ONNX names: its .net name, or its op's, with its id: "h#7".
 * '#' appears in no .net name and no var name, so these never meet the model's own. */
static const char *stem(Ex *e, int32_t id)
{
    const Node *n = &e->g->nodes[id];
    return xprintf(e, "%s#%d", n->name ? n->name : op_name(n->op), (int)id);
}

static Onnx__NodeProto *add_node(Ex *e, const char *type, const char *name, int nin, const char *const *in, const char *out)
{
    Onnx__GraphProto *gp = e->gp;
    if (e->oom) return NULL;
    assert(gp->n_node < e->node_cap);
    Onnx__NodeProto *n = xnew(e, &onnx__node_proto__descriptor);
    char **ins = xalloc(e, (size_t)nin, sizeof *ins);
    char **outs = xalloc(e, 1, sizeof *outs);
    if (e->oom) return NULL;
    for (int i = 0; i < nin; i++) ins[i] = (char *)in[i];
    outs[0] = (char *)out;
    n->op_type = (char *)type;
    n->name = (char *)name;
    n->n_input = (size_t)nin;
    n->input = ins;
    n->n_output = 1;
    n->output = outs;
    gp->node[gp->n_node++] = n;
    return n;
}

static void attr_ints(Ex *e, Onnx__NodeProto *n, const char *name, const int64_t *v, size_t count)
{
    if (!n) return;
    Onnx__AttributeProto *a = xnew(e, &onnx__attribute_proto__descriptor);
    int64_t *vals = xalloc(e, count, sizeof *vals);
    Onnx__AttributeProto **list = xalloc(e, n->n_attribute + 1, sizeof *list);
    if (e->oom) return;
    memcpy(vals, v, count * sizeof *vals);
    a->name = (char *)name;
    a->has_type = 1;
    if (count == 1 && strcmp(name, "axis") == 0) {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a->has_i = 1;
        a->i = v[0];
    } else {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        a->n_ints = count;
        a->ints = vals;
    }
    if (n->n_attribute) memcpy(list, n->attribute, n->n_attribute * sizeof *list);
    list[n->n_attribute++] = a;
    n->attribute = list;
}

static void attr_int(Ex *e, Onnx__NodeProto *n, const char *name, int64_t v) { attr_ints(e, n, name, &v, 1); }

static void attr_float(Ex *e, Onnx__NodeProto *n, const char *name, float v)
{
    if (!n) return;
    Onnx__AttributeProto *a = xnew(e, &onnx__attribute_proto__descriptor);
    Onnx__AttributeProto **list = xalloc(e, n->n_attribute + 1, sizeof *list);
    if (e->oom) return;
    a->name = (char *)name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    a->has_f = 1;
    a->f = v;
    if (n->n_attribute) memcpy(list, n->attribute, n->n_attribute * sizeof *list);
    list[n->n_attribute++] = a;
    n->attribute = list;
}

static Onnx__TensorProto *add_init(Ex *e, const char *name, int type, const int64_t *dims, int rank, const void *data, size_t bytes)
{
    Onnx__GraphProto *gp = e->gp;
    if (e->oom) return NULL;
    assert(gp->n_initializer < e->init_cap);
    Onnx__TensorProto *t = xnew(e, &onnx__tensor_proto__descriptor);
    int64_t *d = xalloc(e, (size_t)rank, sizeof *d);
    if (e->oom) return NULL;
    if (rank) memcpy(d, dims, (size_t)rank * sizeof *d);
    t->name = (char *)name;
    t->n_dims = (size_t)rank;
    t->dims = d;
    t->has_data_type = 1;
    t->data_type = type;
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = (uint8_t *)data;   /* the weights stay where they are until packed */
    gp->initializer[gp->n_initializer++] = t;
    return t;
}

static int elem_type(DType t)
{
    return t == DT_I32 ? ONNX__TENSOR_PROTO__DATA_TYPE__INT32 : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
}

/* A graph input's or output's name, element type and shape; a dimension that is a
 * symbol is its dim_param ("B"), a multiple of one (2*B) has neither. */
static Onnx__ValueInfoProto *value_info(Ex *e, const char *name, const Node *n)
{
    Onnx__ValueInfoProto *vi = xnew(e, &onnx__value_info_proto__descriptor);
    Onnx__TypeProto *tp = xnew(e, &onnx__type_proto__descriptor);
    Onnx__TypeProto__Tensor *tt = xnew(e, &onnx__type_proto__tensor__descriptor);
    Onnx__TensorShapeProto *sp = xnew(e, &onnx__tensor_shape_proto__descriptor);
    Onnx__TensorShapeProto__Dimension **dims = xalloc(e, (size_t)n->shape.rank, sizeof *dims);
    if (e->oom) return NULL;
    for (int i = 0; i < n->shape.rank; i++) {
        Dim dm = n->shape.d[i];
        Onnx__TensorShapeProto__Dimension *x = xnew(e, &onnx__tensor_shape_proto__dimension__descriptor);
        if (!x) return NULL;
        if (dm.sym < 0) {
            x->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            x->dim_value = dm.v;
        } else if (dm.v == 1) {
            x->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            x->dim_param = (char *)e->g->syms[dm.sym];
        }
        dims[i] = x;
    }
    sp->n_dim = (size_t)n->shape.rank;
    sp->dim = dims;
    tt->has_elem_type = 1;
    tt->elem_type = elem_type(n->dtype);
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = (char *)name;
    vi->type = tp;
    return vi;
}

static const int64_t to_nchw[4] = { 0, 3, 1, 2 }, to_nhwc[4] = { 0, 2, 3, 1 };

static const char *plain_name(Ex *e, int32_t id)
{
    const OnnxOp *m = onnx_op_of(e->g->nodes[id].op);
    bool source = m && (m->kind == OM_INPUT || m->kind == OM_PARAM || m->kind == OM_CONST);
    return e->out_name[id] && !source ? e->out_name[id] : stem(e, id);
}

static const char *param_value(Ex *e, int32_t id, bool oihw);
static const char *const_value(Ex *e, int32_t id);

/* A node's value in NCHW: "h#7/nchw" (and in NHWC: plain_name's "h#7", or an output's). */
static const char *nchw_name(Ex *e, int32_t id) { return xprintf(e, "%s/nchw", stem(e, id)); }

/* The value of node `id` in layout `want`, transposed once if it was made in the other.
 * Weights and constants are made when first read: lowering puts a bias after the
 * convolution that the Conv node's bias input reads it from. */
static const char *get(Ex *e, int32_t id, Lay want)
{
    const OnnxOp *m = onnx_op_of(e->g->nodes[id].op);
    if (!e->val[id] && m && m->kind == OM_PARAM) e->val[id] = param_value(e, id, false);
    if (!e->val[id] && m && m->kind == OM_CONST) e->val[id] = const_value(e, id);
    if (e->nat[id] == want || e->oom) return e->val[id];
    if (!e->other[id]) {
        const char *in[1] = { e->val[id] };
        const char *out = want == LAY_NHWC ? plain_name(e, id) : nchw_name(e, id);
        Onnx__NodeProto *t = add_node(e, "Transpose", xprintf(e, "Transpose#%d", (int)id), 1, in, out);
        attr_ints(e, t, "perm", want == LAY_NHWC ? to_nhwc : to_nchw, 4);
        e->other[id] = out;
    }
    return e->other[id];
}

/* A param's tensor, stored once under its var's name. */
static const char *param_value(Ex *e, int32_t id, bool oihw)
{
    const Node *n = &e->g->nodes[id];
    int v = om_param_var(n);
    const Var *var = &e->g->vars[v];
    int64_t dims[MAX_RANK];
    for (int i = 0; i < var->shape.rank; i++) dims[i] = var->shape.d[i].v;
    size_t numel = (size_t)shape_numel(&var->shape);
    const float *data = e->w->data[v];
    if (oihw) {
        /* HWIO -> OIHW */
        int64_t kh = dims[0], kw = dims[1], ci = dims[2], co = dims[3];
        float *t = xalloc(e, numel, sizeof *t);
        if (!t) return NULL;
        for (int64_t y = 0; y < kh; y++)
            for (int64_t x = 0; x < kw; x++)
                for (int64_t i = 0; i < ci; i++)
                    for (int64_t o = 0; o < co; o++)
                        t[((o * ci + i) * kh + y) * kw + x] = data[((y * kw + x) * ci + i) * co + o];
        int64_t od[4] = { co, ci, kh, kw };
        memcpy(dims, od, sizeof od);
        data = t;
    }
    add_init(e, var->name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, dims, var->shape.rank, data, numel * sizeof(float));
    return var->name;
}

static const char *const_value(Ex *e, int32_t id)
{
    float *v = xalloc(e, 1, sizeof *v);
    if (!v) return NULL;
    *v = om_const_value(&e->g->nodes[id]);
    const char *name = stem(e, id);
    add_init(e, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL, 0, v, sizeof *v);
    return name;
}

static bool only_filter(Ex *e, int32_t id)
{
    for (int j = id + 1; j < e->g->nnodes; j++) {
        const Node *r = &e->g->nodes[j];
        if (!e->need[j]) continue;
        for (int k = 0; k < r->nin; k++)
            if (r->in[k] == id && !(onnx_op_of(r->op) && onnx_op_of(r->op)->kind == OM_CONV && k == 1)) return false;
    }
    return !e->out_name[id];
}

/* A convolution's filter in OIHW: a weight stored so, or a Transpose of any value. */
static const char *filter(Ex *e, int32_t id)
{
    if (e->oihw[id]) return e->oihw[id];
    const Node *n = &e->g->nodes[id];
    if (onnx_op_of(n->op)->kind == OM_PARAM && only_filter(e, id)) {
        e->oihw[id] = param_value(e, id, true);
    } else {
        static const int64_t hwio_to_oihw[4] = { 3, 2, 0, 1 };
        const char *in[1] = { get(e, id, LAY_NHWC) };
        const char *out = xprintf(e, "%s/oihw", in[0]);
        attr_ints(e, add_node(e, "Transpose", xprintf(e, "Transpose#%d/oihw", (int)id), 1, in, out), "perm", hwio_to_oihw, 4);
        e->oihw[id] = out;
    }
    return e->oihw[id];
}

/* The add reading conv `id` alone, when it adds a [F] param: it becomes Conv's bias. */
static int32_t conv_bias_add(Ex *e, int32_t id)
{
    if (e->out_name[id]) return -1;
    int32_t found = -1;
    for (int j = id + 1; j < e->g->nnodes; j++) {
        const Node *r = &e->g->nodes[j];
        if (!e->need[j]) continue;
        for (int k = 0; k < r->nin; k++)
            if (r->in[k] == id) {
                if (found >= 0 || k != 0) return -1;
                found = j;
            }
    }
    if (found < 0) return -1;
    const Node *a = &e->g->nodes[found], *c = &e->g->nodes[id];
    const Node *b = &e->g->nodes[a->in[1]];
    const OnnxOp *am = onnx_op_of(a->op), *bm = onnx_op_of(b->op);
    bool is_add = am && am->kind == OM_BINARY && strcmp(am->onnx, "Add") == 0;
    if (!is_add || !bm || bm->kind != OM_PARAM || b->shape.rank != 1 || !dim_eq(b->shape.d[0], c->shape.d[3])) return -1;
    return found;
}

static void window_attrs(Ex *e, Onnx__NodeProto *o, const WinAttr *w, bool kernel)
{
    if (kernel) attr_ints(e, o, "kernel_shape", (int64_t[]){ w->kh, w->kw }, 2);
    attr_ints(e, o, "strides", (int64_t[]){ w->sh, w->sw }, 2);
    attr_ints(e, o, "pads", (int64_t[]){ w->pt, w->pl, w->pb, w->pr }, 4);
}

/* Whether reshape node n is flatten()'s: [D0, D1*...*Dk] from [D0, ..., Dk]. */
static bool is_flatten(const Node *n, const Node *x)
{
    if (n->shape.rank != 2 || x->shape.rank < 1 || !dim_eq(n->shape.d[0], x->shape.d[0]) || n->shape.d[1].sym >= 0) return false;
    int64_t p = 1;
    for (int i = 1; i < x->shape.rank; i++) {
        if (x->shape.d[i].sym >= 0 || !gc_mul_i64(p, x->shape.d[i].v, &p)) return false;
    }
    return p == n->shape.d[1].v;
}

/* Whether every input of n is rank 4 and made NCHW (or a scalar, for elementwise ops). */
static bool all_nchw(Ex *e, const Node *n, bool scalars)
{
    bool any = false;
    for (int k = 0; k < n->nin; k++) {
        const Node *x = &e->g->nodes[n->in[k]];
        if (scalars && x->shape.rank == 0) continue;
        if (e->nat[n->in[k]] != LAY_NCHW || x->shape.rank != 4) return false;
        any = true;
    }
    return any;
}

static void export_node(Ex *e, int32_t id)
{
    const Graph *g = e->g;
    const Node *n = &g->nodes[id];
    const OnnxOp *m = onnx_op_of(n->op);
    const char *nm = xprintf(e, "%s#%d", m && m->onnx ? m->onnx : "node", (int)id);
    e->nat[id] = LAY_NHWC;
    if (e->bias_of[id] >= 0) {   /* made by its conv */
        e->nat[id] = LAY_NCHW;
        e->val[id] = e->val[e->bias_of[id]];
        return;
    }
    switch (m ? m->kind : OM_KIND_COUNT) {
    case OM_INPUT: e->val[id] = g->nodes[id].name; return;
    case OM_PARAM: case OM_CONST: return;   /* made when read (get) */
    case OM_UNARY: case OM_IDENTITY: {
        Lay l = e->nat[n->in[0]];
        const char *in[1] = { get(e, n->in[0], l) };
        e->nat[id] = l;
        e->val[id] = l == LAY_NHWC ? plain_name(e, id) : nchw_name(e, id);
        add_node(e, m->onnx, nm, 1, in, e->val[id]);
        return;
    }
    case OM_BINARY: case OM_CONCAT: {
        bool nchw = all_nchw(e, n, m->kind == OM_BINARY);
        const char **in = xalloc(e, (size_t)n->nin, sizeof *in);
        if (!in) return;
        for (int k = 0; k < n->nin; k++) {
            bool scalar = g->nodes[n->in[k]].shape.rank == 0;
            in[k] = get(e, n->in[k], nchw && !scalar ? LAY_NCHW : LAY_NHWC);
        }
        e->nat[id] = nchw ? LAY_NCHW : LAY_NHWC;
        e->val[id] = nchw ? nchw_name(e, id) : plain_name(e, id);
        Onnx__NodeProto *o = add_node(e, m->onnx, nm, n->nin, in, e->val[id]);
        if (m->kind == OM_CONCAT) attr_int(e, o, "axis", nchw ? to_nhwc[om_concat_axis(n)] : om_concat_axis(n));
        return;
    }
    case OM_ROWS: {
        if (n->a.axes.after != 0) {   /* softmax(x, axis=) along another axis than the last (issue 14) */
            diag_error(e->d, n->loc, "export: %s along axis %d, not the last, has no ONNX form here", op_name(n->op),
                       -1 - n->a.axes.after);
            return;
        }
        bool nchw = all_nchw(e, n, false);
        const char *in[1] = { get(e, n->in[0], nchw ? LAY_NCHW : LAY_NHWC) };
        e->nat[id] = nchw ? LAY_NCHW : LAY_NHWC;
        e->val[id] = nchw ? nchw_name(e, id) : plain_name(e, id);
        attr_int(e, add_node(e, m->onnx, nm, 1, in, e->val[id]), "axis", nchw ? 1 : -1);
        return;
    }
    case OM_MATMUL: {
        const char *in[2] = { get(e, n->in[0], LAY_NHWC), get(e, n->in[1], LAY_NHWC) };
        e->val[id] = plain_name(e, id);
        if (!om_matmul_ta(n) && !om_matmul_tb(n)) {
            add_node(e, m->onnx, nm, 2, in, e->val[id]);
        } else {
            Onnx__NodeProto *o = add_node(e, "Gemm", xprintf(e, "Gemm#%d", (int)id), 2, in, e->val[id]);
            attr_int(e, o, "transA", om_matmul_ta(n));
            attr_int(e, o, "transB", om_matmul_tb(n));
        }
        return;
    }
    case OM_CONV: {
        int32_t add = conv_bias_add(e, id);
        const char *in[3] = { get(e, n->in[0], LAY_NCHW), filter(e, n->in[1]), NULL };
        if (add >= 0) {
            in[2] = get(e, g->nodes[add].in[1], LAY_NHWC);
            e->bias_of[add] = id;
        }
        e->nat[id] = LAY_NCHW;
        e->val[id] = nchw_name(e, id);
        window_attrs(e, add_node(e, m->onnx, nm, add >= 0 ? 3 : 2, in, e->val[id]), om_win(n), true);
        return;
    }
    case OM_POOL: {
        const char *in[1] = { get(e, n->in[0], LAY_NCHW) };
        e->nat[id] = LAY_NCHW;
        e->val[id] = nchw_name(e, id);
        window_attrs(e, add_node(e, m->onnx, nm, 1, in, e->val[id]), om_win(n), true);
        return;
    }
    case OM_GLOBAL_POOL: {
        /* [N, C, 1, 1], then flattened to graphc's [N, C] */
        const char *in[1] = { get(e, n->in[0], LAY_NCHW) };
        const char *pooled = xprintf(e, "%s/pooled", stem(e, id));
        add_node(e, m->onnx, nm, 1, in, pooled);
        e->val[id] = plain_name(e, id);
        attr_int(e, add_node(e, "Flatten", xprintf(e, "Flatten#%d", (int)id), 1, &pooled, e->val[id]), "axis", 1);
        return;
    }
    case OM_RESHAPE: {
        const Node *x = &g->nodes[n->in[0]];
        const char *in[2] = { get(e, n->in[0], LAY_NHWC), NULL };
        e->val[id] = plain_name(e, id);
        if (is_flatten(n, x)) {
            attr_int(e, add_node(e, "Flatten", xprintf(e, "Flatten#%d", (int)id), 1, in, e->val[id]), "axis", 1);
            return;
        }
        /* the target with -1 for its one symbolic dimension (the batch) */
        int64_t *t = xalloc(e, (size_t)n->shape.rank, sizeof *t);
        if (!t) return;
        for (int i = 0; i < n->shape.rank; i++) t[i] = n->shape.d[i].sym >= 0 ? -1 : n->shape.d[i].v;
        in[1] = xprintf(e, "%s/shape", e->val[id]);
        int64_t rank = n->shape.rank;
        add_init(e, in[1], ONNX__TENSOR_PROTO__DATA_TYPE__INT64, &rank, 1, t, (size_t)rank * sizeof *t);
        add_node(e, m->onnx, nm, 2, in, e->val[id]);
        return;
    }
    case OM_BATCH_NORM: {
        /* ONNX normalizes axis 1: an NCHW image's channels, or [N, C]'s ([N, T, C]: no form) */
        int rank = g->nodes[n->in[0]].shape.rank;
        if (rank != 4 && rank != 2) break;
        Lay l = rank == 4 ? LAY_NCHW : LAY_NHWC;
        const char *in[5] = { get(e, n->in[0], l) };
        for (int k = 1; k < 5; k++) in[k] = get(e, n->in[k], LAY_NHWC);
        e->nat[id] = l;
        e->val[id] = l == LAY_NCHW ? nchw_name(e, id) : plain_name(e, id);
        Onnx__NodeProto *o = add_node(e, m->onnx, nm, 5, in, e->val[id]);
        attr_float(e, o, "epsilon", om_bn_eps(n));
        attr_float(e, o, "momentum", om_bn_momentum(n));
        return;
    }
    case OM_KIND_COUNT: break;
    }
    diag_error(e->d, n->loc, "export: %s has no ONNX form (graphc exports the ops of an inference graph; see docs/onnx.md)",
               op_name(n->op));
}

/* The graph's arrays, sized for the most any node can add (a transpose in and out, a
 * filter's transpose, its own node and a reshape's shape tensor). */
static bool setup(Ex *e)
{
    const Graph *g = e->g;
    size_t nn = (size_t)(g->nnodes ? g->nnodes : 1);
    e->need = xalloc(e, nn, sizeof *e->need);
    e->out_name = xalloc(e, nn, sizeof *e->out_name);
    e->nat = xalloc(e, nn, sizeof *e->nat);
    e->val = xalloc(e, nn, sizeof *e->val);
    e->other = xalloc(e, nn, sizeof *e->other);
    e->oihw = xalloc(e, nn, sizeof *e->oihw);
    e->bias_of = xalloc(e, nn, sizeof *e->bias_of);
    e->gp = xnew(e, &onnx__graph_proto__descriptor);
    e->node_cap = 5 * nn + (size_t)g->noutputs;
    e->init_cap = 2 * nn;
    if (e->oom) return false;
    e->gp->node = xalloc(e, e->node_cap, sizeof *e->gp->node);
    e->gp->initializer = xalloc(e, e->init_cap, sizeof *e->gp->initializer);
    e->gp->input = xalloc(e, (size_t)g->ninputs, sizeof *e->gp->input);
    e->gp->output = xalloc(e, (size_t)g->noutputs, sizeof *e->gp->output);
    if (e->oom) return false;
    for (int i = 0; i < g->nnodes; i++) e->bias_of[i] = -1;
    for (int i = g->noutputs - 1; i >= 0; i--) {
        e->need[g->outputs[i].node] = true;
        e->out_name[g->outputs[i].node] = g->outputs[i].name;
    }
    for (int i = g->nnodes - 1; i >= 0; i--)
        if (e->need[i])
            for (int k = 0; k < g->nodes[i].nin; k++) e->need[g->nodes[i].in[k]] = true;
    return true;
}

static Onnx__ModelProto *build(Ex *e)
{
    const Graph *g = e->g;
    if (!setup(e)) return NULL;
    Onnx__GraphProto *gp = e->gp;
    gp->name = (char *)(g->model_name ? g->model_name : "graphc");
    for (int i = 0; i < g->ninputs; i++)
        if (e->need[g->inputs[i]]) gp->input[gp->n_input++] = value_info(e, g->nodes[g->inputs[i]].name, &g->nodes[g->inputs[i]]);
    for (int i = 0; i < g->nnodes && !e->oom; i++)
        if (e->need[i]) export_node(e, i);
    for (int i = 0; i < g->noutputs && !e->oom; i++) {
        int32_t id = g->outputs[i].node;
        const char *v = get(e, id, LAY_NHWC);
        if (v && strcmp(v, g->outputs[i].name) != 0) add_node(e, "Identity", xprintf(e, "Identity#%s", g->outputs[i].name), 1, &v, g->outputs[i].name);
        gp->output[gp->n_output++] = value_info(e, g->outputs[i].name, &g->nodes[id]);
    }
    Onnx__ModelProto *mp = xnew(e, &onnx__model_proto__descriptor);
    Onnx__OperatorSetIdProto *ops = xnew(e, &onnx__operator_set_id_proto__descriptor);
    Onnx__OperatorSetIdProto **opl = xalloc(e, 1, sizeof *opl);
    if (e->oom) return NULL;
    ops->domain = "";
    ops->has_version = 1;
    ops->version = ONNX_OPSET;
    opl[0] = ops;
    mp->has_ir_version = 1;
    mp->ir_version = ONNX_IR_VERSION;
    mp->n_opset_import = 1;
    mp->opset_import = opl;
    mp->producer_name = "graphc";
    mp->producer_version = PACKAGE_VERSION;
    mp->graph = gp;
    return mp;
}

int onnx_export(const Graph *g, const Weights *w, uint8_t **out, size_t *len, DiagSink *d)
{
    Ex e = { .g = g, .w = w, .d = d };
    arena_init(&e.ar);
    *out = NULL;
    *len = 0;
    int errors = d->nerrors, rc = -1;
    if (g->noutputs == 0) {
        diag_plain(d, "export: the model has no output");
        goto out;
    }
    Onnx__ModelProto *mp = build(&e);
    if (e.oom || !mp) {
        diag_plain(d, "out of memory");
        goto out;
    }
    if (d->nerrors > errors) goto out;
    size_t n = protobuf_c_message_get_packed_size(&mp->base);
    if (n > (size_t)INT32_MAX) {
        diag_plain(d, "export: the model is %zu bytes, over protobuf's 2 GB limit", n);
        goto out;
    }
    *out = gc_malloc(n ? n : 1);
    if (!*out) {
        diag_plain(d, "out of memory");
        goto out;
    }
    *len = protobuf_c_message_pack(&mp->base, *out);
    rc = 0;
out:
    arena_free(&e.ar);
    return rc;
}
