/* graphc import: an ONNX model into a .net file and its weights (docs/onnx.md).
 *
 * Nothing in the file is trusted: the wire format is checked (bounded nesting) before
 * protobuf-c unpacks it, then every field the import reads is range-checked: versions,
 * names (each value defined once, every input defined), the order of the nodes (a
 * cycle is an error), tensor dimensions and data lengths against their types,
 * attribute types and values.  Only the nodes the outputs need are converted, in an
 * order where each follows its inputs; each op's converter (import_ops.c) builds
 * graphc nodes, whose shape rules check the rest. */
#include <stdarg.h>
#include <string.h>
#include "config.h"
#include "onnx/imp.h"
#include "graph/lower.h"
#include "graph/passes.h"
#include "util/file.h"

/* ---- names -------------------------------------------------------------------------- */

struct NameMap {
    const char **key;
    int *val;
    size_t cap;   /* a power of two */
    size_t n;
};

static uint64_t hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static NameMap *map_new(size_t want)
{
    NameMap *m = gc_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cap = 16;
    while (m->cap < 2 * want) m->cap *= 2;
    m->key = gc_calloc(m->cap, sizeof *m->key);
    m->val = gc_calloc(m->cap, sizeof *m->val);
    if (!m->key || !m->val) {
        gc_free(m->key);
        gc_free(m->val);
        gc_free(m);
        return NULL;
    }
    return m;
}

static void map_free(NameMap *m)
{
    if (!m) return;
    gc_free(m->key);
    gc_free(m->val);
    gc_free(m);
}

static size_t slot(const NameMap *m, const char *k)
{
    size_t i = hash(k) & (m->cap - 1);
    while (m->key[i] && strcmp(m->key[i], k) != 0) i = (i + 1) & (m->cap - 1);
    return i;
}

static int map_get(const NameMap *m, const char *k)
{
    size_t i = slot(m, k);
    return m->key[i] ? m->val[i] : -1;
}

/* The map is sized for every name up front: it never grows. */
static void map_put(NameMap *m, const char *k, int v)
{
    size_t i = slot(m, k);
    if (!m->key[i]) m->n++;
    m->key[i] = k;
    m->val[i] = v;
}

/* ---- messages ----------------------------------------------------------------------- */

static const char *str(const char *s) { return s ? s : ""; }

bool imp_fail(Imp *I, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (I->cur >= 0) {
        const Onnx__NodeProto *n = I->gp->node[I->cur];
        diag_plain(I->d, "%s: node %d '%s' (%s): %s", I->file, I->cur, str(n->name), str(n->op_type), msg);
    } else {
        diag_plain(I->d, "%s: %s", I->file, msg);
    }
    return false;
}

bool imp_oom(Imp *I)
{
    I->oom = true;
    diag_plain(I->d, "out of memory");
    return false;
}

/* ---- values ------------------------------------------------------------------------- */

static int add_val(Imp *I, const char *name, int producer)
{
    if (I->nvals == I->vals_cap) return -1;   /* sized up front */
    IVal *v = &I->vals[I->nvals];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->producer = producer;
    map_put(I->map, name, I->nvals);
    return I->nvals++;
}

IVal *imp_in(Imp *I, const Onnx__NodeProto *n, size_t k)
{
    if (k >= n->n_input || !n->input[k] || !n->input[k][0]) return NULL;
    int i = map_get(I->map, n->input[k]);
    return i >= 0 ? &I->vals[i] : NULL;
}

bool imp_set_out(Imp *I, const Onnx__NodeProto *n, size_t k, const IVal *v)
{
    int i = map_get(I->map, n->output[k]);
    IVal *o = &I->vals[i];
    const char *name = o->name;
    int producer = o->producer, uses = o->uses;
    *o = *v;
    o->name = name;
    o->producer = producer;
    o->uses = uses;
    return true;
}

bool imp_extra_outputs_unused(Imp *I, const Onnx__NodeProto *n, size_t from)
{
    for (size_t k = from; k < n->n_output; k++) {
        if (!n->output[k][0]) continue;
        int i = map_get(I->map, n->output[k]);
        if (I->vals[i].uses > 0)
            return imp_fail(I, "its output %zu ('%s') is read, and graphc only makes output 0 of this op", k, n->output[k]);
    }
    return true;
}

/* ---- attributes --------------------------------------------------------------------- */

const Onnx__AttributeProto *imp_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (strcmp(str(n->attribute[i]->name), name) == 0) return n->attribute[i];
    return NULL;
}

