/* graphc import: one converter per ONNX op (see imp.h for values and layouts). */
#include <math.h>
#include <string.h>
#include "onnx/imp.h"

/* ---- helpers ------------------------------------------------------------------------ */

static const char *lay_name(Lay l)
{
    static const char *const names[LAY_COUNT] = { "a tensor", "an NCHW image", "a pooled NCHW image", "a flattened NCHW image",
                                                   "a filter in OIHW" };
    return names[l];
}

static const char *str_or(const char *s) { return s ? s : ""; }

/* Input k as a tensor of graphc's graph (a constant is refused, and so is a Pad's
 * output, which only a Conv reads). */
static IVal *tensor_or_pad_in(Imp *I, const Onnx__NodeProto *n, size_t k, bool pad_ok)
{
    IVal *v = imp_in(I, n, k);
    if (!v) { imp_fail(I, "input %zu is missing", k); return NULL; }
    if (v->kind != VK_TENSOR) {
        imp_fail(I, "input %zu ('%s') is a constant; graphc imports this op on computed tensors only", k, v->name);
        return NULL;
    }
    if (v->padded && !pad_ok) {
        imp_fail(I, "input %zu ('%s') is padded by a Pad, which graphc takes only before a Conv", k, v->name);
        return NULL;
    }
    return v;
}

static IVal *tensor_in(Imp *I, const Onnx__NodeProto *n, size_t k) { return tensor_or_pad_in(I, n, k, false); }

/* Input k as a constant of `kind`: floats (a weight) or integers (a shape, axes). */
static IVal *const_in(Imp *I, const Onnx__NodeProto *n, size_t k, VKind kind, const char *what)
{
    IVal *v = imp_in(I, n, k);
    if (!v || v->kind != kind) {
        imp_fail(I, "%s (input %zu) must be %s", what, k,
                 kind == VK_FLOATS ? "a float constant (an initializer or a Constant)" : "integers known when the model is read");
        return NULL;
    }
    return v;
}

static IVal *floats_in(Imp *I, const Onnx__NodeProto *n, size_t k, const char *what) { return const_in(I, n, k, VK_FLOATS, what); }
static IVal *ints_in(Imp *I, const Onnx__NodeProto *n, size_t k, const char *what) { return const_in(I, n, k, VK_INTS, what); }

static bool out_tensor(Imp *I, const Onnx__NodeProto *n, int32_t node, Lay lay, const IVal *flat)
{
    if (node < 0) return false;
    IVal v = { .kind = VK_TENSOR, .node = node, .lay = lay };
    if (lay == LAY_FLAT) { v.c = flat->c; v.h = flat->h; v.w = flat->w; }
    return imp_set_out(I, n, 0, &v);
}

static bool out_ints(Imp *I, const Onnx__NodeProto *n, const Dim *iv, int64_t count, bool scalar)
{
    IVal v = { .kind = VK_INTS, .rank = scalar ? 0 : 1, .numel = count };
    v.dims[0] = count;
    v.iv = gc_calloc((size_t)(count ? count : 1), sizeof *v.iv);
    if (!v.iv) return imp_oom(I);
    if (count) memcpy(v.iv, iv, (size_t)count * sizeof *iv);
    return imp_set_out(I, n, 0, &v);
}

static const Shape *gshape(Imp *I, const IVal *v) { return &I->g->nodes[v->node].shape; }

/* An ONNX axis in [-rank, rank) as a non-negative one. */
static bool norm_axis(Imp *I, int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= rank) return imp_fail(I, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return true;
}

/* A pooled image [N, C] (LAY_NC11) as graphc's [N, 1, 1, C], an NCHW image again. */
static bool unpool(Imp *I, IVal *v)
{
    if (v->lay != LAY_NC11) return true;
    const Shape *s = gshape(I, v);
    Shape t = { 4, { s->d[0], { 1, -1 }, { 1, -1 }, s->d[1] } };
    int32_t id = imp_node(I, om_op(OM_RESHAPE), &v->node, 1, NULL, &t);
    if (id < 0) return false;
    v->node = id;
    v->lay = LAY_NCHW;
    return true;
}

/* ---- params from constants ---------------------------------------------------------- */

enum {
    XF_ASIS,      /* as stored */
    XF_HWIO,      /* a Conv's OIHW filter as graphc's HWIO */
    XF_GEMM,      /* a matmul's B, times alpha; rows as a flat input needs */
    XF_GEMM_T,    /* the same from B transposed (Gemm's transB) */
    XF_VECTOR,    /* a [N] or [1, N] vector as [N], times a scale */
    XF_NCHW,      /* broadcast against an NCHW image: axes as NHWC, leading 1s dropped */
    XF_FLAT,      /* broadcast against a flat NCHW image: elements in its order */
};

static int32_t cached(Imp *I, const ParamKey *k)
{
    for (int i = 0; i < I->npk; i++)
        if (memcmp(&I->pkeys[i], k, sizeof *k) == 0) return I->pnode[i];
    return -1;
}

static int32_t remember(Imp *I, const ParamKey *k, int32_t node)
{
    if (node < 0) return -1;
    if (I->npk == I->pk_cap) {
        int cap = I->pk_cap ? 2 * I->pk_cap : 16;
        ParamKey *nk = gc_realloc(I->pkeys, (size_t)cap * sizeof *nk);
        if (nk) I->pkeys = nk;
        int32_t *nn = gc_realloc(I->pnode, (size_t)cap * sizeof *nn);
        if (nn) I->pnode = nn;
        if (!nk || !nn) return imp_oom(I), -1;
        I->pk_cap = cap;
    }
    I->pkeys[I->npk] = *k;
    I->pnode[I->npk++] = node;
    return node;
}

static ParamKey key(const Imp *I, const IVal *v, int xform, const IVal *flat, float scale)
{
    ParamKey k;
    memset(&k, 0, sizeof k);   /* compared with memcmp: no stray padding bytes */
    k.val = (int)(v - I->vals);
    k.xform = xform;
    if (flat && flat->lay == LAY_FLAT) { k.c = flat->c; k.h = flat->h; k.w = flat->w; }
    k.scale = scale;
    return k;
}

/* The row order of a flat input: ONNX's row c*H*W + h*W + w is graphc's (h*W + w)*C + c. */
static int64_t flat_row(int64_t j, int64_t c, int64_t h, int64_t w)
{
    int64_t ci = j / (h * w), hi = j / w % h, wi = j % w;
    return (hi * w + wi) * c + ci;
}

/* A param made of constant v transformed by `xform` (k's), of graphc shape `s`. */
static int32_t param_from(Imp *I, IVal *v, ParamKey k, Shape s)
{
    int32_t id = cached(I, &k);
    if (id >= 0) return id;
    size_t n = (size_t)v->numel;
    float *t = gc_malloc(n * sizeof *t);
    if (!t) return imp_oom(I), -1;
    const float *f = v->f;
    switch (k.xform) {
    case XF_ASIS: memcpy(t, f, n * sizeof *t); break;
    case XF_HWIO: {
        int64_t co = v->dims[0], ci = v->dims[1], kh = v->dims[2], kw = v->dims[3];
        for (int64_t o = 0; o < co; o++)
            for (int64_t i = 0; i < ci; i++)
                for (int64_t y = 0; y < kh; y++)
                    for (int64_t x = 0; x < kw; x++)
                        t[((y * kw + x) * ci + i) * co + o] = f[((o * ci + i) * kh + y) * kw + x];
        break;
    }
    case XF_GEMM: case XF_GEMM_T: {
        bool transb = k.xform == XF_GEMM_T;
        int64_t K = s.d[0].v, N = s.d[1].v;
        for (int64_t r = 0; r < K; r++)
            for (int64_t c = 0; c < N; c++) {
                int64_t row = k.c ? flat_row(r, k.c, k.h, k.w) : r;
                t[row * N + c] = k.scale * (transb ? f[c * K + r] : f[r * N + c]);
            }
        break;
    }
    case XF_VECTOR: for (size_t i = 0; i < n; i++) t[i] = k.scale * f[i]; break;
    case XF_NCHW: {
        /* v padded to rank 4 as [a, b, c, d] (NCHW) is [a, c, d, b] in graphc's order */
        int64_t d4[4] = { 1, 1, 1, 1 };
        for (int i = 0; i < v->rank; i++) d4[4 - v->rank + i] = v->dims[i];
        int64_t A = d4[0], B = d4[1], C = d4[2], D = d4[3];
        for (int64_t a = 0; a < A; a++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t c = 0; c < C; c++)
                    for (int64_t d = 0; d < D; d++) t[((a * C + c) * D + d) * B + b] = f[((a * B + b) * C + c) * D + d];
        break;
    }
    case XF_FLAT:
        for (size_t j = 0; j < n; j++) t[flat_row((int64_t)j, k.c, k.h, k.w)] = f[j];
        break;
    }
    id = imp_param(I, v->name, s, t);
    gc_free(t);
    return remember(I, &k, id);
}

