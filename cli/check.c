/* graphc check and graphc dump. */
#include <getopt.h>
#include <string.h>
#include "cli/cli.h"
#include "exec/pipeline.h"
#include "graph/passes.h"
#include "util/outfile.h"

static const char check_usage[] =
    "usage: graphc check FILE.net [--summary]\n"
    "\n"
    "Parses, lowers and shape-checks a model.  Prints a summary (inputs, outputs,\n"
    "parameters, FLOPs per example, the train block) or every error in the file.\n"
    "FILE - reads the model from standard input (\"<stdin>\" in messages).\n"
    "--summary: then the table of graphc summary (a row per layer, the totals).\n"
    "Exit status: 0 the model is good, 1 it has errors, 2 bad usage.\n";

const char *cli_format_commas(int64_t v, char *res, size_t n)
{
    char buf[32], tmp[48];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    size_t len = strlen(buf), j = 0;
    for (size_t i = 0; i < len; i++) {
        if (i && (len - i) % 3 == 0 && buf[i - 1] != '-') tmp[j++] = ',';
        tmp[j++] = buf[i];
    }
    tmp[j] = 0;
    snprintf(res, n, "%s", tmp);
    return res;
}

void cli_print_commas(int64_t v, FILE *out)
{
    char buf[48];
    fputs(cli_format_commas(v, buf, sizeof buf), out);
}

void cli_print_flops(double f, FILE *out)
{
    if (f >= 1e9) fprintf(out, "%.2f GFLOP", f / 1e9);
    else if (f >= 1e6) fprintf(out, "%.2f MFLOP", f / 1e6);
    else if (f >= 1e3) fprintf(out, "%.2f kFLOP", f / 1e3);
    else fprintf(out, "%.0f FLOP", f);
}

/* The vars of one role: "params   1,234 in 5 tensors" and a line each; buffers (batch
 * norm's running statistics: kept with the model, not trained) only when there are. */
static void print_vars(const Graph *g, VarRole role, FILE *out)
{
    char b[128];
    int n = 0;
    int64_t total = 0;
    for (int i = 0; i < g->nvars; i++)
        if (g->vars[i].role == role) n++, total += shape_numel(&g->vars[i].shape);
    if (role != VAR_PARAM && n == 0) return;
    fputs(role == VAR_PARAM ? "params   " : "buffers  ", out);
    cli_print_commas(total, out);
    fprintf(out, " in %d tensor%s%s\n", n, n == 1 ? "" : "s", role == VAR_PARAM ? "" : " (not trained)");
    for (int i = 0; i < g->nvars; i++) {
        const Var *v = &g->vars[i];
        if (v->role != role) continue;
        fprintf(out, "           %-24s f32%-20s ", v->name, shape_str(g, &v->shape, b, sizeof b));
        cli_print_commas(shape_numel(&v->shape), out);
        fputc('\n', out);
    }
}

static void summary(const Model *m, FILE *out)
{
    const Graph *g = m->graph;
    char b[160];
    fprintf(out, "%s: ok\n", m->src.name);
    fprintf(out, "model    %s\n", g->model_name ? g->model_name : "(unnamed)");
    fputs("inputs  ", out);
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        fprintf(out, "%s %s %s%s", i ? "," : "", n->name, dtype_name(n->dtype), shape_str(g, &n->shape, b, sizeof b));
    }
    fputs("\noutputs ", out);
    for (int i = 0; i < g->noutputs; i++) {
        const Node *n = &g->nodes[g->outputs[i].node];
        fprintf(out, "%s %s %s%s", i ? "," : "", g->outputs[i].name, dtype_name(n->dtype), shape_str(g, &n->shape, b, sizeof b));
    }
    if (g->noutputs == 0) fputs(" (none)", out);
    fputc('\n', out);
    print_vars(g, VAR_PARAM, out);
    print_vars(g, VAR_BUFFER, out);
    fputs("flops    ", out);
    cli_print_flops(graph_flops(g), out);
    fputs(" per example (forward)\n", out);
    const TrainSpec *t = &g->train;
    if (t->present) {
        fputs("train    ", out);
        static const char *source[DATA_KIND_COUNT] = { "", "mnist", "synthetic", "idx", "npy", "csv", "cifar10",
                                                       "images", "text" };
        if (t->data == DATA_SYNTHETIC) fprintf(out, "synthetic(count=%lld)", (long long)t->synth_count);
        else fprintf(out, "%s(\"%s\")", source[t->data], t->data_path);
        char od[320];
        fprintf(out, ", %s", optim_describe(t, od, sizeof od));
        fprintf(out, ", batch %lld, %lld epoch%s", (long long)t->batch, (long long)t->epochs, t->epochs == 1 ? "" : "s");
        if (t->steps) fprintf(out, " x %lld steps", (long long)t->steps);
        else fputs(" x one pass", out);
        const Node *loss = &g->nodes[t->minimize];
        fprintf(out, ", minimize %s, seed %llu\n", loss->name ? loss->name : "loss", (unsigned long long)t->seed);
    }
}

