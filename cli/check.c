/* graphc check and graphc dump. */
#include <getopt.h>
#include <string.h>
#include "cli/cli.h"
#include "graph/passes.h"
#include "exec/compiled.h"
#include "kernels/kern.h"

static const char check_usage[] =
    "usage: graphc check FILE.net\n"
    "\n"
    "Parses, lowers and shape-checks a model.  Prints a summary (inputs, outputs,\n"
    "parameters, FLOPs per example, the train block) or every error in the file.\n"
    "Exit status: 0 the model is good, 1 it has errors, 2 bad usage.\n";

static void print_commas(int64_t v, FILE *out)
{
    char buf[32], res[48];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    size_t n = strlen(buf), j = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) res[j++] = ',';
        res[j++] = buf[i];
    }
    res[j] = 0;
    fputs(res, out);
}

static void print_flops(double f, FILE *out)
{
    if (f >= 1e9) fprintf(out, "%.2f GFLOP", f / 1e9);
    else if (f >= 1e6) fprintf(out, "%.2f MFLOP", f / 1e6);
    else if (f >= 1e3) fprintf(out, "%.2f kFLOP", f / 1e3);
    else fprintf(out, "%.0f FLOP", f);
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
    int nparams = 0;
    for (int i = 0; i < g->nvars; i++) nparams += g->vars[i].role == VAR_PARAM;
    fputs("\nparams   ", out);
    print_commas(graph_param_count(g), out);
    fprintf(out, " in %d tensor%s\n", nparams, nparams == 1 ? "" : "s");
    for (int i = 0; i < g->nvars; i++) {
        const Var *v = &g->vars[i];
        fprintf(out, "           %-24s f32%-20s ", v->name, shape_str(g, &v->shape, b, sizeof b));
        print_commas(shape_numel(&v->shape), out);
        fputc('\n', out);
    }
    fputs("flops    ", out);
    print_flops(graph_flops(g), out);
    fputs(" per example (forward)\n", out);
    const TrainSpec *t = &g->train;
    if (t->present) {
        fputs("train    ", out);
        if (t->data == DATA_MNIST) fprintf(out, "mnist(\"%s\")", t->data_path);
        else fprintf(out, "synthetic(count=%lld)", (long long)t->synth_count);
        if (t->optim == OPTIM_SGD) {
            fprintf(out, ", sgd(lr=%g", t->lr);
            if (t->momentum > 0) fprintf(out, ", momentum=%g%s", t->momentum, t->nesterov ? ", nesterov" : "");
            fputc(')', out);
        } else
            fprintf(out, ", adam(lr=%g, beta1=%g, beta2=%g, eps=%g)", t->lr, t->beta1, t->beta2, t->eps);
        fprintf(out, ", batch %lld, %lld epoch%s", (long long)t->batch, (long long)t->epochs, t->epochs == 1 ? "" : "s");
        if (t->steps) fprintf(out, " x %lld steps", (long long)t->steps);
        else fputs(" x one pass", out);
        const Node *loss = &g->nodes[t->minimize];
        fprintf(out, ", minimize %s, seed %llu\n", loss->name ? loss->name : "loss", (unsigned long long)t->seed);
    }
}

int cmd_check(int argc, char **argv)
{
    static const struct option opts[] = { { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 } };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') { fputs(check_usage, stdout); return EXIT_OK; }
        return cli_usage_error("check", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind != argc - 1) return cli_usage_error("check", optind == argc ? "missing FILE" : "expected one FILE");
    Model m;
    if (cli_load_model(&m, argv[optind]) != 0) { cli_free_model(&m); return EXIT_BAD_INPUT; }
    summary(&m, stdout);
    cli_free_model(&m);
    return EXIT_OK;
}

