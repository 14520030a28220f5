/* graphc import: the imported graph as a readable .net file.
 *
 * A matmul by a weight plus a bias add plus an activation is written as a dense layer,
 * a convolution by a square filter the same way as a conv2d layer (their params then
 * take Keras' names: dense, dense_1, conv2d...); other weights are explicit params.
 * A value read once is written inside its reader unless it holds a layer, a pool, a
 * matmul or a concat (one of those per line, as by hand) or nests too deep; the others are
 * statements, named h, h1, ... (a name is reused once its value is read no more, as a
 * hand-written model rebinds h), "logits" before a softmax output. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onnx/imp.h"
#include "graph/lower.h"

enum { MAX_INLINE_DEPTH = 6 };

typedef struct Buf {
    char *p;
    size_t len, cap;
    bool oom;
} Buf;

static void put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->oom) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *p = gc_realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

typedef enum LayerKind { LK_DENSE, LK_CONV, LK_COUNT } LayerKind;

typedef struct Layer {
    LayerKind kind;
    int32_t op, bias, act, head;   /* the matmul or conv; its bias add and activation (or -1); the last */
    int32_t kernel, bias_param;    /* param nodes */
    const char *name;
} Layer;

typedef struct Em {
    Graph *g;
    DiagSink *d;
    Arena ar;                /* names */
    bool oom;
    bool *need;
    int *uses;               /* reads by needed nodes and by outputs */
    int *layer;              /* the layer a node belongs to, or -1 */
    Layer *layers;
    int nlayers;
    bool *inlined;           /* written inside its one reader */
    bool *no_inline;
    int *depth;              /* nesting of its expression */
    bool *heavy;             /* its expression holds a layer, pool, matmul or concat */
    const char **name;       /* the name its value is bound to */
    const char **taken;      /* every name in the file, for unique ones */
    int ntaken, taken_cap;
    int *left;               /* reads left of a statement's value, while writing */
} Em;

static const OnnxOp *om(const Em *e, int32_t id) { return onnx_op_of(e->g->nodes[id].op); }
static bool is_kind(const Em *e, int32_t id, OmKind k) { return om(e, id) && om(e, id)->kind == k; }
static bool is_net(const Em *e, int32_t id, const char *net) { return om(e, id) && om(e, id)->net && strcmp(om(e, id)->net, net) == 0; }
static bool is_add(const Em *e, int32_t id) { return om(e, id) && om(e, id)->onnx && strcmp(om(e, id)->onnx, "Add") == 0; }
static bool source(const Em *e, int32_t id)
{
    return is_kind(e, id, OM_INPUT) || is_kind(e, id, OM_PARAM) || is_kind(e, id, OM_CONST);
}

/* ---- names -------------------------------------------------------------------------- */

static bool is_taken(const Em *e, const char *s)
{
    for (int i = 0; i < e->ntaken; i++)
        if (strcmp(e->taken[i], s) == 0) return true;
    return false;
}

static const char *take(Em *e, const char *s)
{
    if (e->ntaken == e->taken_cap) {
        int cap = e->taken_cap ? 2 * e->taken_cap : 64;
        const char **t = gc_realloc(e->taken, (size_t)cap * sizeof *t);
        if (!t) { e->oom = true; return NULL; }
        e->taken = t;
        e->taken_cap = cap;
    }
    char *c = arena_strdup(&e->ar, s);
    if (!c) { e->oom = true; return NULL; }
    e->taken[e->ntaken++] = c;
    return c;
}

/* A .net name made from `raw` ([A-Za-z_][A-Za-z0-9_]*), unique in the file. */
static const char *unique(Em *e, const char *raw, const char *fallback)
{
    char base[96], buf[112];
    size_t n = 0;
    for (const char *p = raw; *p && n + 1 < sizeof base; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (n > 0 && c >= '0' && c <= '9');
        if (!ok && n > 0 && base[n - 1] == '_') continue;
        base[n++] = ok ? c : '_';
    }
    while (n > 1 && base[n - 1] == '_') n--;
    base[n] = 0;
    if (n == 0 || strcmp(base, "_") == 0) snprintf(base, sizeof base, "%s", fallback);
    snprintf(buf, sizeof buf, "%s", base);
    for (int k = 1; is_taken(e, buf); k++) snprintf(buf, sizeof buf, "%s_%d", base, k);
    return take(e, buf);
}

