/* The model generator.  See modelgen.h.
 *
 * Every decision is pick(g, n), a number below n taken from the choice bytes, 0 once
 * they run out; so choice 0 is always the simple one.  A model is tame (the first
 * choice) or wild: in a tame one every op is chosen to fit the shapes so far, so it
 * mostly compiles and trains, and rare(g, k), the odd choice (one time in k), is never
 * taken; in a wild one it is: sizes at the edges, values of the wrong kind, any builtin
 * of the table, nesting past the limit.  An expression is made operand first: once its
 * shape is known, an op that fits is wrapped around it (its prefix spliced in before
 * the operand's text). */
#include "fuzz/modelgen.h"
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/lower.h"

enum { MAXV = 64, MAXR = 4 };

/* A named value: a tensor of about this shape (d[0] is the batch B when batch), a
 * parameter (which may be a matmul's right operand), or not a tensor at all. */
typedef struct GVal {
    char name[16];
    int rank;
    int64_t d[MAXR];
    bool batch, param;
    bool ids;           /* i32 token ids (an embedding's input) */
} GVal;

typedef struct Gen {
    const uint8_t *p;   /* the choices */
    size_t n, at;
    bool wild;
    char *out;          /* the model so far */
    size_t len, cap;
    bool oom;
    GVal v[MAXV];       /* named tensors */
    int nv;
    int hidden;         /* h0, h1, ... */
} Gen;

static unsigned pick(Gen *g, unsigned n)
{
    if (n <= 1) return 0;
    unsigned x = g->at < g->n ? g->p[g->at++] : 0;
    if (n > 256) x = x << 8 | (g->at < g->n ? g->p[g->at++] : 0);
    return x % n;
}

static bool rare(Gen *g, unsigned k) { return g->wild && pick(g, k) == k - 1; }

static void splice(Gen *g, size_t at, size_t del, const char *ins, size_t nins)
{
    if (g->oom) return;
    if (g->len + nins + 1 > g->cap) {
        size_t cap = g->cap ? g->cap : 1024;
        while (cap < g->len + nins + 1) cap *= 2;
        char *o = realloc(g->out, cap);
        if (!o) { g->oom = true; return; }
        g->out = o;
        g->cap = cap;
    }
    if (at > g->len) at = g->len;
    if (del > g->len - at) del = g->len - at;
    memmove(g->out + at + nins, g->out + at + del, g->len - at - del);
    memcpy(g->out + at, ins, nins);
    g->len = g->len - del + nins;
    g->out[g->len] = 0;
}

static void emit(Gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(Gen *g, const char *fmt, ...)
{
    char small[256], *b = small;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k >= sizeof small) {
        if (!(b = malloc((size_t)k + 1))) { g->oom = true; return; }
        va_start(ap, fmt);
        vsnprintf(b, (size_t)k + 1, fmt, ap);
        va_end(ap);
    }
    splice(g, g->len, 0, b, (size_t)k);
    if (b != small) free(b);
}

/* Puts `prefix` before the text from `mark` on (an operand) and `suffix` after it. */
static void wrap(Gen *g, size_t mark, const char *prefix, const char *suffix)
{
    splice(g, mark, 0, prefix, strlen(prefix));
    splice(g, g->len, 0, suffix, strlen(suffix));
}

/* A position in [0, n] (three bytes, for texts past 64 KiB). */
static size_t pick_at(Gen *g, size_t n)
{
    size_t x = 0;
    for (int i = 0; i < 3; i++) x = x << 8 | (g->at < g->n ? g->p[g->at++] : 0);
    return x % (n + 1);
}

static void repeat(Gen *g, const char *s, int times)
{
    for (int i = 0; i < times; i++) emit(g, "%s", s);
}

/* A size: 1 to `small` mostly, in a wild model sometimes one at an edge. */
static int64_t size(Gen *g, int64_t small)
{
    static const int64_t edge[] = {
        0, -1, 1, 2, 65535, 65536, 65537, (int64_t)1 << 20, INT32_MAX, (int64_t)1 << 31,
        ((int64_t)1 << 40) - 1, (int64_t)1 << 40, ((int64_t)1 << 40) + 1, (int64_t)1 << 62, INT64_MAX,
    };
    if (rare(g, 24)) return edge[pick(g, sizeof edge / sizeof *edge)];
    return 1 + (int64_t)pick(g, (unsigned)small);
}

/* A number literal: small integers and fractions, in a wild model odd ones. */
static void number(Gen *g)
{
    static const char *const odd[] = { "0", "1e39", "3.4e38", "1e-45", "99999999999999999999", "0.0", ".5", "2.", "1e400" };
    if (rare(g, 8)) {
        emit(g, "%s", odd[pick(g, sizeof odd / sizeof *odd)]);
        return;
    }
    switch (pick(g, 5)) {
    case 0: emit(g, "%u", 1 + pick(g, 4)); break;
    case 1: emit(g, "0.%u", pick(g, 100)); break;
    case 2: emit(g, "%u.5", pick(g, 3)); break;
    case 3: emit(g, "1e-%u", 1 + pick(g, 8)); break;
    default: emit(g, "-%u", pick(g, 3)); break;
    }
}

/* Elements of s per example (all of them when s has no batch axis), for shapes that
 * follow (a huge one counts as 1: the generator's arithmetic must not overflow where
 * the compiler's is being tested). */