static const char dump_usage[] =
    "usage: graphc dump FILE.net [--stage STAGE] [--format FORMAT] [--batch N] [--ranks N] [--infer]\n"
    "                  [--threads N] [-o OUT]\n"
    "\n"
    "Prints the model at a stage of compilation:\n"
    "  ast     the syntax tree, as parsed\n"
    "  graph   the dataflow graph of primitive ops, shapes inferred (default)\n"
    "  train   the training step: forward, backward and optimizer update in one graph\n"
    "  cse     the training step after common subexpression elimination\n"
    "  folded  ... then constant folding and dead code elimination\n"
    "  fused   ... then fusion: the graph the compiled plan runs\n"
    "  planned the memory plan of the fused step, bound to --batch N (default: the\n"
    "          train block's) and planned for --threads N (default: all cores, as run):\n"
    "          buffers, offsets, lifetimes, parallel stages; formats text and svg\n"
    "--ranks N (N > 1): the stages from train on are one rank's step of a data-parallel\n"
    "job of N ranks, with the gradients' allreduce ops (docs/distributed.md).\n"
    "--infer: the stages from train on are the inference graph instead (what graphc\n"
    "predict and graphc bench --infer run: the outputs only, dropout removed).\n"
    "Formats: text (default; stable, readable), dot (Graphviz), json (for tools), svg (planned).\n"
    "-o OUT writes to a file instead of standard output.\n";