static void reserve(Em *e)
{
    static const char *const words[] = { "model", "input", "param", "output", "train", "true", "false", "f32", "i32" };
    const char *const *b;
    int nb = lower_builtin_names(&b);
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) take(e, words[i]);
    for (int i = 0; i < nb; i++) take(e, b[i]);
    for (int i = 0; i < e->g->nsyms; i++) take(e, e->g->syms[i]);
}

/* ---- layers ------------------------------------------------------------------------- */

/* The one needed reader of node id, if it has exactly one and is not an output. */
static int32_t sole_reader(const Em *e, int32_t id)
{
    if (e->uses[id] != 1) return -1;
    for (int j = id + 1; j < e->g->nnodes; j++)
        if (e->need[j])
            for (int k = 0; k < e->g->nodes[j].nin; k++)
                if (e->g->nodes[j].in[k] == id) return j;
    return -1;   /* an output */
}

static bool is_output(const Em *e, int32_t id)
{
    for (int i = 0; i < e->g->noutputs; i++)
        if (e->g->outputs[i].node == id) return true;
    return false;
}

/* A param read by node `reader` alone, as its input k. */
static bool own_weight(const Em *e, int32_t p, int32_t reader)
{
    return is_kind(e, p, OM_PARAM) && e->uses[p] == 1 && sole_reader(e, p) == reader;
}

static void find_layer(Em *e, int32_t id)
{
    const Node *n = &e->g->nodes[id];
    Layer L = { .op = id, .bias = -1, .act = -1, .head = id, .kernel = -1, .bias_param = -1 };
    if (is_kind(e, id, OM_MATMUL) && !om_matmul_ta(n) && !om_matmul_tb(n) && own_weight(e, n->in[1], id)) {
        L.kind = LK_DENSE;
    } else if (is_kind(e, id, OM_CONV) && own_weight(e, n->in[1], id) && om_win(n)->kh == om_win(n)->kw &&
               om_win(n)->sh == om_win(n)->sw) {
        L.kind = LK_CONV;
    } else {
        return;
    }
    L.kernel = n->in[1];
    int64_t units = e->g->nodes[L.kernel].shape.d[e->g->nodes[L.kernel].shape.rank - 1].v;
    int32_t r = sole_reader(e, id);
    if (r >= 0 && is_add(e, r) && e->g->nodes[r].in[0] == id && own_weight(e, e->g->nodes[r].in[1], r)) {
        const Shape *bs = &e->g->nodes[e->g->nodes[r].in[1]].shape;
        if (bs->rank == 1 && bs->d[0].v == units) {
            L.bias = L.head = r;
            L.bias_param = e->g->nodes[r].in[1];
        }
    }
    /* not softmax: a model's scores are kept apart, for a loss to read them */
    static const char *const acts[] = { "relu", "sigmoid", "tanh" };
    r = sole_reader(e, L.head);
    for (size_t a = 0; r >= 0 && a < sizeof acts / sizeof acts[0]; a++)
        if (is_net(e, r, acts[a]) && e->g->nodes[r].in[0] == L.head) L.act = L.head = r;
    e->layer[L.op] = e->layer[L.head] = e->layer[L.kernel] = e->nlayers;
    if (L.bias >= 0) e->layer[L.bias] = e->layer[L.bias_param] = e->nlayers;
    e->layers[e->nlayers++] = L;
}

/* ---- statements --------------------------------------------------------------------- */

static bool heavy_op(const Em *e, int32_t id)
{
    if (e->layer[id] >= 0) return true;
    OmKind k = om(e, id) ? om(e, id)->kind : OM_KIND_COUNT;
    return k == OM_MATMUL || k == OM_CONV || k == OM_POOL || k == OM_CONCAT;
}

/* The inputs an expression node shows: a layer's is its first op's input x. */
static int args_of(const Em *e, int32_t id, const int32_t **in)
{
    const Node *n = &e->g->nodes[id];
    if (e->layer[id] >= 0 && e->layers[e->layer[id]].head == id) {
        *in = e->g->nodes[e->layers[e->layer[id]].op].in;
        return 1;
    }
    *in = n->in;
    return n->nin;
}