static int64_t features(const GVal *s)
{
    int64_t f = 1;
    for (int i = s->batch ? 1 : 0; i < s->rank; i++) f *= s->d[i] > 0 && s->d[i] <= 4096 ? s->d[i] : 1;
    return f;
}

static bool same_shape(const GVal *a, const GVal *b)
{
    if (a->rank != b->rank || a->batch != b->batch) return false;
    for (int i = a->batch ? 1 : 0; i < a->rank; i++)
        if (a->d[i] != b->d[i]) return false;
    return true;
}

/* A tensor named so far, not a parameter (those go through ops that fit them). */
static const GVal *any_value(Gen *g)
{
    int k = (int)pick(g, (unsigned)g->nv);
    for (int i = 0; i < g->nv; i++) {
        const GVal *v = &g->v[(k + i) % g->nv];
        if ((!v->param && !v->ids) || g->wild) return v;
    }
    return NULL;
}

static void add_value(Gen *g, const char *name, const GVal *shape)
{
    if (g->nv == MAXV) return;
    GVal *v = &g->v[g->nv++];
    *v = *shape;
    snprintf(v->name, sizeof v->name, "%s", name);
}

static void type(Gen *g, const char *dtype, const GVal *s)
{
    emit(g, "%s[", dtype);
    for (int i = 0; i < s->rank; i++) {
        if (i) emit(g, ", ");
        if (i == 0 && s->batch) emit(g, "%s", rare(g, 16) ? "N" : "B");
        else emit(g, "%" PRId64, s->d[i]);
    }
    emit(g, "]");
}

/* ---- calls from the builtin table ----------------------------------------------------- */

static void expr(Gen *g, int depth, GVal *s);

/* A value for keyword `k`, of the kind its name suggests, or (wild) of another kind. */
static void keyword_value(Gen *g, const char *k)
{
    static const char *const strings[] = { "\"same\"", "\"valid\"", "\"relu\"", "\"softmax\"", "\"tanh\"", "\"linear\"",
                                           "\"x\"", "\"\"", "\"a/b\"", "\"data/mnist\"" };
    if (rare(g, 8)) k = "";
    if (!strcmp(k, "units") || !strcmp(k, "filters") || !strcmp(k, "count")) emit(g, "%" PRId64, size(g, 8));
    else if (!strcmp(k, "kernel") || !strcmp(k, "size") || !strcmp(k, "stride")) emit(g, "%" PRId64, size(g, 3));
    else if (!strcmp(k, "axis")) emit(g, "%d", (int)pick(g, 9) - 4);
    else if (!strcmp(k, "use_bias") || !strcmp(k, "nesterov")) emit(g, "%s", pick(g, 2) ? "false" : "true");
    else if (!strcmp(k, "padding")) emit(g, "%s", pick(g, 2) ? "\"same\"" : "\"valid\"");
    else if (!strcmp(k, "activation")) emit(g, "%s", strings[2 + pick(g, 4)]);
    else if (!strcmp(k, "name")) emit(g, "\"l%u\"", pick(g, 4));
    else if (!strcmp(k, "rate") || !strcmp(k, "momentum") || !strcmp(k, "beta1") || !strcmp(k, "beta2") || !strcmp(k, "alpha"))
        emit(g, "0.%u", pick(g, 10));
    else {
        switch (pick(g, 4)) {
        case 0: number(g); break;
        case 1: emit(g, "%s", strings[pick(g, sizeof strings / sizeof *strings)]); break;
        case 2: emit(g, "%s", pick(g, 2) ? "true" : "false"); break;
        default: { GVal t; expr(g, 1, &t); break; }
        }
    }
}

/* (Wild.)  Any builtin of the table, or an unknown name, called with 0 to 3 positional
 * arguments and some of its keywords, or one it does not take. */
static void table_call(Gen *g, GVal *s)
{
    const char *const *names;
    int nb = lower_builtin_names(&names);
    const char *fn = rare(g, 16) ? "relux" : names[pick(g, (unsigned)nb)];
    emit(g, "%s(", fn);
    int npos = (int)pick(g, 4);
    const GVal *v = any_value(g);
    if (v) *s = *v;
    for (int i = 0; i < npos; i++) {
        if (i) emit(g, ", ");
        if (pick(g, 3) || !v) { GVal t; expr(g, 1, &t); }
        else emit(g, "%s", v->name);
    }
    const char *const *kw = lower_builtin_keywords(fn);
    int nk = 0;
    while (kw && nk < 10 && kw[nk]) nk++;
    for (int i = 0; i < nk; i++) {
        if (!pick(g, 2)) continue;
        emit(g, "%s%s=", npos ? ", " : "", kw[i]);
        keyword_value(g, kw[i]);
        npos++;
    }
    if (rare(g, 4)) {
        emit(g, "%sunits=", npos ? ", " : "");
        keyword_value(g, "units");
    }
    emit(g, ")");
}

/* ---- tensor expressions, shaped to fit -------------------------------------------------- */

enum {
    G_UNARY, G_NEG, G_BINARY, G_DENSE, G_WINDOW, G_CONCAT, G_FLATTEN, G_RESHAPE, G_DROPOUT,
    G_LAYOUT, G_INDEX, G_REDUCE, G_NORM, G_BMM, G_ATTENTION,   /* the transformer family */
    G_MATMUL, G_OPS
};

/* A parameter to multiply s[B, k] by: [k, n]. */
static const GVal *matmul_param(Gen *g, const GVal *s)
{
    for (int i = 0; i < g->nv; i++)
        if (g->v[i].param && g->v[i].rank == 2 && s->rank == 2 && g->v[i].d[0] == s->d[1]) return &g->v[i];
    return NULL;
}