/* Whether a has type t; writers before IR 3 left the type out, so a missing type is
 * taken from the field that is set. */
static bool attr_is(const Onnx__AttributeProto *a, Onnx__AttributeProto__AttributeType t)
{
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED) return a->type == t;
    switch (t) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: return a->has_i;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: return a->has_f;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: return a->has_s;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: return a->n_ints > 0;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: return a->n_floats > 0;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: return a->t != NULL;
    default: return false;
    }
}

bool imp_attr_int(Imp *I, const Onnx__NodeProto *n, const char *name, int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    const Onnx__AttributeProto *a = imp_attr(n, name);
    *out = def;
    if (!a) return true;
    if (!attr_is(a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT)) return imp_fail(I, "attribute '%s' must be an int", name);
    if (a->i < lo || a->i > hi)
        return imp_fail(I, "attribute '%s' is %lld; graphc takes %lld to %lld", name, (long long)a->i, (long long)lo, (long long)hi);
    *out = a->i;
    return true;
}

bool imp_attr_float(Imp *I, const Onnx__NodeProto *n, const char *name, float def, float *out)
{
    const Onnx__AttributeProto *a = imp_attr(n, name);
    *out = def;
    if (!a) return true;
    if (!attr_is(a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT)) return imp_fail(I, "attribute '%s' must be a float", name);
    if (!(a->f == a->f) || a->f > 3.4e38f || a->f < -3.4e38f) return imp_fail(I, "attribute '%s' is not a finite number", name);
    *out = a->f;
    return true;
}

bool imp_attr_ints(Imp *I, const Onnx__NodeProto *n, const char *name, int count, int64_t lo, int64_t hi, int64_t *out, int *got)
{
    const Onnx__AttributeProto *a = imp_attr(n, name);
    *got = 0;
    if (!a) return true;
    if (!attr_is(a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS)) return imp_fail(I, "attribute '%s' must be a list of ints", name);
    if ((count >= 0 && a->n_ints != (size_t)count) || (count < 0 && a->n_ints > MAX_RANK))
        return imp_fail(I, "attribute '%s' has %zu values; graphc expects %s%d", name, a->n_ints, count < 0 ? "at most " : "",
                        count < 0 ? MAX_RANK : count);
    for (size_t i = 0; i < a->n_ints; i++) {
        if (a->ints[i] < lo || a->ints[i] > hi)
            return imp_fail(I, "attribute '%s': value %zu is %lld; graphc takes %lld to %lld", name, i, (long long)a->ints[i],
                            (long long)lo, (long long)hi);
        out[i] = a->ints[i];
    }
    *got = (int)a->n_ints;
    return true;
}

bool imp_attr_string(Imp *I, const Onnx__NodeProto *n, const char *name, const char *def, char *buf, size_t size)
{
    const Onnx__AttributeProto *a = imp_attr(n, name);
    snprintf(buf, size, "%s", def);
    if (!a) return true;
    if (!attr_is(a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING)) return imp_fail(I, "attribute '%s' must be a string", name);
    if (a->s.len >= size || memchr(a->s.data, 0, a->s.len)) return imp_fail(I, "attribute '%s' is not a known value", name);
    if (a->s.len) memcpy(buf, a->s.data, a->s.len);
    buf[a->s.len] = 0;
    return true;
}

/* ---- tensors ------------------------------------------------------------------------ */

/* Largest constant read, in elements: 2^32 (16 GB of floats), far past any model's
 * tensor and short of what a size_t product can overflow. */
#define MAX_NUMEL ((int64_t)1 << 32)

static const char *type_name(int t)
{
    static const char *const names[] = { "undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64",
                                         "string", "bool", "float16", "double", "uint32", "uint64", "complex64",
                                         "complex128", "bfloat16" };
    return t >= 0 && t < (int)(sizeof names / sizeof names[0]) ? names[t] : "an unknown type";
}

