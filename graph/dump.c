/* Dumps of a graph at any stage: text (stable, for people and golden tests), dot
 * (Graphviz) and json (for tools; the schema is in docs/dump-formats.md). */
#include <stdarg.h>
#include <string.h>
#include "graph/graph.h"

static void loc_lc(const Graph *g, Loc l, int *line, int *col)
{
    if (g->src) diag_line_col(g->src, l.start, line, col);
    else *line = *col = 0;
}

/* A unary function with its parameter when it takes one: "relu", "leaky_relu(0.2)". */
static const char *fn_name(int op, float p, char *buf, size_t len)
{
    if ((unsigned)op >= OP_COUNT) return "?";
    if (!op_info[op].param) return op_name((OpKind)op);
    snprintf(buf, len, "%s(%g)", op_name((OpKind)op), p);
    return buf;
}

/* Appends to buf[len] at *at, as far as it fits. */
static void put(char *buf, size_t len, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
    if (*at >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    if (k > 0) *at += (size_t)k;
}

/* The run of axes of an op along axes (counted from the end: the last is -1), and its
 * flags; nothing for the softmax family along the last axis, as before there was a
 * choice. */
static void axes_str(const Graph *g, const Node *n, char *buf, size_t len)
{
    int k = n->a.axes.n > 0 ? n->a.axes.n : 1, last = -1 - n->a.axes.after;
    size_t at = 0;
    bool softmax = n->op == OP_SOFTMAX || n->op == OP_LOG_SOFTMAX || n->op == OP_SOFTMAX_GRAD || n->op == OP_LOG_SOFTMAX_GRAD;
    buf[0] = 0;
    if (!softmax || last != -1) {
        if (k == 1) put(buf, len, &at, "axis=%d", last);
        else put(buf, len, &at, "axes=%d..%d", last - k + 1, last);
    }
    if (n->a.axes.keepdims) put(buf, len, &at, " keepdims");
    if (n->a.axes.mean) put(buf, len, &at, " mean");
    if (n->op == OP_LAYER_NORM || n->op == OP_LAYER_NORM_GRAD || n->op == OP_LAYER_NORM_GRAD_SCALE ||
        n->op == OP_LAYER_NORM_GRAD_ADD)
        put(buf, len, &at, " eps=%g", n->a.axes.eps);
    if (n->op == OP_EXPAND) {
        char b1[128];
        put(buf, len, &at, " to=%s", shape_str(g, &n->tshape, b1, sizeof b1));
    }
}

static const char *role_name(VarRole r) { return r == VAR_PARAM ? "param" : r == VAR_STATE ? "state" : "buffer"; }

/* batch norm's: "eps=0.001 momentum=0.99[ act=relu]" */
static void bn_attrs(const Node *n, char *buf, size_t len)
{
    char fb[64];
    snprintf(buf, len, "eps=%g momentum=%g%s%s", n->a.bn.eps, n->a.bn.momentum, n->a.bn.act >= 0 ? " act=" : "",
             n->a.bn.act >= 0 ? fn_name(n->a.bn.act, n->a.bn.act_p, fb, sizeof fb) : "");
}

/* "window=3x3 stride=1x1 padding=same(1,1,1,1)", each key after `prefix` */
static void put_window(char *buf, size_t len, size_t *at, const char *prefix, const WinAttr *w)
{
    put(buf, len, at, "%s%s=%dx%d %s%sstride=%dx%d %s%spadding=%s(%d,%d,%d,%d)", *at ? " " : "", *prefix ? prefix : "window",
        w->kh, w->kw, prefix, *prefix ? "_" : "", w->sh, w->sw, prefix, *prefix ? "_" : "",
        w->padding == PAD_SAME ? "same" : "valid", w->pt, w->pb, w->pl, w->pr);
}

/* "+relu" for a fused activation, nothing without one */
static void put_act(char *buf, size_t len, size_t *at, int act, float act_p)
{
    char fb[64];
    if (act >= 0) put(buf, len, at, "+%s", fn_name(act, act_p, fb, sizeof fb));
}

/* The ops that fusion made: which ops each fuses, and their own attributes. */
static void fused_attrs(const Node *n, char *buf, size_t len)
{
    size_t at = 0;
    char fb[64];
    switch (n->op) {
    case OP_MATMUL_BIAS_ACT:
        put(buf, len, &at, "fuses=matmul+add");
        put_act(buf, len, &at, n->a.matmul.act, n->a.matmul.act_p);
        put(buf, len, &at, "%s%s", n->a.matmul.ta ? " transpose=a" : "", n->a.matmul.tb ? " transpose=b" : "");
        break;
    case OP_CONV2D_BIAS_ACT:
        put(buf, len, &at, "fuses=conv2d+add");
        put_act(buf, len, &at, n->a.win.act, n->a.win.act_p);
        put_window(buf, len, &at, "", &n->a.win);
        break;
    case OP_CONV2D_MAXPOOL: case OP_CONV2D_MAXPOOL_ARGMAX:
        put(buf, len, &at, "fuses=conv2d%s", n->nin == 3 ? "+add" : "");
        put_act(buf, len, &at, n->a.convpool.conv.act, n->a.convpool.conv.act_p);
        put(buf, len, &at, n->op == OP_CONV2D_MAXPOOL ? "+maxpool" : "+maxpool_argmax");
        put_window(buf, len, &at, "", &n->a.convpool.conv);
        put_window(buf, len, &at, "pool", &n->a.convpool.pool);
        break;
    case OP_CONV2D_GRAD_FILTER_POOLED: case OP_SUM_TO_POOLED:
        put(buf, len, &at, "fuses=maxpool_scatter%s+%s", n->a.convpool.pool.act >= 0 ? "_relu" : "",
            n->op == OP_SUM_TO_POOLED ? "sum_to" : "conv2d_grad_filter");
        put_window(buf, len, &at, "", &n->a.convpool.conv);
        put_window(buf, len, &at, "pool", &n->a.convpool.pool);
        break;
    case OP_MAXPOOL_GRAD_RELU:
        put(buf, len, &at, "fuses=maxpool_grad+relu_grad window=%dx%d stride=%dx%d", n->a.win.kh, n->a.win.kw,
            n->a.win.sh, n->a.win.sw);
        break;
    case OP_FUSED_ELEMWISE:
        put(buf, len, &at, "fuses=");
        for (int s = 0; s < n->a.ew.nstep; s++) {
            const EwStep *st = &n->a.ew.step[s];
            const char *name = op_has((OpKind)st->op, OPT_UNARY) ? fn_name(st->op, st->p, fb, sizeof fb) : op_name((OpKind)st->op);
            put(buf, len, &at, "%s%s", s ? "+" : "", name);
            if (st->op == OP_UNARY_GRAD) put(buf, len, &at, "[%s]", fn_name(st->of, st->p, fb, sizeof fb));
        }
        break;
    default: break;
    }
}

/* The optimizer updates, plain and fused, clipping and batch norm's running statistics. */
static void update_attrs(const Graph *g, const Node *n, char *buf, size_t len)
{
    size_t at = 0;
    const char *kind = (unsigned)n->a.update.kind < OP_COUNT ? op_name((OpKind)n->a.update.kind) : "?";
    switch (n->op) {
    case OP_MATMUL_UPDATE:
        put(buf, len, &at, "param=%s fuses=matmul+%s%s%s", g->vars[n->a.update.var].name, kind,
            n->a.update.ta ? " transpose=a" : "", n->a.update.tb ? " transpose=b" : "");
        for (int s = 0; s < OPTIM_MAX_STATE; s++) {   /* the optimizer state it updates */
            int v = n->a.update.state[s];
            if (v >= 0) put(buf, len, &at, "%s%s", s ? "," : " state=", g->vars[v].name);
        }
        break;
    case OP_MATMUL_GRAD_UPDATE:
        put(buf, len, &at, "param=%s fuses=matmul+unary_grad[relu]+%s", g->vars[n->a.update.var].name, kind);
        break;
    case OP_BATCH_NORM_UPDATE:
        put(buf, len, &at, "mean=%s variance=%s momentum=%g", g->vars[n->a.update.var].name,
            g->vars[n->a.update.state[0]].name, n->a.update.momentum);
        break;
    case OP_UPDATE_ALL:
        put(buf, len, &at, "fuses=%d %s%s", n->nin / 2, op_name((OpKind)n->a.update.kind), n->nin % 2 ? " clipped" : "");
        break;
    case OP_CLIP_SCALE: put(buf, len, &at, "max_norm=%g gradients=%d", n->a.clip.max_norm, n->nin); break;
    default:   /* sgd_update, momentum_update, ... */
        put(buf, len, &at, "param=%s%s", g->vars[n->a.update.var].name, n->nin > 2 ? " clipped" : "");
        break;
    }
}

/* The transformer ops' attributes (issue 14). */
static void seq_attrs(const Graph *g, const Node *n, char *buf, size_t len)
{
    size_t at = 0;
    char b1[128];
    switch (n->op) {
    case OP_TRANSPOSE:
        put(buf, len, &at, "perm=[");
        for (int i = 0; i < n->shape.rank; i++) put(buf, len, &at, "%s%d", i ? "," : "", n->a.transpose.perm[i]);
        put(buf, len, &at, "]");
        break;
    case OP_CAUSAL_MASK: case OP_SOFTMAX_CAUSAL: case OP_SOFTMAX_GRAD_CAUSAL:
        put(buf, len, &at, "value=%g", n->a.mask.value);
        break;
    case OP_ATTENTION: case OP_ATTENTION_PROBS: case OP_ATTENTION_OUT: case OP_ATTENTION_GRAD:
        put(buf, len, &at, "scale=%g", n->a.attn.scale);
        if (n->a.attn.causal) put(buf, len, &at, " causal value=%g", n->a.attn.value);
        break;
    case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_GRAD:
        if (n->a.loss.smoothing != 0) put(buf, len, &at, "label_smoothing=%g", n->a.loss.smoothing);
        break;
    case OP_BCE_LOGITS_GRAD: put(buf, len, &at, "wrt=%s", n->a.loss.wrt_target ? "targets" : "logits"); break;
    case OP_SLICE_GRAD:
        put(buf, len, &at, "axis=%d offsets=", n->a.pieces.axis);
        for (int i = 0; i < n->a.pieces.n; i++) put(buf, len, &at, "%s%lld", i ? "," : "", (long long)n->a.pieces.off[i]);
        put(buf, len, &at, " to=%s", shape_str(g, &n->tshape, b1, sizeof b1));
        break;
    default: axes_str(g, n, buf, len); break;   /* the ops along axes */
    }
}

/* Attributes as "key=value" words, the same in every format. */
static void attrs_str(const Graph *g, const Node *n, char *buf, size_t len)
{
    buf[0] = 0;
    size_t at = 0;
    char b1[128], fb[64];
    switch (n->op) {
    case OP_INPUT: put(buf, len, &at, "\"%s\"", n->name ? n->name : "?"); break;
    case OP_PARAM: put(buf, len, &at, "%s", g->vars[n->a.param.var].name); break;
    case OP_CONST: put(buf, len, &at, "value=%.9g", n->a.cnst.value); break;
    case OP_MATMUL: case OP_BATCH_MATMUL:
        if (n->a.matmul.ta || n->a.matmul.tb)
            put(buf, len, &at, "transpose=%s%s", n->a.matmul.ta ? "a" : "", n->a.matmul.tb ? "b" : "");
        break;
    case OP_MATMUL_BIAS_ACT: case OP_CONV2D_BIAS_ACT: case OP_CONV2D_MAXPOOL: case OP_CONV2D_MAXPOOL_ARGMAX:
    case OP_MAXPOOL_GRAD_RELU: case OP_CONV2D_GRAD_FILTER_POOLED: case OP_SUM_TO_POOLED:
    case OP_FUSED_ELEMWISE:
        fused_attrs(n, buf, len);
        break;
    case OP_CONV2D: case OP_CONV2D_GRAD_INPUT: case OP_CONV2D_GRAD_FILTER:
    case OP_MAXPOOL: case OP_AVGPOOL: case OP_MAXPOOL_GRAD: case OP_AVGPOOL_GRAD:
    case OP_MAXPOOL_ARGMAX: case OP_MAXPOOL_GATHER: case OP_MAXPOOL_SCATTER: case OP_MAXPOOL_SCATTER_RELU:
        put_window(buf, len, &at, "", &n->a.win);
        break;
    case OP_RESHAPE: case OP_SUM_TO: case OP_GLOBAL_AVGPOOL_GRAD: case OP_EMBEDDING_GRAD:
        put(buf, len, &at, "to=%s", shape_str(g, &n->tshape, b1, sizeof b1));
        break;
    case OP_CONCAT: put(buf, len, &at, "axis=%d", n->a.concat.axis); break;
    case OP_SLICE: {
        char b2[64];
        bool sym = n->a.slice.slen.v > 0 && !shape_concrete(&n->shape);   /* unbound: "offset=B len=B" */
        Dim off = sym ? n->a.slice.soff : (Dim){ n->a.slice.off, -1 }, l = sym ? n->a.slice.slen : (Dim){ n->a.slice.len, -1 };
        put(buf, len, &at, "axis=%d offset=%s len=%s", n->a.slice.axis, dim_str(g, off, b1, sizeof b1), dim_str(g, l, b2, sizeof b2));
        break;
    }
    case OP_DROPOUT: case OP_DROPOUT_GRAD: put(buf, len, &at, "rate=%g stream=%d", n->a.dropout.rate, n->a.dropout.stream); break;
    case OP_UNARY_GRAD: put(buf, len, &at, "of=%s", fn_name(n->a.unary.op, n->a.unary.p, fb, sizeof fb)); break;
    case OP_ALLREDUCE: put(buf, len, &at, "bucket=%d gradients=%d", n->a.allreduce.bucket, n->nin); break;
    case OP_ALLREDUCE_WAIT: put(buf, len, &at, "bucket=%d mean", n->a.allreduce.bucket); break;
    case OP_BATCH_NORM: case OP_BATCH_NORM_INFER: bn_attrs(n, buf, len); break;
    case OP_BATCH_NORM_GRAD_PARAMS: case OP_BATCH_NORM_GRAD:
        put(buf, len, &at, "eps=%g%s", n->a.bn.eps, n->a.bn.act == OP_RELU ? " through=relu" : "");
        break;
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_SOFTMAX_GRAD: case OP_LOG_SOFTMAX_GRAD:
    case OP_REDUCE_SUM: case OP_REDUCE_MEAN: case OP_REDUCE_MAX: case OP_REDUCE_MAX_GRAD: case OP_EXPAND:
    case OP_LAYER_NORM: case OP_LAYER_NORM_GRAD: case OP_LAYER_NORM_GRAD_SCALE: case OP_LAYER_NORM_GRAD_ADD:
    case OP_TRANSPOSE: case OP_CAUSAL_MASK: case OP_SOFTMAX_CAUSAL: case OP_SOFTMAX_GRAD_CAUSAL: case OP_ATTENTION: case OP_ATTENTION_PROBS:
    case OP_ATTENTION_OUT: case OP_ATTENTION_GRAD: case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_GRAD: case OP_BCE_LOGITS_GRAD:
    case OP_SLICE_GRAD:
        seq_attrs(g, n, buf, len);
        break;
    default:
        if (op_has(n->op, OPT_UPDATE) || n->op == OP_CLIP_SCALE) update_attrs(g, n, buf, len);
        else if (op_has(n->op, OPT_UNARY) && op_info[n->op].param)
            put(buf, len, &at, "%s=%g", op_info[n->op].param, n->a.unary.p);
        break;
    }
}

void graph_dump_text(const Graph *g, FILE *out)
{
    char b1[160], attrs[320];
    fprintf(out, "graph %s (stage %s)\n", g->model_name ? g->model_name : "(unnamed)", g->stage ? g->stage : "graph");
    for (int i = 0; i < g->nvars; i++) {
        const Var *v = &g->vars[i];
        fprintf(out, "var %-28s f32%-18s %-5s %s\n", v->name, shape_str(g, &v->shape, b1, sizeof b1),
                role_name(v->role), init_name(v->init));
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        int line, col;
        loc_lc(g, n->loc, &line, &col);
        char lhs[16], args[256] = "";
        snprintf(lhs, sizeof lhs, "%%%d", i);
        size_t al = 0;
        for (int k = 0; k < n->nin && al < sizeof args; k++)
            al += (size_t)snprintf(args + al, sizeof args - al, "%s%%%d", k ? ", " : "", n->in[k]);
        attrs_str(g, n, attrs, sizeof attrs);
        char typ[200];
        snprintf(typ, sizeof typ, "%s%s", dtype_name(n->dtype), shape_str(g, &n->shape, b1, sizeof b1));
        fprintf(out, "%-6s = %-18s %-22s %-24s", lhs, op_name(n->op), args, typ);
        if (attrs[0]) fprintf(out, " %s", attrs);
        if (n->name && n->op != OP_INPUT && n->op != OP_PARAM) fprintf(out, " name=%s", n->name);
        fprintf(out, "  @%d:%d\n", line, col);
    }
    for (int i = 0; i < g->noutputs; i++)
        fprintf(out, "output %s = %%%d\n", g->outputs[i].name, g->outputs[i].node);
    if (g->train.minimize >= 0) fprintf(out, "minimize %%%d\n", g->train.minimize);
}

static void dot_escape(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', out);
        fputc(*s, out);
    }
}