static bool fits(Gen *g, int op, const GVal *s)
{
    if (g->wild) return true;
    switch (op) {
    case G_UNARY: case G_NEG: case G_DROPOUT: case G_BINARY: return true;
    case G_DENSE: case G_FLATTEN: case G_RESHAPE: return s->batch && s->rank >= 1;
    case G_WINDOW: return s->rank == 4 && s->batch && s->d[1] >= 3 && s->d[2] >= 3;
    case G_CONCAT: return s->rank >= 1;
    case G_LAYOUT: case G_BMM: return s->batch && s->rank >= 3;
    case G_INDEX: case G_REDUCE: return s->batch && s->rank >= 2;
    case G_NORM: return s->batch && s->rank >= 2;   /* over known sizes */
    case G_ATTENTION: return s->batch && s->rank == 3 && s->d[1] >= 1 && s->d[1] <= 64 && s->d[2] >= 1 && s->d[2] <= 64;
    default: return matmul_param(g, s) != NULL;
    }
}

/* A right operand for s: a number, or a value of the same shape. */
static void operand_like(Gen *g, const GVal *s)
{
    int same = -1;
    for (int i = 0; i < g->nv; i++)
        if (same_shape(&g->v[i], s)) same = i;
    if (same >= 0 && pick(g, 2)) emit(g, "%s", g->v[same].name);
    else number(g);
}

static void op_binary(Gen *g, size_t mark, const GVal *s)
{
    static const char *const infix[] = { " + ", " - ", " * ", " / " };
    static const char *const fns[] = { "add(", "sub(", "mul(", "div(" };
    unsigned op = pick(g, 4);
    bool call = pick(g, 2);
    wrap(g, mark, call ? fns[op] : "(", call ? ", " : infix[op]);
    operand_like(g, s);
    emit(g, ")");
}

static void op_dense(Gen *g, size_t mark, GVal *s)
{
    static const char *const acts[] = { "relu", "sigmoid", "tanh", "softmax", "linear" };
    bool flat = s->rank != 2 ? !rare(g, 8) : false;
    wrap(g, mark, flat ? "dense(flatten(" : "dense(", flat ? ")" : "");
    *s = (GVal){ .rank = 2, .d = { 1, size(g, 8) }, .batch = true };
    emit(g, ", units=%" PRId64, s->d[1]);
    if (pick(g, 3) == 1) emit(g, ", activation=\"%s\"", acts[pick(g, 5)]);
    if (pick(g, 4) == 3) emit(g, ", use_bias=%s", pick(g, 2) ? "true" : "false");
    if (pick(g, 6) == 5) emit(g, ", name=\"shared%u\"", pick(g, 2));
    emit(g, ")");
}

/* conv2d (the layer), maxpool, avgpool or global_avgpool over s[N, H, W, C] */
static void op_window(Gen *g, size_t mark, GVal *s)
{
    static const char *const fns[] = { "conv2d(", "maxpool(", "avgpool(", "global_avgpool(" };
    unsigned f = pick(g, 4);
    wrap(g, mark, fns[f], "");
    int64_t k = size(g, 3), st = size(g, 2), filters = size(g, 6);
    bool same = pick(g, 2);
    if (f == 0) emit(g, ", filters=%" PRId64 ", kernel=%" PRId64, filters, k);
    else if (f < 3) emit(g, ", size=%" PRId64, k);
    if (f < 3 && pick(g, 2)) emit(g, ", stride=%" PRId64, st);
    else if (f == 0) st = 1;   /* the default; a pool's stride is its size */
    else st = k;
    if (f < 3 && same) emit(g, ", padding=\"same\"");
    emit(g, ")");
    if (s->rank != 4) return;   /* wild: an error for the compiler to find */
    if (f == 3) {
        *s = (GVal){ .rank = 2, .d = { 1, s->d[3] }, .batch = true };
        return;
    }
    if (f == 0) s->d[3] = filters;
    for (int i = 1; i < 3; i++)
        if (k > 0 && k < 4096 && st > 0 && st < 4096 && s->d[i] >= k && s->d[i] < 4096)
            s->d[i] = same ? (s->d[i] + st - 1) / st : (s->d[i] - k) / st + 1;
}

/* concat of the operand with itself (its text twice) or a value of its shape */
static void op_concat(Gen *g, size_t mark, GVal *s)
{
    int axis = (int)pick(g, (unsigned)s->rank);
    if (rare(g, 6)) axis = -1 - (int)pick(g, 6);
    size_t n = g->len - mark;
    char *copy = malloc(n + 1);
    if (!copy) { g->oom = true; return; }
    memcpy(copy, g->out + mark, n);
    copy[n] = 0;
    wrap(g, mark, "concat(", ", ");
    int same = -1;
    for (int i = 0; i < g->nv; i++)
        if (same_shape(&g->v[i], s)) same = i;
    if (same >= 0 && pick(g, 2)) emit(g, "%s", g->v[same].name);
    else emit(g, "%s", copy);
    free(copy);
    emit(g, ", axis=%d)", axis);
    if (axis < 0) axis += s->rank;
    if (axis == 0 && s->batch) {   /* [2*B, ...]: back to [B, ...] for what follows */
        wrap(g, mark, "reshape(", ", B, -1)");
        *s = (GVal){ .rank = 2, .d = { 1, 2 * features(s) }, .batch = true };
    } else if (axis >= 0 && axis < s->rank && s->d[axis] < 4096) {
        s->d[axis] *= 2;
    }
}