bool imp_tensor(Imp *I, const Onnx__TensorProto *t, const char *what, IVal *out)
{
    memset(out, 0, sizeof *out);
    int type = t->has_data_type ? t->data_type : 0;
    bool is_f = type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    bool is_i64 = type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64, is_i32 = type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    if (!is_f && !is_i64 && !is_i32) return imp_fail(I, "%s: its type is %s; graphc reads float, int64 and int32 tensors", what, type_name(type));
    if ((t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) || t->n_external_data)
        return imp_fail(I, "%s: its data is in an external file, which graphc does not read", what);
    if (t->segment) return imp_fail(I, "%s: a tensor in segments is not supported", what);
    if (t->n_dims > MAX_RANK) return imp_fail(I, "%s: rank %zu; graphc tensors have at most %d dimensions", what, t->n_dims, MAX_RANK);
    int64_t numel = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || t->dims[i] > MAX_NUMEL || !gc_mul_i64(numel, t->dims[i], &numel) || numel > MAX_NUMEL)
            return imp_fail(I, "%s: dimension %zu (%lld) is negative or too large", what, i, (long long)t->dims[i]);
        out->dims[i] = t->dims[i];
    }
    out->rank = (int)t->n_dims;
    out->numel = numel;
    size_t esz = is_f || is_i32 ? 4 : 8;
    size_t have = t->has_raw_data ? t->raw_data.len / esz : is_f ? t->n_float_data : is_i64 ? t->n_int64_data : t->n_int32_data;
    if ((t->has_raw_data && t->raw_data.len % esz) || have != (size_t)numel)
        return imp_fail(I, "%s: %s[%lld elements] holds %zu bytes of data%s", what, type_name(type), (long long)numel,
                        t->has_raw_data ? t->raw_data.len : have * esz, t->has_raw_data ? "" : " (typed fields)");
    if (is_f) {
        if (numel == 0) return imp_fail(I, "%s: an empty float tensor (graphc's have no zero dimension)", what);
        out->kind = VK_FLOATS;
        out->f = gc_malloc((size_t)numel * sizeof *out->f);
        if (!out->f) return imp_oom(I);
        memcpy(out->f, t->has_raw_data ? (const void *)t->raw_data.data : (const void *)t->float_data, (size_t)numel * 4);
        return true;
    }
    if (t->n_dims > 1) return imp_fail(I, "%s: an integer tensor of rank %zu (graphc reads integer scalars and vectors)", what, t->n_dims);
    out->kind = VK_INTS;
    out->iv = gc_calloc((size_t)(numel ? numel : 1), sizeof *out->iv);
    if (!out->iv) return imp_oom(I);
    for (int64_t i = 0; i < numel; i++) {
        int64_t v;
        if (t->has_raw_data && is_i64) memcpy(&v, t->raw_data.data + 8 * i, 8);
        else if (t->has_raw_data) { int32_t x; memcpy(&x, t->raw_data.data + 4 * i, 4); v = x; }
        else v = is_i64 ? t->int64_data[i] : t->int32_data[i];
        out->iv[i] = (Dim){ v, -1 };
    }
    return true;
}

/* ---- graphc nodes ------------------------------------------------------------------- */

Shape imp_onnx_shape(const Imp *I, const IVal *v)
{
    Shape s = I->g->nodes[v->node].shape;
    switch (v->lay) {
    case LAY_NCHW: return (Shape){ 4, { s.d[0], s.d[3], s.d[1], s.d[2] } };
    case LAY_NC11: return (Shape){ 4, { s.d[0], s.d[1], { 1, -1 }, { 1, -1 } } };
    case LAY_FLAT: return (Shape){ 2, { s.d[0], { v->c * v->h * v->w, -1 } } };
    case LAY_OIHW: return (Shape){ 4, { s.d[3], s.d[2], s.d[0], s.d[1] } };
    default: return s;
    }
}

int32_t imp_node(Imp *I, OpKind op, const int32_t *in, int nin, const NodeAttr *a, const Shape *tshape)
{
    DiagSink tmp;
    diag_init(&tmp, NULL);
    int32_t id = graph_add_inferred(I->g, op, in, nin, (Loc){ 0, 0 }, a, tshape, &tmp);
    if (id < 0) {
        /* "graphc: error: conv2d: ..." -> "FILE: node N ...: conv2d: ..." */
        const char *msg = tmp.buf ? tmp.buf : "out of memory";
        const char *p = strstr(msg, "error: ");
        char line[512];
        snprintf(line, sizeof line, "%s", p ? p + 7 : msg);
        line[strcspn(line, "\n")] = 0;
        imp_fail(I, "%s", line);
    }
    diag_free(&tmp);
    return id;
}