int cmd_check(int argc, char **argv)
{
    static const struct option opts[] = { { "help", no_argument, 0, 'h' }, { "summary", no_argument, 0, 's' },
                                          { 0, 0, 0, 0 } };
    bool table = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') { fputs(check_usage, stdout); return EXIT_OK; }
        if (c == 's') { table = true; continue; }
        return cli_unknown_option("check", opts, argv[optind - 1]);
    }
    if (optind != argc - 1) return cli_usage_error("check", optind == argc ? "missing FILE" : "expected one FILE");
    Model m;
    if (cli_load_model(&m, argv[optind]) != 0) { cli_free_model(&m); return EXIT_BAD_INPUT; }
    summary(&m, stdout);
    int rc = EXIT_OK;
    if (table) {
        fputc('\n', stdout);
        if (cli_print_summary(&m, 0, pool_cores(), stdout, &m.diag) != 0) rc = EXIT_BAD_INPUT;
        diag_flush(&m.diag, stderr);
    }
    cli_free_model(&m);
    return rc;
}

static const char dump_usage[] =
    "usage: graphc dump FILE.net [--stage STAGE] [--format FORMAT] [--batch N] [--ranks N] [--infer]\n"
    "                  [--threads N] [-o OUT]\n"
    "\n"
    "Prints the model at a stage of compilation:\n"
    "  ast     the syntax tree, as parsed\n"
    "  graph   the dataflow graph of primitive ops, shapes inferred (default)\n"
    "  train   the training step: forward, backward and optimizer update in one graph\n"
    "  then, each after the one before, the compiler's passes:\n";
/* ... the passes, from graph_passes[], then: */
static const char dump_usage_tail[] =
    "  fused   after every pass: the graph the compiled plan runs\n"
    "  planned the memory plan of the fused step, bound to --batch N (default: the\n"
    "          train block's) and planned for --threads N (default: all cores, as run):\n"
    "          buffers, offsets, lifetimes, parallel stages; formats text, dot and json\n"
    "          (the fused graph with each node's buffer), and svg (a chart)\n"
    "--ranks N (N > 1): the stages from train on are one rank's step of a data-parallel\n"
    "job of N ranks, with the gradients' allreduce ops (docs/distributed.md).\n"
    "--infer: the stages from train on are the inference graph instead (what graphc\n"
    "predict and graphc bench --infer run: the outputs only, dropout removed).\n"
    "Formats: text (default; stable, readable), dot (Graphviz), json (for tools), svg (planned).\n"
    "-o OUT writes to a file instead of standard output.\n";

static void dump_help(FILE *out)
{
    fputs(dump_usage, out);
    for (int i = 0; i < graph_npasses; i++) fprintf(out, "  %-17s %s\n", graph_passes[i].name, graph_passes[i].what);
    fputs(dump_usage_tail, out);
}

/* The stage's graph: the lowered model, or the pipeline stopped at the stage (unbound,
 * or bound and planned for "planned"); NULL after reporting. */
static int dump_step(const Model *m, const char *stage, bool infer, int64_t ranks, int64_t batch, int64_t threads,
                     Step *s, DiagSink *d)
{
    bool planned = strcmp(stage, "planned") == 0;
    CompileOptions co = { .mode = MODE_COMPILED, .ranks = (int)ranks, .threads = threads ? (int)threads : pool_cores(),
                          .stop_after = planned ? NULL : stage };
    return prepare(m->graph, infer ? FOR_INFERENCE : FOR_TRAINING, planned ? (batch ? batch : m->graph->train.batch) : 0,
                   &co, NULL, s, d);
}

/* Is `stage` one of the pipeline's (train, infer, a pass, fused, planned)? */
static bool pipeline_stage_name(const char *stage)
{
    if (strcmp(stage, "infer") == 0 || strcmp(stage, "planned") == 0) return true;
    for (int i = 0; pipeline_stage(i); i++)
        if (strcmp(stage, pipeline_stage(i)) == 0) return true;
    return false;
}

enum { F_TEXT, F_DOT, F_JSON, F_SVG };

typedef struct DumpArgs {
    int64_t batch, ranks, threads;
    bool infer, ast, planned;
    const char *stage, *outpath, *file;
    int format;   /* F_* */
} DumpArgs;

/* The command line into *a, each stage and format checked against the others: -1 to go
 * on, else the exit status. */
