/* Lowering: syntax tree -> graph.  See lower.h. */
#include <assert.h>
#include <math.h>
#include <string.h>
#include "graph/lower.h"
#include "util/path.h"
#include "util/suggest.h"

/* ---- values ------------------------------------------------------------------------ */

typedef enum ValKind {
    V_ERROR,    /* an error was already reported: stay quiet downstream */
    V_TENSOR,   /* node */
    V_NUM,      /* num (is_int when written as an integer) */
    V_STR,      /* str */
    V_BOOL,     /* b */
    V_INIT,     /* a parameter initializer: init, a, b */
    V_DATA,     /* a data source (train block) */
    V_OPTIM,    /* an optimizer (train block) */
    V_SYM,      /* a size symbol such as B: count is its index */
    V_LIST,     /* [1, 2]: items, nitems integers (axes, a permutation) */
    V_TUPLE,    /* several tensors (split): nodes, nitems of them */
    V_SCHED,    /* a learning-rate schedule (train block): lr its base, sched */
} ValKind;

typedef struct Val {
    ValKind kind;
    Loc loc;
    int32_t node;
    double num;
    int64_t ival;       /* V_NUM written as an integer literal: its exact value */
    bool is_int;
    const char *str;
    bool b;
    InitKind init;
    float ia, ib;
    /* V_DATA / V_OPTIM */
    DataKind data;
    int64_t count;
    OptimKind optim;
    float lr, momentum, beta1, beta2, eps;
    bool nesterov;
    /* V_LIST, V_TUPLE (in the graph's arena) */
    const int64_t *items;
    const int32_t *nodes;
    int nitems;
    /* V_OPTIM (issue 14's optimizers) and V_SCHED */
    float weight_decay, rho;
    bool centered;
    bool lr_given;      /* V_OPTIM: lr= was written (the train block's lr then may not be) */
    LrSchedule sched;
} Val;

static const char *val_kind_name(ValKind k)
{
    static const char *names[] = { "error", "tensor", "number", "string", "boolean",
                                   "initializer", "data source", "optimizer", "size symbol", "list",
                                   "tuple of tensors", "learning-rate schedule" };
    return names[k];
}

typedef struct Binding {
    const char *name;
    Val val;
    int stmt;           /* statement that made it */
} Binding;

typedef struct Kw {
    const char *name;
    Loc name_loc;
    Val val;
    bool used;
} Kw;

enum { MAX_ARGS = 32 };

typedef struct Builtin Builtin;

/* A call's evaluated arguments.  On the heap, sized by the call: evaluation recurses
 * once per level of nesting, so its frames must stay small. */
typedef struct Call {
    const Ast *ast;
    const char *fn;
    const Builtin *bi;        /* the builtin called */
    Val *pos;                 /* positional arguments, in order */
    int npos;
    Kw *kw;                   /* keyword arguments, in order */
    int nkw;
} Call;

/* The layers named in Keras' scheme (layer_name), each counted apart. */
typedef enum LayerKind {
    LAYER_DENSE, LAYER_CONV2D, LAYER_BATCH_NORM, LAYER_EMBEDDING, LAYER_LAYER_NORM, LAYER_MHA, LAYER_KIND_COUNT
} LayerKind;

typedef struct Lower {
    Graph *g;
    DiagSink *d;
    const Program *p;
    Binding *binds;
    int nbinds, bind_cap;
    int cur_stmt;
    const char *cur_target;   /* name the current statement defines */
    int layer_count[LAYER_KIND_COUNT];   /* layers named so far, by kind: for Keras-style names */
    int dropout_count;
    bool in_param_init;       /* evaluating `param NAME: T = <init>` */
    bool in_train;            /* evaluating a train block entry */
    bool quiet_undefined;     /* the file had syntax errors: undefined names are expected */
} Lower;

static Val verr(Loc loc) { Val v; memset(&v, 0, sizeof v); v.kind = V_ERROR; v.loc = loc; return v; }

static Val error_at(Lower *L, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static Val error_at(Lower *L, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_vreport(L->d, DIAG_ERROR, loc, fmt, ap);
    va_end(ap);
    return verr(loc);
}

static Val vtensor(int32_t node, Loc loc)
{
    Val v;
    memset(&v, 0, sizeof v);
    v.kind = node >= 0 ? V_TENSOR : V_ERROR;
    v.node = node;
    v.loc = loc;
    return v;
}

/* ---- scope -------------------------------------------------------------------------- */

static Binding *lookup(Lower *L, const char *name)
{
    for (int i = L->nbinds - 1; i >= 0; i--)
        if (strcmp(L->binds[i].name, name) == 0) return &L->binds[i];
    return NULL;
}

static void bind(Lower *L, const char *name, Val v)
{
    Binding *b = lookup(L, name);
    if (b) { b->val = v; b->stmt = L->cur_stmt; return; }
    if (L->nbinds == L->bind_cap) {
        int cap = L->bind_cap ? L->bind_cap * 2 : 32;
        Binding *nb = arena_alloc(&L->g->arena, (size_t)cap * sizeof *nb);
        if (!nb) return;
        if (L->nbinds) memcpy(nb, L->binds, (size_t)L->nbinds * sizeof *nb);
        L->binds = nb;
        L->bind_cap = cap;
    }
    L->binds[L->nbinds++] = (Binding){ name, v, L->cur_stmt };
}

/* ---- making nodes --------------------------------------------------------------------- */

/* Adds a node and infers its shape at once; -1 (error reported) when the shape is bad. */
static int32_t mk(Lower *L, OpKind op, const int32_t *in, int nin, Loc loc, const NodeAttr *attr)
{
    int32_t id = graph_add(L->g, op, in, nin, loc);
    if (id < 0) { diag_plain(L->d, "out of memory"); return -1; }
    if (attr) L->g->nodes[id].a = *attr;
    if (!graph_infer_node(L->g, id, L->d)) {
        L->g->nnodes--;   /* drop it: nothing refers to it yet */
        return -1;
    }
    return id;
}

static int32_t mk1(Lower *L, OpKind op, int32_t x, Loc loc)
{
    return mk(L, op, &x, 1, loc, NULL);
}

static int32_t mk2(Lower *L, OpKind op, int32_t a, int32_t b, Loc loc)
{
    int32_t in[2] = { a, b };
    return mk(L, op, in, 2, loc, NULL);
}

static const Node *node(Lower *L, int32_t id) { return &L->g->nodes[id]; }

static int32_t reshape_to(Lower *L, int32_t x, Shape t, Loc loc)
{
    int32_t id = graph_add(L->g, OP_RESHAPE, &x, 1, loc);
    if (id < 0) return -1;
    L->g->nodes[id].tshape = t;
    if (!graph_infer_node(L->g, id, L->d)) { L->g->nnodes--; return -1; }
    return id;
}

/* ---- parameters -------------------------------------------------------------------------- */

static void set_fans(Var *v)
{
    const Shape *s = &v->shape;
    if (s->rank == 0) { v->fan_in = v->fan_out = 1; return; }
    if (s->rank == 1) { v->fan_in = v->fan_out = s->d[0].v; return; }
    int64_t rf = 1;
    for (int i = 0; i < s->rank - 2; i++) rf *= s->d[i].v;
    v->fan_in = rf * s->d[s->rank - 2].v;
    v->fan_out = rf * s->d[s->rank - 1].v;
}

static int find_var(Graph *g, const char *name)
{
    for (int i = 0; i < g->nvars; i++)
        if (strcmp(g->vars[i].name, name) == 0) return i;
    return -1;
}

/* A PARAM node for var `name`; a layer called again with the same name= shares it. */
static int32_t param_node(Lower *L, const char *name, Shape shape, InitKind init, Loc loc)
{
    int v = find_var(L->g, name);
    if (v >= 0) {
        if (!shape_eq(&L->g->vars[v].shape, &shape)) {
            char b1[128], b2[128];
            error_at(L, loc, "parameter '%s' is shared but needs shape %s here and has %s", name,
                     shape_str(L->g, &shape, b1, sizeof b1), shape_str(L->g, &L->g->vars[v].shape, b2, sizeof b2));
            return -1;
        }
    } else {
        v = graph_add_var(L->g, name, shape, init, loc);
        if (v < 0) return -1;
        set_fans(&L->g->vars[v]);
    }
    NodeAttr a = { .param = { v } };
    int32_t id = mk(L, OP_PARAM, NULL, 0, loc, &a);
    if (id >= 0) L->g->nodes[id].name = L->g->vars[v].name;
    return id;
}

/* ---- arguments ------------------------------------------------------------------------- */

static Kw *kw_find(Call *c, const char *name)
{
    for (int i = 0; i < c->nkw; i++)
        if (strcmp(c->kw[i].name, name) == 0) { c->kw[i].used = true; return &c->kw[i]; }
    return NULL;
}

/* Integer keyword argument in [lo, hi]; `def` when absent and not required. */
/* The keyword argument `name`, or NULL when it is absent or its value is an error.
 * *ok is false when the caller must fail: a required argument missing (reported here)
 * or a value already in error (reported before). */
static Kw *kw_arg(Lower *L, Call *c, const char *name, bool required, bool *ok)
{
    Kw *k = kw_find(c, name);
    *ok = true;
    if (!k && required) error_at(L, c->ast->loc, "%s: missing keyword argument '%s'", c->fn, name);
    if ((!k && required) || (k && k->val.kind == V_ERROR)) {
        *ok = false;
        return NULL;
    }
    return k;
}

static bool kw_int(Lower *L, Call *c, const char *name, bool required, int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    bool ok;
    Kw *k = kw_arg(L, c, name, required, &ok);
    if (!k) {
        *out = def;
        return ok;
    }
    if (k->val.kind != V_NUM || !k->val.is_int) {
        error_at(L, k->val.loc, "%s: '%s' must be an integer, got %s", c->fn, name,
                 k->val.kind == V_NUM ? "a floating-point number" : val_kind_name(k->val.kind));
        return false;
    }
    if (k->val.num < (double)lo || k->val.num > (double)hi) {
        error_at(L, k->val.loc, "%s: '%s' must be between %lld and %lld, got %.0f", c->fn, name, (long long)lo,
                 (long long)hi, k->val.num);
        return false;
    }
    *out = k->val.ival;
    return true;
}

static bool kw_float(Lower *L, Call *c, const char *name, bool required, double def, double lo, double hi, float *out)
{
    bool ok;
    Kw *k = kw_arg(L, c, name, required, &ok);
    if (!k) {
        *out = (float)def;
        return ok;
    }
    if (k->val.kind != V_NUM) {
        error_at(L, k->val.loc, "%s: '%s' must be a number, got %s", c->fn, name, val_kind_name(k->val.kind));
        return false;
    }
    if (!(k->val.num >= lo && k->val.num <= hi)) {
        error_at(L, k->val.loc, "%s: '%s' must be between %g and %g, got %g", c->fn, name, lo, hi, k->val.num);
        return false;
    }
    *out = (float)k->val.num;
    return true;
}

static bool kw_bool(Lower *L, Call *c, const char *name, bool def, bool *out)
{
    Kw *k = kw_find(c, name);
    if (!k) { *out = def; return true; }
    if (k->val.kind == V_ERROR) return false;
    if (k->val.kind != V_BOOL) {
        error_at(L, k->val.loc, "%s: '%s' must be true or false, got %s", c->fn, name, val_kind_name(k->val.kind));
        return false;
    }
    *out = k->val.b;
    return true;
}

/* String keyword argument that must be one of `choices` (NULL-terminated). */
static bool kw_choice(Lower *L, Call *c, const char *name, const char *def, const char *const *choices, int *out)
{
    Kw *k = kw_find(c, name);
    const char *s = def;
    if (k) {
        if (k->val.kind == V_ERROR) return false;
        if (k->val.kind != V_STR) {
            error_at(L, k->val.loc, "%s: '%s' must be a string, got %s", c->fn, name, val_kind_name(k->val.kind));
            return false;
        }
        s = k->val.str;
    }
    int n = 0;
    for (; choices[n]; n++)
        if (strcmp(s, choices[n]) == 0) { *out = n; return true; }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, i ? ", \"" : "\"", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
        strncat(list, "\"", sizeof list - strlen(list) - 1);
    }
    error_at(L, k ? k->val.loc : c->ast->loc, "%s: '%s' must be one of %s, got \"%s\"", c->fn, name, list, s);
    return false;
}

static const char *kw_string(Lower *L, Call *c, const char *name, const char *def)
{
    Kw *k = kw_find(c, name);
    if (!k) return def;
    if (k->val.kind != V_STR) {
        if (k->val.kind != V_ERROR)
            error_at(L, k->val.loc, "%s: '%s' must be a string, got %s", c->fn, name, val_kind_name(k->val.kind));
        return NULL;
    }
    return k->val.str;
}

static bool pos_tensor(Lower *L, Call *c, int i, const char *what, int32_t *out)
{
    if (i >= c->npos) {
        error_at(L, c->ast->loc, "%s: missing argument %d (%s)", c->fn, i + 1, what);
        return false;
    }
    Val *v = &c->pos[i];
    if (v->kind == V_ERROR) return false;
    if (v->kind != V_TENSOR) {
        error_at(L, v->loc, "%s: argument %d (%s) must be a tensor, got %s", c->fn, i + 1, what, val_kind_name(v->kind));
        return false;
    }
    *out = v->node;
    return true;
}

static bool no_more_pos(Lower *L, Call *c, int n)
{
    if (c->npos <= n) return true;
    error_at(L, c->pos[n].loc, "%s: takes %d positional argument%s, got %d", c->fn, n, n == 1 ? "" : "s", c->npos);
    return false;
}

/* ---- builtins ----------------------------------------------------------------------------- */