int32_t imp_param(Imp *I, const char *name, Shape shape, const float *data)
{
    int v = graph_add_var(I->g, name, shape, shape.rank >= 2 ? INIT_GLOROT_UNIFORM : INIT_ZEROS, (Loc){ 0, 0 });
    if (v < 0) return imp_oom(I), -1;
    if (v >= I->vdata_cap) {
        int cap = I->vdata_cap ? 2 * I->vdata_cap : 16;
        float **nv = gc_realloc(I->vdata, (size_t)cap * sizeof *nv);
        if (!nv) return imp_oom(I), -1;
        memset(nv + I->vdata_cap, 0, (size_t)(cap - I->vdata_cap) * sizeof *nv);
        I->vdata = nv;
        I->vdata_cap = cap;
    }
    size_t n = (size_t)shape_numel(&shape);
    I->vdata[v] = gc_malloc(n * sizeof(float));
    if (!I->vdata[v]) return imp_oom(I), -1;
    memcpy(I->vdata[v], data, n * sizeof(float));
    NodeAttr a = om_attr_param(v);
    int32_t id = imp_node(I, om_op(OM_PARAM), NULL, 0, &a, NULL);
    if (id >= 0) I->g->nodes[id].name = I->g->vars[v].name;
    return id;
}

/* ---- the model ---------------------------------------------------------------------- */

static bool check_model(Imp *I, const Onnx__ModelProto *mp)
{
    if (!mp->has_ir_version || mp->ir_version < 3 || mp->ir_version > 10)
        return imp_fail(I, "IR version %lld; graphc reads versions 3 to 10", (long long)mp->ir_version);
    I->opset = -1;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        const char *dom = str(o->domain);
        if (dom[0] == 0 || strcmp(dom, "ai.onnx") == 0) I->opset = o->has_version ? o->version : -1;
    }
    if (I->opset < 9 || I->opset > 21)
        return imp_fail(I, "%s opset %lld; graphc reads opsets 9 to 21 of the default domain", I->opset < 0 ? "no" : "the", (long long)I->opset);
    if (!mp->graph) return imp_fail(I, "the model has no graph");
    /* printable ASCII of the producer's name and version, for the header comment */
    snprintf(I->producer, sizeof I->producer, "%s%s%s", mp->producer_name && mp->producer_name[0] ? mp->producer_name : "an unnamed producer",
             mp->producer_version && mp->producer_version[0] ? " " : "", mp->producer_version ? mp->producer_version : "");
    for (char *p = I->producer; *p; p++)
        if (*p < 0x20 || *p > 0x7e) *p = '?';
    const Onnx__GraphProto *gp = mp->graph;
    if (gp->n_output == 0) return imp_fail(I, "the graph has no output");
    if (gp->n_sparse_initializer) return imp_fail(I, "sparse initializers are not supported");
    return true;
}

/* Every value named once: the initializers, the inputs that are not initializers, and
 * each node's outputs; then every node input and graph output defined. */
static bool define_values(Imp *I)
{
    const Onnx__GraphProto *gp = I->gp;
    size_t total = gp->n_initializer + gp->n_input;
    for (size_t i = 0; i < gp->n_node; i++) total += gp->node[i]->n_output;
    if (total > (size_t)INT32_MAX / 4) return imp_fail(I, "too many values (%zu)", total);
    I->map = map_new(total);
    I->vals = gc_calloc(total ? total : 1, sizeof *I->vals);
    if (!I->map || !I->vals) return imp_oom(I);
    I->vals_cap = (int)total;
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const char *nm = str(gp->initializer[i]->name);
        if (!nm[0]) return imp_fail(I, "initializer %zu has no name", i);
        if (map_get(I->map, nm) >= 0) return imp_fail(I, "initializer '%s' is defined twice", nm);
        add_val(I, nm, -1);
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        const char *nm = str(gp->input[i]->name);
        if (!nm[0]) return imp_fail(I, "graph input %zu has no name", i);
        if (map_get(I->map, nm) >= 0) continue;   /* an initializer, listed as an input before IR 4 */
        add_val(I, nm, -1);
    }
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = gp->node[i];
        I->cur = (int)i;
        if (!n->op_type || !n->op_type[0]) return imp_fail(I, "the node has no op type");
        for (size_t k = 0; k < n->n_output; k++) {
            const char *nm = str(n->output[k]);
            if (!nm[0]) continue;   /* an optional output left out */
            int prev = map_get(I->map, nm);
            if (prev >= 0)
                return imp_fail(I, "its output '%s' is already defined (%s)", nm,
                                I->vals[prev].producer >= 0 ? "by another node" : "as an input or initializer");
            add_val(I, nm, (int)i);
        }
    }
    I->cur = -1;
    return true;
}

