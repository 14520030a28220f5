#include "graph/graph.h"
#include <string.h>

static const char *dtype_names[DT_COUNT] = { "f32", "i32" };
const char *dtype_name(DType t) { return (unsigned)t < DT_COUNT ? dtype_names[t] : "?"; }

static const char *init_names[INIT_COUNT] = {
    "zeros", "ones", "constant", "uniform", "normal", "glorot_uniform", "he_normal",
};
const char *init_name(InitKind k) { return (unsigned)k < INIT_COUNT ? init_names[k] : "?"; }

Graph *graph_new(const Source *src)
{
    Graph *g = gc_calloc(1, sizeof *g);
    if (!g) return NULL;
    arena_init(&g->arena);
    g->src = src;
    g->label_input = -1;
    g->logits = -1;
    g->train.minimize = -1;
    g->stage = "graph";
    for (int i = 0; i < MAX_SYMS; i++) g->sym_value[i] = -1;
    return g;
}

void graph_free(Graph *g)
{
    if (!g) return;
    arena_free(&g->arena);
    gc_free(g);
}

/* Arrays in the arena grow by doubling into a fresh block (the old one is abandoned
 * until the arena is freed): simple, and total waste is bounded by the final size. */
static void *grow(Graph *g, void *arr, int n, int *cap, size_t elem)
{
    if (n < *cap) return arr;
    int nc = *cap ? *cap * 2 : 32;
    void *na = arena_alloc(&g->arena, (size_t)nc * elem);
    if (!na) return NULL;
    if (n) memcpy(na, arr, (size_t)n * elem);
    *cap = nc;
    return na;
}

int32_t graph_add(Graph *g, OpKind op, const int32_t *in, int nin, Loc loc)
{
    Node *nodes = grow(g, g->nodes, g->nnodes, &g->node_cap, sizeof(Node));
    if (!nodes) return -1;
    g->nodes = nodes;
    Node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->loc = loc;
    n->fwd = -1;
    n->nin = nin;
    if (nin) {
        n->in = arena_alloc(&g->arena, (size_t)nin * sizeof(int32_t));
        if (!n->in) return -1;
        memcpy(n->in, in, (size_t)nin * sizeof(int32_t));
    }
    return g->nnodes++;
}

int32_t graph_const(Graph *g, float v, Loc loc)
{
    int32_t id = graph_add(g, OP_CONST, NULL, 0, loc);
    if (id >= 0) g->nodes[id].a.cnst.value = v;
    return id;
}

int graph_add_var(Graph *g, const char *name, Shape shape, InitKind init, Loc loc)
{
    Var *vars = grow(g, g->vars, g->nvars, &g->var_cap, sizeof(Var));
    if (!vars) return -1;
    g->vars = vars;
    Var *v = &g->vars[g->nvars];
    memset(v, 0, sizeof *v);
    v->name = arena_strdup(&g->arena, name);
    v->shape = shape;
    v->init = init;
    v->loc = loc;
    v->of = -1;
    return v->name ? g->nvars++ : -1;
}

int graph_state_vars(const Graph *g, int var, int st[OPTIM_MAX_STATE])
{
    int ns = 0;
    for (int k = 0; k < OPTIM_MAX_STATE; k++) st[k] = -1;
    for (int v = 0; v < g->nvars && ns < OPTIM_MAX_STATE; v++)
        if (g->vars[v].role == VAR_STATE && g->vars[v].of == var) st[ns++] = v;
    return ns;
}

int graph_add_output(Graph *g, const char *name, int32_t node)
{
    NamedNode *o = grow(g, g->outputs, g->noutputs, &g->output_cap, sizeof(NamedNode));
    if (!o) return -1;
    g->outputs = o;
    o[g->noutputs].name = arena_strdup(&g->arena, name);
    o[g->noutputs].node = node;
    return g->noutputs++;
}

int graph_batch_sym(const Graph *g)
{
    for (int i = 0; i < g->ninputs; i++) {
        const Shape *s = &g->nodes[g->inputs[i]].shape;
        if (s->rank > 0 && s->d[0].sym >= 0 && s->d[0].v == 1) return s->d[0].sym;
    }
    return -1;
}

bool graph_has_updates(const Graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (op_has(g->nodes[i].op, OPT_UPDATE)) return true;
    return false;
}

int graph_sym(Graph *g, const char *name)
{
    for (int i = 0; i < g->nsyms; i++)
        if (strcmp(g->syms[i], name) == 0) return i;
    if (g->nsyms == MAX_SYMS) return -1;
    g->syms[g->nsyms] = arena_strdup(&g->arena, name);
    if (!g->syms[g->nsyms]) return -1;   /* out of memory */
    return g->nsyms++;
}

