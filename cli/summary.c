/* graphc summary: Keras' model.summary() for a .net file.
 *
 * A layer is one call in the file (conv2d(...), relu(...), a + b, an input or param
 * statement): lowering gives every node a call makes that call's span, and makes them
 * one after another, so a run of nodes with the same span is one layer.  Its name is
 * the one its parameters carry ("conv2d_1/kernel": conv2d_1), else the value's name
 * in the file, else its op; its op is the function called (dense, not the matmul and
 * add it lowers to).  The totals' memory figures come from the compile pipeline's own
 * memory plans (prepare()), not from an estimate of their own. */
#include <ctype.h>
#include <getopt.h>
#include <string.h>
#include "cli/cli.h"
#include "exec/memplan.h"
#include "exec/pipeline.h"

static const char summary_usage[] =
    "usage: graphc summary FILE.net [--batch N] [--threads N]\n"
    "\n"
    "Prints the model as Keras' model.summary() does: a row per layer (each call in\n"
    "the file) with its name and op, its output shape (B: the batch), its parameters\n"
    "and its share of the forward FLOPs; then the parameters in all, those the training\n"
    "step updates, the FLOPs per example, and the activation memory of a training step\n"
    "and of inference at the batch (--batch N; default the train block's), as the\n"
    "compiled plan places it for --threads N (default: all cores, as run).\n"
    "(graphc check --summary prints it after check's summary.)\n";

typedef struct Layer {
    int first, last;           /* its nodes: first..last */
    char name[96], op[48];
    int64_t params;            /* the parameters it creates, batch norm's statistics included
                                * (non-trainable, as Keras counts them); a shared one once */
    double flops;
} Layer;

/* The function a call at `loc` names, if the span is exactly `NAME(...)`: its
 * parentheses match at the span's end.  false for a + b, x[...], a bare name. */
static bool called_name(const Source *src, Loc loc, char *buf, size_t n)
{
    if (!src || loc.end > src->len || loc.start >= loc.end) return false;
    const char *s = src->text + loc.start, *end = src->text + loc.end;
    const char *p = s;
    while (p < end && (isalnum((unsigned char)*p) || *p == '_')) p++;
    if (p == s || p >= end || *p != '(' || end[-1] != ')') return false;
    int depth = 0;
    for (const char *q = p; q < end; q++) {
        if (*q == '"')   /* strings hold no brackets that count */
            for (q++; q < end && *q != '"'; q++)
                if (*q == '\\') q++;
        if (*q == '(') depth++;
        else if (*q == ')' && --depth == 0 && q != end - 1) return false;
    }
    snprintf(buf, n, "%.*s", (int)(p - s), s);
    return true;
}

static bool is_source(OpKind op) { return op == OP_INPUT || op == OP_PARAM || op == OP_CONST; }

/* Fills l's name, op, parameters and FLOPs from its nodes; counted[v] marks the
 * vars already counted in an earlier layer. */
static void describe(const Graph *g, Layer *l, bool *counted)
{
    const Node *main = NULL, *last = &g->nodes[l->last];
    const char *prefix = NULL;
    for (int i = l->first; i <= l->last; i++) {
        const Node *n = &g->nodes[i];
        l->flops += node_flops(g, n);
        if (n->op == OP_PARAM) {
            int v = n->a.param.var;
            if (!prefix) prefix = g->vars[v].name;
            if (!counted[v] && g->vars[v].role != VAR_STATE) l->params += shape_numel(&g->vars[v].shape);
            counted[v] = true;
        } else if (!main && !is_source(n->op) && n->op != OP_RESHAPE) {
            main = n;
        }
    }
    if (!main) main = last;   /* an input, a param, a reshape alone */
    if (!called_name(g->src, last->loc, l->op, sizeof l->op)) snprintf(l->op, sizeof l->op, "%s", op_name(main->op));
    if (prefix) snprintf(l->name, sizeof l->name, "%.*s", (int)strcspn(prefix, "/"), prefix);
    else snprintf(l->name, sizeof l->name, "%s", last->name ? last->name : l->op);
}

/* The layers of g, in order: runs of nodes with the same source span.  NULL when out
 * of memory. */