/* The nodes the outputs need, in an order where each follows the nodes its inputs come
 * from: the file's order when it is one (ONNX requires it, and the .net file then reads
 * in the model's order), else Kahn's algorithm's, and what that leaves over is a cycle.
 * Counts each value's readers on the way. */
static int *order_nodes(Imp *I, int *count)
{
    const Onnx__GraphProto *gp = I->gp;
    size_t nn = gp->n_node ? gp->n_node : 1;
    bool *need = gc_calloc(nn, sizeof *need);
    int *stack = gc_malloc(nn * sizeof *stack), *order = gc_malloc(nn * sizeof *order), *pending = gc_calloc(nn, sizeof *pending);
    int *start = NULL, *edge = NULL, *ord = NULL, ns = 0, no = 0, nneed = 0;
    size_t nedge = 0;
    if (!need || !stack || !order || !pending) { imp_oom(I); goto out; }
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *nm = str(gp->output[i]->name);
        int v = map_get(I->map, nm);
        if (v < 0) { imp_fail(I, "graph output '%s' is not defined by any node, input or initializer", nm); goto out; }
        I->vals[v].uses++;
        int p = I->vals[v].producer;
        if (p >= 0 && !need[p]) { need[p] = true; stack[ns++] = p; }
    }
    while (ns > 0) {   /* mark backwards from the outputs; check every input is defined */
        int i = stack[--ns];
        nneed++;
        const Onnx__NodeProto *n = gp->node[i];
        for (size_t k = 0; k < n->n_input; k++) {
            if (!n->input[k] || !n->input[k][0]) continue;
            int v = map_get(I->map, n->input[k]);
            if (v < 0) {
                I->cur = i;
                imp_fail(I, "its input '%s' is not defined by any node, input or initializer", n->input[k]);
                goto out;
            }
            I->vals[v].uses++;
            int p = I->vals[v].producer;
            if (p >= 0) {
                pending[i]++;
                nedge++;
                if (!need[p]) { need[p] = true; stack[ns++] = p; }
            }
        }
    }
    bool in_order = true;
    for (size_t i = 0; i < gp->n_node && in_order; i++) {
        if (!need[i]) continue;
        for (size_t k = 0; k < gp->node[i]->n_input && in_order; k++) {
            int v = gp->node[i]->input[k][0] ? map_get(I->map, gp->node[i]->input[k]) : -1;
            in_order = v < 0 || I->vals[v].producer < (int)i;
        }
        order[no++] = (int)i;
    }
    if (!in_order) {
        /* the edges producer -> reader, grouped by producer */
        start = gc_calloc(nn + 1, sizeof *start);
        edge = gc_malloc((nedge ? nedge : 1) * sizeof *edge);
        if (!start || !edge) { imp_oom(I); goto out; }
        for (size_t i = 0; i < gp->n_node; i++)
            for (size_t k = 0; need[i] && k < gp->node[i]->n_input; k++) {
                int v = gp->node[i]->input[k][0] ? map_get(I->map, gp->node[i]->input[k]) : -1;
                if (v >= 0 && I->vals[v].producer >= 0) start[I->vals[v].producer + 1]++;
            }
        for (size_t i = 0; i < nn; i++) start[i + 1] += start[i];
        int *fill = stack;   /* the stack is free until Kahn's loop below */
        for (size_t i = 0; i < nn; i++) fill[i] = start[i];
        for (size_t i = 0; i < gp->n_node; i++)
            for (size_t k = 0; need[i] && k < gp->node[i]->n_input; k++) {
                int v = gp->node[i]->input[k][0] ? map_get(I->map, gp->node[i]->input[k]) : -1;
                if (v >= 0 && I->vals[v].producer >= 0) edge[fill[I->vals[v].producer]++] = (int)i;
            }
        no = ns = 0;
        for (size_t i = 0; i < gp->n_node; i++)
            if (need[i] && pending[i] == 0) stack[ns++] = (int)i;
        while (ns > 0) {
            int i = stack[--ns];
            order[no++] = i;
            for (int e = start[i]; e < start[i + 1]; e++)
                if (--pending[edge[e]] == 0) stack[ns++] = edge[e];
        }
        if (no < nneed) {
            for (size_t i = 0; i < gp->n_node; i++)
                if (need[i] && pending[i] > 0) {
                    I->cur = (int)i;
                    imp_fail(I, "the graph has a cycle through this node");
                    break;
                }
            goto out;
        }
    }
    ord = order;
    order = NULL;
    *count = no;