static int dump_args(int argc, char **argv, DumpArgs *a)
{
    static const struct option opts[] = {
        { "help", no_argument, 0, 'h' }, { "stage", required_argument, 0, 's' },
        { "format", required_argument, 0, 'f' }, { "output", required_argument, 0, 'o' },
        { "batch", required_argument, 0, 'b' }, { "ranks", required_argument, 0, 'r' },
        { "threads", required_argument, 0, 't' }, { "infer", no_argument, 0, 'i' }, { 0, 0, 0, 0 },
    };
    static const char *const formats[] = { [F_TEXT] = "text", [F_DOT] = "dot", [F_JSON] = "json", [F_SVG] = "svg" };
    *a = (DumpArgs){ .ranks = 1, .stage = "graph", .format = -1 };
    const char *format = "text";
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hs:f:o:", opts, NULL)) != -1) {
        switch (c) {
        case 'b': if (!cli_parse_i64("dump", "--batch", optarg, 1, 1 << 24, &a->batch)) return EXIT_USAGE; break;
        case 'r': if (!cli_parse_i64("dump", "--ranks", optarg, 1, 1 << 20, &a->ranks)) return EXIT_USAGE; break;
        case 't': if (!cli_parse_i64("dump", "--threads", optarg, 1, 256, &a->threads)) return EXIT_USAGE; break;
        case 'h': dump_help(stdout); return EXIT_OK;
        case 'i': a->infer = true; break;
        case 's': a->stage = optarg; break;
        case 'f': format = optarg; break;
        case 'o': a->outpath = optarg; break;
        case ':': return cli_usage_error("dump", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_unknown_option("dump", opts, argv[optind - 1]);
        }
    }
    if (optind != argc - 1) return cli_usage_error("dump", optind == argc ? "missing FILE" : "expected one FILE");
    a->file = argv[optind];
    a->ast = strcmp(a->stage, "ast") == 0;
    a->planned = strcmp(a->stage, "planned") == 0;
    for (int i = 0; i < 4; i++)
        if (strcmp(format, formats[i]) == 0) a->format = i;
    if (!a->ast && strcmp(a->stage, "graph") != 0 && !pipeline_stage_name(a->stage)) {
        char list[512] = "ast, graph";
        for (int i = 0; pipeline_stage(i); i++) {
            strncat(list, ", ", sizeof list - strlen(list) - 1);
            strncat(list, pipeline_stage(i), sizeof list - strlen(list) - 1);
        }
        return cli_usage_error("dump", "unknown stage '%s' (stages: %s, planned)", a->stage, list);
    }
    if (a->format < 0) return cli_usage_error("dump", "unknown format '%s' (formats: text, dot, json, svg)", format);
    if (!a->planned && a->format == F_SVG) return cli_usage_error("dump", "svg is the form of the planned stage");
    if (a->ast && a->format == F_DOT) return cli_usage_error("dump", "the ast stage has no dot form (use text or json)");
    if (a->infer && a->ranks > 1)
        return cli_usage_error("dump", "--infer and --ranks: ranks split a training step, not inference");
    return -1;
}

/* The syntax tree alone: no lowering, so a file with semantic errors can still be
 * seen.  0, or -1 after reporting. */
static int load_ast(Model *m, const char *file)
{
    memset(m, 0, sizeof *m);
    diag_init(&m->diag, NULL);
    if (cli_source_load(&m->src, file, &m->diag) != 0) {
        diag_flush(&m->diag, stderr);
        return -1;
    }
    m->diag.src = &m->src;
    m->prog = parse_program(&m->src, &m->diag);
    if (!m->prog || m->diag.nerrors) {
        diag_flush(&m->diag, stderr);
        fprintf(stderr, "%s: %d error%s\n", m->src.name, m->diag.nerrors, m->diag.nerrors == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* The stage in its format onto out. */
static void dump_write(const DumpArgs *a, const Model *m, const Graph *g, const Step *step, FILE *out)
{
    if (a->ast) {
        if (a->format == F_TEXT) ast_dump_text(m->prog, &m->src, out);
        else ast_dump_json(m->prog, &m->src, out);
    } else if (a->planned) {
        if (a->format == F_TEXT) memplan_dump_text(g, &step->plan, out);
        else if (a->format == F_DOT) memplan_dump_dot(g, &step->plan, out);
        else if (a->format == F_JSON) memplan_dump_json(g, &step->plan, out);
        else memplan_dump_svg(g, &step->plan, out);
    } else if (a->format == F_TEXT) graph_dump_text(g, out);
    else if (a->format == F_DOT) graph_dump_dot(g, out);
    else graph_dump_json(g, out);
}

int cmd_dump(int argc, char **argv)
{
    DumpArgs a;
    int status = dump_args(argc, argv, &a);
    if (status >= 0) return status;
    Model m;
    if (a.ast ? load_ast(&m, a.file) != 0 : cli_load_model(&m, a.file) != 0) {
        cli_free_model(&m);
        return EXIT_BAD_INPUT;
    }
    int rc = EXIT_BAD_INPUT;
    const Graph *g = m.graph;
    Step step = { 0 };
    FILE *out = stdout;
    OutFile of;
    if (!a.ast && strcmp(a.stage, "graph") != 0) {
        if (dump_step(&m, a.stage, a.infer, a.ranks, a.batch, a.threads, &step, &m.diag) != 0) goto out;
        g = step.run;
    }
    if (a.outpath && !(out = outfile_open(&of, a.outpath, "dump", &m.diag))) goto out;
    dump_write(&a, &m, g, &step, out);
    if (a.outpath ? outfile_commit(&of, &m.diag) == 0 : fflush(stdout) == 0) rc = EXIT_OK;
out:
    diag_flush(&m.diag, stderr);
    step_free(&step);
    cli_free_model(&m);
    return rc;
}