void graph_dump_dot(const Graph *g, FILE *out) { graph_dump_dot_extra(g, NULL, out); }

void graph_dump_dot_extra(const Graph *g, const DumpExtra *x, FILE *out)
{
    char b1[160], attrs[320];
    fprintf(out, "digraph \"");
    dot_escape(out, g->model_name ? g->model_name : "graph");
    fprintf(out, "\" {\n  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        const char *fill = n->op == OP_INPUT ? "#cfe8ff" : n->op == OP_PARAM ? "#ffe9b3"
                         : (op_info[n->op].traits & OPT_UPDATE) ? "#f4c7c3"
                         : (op_info[n->op].traits & OPT_INTERNAL) ? "#e8e8e8" : "#ffffff";
        attrs_str(g, n, attrs, sizeof attrs);
        int line, col;
        loc_lc(g, n->loc, &line, &col);
        fprintf(out, "  n%d [fillcolor=\"%s\", label=\"%%%d %s", i, fill, i, op_name(n->op));
        if (attrs[0]) { fputs("\\n", out); dot_escape(out, attrs); }
        fprintf(out, "\\n%s", dtype_name(n->dtype));
        dot_escape(out, shape_str(g, &n->shape, b1, sizeof b1));
        fprintf(out, "\\nline %d", line);
        if (x && x->node) x->node(x->ctx, i, false, out);
        fputs("\"];\n", out);
    }
    if (x && x->top) x->top(x->ctx, false, out);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) fprintf(out, "  n%d -> n%d;\n", g->nodes[i].in[k], i);
    for (int i = 0; i < g->noutputs; i++) {
        fprintf(out, "  out%d [shape=ellipse, fillcolor=\"#d5f5d5\", label=\"", i);
        dot_escape(out, g->outputs[i].name);
        fprintf(out, "\"];\n  n%d -> out%d;\n", g->outputs[i].node, i);
    }
    fputs("}\n", out);
}