Graph *graph_clone(const Graph *g)
{
    Graph *c = graph_new(g->src);
    if (!c) return NULL;
    Arena *A = &c->arena;
    c->model_name = g->model_name ? arena_strdup(A, g->model_name) : NULL;
    c->stage = g->stage;
    c->nnodes = c->node_cap = g->nnodes;
    c->nodes = arena_alloc(A, (size_t)(g->nnodes ? g->nnodes : 1) * sizeof(Node));
    c->nvars = c->var_cap = g->nvars;
    c->vars = arena_alloc(A, (size_t)(g->nvars ? g->nvars : 1) * sizeof(Var));
    c->noutputs = c->output_cap = g->noutputs;
    c->outputs = arena_alloc(A, (size_t)(g->noutputs ? g->noutputs : 1) * sizeof(NamedNode));
    c->ninputs = g->ninputs;
    c->inputs = arena_alloc(A, (size_t)(g->ninputs ? g->ninputs : 1) * sizeof(int32_t));
    if (!c->nodes || !c->vars || !c->outputs || !c->inputs) { graph_free(c); return NULL; }
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = &c->nodes[i];
        *n = g->nodes[i];
        if (n->nin) {
            n->in = arena_alloc(A, (size_t)n->nin * sizeof(int32_t));
            if (!n->in) { graph_free(c); return NULL; }
            memcpy(n->in, g->nodes[i].in, (size_t)n->nin * sizeof(int32_t));
        }
        if (n->name) n->name = arena_strdup(A, n->name);
        if (n->op == OP_FUSED_ELEMWISE && n->a.ew.nstep > 0) {   /* the program lives in the arena too */
            EwStep *st = arena_alloc(A, (size_t)n->a.ew.nstep * sizeof *st);
            if (!st) { graph_free(c); return NULL; }
            memcpy(st, g->nodes[i].a.ew.step, (size_t)n->a.ew.nstep * sizeof *st);
            n->a.ew.step = st;
        }
    }
    for (int i = 0; i < g->nvars; i++) {
        c->vars[i] = g->vars[i];
        c->vars[i].name = arena_strdup(A, g->vars[i].name);
    }
    for (int i = 0; i < g->noutputs; i++) {
        c->outputs[i].node = g->outputs[i].node;
        c->outputs[i].name = arena_strdup(A, g->outputs[i].name);
    }
    if (g->ninputs) memcpy(c->inputs, g->inputs, (size_t)g->ninputs * sizeof(int32_t));
    c->nsyms = g->nsyms;
    for (int i = 0; i < g->nsyms; i++) {
        c->syms[i] = arena_strdup(A, g->syms[i]);
        c->sym_value[i] = g->sym_value[i];
    }
    c->train = g->train;
    if (g->train.data_path) c->train.data_path = arena_strdup(A, g->train.data_path);
    if (g->train.checkpoint) c->train.checkpoint = arena_strdup(A, g->train.checkpoint);
    c->label_input = g->label_input;
    c->logits = g->logits;
    if (A->failed) { graph_free(c); return NULL; }
    return c;
}

/* ---- shapes ---------------------------------------------------------------------- */

Shape shape_make(int rank, const int64_t *dims)
{
    Shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    for (int i = 0; i < rank; i++) { s.d[i].v = dims[i]; s.d[i].sym = -1; }
    return s;
}

bool node_axes(const Node *n, int rank, int *first, int *count)
{
    int k = n->a.axes.n > 0 ? n->a.axes.n : 1, after = n->a.axes.after;
    *count = k;
    *first = rank - after - k;
    return after >= 0 && *first >= 0;
}

bool dim_eq(Dim a, Dim b) { return a.v == b.v && a.sym == b.sym; }

bool shape_eq(const Shape *a, const Shape *b)
{
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (!dim_eq(a->d[i], b->d[i])) return false;
    return true;
}

bool shape_concrete(const Shape *s)
{
    for (int i = 0; i < s->rank; i++)
        if (s->d[i].sym >= 0) return false;
    return true;
}

int64_t shape_numel(const Shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        if (s->d[i].sym >= 0 || !gc_mul_i64(n, s->d[i].v, &n)) return -1;
    return n;
}

/* Elements of s, with bound symbols at their value and unbound ones at 1 (so per
 * example); -1 when that overflows or a dimension is below 0. */