out:
    gc_free(need);
    gc_free(stack);
    gc_free(order);
    gc_free(pending);
    gc_free(start);
    gc_free(edge);
    return ord;
}

/* A name as a .net identifier ([A-Za-z_][A-Za-z0-9_]*): a size symbol, the model's. */
static bool sym_name(const char *s, char *buf, size_t size)
{
    size_t n = 0;
    for (; *s && n + 1 < size; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (n > 0 && c >= '0' && c <= '9');
        buf[n++] = ok ? c : '_';
    }
    buf[n] = 0;
    return n > 0;
}

/* A graph input: f32 or i32, every dimension known but the first, which may be a
 * symbol (its dim_param, or "B" when it has neither value nor name). */
static bool define_input(Imp *I, const Onnx__ValueInfoProto *vi, int index)
{
    const char *nm = str(vi->name);
    int v = map_get(I->map, nm);
    IVal *val = &I->vals[v];
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return imp_fail(I, "input '%s' is not a tensor", nm);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int et = tt->has_elem_type ? tt->elem_type : 0;
    if (et != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && et != ONNX__TENSOR_PROTO__DATA_TYPE__INT32)
        return imp_fail(I, "input '%s' is %s; graphc's inputs are float or int32", nm, type_name(et));
    if (!tt->shape) return imp_fail(I, "input '%s' has no shape", nm);
    if (tt->shape->n_dim < 1 || tt->shape->n_dim > MAX_RANK)
        return imp_fail(I, "input '%s' has rank %zu; graphc's inputs have 1 to %d dimensions", nm, tt->shape->n_dim, MAX_RANK);
    Shape s = { (int)tt->shape->n_dim, { { 0, -1 } } };
    for (int i = 0; i < s.rank; i++) {
        const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[i];
        char sym[64];
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (dm->dim_value < 1 || dm->dim_value > ((int64_t)1 << 40))
                return imp_fail(I, "input '%s': dimension %d is %lld", nm, i, (long long)dm->dim_value);
            s.d[i] = (Dim){ dm->dim_value, -1 };
            continue;
        }
        bool named = dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && sym_name(str(dm->dim_param), sym, sizeof sym);
        if (!named && i != 0)
            return imp_fail(I, "input '%s': dimension %d has no size; graphc needs every dimension but the batch", nm, i);
        int k = graph_sym(I->g, named ? sym : "B");
        if (k < 0) return imp_fail(I, "input '%s': more than %d size symbols", nm, MAX_SYMS);
        s.d[i] = (Dim){ 1, (int16_t)k };
    }
    val->kind = VK_TENSOR;
    val->lay = LAY_SAME;
    if (s.rank == 4 && imp_input_is_image(I, nm)) {
        val->lay = LAY_NCHW;
        s = (Shape){ 4, { s.d[0], s.d[2], s.d[3], s.d[1] } };
    }
    int32_t id = graph_add(I->g, om_op(OM_INPUT), NULL, 0, (Loc){ 0, 0 });
    int32_t *ins = arena_alloc(&I->g->arena, (size_t)(index + 1) * sizeof *ins);
    if (id < 0 || !ins) return imp_oom(I);
    Node *n = &I->g->nodes[id];
    n->tshape = s;
    n->dtype = et == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? DT_F32 : DT_I32;
    n->name = arena_strdup(&I->g->arena, nm);
    n->a = om_attr_input(index);
    if (!n->name || !graph_infer_node(I->g, id, NULL)) return imp_oom(I);
    if (index) memcpy(ins, I->g->inputs, (size_t)index * sizeof *ins);
    ins[index] = id;
    I->g->inputs = ins;
    I->g->ninputs = index + 1;
    val->node = id;
    return true;
}

static bool define_sources(Imp *I)
{
    const Onnx__GraphProto *gp = I->gp;
    for (size_t i = 0; i < gp->n_initializer; i++) {
        int v = map_get(I->map, str(gp->initializer[i]->name));
        if (I->vals[v].uses == 0) continue;   /* not needed */
        char what[300];
        snprintf(what, sizeof what, "initializer '%s'", gp->initializer[i]->name);
        IVal t;
        if (!imp_tensor(I, gp->initializer[i], what, &t)) return false;
        const char *name = I->vals[v].name;
        int uses = I->vals[v].uses;
        I->vals[v] = t;
        I->vals[v].name = name;
        I->vals[v].producer = -1;
        I->vals[v].uses = uses;
    }
    int index = 0;
    for (size_t i = 0; i < gp->n_input; i++) {
        int v = map_get(I->map, str(gp->input[i]->name));
        if (I->vals[v].kind != VK_NONE || I->vals[v].producer >= 0 || I->vals[v].uses == 0) continue;
        if (!define_input(I, gp->input[i], index++)) return false;
    }
    for (int v = 0; v < I->nvals; v++)
        if (I->vals[v].uses > 0 && I->vals[v].producer < 0 && I->vals[v].kind == VK_NONE)
            return imp_fail(I, "value '%s' is read but has no producer, input or initializer", I->vals[v].name);
    return true;
}