typedef Val (*BuiltinFn)(Lower *L, Call *c);

/* A function of the language.  Several share a lowering function, told apart by `kind`
 * (never by their name again after the lookup). */
struct Builtin {
    const char *name;
    BuiltinFn fn;
    int kind;                 /* the OpKind it makes, or its InitKind, DataKind or OptimKind; else 0 */
    const char *kwargs[10];   /* the keywords it accepts */
    const char *usage;
};

/* An op of one tensor named as the builtin: softmax(x), global_avgpool(x), ... */
static Val b_op1(Lower *L, Call *c)
{
    int32_t x;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(c->ast->loc);
    return vtensor(mk1(L, (OpKind)c->bi->kind, x, c->ast->loc), c->ast->loc);
}

/* An elementwise unary function of util/elemwise.def, with its parameter if it takes
 * one (leaky_relu(x, alpha=0.2)). */
static int32_t unary_node(Lower *L, OpKind op, float p, int32_t x, Loc loc)
{
    return mk(L, op, &x, 1, loc, &(NodeAttr){ .unary = { .p = p } });
}

static Val b_unary(Lower *L, Call *c)
{
    int32_t x;
    OpKind op = (OpKind)c->bi->kind;
    const OpInfo *info = &op_info[op];
    float p = info->param_default;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1) ||
        (info->param && !kw_float(L, c, info->param, false, info->param_default, -1e30, 1e30, &p)))
        return verr(c->ast->loc);
    return vtensor(unary_node(L, op, p, x, c->ast->loc), c->ast->loc);
}

static int32_t as_tensor(Lower *L, const Val *v)
{
    if (v->kind == V_TENSOR) return v->node;
    if (v->kind == V_NUM) return mk(L, OP_CONST, NULL, 0, v->loc, &(NodeAttr){ .cnst = { (float)v->num } });
    if (v->kind != V_ERROR) error_at(L, v->loc, "expected a tensor or a number, got %s", val_kind_name(v->kind));
    return -1;
}

/* Evaluation recurses once per level of nesting (eval, below): what it calls at each
 * level is kept out of its frame, which GCC would otherwise grow by inlining them. */
#define NOT_IN_EVAL __attribute__((noinline))

NOT_IN_EVAL static Val binary(Lower *L, OpKind op, const Val *a, const Val *b, Loc loc)
{
    if (a->kind == V_NUM && b->kind == V_NUM) {
        Val r = *a;
        r.loc = loc;
        switch (op) {
        case OP_ADD: r.num = a->num + b->num; break;
        case OP_SUB: r.num = a->num - b->num; break;
        case OP_MUL: r.num = a->num * b->num; break;
        default:
            if (b->num == 0) return error_at(L, loc, "division by zero");
            r.num = a->num / b->num;
            r.is_int = a->is_int && b->is_int && fmod(a->num, b->num) == 0 && fabs(r.num) < 9007199254740992.0;
            r.ival = r.is_int ? (int64_t)r.num : 0;
            return r;
        }
        r.is_int = a->is_int && b->is_int && fabs(r.num) < 9007199254740992.0;   /* exact in a double */
        r.ival = r.is_int ? (int64_t)r.num : 0;
        return r;
    }
    if (a->kind == V_ERROR || b->kind == V_ERROR) return verr(loc);
    int32_t x = as_tensor(L, a), y = as_tensor(L, b);
    if (x < 0 || y < 0) return verr(loc);
    return vtensor(mk2(L, op, x, y, loc), loc);
}

static Val b_binary(Lower *L, Call *c)
{
    if (c->npos != 2) return error_at(L, c->ast->loc, "%s: takes 2 arguments, got %d", c->fn, c->npos);
    return binary(L, (OpKind)c->bi->kind, &c->pos[0], &c->pos[1], c->ast->loc);
}

static Val b_matmul(Lower *L, Call *c)
{
    int32_t a, b;
    if (!pos_tensor(L, c, 0, "a", &a) || !pos_tensor(L, c, 1, "b", &b) || !no_more_pos(L, c, 2)) return verr(c->ast->loc);
    return vtensor(mk2(L, OP_MATMUL, a, b, c->ast->loc), c->ast->loc);
}

/* A layer's activation=: none, any elementwise unary function (with its default
 * parameter), or softmax. */
static const char *const activations[] = {
    "linear",
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) #name,
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    "softmax", NULL,
};
static const OpKind activation_ops[] = {
    OP_COUNT,
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) OP_##E,
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    OP_SOFTMAX,
};

/* Layer name: name= if given, else Keras' scheme: dense, dense_1, dense_2, ... */
static const char *layer_name(Lower *L, Call *c, LayerKind kind, const char *base)
{
    /* by kind, the first parameter a layer makes: a name is taken when it exists */
    static const char *const first_var[LAYER_KIND_COUNT] = {
        [LAYER_DENSE] = "kernel", [LAYER_CONV2D] = "kernel", [LAYER_BATCH_NORM] = "gamma",
        [LAYER_EMBEDDING] = "embeddings", [LAYER_LAYER_NORM] = "gamma", [LAYER_MHA] = "query/kernel",
    };
    Kw *k = kw_find(c, "name");
    const char *given = kw_string(L, c, "name", NULL);
    if (k && !given) return NULL;
    if (given) {
        if (!given[0] || strchr(given, '/') || strchr(given, ':')) {
            error_at(L, k->val.loc, "%s: 'name' must be non-empty, without '/' or ':'", c->fn);
            return NULL;
        }
        return given;
    }
    /* Keras' scheme, skipping names already taken (by name= or an explicit param) */
    char buf[64], kernel[96];
    for (;;) {
        int n = L->layer_count[kind]++;
        if (n == 0) snprintf(buf, sizeof buf, "%s", base);
        else snprintf(buf, sizeof buf, "%s_%d", base, n);
        snprintf(kernel, sizeof kernel, "%s/%s", buf, first_var[kind]);
        if (find_var(L->g, kernel) < 0) break;
    }
    return arena_strdup(&L->g->arena, buf);
}

static int32_t bias_and_activation(Lower *L, Call *c, const char *lname, int32_t y, int64_t units, bool use_bias, int act)
{
    Loc loc = c->ast->loc;
    if (y >= 0 && use_bias) {
        char pname[256];
        snprintf(pname, sizeof pname, "%s/bias", lname);
        int32_t b = param_node(L, pname, shape_make(1, &units), INIT_ZEROS, loc);
        y = b < 0 ? -1 : mk2(L, OP_ADD, y, b, loc);
    }
    OpKind op = activation_ops[act];
    if (y >= 0 && act > 0)
        y = op_has(op, OPT_UNARY) ? unary_node(L, op, op_info[op].param_default, y, loc) : mk1(L, op, y, loc);
    return y;
}

static Val b_dense(Lower *L, Call *c)
{
    int32_t x;
    int64_t units;
    bool use_bias;
    int act;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(loc);
    if (!kw_int(L, c, "units", true, 0, 1, INT32_MAX, &units) || !kw_bool(L, c, "use_bias", true, &use_bias) ||
        !kw_choice(L, c, "activation", "linear", activations, &act))
        return verr(loc);
    const Shape *xs = &node(L, x)->shape;
    char b1[128];
    if (xs->rank < 2)
        return error_at(L, loc, "dense: the input must be [batch, features] (or [..., features]), got %s",
                        shape_str(L->g, xs, b1, sizeof b1));
    Dim f = xs->d[xs->rank - 1];
    if (f.sym >= 0)
        return error_at(L, loc, "dense: the number of input features must be known, got %s", shape_str(L->g, xs, b1, sizeof b1));
    const char *lname = layer_name(L, c, LAYER_DENSE, "dense");
    if (!lname) return verr(loc);
    /* Over the last axis, as Keras: the leading axes are rows of one product (views) */
    Shape out = *xs;
    out.d[out.rank - 1] = (Dim){ units, -1 };
    if (xs->rank > 2) x = reshape_to(L, x, (Shape){ 2, { { -1, -1 }, f } }, loc);
    char pname[256];
    snprintf(pname, sizeof pname, "%s/kernel", lname);
    int64_t ks[2] = { f.v, units };
    int32_t w = param_node(L, pname, shape_make(2, ks), INIT_GLOROT_UNIFORM, loc);
    int32_t y = w < 0 || x < 0 ? -1 : mk2(L, OP_MATMUL, x, w, loc);
    y = bias_and_activation(L, c, lname, y, units, use_bias, act);
    if (y >= 0 && out.rank > 2) y = reshape_to(L, y, out, loc);
    return vtensor(y, loc);
}

static const char *const paddings[] = { "valid", "same", NULL };

static Val b_conv2d(Lower *L, Call *c)
{
    int32_t x, w = -1;
    int64_t stride;
    int pad, act;
    bool use_bias;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x)) return verr(loc);
    bool layer = c->npos < 2;
    if (!layer && (!pos_tensor(L, c, 1, "filter", &w) || !no_more_pos(L, c, 2))) return verr(loc);
    if (!kw_int(L, c, "stride", false, 1, 1, 1 << 20, &stride) || !kw_choice(L, c, "padding", "valid", paddings, &pad))
        return verr(loc);
    NodeAttr a = { .win = { .sh = (int)stride, .sw = (int)stride, .padding = (Padding)pad } };
    if (!layer) {
        static const char *const layer_only[] = { "filters", "kernel", "use_bias", "activation", "name" };
        for (size_t i = 0; i < sizeof layer_only / sizeof *layer_only; i++) {
            Kw *k = kw_find(c, layer_only[i]);
            if (k)
                return error_at(L, k->name_loc, "conv2d: '%s' is for the layer form conv2d(x, filters=N, kernel=K); "
                                "this call passes its own filter", layer_only[i]);
        }
        int32_t in[2] = { x, w };
        return vtensor(mk(L, OP_CONV2D, in, 2, loc, &a), loc);
    }
    int64_t filters, kernel;
    if (!kw_int(L, c, "filters", true, 0, 1, INT32_MAX, &filters) || !kw_int(L, c, "kernel", true, 0, 1, 1 << 16, &kernel) ||
        !kw_bool(L, c, "use_bias", true, &use_bias) || !kw_choice(L, c, "activation", "linear", activations, &act))
        return verr(loc);
    const Shape *xs = &node(L, x)->shape;
    char b1[128];
    if (xs->rank != 4)
        return error_at(L, loc, "conv2d: the input must be [batch, height, width, channels], got %s",
                        shape_str(L->g, xs, b1, sizeof b1));
    if (xs->d[3].sym >= 0)
        return error_at(L, loc, "conv2d: the number of input channels must be known, got %s", shape_str(L->g, xs, b1, sizeof b1));
    const char *lname = layer_name(L, c, LAYER_CONV2D, "conv2d");
    if (!lname) return verr(loc);
    char pname[256];
    snprintf(pname, sizeof pname, "%s/kernel", lname);
    int64_t ks[4] = { kernel, kernel, xs->d[3].v, filters };
    int32_t wk = param_node(L, pname, shape_make(4, ks), INIT_GLOROT_UNIFORM, loc);
    if (wk < 0) return verr(loc);
    int32_t in[2] = { x, wk };
    int32_t y = mk(L, OP_CONV2D, in, 2, loc, &a);
    return vtensor(bias_and_activation(L, c, lname, y, filters, use_bias, act), loc);
}

static Val b_pool(Lower *L, Call *c)
{
    int32_t x;
    int64_t size, stride;
    int pad;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(loc);
    if (!kw_int(L, c, "size", false, 2, 1, 1 << 16, &size)) return verr(loc);
    if (!kw_int(L, c, "stride", false, size, 1, 1 << 16, &stride) || !kw_choice(L, c, "padding", "valid", paddings, &pad))
        return verr(loc);
    NodeAttr a = { .win = { .kh = (int)size, .kw = (int)size, .sh = (int)stride, .sw = (int)stride, .padding = (Padding)pad } };
    return vtensor(mk(L, (OpKind)c->bi->kind, &x, 1, loc, &a), loc);
}

static Val b_flatten(Lower *L, Call *c)
{
    int32_t x;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(loc);
    const Shape *xs = &node(L, x)->shape;
    if (xs->rank < 1) return error_at(L, loc, "flatten: the input is a scalar");
    Shape t = { 2, { xs->d[0], { 1, -1 } } };
    for (int i = 1; i < xs->rank; i++) {
        char b1[128];
        if (xs->d[i].sym >= 0)
            return error_at(L, loc, "flatten: every dimension after the first must be known, got %s",
                            shape_str(L->g, xs, b1, sizeof b1));
        if (!gc_mul_i64(t.d[1].v, xs->d[i].v, &t.d[1].v)) return error_at(L, loc, "flatten: the size overflows");
    }
    return vtensor(reshape_to(L, x, t, loc), loc);
}

static Val b_reshape(Lower *L, Call *c)
{
    int32_t x;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x)) return verr(loc);
    if (c->npos < 2) return error_at(L, loc, "reshape: give the new dimensions, e.g. reshape(x, B, -1)");
    if (c->npos - 1 > MAX_RANK) return error_at(L, loc, "reshape: at most %d dimensions", MAX_RANK);
    Shape t = { c->npos - 1, { { 0, -1 } } };
    for (int i = 1; i < c->npos; i++) {
        Val *v = &c->pos[i];
        Dim *d = &t.d[i - 1];
        d->sym = -1;
        if (v->kind == V_ERROR) return verr(loc);
        if (v->kind == V_NUM && v->is_int && (v->num == -1 || v->num >= 1)) d->v = (int64_t)v->num;
        else if (v->kind == V_SYM) { d->v = 1; d->sym = (int16_t)v->count; }
        else return error_at(L, v->loc, "reshape: dimension %d must be a positive integer, -1 or a size symbol", i);
    }
    return vtensor(reshape_to(L, x, t, loc), loc);
}