static Layer *layers_of(const Graph *g, int *count)
{
    Layer *ls = gc_calloc((size_t)g->nnodes + 1, sizeof *ls);
    bool *counted = gc_calloc((size_t)g->nvars + 1, sizeof *counted);
    int n = 0;
    if (!ls || !counted) {
        gc_free(ls);
        gc_free(counted);
        return NULL;
    }
    for (int i = 0; i < g->nnodes; i++) {
        Loc a = g->nodes[i].loc;
        if (n > 0) {
            Loc b = g->nodes[ls[n - 1].last].loc;
            if (a.start == b.start && a.end == b.end) { ls[n - 1].last = i; continue; }
        }
        ls[n++] = (Layer){ .first = i, .last = i };
    }
    for (int i = 0; i < n; i++) describe(g, &ls[i], counted);
    gc_free(counted);
    *count = n;
    return ls;
}

static void print_bytes(double b, FILE *out)
{
    if (b >= 1e9) fprintf(out, "%.2f GB", b / 1e9);
    else if (b >= 1e6) fprintf(out, "%.2f MB", b / 1e6);
    else if (b >= 1e3) fprintf(out, "%.2f kB", b / 1e3);
    else fprintf(out, "%.0f bytes", b);
}

/* The memory plan of a step for `purpose` at `batch`: its arena and the sum of its
 * buffers.  false after reporting. */
static bool plan_of(const Graph *model, Purpose purpose, int64_t batch, int threads, Step *s, DiagSink *d)
{
    CompileOptions co = { .mode = MODE_COMPILED, .threads = threads };
    return prepare(model, purpose, batch, &co, NULL, s, d) == 0;
}

/* Parameters the training step updates: those with an update op in the step autodiff
 * made (before fusion, where each update is its own op). */
static int64_t trainable_params(const Step *s)
{
    const Graph *g = s->graph;
    int64_t n = 0;
    bool *seen = gc_calloc((size_t)g->nvars + 1, sizeof *seen);
    if (!seen) return -1;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *node = &g->nodes[i];
        if (!op_has(node->op, OPT_UPDATE) || node->a.update.var < 0) continue;
        int v = node->a.update.var;
        if (!seen[v] && g->vars[v].role == VAR_PARAM) n += shape_numel(&g->vars[v].shape);
        seen[v] = true;
    }
    gc_free(seen);
    return n;
}

/* The batch a summary plans for: --batch, else the train block's; a model whose inputs
 * have a fixed batch takes that. */
static int64_t summary_batch(const Graph *g, int64_t batch)
{
    if (graph_batch_sym(g) < 0 && g->ninputs > 0 && g->nodes[g->inputs[0]].shape.rank > 0)
        return g->nodes[g->inputs[0]].shape.d[0].v;
    return batch ? batch : g->train.batch;
}

static int print_totals(const Model *m, int64_t batch, int threads, int64_t total, FILE *out, DiagSink *d)
{
    const Graph *g = m->graph;
    fputs("Total params:         ", out);
    cli_print_commas(total, out);
    fputs(" (", out);
    print_bytes(4.0 * (double)total, out);
    fputs(")\n", out);
    Step train = { 0 }, infer = { 0 };
    bool trains = g->train.minimize >= 0;
    if (trains && !plan_of(g, FOR_TRAINING, batch, threads, &train, d)) return -1;
    if (!plan_of(g, FOR_INFERENCE, batch, threads, &infer, d)) {
        step_free(&train);
        return -1;
    }
    if (trains) {
        int64_t trainable = trainable_params(&train);
        fputs("Trainable params:     ", out);
        cli_print_commas(trainable, out);
        fputs(" (", out);
        print_bytes(4.0 * (double)trainable, out);
        fputs(")\nNon-trainable params: ", out);
        cli_print_commas(total - trainable, out);
        fputc('\n', out);
    } else {
        fputs("Trainable params:     - (no train block: nothing to minimize)\n", out);
    }
    fputs("FLOPs per example:    ", out);
    cli_print_flops(graph_flops(g), out);
    fputs(" (forward)\n", out);
    fprintf(out, "Activation memory:    ");
    if (trains) {
        print_bytes((double)train.plan.arena, out);
        fprintf(out, " a training step at batch %lld (the planned arena; its buffers one by one: ", (long long)batch);
        print_bytes((double)train.plan.arena, out);
        fputs(")\n                      ", out);
    }
    print_bytes((double)infer.plan.arena, out);
    fprintf(out, " inference at batch %lld\n", (long long)batch);
    step_free(&train);
    step_free(&infer);
    return 0;
}