/* A node is an expression of its own when it is needed and not inside a layer (a
 * layer's head stands for the layer). */
static bool expression(const Em *e, int32_t id)
{
    if (!e->need[id] || source(e, id)) return false;
    return e->layer[id] < 0 || e->layers[e->layer[id]].head == id;
}

static void decide_inlining(Em *e)
{
    for (int32_t r = 0; r < e->g->nnodes; r++) {
        if (!expression(e, r)) continue;
        const int32_t *in;
        int nin = args_of(e, r, &in);
        bool heavy = heavy_op(e, r);
        int depth = 1;
        for (int k = 0; k < nin; k++) {
            int32_t a = in[k];
            bool ok = expression(e, a) && e->uses[a] == 1 && !is_output(e, a) && !e->no_inline[a] && !e->heavy[a] &&
                      e->depth[a] < MAX_INLINE_DEPTH;
            /* a repeated input (x * x) is two reads: never inlined, since uses != 1 */
            if (ok) {
                e->inlined[a] = true;
                heavy = heavy || e->heavy[a];
                if (e->depth[a] + 1 > depth) depth = e->depth[a] + 1;
            }
        }
        e->heavy[r] = heavy;
        e->depth[r] = depth;
    }
}

/* ---- text --------------------------------------------------------------------------- */

static void number(Buf *b, float v, bool paren)
{
    char s[48];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, (double)v);
        if ((float)strtod(s, NULL) == v) break;
    }
    if (v == 0 && 1 / v < 0) snprintf(s, sizeof s, "-0");
    bool neg = s[0] == '-';
    /* a bare integer is a number too; "1e+10" is one as written */
    put(b, neg && paren ? "(%s)" : "%s", s);
}

static void dims(Em *e, Buf *b, const Shape *s, bool reshape)
{
    for (int i = 0; i < s->rank; i++) {
        Dim d = s->d[i];
        if (d.sym < 0) put(b, "%s%lld", i ? ", " : "", (long long)d.v);
        else if (d.v == 1) put(b, "%s%s", i ? ", " : "", e->g->syms[d.sym]);
        else put(b, "%s%s", i ? ", " : "", reshape ? "-1" : "?");
    }
}

enum { PREC_ADD = 1, PREC_MUL, PREC_NEG, PREC_ATOM };

static int prec_of(const Em *e, int32_t id)
{
    if ((!e->inlined[id] && !is_kind(e, id, OM_CONST)) || e->layer[id] >= 0) return PREC_ATOM;
    const OnnxOp *m = om(e, id);
    if (m && m->kind == OM_BINARY) return m->net[0] == '+' || m->net[0] == '-' ? PREC_ADD : PREC_MUL;
    if (m && m->kind == OM_UNARY && m->net[0] == '-') return PREC_NEG;
    return PREC_ATOM;
}

static void expr(Em *e, Buf *b, int32_t id);

/* An operand: in parentheses when it binds less tightly than its place needs. */
static void operand(Em *e, Buf *b, int32_t id, int need)
{
    bool paren = (e->inlined[id] || is_kind(e, id, OM_CONST)) && prec_of(e, id) < need;
    if (paren) put(b, "(");
    if (is_kind(e, id, OM_CONST)) number(b, om_const_value(&e->g->nodes[id]), need > PREC_ADD && !paren);
    else expr(e, b, id);
    if (paren) put(b, ")");
}

static bool is_flatten(const Shape *t, const Shape *x)
{
    if (t->rank != 2 || x->rank < 2 || !dim_eq(t->d[0], x->d[0]) || t->d[1].sym >= 0) return false;
    int64_t p = 1;
    for (int i = 1; i < x->rank; i++)
        if (x->d[i].sym >= 0 || !gc_mul_i64(p, x->d[i].v, &p)) return false;
    return p == t->d[1].v;
}

static void window(Buf *b, const WinAttr *w, bool pool)
{
    if (pool && w->sh != w->kh) put(b, ", stride=%d", w->sh);
    if (!pool && w->sh != 1) put(b, ", stride=%d", w->sh);
    if (w->padding == PAD_SAME) put(b, ", padding=\"same\"");
}