static Shape shape_of(int rank, const int64_t *dims)
{
    Shape s = { rank, { { 0, -1 } } };
    for (int i = 0; i < rank; i++) s.d[i] = (Dim){ dims[i], -1 };
    return s;
}

/* Constant c as an operand of an elementwise op with tensor t: a scalar constant, or a
 * param shaped for graphc's broadcasting in t's layout. */
static int32_t const_operand(Imp *I, IVal *t, IVal *c)
{
    Shape ts = imp_onnx_shape(I, t);
    if (c->rank > ts.rank) return imp_fail(I, "a constant of rank %d broadcast to rank %d is not supported", c->rank, ts.rank), -1;
    if (c->numel == 1) {
        NodeAttr a = om_attr_const(c->f[0]);
        if (!isfinite(c->f[0])) return imp_fail(I, "constant '%s' is not a finite number", c->name), -1;
        return imp_node(I, om_op(OM_CONST), NULL, 0, &a, NULL);
    }
    switch (t->lay) {
    case LAY_SAME: return param_from(I, c, key(I, c, XF_ASIS, NULL, 1), shape_of(c->rank, c->dims));
    case LAY_NCHW: {
        int64_t d4[4] = { 1, 1, 1, 1 };
        for (int i = 0; i < c->rank; i++) d4[4 - c->rank + i] = c->dims[i];
        int64_t nhwc[4] = { d4[0], d4[2], d4[3], d4[1] };
        int lead = 0;
        while (lead < 3 && nhwc[lead] == 1) lead++;
        return param_from(I, c, key(I, c, XF_NCHW, NULL, 1), shape_of(4 - lead, nhwc + lead));
    }
    case LAY_FLAT: {
        int64_t k = t->c * t->h * t->w;
        if (c->numel != k || (c->rank == 2 && c->dims[0] != 1))
            return imp_fail(I, "a constant of %lld elements broadcast against %s is not supported", (long long)c->numel, lay_name(t->lay)), -1;
        return param_from(I, c, key(I, c, XF_FLAT, t, 1), shape_of(1, &k));
    }
    default: return imp_fail(I, "a constant combined with %s is not supported", lay_name(t->lay)), -1;
    }
}

/* Two tensors in one layout: a pooled image read with an image becomes an image. */
static bool same_layout(Imp *I, IVal *a, IVal *b)
{
    if (a->lay == LAY_NC11 && b->lay == LAY_NCHW && !unpool(I, a)) return false;
    if (b->lay == LAY_NC11 && a->lay == LAY_NCHW && !unpool(I, b)) return false;
    if (a->lay != b->lay || (a->lay == LAY_FLAT && (a->c != b->c || a->h != b->h || a->w != b->w)))
        return imp_fail(I, "it combines %s with %s, which would need a transpose graphc does not have", lay_name(a->lay), lay_name(b->lay));
    return true;
}

/* ---- elementwise -------------------------------------------------------------------- */

static bool unary(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = tensor_in(I, n, 0);
    if (!x) return false;
    const OnnxOp *m = onnx_op_named(n->op_type);
    return out_tensor(I, n, imp_node(I, m->op, &x->node, 1, NULL, NULL), x->lay, x);
}

/* Integer arithmetic on shapes, as exporters write for a flatten: numbers, and a
 * symbol times or divided by a number. */
static bool int_binary(Imp *I, const Onnx__NodeProto *n, IVal *a, IVal *b)
{
    if (a->numel != b->numel && a->numel != 1 && b->numel != 1) return imp_fail(I, "integer operands of different lengths");
    int64_t cnt = a->numel > b->numel ? a->numel : b->numel;
    Dim r[MAX_RANK + 1];
    if (cnt > MAX_RANK + 1) return imp_fail(I, "integer vectors longer than %d are not supported", MAX_RANK + 1);
    char op = n->op_type[0];
    for (int64_t i = 0; i < cnt; i++) {
        Dim x = a->iv[a->numel == 1 ? 0 : i], y = b->iv[b->numel == 1 ? 0 : i];
        bool ok = true;
        if (x.sym < 0 && y.sym < 0) {
            int64_t v = 0;
            switch (op) {
            case 'A': ok = !__builtin_add_overflow(x.v, y.v, &v); break;
            case 'S': ok = !__builtin_sub_overflow(x.v, y.v, &v); break;
            case 'M': ok = !__builtin_mul_overflow(x.v, y.v, &v); break;
            default: ok = y.v != 0 && !(x.v == INT64_MIN && y.v == -1); if (ok) v = x.v / y.v; break;
            }
            r[i] = (Dim){ v, -1 };
        } else if (op == 'M' && (x.sym < 0 || y.sym < 0)) {
            Dim s = x.sym >= 0 ? x : y, k = x.sym >= 0 ? y : x;
            ok = k.v >= 1 && gc_mul_i64(s.v, k.v, &r[i].v);
            r[i].sym = s.sym;
        } else if (op == 'D' && x.sym >= 0 && y.sym < 0) {
            ok = y.v >= 1 && x.v % y.v == 0;
            r[i] = (Dim){ ok ? x.v / y.v : 0, x.sym };
        } else {
            ok = false;
        }
        if (!ok) return imp_fail(I, "integer arithmetic graphc cannot do when the model is read (element %lld)", (long long)i);
    }
    return out_ints(I, n, r, cnt, a->rank == 0 && b->rank == 0);
}

static bool binary(Imp *I, const Onnx__NodeProto *n)
{
    IVal *a = imp_in(I, n, 0), *b = imp_in(I, n, 1);
    const OnnxOp *m = onnx_op_named(n->op_type);
    if (!a || !b) return imp_fail(I, "an input is missing");
    if (a->kind == VK_INTS && b->kind == VK_INTS) return int_binary(I, n, a, b);
    if (a->kind == VK_INTS || b->kind == VK_INTS) return imp_fail(I, "it mixes integers with a float tensor");
    IVal pa;
    if (a->kind != VK_TENSOR && b->kind != VK_TENSOR) {
        /* a weight and a constant (graphc's export writes a param times a number so):
         * the first a param */
        int32_t id = param_from(I, a, key(I, a, XF_ASIS, NULL, 1), shape_of(a->rank, a->dims));
        if (id < 0) return false;
        pa = (IVal){ .kind = VK_TENSOR, .node = id, .lay = LAY_SAME };
        a = &pa;
    }
    IVal *t = a->kind == VK_TENSOR ? a : b;
    if (a->kind == VK_TENSOR && b->kind == VK_TENSOR && !same_layout(I, a, b)) return false;
    if ((a->kind == VK_FLOATS || b->kind == VK_FLOATS) && t->lay == LAY_NC11 && (a->kind == VK_FLOATS ? a : b)->numel > 1 && !unpool(I, t))
        return false;
    int32_t in[2];
    in[0] = a->kind == VK_TENSOR ? a->node : const_operand(I, t, a);
    in[1] = b->kind == VK_TENSOR ? b->node : const_operand(I, t, b);
    if (in[0] < 0 || in[1] < 0) return false;
    return out_tensor(I, n, imp_node(I, m->op, in, 2, NULL, NULL), t->lay, t);
}