static bool convert(Imp *I, const int *order, int count)
{
    for (int j = 0; j < count; j++) {
        const Onnx__NodeProto *n = I->gp->node[order[j]];
        I->cur = order[j];
        if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
            return imp_fail(I, "its domain is '%s'; graphc knows the default domain's ops only", n->domain);
        const ImpOp *op = imp_op(n->op_type);
        if (!op) {
            char list[1024];
            imp_op_list(list, sizeof list);
            return imp_fail(I, "graphc has no such op (it imports %s)", list);
        }
        int nin = 0;
        for (size_t k = 0; k < n->n_input; k++) nin = n->input[k][0] ? (int)k + 1 : nin;
        if (nin < op->min_in || nin > op->max_in)
            return imp_fail(I, "%d inputs; %s takes %d to %d", nin, n->op_type, op->min_in, op->max_in);
        for (size_t a = 0; a < n->n_attribute; a++) {
            const char *an = str(n->attribute[a]->name);
            bool known = false;
            for (int q = 0; q < 8 && op->attrs[q] && !known; q++) known = strcmp(op->attrs[q], an) == 0;
            if (!known) return imp_fail(I, "attribute '%s' is not one graphc understands for %s", an, n->op_type);
        }
        if (!op->fn(I, n)) return false;
        if (I->oom) return false;
        IVal *o = n->n_output && n->output[0][0] ? &I->vals[map_get(I->map, n->output[0])] : NULL;
        if (!o || o->kind == VK_NONE) return imp_fail(I, "internal error: no value made");
    }
    I->cur = -1;
    return true;
}

/* The graph's outputs: tensors, with an NCHW one given out as NHWC (graphc's layout). */
static bool define_outputs(Imp *I)
{
    const Onnx__GraphProto *gp = I->gp;
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *nm = str(gp->output[i]->name);
        IVal *v = &I->vals[map_get(I->map, nm)];
        if (v->kind != VK_TENSOR) return imp_fail(I, "output '%s' is a constant, not computed from the inputs", nm);
        if (v->padded) return imp_fail(I, "output '%s' is a Pad's, which graphc takes only before a Conv", nm);
        if (v->lay == LAY_FLAT || v->lay == LAY_OIHW)
            return imp_fail(I, "output '%s' is %s, which graphc cannot give out in ONNX's order", nm,
                            v->lay == LAY_FLAT ? "a flattened NCHW image" : "a filter in OIHW");
        int32_t node = v->node;
        if (v->lay == LAY_NC11) {
            const Shape *s = &I->g->nodes[node].shape;
            Shape t = { 4, { s->d[0], { 1, -1 }, { 1, -1 }, s->d[1] } };
            node = imp_node(I, om_op(OM_RESHAPE), &node, 1, NULL, &t);
            if (node < 0) return false;
        }
        if (graph_add_output(I->g, nm, node) < 0) return imp_oom(I);
    }
    return true;
}

static void free_vals(Imp *I)
{
    for (int i = 0; i < I->nvals; i++) {
        gc_free(I->vals[i].f);
        gc_free(I->vals[i].iv);
    }
    gc_free(I->vals);
    map_free(I->map);
    gc_free(I->pkeys);
    gc_free(I->pnode);
}

static void free_vdata(Imp *I, int n)
{
    for (int i = 0; i < n && i < I->vdata_cap; i++) gc_free(I->vdata[i]);
    gc_free(I->vdata);
}