static void layer(Em *e, Buf *b, const Layer *L)
{
    const Node *op = &e->g->nodes[L->op];
    const Shape *ks = &e->g->nodes[L->kernel].shape;
    put(b, "%s(", L->kind == LK_DENSE ? "dense" : "conv2d");
    operand(e, b, op->in[0], PREC_ADD);
    if (L->kind == LK_DENSE) put(b, ", units=%lld", (long long)ks->d[1].v);
    else put(b, ", filters=%lld, kernel=%lld", (long long)ks->d[3].v, (long long)ks->d[0].v);
    if (L->kind == LK_CONV) window(b, om_win(op), false);
    if (L->bias < 0) put(b, ", use_bias=false");
    if (L->act >= 0) put(b, ", activation=\"%s\"", om(e, L->act)->net);
    put(b, ")");
}

static void expr(Em *e, Buf *b, int32_t id)
{
    const Node *n = &e->g->nodes[id];
    const OnnxOp *m = om(e, id);
    if (!e->inlined[id] && e->name[id]) { put(b, "%s", e->name[id]); return; }
    if (e->layer[id] >= 0) { layer(e, b, &e->layers[e->layer[id]]); return; }
    switch (m->kind) {
    case OM_CONST: number(b, om_const_value(n), false); return;
    case OM_BINARY: {
        int p = prec_of(e, id);
        operand(e, b, n->in[0], p);
        put(b, " %s ", m->net);
        operand(e, b, n->in[1], p + 1);   /* left-associative: a - (b - c) keeps its parentheses */
        return;
    }
    case OM_UNARY:
        if (m->net[0] == '-') { put(b, "-"); operand(e, b, n->in[0], PREC_NEG); return; }
        break;
    default: break;
    }
    const Shape *xs = n->nin ? &e->g->nodes[n->in[0]].shape : NULL;
    if (m->kind == OM_RESHAPE && is_flatten(&n->shape, xs)) { put(b, "flatten("); operand(e, b, n->in[0], PREC_ADD); put(b, ")"); return; }
    put(b, "%s(", m->net);
    for (int k = 0; k < n->nin; k++) {
        if (k) put(b, ", ");
        operand(e, b, n->in[k], PREC_ADD);
    }
    switch (m->kind) {
    case OM_CONV: window(b, om_win(n), false); break;
    case OM_POOL: put(b, ", size=%d", om_win(n)->kh); window(b, om_win(n), true); break;
    case OM_RESHAPE: put(b, ", "); dims(e, b, &n->shape, true); break;
    case OM_CONCAT: if (om_concat_axis(n) != n->shape.rank - 1) put(b, ", axis=%d", om_concat_axis(n)); break;
    default: break;
    }
    put(b, ")");
}

/* Counts down the reads of the statement values an expression mentions. */
static void consume(Em *e, int32_t id)
{
    if (is_kind(e, id, OM_CONST)) return;
    if (!e->inlined[id]) { e->left[id]--; return; }
    const int32_t *in;
    int nin = args_of(e, id, &in);
    for (int k = 0; k < nin; k++) consume(e, in[k]);
}

/* The first of h, h1, h2... that is no fixed name and not bound to a value still to be
 * read. */
static const char *temp_name(Em *e)
{
    char buf[32];
    for (int k = 0;; k++) {
        snprintf(buf, sizeof buf, k ? "h%d" : "h", k);
        bool busy = is_taken(e, buf);
        for (int32_t j = 0; j < e->g->nnodes && !busy; j++) busy = e->name[j] && e->left[j] > 0 && strcmp(e->name[j], buf) == 0;
        if (!busy) {
            char *s = arena_strdup(&e->ar, buf);
            if (!s) e->oom = true;
            return s;
        }
    }
}

/* Counts (up) the reads of the statement values an expression mentions. */
static void count_reads(Em *e, int32_t id)
{
    if (is_kind(e, id, OM_CONST)) return;
    if (!e->inlined[id]) { e->left[id]++; return; }
    const int32_t *in;
    int nin = args_of(e, id, &in);
    for (int k = 0; k < nin; k++) count_reads(e, in[k]);
}