static void op_reshape(Gen *g, size_t mark, GVal *s)
{
    int64_t f = features(s), k = 1 + (int64_t)pick(g, 2);
    switch (pick(g, 4)) {
    case 0:
        wrap(g, mark, "flatten(", ")");
        *s = (GVal){ .rank = 2, .d = { 1, f }, .batch = true };
        break;
    case 1:
        wrap(g, mark, "reshape(", ", B, -1)");
        *s = (GVal){ .rank = 2, .d = { 1, f }, .batch = true };
        break;
    case 2:
        if (f % k && !g->wild) k = 1;
        wrap(g, mark, "reshape(", "");
        emit(g, ", B, %" PRId64 ", -1)", k);
        *s = (GVal){ .rank = 3, .d = { 1, k, f / k }, .batch = true };
        break;
    default:   /* the batch merged into one axis, or (wild) moved last */
        wrap(g, mark, "reshape(", g->wild && pick(g, 2) ? ", -1, B)" : ", -1)");
        *s = (GVal){ .rank = 1, .d = { f } };
        break;
    }
}

/* An axis of s other than the batch's (s->rank >= 2 when s->batch), or any (wild). */
static int inner_axis(Gen *g, const GVal *s)
{
    if (rare(g, 8)) return (int)pick(g, 9) - 4;
    int first = s->batch ? 1 : 0;
    return s->rank > first ? first + (int)pick(g, (unsigned)(s->rank - first)) : 0;
}

static void drop_axis(GVal *s, int axis)
{
    for (int i = axis; i + 1 < s->rank; i++) s->d[i] = s->d[i + 1];
    s->rank--;
}

/* transpose(x, perm=[...]) or permute(x, ...): two axes after the batch swapped */
static void op_layout(Gen *g, size_t mark, GVal *s)
{
    int a = inner_axis(g, s), b = inner_axis(g, s);
    int perm[MAXR];
    for (int i = 0; i < MAXR; i++) perm[i] = i;
    if (a >= 0 && a < s->rank && b >= 0 && b < s->rank) {
        perm[a] = b;
        perm[b] = a;
        int64_t t = s->d[a];
        s->d[a] = s->d[b];
        s->d[b] = t;
    }
    bool named = pick(g, 2);
    wrap(g, mark, named ? "transpose(" : "permute(", named ? ", perm=[" : ", ");
    for (int i = 0; i < s->rank; i++) emit(g, "%s%d", i ? ", " : "", perm[i]);
    emit(g, named ? "])" : ")");
}

/* x[:, a:b], x[:, i] (rank 3 and more: the axis dropped) or slice(x, axis=, start=,
 * end=) along an axis after the batch */
static void op_index(Gen *g, size_t mark, GVal *s)
{
    int axis = inner_axis(g, s);
    int64_t n = axis >= 0 && axis < s->rank ? s->d[axis] : 1;
    int64_t lo = n > 1 && n < 4096 ? (int64_t)pick(g, (unsigned)n) : 0, hi = lo + 1;
    if (n > 1 && n < 4096) hi = lo + 1 + (int64_t)pick(g, (unsigned)(n - lo));
    if (rare(g, 8)) hi = size(g, 4) - 2;   /* empty, negative, past the end */
    switch (pick(g, 3)) {
    case 0:
        wrap(g, mark, "slice(", "");
        emit(g, ", axis=%d, start=%" PRId64 ", end=%" PRId64 ")", axis, lo, hi);
        break;
    case 1:
        if (s->rank >= 3 || g->wild) {
            wrap(g, mark, "(", ")[");
            for (int i = 0; i < axis && i < MAXR; i++) emit(g, ":, ");
            emit(g, "%" PRId64 "]", lo);
            if (axis >= 0 && axis < s->rank) drop_axis(s, axis);
            return;
        }
        /* fall through */
    default:
        wrap(g, mark, "(", ")[");
        for (int i = 0; i < axis && i < MAXR; i++) emit(g, ":, ");
        emit(g, "%" PRId64 ":%" PRId64 "]", lo, hi);
        break;
    }
    if (axis >= 0 && axis < s->rank) s->d[axis] = hi - lo;
}

/* sum, mean or max over an axis after the batch (kept, or dropped from rank 3 on), or
 * softmax and log_softmax along it */
static void op_reduce(Gen *g, size_t mark, GVal *s)
{
    static const char *const fns[] = { "sum(", "mean(", "max(", "softmax(", "log_softmax(" };
    unsigned f = pick(g, 5);
    int axis = inner_axis(g, s);
    bool keep = f < 3 && (s->rank < 3 || pick(g, 2));
    wrap(g, mark, fns[f], "");
    emit(g, ", axis=%d%s)", axis, keep ? ", keepdims=true" : "");
    if (f >= 3 || axis < 0 || axis >= s->rank) return;
    if (keep) s->d[axis] = 1;
    else drop_axis(s, axis);
}

/* batch_norm over the batch (channels last), or layer_norm over the last axis or (rank 3
 * and more) the last two */