static Val b_concat(Lower *L, Call *c)
{
    Loc loc = c->ast->loc;
    int64_t axis;
    if (c->npos < 1) return error_at(L, loc, "concat: needs at least one tensor");
    if (!kw_int(L, c, "axis", false, -1, -MAX_RANK, MAX_RANK - 1, &axis)) return verr(loc);
    int32_t in[MAX_ARGS];
    for (int i = 0; i < c->npos; i++)
        if (!pos_tensor(L, c, i, "a tensor", &in[i])) return verr(loc);
    NodeAttr a = { .concat = { (int)axis } };
    return vtensor(mk(L, OP_CONCAT, in, c->npos, loc, &a), loc);
}

static Val b_dropout(Lower *L, Call *c)
{
    int32_t x;
    float rate;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(loc);
    if (!kw_float(L, c, "rate", true, 0, 0, 0.999999, &rate)) return verr(loc);
    NodeAttr a = { .dropout = { rate, L->dropout_count++ } };
    return vtensor(mk(L, OP_DROPOUT, &x, 1, loc, &a), loc);
}

static Val b_loss(Lower *L, Call *c)
{
    int32_t a, b;
    Loc loc = c->ast->loc;
    OpKind op = (OpKind)c->bi->kind;
    bool ce = op == OP_CROSS_ENTROPY, bce = op == OP_BCE_LOGITS;
    NodeAttr at;
    memset(&at, 0, sizeof at);
    if (!pos_tensor(L, c, 0, ce || bce ? "logits" : "prediction", &a) ||
        !pos_tensor(L, c, 1, ce ? "labels" : bce ? "targets" : "target", &b) || !no_more_pos(L, c, 2) ||
        (ce && !kw_float(L, c, "label_smoothing", false, 0, 0, 0.999999, &at.loss.smoothing)))
        return verr(loc);
    int32_t in[2] = { a, b };
    int32_t id = mk(L, op, in, 2, loc, &at);
    if (id >= 0 && ce && L->g->logits < 0) {
        L->g->logits = a;
        if (node(L, b)->op == OP_INPUT) L->g->label_input = b;
    }
    return vtensor(id, loc);
}

/* batch_norm(x, momentum=0.99, eps=0.001): Keras' BatchNormalization over the last axis
 * (the channels of NHWC images, the features of [B, F]), with its names and defaults:
 * gamma (ones) and beta (zeros) trained, moving_mean (zeros) and moving_variance (ones)
 * buffers.  Two nodes, the batch's statistics and the normalization; graph/bnorm.c
 * says how training and inference use them. */
static Val b_batch_norm(Lower *L, Call *c)
{
    static const char *const vars[4] = { "gamma", "beta", "moving_mean", "moving_variance" };
    static const InitKind inits[4] = { INIT_ONES, INIT_ZEROS, INIT_ZEROS, INIT_ONES };
    int32_t x, in[6];
    NodeAttr a = { .bn = { .act = -1 } };
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(loc);
    if (!kw_float(L, c, "momentum", false, 0.99, 0, 1, &a.bn.momentum) || !kw_float(L, c, "eps", false, 0.001, 1e-30, 1, &a.bn.eps))
        return verr(loc);
    const Shape *xs = &node(L, x)->shape;
    char b1[128];
    if (node(L, x)->dtype != DT_F32)
        return error_at(L, loc, "batch_norm: the input must be f32, got %s%s", dtype_name(node(L, x)->dtype),
                        shape_str(L->g, xs, b1, sizeof b1));
    if (xs->rank < 2)
        return error_at(L, loc, "batch_norm: the input must be [batch, ..., channels], got %s", shape_str(L->g, xs, b1, sizeof b1));
    Dim ch = xs->d[xs->rank - 1];
    if (ch.sym >= 0)
        return error_at(L, loc, "batch_norm: the number of channels (the last axis) must be known, got %s",
                        shape_str(L->g, xs, b1, sizeof b1));
    const char *lname = layer_name(L, c, LAYER_BATCH_NORM, "batch_normalization");
    if (!lname) return verr(loc);
    char pname[256];
    snprintf(pname, sizeof pname, "%s/gamma", lname);
    if (find_var(L->g, pname) >= 0)
        return error_at(L, loc, "batch_norm: a layer named '%s' already exists; a batch norm is not shared (each keeps "
                        "its own running statistics)", lname);
    in[0] = x;
    in[1] = mk1(L, OP_BATCH_NORM_STATS, x, loc);
    for (int k = 0; k < 4 && in[1] >= 0; k++) {
        snprintf(pname, sizeof pname, "%s/%s", lname, vars[k]);
        in[2 + k] = param_node(L, pname, shape_make(1, &ch.v), inits[k], loc);
        if (in[2 + k] < 0) return verr(loc);
        if (k >= 2) L->g->vars[L->g->nodes[in[2 + k]].a.param.var].role = VAR_BUFFER;
    }
    if (in[1] < 0) return verr(loc);
    return vtensor(mk(L, OP_BATCH_NORM, in, 6, loc, &a), loc);
}

/* ---- initializers (only after `param NAME: TYPE =`) ---------------------------------------- */

static Val b_init(Lower *L, Call *c)
{
    Val v;
    memset(&v, 0, sizeof v);
    v.kind = V_INIT;
    v.loc = c->ast->loc;
    if (!L->in_param_init)
        return error_at(L, c->ast->loc, "%s() is an initializer: it can only follow 'param NAME: TYPE ='", c->fn);
    v.init = (InitKind)c->bi->kind;
    if (!no_more_pos(L, c, v.init == INIT_CONSTANT ? 1 : 0)) return verr(v.loc);
    switch (v.init) {
    case INIT_CONSTANT:
        if (c->npos != 1 || c->pos[0].kind != V_NUM) return error_at(L, v.loc, "constant: give the value, e.g. constant(0.1)");
        v.ia = (float)c->pos[0].num;
        break;
    case INIT_UNIFORM:
        if (!kw_float(L, c, "low", false, -0.05, -1e30, 1e30, &v.ia) || !kw_float(L, c, "high", false, 0.05, -1e30, 1e30, &v.ib))
            return verr(v.loc);
        if (!(v.ia < v.ib)) return error_at(L, v.loc, "uniform: 'low' must be below 'high'");
        break;
    case INIT_NORMAL:
        if (!kw_float(L, c, "mean", false, 0, -1e30, 1e30, &v.ia) || !kw_float(L, c, "stddev", false, 0.05, 0, 1e30, &v.ib))
            return verr(v.loc);
        break;
    default:
        break;
    }
    return v;
}

/* ---- train block values -------------------------------------------------------------------- */

/* A path written in the model (a data source's, the checkpoint's) as every reader must
 * take it: relative to the .net file's folder (util/path.h).  Every path the language
 * accepts goes through here.  In the graph's arena; NULL after reporting. */
static const char *lower_path(Lower *L, const char *written, Loc loc)
{
    char *p = path_resolve(L->g->src ? L->g->src->name : NULL, written);
    const char *r = p ? arena_strdup(&L->g->arena, p) : NULL;
    gc_free(p);
    if (!r) error_at(L, loc, "out of memory");
    return r;
}

static Val b_data(Lower *L, Call *c)
{
    Val v;
    memset(&v, 0, sizeof v);
    v.kind = V_DATA;
    v.loc = c->ast->loc;
    if (!L->in_train) return error_at(L, v.loc, "%s() is a data source: it belongs in the train block", c->fn);
    v.data = (DataKind)c->bi->kind;
    if (v.data == DATA_MNIST) {
        if (c->npos != 1 || c->pos[0].kind != V_STR)
            return error_at(L, v.loc, "mnist: give the folder of the IDX files, e.g. mnist(\"data/mnist\")");
        v.str = lower_path(L, c->pos[0].str, c->pos[0].loc);
        return v.str ? v : verr(v.loc);
    }
    if (!no_more_pos(L, c, 0) || !kw_int(L, c, "count", false, 4096, 1, INT32_MAX, &v.count)) return verr(v.loc);
    return v;
}

/* The optimizers, each with PyTorch's hyperparameters and defaults (adam's eps is Keras'
 * 1e-7, as it always was here).  weight_decay is L2 added to the gradient, as in
 * PyTorch's SGD, Adam and RMSprop; AdamW's is decoupled.  A decay rate is held in float:
 * 0.99999999 would round to 1 (no average at all, and Adam's bias correction 1 - 1^t
 * a division by zero), so the largest is the float below 1. */
#define BELOW_ONE 0.99999994

/* A decay rate in [0, BELOW_ONE], its bound written out (%g would print "1"). */
static bool kw_rate(Lower *L, Call *c, const char *name, double def, float *out)
{
    Kw *k = kw_find(c, name);
    if (k && k->val.kind == V_NUM && !(k->val.num >= 0 && k->val.num <= BELOW_ONE)) {
        error_at(L, k->val.loc, "%s: '%s' must be from 0 to %.8g (the float below 1), got %.9g", c->fn, name, BELOW_ONE,
                 k->val.num);
        return false;
    }
    return kw_float(L, c, name, false, def, 0, BELOW_ONE, out);
}
static Val b_optim(Lower *L, Call *c)
{
    Val v;
    memset(&v, 0, sizeof v);
    v.kind = V_OPTIM;
    v.loc = c->ast->loc;
    if (!L->in_train) return error_at(L, v.loc, "%s() is an optimizer: it belongs in the train block", c->fn);
    if (!no_more_pos(L, c, 0)) return verr(v.loc);
    v.optim = (OptimKind)c->bi->kind;
    Kw *lr = kw_find(c, "lr");
    v.lr_given = lr != NULL;
    if (lr && lr->val.kind == V_SCHED)
        return error_at(L, lr->val.loc, "%s: a schedule goes in the train block as its own entry: lr = %s(...)", c->fn,
                        lr->val.sched.kind == SCHED_STEP ? "step_decay" : "cosine");
    static const double lr_default[OPTIM_KIND_COUNT] = { 0.01, 0.001, 0.001, 0.01 };
    if (!kw_float(L, c, "lr", false, lr_default[v.optim], 0, 1e6, &v.lr)) return verr(v.loc);
    switch (v.optim) {
    case OPTIM_SGD:
        if (!kw_float(L, c, "momentum", false, 0, 0, 1, &v.momentum) || !kw_bool(L, c, "nesterov", false, &v.nesterov) ||
            !kw_float(L, c, "weight_decay", false, 0, 0, 1e6, &v.weight_decay))
            return verr(v.loc);
        if (v.nesterov && v.momentum == 0) return error_at(L, v.loc, "sgd: nesterov=true needs a momentum above 0");
        return v;
    case OPTIM_RMSPROP:
        if (!kw_rate(L, c, "rho", 0.99, &v.rho) || !kw_float(L, c, "eps", false, 1e-8, 1e-30, 1, &v.eps) ||
            !kw_float(L, c, "momentum", false, 0, 0, 1, &v.momentum) || !kw_bool(L, c, "centered", false, &v.centered) ||
            !kw_float(L, c, "weight_decay", false, 0, 0, 1e6, &v.weight_decay))
            return verr(v.loc);
        return v;
    default:
        if (!kw_float(L, c, "beta1", false, 0.9, 0, 0.999999, &v.beta1) ||
            !kw_rate(L, c, "beta2", 0.999, &v.beta2) ||
            !kw_float(L, c, "eps", false, v.optim == OPTIM_ADAMW ? 1e-8 : 1e-7, 1e-30, 1, &v.eps) ||
            !kw_float(L, c, "weight_decay", false, v.optim == OPTIM_ADAMW ? 0.01 : 0, 0, 1e6, &v.weight_decay))
            return verr(v.loc);
        return v;
    }
}

/* A learning-rate schedule, the train block's lr: step_decay(BASE, every=, factor=) or
 * cosine(BASE, steps=, min=). */
static Val b_sched(Lower *L, Call *c)
{
    Val v;
    memset(&v, 0, sizeof v);
    v.kind = V_SCHED;
    v.loc = c->ast->loc;
    v.sched.kind = (SchedKind)c->bi->kind;
    if (!L->in_train)
        return error_at(L, v.loc, "%s() is a learning-rate schedule: it belongs in the train block (lr = %s)", c->fn,
                        c->bi->usage);
    if (c->npos < 1 || c->pos[0].kind != V_NUM)
        return error_at(L, c->npos ? c->pos[0].loc : v.loc, "%s: give the starting learning rate first, e.g. %s", c->fn,
                        c->bi->usage);
    if (!no_more_pos(L, c, 1)) return verr(v.loc);
    if (!(c->pos[0].num > 0 && c->pos[0].num <= 1e6))
        return error_at(L, c->pos[0].loc, "%s: the learning rate must be above 0 and at most 1e6, got %g", c->fn, c->pos[0].num);
    v.lr = (float)c->pos[0].num;
    if (v.sched.kind == SCHED_STEP) {
        if (!kw_int(L, c, "every", true, 0, 1, 1 << 30, &v.sched.every) ||
            !kw_float(L, c, "factor", false, 0.1, 1e-30, 1e6, &v.sched.factor))
            return verr(v.loc);
        return v;
    }
    if (!kw_int(L, c, "steps", true, 0, 1, 1 << 30, &v.sched.steps) ||
        !kw_float(L, c, "min", false, 0, 0, 1e6, &v.sched.min))
        return verr(v.loc);
    if (v.sched.min > v.lr) {
        Kw *k = kw_find(c, "min");
        return error_at(L, k ? k->val.loc : v.loc, "cosine: 'min' (%g) must not be above the starting learning rate (%g)",
                        v.sched.min, v.lr);
    }
    return v;
}