/* Reads the model into I->g (and the values of its vars into I->vdata). */
static bool read_model(Imp *I, const void *bytes, size_t len)
{
    char why[256];
    if (len > (size_t)INT32_MAX) return imp_fail(I, "%zu bytes, over protobuf's 2 GB limit", len);
    if (!pb_check(&onnx__model_proto__descriptor, bytes, len, why, sizeof why))
        return imp_fail(I, "not an ONNX model (%s)", why);
    Onnx__ModelProto *mp = (Onnx__ModelProto *)protobuf_c_message_unpack(&onnx__model_proto__descriptor, &pb_allocator, len, bytes);
    if (!mp) return imp_fail(I, "not an ONNX model (protobuf-c cannot decode it)");
    bool ok = check_model(I, mp);
    int *order = NULL, count = 0;
    if (ok) {
        I->gp = mp->graph;
        I->g = graph_new(NULL);
        if (!I->g) ok = imp_oom(I);
    }
    char name[64];
    if (ok && sym_name(str(I->gp->name), name, sizeof name)) I->g->model_name = arena_strdup(&I->g->arena, name);
    ok = ok && define_values(I) && (order = order_nodes(I, &count)) != NULL && define_sources(I) && convert(I, order, count) &&
         define_outputs(I);
    gc_free(order);
    protobuf_c_message_free_unpacked(&mp->base, &pb_allocator);
    I->gp = NULL;
    return ok;
}

/* The header of the .net file: where it came from. */
static void header(const Imp *I, char *buf, size_t size)
{
    const char *base = strrchr(I->file, '/');
    snprintf(buf, size, "# Imported from %s (%s, opset %lld) by graphc import %s.", base ? base + 1 : I->file, I->producer,
             (long long)I->opset, PACKAGE_VERSION);
}

/* The .net text compiled again must be the graph that was built, and its vars must
 * all have values: the text is the import's result, so it is checked here. */
static bool finish(Imp *I, const char *net_name, char *text, OnnxImport *m)
{
    DiagSink d2;
    bool ok = false;
    diag_init(&d2, NULL);
    if (source_from_string(&m->net, net_name, text) != 0) { gc_free(text); return imp_oom(I); }
    gc_free(text);
    d2.src = &m->net;
    if (compile_source(&m->net, &d2, NULL, &m->graph) != 0 || d2.nerrors) {
        diag_plain(I->d, "%s: internal error: the .net text made from it does not compile:", I->file);
        diag_plain(I->d, "%s", d2.buf ? d2.buf : "");
        goto out;
    }
    char why[512];
    if (!onnx_graphs_match(I->g, NULL, m->graph, NULL, why, sizeof why)) {
        diag_plain(I->d, "%s: internal error: the .net text made from it is another graph: %s", I->file, why);
        goto out;
    }
    if (weights_init(&m->w, m->graph, 0, I->d) != 0) goto out;
    for (int v = 0; v < m->graph->nvars; v++) {
        int src = -1;
        for (int k = 0; k < I->g->nvars && src < 0; k++)
            if (strcmp(I->g->vars[k].name, m->graph->vars[v].name) == 0 && shape_eq(&I->g->vars[k].shape, &m->graph->vars[v].shape)) src = k;
        if (src < 0) {
            diag_plain(I->d, "%s: internal error: no values for '%s'", I->file, m->graph->vars[v].name);
            goto out;
        }
        memcpy(m->w.data[v], I->vdata[src], (size_t)shape_numel(&m->graph->vars[v].shape) * sizeof(float));
        weights_touch(&m->w, v);
    }
    ok = true;
out:
    diag_free(&d2);
    return ok;
}

int onnx_import(const void *bytes, size_t len, const char *name, const char *net_name, OnnxImport *m, DiagSink *d)
{
    Imp I = { .file = name, .d = d, .cur = -1 };
    memset(m, 0, sizeof *m);
    bool ok = read_model(&I, bytes, len);
    free_vals(&I);
    char head[512];
    header(&I, head, sizeof head);
    char *text = ok ? imp_emit(I.g, head, d) : NULL;
    ok = text && finish(&I, net_name, text, m);
    free_vdata(&I, I.g ? I.g->nvars : 0);
    graph_free(I.g);
    if (!ok) onnx_import_free(m);
    return ok ? 0 : -1;
}

int onnx_import_file(const char *path, const char *net_name, OnnxImport *m, DiagSink *d)
{
    void *bytes = NULL;
    size_t len = 0;
    memset(m, 0, sizeof *m);
    int rc = file_read_all(path, ONNX_MAX_BYTES, &bytes, &len, d) != 0                   ? -1
             : onnx_import(bytes, len, path, net_name, m, d) != 0 ? -2
                                                                   : 0;
    gc_free(bytes);
    return rc;
}

void onnx_import_free(OnnxImport *m)
{
    weights_free(&m->w);
    graph_free(m->graph);
    source_free(&m->net);
    memset(m, 0, sizeof *m);
}