/* Identity, and Dropout at inference: the input itself, whatever it is. */
static bool identity(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = imp_in(I, n, 0);
    if (!x) return imp_fail(I, "input 0 is missing");
    if (strcmp(n->op_type, "Dropout") == 0) {
        IVal *mode = imp_in(I, n, 2);
        if (mode && !(mode->kind == VK_INTS && mode->numel == 1 && mode->iv[0].v == 0 && mode->iv[0].sym < 0))
            return imp_fail(I, "training_mode must be a constant false");
        if (!imp_extra_outputs_unused(I, n, 1)) return false;
    }
    IVal v = *x;
    v.f = NULL;
    v.iv = NULL;
    if (x->kind == VK_FLOATS || x->kind == VK_INTS) {
        size_t bytes = (size_t)(x->numel ? x->numel : 1) * (x->kind == VK_FLOATS ? sizeof(float) : sizeof(Dim));
        void *p = gc_malloc(bytes);
        if (!p) return imp_oom(I);
        memcpy(p, x->kind == VK_FLOATS ? (void *)x->f : (void *)x->iv, x->numel ? bytes : 0);
        if (x->kind == VK_FLOATS) v.f = p; else v.iv = p;
    }
    return imp_set_out(I, n, 0, &v);
}

/* Softmax and LogSoftmax along graphc's last axis: ONNX's last axis, or the channels of
 * an image (opset 13 on; before, the op flattened from the axis on). */
static bool rows(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = tensor_in(I, n, 0);
    if (!x) return false;
    Shape s = imp_onnx_shape(I, x);
    int64_t ax;
    int axis = 0;
    if (!imp_attr_int(I, n, "axis", I->opset >= 13 ? -1 : 1, INT32_MIN, INT32_MAX, &ax) || !norm_axis(I, ax, s.rank, &axis)) return false;
    bool ok = axis == s.rank - 1 && (x->lay == LAY_SAME || x->lay == LAY_FLAT);
    if (x->lay == LAY_NCHW || x->lay == LAY_NC11) ok = axis == 1 && (I->opset >= 13 || x->lay == LAY_NC11);
    if (!ok) return imp_fail(I, "along axis %d of %s; graphc's is along the last axis (an image's channels)", axis, lay_name(x->lay));
    const OnnxOp *m = onnx_op_named(n->op_type);
    return out_tensor(I, n, imp_node(I, m->op, &x->node, 1, NULL, NULL), x->lay, x);
}

/* ---- windows ------------------------------------------------------------------------ */

/* The padding of a Conv or pool as graphc's "valid" or "same" (TensorFlow's rule: the
 * odd pixel after), from auto_pad or pads and the input's height and width; extra[]
 * holds zeros a Pad before a Conv added (top, left, bottom, right). */
static bool padding(Imp *I, const Onnx__NodeProto *n, const Shape *x, int64_t kh, int64_t kw, int64_t s, const int64_t *extra, Padding *out)
{
    char mode[32];
    int64_t p[4] = { 0, 0, 0, 0 };
    int got;
    int64_t ceil_mode = 0;
    if (!imp_attr_string(I, n, "auto_pad", "NOTSET", mode, sizeof mode) || !imp_attr_ints(I, n, "pads", 4, 0, 1 << 20, p, &got) ||
        !imp_attr_int(I, n, "ceil_mode", 0, 0, 1, &ceil_mode))
        return false;
    int64_t H = x->d[1].v, W = x->d[2].v, k[2] = { kh, kw }, in[2] = { H, W }, same[4];
    for (int a = 0; a < 2; a++) {
        int64_t o = (in[a] + s - 1) / s, tot = (o - 1) * s + k[a] - in[a];
        if (tot < 0) tot = 0;
        same[a] = tot / 2;
        same[a + 2] = tot - tot / 2;
    }
    if (strcmp(mode, "VALID") == 0 && !extra) { *out = PAD_VALID; return true; }
    if (strcmp(mode, "SAME_UPPER") == 0 && !extra) { *out = PAD_SAME; return true; }
    if (strcmp(mode, "SAME_LOWER") == 0 && !extra) {
        if (same[0] == same[2] && same[1] == same[3]) { *out = PAD_SAME; return true; }
        return imp_fail(I, "auto_pad SAME_LOWER puts the odd row or column before, and graphc's \"same\" puts it after");
    }
    if (strcmp(mode, "NOTSET") != 0) return imp_fail(I, "auto_pad '%s' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER here", mode);
    for (int i = 0; extra && i < 4; i++) p[i] += extra[i];
    bool none = !p[0] && !p[1] && !p[2] && !p[3], as_same = !memcmp(p, same, sizeof p);
    if (!none && !as_same)
        return imp_fail(I, "pads (top %lld, left %lld, bottom %lld, right %lld) are neither none nor graphc's \"same\" "
                        "for this input (%lld, %lld, %lld, %lld)", (long long)p[0], (long long)p[1], (long long)p[2],
                        (long long)p[3], (long long)same[0], (long long)same[1], (long long)same[2], (long long)same[3]);
    for (int a = 0; ceil_mode && a < 2; a++) {
        /* the rounding up only matters where a window would start in the padding's end */
        int64_t span = in[a] + p[a] + p[a + 2] - k[a];
        if (span >= 0 && span % s) return imp_fail(I, "ceil_mode 1 gives another output size than graphc's pools here");
    }
    *out = none ? PAD_VALID : PAD_SAME;
    return true;
}

/* The image input of a window op (of a Conv: maybe with a Pad's zeros around it). */
static IVal *image_in(Imp *I, const Onnx__NodeProto *n, bool pad_ok)
{
    IVal *x = tensor_or_pad_in(I, n, 0, pad_ok);
    if (!x || !unpool(I, x)) return NULL;
    if (x->lay != LAY_NCHW) { imp_fail(I, "its input is %s, not an NCHW image (graphc has no transpose)", lay_name(x->lay)); return NULL; }
    return x;
}

static bool check_dilations(Imp *I, const Onnx__NodeProto *n)
{
    int64_t dil[2] = { 1, 1 };
    int got;
    if (!imp_attr_ints(I, n, "dilations", 2, 1, 1 << 20, dil, &got)) return false;
    if (dil[0] != 1 || dil[1] != 1) return imp_fail(I, "dilations (%lld, %lld); graphc's windows are not dilated", (long long)dil[0], (long long)dil[1]);
    return true;
}

static bool strides(Imp *I, const Onnx__NodeProto *n, int64_t *s)
{
    int64_t st[2] = { 1, 1 };
    int got;
    if (!imp_attr_ints(I, n, "strides", 2, 1, 1 << 20, st, &got)) return false;
    if (st[0] != st[1]) return imp_fail(I, "strides (%lld, %lld); graphc's stride is the same on both axes", (long long)st[0], (long long)st[1]);
    *s = st[0];
    return true;
}

/* A Pad of zeros on an image's height and width, which the Conv reading it takes over. */
static bool pad(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = image_in(I, n, false);
    if (!x) return false;
    char mode[32];
    int64_t p[8] = { 0 };
    int got = 8;
    float value = 0;
    if (!imp_attr_string(I, n, "mode", "constant", mode, sizeof mode)) return false;
    if (strcmp(mode, "constant") != 0) return imp_fail(I, "mode '%s'; graphc pads with zeros only", mode);
    if (I->opset < 11) {
        if (!imp_attr_ints(I, n, "pads", 8, 0, 1 << 20, p, &got) || !imp_attr_float(I, n, "value", 0, &value)) return false;
    } else {
        IVal *pv = ints_in(I, n, 1, "the pads");
        if (!pv) return false;
        if (pv->numel != 8) return imp_fail(I, "%lld pads for a rank-4 image", (long long)pv->numel);
        for (int i = 0; i < 8; i++) {
            if (pv->iv[i].sym >= 0 || pv->iv[i].v < 0 || pv->iv[i].v > (1 << 20)) return imp_fail(I, "pad %d is not a size", i);
            p[i] = pv->iv[i].v;
        }
        IVal *cv = imp_in(I, n, 2);
        if (cv && (cv->kind != VK_FLOATS || cv->numel != 1)) return imp_fail(I, "the pad value must be a float constant");
        if (cv) value = cv->f[0];
    }
    if (value != 0) return imp_fail(I, "pads with %g; graphc pads with zeros only", (double)value);
    if (p[0] || p[1] || p[4] || p[5]) return imp_fail(I, "it pads the batch or the channels");
    if (!p[2] && !p[3] && !p[6] && !p[7]) return identity(I, n);   /* PyTorch's avg_pool2d writes one */
    /* the pads wait in the value until the Conv that reads it (and only a Conv) */
    IVal v = *x;
    v.padded = true;
    v.pad[0] = p[2];
    v.pad[1] = p[3];
    v.pad[2] = p[6];
    v.pad[3] = p[7];
    return imp_set_out(I, n, 0, &v);
}