/* ---- the transformer family (issue 14): layout, batched products, reductions, masks,
 * embeddings, normalization, attention ------------------------------------------------ */


static Val vlist(Lower *L, const int64_t *items, int n, Loc loc)
{
    Val v;
    memset(&v, 0, sizeof v);
    v.kind = V_LIST;
    v.loc = loc;
    int64_t *copy = arena_alloc(&L->g->arena, (size_t)(n ? n : 1) * sizeof *copy);
    if (!copy) return error_at(L, loc, "out of memory");
    if (n) memcpy(copy, items, (size_t)n * sizeof *copy);
    v.items = copy;
    v.nitems = n;
    return v;
}

/* Whether v is an integer (a list's item, an index's bound); if not, "RULE, got KIND"
 * (nothing more for an error already reported). */
NOT_IN_EVAL static bool int_ok(Lower *L, const Val *v, const char *rule)
{
    if (v->kind == V_ERROR) return false;
    if (v->kind == V_NUM && v->is_int) return true;
    error_at(L, v->loc, "%s, got %s", rule, v->kind == V_NUM ? "a floating-point number" : val_kind_name(v->kind));
    return false;
}

/* The list of int_ok values v[0..n) (n <= MAX_ARGS). */
NOT_IN_EVAL static void list_of(Lower *L, const Val *v, int n, Loc loc, Val *out)
{
    int64_t items[MAX_ARGS];
    for (int i = 0; i < n; i++) items[i] = v[i].ival;
    *out = vlist(L, items, n, loc);
}

/* axis `ax` (negative: from the end) of a tensor of rank `rank`, checked; the reported
 * place is the value's. */
static bool norm_axis(Lower *L, Call *c, Loc at, int64_t ax, int rank, int *out)
{
    if (ax < -rank || ax >= rank) {
        error_at(L, at, "%s: axis %lld is out of range for rank %d (from %d to %d)", c->fn, (long long)ax, rank, -rank,
                 rank - 1);
        return false;
    }
    *out = (int)(ax < 0 ? ax + rank : ax);
    return true;
}

/* The keyword `name`: one axis or a list of them, each in range and none twice, into
 * mask (bit i: axis i).  Absent: def_all ? every axis : the last one. */
static bool kw_axes(Lower *L, Call *c, const char *name, int rank, bool def_all, unsigned *mask)
{
    bool ok;
    Kw *k = kw_arg(L, c, name, false, &ok);
    *mask = 0;
    if (!ok) return false;
    if (!k) {
        *mask = def_all ? (1u << rank) - 1 : rank > 0 ? 1u << (rank - 1) : 0;
        return true;
    }
    int64_t one = k->val.ival;
    const int64_t *items = &one;
    int n = 1;
    if (k->val.kind == V_LIST) {
        items = k->val.items;
        n = k->val.nitems;
    } else if (k->val.kind != V_NUM || !k->val.is_int) {
        error_at(L, k->val.loc, "%s: '%s' must be an integer or a list of integers, got %s", c->fn, name,
                 k->val.kind == V_NUM ? "a floating-point number" : val_kind_name(k->val.kind));
        return false;
    }
    if (n == 0) {
        error_at(L, k->val.loc, "%s: '%s' names no axis", c->fn, name);
        return false;
    }
    for (int i = 0; i < n; i++) {
        int ax;
        if (!norm_axis(L, c, k->val.loc, items[i], rank, &ax)) return false;
        if (*mask & (1u << ax)) {
            error_at(L, k->val.loc, "%s: axis %d is named twice", c->fn, ax);
            return false;
        }
        *mask |= 1u << ax;
    }
    return true;
}

/* The last run of consecutive axes in mask, as a.axes counts it (after, n); the run's
 * bits are cleared from mask. */
static void take_last_run(unsigned *mask, int rank, NodeAttr *a)
{
    int hi = rank - 1;
    while (!(*mask & (1u << hi))) hi--;
    int lo = hi;
    while (lo > 0 && (*mask & (1u << (lo - 1)))) lo--;
    a->axes.after = rank - 1 - hi;
    a->axes.n = hi - lo + 1;
    for (int i = lo; i <= hi; i++) *mask &= ~(1u << i);
}

/* The transpose of x by perm (n axes given at `at`), each axis of x once. */
static Val transpose_by(Lower *L, Call *c, int32_t x, const int64_t *perm, int n, Loc at)
{
    Loc loc = c->ast->loc;
    int rank = node(L, x)->shape.rank;
    char b1[128];
    if (n != rank)
        return error_at(L, at, "%s: %d axes given for %s, which has %d", c->fn, n, shape_str(L->g, &node(L, x)->shape, b1, sizeof b1),
                        rank);
    NodeAttr a;
    memset(&a, 0, sizeof a);
    unsigned seen = 0;
    for (int i = 0; i < rank; i++) {
        int ax;
        if (!norm_axis(L, c, at, perm[i], rank, &ax)) return verr(loc);
        if (seen & (1u << ax)) return error_at(L, at, "%s: axis %d is named twice; give each axis once", c->fn, ax);
        seen |= 1u << ax;
        a.transpose.perm[i] = (int8_t)ax;
    }
    return vtensor(mk(L, OP_TRANSPOSE, &x, 1, loc, &a), loc);
}

/* transpose(x) reverses the axes (a matrix's two); transpose(x, perm=[...]): output
 * axis i is input axis perm[i]. */
static Val b_transpose(Lower *L, Call *c)
{
    int32_t x;
    bool ok;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(c->ast->loc);
    Kw *k = kw_arg(L, c, "perm", false, &ok);
    if (!ok) return verr(c->ast->loc);
    if (!k) {
        int64_t rev[MAX_RANK];
        int rank = node(L, x)->shape.rank;
        for (int i = 0; i < rank; i++) rev[i] = rank - 1 - i;
        return transpose_by(L, c, x, rev, rank, c->ast->loc);
    }
    if (k->val.kind != V_LIST) return error_at(L, k->val.loc, "transpose: 'perm' must be a list of axes, e.g. perm=[0, 2, 1, 3]");
    return transpose_by(L, c, x, k->val.items, k->val.nitems, k->val.loc);
}

/* permute(x, p0, p1, ...): PyTorch's form, one position per axis */
static Val b_permute(Lower *L, Call *c)
{
    int32_t x;
    int64_t perm[MAX_ARGS];
    if (!pos_tensor(L, c, 0, "x", &x)) return verr(c->ast->loc);
    for (int i = 1; i < c->npos; i++) {
        if (c->pos[i].kind != V_NUM || !c->pos[i].is_int)
            return error_at(L, c->pos[i].loc, "permute: axis %d must be an integer", i);
        perm[i - 1] = c->pos[i].ival;
    }
    return transpose_by(L, c, x, perm, c->npos - 1, c->ast->loc);
}

/* The part [start, end) of axis `axis` of x (Python's rule: negative counts from the
 * end; here never empty and never past the end). */
static int32_t slice_node(Lower *L, Call *c, int32_t x, int axis, int64_t start, int64_t end, Loc at, Loc loc)
{
    const Shape *xs = &node(L, x)->shape;
    char b1[128];
    Dim d = xs->d[axis];
    const char *fn = c ? c->fn : "", *colon = c ? ": " : "";
    if (d.sym >= 0) {
        error_at(L, at, "%s%saxis %d of %s is not a known size (the batch cannot be sliced)", fn, colon, axis,
                 shape_str(L->g, xs, b1, sizeof b1));
        return -1;
    }
    int64_t s0 = start < 0 ? start + d.v : start, e0 = end < 0 ? end + d.v : end;
    if (s0 < 0 || e0 > d.v || s0 >= e0) {
        error_at(L, at, "%s%s[%lld:%lld] is not a non-empty part of axis %d of %s (size %lld)", fn, colon, (long long)start,
                 (long long)end, axis, shape_str(L->g, xs, b1, sizeof b1), (long long)d.v);
        return -1;
    }
    if (s0 == 0 && e0 == d.v) return x;
    NodeAttr a;
    memset(&a, 0, sizeof a);
    a.slice.axis = axis;
    a.slice.off = s0;
    a.slice.len = e0 - s0;
    return mk(L, OP_SLICE, &x, 1, loc, &a);
}

static Val b_slice(Lower *L, Call *c)
{
    int32_t x;
    int64_t ax, start, end;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(loc);
    int rank = node(L, x)->shape.rank, axis;
    Kw *k = kw_find(c, "axis");
    if (!kw_int(L, c, "axis", true, 0, INT32_MIN, INT32_MAX, &ax) || !norm_axis(L, c, k->val.loc, ax, rank, &axis))
        return verr(loc);
    int64_t size = node(L, x)->shape.d[axis].sym >= 0 ? 1 : node(L, x)->shape.d[axis].v;
    if (!kw_int(L, c, "start", false, 0, INT64_MIN / 2, INT64_MAX / 2, &start) ||
        !kw_int(L, c, "end", false, size, INT64_MIN / 2, INT64_MAX / 2, &end))
        return verr(loc);
    return vtensor(slice_node(L, c, x, axis, start, end, loc, loc), loc);
}

/* split(x, n, axis=-1): n equal parts along the axis, a tuple for a, b, c = split(...) */
static Val b_split(Lower *L, Call *c)
{
    int32_t x;
    int64_t ax;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x)) return verr(loc);
    if (c->npos < 2 || c->pos[1].kind != V_NUM || !c->pos[1].is_int || c->pos[1].ival < 1 || c->pos[1].ival > MAX_ARGS)
        return error_at(L, c->npos >= 2 ? c->pos[1].loc : loc, "split: give the number of parts (1 to %d), e.g. split(x, 3)",
                        MAX_ARGS);
    if (!no_more_pos(L, c, 2) || !kw_int(L, c, "axis", false, -1, INT32_MIN, INT32_MAX, &ax)) return verr(loc);
    int n = (int)c->pos[1].ival, axis;
    const Shape *xs = &node(L, x)->shape;
    if (!norm_axis(L, c, loc, ax, xs->rank, &axis)) return verr(loc);
    char b1[128];
    Dim d = xs->d[axis];
    if (d.sym >= 0 || d.v % n != 0)
        return error_at(L, loc, "split: axis %d of %s does not split into %d equal parts", axis,
                        shape_str(L->g, xs, b1, sizeof b1), n);
    int32_t *parts = arena_alloc(&L->g->arena, (size_t)n * sizeof *parts);
    if (!parts) return error_at(L, loc, "out of memory");
    int64_t len = d.v / n;
    for (int i = 0; i < n; i++)
        if ((parts[i] = slice_node(L, c, x, axis, i * len, (i + 1) * len, loc, loc)) < 0) return verr(loc);
    Val v;
    memset(&v, 0, sizeof v);
    v.kind = V_TUPLE;
    v.loc = loc;
    v.nodes = parts;
    v.nitems = n;
    return v;
}

/* Whether `base`, the value of a's base, can take a's indices; reported if not. */
NOT_IN_EVAL static bool index_base_ok(Lower *L, const Ast *a, const Val *base)
{
    if (base->kind == V_ERROR) return false;
    if (base->kind != V_TENSOR) {
        error_at(L, base->loc, "only a tensor can be indexed, got %s", val_kind_name(base->kind));
        return false;
    }
    const Shape *s = &node(L, base->node)->shape;
    if (a->u.index.n <= s->rank) return true;
    char b1[128];
    error_at(L, a->loc, "%d indices for %s, which has %d axes", a->u.index.n, shape_str(L->g, s, b1, sizeof b1), s->rank);
    return false;
}

/* x[i, a:b, :] from its values (eval_index): v[0] the tensor, v[1 + 2i] and v[2 + 2i]
 * item i's start and end where written.  A slice per ranged axis; a single index takes
 * one element and drops its axis (a view); axes not named are whole. */
NOT_IN_EVAL static void index_of(Lower *L, const Ast *a, const Val *v, Val *out)
{
    Loc loc = a->loc;
    int32_t x = v[0].node;
    int rank = node(L, x)->shape.rank;
    unsigned dropped = 0;
    *out = verr(loc);
    for (int i = 0; i < a->u.index.n; i++) {
        const AstSlice *it = &a->u.index.items[i];
        if (it->range && !it->start && !it->end) continue;   /* ':' */
        Dim d = node(L, x)->shape.d[i];
        int64_t bound[2] = { it->start ? v[1 + 2 * i].ival : 0, it->end ? v[2 + 2 * i].ival : d.sym < 0 ? d.v : 1 };
        if (!it->range) {   /* [i, i + 1); -1 is the last */
            char b2[128];
            if (d.sym < 0 && (bound[0] < -d.v || bound[0] >= d.v)) {
                *out = error_at(L, it->loc, "index %lld is out of range for axis %d of %s (size %lld)", (long long)bound[0], i,
                                shape_str(L->g, &node(L, x)->shape, b2, sizeof b2), (long long)d.v);
                return;
            }
            bound[1] = bound[0] == -1 ? bound[1] : bound[0] + 1;
            dropped |= 1u << i;
        }
        if ((x = slice_node(L, NULL, x, i, bound[0], bound[1], it->loc, loc)) < 0) return;
    }
    if (dropped) {
        Shape s = { 0, { { 0, -1 } } };
        for (int i = 0; i < rank; i++)
            if (!(dropped & (1u << i))) s.d[s.rank++] = node(L, x)->shape.d[i];
        x = reshape_to(L, x, s, loc);
    }
    *out = vtensor(x, loc);
}