static int64_t shape_numel_bound(const Graph *g, const Shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        int64_t v = s->d[i].v, b = s->d[i].sym >= 0 ? g->sym_value[s->d[i].sym] : 1;
        if (v < 0 || !gc_mul_i64(n, v, &n) || !gc_mul_i64(n, b > 0 ? b : 1, &n)) return -1;
    }
    return n;
}

const char *bytes_str(double bytes, char *buf, size_t n)
{
    static const char *const units[] = { "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB" };
    if (bytes < 1000 || bytes >= 999.95e24) {   /* bytes, or past yottabytes: 3.4e+38 bytes */
        snprintf(buf, n, bytes < 1000 ? "%.0f bytes" : "%.2g bytes", bytes);
        return buf;
    }
    int u = -1;
    while (bytes >= 999.95) {
        bytes /= 1000;
        u++;
    }
    snprintf(buf, n, "%.1f %s", bytes, units[u]);
    return buf;
}

bool graph_size_ok(const Graph *g, const Shape *s, DType dt, const char *what, Loc loc, DiagSink *d)
{
    int64_t n = shape_numel_bound(g, s);
    bool neg = false, sym = false;
    double elems = 1;
    for (int i = 0; i < s->rank; i++) {
        neg |= s->d[i].v < 0;
        sym |= s->d[i].sym >= 0 && g->sym_value[s->d[i].sym] < 1;
        int64_t b = s->d[i].sym >= 0 ? g->sym_value[s->d[i].sym] : 1;
        elems *= (double)s->d[i].v * (double)(b > 0 ? b : 1);
    }
    /* a dimension below 0 is a size that overflowed in binding: graph_bind says so */
    if (neg || (n >= 0 && n <= GRAPH_MAX_ELEMENTS)) return true;
    if (d) {
        char b1[160], b2[32], b3[32];
        diag_error(d, loc, "%s %s%s would need %s%s; a tensor holds at most 2^40 elements (%s)", what, dtype_name(dt),
                   shape_str(g, s, b1, sizeof b1), bytes_str(elems * 4, b2, sizeof b2), sym ? " per example" : "",
                   bytes_str((double)GRAPH_MAX_ELEMENTS * 4, b3, sizeof b3));
    }
    return false;
}

bool graph_node_size_ok(const Graph *g, const Node *n, DiagSink *d)
{
    int64_t k = shape_numel_bound(g, &n->shape);
    if (k >= 0 && k <= GRAPH_MAX_ELEMENTS) return true;   /* the common case, without naming it */
    char what[300];
    if (n->op == OP_PARAM) snprintf(what, sizeof what, "%s", g->vars[n->a.param.var].name);
    else if (n->op == OP_INPUT && n->name) snprintf(what, sizeof what, "input '%s':", n->name);
    else snprintf(what, sizeof what, "%s: the result", op_name(n->op));
    return graph_size_ok(g, &n->shape, n->dtype, what, n->loc, d);
}

static size_t dim_len(const Graph *g, Dim d, char *buf, size_t n)
{
    int k;
    if (d.sym < 0 || d.v == 0) k = snprintf(buf, n, "%lld", (long long)d.v);
    else if (d.v == 1) k = snprintf(buf, n, "%s", g->syms[d.sym]);
    else k = snprintf(buf, n, "%lld*%s", (long long)d.v, g->syms[d.sym]);
    return k < 0 ? 0 : (size_t)k;
}

const char *dim_str(const Graph *g, Dim d, char *buf, size_t n)
{
    if (n) dim_len(g, d, buf, n);
    return buf;
}

const char *shape_str(const Graph *g, const Shape *s, char *buf, size_t n)
{
    size_t len = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    len += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < s->rank && len < n; i++) {
        if (i) len += (size_t)snprintf(buf + len, n - len, ", ");
        if (len < n) len += dim_len(g, s->d[i], buf + len, n - len);
    }
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

/* ---- analysis --------------------------------------------------------------------- */

int64_t graph_param_count(const Graph *g)
{
    int64_t total = 0;
    for (int i = 0; i < g->nvars; i++)   /* each at most 2^40: only a sum of millions could overflow */
        if (g->vars[i].role == VAR_PARAM && __builtin_add_overflow(total, shape_numel(&g->vars[i].shape), &total))
            return INT64_MAX;
    return total;
}

/* Size of a dim with every unbound symbol taken as 1 (so results are per example). */
static double dimv(const Graph *g, Dim d)
{
    if (d.sym < 0) return (double)d.v;
    int64_t b = g->sym_value[d.sym];
    return (double)d.v * (double)(b > 0 ? b : 1);
}