static void op_norm(Gen *g, size_t mark, const GVal *s)
{
    if (pick(g, 3) == 2) {
        wrap(g, mark, "batch_norm(", "");
        if (pick(g, 2)) emit(g, ", momentum=0.9%u", pick(g, 10));
        if (pick(g, 4) == 3) emit(g, ", eps=1e-%u", 3 + pick(g, 4));
        emit(g, ")");
        return;
    }
    wrap(g, mark, "layer_norm(", "");
    if (s->rank >= 3 && pick(g, 2)) emit(g, ", axis=[-2, -1]");
    if (pick(g, 4) == 3) emit(g, ", eps=1e-%u", 3 + pick(g, 4));
    emit(g, ")");
}

/* batch_matmul of the operand with itself, one side transposed: [.., m, k] -> [.., m, m]
 * or [.., k, k] */
static void op_bmm(Gen *g, size_t mark, GVal *s)
{
    size_t n = g->len - mark;
    char *copy = malloc(n + 1);
    if (!copy) { g->oom = true; return; }
    memcpy(copy, g->out + mark, n);
    copy[n] = 0;
    bool ta = pick(g, 2);
    wrap(g, mark, "batch_matmul(", ", ");
    emit(g, "%s, %s=true)", copy, ta ? "transpose_a" : "transpose_b");
    free(copy);
    int r = s->rank;
    if (r < 2) return;   /* wild: an error for the compiler to find */
    if (ta) s->d[r - 2] = s->d[r - 1];
    else s->d[r - 1] = s->d[r - 2];
}

/* multi_head_attention over [B, T, D]: heads that divide D, or dim= */
static void op_attention(Gen *g, size_t mark, const GVal *s)
{
    int64_t d = s->rank == 3 ? s->d[2] : 1, h = 1 + (int64_t)pick(g, 4);
    wrap(g, mark, "multi_head_attention(", "");
    if (d % h == 0 || rare(g, 4)) emit(g, ", heads=%" PRId64, h);
    else emit(g, ", heads=%" PRId64 ", dim=%u", h, 1 + pick(g, 4));
    if (pick(g, 2)) emit(g, ", causal=true");
    emit(g, ")");
}

/* Wraps an op that fits s around the operand written from `mark` on. */
static void apply_op(Gen *g, size_t mark, GVal *s)
{
    static const char *const unary[] = { "relu(", "sigmoid(", "tanh(", "exp(", "log(", "sqrt(", "softmax(", "log_softmax(",
                                         "gelu(", "silu(", "softplus(" };
    int op = (int)pick(g, G_OPS);
    for (int k = 0; k < G_OPS && !fits(g, op, s); k++) op = (op + 1) % G_OPS;
    switch (op) {
    case G_UNARY:
        if (pick(g, 12) == 11) {
            wrap(g, mark, "leaky_relu(", "");
            emit(g, ", alpha=0.%u)", pick(g, 10));
        } else if (pick(g, 12) == 11) {
            wrap(g, mark, "clip(", "");
            emit(g, ", min=-0.%u, max=0.%u)", pick(g, 10), 1 + pick(g, 9));
        } else if (pick(g, 12) == 11) {
            wrap(g, mark, "gelu(", ", approximate=\"tanh\")");
        } else {
            wrap(g, mark, unary[pick(g, sizeof unary / sizeof *unary)], ")");
        }
        break;
    case G_NEG: wrap(g, mark, "-", ""); break;
    case G_BINARY: op_binary(g, mark, s); break;
    case G_DENSE: op_dense(g, mark, s); break;
    case G_WINDOW: op_window(g, mark, s); break;
    case G_CONCAT: op_concat(g, mark, s); break;
    case G_FLATTEN: case G_RESHAPE: op_reshape(g, mark, s); break;
    case G_DROPOUT: wrap(g, mark, "dropout(", ""); emit(g, ", rate=0.%u)", pick(g, 10)); break;
    case G_LAYOUT: op_layout(g, mark, s); break;
    case G_INDEX: op_index(g, mark, s); break;
    case G_REDUCE: op_reduce(g, mark, s); break;
    case G_NORM: op_norm(g, mark, s); break;
    case G_BMM: op_bmm(g, mark, s); break;
    case G_ATTENTION: op_attention(g, mark, s); break;
    default: {
        const GVal *w = matmul_param(g, s);
        wrap(g, mark, "matmul(", "");
        emit(g, ", %s)", w ? w->name : "p0");
        if (w) s->d[1] = w->d[1];
        break;
    }
    }
}

/* A tensor expression of about `depth` ops. */
static void expr(Gen *g, int depth, GVal *s)
{
    if (rare(g, 16)) {
        table_call(g, s);
        return;
    }
    if (depth <= 0 || !pick(g, 4)) {
        const GVal *ids = NULL;
        for (int i = 0; i < g->nv; i++)
            if (g->v[i].ids) ids = &g->v[i];
        if (ids && !pick(g, 3)) {   /* [B, T] ids: [B, T, dim] */
            *s = *ids;
            s->ids = false;
            s->rank = 3;
            s->d[2] = size(g, 8);
            emit(g, "embedding(%s, vocab=%d, dim=%" PRId64 ")", ids->name, 8, s->d[2]);
            return;
        }
        const GVal *v = any_value(g);
        if (v) { *s = *v; emit(g, "%s", v->name); }
        else { *s = (GVal){ 0 }; number(g); }
        return;
    }
    size_t mark = g->len;
    expr(g, depth - 1, s);
    apply_op(g, mark, s);
}

/* (Wild.)  An expression nested about AST_MAX_DEPTH levels, at it or just past it, in
 * every form of nesting (parser/ast.h). */