static Val b_batch_matmul(Lower *L, Call *c)
{
    int32_t a, b;
    NodeAttr at;
    memset(&at, 0, sizeof at);
    if (!pos_tensor(L, c, 0, "a", &a) || !pos_tensor(L, c, 1, "b", &b) || !no_more_pos(L, c, 2) ||
        !kw_bool(L, c, "transpose_a", false, &at.matmul.ta) || !kw_bool(L, c, "transpose_b", false, &at.matmul.tb))
        return verr(c->ast->loc);
    int32_t in[2] = { a, b };
    return vtensor(mk(L, OP_BATCH_MATMUL, in, 2, c->ast->loc, &at), c->ast->loc);
}

/* softmax(x, axis=-1), log_softmax(x, axis=-1): along one axis */
static Val b_softmax(Lower *L, Call *c)
{
    int32_t x;
    unsigned mask;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1)) return verr(loc);
    int rank = node(L, x)->shape.rank;
    Kw *k = kw_find(c, "axis");
    if (k && k->val.kind == V_LIST) return error_at(L, k->val.loc, "%s: 'axis' is one axis here", c->fn);
    if (!kw_axes(L, c, "axis", rank, false, &mask)) return verr(loc);
    NodeAttr a;
    memset(&a, 0, sizeof a);
    if (rank > 0) take_last_run(&mask, rank, &a);
    return vtensor(mk(L, (OpKind)c->bi->kind, &x, 1, loc, &a), loc);
}

/* sum, mean, max(x, axis=..., keepdims=false): over every axis by default; the axes
 * named, run by run from the last (so the earlier keep their places); max(a, b) with
 * two operands is the elementwise maximum. */
static Val b_reduce(Lower *L, Call *c)
{
    int32_t x;
    unsigned mask;
    bool keep;
    Loc loc = c->ast->loc;
    OpKind op = (OpKind)c->bi->kind;
    if (op == OP_REDUCE_MAX && c->npos == 2 && c->nkw == 0) return binary(L, OP_MAX, &c->pos[0], &c->pos[1], loc);
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1) || !kw_bool(L, c, "keepdims", false, &keep)) return verr(loc);
    int rank = node(L, x)->shape.rank;
    if (rank == 0) return error_at(L, loc, "%s: needs at least one axis, got a scalar", c->fn);
    if (!kw_axes(L, c, "axis", rank, true, &mask)) return verr(loc);
    int removed = 0;   /* axes after the run already reduced away */
    while (mask && x >= 0) {
        NodeAttr a;
        memset(&a, 0, sizeof a);
        take_last_run(&mask, rank, &a);
        a.axes.after -= removed;
        a.axes.keepdims = keep;
        if (!keep) removed += a.axes.n;
        x = mk(L, op, &x, 1, loc, &a);
    }
    return vtensor(x, loc);
}

/* clip(x, min=, max=): max(min(x, max), min) as two ops (the elementwise pass fuses
 * them), with their gradient: dy inside [min, max], bounds included, as torch.clamp. */
static Val b_clip(Lower *L, Call *c)
{
    int32_t x;
    float lo, hi;
    Loc loc = c->ast->loc;
    bool has_lo = kw_find(c, "min") != NULL, has_hi = kw_find(c, "max") != NULL;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1) || !kw_float(L, c, "min", false, 0, -1e30, 1e30, &lo) ||
        !kw_float(L, c, "max", false, 0, -1e30, 1e30, &hi))
        return verr(loc);
    if (!has_lo && !has_hi) return error_at(L, loc, "clip: give min=, max= or both");
    if (has_lo && has_hi && !(lo <= hi)) return error_at(L, loc, "clip: 'min' (%g) is above 'max' (%g)", lo, hi);
    Val v = vtensor(x, loc);
    Val bound;
    memset(&bound, 0, sizeof bound);
    bound.kind = V_NUM;
    bound.loc = loc;
    if (has_lo) {
        bound.num = lo;
        v = binary(L, OP_MAX, &v, &bound, loc);
    }
    if (has_hi && v.kind == V_TENSOR) {
        bound.num = hi;
        v = binary(L, OP_MIN, &v, &bound, loc);
    }
    return v;
}

/* gelu(x, approximate="none"): the erf form, or "tanh" for the tanh form (gelu_tanh) */
static Val b_gelu(Lower *L, Call *c)
{
    static const char *const forms[] = { "none", "tanh", NULL };
    int32_t x;
    int form;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1) || !kw_choice(L, c, "approximate", "none", forms, &form))
        return verr(c->ast->loc);
    return vtensor(unary_node(L, form ? OP_GELU_TANH : OP_GELU, 0.0f, x, c->ast->loc), c->ast->loc);
}

static Val b_where(Lower *L, Call *c)
{
    int32_t cond;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "cond", &cond)) return verr(loc);
    if (c->npos != 3) return error_at(L, loc, "where: takes 3 arguments (cond, a, b), got %d", c->npos);
    int32_t in[3] = { cond, as_tensor(L, &c->pos[1]), as_tensor(L, &c->pos[2]) };
    if (in[1] < 0 || in[2] < 0) return verr(loc);
    return vtensor(mk(L, OP_WHERE, in, 3, loc, NULL), loc);
}

static Val b_causal_mask(Lower *L, Call *c)
{
    int32_t x;
    NodeAttr a;
    memset(&a, 0, sizeof a);
    if (!pos_tensor(L, c, 0, "scores", &x) || !no_more_pos(L, c, 1) ||
        !kw_float(L, c, "value", false, -1e9, -3e38, 3e38, &a.mask.value))
        return verr(c->ast->loc);
    return vtensor(mk(L, OP_CAUSAL_MASK, &x, 1, c->ast->loc, &a), c->ast->loc);
}

/* A layer's parameter LAYER/WHAT of `shape` (a Keras name). */
static int32_t layer_param(Lower *L, const char *lname, const char *what, int rank, const int64_t *dims, InitKind init,
                           Loc loc)
{
    char pname[600];
    if ((size_t)snprintf(pname, sizeof pname, "%s/%s", lname, what) >= sizeof pname) {
        error_at(L, loc, "the layer name '%s' is too long", lname);
        return -1;
    }
    return param_node(L, pname, shape_make(rank, dims), init, loc);
}

/* embedding(ids, vocab=, dim=): the Keras layer, its table "embedding/embeddings"
 * [vocab, dim] uniform in [-0.05, 0.05) as Keras starts it. */
static Val b_embedding(Lower *L, Call *c)
{
    int32_t ids;
    int64_t vocab, dim;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "ids", &ids) || !no_more_pos(L, c, 1) || !kw_int(L, c, "vocab", true, 0, 1, INT32_MAX, &vocab) ||
        !kw_int(L, c, "dim", true, 0, 1, INT32_MAX, &dim))
        return verr(loc);
    const char *lname = layer_name(L, c, LAYER_EMBEDDING, "embedding");
    if (!lname) return verr(loc);
    int64_t ts[2] = { vocab, dim };
    int32_t t = layer_param(L, lname, "embeddings", 2, ts, INIT_UNIFORM, loc);
    if (t < 0) return verr(loc);
    Var *v = &L->g->vars[node(L, t)->a.param.var];
    v->init_a = -0.05f;
    v->init_b = 0.05f;
    int32_t in[2] = { ids, t };
    return vtensor(mk(L, OP_EMBEDDING, in, 2, loc, NULL), loc);
}

/* layer_norm(x, axis=-1, eps=1e-3): Keras' LayerNormalization over the last axis or
 * axes, its gamma (ones) and beta (zeros) of their shape. */
static Val b_layer_norm(Lower *L, Call *c)
{
    int32_t x;
    unsigned mask;
    NodeAttr a;
    memset(&a, 0, sizeof a);
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1) || !kw_float(L, c, "eps", false, 1e-3, 1e-30, 1, &a.axes.eps))
        return verr(loc);
    const Shape *xs = &node(L, x)->shape;
    char b1[128];
    if (xs->rank < 1) return error_at(L, loc, "layer_norm: needs at least one axis, got a scalar");
    if (!kw_axes(L, c, "axis", xs->rank, false, &mask)) return verr(loc);
    take_last_run(&mask, xs->rank, &a);
    if (mask || a.axes.after != 0)
        return error_at(L, kw_find(c, "axis")->val.loc, "layer_norm: the axes must be the last ones of %s, each once",
                        shape_str(L->g, xs, b1, sizeof b1));
    int64_t ps[MAX_RANK];
    for (int i = 0; i < a.axes.n; i++) {
        Dim d = xs->d[xs->rank - a.axes.n + i];
        if (d.sym >= 0)
            return error_at(L, loc, "layer_norm: the normalized axes of %s must be known sizes", shape_str(L->g, xs, b1, sizeof b1));
        ps[i] = d.v;
    }
    const char *lname = layer_name(L, c, LAYER_LAYER_NORM, "layer_normalization");
    if (!lname) return verr(loc);
    int32_t in[3] = { x, layer_param(L, lname, "gamma", a.axes.n, ps, INIT_ONES, loc),
                      layer_param(L, lname, "beta", a.axes.n, ps, INIT_ZEROS, loc) };
    if (in[1] < 0 || in[2] < 0) return verr(loc);
    return vtensor(mk(L, OP_LAYER_NORM, in, 3, loc, &a), loc);
}

/* One of attention's projections: x2 [rows, din] times LAYER/WHAT/kernel plus
 * LAYER/WHAT/bias.  The kernel keeps Keras' shape kd (the heads an axis of their own:
 * [D, heads, dim] in, [heads, dim, D] out), viewed as [din, dout] where din is the
 * product of its first in_axes axes; the bias (shape bd) as [dout]. */
static int32_t projection(Lower *L, int32_t x2, const char *lname, const char *what, const int64_t *kd, int in_axes,
                          int br, const int64_t *bd, Loc loc)
{
    char sub[256];
    snprintf(sub, sizeof sub, "%s/%s", lname, what);
    int64_t wd[2] = { 1, 1 };
    for (int i = 0; i < 3; i++) wd[i < in_axes ? 0 : 1] *= kd[i];
    int32_t w = layer_param(L, sub, "kernel", 3, kd, INIT_GLOROT_UNIFORM, loc);
    int32_t b = layer_param(L, sub, "bias", br, bd, INIT_ZEROS, loc);
    if (w < 0 || b < 0 || x2 < 0) return -1;
    w = reshape_to(L, w, shape_make(2, wd), loc);
    if (br > 1) b = reshape_to(L, b, shape_make(1, &wd[1]), loc);
    int32_t y = w < 0 ? -1 : mk2(L, OP_MATMUL, x2, w, loc);
    return y < 0 || b < 0 ? -1 : mk2(L, OP_ADD, y, b, loc);
}

/* [rows, H dk] -> [B, H, T, dk]: the heads split off the features, then moved before
 * the positions (a copy). */
static int32_t heads_first(Lower *L, int32_t y, Dim B, int64_t T, int64_t H, int64_t dk, Loc loc)
{
    if (y < 0) return -1;
    y = reshape_to(L, y, (Shape){ 4, { B, { T, -1 }, { H, -1 }, { dk, -1 } } }, loc);
    NodeAttr a;
    memset(&a, 0, sizeof a);
    int8_t perm[4] = { 0, 2, 1, 3 };
    memcpy(a.transpose.perm, perm, sizeof perm);
    return y < 0 ? -1 : mk(L, OP_TRANSPOSE, &y, 1, loc, &a);
}

/* multi_head_attention(x, heads=, dim=, causal=false): self-attention over x [B, T, D],
 * Keras' MultiHeadAttention with the same parameters (query, key, value, each a kernel
 * [D, heads, dim] and a bias [heads, dim]; attention_output, [heads, dim, D] and [D]),
 * lowered to the ops: three projections, the heads split off (reshape, transpose),
 * q scaled by 1/sqrt(dim), scores q k^T (a transpose flag), the causal mask, softmax,
 * the weighted sum of v, the heads joined back and the output projection. */
static Val b_mha(Lower *L, Call *c)
{
    int32_t x;
    int64_t H, dk;
    bool causal;
    Loc loc = c->ast->loc;
    if (!pos_tensor(L, c, 0, "x", &x) || !no_more_pos(L, c, 1) || !kw_int(L, c, "heads", true, 0, 1, 4096, &H) ||
        !kw_bool(L, c, "causal", false, &causal))
        return verr(loc);
    const Shape *xs = &node(L, x)->shape;
    char b1[128];
    if (xs->rank != 3 || xs->d[1].sym >= 0 || xs->d[2].sym >= 0)
        return error_at(L, loc, "multi_head_attention: the input must be [batch, positions, features] with known "
                        "positions and features, got %s", shape_str(L->g, xs, b1, sizeof b1));
    Dim B = xs->d[0];
    int64_t T = xs->d[1].v, D = xs->d[2].v;
    if (!kw_int(L, c, "dim", false, D / H, 1, 1 << 20, &dk)) return verr(loc);
    if (!kw_find(c, "dim") && D % H != 0)
        return error_at(L, loc, "multi_head_attention: %lld features do not split into %lld heads; give dim=", (long long)D,
                        (long long)H);
    const char *lname = layer_name(L, c, LAYER_MHA, "multi_head_attention");
    if (!lname) return verr(loc);
    int32_t x2 = reshape_to(L, x, (Shape){ 2, { { -1, -1 }, { D, -1 } } }, loc);
    int64_t kd[3] = { D, H, dk }, bd[2] = { H, dk };
    int32_t q = heads_first(L, projection(L, x2, lname, "query", kd, 1, 2, bd, loc), B, T, H, dk, loc);
    int32_t k = heads_first(L, projection(L, x2, lname, "key", kd, 1, 2, bd, loc), B, T, H, dk, loc);
    int32_t v = heads_first(L, projection(L, x2, lname, "value", kd, 1, 2, bd, loc), B, T, H, dk, loc);
    if (q < 0 || k < 0 || v < 0) return verr(loc);
    int32_t scale = mk(L, OP_CONST, NULL, 0, loc, &(NodeAttr){ .cnst = { (float)(1.0 / sqrt((double)dk)) } });
    q = scale < 0 ? -1 : mk2(L, OP_MUL, q, scale, loc);
    NodeAttr tb;
    memset(&tb, 0, sizeof tb);
    tb.matmul.tb = true;
    int32_t in[2] = { q, k };
    int32_t s = q < 0 ? -1 : mk(L, OP_BATCH_MATMUL, in, 2, loc, &tb);   /* [B, H, T, T] */
    if (s >= 0 && causal) s = mk(L, OP_CAUSAL_MASK, &s, 1, loc, &(NodeAttr){ .mask = { -1e9f } });
    NodeAttr last;
    memset(&last, 0, sizeof last);
    s = s < 0 ? -1 : mk(L, OP_SOFTMAX, &s, 1, loc, &last);
    int32_t o = s < 0 ? -1 : mk2(L, OP_BATCH_MATMUL, s, v, loc);   /* [B, H, T, dk] */
    NodeAttr back;
    memset(&back, 0, sizeof back);
    int8_t perm[4] = { 0, 2, 1, 3 };
    memcpy(back.transpose.perm, perm, sizeof perm);
    o = o < 0 ? -1 : mk(L, OP_TRANSPOSE, &o, 1, loc, &back);   /* [B, T, H, dk] */
    o = o < 0 ? -1 : reshape_to(L, o, (Shape){ 2, { { -1, -1 }, { H * dk, -1 } } }, loc);
    int64_t od[3] = { H, dk, D };
    o = o < 0 ? -1 : projection(L, o, lname, "attention_output", od, 2, 1, &D, loc);
    o = o < 0 ? -1 : reshape_to(L, o, *xs, loc);
    return vtensor(o, loc);
}