static void statement_args(Em *e, int32_t id, void (*visit)(Em *, int32_t))
{
    const int32_t *in;
    int nin = args_of(e, id, &in);
    for (int k = 0; k < nin; k++) visit(e, in[k]);
}

/* Names fixed before any statement: inputs, params, outputs, and "logits". */
static void fixed_names(Em *e)
{
    Graph *g = e->g;
    for (int i = 0; i < g->ninputs; i++)
        if (e->need[g->inputs[i]]) e->name[g->inputs[i]] = unique(e, g->nodes[g->inputs[i]].name, "x");
    for (int i = 0; i < g->noutputs; i++) {
        int32_t id = g->outputs[i].node;
        const char *nm = unique(e, g->outputs[i].name, "y");
        g->outputs[i].name = nm = nm ? arena_strdup(&g->arena, nm) : NULL;   /* outlives e's arena */
        if (expression(e, id) && !e->name[id]) e->name[id] = nm;
    }
    for (int32_t id = 0; id < g->nnodes; id++) {
        if (!e->need[id] || !is_kind(e, id, OM_PARAM) || e->layer[id] >= 0) continue;
        Var *v = &g->vars[om_param_var(&g->nodes[id])];
        const char *nm = unique(e, v->name, "w");
        v->name = e->name[id] = nm ? arena_strdup(&g->arena, nm) : NULL;   /* outlives e's arena */
        if (!v->name) e->oom = true;
    }
    /* the scores a softmax output is made of, for a loss to read when fine-tuning */
    for (int i = 0; i < g->noutputs; i++) {
        int32_t o = g->outputs[i].node;
        int32_t x = g->nodes[o].nin ? g->nodes[o].in[0] : -1;
        if ((is_net(e, o, "softmax") || is_net(e, o, "log_softmax")) && e->layer[o] < 0 && expression(e, x) && !e->name[x] &&
            g->nodes[x].shape.rank == 2 && !is_taken(e, "logits")) {
            e->name[x] = take(e, "logits");
            e->no_inline[x] = true;
        }
    }
}

static void write_inputs_params(Em *e, Buf *b)
{
    Graph *g = e->g;
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        if (!e->need[g->inputs[i]]) continue;
        put(b, "input %s: %s[", e->name[g->inputs[i]], dtype_name(n->dtype));
        dims(e, b, &n->shape, false);
        put(b, "]\n");
    }
    bool first = true;
    for (int32_t id = 0; id < g->nnodes; id++) {
        if (!e->need[id] || !is_kind(e, id, OM_PARAM) || e->layer[id] >= 0) continue;
        const Var *v = &g->vars[om_param_var(&g->nodes[id])];
        if (first) put(b, "\n");
        first = false;
        put(b, "param %s: f32[", v->name);
        dims(e, b, &v->shape, false);
        put(b, "] = %s\n", v->shape.rank >= 2 ? "glorot_uniform()" : "zeros()");
    }
}

/* Keras' names, in the order the layers appear (one per statement at most, so the
 * order in which lowering names them). */
static void name_layers(Em *e, int32_t head, int count[LK_COUNT])
{
    if (e->layer[head] < 0 || e->layers[e->layer[head]].head != head) return;
    Layer *L = &e->layers[e->layer[head]];
    static const char *const base[LK_COUNT] = { "dense", "conv2d" };
    char nm[64], full[96];
    int k = count[L->kind]++;
    if (k) snprintf(nm, sizeof nm, "%s_%d", base[L->kind], k);
    else snprintf(nm, sizeof nm, "%s", base[L->kind]);
    Graph *g = e->g;
    snprintf(full, sizeof full, "%s/kernel", nm);
    g->vars[om_param_var(&g->nodes[L->kernel])].name = arena_strdup(&g->arena, full);
    if (L->bias_param >= 0) {
        snprintf(full, sizeof full, "%s/bias", nm);
        g->vars[om_param_var(&g->nodes[L->bias_param])].name = arena_strdup(&g->arena, full);
    }
}