static void deep(Gen *g, GVal *s)
{
    static const int around[] = { 50, 997, 998, 999, 1000, 1001, 1002, 1500, 6000 };
    int n = around[pick(g, sizeof around / sizeof *around)];
    const GVal *v = any_value(g);
    const char *x = v ? v->name : "1";
    if (v) *s = *v;
    switch (pick(g, 7)) {
    case 0: repeat(g, "relu(", n - 1); emit(g, "%s", x); repeat(g, ")", n - 1); break;
    case 1: emit(g, "%s", x); for (int i = 1; i < n; i++) emit(g, " + %s", x); break;
    case 2: repeat(g, "-(", (n - 1) / 2); emit(g, "%s", x); repeat(g, ")", (n - 1) / 2); break;
    case 3: emit(g, "%s", x); repeat(g, "[:]", n - 1); break;                      /* indexings on their base */
    case 4: repeat(g, "x0[:, 0:", n - 1); emit(g, "1"); repeat(g, "]", n - 1); break;   /* in a slice's end */
    case 5:   /* lists in a list, as a permutation */
        emit(g, "transpose(%s, perm=", x);
        repeat(g, "[0, ", n - 2);
        emit(g, "1");
        repeat(g, "]", n - 2);
        emit(g, ")");
        break;
    default: repeat(g, "add(1, ", n - 1); emit(g, "%s", x); repeat(g, ")", n - 1); break;
    }
}

/* ---- statements ------------------------------------------------------------------------- */

static void inputs(Gen *g, bool classifier)
{
    int n = classifier ? 1 : 1 + (int)pick(g, 3);
    for (int i = 0; i < n; i++) {
        /* [B, features] or images [B, H, W, C] (run wants the batch first and more) */
        GVal s = { .rank = pick(g, 2) ? 4 : rare(g, 4) ? 1 : 2, .batch = true, .d = { 1 } };
        for (int k = 1; k < s.rank; k++) {
            int64_t v = size(g, s.rank == 4 && k < 3 ? 7 : 6);
            s.d[k] = s.rank == 4 && k < 3 && v > 0 && v < 4096 ? v + 2 : v;   /* room for a window */
        }
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        emit(g, "input %s: ", name);
        type(g, rare(g, 16) ? "i32" : "f32", &s);
        emit(g, "\n");
        add_value(g, name, &s);
    }
    if (classifier || pick(g, 2)) emit(g, "input y: i32[B]\n");
    if (pick(g, 4) == 3) {   /* token ids, below every vocab= written (8) and every label count */
        GVal s = { .rank = 2, .batch = true, .ids = true, .d = { 1, size(g, 6) } };
        emit(g, "input ids: ");
        type(g, "i32", &s);
        emit(g, "\n");
        add_value(g, "ids", &s);
    }
}

static void params(Gen *g)
{
    static const char *const inits[] = { "glorot_uniform()", "zeros()", "ones()", "he_normal()", "constant(0.1)",
                                         "uniform(low=-0.1, high=0.1)", "normal(mean=0, stddev=0.05)", "0.5" };
    static const char *const bad[] = { "uniform(low=1, high=0)", "relu(x0)", "\"zeros\"", "normal(stddev=-1)" };
    int n = (int)pick(g, 3);
    for (int i = 0; i < n; i++) {
        GVal s = { .rank = 1 + (int)pick(g, 2), .param = true };
        /* the first one fits x0 flattened, for a matmul */
        s.d[0] = i == 0 && s.rank == 2 && !rare(g, 4) ? features(&g->v[0]) : size(g, 6);
        for (int k = 1; k < s.rank; k++) s.d[k] = size(g, 6);
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        emit(g, "param %s: ", name);
        type(g, "f32", &s);
        emit(g, " = %s\n", rare(g, 8) ? bad[pick(g, 4)] : inits[pick(g, sizeof inits / sizeof *inits)]);
        add_value(g, name, &s);
    }
}

static void end_statement(Gen *g)
{
    switch (pick(g, 8)) {
    case 6: emit(g, "; "); break;
    case 7: emit(g, "  # a comment\n\n"); break;
    default: emit(g, "\n"); break;
    }
}

static void body(Gen *g)
{
    int n = 1 + (int)pick(g, 6);
    for (int i = 0; i < n; i++) {
        char name[16];
        bool rebind = g->hidden > 0 && pick(g, 6) == 5;
        snprintf(name, sizeof name, "h%d", rebind ? g->hidden - 1 : g->hidden++);
        GVal s;
        const GVal *last = &g->v[g->nv - 1];
        if (!rebind && pick(g, 8) == 7 && last->rank >= 2 && last->d[last->rank - 1] % 2 == 0 && g->nv + 2 < MAXV) {
            /* a, b = split(x, 2, axis=-1): two values */
            char other[16];
            snprintf(other, sizeof other, "h%d", g->hidden++);
            s = *last;
            s.param = s.ids = false;
            s.d[s.rank - 1] /= 2;
            emit(g, "%s, %s = split(%s, 2, axis=-1)", name, other, last->name);
            end_statement(g);
            add_value(g, name, &s);
            add_value(g, other, &s);
            continue;
        }
        emit(g, "%s = ", name);
        if (rare(g, 20)) deep(g, &s);
        else expr(g, 1 + (int)pick(g, 4), &s);
        end_statement(g);
        if (!rebind) add_value(g, name, &s);
        else for (int k = 0; k < g->nv; k++)
            if (!strcmp(g->v[k].name, name)) { s.param = false; memcpy(g->v[k].d, s.d, sizeof s.d); g->v[k].rank = s.rank; g->v[k].batch = s.batch; }
    }
}