static const Builtin builtins[] = {
    /* Rows that take over an elementwise function's name come first (a name's first row
     * is the one called): max(x, axis=) reduces, max(a, b) is still the function;
     * gelu(x, approximate="tanh") is gelu_tanh. */
    { "max", b_reduce, OP_REDUCE_MAX, { "axis", "keepdims" }, "max(x, axis=-1) or max(a, b)" },
    { "gelu", b_gelu, OP_GELU, { "approximate" }, "gelu(x, approximate=\"tanh\")" },
    /* every elementwise function of util/elemwise.def, by its op's name */
#define BINARY(E, name) { #name, b_binary, OP_##E, { 0 }, #name "(a, b)" },
#define UNARY(E, name, reads, param, def) { #name, b_unary, OP_##E, { param }, #name "(x)" },
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    { "softmax", b_softmax, OP_SOFTMAX, { "axis" }, "softmax(x, axis=-1)" },
    { "log_softmax", b_softmax, OP_LOG_SOFTMAX, { "axis" }, "log_softmax(x, axis=-1)" },
    { "global_avgpool", b_op1, OP_GLOBAL_AVGPOOL, { 0 }, "global_avgpool(x)" },
    { "matmul", b_matmul, OP_MATMUL, { 0 }, "matmul(a, b)" },
    { "dense", b_dense, 0, { "units", "use_bias", "activation", "name" }, "dense(x, units=N)" },
    { "conv2d", b_conv2d, 0, { "filters", "kernel", "stride", "padding", "use_bias", "activation", "name" },
      "conv2d(x, filters=N, kernel=K) or conv2d(x, w)" },
    { "maxpool", b_pool, OP_MAXPOOL, { "size", "stride", "padding" }, "maxpool(x, size=2)" },
    { "avgpool", b_pool, OP_AVGPOOL, { "size", "stride", "padding" }, "avgpool(x, size=2)" },
    { "flatten", b_flatten, 0, { 0 }, "flatten(x)" },
    { "reshape", b_reshape, 0, { 0 }, "reshape(x, d1, d2, ...)" },
    { "concat", b_concat, 0, { "axis" }, "concat(a, b, ..., axis=-1)" },
    { "dropout", b_dropout, 0, { "rate" }, "dropout(x, rate=R)" },
    { "cross_entropy", b_loss, OP_CROSS_ENTROPY, { "label_smoothing" }, "cross_entropy(logits, labels)" },
    { "mse", b_loss, OP_MSE, { 0 }, "mse(prediction, target)" },
    { "zeros", b_init, INIT_ZEROS, { 0 }, "zeros()" },
    { "ones", b_init, INIT_ONES, { 0 }, "ones()" },
    { "constant", b_init, INIT_CONSTANT, { 0 }, "constant(v)" },
    { "uniform", b_init, INIT_UNIFORM, { "low", "high" }, "uniform(low=-0.05, high=0.05)" },
    { "normal", b_init, INIT_NORMAL, { "mean", "stddev" }, "normal(mean=0, stddev=0.05)" },
    { "glorot_uniform", b_init, INIT_GLOROT_UNIFORM, { 0 }, "glorot_uniform()" },
    { "he_normal", b_init, INIT_HE_NORMAL, { 0 }, "he_normal()" },
    { "mnist", b_data, DATA_MNIST, { 0 }, "mnist(\"data/mnist\")" },
    { "synthetic", b_data, DATA_SYNTHETIC, { "count" }, "synthetic(count=N)" },
    /* the transformer family (issue 14) */
    { "transpose", b_transpose, OP_TRANSPOSE, { "perm" }, "transpose(x, perm=[1, 0])" },
    { "permute", b_permute, OP_TRANSPOSE, { 0 }, "permute(x, 0, 2, 1)" },
    { "slice", b_slice, 0, { "axis", "start", "end" }, "slice(x, axis=1, start=0, end=16)" },
    { "split", b_split, 0, { "axis" }, "a, b = split(x, 2, axis=-1)" },
    { "batch_matmul", b_batch_matmul, OP_BATCH_MATMUL, { "transpose_a", "transpose_b" }, "batch_matmul(a, b)" },
    { "sum", b_reduce, OP_REDUCE_SUM, { "axis", "keepdims" }, "sum(x, axis=-1)" },
    { "mean", b_reduce, OP_REDUCE_MEAN, { "axis", "keepdims" }, "mean(x, axis=-1)" },
    { "clip", b_clip, 0, { "min", "max" }, "clip(x, min=0, max=1)" },
    { "where", b_where, OP_WHERE, { 0 }, "where(cond, a, b)" },
    { "causal_mask", b_causal_mask, OP_CAUSAL_MASK, { "value" }, "causal_mask(scores)" },
    { "embedding", b_embedding, 0, { "vocab", "dim", "name" }, "embedding(ids, vocab=V, dim=D)" },
    { "layer_norm", b_layer_norm, 0, { "axis", "eps", "name" }, "layer_norm(x)" },
    { "multi_head_attention", b_mha, 0, { "heads", "dim", "causal", "name" }, "multi_head_attention(x, heads=H)" },
    { "binary_cross_entropy", b_loss, OP_BCE_LOGITS, { 0 }, "binary_cross_entropy(logits, targets)" },
    /* batch norm (graph/bnorm.c) */
    { "batch_norm", b_batch_norm, 0, { "momentum", "eps", "name" }, "batch_norm(x, momentum=0.99, eps=0.001)" },
    { "sgd", b_optim, OPTIM_SGD, { "lr", "momentum", "nesterov", "weight_decay" },
      "sgd(lr=0.01, momentum=0, nesterov=false)" },
    { "adam", b_optim, OPTIM_ADAM, { "lr", "beta1", "beta2", "eps", "weight_decay" }, "adam(lr=0.001)" },
    /* issue 14's optimizers and learning-rate schedules */
    { "adamw", b_optim, OPTIM_ADAMW, { "lr", "beta1", "beta2", "eps", "weight_decay" }, "adamw(lr=0.001, weight_decay=0.01)" },
    { "rmsprop", b_optim, OPTIM_RMSPROP, { "lr", "rho", "eps", "momentum", "centered", "weight_decay" }, "rmsprop(lr=0.01)" },
    { "step_decay", b_sched, SCHED_STEP, { "every", "factor" }, "step_decay(0.1, every=1000, factor=0.5)" },
    { "cosine", b_sched, SCHED_COSINE, { "steps", "min" }, "cosine(0.001, steps=10000, min=0)" },
};
enum { NBUILTINS = sizeof builtins / sizeof builtins[0] };

int lower_builtin_names(const char *const **names)
{
    static const char *list[NBUILTINS];
    for (int i = 0; i < NBUILTINS; i++) list[i] = builtins[i].name;
    *names = list;
    return NBUILTINS;
}

const char *const *lower_builtin_keywords(const char *name)
{
    for (int i = 0; i < NBUILTINS; i++)
        if (strcmp(builtins[i].name, name) == 0) return builtins[i].kwargs;
    return NULL;
}

/* ---- expressions ----------------------------------------------------------------------------- */

static Val eval(Lower *L, const Ast *a);
static void eval_into(Lower *L, const Ast *a, Val *out);

/* Does statement st define `name`? (a, b = split(...) defines both) */
static bool stmt_defines(const Stmt *st, const char *name)
{
    if (st->kind == ST_TRAIN || !st->name) return false;
    if (st->kind != ST_UNPACK) return strcmp(st->name, name) == 0;
    for (int k = 0; k < st->nnames; k++)
        if (strcmp(st->names[k], name) == 0) return true;
    return false;
}

/* Does expression `a` mention `name`? (for telling a cycle from a late definition) */
static bool mentions(const Ast *a, const char *name)
{
    if (!a) return false;
    switch (a->kind) {
    case AST_NAME: return strcmp(a->u.str, name) == 0;
    case AST_CALL:
        for (int i = 0; i < a->u.call.nargs; i++)
            if (mentions(a->u.call.args[i], name)) return true;
        return false;
    case AST_BINARY: return mentions(a->u.bin.l, name) || mentions(a->u.bin.r, name);
    case AST_NEG: return mentions(a->u.neg, name);
    case AST_KWARG: return mentions(a->u.kw.value, name);
    case AST_LIST:
        for (int i = 0; i < a->u.list.n; i++)
            if (mentions(a->u.list.items[i], name)) return true;
        return false;
    case AST_INDEX:
        for (int i = 0; i < a->u.index.n; i++)
            if (mentions(a->u.index.items[i].start, name) || mentions(a->u.index.items[i].end, name)) return true;
        return mentions(a->u.index.base, name);
    default: return false;
    }
}

NOT_IN_EVAL static Val eval_name(Lower *L, const Ast *a)
{
    const char *name = a->u.str;
    Binding *b = lookup(L, name);
    if (b) { Val v = b->val; v.loc = a->loc; return v; }
    if (strcmp(name, "true") == 0 || strcmp(name, "false") == 0) {
        Val v;
        memset(&v, 0, sizeof v);
        v.kind = V_BOOL;
        v.b = name[0] == 't';
        v.loc = a->loc;
        return v;
    }
    for (int i = 0; i < L->g->nsyms; i++)
        if (strcmp(L->g->syms[i], name) == 0) {
            /* a size symbol such as B, usable as a reshape dimension */
            Val v;
            memset(&v, 0, sizeof v);
            v.kind = V_SYM;
            v.count = i;
            v.loc = a->loc;
            return v;
        }
    /* Defined later?  Then it is either a cycle or a use before definition. */
    for (int s = L->cur_stmt + 1; s < L->p->nstmts; s++) {
        const Stmt *st = L->p->stmts[s];
        if (stmt_defines(st, name)) {
            int line, col;
            diag_line_col(L->g->src, st->loc.start, &line, &col);
            if (L->cur_target && mentions(st->expr, L->cur_target))
                return error_at(L, a->loc, "cycle: '%s' uses '%s', which is defined at line %d from '%s'; a model is an acyclic graph",
                                L->cur_target, name, line, L->cur_target);
            return error_at(L, a->loc, "'%s' is used before it is defined (at line %d)", name, line);
        }
    }
    /* After syntax errors, the definition was probably in a statement that did not
     * parse: say nothing rather than something misleading. */
    if (L->quiet_undefined) return verr(a->loc);
    const char *cands[256];
    int n = 0;
    for (int i = 0; i < L->nbinds && n < 256; i++) cands[n++] = L->binds[i].name;
    const char *near = suggest_nearest(name, cands, n);
    for (int i = 0; !near && i < NBUILTINS; i++)
        if (strcmp(builtins[i].name, name) == 0)
            return error_at(L, a->loc, "'%s' is a function: call it, e.g. %s", name, builtins[i].usage);
    if (near) return error_at(L, a->loc, "undefined name '%s'; did you mean '%s'?", name, near);
    return error_at(L, a->loc, "undefined name '%s'", name);
}

NOT_IN_EVAL static void unknown_keyword(Lower *L, const Builtin *bi, const Ast *arg)
{
    const char *fn = bi->name, *k = arg->u.kw.name;
    const char *near = suggest_nearest(k, bi->kwargs, 10);
    if (near) error_at(L, arg->u.kw.name_loc, "%s: unknown keyword argument '%s'; did you mean '%s'?", fn, k, near);
    else if (bi->kwargs[0]) {
        char list[256] = "";
        for (int j = 0; j < 10 && bi->kwargs[j]; j++) {
            strncat(list, j ? ", " : "", sizeof list - strlen(list) - 1);
            strncat(list, bi->kwargs[j], sizeof list - strlen(list) - 1);
        }
        error_at(L, arg->u.kw.name_loc, "%s: unknown keyword argument '%s' (it takes %s)", fn, k, list);
    } else
        error_at(L, arg->u.kw.name_loc, "%s: takes no keyword arguments, got '%s'", fn, k);
}