/* A Conv whose filter is computed, in graphc's HWIO (LAY_OIHW), without a bias. */
static bool conv_computed(Imp *I, const Onnx__NodeProto *n, IVal *x, IVal *w)
{
    const Shape *ws = gshape(I, w);
    int64_t group, ks[2], s;
    int got;
    Padding p;
    if (!imp_attr_int(I, n, "group", 1, 1, 1, &group) || !imp_attr_ints(I, n, "kernel_shape", 2, 1, 1 << 20, ks, &got) ||
        !check_dilations(I, n) || !strides(I, n, &s) || !padding(I, n, gshape(I, x), ws->d[0].v, ws->d[1].v, s, x->padded ? x->pad : NULL, &p))
        return false;
    if (imp_in(I, n, 2)) return imp_fail(I, "a bias with a computed filter is not supported");
    int32_t in[2] = { x->node, w->node };
    NodeAttr a = om_attr_win(0, 0, (int)s, (int)s, p);
    return out_tensor(I, n, imp_node(I, om_op(OM_CONV), in, 2, &a, NULL), LAY_NCHW, NULL);
}

static bool conv(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = image_in(I, n, true), *w = imp_in(I, n, 1);
    if (!x) return false;
    if (w && w->kind == VK_TENSOR && w->lay == LAY_OIHW) return conv_computed(I, n, x, w);
    if (!(w = floats_in(I, n, 1, "the filter"))) return false;
    if (w->rank != 4) return imp_fail(I, "the filter has rank %d; graphc's Conv is 2-D ([F, C, KH, KW])", w->rank);
    int64_t group, ks[2], s;
    int got;
    if (!imp_attr_int(I, n, "group", 1, 1, INT32_MAX, &group) || !imp_attr_ints(I, n, "kernel_shape", 2, 1, 1 << 20, ks, &got) ||
        !check_dilations(I, n) || !strides(I, n, &s))
        return false;
    if (group != 1) return imp_fail(I, "group %lld; graphc's convolutions are not grouped", (long long)group);
    if (got && (ks[0] != w->dims[2] || ks[1] != w->dims[3])) return imp_fail(I, "kernel_shape differs from the filter's");
    Padding p;
    if (!padding(I, n, gshape(I, x), w->dims[2], w->dims[3], s, x->padded ? x->pad : NULL, &p)) return false;
    int64_t hwio[4] = { w->dims[2], w->dims[3], w->dims[1], w->dims[0] };
    int32_t in[2] = { x->node, param_from(I, w, key(I, w, XF_HWIO, NULL, 1), shape_of(4, hwio)) };
    if (in[1] < 0) return false;
    NodeAttr a = om_attr_win(0, 0, (int)s, (int)s, p);
    int32_t y = imp_node(I, om_op(OM_CONV), in, 2, &a, NULL);
    IVal *b = imp_in(I, n, 2);
    if (b && y >= 0) {
        if (b->kind != VK_FLOATS || b->numel != w->dims[0] || b->rank != 1) return imp_fail(I, "the bias must be a float constant [%lld]", (long long)w->dims[0]);
        int32_t bin[2] = { y, param_from(I, b, key(I, b, XF_VECTOR, NULL, 1), shape_of(1, &w->dims[0])) };
        if (bin[1] < 0) return false;
        y = imp_node(I, om_op_named("Add"), bin, 2, NULL, NULL);
    }
    return out_tensor(I, n, y, LAY_NCHW, NULL);
}

static bool pool(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = image_in(I, n, false);
    if (!x) return false;
    int64_t ks[2], s, include = 0, order = 0;
    int got;
    if (!imp_attr_ints(I, n, "kernel_shape", 2, 1, 1 << 16, ks, &got) || !check_dilations(I, n) || !strides(I, n, &s) ||
        !imp_attr_int(I, n, "count_include_pad", 0, 0, 1, &include) || !imp_attr_int(I, n, "storage_order", 0, 0, 0, &order))
        return false;
    if (!got) return imp_fail(I, "kernel_shape is missing");
    if (ks[0] != ks[1]) return imp_fail(I, "a %lldx%lld window; graphc's pools are square", (long long)ks[0], (long long)ks[1]);
    Padding p;
    if (!padding(I, n, gshape(I, x), ks[0], ks[1], s, NULL, &p)) return false;
    if (include && p == PAD_SAME) return imp_fail(I, "count_include_pad 1 with padding: graphc averages what is inside the image");
    if (!imp_extra_outputs_unused(I, n, 1)) return false;
    const OnnxOp *m = onnx_op_named(n->op_type);
    NodeAttr a = om_attr_win((int)ks[0], (int)ks[1], (int)s, (int)s, p);
    return out_tensor(I, n, imp_node(I, m->op, &x->node, 1, &a, NULL), LAY_NCHW, NULL);
}

static bool global_pool(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = image_in(I, n, false);
    if (!x) return false;
    return out_tensor(I, n, imp_node(I, om_op(OM_GLOBAL_POOL), &x->node, 1, NULL, NULL), LAY_NC11, NULL);
}

/* ReduceMean over an image's height and width is a global average pool. */
static bool reduce_mean(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = tensor_in(I, n, 0);
    if (!x) return false;
    int64_t axes[MAX_RANK], keep;
    int got = 0;
    if (I->opset < 18) {
        if (!imp_attr_ints(I, n, "axes", -1, -MAX_RANK, MAX_RANK, axes, &got)) return false;
    } else {
        IVal *av = ints_in(I, n, 1, "the axes");
        if (!av) return false;
        for (int64_t i = 0; i < av->numel && i < MAX_RANK; i++) axes[i] = av->iv[i].v;
        got = (int)(av->numel < MAX_RANK ? av->numel : MAX_RANK);
    }
    if (!imp_attr_int(I, n, "keepdims", 1, 0, 1, &keep)) return false;
    Shape s = imp_onnx_shape(I, x);
    bool ax[MAX_RANK] = { false };
    for (int i = 0; i < got; i++) {
        int a = 0;
        if (!norm_axis(I, axes[i], s.rank, &a)) return false;
        ax[a] = true;
    }
    bool nchw = x->lay == LAY_NCHW && got == 2 && ax[2] && ax[3];
    bool nhwc = x->lay == LAY_SAME && s.rank == 4 && got == 2 && ax[1] && ax[2] && !keep;
    if (!nchw && !nhwc) return imp_fail(I, "a mean over other axes than an image's height and width");
    int32_t id = imp_node(I, om_op(OM_GLOBAL_POOL), &x->node, 1, NULL, NULL);
    return out_tensor(I, n, id, nchw && keep ? LAY_NC11 : LAY_SAME, NULL);
}

/* ---- matrices ----------------------------------------------------------------------- */

/* The left operand of a matrix product: ONNX rank 2, as is or a flattened image. */
static IVal *rows_in(Imp *I, const Onnx__NodeProto *n)
{
    IVal *a = tensor_in(I, n, 0);
    if (!a) return NULL;
    Shape s = imp_onnx_shape(I, a);
    if (s.rank != 2 || a->lay == LAY_NC11) {
        imp_fail(I, "its input has rank %d; graphc's matmul is 2-D", s.rank);
        return NULL;
    }
    return a;
}

/* matmul(a, B) with B constant [K, N] (made from b: transposed, scaled, rows in a's
 * order) or a tensor. */
static int32_t product(Imp *I, IVal *a, IVal *b, bool transb, float alpha)
{
    int32_t in[2] = { a->node, -1 };
    if (b->kind == VK_FLOATS) {
        if (b->rank != 2) return imp_fail(I, "the weights have rank %d; graphc's matmul is 2-D", b->rank), -1;
        int64_t kn[2] = { transb ? b->dims[1] : b->dims[0], transb ? b->dims[0] : b->dims[1] };
        in[1] = param_from(I, b, key(I, b, transb ? XF_GEMM_T : XF_GEMM, a, alpha), shape_of(2, kn));
    } else if (b->kind == VK_TENSOR && b->lay == LAY_SAME && !b->padded && !transb && alpha == 1 && a->lay == LAY_SAME) {
        in[1] = b->node;
    } else {
        return imp_fail(I, "the right operand is computed and would need %s", a->lay == LAY_FLAT ? "a transpose" : "a transpose or scaling"), -1;
    }
    if (in[1] < 0) return -1;
    NodeAttr at = om_attr_matmul();
    return imp_node(I, om_op(OM_MATMUL), in, 2, &at, NULL);
}