/* ", " before every setting of a call but the first */
static void setting(Gen *g, bool *first, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void setting(Gen *g, bool *first, const char *fmt, ...)
{
    char b[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    emit(g, "%s%s", *first ? "" : ", ", b);
    *first = false;
}

/* An optimizer with some of its settings; its lr unless *lr_set (then set). */
static void optimizer(Gen *g, bool *lr_set)
{
    static const char *const names[] = { "sgd", "adam", "adamw", "rmsprop" };
    unsigned o = pick(g, 4);
    bool first = true;
    emit(g, "%s(", names[o]);
    if ((!*lr_set || rare(g, 8)) && pick(g, 4)) {
        setting(g, &first, "lr=0.0%u", 1 + pick(g, 9));
        *lr_set = true;
    }
    if (o == 0) {
        unsigned m = pick(g, 3);
        if (m) setting(g, &first, "momentum=0.%u", m == 1 ? 0 : 1 + pick(g, 9));
        if (m == 2 && pick(g, 2)) setting(g, &first, "nesterov=true");
        if (rare(g, 4)) setting(g, &first, "nesterov=true");   /* twice, or without momentum */
    } else if (o < 3) {
        if (pick(g, 2)) setting(g, &first, "beta1=0.%u, beta2=0.99%u", 5 + pick(g, 5), pick(g, 10));
        if (pick(g, 2)) setting(g, &first, "eps=1e-%u", 1 + pick(g, 9));
    } else {
        if (pick(g, 2)) setting(g, &first, "rho=0.9%u", pick(g, 10));
        if (pick(g, 2)) setting(g, &first, "momentum=0.%u", pick(g, 10));
        if (pick(g, 2)) setting(g, &first, "centered=true");
    }
    if (pick(g, 3) == 2) setting(g, &first, "weight_decay=0.0%u", pick(g, 10));
    emit(g, ")");
}

/* The train block's lr: a number or a schedule. */
static void lr_value(Gen *g)
{
    switch (pick(g, 3)) {
    case 0: emit(g, "0.0%u", 1 + pick(g, 9)); break;
    case 1: emit(g, "step_decay(0.0%u, every=%u, factor=0.%u)", 1 + pick(g, 9), 1 + pick(g, 4), 1 + pick(g, 9)); break;
    default: emit(g, "cosine(0.0%u, steps=%u, min=0)", 1 + pick(g, 9), 1 + pick(g, 8)); break;
    }
}

/* The train block: every setting of graph/lower.c's list, each maybe, in any order. */
static void train_block(Gen *g, const char *loss)
{
    const char *const *keys = lower_train_keys();
    int nk = 0;
    bool lr_set = false;   /* by the optimizer or the block */
    while (keys[nk]) nk++;
    emit(g, "train {\n");
    int start = (int)pick(g, (unsigned)nk);
    for (int j = 0; j < nk; j++) {
        const char *k = keys[(start + j) % nk];
        bool needed = !strcmp(k, "data") || !strcmp(k, "minimize");
        if (!needed && !pick(g, 2)) continue;
        if (needed && rare(g, 16)) continue;   /* a missing setting */
        if (!strcmp(k, "lr")) {   /* the optimizer's, or the block's: twice is an error */
            if (lr_set && !rare(g, 8)) continue;
            lr_set = true;
        }
        emit(g, "  %s = ", k);
        if (!strcmp(k, "data")) {
            switch (pick(g, 5)) {
            case 3: emit(g, "mnist(\"data/mnist\")"); break;
            case 4: emit(g, "%s", rare(g, 2) ? "mnist(\"no/such/folder\")" : "synthetic()"); break;
            default: emit(g, "synthetic(count=%" PRId64 ")", 8 + 8 * (int64_t)pick(g, 8)); break;
            }
        } else if (!strcmp(k, "optimizer")) {
            optimizer(g, &lr_set);
        } else if (!strcmp(k, "lr")) {
            lr_value(g);
        } else if (!strcmp(k, "warmup")) {
            emit(g, "%u", pick(g, 20));
        } else if (!strcmp(k, "clip_norm")) {
            emit(g, "%u.%u", pick(g, 3), 1 + pick(g, 9));
        } else if (!strcmp(k, "batch")) emit(g, "%" PRId64, size(g, 8));
        else if (!strcmp(k, "epochs") || !strcmp(k, "steps")) emit(g, "%" PRId64, size(g, 2));
        else if (!strcmp(k, "seed")) emit(g, "%u", pick(g, 1000));
        else if (!strcmp(k, "minimize")) emit(g, "%s", rare(g, 8) ? "h0" : loss);
        else if (!strcmp(k, "checkpoint")) emit(g, "\"ckpt/model.ckpt\"");
        else if (!strcmp(k, "shuffle")) emit(g, "%s", pick(g, 2) ? "false" : "true");
        else keyword_value(g, k);   /* a setting added to the list since */
        emit(g, "\n");
        if (rare(g, 24)) emit(g, "  %s = 1\n", pick(g, 2) ? k : "learning_rate");   /* twice, or unknown */
    }
    emit(g, "}\n");
}

char *modelgen(const uint8_t *bytes, size_t n, size_t *len)
{
    Gen g = { .p = bytes, .n = n };
    g.wild = pick(&g, 2) == 1;
    emit(&g, "# modelgen: %s\n", g.wild ? "wild" : "tame");
    if (pick(&g, 8) == 7) emit(&g, "model m%u\n", pick(&g, 100));
    bool classifier = pick(&g, 4) != 3;
    inputs(&g, classifier);
    params(&g);
    body(&g);
    const GVal *last = &g.v[g.nv - 1];
    if (!last->batch && !g.wild) {   /* the batch merged into an axis: back to [B, ...] */
        GVal s = { .rank = 2, .d = { 1, features(last) }, .batch = true };
        char name[16];
        snprintf(name, sizeof name, "h%d", g.hidden++);
        emit(&g, "%s = reshape(%s, B, -1)\n", name, last->name);
        add_value(&g, name, &s);
        last = &g.v[g.nv - 1];
    }
    if (classifier) {
        emit(&g, "logits = dense(flatten(%s), units=%" PRId64 ")\n", last->name, size(&g, 5));
        emit(&g, "loss = cross_entropy(logits, y)\n");
        if (pick(&g, 2)) emit(&g, "output probs = softmax(logits)\n");
    } else {
        /* a target of the last value's shape, declared here (an input may come late) */
        emit(&g, "input t: ");
        type(&g, "f32", last);
        emit(&g, "\nloss = mse(%s, t)\n", last->name);
    }
    int nout = (int)pick(&g, 3), first = (int)pick(&g, (unsigned)g.nv);
    for (int i = 0; i < nout; i++)   /* the same twice, in a wild model */
        emit(&g, "output %s\n", g.v[(first + (rare(&g, 4) ? 0 : i)) % g.nv].name);
    if (nout == 0 && !classifier) emit(&g, "output %s\n", last->name);
    if (!rare(&g, 8)) train_block(&g, "loss");
    if (g.oom || !g.out) {
        free(g.out);
        return NULL;
    }
    *len = g.len;
    return g.out;
}

/* ---- mutations -------------------------------------------------------------------------- */

static size_t line_start(const Gen *g, size_t at)
{
    while (at > 0 && g->out[at - 1] != '\n') at--;
    return at;
}

static size_t line_end(const Gen *g, size_t at)
{
    while (at < g->len && g->out[at] != '\n') at++;
    return at < g->len ? at + 1 : at;
}

static const char *token(Gen *g)
{
    static const char *const fixed[] = {
        "(", ")", "[", "]", "{", "}", ",", "=", ":", ";", "\n", "-", "+", "*", "/", "\"", "#",
        "input ", "output ", "param ", "train ", "model ", "B", "N", "-1", "0", "2147483648", "1099511627777",
        "9223372036854775807", "1e39", "x0", "h0", "y", "loss", "f32[", "i32[B]", "true", "=(",
    };
    const char *const *names;
    int nb = lower_builtin_names(&names);
    const char *const *keys = lower_train_keys();
    int nk = 0;
    while (keys[nk]) nk++;
    unsigned nf = sizeof fixed / sizeof *fixed, k = pick(g, nf + (unsigned)nb + (unsigned)nk);
    return k < nf ? fixed[k] : k < nf + (unsigned)nb ? names[k - nf] : keys[k - nf - (unsigned)nb];
}

char *modelgen_mutate(const char *text, size_t len, const uint8_t *bytes, size_t n, size_t *outlen)
{
    static const char *const edges[] = { "0", "-1", "1", "65537", "2147483648", "1099511627777", "9223372036854775807" };
    Gen g = { .p = bytes, .n = n };
    splice(&g, 0, 0, text, len);
    int edits = 1 + (int)pick(&g, 4);
    for (int e = 0; e < edits && !g.oom; e++) {
        size_t at = pick_at(&g, g.len);
        switch (pick(&g, 7)) {
        case 0: { const char *t = token(&g); splice(&g, at, 0, t, strlen(t)); break; }
        case 1: splice(&g, at, 1 + pick(&g, 8), "", 0); break;
        case 2: {   /* a number at an edge in place of the digits here */
            size_t s = at, t = at;
            while (t < g.len && g.out[t] >= '0' && g.out[t] <= '9') t++;
            const char *x = edges[pick(&g, sizeof edges / sizeof *edges)];
            splice(&g, s, t - s, x, strlen(x));
            break;
        }
        case 3: {   /* duplicate a line */
            size_t s = line_start(&g, at), t = line_end(&g, at);
            char *l = malloc(t - s + 1);
            if (!l) { g.oom = true; break; }
            memcpy(l, g.out + s, t - s);
            splice(&g, t, 0, l, t - s);
            free(l);
            break;
        }
        case 4: {   /* swap a line with the next */
            size_t s = line_start(&g, at), m = line_end(&g, at), t = line_end(&g, m);
            if (m == s || t == m) break;
            char *l = malloc(m - s + 1);
            if (!l) { g.oom = true; break; }
            memcpy(l, g.out + s, m - s);
            splice(&g, s, m - s, "", 0);
            splice(&g, s + (t - m), 0, l, m - s);
            free(l);
            break;
        }
        case 5: g.len = at; if (g.out) g.out[at] = 0; break;   /* cut off */
        default: { char c = (char)pick(&g, 256); splice(&g, at, 1, &c, 1); break; }
        }
    }
    if (g.oom || !g.out) {
        free(g.out);
        return NULL;
    }
    *outlen = g.len;
    return g.out;
}