NOT_IN_EVAL static void unknown_function(Lower *L, const Ast *a)
{
    const char *names[NBUILTINS];
    for (int i = 0; i < NBUILTINS; i++) names[i] = builtins[i].name;
    const char *fn = a->u.call.fn, *near = suggest_nearest(fn, names, NBUILTINS);
    if (near) diag_error(L->d, a->u.call.fn_loc, "unknown function '%s'; did you mean '%s'?", fn, near);
    else diag_error(L->d, a->u.call.fn_loc, "unknown function '%s' (see docs/language.md for the list)", fn);
}

/* verr() into *out, without a temporary in the caller's frame. */
static void set_error(Val *out, Loc loc)
{
    memset(out, 0, sizeof *out);
    out->kind = V_ERROR;
    out->loc = loc;
}

/* [e1, e2, ...]: its items evaluated into a heap array, then checked and combined out
 * of eval's frames (see eval_into), in order, up to the first error. */
static void eval_list(Lower *L, const Ast *a, Val *out)
{
    int n = a->u.list.n;
    Val *v = n <= MAX_ARGS ? gc_calloc((size_t)n + 1, sizeof *v) : NULL;
    bool ok = v != NULL;
    if (n > MAX_ARGS) diag_error(L->d, a->loc, "a list holds at most %d items", MAX_ARGS);
    else if (!v) diag_plain(L->d, "out of memory");
    for (int i = 0; ok && i < n; i++) {
        eval_into(L, a->u.list.items[i], &v[i]);
        ok = int_ok(L, &v[i], "a list holds integers (axes, a permutation)");
    }
    if (ok) list_of(L, v, n, a->loc, out);
    else set_error(out, a->loc);
    gc_free(v);
}

/* base[...]: the base, then each item's start and end (an item that is neither ':'
 * nor a range has a start, an error operand included) into a heap array, in order up to
 * the first error; then index_of.  The same frame discipline as eval_list. */
static void eval_index(Lower *L, const Ast *a, Val *out)
{
    int n = a->u.index.n;
    Val *v = gc_calloc(1 + 2 * (size_t)n, sizeof *v);
    if (!v) {
        diag_plain(L->d, "out of memory");
        set_error(out, a->loc);
        return;
    }
    eval_into(L, a->u.index.base, &v[0]);
    bool ok = index_base_ok(L, a, &v[0]);
    for (int i = 0; ok && i < n; i++) {
        const AstSlice *it = &a->u.index.items[i];
        if (it->start || !it->range) {
            eval_into(L, it->start, &v[1 + 2 * i]);
            ok = int_ok(L, &v[1 + 2 * i], "an index must be an integer");
        }
        if (ok && it->end) {
            eval_into(L, it->end, &v[2 + 2 * i]);
            ok = int_ok(L, &v[2 + 2 * i], "an index must be an integer");
        }
    }
    if (ok) index_of(L, a, v, out);
    else set_error(out, a->loc);
    gc_free(v);
}

/* A Call for `a` and its argument arrays, in one block (gc_free it); NULL after
 * reporting that memory ran out. */
static Call *call_new(Lower *L, const Ast *a, const Builtin *bi)
{
    size_t n = (size_t)a->u.call.nargs;
    Call *c = gc_calloc(1, sizeof *c + n * (sizeof(Val) + sizeof(Kw)));
    if (!c) {
        diag_plain(L->d, "out of memory");
        return NULL;
    }
    c->ast = a;
    c->fn = bi->name;
    c->bi = bi;
    c->pos = (Val *)(c + 1);
    c->kw = (Kw *)(c->pos + n);
    return c;
}

/* Evaluates the arguments of call c.  false when one is in error (reported). */
static bool eval_args(Lower *L, const Builtin *bi, Call *c)
{
    const Ast *a = c->ast;
    const char *fn = c->fn;
    bool bad = false;
    for (int i = 0; i < a->u.call.nargs; i++) {
        const Ast *arg = a->u.call.args[i];
        if (!arg) { bad = true; continue; }
        if (arg->kind != AST_KWARG) {
            if (c->nkw) {
                diag_error(L->d, arg->loc, "%s: positional argument after keyword arguments", fn);
                bad = true;
            }
            eval_into(L, arg, &c->pos[c->npos++]);
            continue;
        }
        const char *k = arg->u.kw.name;
        bool known = false;
        for (int j = 0; j < 10 && bi->kwargs[j]; j++)
            if (strcmp(bi->kwargs[j], k) == 0) known = true;
        if (!known) {
            unknown_keyword(L, bi, arg);
            bad = true;
            continue;
        }
        for (int j = 0; j < c->nkw; j++)
            if (strcmp(c->kw[j].name, k) == 0) {
                diag_error(L->d, arg->u.kw.name_loc, "%s: keyword argument '%s' given twice", fn, k);
                bad = true;
            }
        c->kw[c->nkw].name = k;
        c->kw[c->nkw].name_loc = arg->u.kw.name_loc;
        eval_into(L, arg->u.kw.value, &c->kw[c->nkw].val);
        c->nkw++;
    }
    for (int i = 0; i < c->npos; i++) bad |= c->pos[i].kind == V_ERROR;
    return !bad;
}

NOT_IN_EVAL static void apply(Lower *L, const Builtin *bi, Call *c, Val *out) { *out = bi->fn(L, c); }

static void eval_call(Lower *L, const Ast *a, Val *out)
{
    const char *fn = a->u.call.fn;
    const Builtin *bi = NULL;
    for (int i = 0; i < NBUILTINS; i++)
        if (strcmp(builtins[i].name, fn) == 0) { bi = &builtins[i]; break; }
    if (!bi) {
        unknown_function(L, a);
    } else if (a->u.call.nargs > MAX_ARGS) {
        diag_error(L->d, a->loc, "%s: too many arguments (at most %d)", fn, MAX_ARGS);
    } else {
        Call *c = call_new(L, a, bi);
        bool ok = c && eval_args(L, bi, c);
        if (ok) apply(L, bi, c, out);
        gc_free(c);
        if (ok) return;
    }
    set_error(out, a->loc);
}

NOT_IN_EVAL static void eval_leaf(Lower *L, const Ast *a, Val *out)
{
    Val v;
    memset(&v, 0, sizeof v);
    v.loc = a->loc;
    switch (a->kind) {
    case AST_INT: v.kind = V_NUM; v.num = (double)a->u.ival; v.ival = a->u.ival; v.is_int = true; break;
    case AST_FLOAT: v.kind = V_NUM; v.num = a->u.fval; break;
    case AST_STRING: v.kind = V_STR; v.str = a->u.str; break;
    case AST_NAME: v = eval_name(L, a); break;
    case AST_KWARG: v = error_at(L, a->loc, "keyword argument '%s=' outside a call", a->u.kw.name); break;
    default: v = verr(a->loc); break;
    }
    *out = v;
}

/* An operator applied to its operands' values. */
NOT_IN_EVAL static void combine(Lower *L, const Ast *a, const Val *v, Val *out)
{
    Loc loc = a->loc;
    if (a->kind == AST_BINARY) {
        char o = a->u.bin.op;
        *out = binary(L, o == '+' ? OP_ADD : o == '-' ? OP_SUB : o == '*' ? OP_MUL : OP_DIV, &v[0], &v[1], loc);
    } else if (v->kind == V_NUM) {
        *out = *v;
        out->num = -v->num;
        out->ival = -v->ival;
        out->loc = loc;
    } else if (v->kind == V_TENSOR) {
        *out = vtensor(mk1(L, OP_NEG, v->node, loc), loc);
    } else {
        *out = v->kind == V_ERROR ? verr(loc) : error_at(L, loc, "cannot negate %s", val_kind_name(v->kind));
    }
}

/* The value of expression `a` into *out.  Recurses once per level of the tree, which
 * the parser keeps within AST_MAX_DEPTH; so its frames hold only pointers: operands are
 * evaluated into heap arrays, and combined by NOT_IN_EVAL functions, whose frames are
 * on the stack only while they run (tests/deep.sh measures what that takes). */
static void eval_into(Lower *L, const Ast *a, Val *out)
{
    if (!a) {
        set_error(out, (Loc){ 0, 0 });
        return;
    }
    assert(a->height <= AST_MAX_DEPTH);
    switch (a->kind) {
    case AST_CALL: eval_call(L, a, out); return;
    case AST_LIST: eval_list(L, a, out); return;
    case AST_INDEX: eval_index(L, a, out); return;
    default: break;
    }
    if (a->kind != AST_BINARY && a->kind != AST_NEG) {
        eval_leaf(L, a, out);
        return;
    }
    bool bin = a->kind == AST_BINARY;
    Val *v = gc_calloc(bin ? 2 : 1, sizeof *v);
    if (!v) {
        diag_plain(L->d, "out of memory");
        set_error(out, a->loc);
        return;
    }
    eval_into(L, bin ? a->u.bin.l : a->u.neg, &v[0]);
    if (bin) eval_into(L, a->u.bin.r, &v[1]);
    combine(L, a, v, out);
    gc_free(v);
}

static Val eval(Lower *L, const Ast *a)
{
    Val v;
    eval_into(L, a, &v);
    return v;
}

/* ---- statements ------------------------------------------------------------------------------ */

static bool lower_type(Lower *L, const AstType *t, const char *what, Shape *shape, DType *dt, bool allow_sym)
{
    if (strcmp(t->dtype, "f32") == 0) *dt = DT_F32;
    else if (strcmp(t->dtype, "i32") == 0) *dt = DT_I32;
    else {
        error_at(L, t->dtype_loc, "unknown dtype '%s'; graphc supports f32 and i32", t->dtype);
        return false;
    }
    if (t->rank > MAX_RANK) {
        error_at(L, t->loc, "%s has %d dimensions; at most %d are supported", what, t->rank, MAX_RANK);
        return false;
    }
    shape->rank = t->rank;
    for (int i = 0; i < t->rank; i++) {
        const AstDim *ad = &t->dims[i];
        if (ad->is_sym) {
            if (!allow_sym) {
                error_at(L, ad->loc, "%s: dimension '%s' must be a number (parameters have fixed shapes)", what, ad->sym);
                return false;
            }
            int s = graph_sym(L->g, ad->sym);
            if (s < 0) {
                error_at(L, ad->loc, "too many size symbols (at most %d)", MAX_SYMS);
                return false;
            }
            shape->d[i] = (Dim){ 1, (int16_t)s };
            continue;
        }
        if (ad->value < 1) {
            error_at(L, ad->loc, "%s: dimension %d is %lld; sizes must be at least 1", what, i, (long long)ad->value);
            return false;
        }
        shape->d[i] = (Dim){ ad->value, -1 };
    }
    char whatc[300];
    snprintf(whatc, sizeof whatc, "%s:", what);
    return graph_size_ok(L->g, shape, *dt, whatc, t->loc, L->d);
}

static void lower_input(Lower *L, const Stmt *s)
{
    for (int i = 0; i < L->g->ninputs; i++) {
        const Node *in = node(L, L->g->inputs[i]);
        if (strcmp(in->name, s->name) == 0) {
            int line, col;
            diag_line_col(L->g->src, in->loc.start, &line, &col);
            error_at(L, s->name_loc, "input '%s' is already declared at line %d", s->name, line);
            return;
        }
    }
    Shape shape;
    DType dt;
    char what[300];
    snprintf(what, sizeof what, "input '%s'", s->name);
    if (!lower_type(L, &s->type, what, &shape, &dt, true)) { bind(L, s->name, verr(s->loc)); return; }
    int32_t id = graph_add(L->g, OP_INPUT, NULL, 0, s->loc);
    if (id < 0) return;
    Node *n = &L->g->nodes[id];
    n->tshape = shape;
    n->dtype = dt;
    n->name = arena_strdup(&L->g->arena, s->name);   /* the tree may be freed before the graph */
    n->a.input.index = L->g->ninputs;
    graph_infer_node(L->g, id, L->d);
    int32_t *ins = arena_alloc(&L->g->arena, (size_t)(L->g->ninputs + 1) * sizeof *ins);
    if (!ins) return;
    if (L->g->ninputs) memcpy(ins, L->g->inputs, (size_t)L->g->ninputs * sizeof *ins);
    ins[L->g->ninputs++] = id;
    L->g->inputs = ins;
    bind(L, s->name, vtensor(id, s->loc));
}

static void lower_param(Lower *L, const Stmt *s)
{
    Shape shape;
    DType dt;
    char what[300];
    snprintf(what, sizeof what, "param '%s'", s->name);
    if (find_var(L->g, s->name) >= 0) {
        error_at(L, s->name_loc, "param '%s' is already declared", s->name);
        return;
    }
    if (!lower_type(L, &s->type, what, &shape, &dt, false)) { bind(L, s->name, verr(s->loc)); return; }
    if (dt != DT_F32) {
        error_at(L, s->type.dtype_loc, "param '%s' must be f32 (parameters are trained)", s->name);
        bind(L, s->name, verr(s->loc));
        return;
    }
    L->in_param_init = true;
    Val init = eval(L, s->expr);
    L->in_param_init = false;
    InitKind kind = INIT_ZEROS;
    float ia = 0, ib = 0;
    if (init.kind == V_NUM) { kind = INIT_CONSTANT; ia = (float)init.num; }
    else if (init.kind == V_INIT) { kind = init.init; ia = init.ia; ib = init.ib; }
    else {
        if (init.kind != V_ERROR)
            error_at(L, init.loc, "param '%s': the initializer must be a number or one of glorot_uniform(), he_normal(), "
                     "zeros(), ones(), constant(v), uniform(...), normal(...)", s->name);
        bind(L, s->name, verr(s->loc));
        return;
    }
    int32_t id = param_node(L, s->name, shape, kind, s->loc);
    if (id >= 0) {
        Var *v = &L->g->vars[L->g->nodes[id].a.param.var];
        v->init_a = ia;
        v->init_b = ib;
        v->loc = s->name_loc;
    }
    bind(L, s->name, vtensor(id, s->loc));
}