static bool matmul(Imp *I, const Onnx__NodeProto *n)
{
    IVal *a = rows_in(I, n), *b = imp_in(I, n, 1);
    if (!a || !b) return a ? imp_fail(I, "input 1 is missing") : false;
    return out_tensor(I, n, product(I, a, b, false, 1), LAY_SAME, NULL);
}

static bool gemm(Imp *I, const Onnx__NodeProto *n)
{
    IVal *a = rows_in(I, n), *b = imp_in(I, n, 1), *c = imp_in(I, n, 2);
    int64_t ta, tb;
    float alpha, beta;
    if (!a || !b) return a ? imp_fail(I, "input 1 is missing") : false;
    if (!imp_attr_int(I, n, "transA", 0, 0, 1, &ta) || !imp_attr_int(I, n, "transB", 0, 0, 1, &tb) ||
        !imp_attr_float(I, n, "alpha", 1, &alpha) || !imp_attr_float(I, n, "beta", 1, &beta))
        return false;
    if (ta) return imp_fail(I, "transA 1: graphc cannot transpose a computed input");
    int32_t y = product(I, a, b, tb, alpha);
    if (y < 0) return false;
    if (c && c->kind == VK_FLOATS) {
        int64_t N = I->g->nodes[y].shape.d[1].v;
        int32_t in[2] = { y, -1 };
        if (c->numel == 1) {
            NodeAttr at = om_attr_const(beta * c->f[0]);
            in[1] = imp_node(I, om_op(OM_CONST), NULL, 0, &at, NULL);
        } else if (c->numel == N && (c->rank == 1 || (c->rank == 2 && c->dims[0] == 1))) {
            in[1] = param_from(I, c, key(I, c, XF_VECTOR, NULL, beta), shape_of(1, &N));
        } else {
            return imp_fail(I, "the bias C has %lld elements; graphc takes a scalar or one per output column", (long long)c->numel);
        }
        if (in[1] < 0) return false;
        y = imp_node(I, om_op_named("Add"), in, 2, NULL, NULL);
    } else if (c && c->kind == VK_TENSOR) {
        if (beta != 1 || c->lay != LAY_SAME) return imp_fail(I, "a computed C with beta %g or in another layout", (double)beta);
        int32_t in[2] = { y, c->node };
        y = imp_node(I, om_op_named("Add"), in, 2, NULL, NULL);
    } else if (c) {
        return imp_fail(I, "C is integers");
    }
    return out_tensor(I, n, y, LAY_SAME, NULL);
}

/* ---- batch normalization ------------------------------------------------------------ */

/* Whether param node p's var is read by `reader` alone, so its values can change. */
static bool own_param(Imp *I, int32_t p, int32_t reader)
{
    const Graph *g = I->g;
    if (g->nodes[p].op != om_op(OM_PARAM)) return false;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] == p && i != reader) return false;
    for (int i = 0; i < I->npk; i++)
        if (I->pnode[i] == p) I->pkeys[i].val = -1;   /* its values will no longer be the constant's */
    return true;
}

/* How many reads the ONNX values held by nodes a and b have left, this one included. */
static int reads_of(const Imp *I, int32_t a, int32_t b)
{
    int r = 0;
    for (int i = 0; i < I->nvals; i++)
        if (I->vals[i].kind == VK_TENSOR && (I->vals[i].node == a || I->vals[i].node == b)) r += I->vals[i].uses;
    return r;
}

/* BatchNormalization at inference, y = x * s + t per channel with s = scale /
 * sqrt(var + eps) and t = bias - mean * s: folded into the convolution before it when
 * that convolution and its weights are its alone (W * s, and (b - mean) * s + bias
 * for its bias b), else a mul and an add of two params.  In float, one operation at a
 * time, as graphc's own bn_fold pass computes them (graph/bnorm.c), so that a model
 * exported with batch norm and imported back runs with the same bits. */
static bool batch_norm(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = tensor_in(I, n, 0);
    IVal *p[4];
    static const char *const what[4] = { "scale", "bias", "mean", "var" };
    if (!x) return false;
    for (int i = 0; i < 4; i++)
        if (!(p[i] = floats_in(I, n, (size_t)i + 1, what[i]))) return false;
    float eps, mom;
    int64_t training, spatial;
    if (!imp_attr_float(I, n, "epsilon", 1e-5f, &eps) || !imp_attr_float(I, n, "momentum", 0.9f, &mom) ||
        !imp_attr_int(I, n, "training_mode", 0, 0, 0, &training) || !imp_attr_int(I, n, "spatial", 1, 1, 1, &spatial) ||
        !imp_extra_outputs_unused(I, n, 1))
        return false;
    Shape s = imp_onnx_shape(I, x);
    if (x->lay == LAY_FLAT || x->lay == LAY_OIHW || s.rank < 2) return imp_fail(I, "its input is %s of rank %d", lay_name(x->lay), s.rank);
    if (x->lay == LAY_SAME && s.rank != 2) return imp_fail(I, "its input has rank %d and is not an NCHW image", s.rank);
    Dim cd = s.d[1];
    if (cd.sym >= 0) return imp_fail(I, "the number of channels is not known");
    int64_t C = cd.v;
    for (int i = 0; i < 4; i++)
        if (p[i]->numel != C) return imp_fail(I, "%s has %lld values for %lld channels", what[i], (long long)p[i]->numel, (long long)C);
    float *sc = gc_malloc((size_t)C * sizeof *sc), *sh = gc_malloc((size_t)C * sizeof *sh);
    bool ok = false;
    if (!sc || !sh) { imp_oom(I); goto out; }
    for (int64_t c = 0; c < C; c++) {
        float r = sqrtf(p[3]->f[c] + eps), mk;
        sc[c] = p[0]->f[c] / r;
        mk = p[2]->f[c] * sc[c];
        sh[c] = p[1]->f[c] - mk;
    }
    Graph *g = I->g;
    int32_t y = x->node, conv = -1, bias = -1;
    const OpKind addk = om_op_named("Add"), convk = om_op(OM_CONV);
    if (g->nodes[y].op == convk) conv = y;
    else if (g->nodes[y].op == addk && g->nodes[g->nodes[y].in[0]].op == convk) conv = g->nodes[y].in[0], bias = g->nodes[y].in[1];
    bool fold = conv >= 0 && reads_of(I, conv, y) == 1 && own_param(I, g->nodes[conv].in[1], conv) && (bias < 0 || own_param(I, bias, y));
    if (fold && bias >= 0 && g->nodes[bias].shape.rank != 1) fold = false;
    Shape cs = shape_of(1, &C);
    if (fold) {
        float *wd = I->vdata[om_param_var(&g->nodes[g->nodes[conv].in[1]])];
        int64_t total = shape_numel(&g->nodes[g->nodes[conv].in[1]].shape);
        for (int64_t i = 0; i < total; i++) wd[i] *= sc[i % C];   /* HWIO: the output channel is the last axis */
        if (bias >= 0) {
            float *bd = I->vdata[om_param_var(&g->nodes[bias])];
            for (int64_t c = 0; c < C; c++) {
                float u = (bd[c] - p[2]->f[c]) * sc[c];
                bd[c] = u + p[1]->f[c];
            }
        } else {
            int32_t in[2] = { conv, imp_param(I, "batch_normalization/shift", cs, sh) };
            y = in[1] < 0 ? -1 : imp_node(I, addk, in, 2, NULL, NULL);
        }
    } else {
        if (x->lay == LAY_NC11 && !unpool(I, x)) goto out;
        int32_t in[2] = { x->node, imp_param(I, "batch_normalization/scale", cs, sc) };
        y = in[1] < 0 ? -1 : imp_node(I, om_op_named("Mul"), in, 2, NULL, NULL);
        int32_t in2[2] = { y, y < 0 ? -1 : imp_param(I, "batch_normalization/shift", cs, sh) };
        y = in2[1] < 0 ? -1 : imp_node(I, addk, in2, 2, NULL, NULL);
    }
    ok = out_tensor(I, n, y, x->lay, x);
out:
    gc_free(sc);
    gc_free(sh);
    return ok;
}