/* The layers of one statement, in the order lowering meets them (arguments first). */
static void layer_names_in(Em *e, int32_t id, int count[LK_COUNT])
{
    const int32_t *in;
    int nin = args_of(e, id, &in);
    for (int k = 0; k < nin; k++)
        if (expression(e, in[k]) && e->inlined[in[k]]) layer_names_in(e, in[k], count);
    name_layers(e, id, count);
}

static void write_statements(Em *e, Buf *b)
{
    Graph *g = e->g;
    int count[LK_COUNT] = { 0 };
    for (int32_t id = 0; id < g->nnodes; id++)
        if (expression(e, id) && !e->inlined[id]) statement_args(e, id, count_reads);
    for (int i = 0; i < g->noutputs; i++) e->left[g->outputs[i].node]++;   /* an output's name is read by its output line */
    put(b, "\n");
    for (int32_t id = 0; id < g->nnodes; id++) {
        if (!expression(e, id) || e->inlined[id]) continue;
        statement_args(e, id, consume);
        layer_names_in(e, id, count);
        bool out = is_output(e, id) && e->name[id];
        if (!e->name[id]) e->name[id] = temp_name(e);
        if (e->oom) return;
        put(b, "%s%s = ", out ? "output " : "", e->name[id]);
        e->inlined[id] = true;   /* written out here, not by name */
        expr(e, b, id);
        e->inlined[id] = false;
        put(b, "\n");
    }
    /* outputs that are inputs or params, and second names of one value */
    for (int i = 0; i < g->noutputs; i++) {
        int32_t id = g->outputs[i].node;
        if (e->name[id] != g->outputs[i].name) put(b, "output %s = %s\n", g->outputs[i].name, e->name[id]);
    }
}

char *imp_emit(Graph *g, const char *header, DiagSink *d)
{
    Em e = { .g = g, .d = d };
    arena_init(&e.ar);
    size_t nn = (size_t)(g->nnodes ? g->nnodes : 1);
    e.need = gc_calloc(nn, sizeof *e.need);
    e.uses = gc_calloc(nn, sizeof *e.uses);
    e.layer = gc_malloc(nn * sizeof *e.layer);
    e.layers = gc_calloc(nn, sizeof *e.layers);
    e.inlined = gc_calloc(nn, sizeof *e.inlined);
    e.no_inline = gc_calloc(nn, sizeof *e.no_inline);
    e.depth = gc_calloc(nn, sizeof *e.depth);
    e.heavy = gc_calloc(nn, sizeof *e.heavy);
    e.name = gc_calloc(nn, sizeof *e.name);
    e.left = gc_calloc(nn, sizeof *e.left);
    Buf b = { 0 };
    char *text = NULL;
    if (!e.need || !e.uses || !e.layer || !e.layers || !e.inlined || !e.no_inline || !e.depth || !e.heavy || !e.name || !e.left)
        goto oom;
    for (int i = 0; i < g->noutputs; i++) {
        e.need[g->outputs[i].node] = true;
        e.uses[g->outputs[i].node]++;
    }
    for (int32_t i = g->nnodes - 1; i >= 0; i--) {
        e.layer[i] = -1;
        if (!e.need[i]) continue;
        for (int k = 0; k < g->nodes[i].nin; k++) {
            e.need[g->nodes[i].in[k]] = true;
            e.uses[g->nodes[i].in[k]]++;
        }
    }
    for (int32_t i = 0; i < g->nnodes; i++)
        if (e.need[i] && e.layer[i] < 0) find_layer(&e, i);
    reserve(&e);
    fixed_names(&e);
    decide_inlining(&e);
    put(&b, "%s\n", header);
    if (g->model_name) put(&b, "model %s\n\n", g->model_name);
    write_inputs_params(&e, &b);
    write_statements(&e, &b);
    if (e.oom || b.oom) goto oom;
    text = b.p;
    b.p = NULL;
    goto out;
oom:
    diag_plain(d, "out of memory");
out:
    gc_free(b.p);
    gc_free(e.need);
    gc_free(e.uses);
    gc_free(e.layer);
    gc_free(e.layers);
    gc_free(e.inlined);
    gc_free(e.no_inline);
    gc_free(e.depth);
    gc_free(e.heavy);
    gc_free(e.name);
    gc_free(e.left);
    gc_free(e.taken);
    arena_free(&e.ar);
    return text;
}