int cli_print_summary(const Model *m, int64_t batch, int threads, FILE *out, DiagSink *d)
{
    const Graph *g = m->graph;
    int n;
    Layer *ls = layers_of(g, &n);
    if (!ls) { diag_plain(d, "out of memory"); return -1; }
    batch = summary_batch(g, batch);
    /* column widths from the widest entry */
    char shape[160], cell[160];
    int wname = (int)strlen("Layer (op)"), wshape = (int)strlen("Output shape");
    for (int i = 0; i < n; i++) {
        int w = snprintf(cell, sizeof cell, "%s (%s)", ls[i].name, ls[i].op);
        if (w > wname) wname = w;
        w = (int)strlen(shape_str(g, &g->nodes[ls[i].last].shape, shape, sizeof shape));
        if (w > wshape) wshape = w;
    }
    int width = wname + wshape + 36;
    char rule[512];
    memset(rule, '_', sizeof rule);
    rule[width < (int)sizeof rule ? width : (int)sizeof rule - 1] = 0;
    double flops = graph_flops(g);
    int64_t total = 0;
    fprintf(out, "Model: \"%s\" (%s)\n%s\n", g->model_name ? g->model_name : "(unnamed)", m->src.name, rule);
    fprintf(out, "%-*s  %-*s  %12s  %6s  %s\n", wname, "Layer (op)", wshape, "Output shape", "Param #", "FLOPs", "Line");
    memset(rule, '=', (size_t)width);
    fprintf(out, "%s\n", rule);
    for (int i = 0; i < n; i++) {
        const Node *last = &g->nodes[ls[i].last];
        char params[32], share[16];
        int line = 0, col = 0;
        snprintf(cell, sizeof cell, "%s (%s)", ls[i].name, ls[i].op);
        cli_format_commas(ls[i].params, params, sizeof params);
        if (ls[i].flops > 0 && flops > 0) snprintf(share, sizeof share, "%.1f%%", 100.0 * ls[i].flops / flops);
        else snprintf(share, sizeof share, "-");
        if (g->src) diag_line_col(g->src, last->loc.start, &line, &col);
        fprintf(out, "%-*s  %-*s  %12s  %6s  %d:%d\n", wname, cell, wshape, shape_str(g, &last->shape, shape, sizeof shape),
                params, share, line, col);
        total += ls[i].params;
    }
    fprintf(out, "%s\n", rule);
    gc_free(ls);
    return print_totals(m, batch, threads, total, out, d);
}

int cmd_summary(int argc, char **argv)
{
    static const struct option opts[] = {
        { "help", no_argument, 0, 'h' }, { "batch", required_argument, 0, 'b' },
        { "threads", required_argument, 0, 't' }, { 0, 0, 0, 0 },
    };
    int64_t batch = 0, threads = 0;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(summary_usage, stdout); return EXIT_OK;
        case 'b': if (!cli_parse_i64("summary", "--batch", optarg, 1, 1 << 24, &batch)) return EXIT_USAGE; break;
        case 't': if (!cli_parse_i64("summary", "--threads", optarg, 1, 256, &threads)) return EXIT_USAGE; break;
        case ':': return cli_usage_error("summary", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_unknown_option("summary", opts, argv[optind - 1]);
        }
    }
    if (optind != argc - 1) return cli_usage_error("summary", optind == argc ? "missing FILE" : "expected one FILE");
    Model m;
    if (cli_load_model(&m, argv[optind]) != 0) { cli_free_model(&m); return EXIT_BAD_INPUT; }
    int rc = cli_print_summary(&m, batch, threads ? (int)threads : pool_cores(), stdout, &m.diag) == 0 ? EXIT_OK
                                                                                                      : EXIT_BAD_INPUT;
    diag_flush(&m.diag, stderr);
    cli_free_model(&m);
    return rc;
}