/* ---- shapes ------------------------------------------------------------------------- */

/* The product of dims[from..to) as a number times at most one symbol. */
static bool product_dims(const Dim *d, int from, int to, Dim *out)
{
    Dim p = { 1, -1 };
    for (int i = from; i < to; i++) {
        if (d[i].sym >= 0) {
            if (p.sym >= 0) return false;
            p.sym = d[i].sym;
        }
        if (!gc_mul_i64(p.v, d[i].v, &p.v)) return false;
    }
    *out = p;
    return true;
}

/* A reshape of x to `t` (its ONNX shape): a flatten of an image, or a reshape of a
 * tensor as is. */
static bool reshape_to(Imp *I, const Onnx__NodeProto *n, IVal *x, Shape t)
{
    Shape s = imp_onnx_shape(I, x);
    if (shape_eq(&s, &t)) {
        IVal v = *x;
        return imp_set_out(I, n, 0, &v);
    }
    Dim rest;
    bool flatten = t.rank == 2 && dim_eq(t.d[0], s.d[0]) && product_dims(s.d, 1, s.rank, &rest) && dim_eq(rest, t.d[1]);
    if (x->lay == LAY_SAME) return out_tensor(I, n, imp_node(I, om_op(OM_RESHAPE), &x->node, 1, NULL, &t), LAY_SAME, NULL);
    if (!flatten || x->lay == LAY_OIHW)
        return imp_fail(I, "a reshape of %s other than a flatten would need a transpose graphc does not have", lay_name(x->lay));
    if (x->lay == LAY_NC11 || x->lay == LAY_FLAT) return out_tensor(I, n, x->node, x->lay == LAY_FLAT ? LAY_FLAT : LAY_SAME, x);
    /* an image: graphc flattens in NHWC order, which is ONNX's only with one channel or
     * one pixel */
    const Shape *g = gshape(I, x);
    IVal flat = { .c = g->d[3].v, .h = g->d[1].v, .w = g->d[2].v };
    int32_t id = imp_node(I, om_op(OM_RESHAPE), &x->node, 1, NULL, &t);
    return out_tensor(I, n, id, flat.c == 1 || flat.h * flat.w == 1 ? LAY_SAME : LAY_FLAT, &flat);
}

static bool flatten(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = tensor_in(I, n, 0);
    if (!x) return false;
    Shape s = imp_onnx_shape(I, x);
    int64_t ax;
    int axis = 0;
    if (!imp_attr_int(I, n, "axis", 1, INT32_MIN, INT32_MAX, &ax)) return false;
    if (ax == s.rank) axis = s.rank;
    else if (!norm_axis(I, ax, s.rank, &axis)) return false;
    Shape t = { 2, { { 1, -1 }, { 1, -1 } } };
    if (!product_dims(s.d, 0, axis, &t.d[0]) || !product_dims(s.d, axis, s.rank, &t.d[1]))
        return imp_fail(I, "the flattened sizes are not a number times one symbol");
    return reshape_to(I, n, x, t);
}

static bool reshape(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = tensor_in(I, n, 0), *sv = ints_in(I, n, 1, "the shape");
    int64_t allowzero;
    if (!x || !sv || !imp_attr_int(I, n, "allowzero", 0, 0, 1, &allowzero)) return false;
    Shape s = imp_onnx_shape(I, x), t = { (int)sv->numel, { { 0, -1 } } };
    if (sv->numel < 1 || sv->numel > MAX_RANK) return imp_fail(I, "a target of %lld dimensions", (long long)sv->numel);
    int infer = -1;
    for (int i = 0; i < t.rank; i++) {
        Dim d = sv->iv[i];
        if (d.sym < 0 && d.v == 0 && !allowzero) {
            if (i >= s.rank) return imp_fail(I, "dimension %d is 0 (copy) but the input has rank %d", i, s.rank);
            d = s.d[i];
        } else if (d.sym < 0 && d.v == -1) {
            if (infer >= 0) return imp_fail(I, "two dimensions are -1");
            infer = i;
            d = (Dim){ 1, -1 };
        } else if (d.sym < 0 && d.v < 1) {
            return imp_fail(I, "dimension %d is %lld", i, (long long)d.v);
        }
        t.d[i] = d;
    }
    Dim total, known;
    if (!product_dims(s.d, 0, s.rank, &total) || !product_dims(t.d, 0, t.rank, &known))
        return imp_fail(I, "the sizes are not a number times one symbol");
    if (infer >= 0) {
        bool ok = known.v > 0 && total.v % known.v == 0 && (known.sym < 0 || known.sym == total.sym);
        if (!ok) return imp_fail(I, "cannot infer the -1 dimension");
        t.d[infer] = (Dim){ total.v / known.v, known.sym >= 0 ? -1 : total.sym };
    } else if (!dim_eq(total, known)) {
        return imp_fail(I, "the target holds another number of elements than the input");
    }
    return reshape_to(I, n, x, t);
}

static bool transpose(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = imp_in(I, n, 0);
    if (!x) return imp_fail(I, "input 0 is missing");
    int rank = x->kind == VK_TENSOR ? imp_onnx_shape(I, x).rank : x->rank;
    int64_t perm[MAX_RANK];
    int got;
    if (!imp_attr_ints(I, n, "perm", rank, 0, rank - 1, perm, &got)) return false;
    if (!got)
        for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
    bool seen[MAX_RANK] = { false }, ident = true;
    for (int i = 0; i < rank; i++) {
        if (seen[perm[i]]) return imp_fail(I, "perm is not a permutation");
        seen[perm[i]] = true;
        ident = ident && perm[i] == i;
    }
    if (ident) return identity(I, n);
    static const int64_t to_nchw[4] = { 0, 3, 1, 2 }, to_nhwc[4] = { 0, 2, 3, 1 };
    if (x->kind == VK_TENSOR && rank == 4 && x->lay == LAY_SAME && !memcmp(perm, to_nchw, sizeof to_nchw))
        return out_tensor(I, n, x->node, LAY_NCHW, NULL);
    if (x->kind == VK_TENSOR && rank == 4 && x->lay == LAY_NCHW && !memcmp(perm, to_nhwc, sizeof to_nhwc))
        return out_tensor(I, n, x->node, LAY_SAME, NULL);
    /* a filter computed in graphc's HWIO, as a Conv reads it (graphc's export writes it) */
    static const int64_t to_oihw[4] = { 3, 2, 0, 1 }, to_hwio[4] = { 2, 3, 1, 0 };
    if (x->kind == VK_TENSOR && rank == 4 && x->lay == LAY_SAME && !memcmp(perm, to_oihw, sizeof to_oihw))
        return out_tensor(I, n, x->node, LAY_OIHW, NULL);
    if (x->kind == VK_TENSOR && rank == 4 && x->lay == LAY_OIHW && !memcmp(perm, to_hwio, sizeof to_hwio))
        return out_tensor(I, n, x->node, LAY_SAME, NULL);
    if (x->kind == VK_FLOATS && rank == 4 && !memcmp(perm, to_oihw, sizeof to_oihw)) {
        /* a weight read both as a filter and otherwise: one param, as it was */
        int32_t id = param_from(I, x, key(I, x, XF_ASIS, NULL, 1), shape_of(4, x->dims));
        return id >= 0 && out_tensor(I, n, id, LAY_OIHW, NULL);
    }
    if (x->kind != VK_FLOATS) return imp_fail(I, "a transpose of %s that is not a change between NCHW and NHWC", lay_name(x->lay));
    /* a constant: transposed now */
    IVal v = { .kind = VK_FLOATS, .rank = rank, .numel = x->numel };
    int64_t stride[MAX_RANK], idx[MAX_RANK] = { 0 };
    for (int i = rank - 1, acc = 1; i >= 0; acc *= (int)x->dims[i], i--) stride[i] = acc;
    for (int i = 0; i < rank; i++) v.dims[i] = x->dims[perm[i]];
    v.f = gc_malloc((size_t)x->numel * sizeof *v.f);
    if (!v.f) return imp_oom(I);
    for (int64_t j = 0; j < x->numel; j++) {
        int64_t src = 0;
        for (int i = 0; i < rank; i++) src += idx[i] * stride[perm[i]];
        v.f[j] = x->f[src];
        for (int i = rank - 1; i >= 0 && ++idx[i] == v.dims[i]; i--) idx[i] = 0;
    }
    return imp_set_out(I, n, 0, &v);
}