int cmd_dump(int argc, char **argv)
{
    static const struct option opts[] = {
        { "help", no_argument, 0, 'h' }, { "stage", required_argument, 0, 's' },
        { "format", required_argument, 0, 'f' }, { "output", required_argument, 0, 'o' },
        { "batch", required_argument, 0, 'b' }, { "ranks", required_argument, 0, 'r' },
        { "threads", required_argument, 0, 't' }, { "infer", no_argument, 0, 'i' }, { 0, 0, 0, 0 },
    };
    int64_t batch = 0, ranks = 1, threads = 0;
    bool infer = false;
    const char *stage = "graph", *format = "text", *outpath = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hs:f:o:", opts, NULL)) != -1) {
        switch (c) {
        case 'b': if (!cli_parse_i64("dump", "--batch", optarg, 1, 1 << 24, &batch)) return EXIT_USAGE; break;
        case 'r': if (!cli_parse_i64("dump", "--ranks", optarg, 1, 1 << 20, &ranks)) return EXIT_USAGE; break;
        case 't': if (!cli_parse_i64("dump", "--threads", optarg, 1, 256, &threads)) return EXIT_USAGE; break;
        case 'h': fputs(dump_usage, stdout); return EXIT_OK;
        case 'i': infer = true; break;
        case 's': stage = optarg; break;
        case 'f': format = optarg; break;
        case 'o': outpath = optarg; break;
        case ':': return cli_usage_error("dump", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("dump", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1) return cli_usage_error("dump", optind == argc ? "missing FILE" : "expected one FILE");
    static const char *const stages[] = { "ast", "graph", "train", "cse", "folded", "fused", "planned" };
    static const char *const formats[] = { "text", "dot", "json", "svg" };
    int si = -1, fi = -1;
    for (int i = 0; i < 7; i++)
        if (strcmp(stage, stages[i]) == 0) si = i;
    for (int i = 0; i < 4; i++)
        if (strcmp(format, formats[i]) == 0) fi = i;
    if (si < 0) return cli_usage_error("dump", "unknown stage '%s' (stages: ast, graph, train, cse, folded, fused, planned)", stage);
    if (fi < 0) return cli_usage_error("dump", "unknown format '%s' (formats: text, dot, json, svg)", format);
    if (si == 6 && fi != 0 && fi != 3) return cli_usage_error("dump", "the planned stage has text and svg forms");
    if (si != 6 && fi == 3) return cli_usage_error("dump", "svg is the form of the planned stage");
    if (si == 0 && fi == 1) return cli_usage_error("dump", "the ast stage has no dot form (use text or json)");
    if (infer && ranks > 1) return cli_usage_error("dump", "--infer and --ranks: ranks split a training step, not inference");

    Model m;
    int rc = EXIT_OK;
    if (si == 0) {
        /* The tree alone: no lowering, so a file with semantic errors can still be seen. */
        memset(&m, 0, sizeof m);
        diag_init(&m.diag, NULL);
        if (source_load(&m.src, argv[optind], &m.diag) != 0) { diag_flush(&m.diag, stderr); cli_free_model(&m); return EXIT_BAD_INPUT; }
        m.diag.src = &m.src;
        m.prog = parse_program(&m.src, &m.diag);
        if (!m.prog || m.diag.nerrors) {
            diag_flush(&m.diag, stderr);
            fprintf(stderr, "%s: %d error%s\n", m.src.name, m.diag.nerrors, m.diag.nerrors == 1 ? "" : "s");
            cli_free_model(&m);
            return EXIT_BAD_INPUT;
        }
    } else if (cli_load_model(&m, argv[optind]) != 0) {
        cli_free_model(&m);
        return EXIT_BAD_INPUT;
    }
    Graph *g = m.graph, *owned = NULL;
    if (si >= 2) {
        Graph *t = infer ? pass_inference(m.graph, false, &m.diag) : stage_train(m.graph, (int)ranks, &m.diag);
        if (t && si >= 3) {
            owned = pass_optimize(t, si == 6 ? "fused" : stages[si], &m.diag);
            graph_free(t);
        } else {
            owned = t;
        }
        g = owned;
        if (!g) { diag_flush(&m.diag, stderr); cli_free_model(&m); return EXIT_BAD_INPUT; }
    }
    MemPlan mp;
    memset(&mp, 0, sizeof mp);
    if (si == 6) {
        /* bind the batch and plan, as the compiled executor would, for as many threads */
        kern_blas_threads((int)threads);
        const char *sym = NULL;
        for (int i = 0; i < g->ninputs && !sym; i++) {
            const Node *in = &g->nodes[g->inputs[i]];
            if (in->tshape.rank > 0 && in->tshape.d[0].sym >= 0) sym = g->syms[in->tshape.d[0].sym];
        }
        if ((sym && graph_bind(g, sym, batch ? batch : g->train.batch, &m.diag) != 0) || memplan_build(g, &mp, &m.diag) != 0) {
            diag_flush(&m.diag, stderr);
            memplan_free(&mp);
            graph_free(owned);
            cli_free_model(&m);
            return EXIT_BAD_INPUT;
        }
    }
    FILE *out = stdout;
    char *tmp = NULL;
    if (outpath) {
        /* Written beside the target and renamed over it: never a half-written file. */
        size_t n = strlen(outpath) + 8;
        tmp = gc_malloc(n);
        snprintf(tmp, n, "%s.tmp", outpath);
        out = fopen(tmp, "w");
        if (!out) {
            perror(outpath);
            gc_free(tmp);
            graph_free(owned);
            cli_free_model(&m);
            return EXIT_BAD_INPUT;
        }
    }
    if (si == 0) {
        if (fi == 0) ast_dump_text(m.prog, &m.src, out);
        else ast_dump_json(m.prog, &m.src, out);
    } else if (si == 6) {
        if (fi == 0) memplan_dump_text(g, &mp, out);
        else memplan_dump_svg(g, &mp, out);
    } else if (fi == 0) graph_dump_text(g, out);
    else if (fi == 1) graph_dump_dot(g, out);
    else graph_dump_json(g, out);
    if (outpath) {
        if (fclose(out) != 0 || rename(tmp, outpath) != 0) {
            perror(outpath);
            remove(tmp);
            rc = EXIT_BAD_INPUT;
        }
        gc_free(tmp);
    } else if (fflush(stdout) != 0) {
        rc = EXIT_BAD_INPUT;
    }
    memplan_free(&mp);
    graph_free(owned);
    cli_free_model(&m);
    return rc;
}