static double numel_d(const Graph *g, const Shape *s)
{
    double n = 1;
    for (int i = 0; i < s->rank; i++) n *= dimv(g, s->d[i]);
    return n;
}

/* FLOPs per element of an optimizer update of kind k (an optimizer's *_UPDATE) */
static double update_flops(OpKind k)
{
    switch (k) {
    case OP_SGD_UPDATE: return 2.0;
    case OP_MOMENTUM_UPDATE: return 4.0;
    case OP_RMSPROP_UPDATE: return 8.0;
    default: return 12.0;   /* Adam, AdamW */
    }
}

double node_flops(const Graph *g, const Node *n)
{
    const Shape *y = &n->shape;
    switch (n->op) {
    case OP_MATMUL: case OP_MATMUL_BIAS_ACT: {
        const Shape *a = &g->nodes[n->in[0]].shape;
        double k = dimv(g, a->d[n->a.matmul.ta ? 0 : 1]);
        return 2.0 * numel_d(g, y) * k;
    }
    case OP_CONV2D: case OP_CONV2D_BIAS_ACT: {
        const Shape *w = &g->nodes[n->in[1]].shape;
        return 2.0 * numel_d(g, y) * dimv(g, w->d[0]) * dimv(g, w->d[1]) * dimv(g, w->d[2]);
    }
    case OP_CONV2D_MAXPOOL: case OP_CONV2D_MAXPOOL_ARGMAX: {   /* the convolution's, as conv2d_bias_act: the pooling is a few compares */
        const Shape *x = &g->nodes[n->in[0]].shape, *w = &g->nodes[n->in[1]].shape;
        const WinAttr *a = &n->a.convpool.conv;
        double oh = (double)((x->d[1].v + a->pt + a->pb - a->kh) / a->sh + 1);
        double ow = (double)((x->d[2].v + a->pl + a->pr - a->kw) / a->sw + 1);
        return 2.0 * dimv(g, x->d[0]) * oh * ow * dimv(g, w->d[3]) * dimv(g, w->d[0]) * dimv(g, w->d[1]) *
               dimv(g, w->d[2]);
    }
    case OP_CONV2D_GRAD_INPUT: {
        const Shape *dy = &g->nodes[n->in[0]].shape, *w = &g->nodes[n->in[1]].shape;
        return 2.0 * numel_d(g, dy) * dimv(g, w->d[0]) * dimv(g, w->d[1]) * dimv(g, w->d[2]);
    }
    case OP_CONV2D_GRAD_FILTER: {
        const Shape *dy = &g->nodes[n->in[1]].shape;
        return 2.0 * numel_d(g, dy) * dimv(g, y->d[0]) * dimv(g, y->d[1]) * dimv(g, y->d[2]);
    }
    case OP_CONV2D_GRAD_FILTER_POOLED:   /* a term of K taps per pooled element at most */
        return 2.0 * numel_d(g, &g->nodes[n->in[2]].shape) * dimv(g, y->d[0]) * dimv(g, y->d[1]) * dimv(g, y->d[2]);
    case OP_SUM_TO_POOLED:
        return numel_d(g, &g->nodes[n->in[1]].shape);
    case OP_MAXPOOL: case OP_AVGPOOL:
        return numel_d(g, y) * n->a.win.kh * n->a.win.kw;
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_SOFTMAX_GRAD: case OP_LOG_SOFTMAX_GRAD:
    case OP_SOFTMAX_CAUSAL: case OP_SOFTMAX_GRAD_CAUSAL:   /* the mask's are none */
        return 4.0 * numel_d(g, y);
    case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_GRAD: case OP_ACCURACY: case OP_MSE: case OP_MSE_GRAD:
        return 4.0 * numel_d(g, &g->nodes[n->in[0]].shape);
    case OP_SUM_TO: case OP_GLOBAL_AVGPOOL:
        return numel_d(g, &g->nodes[n->in[0]].shape);
    case OP_SGD_UPDATE: case OP_MOMENTUM_UPDATE: case OP_ADAM_UPDATE: case OP_ADAMW_UPDATE: case OP_RMSPROP_UPDATE:
        return update_flops(n->op) * numel_d(g, &g->nodes[n->in[1]].shape);
    case OP_UPDATE_ALL: {
        double per = update_flops((OpKind)n->a.update.kind), f = 0;
        for (int i = 1; i < n->nin; i += 2) f += per * numel_d(g, &g->nodes[n->in[i]].shape);
        return f;
    }
    case OP_CLIP_SCALE: {   /* a square and an add per element */
        double f = 0;
        for (int i = 0; i < n->nin; i++) f += 2.0 * numel_d(g, &g->nodes[n->in[i]].shape);
        return f;
    }
    case OP_MATMUL_UPDATE: {   /* the gradient's matmul and its update, counted as the two ops apart */
        const Shape *a = &g->nodes[n->in[1]].shape, *w = &g->nodes[n->in[0]].shape;
        double k = dimv(g, a->d[n->a.update.ta ? 0 : 1]);
        return (2.0 * k + update_flops((OpKind)n->a.update.kind)) * numel_d(g, w);
    }
    case OP_MATMUL_GRAD_UPDATE: {   /* as the ops apart: dx's matmul, relu's mask, w's gradient matmul and update */
        const Shape *w = &g->nodes[n->in[2]].shape;
        double b = dimv(g, y->d[0]);
        return 2.0 * numel_d(g, y) * dimv(g, w->d[1]) + numel_d(g, y) +
               (2.0 * b + update_flops((OpKind)n->a.update.kind)) * numel_d(g, w);
    }
    /* batch norm: per element, the statistics' shifted sum and square (3), x * scale +
     * shift (2), the backward's two sums (4) and dx = a dy - k (x - mean) - b (4) */
    case OP_BATCH_NORM_STATS: return 3.0 * numel_d(g, &g->nodes[n->in[0]].shape);
    case OP_BATCH_NORM: case OP_BATCH_NORM_INFER: return 2.0 * numel_d(g, y);
    case OP_BATCH_NORM_GRAD_PARAMS: case OP_BATCH_NORM_GRAD: return 4.0 * numel_d(g, &g->nodes[n->in[0]].shape);
    case OP_BATCH_NORM_UPDATE: return 6.0 * numel_d(g, &g->nodes[n->in[0]].shape);
    case OP_INPUT: case OP_PARAM: case OP_CONST: case OP_RESHAPE: case OP_CONCAT: case OP_SLICE:
        return 0;
    /* the transformer ops (issue 14): layout, embeddings and slices' gradients move data */
    case OP_BATCH_MATMUL: {
        const Shape *a = &g->nodes[n->in[0]].shape;
        return 2.0 * numel_d(g, y) * dimv(g, a->d[a->rank - (n->a.matmul.ta ? 2 : 1)]);
    }
    case OP_REDUCE_SUM: case OP_REDUCE_MEAN: case OP_REDUCE_MAX: case OP_BCE_LOGITS: case OP_BCE_LOGITS_GRAD:
        return 4.0 * numel_d(g, &g->nodes[n->in[0]].shape);
    case OP_LAYER_NORM: case OP_LAYER_NORM_GRAD: case OP_LAYER_NORM_GRAD_SCALE:
        return 8.0 * numel_d(g, &g->nodes[n->in[0]].shape);
    case OP_LAYER_NORM_GRAD_ADD:   /* the gradient's and the add's */
        return 9.0 * numel_d(g, &g->nodes[n->in[1]].shape);
    case OP_TRANSPOSE: case OP_EMBEDDING: case OP_SLICE_GRAD: case OP_CAUSAL_MASK:
        return 0;
    case OP_ATTENTION: case OP_ATTENTION_PROBS: case OP_ATTENTION_OUT: case OP_ATTENTION_GRAD: {
        /* as the ops apart: a product 2 T per element of q, the rows 4 per score */
        const Shape *q = &g->nodes[n->in[n->op == OP_ATTENTION_OUT ? 1 : 0]].shape;
        double T = dimv(g, q->d[1]), prod = 2.0 * numel_d(g, q) * T, rows = 4.0 * numel_d(g, q) / dimv(g, q->d[3]) * T;
        switch (n->op) {
        case OP_ATTENTION: return 2 * prod + rows;
        case OP_ATTENTION_PROBS: return prod + rows;
        case OP_ATTENTION_OUT: return prod;
        default: return 4 * prod + rows + numel_d(g, q);
        }
    }
    default:
        return (op_info[n->op].traits & OPT_ELEMWISE) || n->op == OP_DROPOUT || n->op == OP_DROPOUT_GRAD ||
                       n->op == OP_MAXPOOL_GRAD || n->op == OP_MAXPOOL_GRAD_RELU || n->op == OP_AVGPOOL_GRAD || n->op == OP_GLOBAL_AVGPOOL_GRAD
                   ? numel_d(g, y)
                   : 0;
    }
}

double graph_flops(const Graph *g)
{
    double f = 0;
    for (int i = 0; i < g->nnodes; i++) f += node_flops(g, &g->nodes[i]);
    return f;
}