static bool concat(Imp *I, const Onnx__NodeProto *n)
{
    int64_t ax;
    if (!imp_attr_int(I, n, "axis", 0, INT32_MIN, INT32_MAX, &ax)) return false;
    size_t k = n->n_input;
    bool ints = true;
    IVal *t = NULL;
    for (size_t i = 0; i < k; i++) {
        IVal *v = imp_in(I, n, i);
        if (!v) return imp_fail(I, "input %zu is missing", i);
        ints = ints && v->kind == VK_INTS;
        if (v->kind == VK_TENSOR && !t) t = v;
    }
    if (ints) {
        Dim r[MAX_RANK];
        int64_t cnt = 0;
        for (size_t i = 0; i < k; i++) {
            IVal *v = imp_in(I, n, i);
            if (v->rank != 1 || cnt + v->numel > MAX_RANK) return imp_fail(I, "integer vectors longer than %d", MAX_RANK);
            memcpy(r + cnt, v->iv, (size_t)v->numel * sizeof *r);
            cnt += v->numel;
        }
        return out_ints(I, n, r, cnt, false);
    }
    if (!t) return imp_fail(I, "every input is a constant (export with constant folding on)");
    if (t->lay == LAY_OIHW) return imp_fail(I, "a concat of filters in OIHW");
    int32_t *in = gc_malloc(k * sizeof *in);
    if (!in) return imp_oom(I);
    bool ok = true;
    for (size_t i = 0; i < k && ok; i++) {
        IVal *v = imp_in(I, n, i);
        if (v->kind == VK_TENSOR) { ok = same_layout(I, t, v) && same_layout(I, v, t); in[i] = v->node; }
        else if (v->kind == VK_FLOATS && t->lay == LAY_SAME) in[i] = param_from(I, v, key(I, v, XF_ASIS, NULL, 1), shape_of(v->rank, v->dims)), ok = in[i] >= 0;
        else ok = imp_fail(I, "input %zu is a constant joined to %s", i, lay_name(t->lay));
    }
    int axis = 0;
    if (ok && t->lay == LAY_FLAT) ok = imp_fail(I, "a concat of flattened NCHW images would mix their element orders");
    if (ok) ok = norm_axis(I, ax, imp_onnx_shape(I, t).rank, &axis);
    if (ok) {
        static const int nchw_axis[4] = { 0, 3, 1, 2 };
        NodeAttr a = om_attr_concat(t->lay == LAY_NCHW ? nchw_axis[axis] : axis);
        ok = out_tensor(I, n, imp_node(I, om_op(OM_CONCAT), in, (int)k, &a, NULL), t->lay, t);
    }
    gc_free(in);
    return ok;
}

/* Constant: a tensor, a float or int, or a list of them. */
static bool constant(Imp *I, const Onnx__NodeProto *n)
{
    if (n->n_attribute != 1) return imp_fail(I, "a Constant has exactly one attribute");
    const Onnx__AttributeProto *a = n->attribute[0];
    const char *an = str_or(a->name);
    IVal v;
    memset(&v, 0, sizeof v);
    if (strcmp(an, "value") == 0) {
        if (!a->t) return imp_fail(I, "attribute 'value' must be a tensor");
        if (!imp_tensor(I, a->t, "its value", &v)) return false;
        return imp_set_out(I, n, 0, &v);
    }
    bool list = strcmp(an, "value_floats") == 0 || strcmp(an, "value_ints") == 0;
    bool isf = strcmp(an, "value_float") == 0 || strcmp(an, "value_floats") == 0;
    size_t cnt = !list ? 1 : isf ? a->n_floats : a->n_ints;
    if (cnt < 1 || cnt > (size_t)(isf ? INT32_MAX : MAX_RANK)) return imp_fail(I, "attribute '%s' has %zu values", an, cnt);
    v.kind = isf ? VK_FLOATS : VK_INTS;
    v.rank = list ? 1 : 0;
    v.dims[0] = (int64_t)cnt;
    v.numel = (int64_t)cnt;
    if (isf) {
        v.f = gc_malloc(cnt * sizeof *v.f);
        if (!v.f) return imp_oom(I);
        for (size_t i = 0; i < cnt; i++) v.f[i] = list ? a->floats[i] : a->f;
    } else {
        v.iv = gc_malloc(cnt * sizeof *v.iv);
        if (!v.iv) return imp_oom(I);
        for (size_t i = 0; i < cnt; i++) v.iv[i] = (Dim){ list ? a->ints[i] : a->i, -1 };
    }
    return imp_set_out(I, n, 0, &v);
}

static bool shape(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = tensor_in(I, n, 0);
    int64_t start, end;
    if (!x) return false;
    Shape s = imp_onnx_shape(I, x);
    if (!imp_attr_int(I, n, "start", 0, -s.rank, s.rank, &start) || !imp_attr_int(I, n, "end", s.rank, -s.rank, s.rank, &end)) return false;
    if (start < 0) start += s.rank;
    if (end < 0) end += s.rank;
    if (end < start) end = start;
    return out_ints(I, n, s.d + start, end - start, false);
}

static bool gather(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = ints_in(I, n, 0, "the data"), *idx = ints_in(I, n, 1, "the indices");
    int64_t axis;
    if (!x || !idx || !imp_attr_int(I, n, "axis", 0, -1, 0, &axis)) return false;
    if (x->rank != 1) return imp_fail(I, "Gather of a scalar");
    Dim r[MAX_RANK];
    if (idx->numel > MAX_RANK) return imp_fail(I, "too many indices");
    for (int64_t i = 0; i < idx->numel; i++) {
        int64_t k = idx->iv[i].v;
        if (idx->iv[i].sym >= 0 || k < -x->numel || k >= x->numel) return imp_fail(I, "index %lld is out of range", (long long)k);
        r[i] = x->iv[k < 0 ? k + x->numel : k];
    }
    return out_ints(I, n, r, idx->numel, idx->rank == 0);
}

/* The axes of Squeeze and Unsqueeze: an attribute before opset 13, an input after. */
static bool axes_of(Imp *I, const Onnx__NodeProto *n, int64_t *axes, int *got)
{
    *got = 0;
    if (I->opset < 13) return imp_attr_ints(I, n, "axes", -1, -MAX_RANK, MAX_RANK, axes, got);
    IVal *a = imp_in(I, n, 1);
    if (!a) return true;
    if (a->kind != VK_INTS || a->numel > MAX_RANK) return imp_fail(I, "the axes must be integers known when the model is read");
    for (int64_t i = 0; i < a->numel; i++) axes[i] = a->iv[i].v;
    *got = (int)a->numel;
    return true;
}

static bool unsqueeze(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = imp_in(I, n, 0);
    int64_t axes[MAX_RANK];
    int got;
    if (!x || !axes_of(I, n, axes, &got)) return x ? false : imp_fail(I, "input 0 is missing");
    if (x->kind == VK_INTS && x->rank == 0 && got == 1 && (axes[0] == 0 || axes[0] == -1)) return out_ints(I, n, x->iv, 1, false);
    if (x->kind != VK_TENSOR || x->lay != LAY_SAME) return imp_fail(I, "an Unsqueeze graphc does not do");
    Shape s = gshape(I, x)[0], t = { s.rank + got, { { 0, -1 } } };
    if (t.rank > MAX_RANK) return imp_fail(I, "rank %d", t.rank);
    bool one[MAX_RANK] = { false };
    for (int i = 0; i < got; i++) {
        int a = 0;
        if (!norm_axis(I, axes[i], t.rank, &a)) return false;
        one[a] = true;
    }
    for (int i = 0, j = 0; i < t.rank; i++) t.d[i] = one[i] ? (Dim){ 1, -1 } : s.d[j++];
    return reshape_to(I, n, x, t);
}