static void name_node(Lower *L, Val v, const char *name)
{
    if (v.kind == V_TENSOR && !L->g->nodes[v.node].name) L->g->nodes[v.node].name = arena_strdup(&L->g->arena, name);
}

static void lower_assign(Lower *L, const Stmt *s)
{
    if (strcmp(s->name, "true") == 0 || strcmp(s->name, "false") == 0) {
        error_at(L, s->name_loc, "'%s' is a constant and cannot be assigned", s->name);
        return;
    }
    Val v = eval(L, s->expr);
    if (v.kind == V_INIT) v = error_at(L, v.loc, "an initializer can only follow 'param NAME: TYPE ='");
    if (v.kind == V_SYM) v = error_at(L, v.loc, "'%s' is a size symbol, bound when the model runs; it can only be a dimension",
                                      L->g->syms[v.count]);
    if (v.kind == V_DATA || v.kind == V_OPTIM) v = error_at(L, v.loc, "a %s belongs in the train block", val_kind_name(v.kind));
    if (v.kind == V_TUPLE)
        v = error_at(L, v.loc, "this gives %d tensors: assign each to a name, e.g. '%s, %s_1 = ...'", v.nitems, s->name, s->name);
    if (v.kind == V_LIST) v = error_at(L, v.loc, "a list is not a value; it can only be an argument (axis=[1, 2])");
    name_node(L, v, s->name);
    bind(L, s->name, v);
}

/* a, b, c = split(...): one name per tensor of a tuple, in order. */
static void lower_unpack(Lower *L, const Stmt *s)
{
    Loc names = { s->name_locs[0].start, s->name_locs[s->nnames - 1].end };
    for (int k = 0; k < s->nnames; k++)
        for (int j = 0; j < k; j++)
            if (strcmp(s->names[j], s->names[k]) == 0) {
                error_at(L, s->name_locs[k], "'%s' is assigned twice in one statement", s->names[k]);
                for (int i = 0; i < s->nnames; i++) bind(L, s->names[i], verr(s->loc));
                return;
            }
    Val v = eval(L, s->expr);
    if (v.kind == V_TUPLE && v.nitems != s->nnames)
        v = error_at(L, names, "%d names for the %d tensors of %s", s->nnames, v.nitems,
                     s->expr->kind == AST_CALL ? s->expr->u.call.fn : "the value");
    else if (v.kind != V_TUPLE && v.kind != V_ERROR)
        v = error_at(L, s->expr->loc, "%d names for one %s: only a function of several tensors (split) can be unpacked",
                     s->nnames, val_kind_name(v.kind));
    for (int k = 0; k < s->nnames; k++) {
        if (strcmp(s->names[k], "true") == 0 || strcmp(s->names[k], "false") == 0) {
            error_at(L, s->name_locs[k], "'%s' is a constant and cannot be assigned", s->names[k]);
            continue;
        }
        Val one = v.kind == V_TUPLE ? vtensor(v.nodes[k], s->name_locs[k]) : verr(s->loc);
        name_node(L, one, s->names[k]);
        bind(L, s->names[k], one);
    }
}

static void lower_output(Lower *L, const Stmt *s)
{
    Val v;
    if (s->expr) {
        lower_assign(L, s);
        Binding *b = lookup(L, s->name);
        if (!b) return;   /* out of memory, or an error already reported */
        v = b->val;
    } else {
        Ast name = { .kind = AST_NAME, .loc = s->name_loc, .u.str = s->name };
        v = eval_name(L, &name);
    }
    if (v.kind == V_ERROR) return;
    if (v.kind != V_TENSOR) {
        error_at(L, s->name_loc, "output '%s' must be a tensor, got %s", s->name, val_kind_name(v.kind));
        return;
    }
    for (int i = 0; i < L->g->noutputs; i++)
        if (strcmp(L->g->outputs[i].name, s->name) == 0) {
            error_at(L, s->name_loc, "output '%s' is already declared", s->name);
            return;
        }
    graph_add_output(L->g, s->name, v.node);
}

static const char *const train_keys[] = {
    "data", "optimizer", "batch", "epochs", "steps", "seed", "minimize", "checkpoint", "shuffle",
    "lr", "warmup", "clip_norm",   /* issue 14: schedules and clipping (train_optim_entry) */
    NULL,
};
enum { TRAIN_KEY_LR = 9, TRAIN_KEY_WARMUP, TRAIN_KEY_CLIP, NTRAIN_KEYS };

const char *const *lower_train_keys(void) { return train_keys; }

static bool entry_int(Lower *L, const TrainEntry *e, Val v, int64_t lo, int64_t hi, int64_t *out)
{
    if (v.kind == V_ERROR) return false;
    if (v.kind != V_NUM || !v.is_int || v.num < (double)lo || v.num > (double)hi) {
        error_at(L, v.loc, "train: '%s' must be an integer from %lld to %lld", e->key, (long long)lo, (long long)hi);
        return false;
    }
    *out = v.ival;
    return true;
}

/* The train block's lr (a number or a schedule), warmup and clip_norm.  false when the
 * value is not taken (an error reported, now or before). */
static bool train_optim_entry(Lower *L, const TrainEntry *e, int k, Val v)
{
    TrainSpec *t = &L->g->train;
    int64_t iv;
    if (v.kind == V_ERROR) return false;
    if (k == TRAIN_KEY_LR) {
        if (v.kind == V_SCHED) {
            int64_t warmup = t->sched.warmup;
            t->lr = v.lr;
            t->sched = v.sched;
            t->sched.warmup = warmup;
            return true;
        }
        if (v.kind == V_NUM && v.num > 0 && v.num <= 1e6) {
            t->lr = (float)v.num;
            return true;
        }
        error_at(L, v.loc, "train: 'lr' must be a number above 0 (at most 1e6) or a schedule: step_decay(...), cosine(...)");
        return false;
    }
    if (k == TRAIN_KEY_WARMUP) {
        if (!entry_int(L, e, v, 0, 1 << 30, &iv)) return false;
        t->sched.warmup = iv;
        return true;
    }
    if (v.kind == V_NUM && v.num > 0 && v.num <= 1e30) {
        t->clip_norm = (float)v.num;
        return true;
    }
    error_at(L, v.loc, "train: 'clip_norm' must be a number above 0 (the largest global norm of the gradients)");
    return false;
}

static void lower_train(Lower *L, const Stmt *s)
{
    TrainSpec *t = &L->g->train;
    if (t->present) {
        error_at(L, s->loc, "a model has one train block");
        return;
    }
    t->present = true;
    t->loc = s->loc;
    bool seen[NTRAIN_KEYS] = { false };
    Val optim = verr(s->loc), lr = verr(s->loc);   /* the entries' values, checked together last */
    for (int i = 0; i < s->nentries; i++) {
        const TrainEntry *e = &s->entries[i];
        int k = 0;
        while (train_keys[k] && strcmp(train_keys[k], e->key) != 0) k++;
        if (!train_keys[k]) {
            const char *near = suggest_nearest(e->key, train_keys, NTRAIN_KEYS);
            if (near) error_at(L, e->key_loc, "train: unknown setting '%s'; did you mean '%s'?", e->key, near);
            else error_at(L, e->key_loc, "train: unknown setting '%s' (settings: data, optimizer, batch, epochs, steps, "
                          "seed, minimize, checkpoint, shuffle, lr, warmup, clip_norm)", e->key);
            continue;
        }
        if (seen[k]) { error_at(L, e->key_loc, "train: '%s' is set twice", e->key); continue; }
        seen[k] = true;
        L->in_train = true;
        Val v = eval(L, e->value);
        L->in_train = false;
        int64_t iv;
        switch (k) {
        case 0:
            if (v.kind == V_DATA) {
                t->data = v.data;
                t->data_path = v.str;   /* resolved, in the graph's arena (b_data) */
                t->synth_count = v.count;
            } else if (v.kind != V_ERROR)
                error_at(L, v.loc, "train: 'data' must be mnist(\"folder\") or synthetic(count=N)");
            break;
        case 1:
            if (v.kind == V_OPTIM) {
                t->optim = v.optim;
                if (!seen[TRAIN_KEY_LR]) t->lr = v.lr;
                t->momentum = v.momentum;
                t->nesterov = v.nesterov;
                t->beta1 = v.beta1;
                t->beta2 = v.beta2;
                t->eps = v.eps;
                t->weight_decay = v.weight_decay;
                t->rho = v.rho;
                t->centered = v.centered;
                optim = v;
            } else if (v.kind != V_ERROR)
                error_at(L, v.loc, "train: 'optimizer' must be sgd(...), adam(...), adamw(...) or rmsprop(...)");
            break;
        case 2: if (entry_int(L, e, v, 1, 1 << 24, &iv)) t->batch = iv; break;
        case 3: if (entry_int(L, e, v, 1, 1 << 30, &iv)) t->epochs = iv; break;
        case 4: if (entry_int(L, e, v, 1, 1 << 30, &iv)) t->steps = iv; break;
        case 5: if (entry_int(L, e, v, 0, INT64_MAX, &iv)) t->seed = (uint64_t)iv; break;
        case 6:
            if (v.kind == V_TENSOR) {
                if (node(L, v.node)->shape.rank != 0) {
                    char b1[128];
                    error_at(L, v.loc, "train: 'minimize' must be a scalar loss, got a tensor of shape %s",
                             shape_str(L->g, &node(L, v.node)->shape, b1, sizeof b1));
                } else
                    t->minimize = v.node;
            } else if (v.kind != V_ERROR)
                error_at(L, v.loc, "train: 'minimize' must name the loss value, got %s", val_kind_name(v.kind));
            break;
        case 7:
            if (v.kind == V_STR) t->checkpoint = lower_path(L, v.str, v.loc);
            else if (v.kind != V_ERROR) error_at(L, v.loc, "train: 'checkpoint' must be a path string");
            break;
        case 8:
            if (v.kind == V_BOOL) t->shuffle = v.b;
            else if (v.kind != V_ERROR) error_at(L, v.loc, "train: 'shuffle' must be true or false");
            break;
        default:
            if (train_optim_entry(L, e, k, v) && k == TRAIN_KEY_LR) lr = v;
            break;
        }
    }
    if (optim.lr_given && lr.kind != V_ERROR && seen[TRAIN_KEY_LR]) {
        int line, col;
        diag_line_col(L->g->src, optim.loc.start, &line, &col);
        error_at(L, lr.loc, "train: the learning rate is set twice: here and by lr= in the optimizer at line %d; "
                 "keep one", line);
    }
    if (!seen[0]) error_at(L, s->loc, "train: missing 'data' (e.g. data = mnist(\"data/mnist\"))");
    if (!seen[6]) error_at(L, s->loc, "train: missing 'minimize' (the loss to minimize)");
}

static void set_train_defaults(TrainSpec *t)
{
    t->data = DATA_NONE;
    t->optim = OPTIM_SGD;
    t->lr = 0.01f;
    t->beta1 = 0.9f;
    t->beta2 = 0.999f;
    t->eps = 1e-7f;
    t->rho = 0.99f;
    t->batch = 32;
    t->epochs = 1;
    t->steps = 0;
    t->seed = 42;
    t->shuffle = true;
    t->synth_count = 4096;
    t->minimize = -1;
}

Graph *lower_program(const Program *p, const Source *src, DiagSink *d)
{
    Graph *g = graph_new(src);
    if (!g) { diag_plain(d, "out of memory"); return NULL; }
    Lower L;
    memset(&L, 0, sizeof L);
    L.g = g;
    L.d = d;
    L.p = p;
    L.quiet_undefined = d->nerrors > 0;
    set_train_defaults(&g->train);
    g->model_name = p->model_name ? arena_strdup(&g->arena, p->model_name) : NULL;
    for (int i = 0; i < p->nstmts; i++) {
        const Stmt *s = p->stmts[i];
        L.cur_stmt = i;
        L.cur_target = s->name;
        switch (s->kind) {
        case ST_INPUT: lower_input(&L, s); break;
        case ST_PARAM: lower_param(&L, s); break;
        case ST_ASSIGN: lower_assign(&L, s); break;
        case ST_UNPACK: lower_unpack(&L, s); break;
        case ST_OUTPUT: lower_output(&L, s); break;
        case ST_TRAIN: lower_train(&L, s); break;
        case ST_KIND_COUNT: break;
        }
    }
    if (L.quiet_undefined) return g;
    if (d->nerrors == 0 && g->ninputs == 0)
        diag_error(d, (p->nstmts ? p->stmts[0]->loc : (Loc){ 0, 0 }), "the model declares no input (e.g. 'input x: f32[B, 4]')");
    if (d->nerrors == 0 && g->noutputs == 0 && g->train.minimize < 0)
        diag_error(d, p->stmts[p->nstmts - 1]->loc, "the model has no output and no train block: nothing to compute");
    if (g->arena.failed) diag_plain(d, "out of memory");
    return g;
}

int compile_source(const Source *src, DiagSink *d, Program **prog, Graph **out)
{
    *out = NULL;
    if (prog) *prog = NULL;
    Program *p = parse_program(src, d);
    if (!p) return -1;
    int syntax_errors = d->nerrors;
    if (syntax_errors && p->nstmts == 0) {
        if (prog) *prog = p; else ast_free(p);
        return -1;
    }
    /* Lowered even after syntax errors, so one run reports every error in the file. */
    Graph *g = lower_program(p, src, d);
    if (prog) *prog = p; else ast_free(p);
    if (!g || d->nerrors) { graph_free(g); return -1; }
    *out = g;
    return 0;
}