static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

static void json_shape(const Graph *g, const Shape *s, FILE *out)
{
    fputc('[', out);
    for (int i = 0; i < s->rank; i++) {
        if (i) fputs(", ", out);
        if (s->d[i].sym < 0) fprintf(out, "%lld", (long long)s->d[i].v);
        else {
            char b[64];
            if (s->d[i].v == 1) snprintf(b, sizeof b, "%s", g->syms[s->d[i].sym]);
            else snprintf(b, sizeof b, "%lld*%s", (long long)s->d[i].v, g->syms[s->d[i].sym]);
            json_str(out, b);
        }
    }
    fputc(']', out);
}

void graph_dump_json(const Graph *g, FILE *out) { graph_dump_json_extra(g, NULL, out); }

void graph_dump_json_extra(const Graph *g, const DumpExtra *x, FILE *out)
{
    char attrs[320];
    fputs("{\"format\": \"graphc-graph\", \"version\": 1, \"stage\": ", out);
    json_str(out, x && x->stage ? x->stage : g->stage ? g->stage : "graph");
    fputs(", \"model\": ", out);
    if (g->model_name) json_str(out, g->model_name); else fputs("null", out);
    if (x && x->top) x->top(x->ctx, true, out);
    fputs(",\n \"vars\": [", out);
    for (int i = 0; i < g->nvars; i++) {
        const Var *v = &g->vars[i];
        fprintf(out, "%s\n  {\"name\": ", i ? "," : "");
        json_str(out, v->name);
        fputs(", \"shape\": ", out);
        json_shape(g, &v->shape, out);
        fprintf(out, ", \"role\": \"%s\", \"init\": \"%s\"}", role_name(v->role), init_name(v->init));
    }
    fputs("],\n \"nodes\": [", out);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        int line, col;
        loc_lc(g, n->loc, &line, &col);
        fprintf(out, "%s\n  {\"id\": %d, \"op\": \"%s\", \"inputs\": [", i ? "," : "", i, op_name(n->op));
        for (int k = 0; k < n->nin; k++) fprintf(out, "%s%d", k ? ", " : "", n->in[k]);
        fprintf(out, "], \"dtype\": \"%s\", \"shape\": ", dtype_name(n->dtype));
        json_shape(g, &n->shape, out);
        attrs_str(g, n, attrs, sizeof attrs);
        fputs(", \"attrs\": ", out);
        json_str(out, attrs);
        if (n->name) { fputs(", \"name\": ", out); json_str(out, n->name); }
        fprintf(out, ", \"line\": %d, \"col\": %d", line, col);
        if (x && x->node) x->node(x->ctx, i, true, out);
        fputc('}', out);
    }
    fputs("],\n \"outputs\": [", out);
    for (int i = 0; i < g->noutputs; i++) {
        fprintf(out, "%s{\"name\": ", i ? ", " : "");
        json_str(out, g->outputs[i].name);
        fprintf(out, ", \"node\": %d}", g->outputs[i].node);
    }
    fprintf(out, "],\n \"minimize\": %d}\n", g->train.minimize);
}