static bool squeeze(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = imp_in(I, n, 0);
    int64_t axes[MAX_RANK];
    int got;
    if (!x || !axes_of(I, n, axes, &got)) return x ? false : imp_fail(I, "input 0 is missing");
    if (x->kind == VK_INTS && x->rank == 1 && x->numel == 1) return out_ints(I, n, x->iv, 1, true);
    if (x->kind != VK_TENSOR) return imp_fail(I, "a Squeeze of a constant");
    Shape s = imp_onnx_shape(I, x), t = { 0, { { 0, -1 } } };
    bool drop[MAX_RANK] = { false };
    for (int i = 0; i < got; i++) {
        int a = 0;
        if (!norm_axis(I, axes[i], s.rank, &a)) return false;
        if (!(s.d[a].sym < 0 && s.d[a].v == 1)) return imp_fail(I, "axis %d is not of size 1", a);
        drop[a] = true;
    }
    for (int i = 0; i < s.rank; i++)
        if (got ? !drop[i] : !(s.d[i].sym < 0 && s.d[i].v == 1)) t.d[t.rank++] = s.d[i];
    if (x->lay == LAY_NC11 && t.rank == 2) return out_tensor(I, n, x->node, LAY_SAME, NULL);
    return reshape_to(I, n, x, t);
}

static bool cast(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = imp_in(I, n, 0);
    int64_t to;
    if (!x || !imp_attr_int(I, n, "to", 0, 0, 16, &to)) return x ? false : imp_fail(I, "input 0 is missing");
    bool to_int = to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 || to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    if ((x->kind == VK_INTS && to_int) || (x->kind != VK_INTS && to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
                                           (x->kind != VK_TENSOR || I->g->nodes[x->node].dtype == DT_F32)))
        return identity(I, n);
    return imp_fail(I, "a Cast graphc does not do (to type %lld)", (long long)to);
}

/* Slice of an integer vector (a shape), with constant starts, ends, axes 0, steps 1. */
static bool slice(Imp *I, const Onnx__NodeProto *n)
{
    IVal *x = ints_in(I, n, 0, "the data");
    int64_t st = 0, en = 0;
    if (!x) return false;
    if (x->rank != 1) return imp_fail(I, "Slice of a scalar");
    if (I->opset < 10) {
        int64_t a[1], b[1];
        int g1, g2;
        if (!imp_attr_ints(I, n, "starts", 1, INT64_MIN, INT64_MAX, a, &g1) || !imp_attr_ints(I, n, "ends", 1, INT64_MIN, INT64_MAX, b, &g2)) return false;
        st = a[0];
        en = b[0];
    } else {
        IVal *s = ints_in(I, n, 1, "starts"), *e = ints_in(I, n, 2, "ends"), *ax = imp_in(I, n, 3), *step = imp_in(I, n, 4);
        if (!s || !e) return false;
        if (s->numel != 1 || e->numel != 1) return imp_fail(I, "a slice along more than one axis");
        if ((ax && (ax->kind != VK_INTS || ax->numel != 1 || !(ax->iv[0].v == 0 || ax->iv[0].v == -1))) ||
            (step && (step->kind != VK_INTS || step->numel != 1 || step->iv[0].v != 1)))
            return imp_fail(I, "a slice with other axes or steps than axis 0, step 1");
        st = s->iv[0].v;
        en = e->iv[0].v;
    }
    int64_t len = x->numel;
    st = st < 0 ? (st + len < 0 ? 0 : st + len) : (st > len ? len : st);
    en = en < 0 ? (en + len < 0 ? 0 : en + len) : (en > len ? len : en);
    if (en < st) en = st;
    return out_ints(I, n, x->iv + st, en - st, false);
}

/* ---- the table ---------------------------------------------------------------------- */

static const ImpOp ops[] = {
    { "Conv", conv, 2, 3, { "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides" } },
    { "MaxPool", pool, 1, 1, { "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides" } },
    { "AveragePool", pool, 1, 1, { "auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides" } },
    { "GlobalAveragePool", global_pool, 1, 1, { 0 } },
    { "ReduceMean", reduce_mean, 1, 2, { "axes", "keepdims", "noop_with_empty_axes" } },
    { "Gemm", gemm, 2, 3, { "alpha", "beta", "transA", "transB" } },
    { "MatMul", matmul, 2, 2, { 0 } },
    { "Add", binary, 2, 2, { 0 } },
    { "Sub", binary, 2, 2, { 0 } },
    { "Mul", binary, 2, 2, { 0 } },
    { "Div", binary, 2, 2, { 0 } },
    { "Relu", unary, 1, 1, { 0 } },
    { "Sigmoid", unary, 1, 1, { 0 } },
    { "Tanh", unary, 1, 1, { 0 } },
    { "Exp", unary, 1, 1, { 0 } },
    { "Log", unary, 1, 1, { 0 } },
    { "Sqrt", unary, 1, 1, { 0 } },
    { "Neg", unary, 1, 1, { 0 } },
    { "Softmax", rows, 1, 1, { "axis" } },
    { "LogSoftmax", rows, 1, 1, { "axis" } },
    { "BatchNormalization", batch_norm, 5, 5, { "epsilon", "momentum", "spatial", "training_mode" } },
    { "Flatten", flatten, 1, 1, { "axis" } },
    { "Reshape", reshape, 2, 2, { "allowzero" } },
    { "Transpose", transpose, 1, 1, { "perm" } },
    { "Concat", concat, 1, 1 << 20, { "axis" } },
    { "Pad", pad, 1, 4, { "mode", "pads", "value" } },
    { "Identity", identity, 1, 1, { 0 } },
    { "Dropout", identity, 1, 3, { "ratio", "seed" } },
    { "Constant", constant, 0, 0, { "value", "value_float", "value_floats", "value_int", "value_ints" } },
    { "Shape", shape, 1, 1, { "start", "end" } },
    { "Gather", gather, 2, 2, { "axis" } },
    { "Unsqueeze", unsqueeze, 1, 2, { "axes" } },
    { "Squeeze", squeeze, 1, 2, { "axes" } },
    { "Cast", cast, 1, 1, { "to", "saturate" } },
    { "Slice", slice, 1, 5, { "starts", "ends", "axes" } },
};

const ImpOp *imp_op(const char *type)
{
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(ops[i].type, type) == 0) return &ops[i];
    return NULL;
}

void imp_op_list(char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0] && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", ops[i].type);
}

/* Whether a rank-4 graph input is an NCHW image: a Conv, pool or batch norm reads it,
 * directly or through elementwise ops (a search forward over the nodes; graphc's own
 * export reads its NHWC images through a Transpose, which stops the search). */
bool imp_input_is_image(Imp *I, const char *name)
{
    static const char *const spatial[] = { "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization", "Pad" };
    static const char *const through[] = { "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Add", "Sub", "Mul", "Div",
                                           "Identity", "Dropout" };
    const Onnx__GraphProto *gp = I->gp;
    size_t nn = gp->n_node ? gp->n_node : 1;
    bool *seen = gc_calloc(nn, sizeof *seen);
    const char **vals = gc_malloc((nn + 1) * sizeof *vals);
    bool image = false;
    if (!seen || !vals) { gc_free(seen); gc_free(vals); return true; }   /* the import fails later, out of memory */
    /* values to follow: the input, then the outputs of the nodes passed through */
    int nv = 0;
    vals[nv++] = name;
    for (int v = 0; v < nv && !image; v++) {
        for (size_t i = 0; i < gp->n_node && !image; i++) {
            const Onnx__NodeProto *n = gp->node[i];
            bool reads = false;
            for (size_t k = 0; k < n->n_input && !reads; k++) reads = strcmp(n->input[k], vals[v]) == 0;
            if (!reads || seen[i]) continue;
            seen[i] = true;
            for (size_t q = 0; q < sizeof spatial / sizeof *spatial; q++) image = image || strcmp(n->op_type, spatial[q]) == 0;
            for (size_t q = 0; q < sizeof through / sizeof *through && n->n_output > 0; q++)
                if (strcmp(n->op_type, through[q]) == 0 && nv < (int)nn + 1) { vals[nv++] = n->output[0]; break; }
        }
    }
    gc_free(seen);
    gc_free(vals);
    return image;
}
