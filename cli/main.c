#include "config.h"
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "cli/cli.h"
#include "exec/comm.h"
#include "util/suggest.h"

#ifdef HAVE_ONNX
#define ONNX_SUPPORT 1
#else
#define ONNX_SUPPORT 0
#endif

static const char usage[] =
    "usage: graphc COMMAND [OPTIONS] FILE.net\n"
    "\n"
    "A static-graph compiler and executor for neural networks.\n"
    "\n"
    "commands:\n"
    "  check FILE            parse, lower and shape-check a model; print a summary\n"
    "  summary FILE          a row per layer: op, output shape, parameters, FLOPs\n"
    "  dump FILE --stage S   print the model at a stage: ast, graph, train, cse, folded,\n"
    "                        fused, planned (text, dot, json; svg for planned)\n"
    "  run FILE              train the model as its train block says, then evaluate\n"
    "  eval FILE --weights P evaluate saved weights on the test set\n"
    "  predict FILE --weights P IMAGE...  classify PGM or PNG images, top-k classes\n"
    "  sample FILE --weights P --prompt T  continue a text with a byte-level model\n"
    "  bench FILE            time the interpreter and the compiled plan side by side\n"
    "  export FILE --weights P -o M.onnx  the inference graph as an ONNX model\n"
    "  import M.onnx -o FILE.net  an ONNX model as a .net file (--weights-out P)\n"
    "\n"
    "options:\n"
    "  -h, --help            show this help (or a command's: graphc COMMAND --help)\n"
    "  -V, --version         show the version and the kernels' variant\n"
    "\n"
    "environment: GRAPHC_ISA=avx512|avx2|portable runs that variant of the kernels, not\n"
    "the best this CPU has (for tests and comparisons; run and bench also take --isa).\n"
    "GRAPHC_AMX=0 keeps --dtype bf16's products off AMX's tiles where the CPU has them.\n"
    "\n"
    "exit status: 0 success, 1 bad model or input file, 2 bad usage,\n"
    "130 a run interrupted by Ctrl-C (its checkpoint saved).\n";

/* The usage, then where the installed models and docs are (those of the prefix graphc
 * runs from: cli/find.c). */
static void print_usage(FILE *out)
{
    char models[4096], docs[4096];
    fputs(usage, out);
    fprintf(out, "\nFILE may be - (standard input), or a model's name: NAME.net here, else the installed\n"
                 "%s/NAME.net (graphc run mnist).\n"
                 "docs: %s/language.md (the .net language), man graphc.\n",
            cli_install_path(GRAPHC_PKGDATADIR "/models", models, sizeof models),
            cli_install_path(GRAPHC_DOCDIR, docs, sizeof docs));
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "graphc%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'graphc %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
    return EXIT_USAGE;
}

int cli_unknown_option(const char *cmd, const struct option *opts, const char *arg)
{
    if (strncmp(arg, "--", 2) == 0) {
        char name[64];
        size_t n = strcspn(arg + 2, "=");   /* --epcohs=3 is a typo of --epochs too */
        const char *cands[64];
        int nc = 0;
        for (const struct option *o = opts; o->name && nc < 64; o++) cands[nc++] = o->name;
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), arg + 2);
        const char *near = suggest_nearest(name, cands, nc);
        if (near) return cli_usage_error(cmd, "unknown option '%s'; did you mean '--%s'?", arg, near);
    }
    return cli_usage_error(cmd, "unknown option '%s'", arg);
}

bool cli_plot_path(const char *cmd, const char *path)
{
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash) && strcasecmp(dot, ".svg") == 0) return true;
    if (dot && (!slash || dot > slash) && dot[1])
        cli_usage_error(cmd, "--plot %s: the plots are SVG, not %s: give a name ending in .svg (a converter such "
                        "as rsvg-convert makes a %s of it)", path, dot + 1, dot + 1);
    else
        cli_usage_error(cmd, "--plot %s: graphc draws its plots as SVG: give a name ending in .svg", path);
    return false;
}

bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_usage_error(cmd, "%s: expected an integer from %lld to %lld, got '%s'", flag, (long long)lo, (long long)hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_f64(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        cli_usage_error(cmd, "%s: expected a number from %g to %g, got '%s'", flag, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

int cli_parse_mode(const char *cmd, const char *s, ExecMode *out)
{
    if (strcmp(s, "compiled") == 0) *out = MODE_COMPILED;
    else if (strcmp(s, "interp") == 0) *out = MODE_INTERP;
    else return cli_usage_error(cmd, "--mode: expected compiled or interp, got '%s'", s);
    return EXIT_OK;
}

/* Why `name` is refused (kern_isa_parse's status rc), after `what`: "--isa" or
 * "GRAPHC_ISA".  False. */
static bool isa_refused(const char *cmd, const char *what, const char *name, int rc)
{
    if (rc == -1)
        cli_usage_error(cmd, "%s: expected %s, got '%s'", what, kern_isa_names(), name);
    else
        cli_usage_error(cmd, "%s: '%s' needs instructions this CPU does not have (it runs %s and below)", what, name,
                        kern_isa_name(kern_isa_cpu()));
    return false;
}

bool cli_parse_isa(const char *cmd, const char *name, KIsa *out)
{
    int rc = kern_isa_parse(name, kern_isa_cpu(), out);
    return rc == 0 || isa_refused(cmd, "--isa", name, rc);
}

bool cli_parse_dtype(const char *cmd, const char *name, bool *bf16)
{
    if (strcmp(name, "fp32") != 0 && strcmp(name, "bf16") != 0) {
        cli_usage_error(cmd, "--dtype: expected fp32 or bf16, got '%s'", name);
        return false;
    }
    *bf16 = strcmp(name, "bf16") == 0;
    return true;
}

bool cli_apply_dtype(const char *cmd, bool bf16, KIsa *isa)
{
    if (!bf16)
        return true;
    KIsa with = (KIsa)(*isa | KISA_BF16);
    const char *why = kern_dtype_check(with);
    if (why) {
        cli_usage_error(cmd, "%s", why);
        return false;
    }
    *isa = with;
    return true;
}

static KIsa env_isa;   /* GRAPHC_ISA's, read once at start */

KIsa cli_isa(void) { return env_isa; }

int cli_load_model_quiet(Model *m, const char *path)
{
    memset(m, 0, sizeof *m);
    diag_init(&m->diag, NULL);
    if (cli_source_load(&m->src, path, &m->diag) != 0) return -1;
    m->diag.src = &m->src;
    int rc = compile_source(&m->src, &m->diag, &m->prog, &m->graph);
    return rc != 0 || m->diag.nerrors ? -2 : 0;
}

void cli_report_model(Model *m, int rc)
{
    diag_flush(&m->diag, stderr);   /* errors, or warnings if any */
    if (rc == -2) fprintf(stderr, "%s: %d error%s\n", m->src.name, m->diag.nerrors, m->diag.nerrors == 1 ? "" : "s");
}

int cli_load_model(Model *m, const char *path)
{
    int rc = cli_load_model_quiet(m, path);
    cli_report_model(m, rc);
    return rc < 0 ? -1 : 0;
}

void cli_free_model(Model *m)
{
    graph_free(m->graph);
    ast_free(m->prog);
    diag_free(&m->diag);
    source_free(&m->src);
    memset(m, 0, sizeof *m);
}

/* Whether everything written to stdout reached it (a full disk, a closed file), checked
 * once on the way out as GNU tools do: a command whose output was lost must not say
 * it succeeded.  A stdout that was never open and never written to is fine. */
static bool stdout_ok(void)
{
    bool pending = __fpending(stdout) != 0, failed = ferror(stdout) != 0;
    errno = 0;
    bool closed = fclose(stdout) == 0;
    if (!failed && (closed || (!pending && errno == EBADF))) return true;
    if (errno) fprintf(stderr, "graphc: write error: %s\n", strerror(errno));
    else fputs("graphc: write error\n", stderr);
    return false;
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
} commands[] = {
    { "check", cmd_check },
    { "summary", cmd_summary },
    { "dump", cmd_dump },
    { "run", cmd_run },
    { "eval", cmd_eval },
    { "bench", cmd_bench },
    { "predict", cmd_predict },
    { "sample", cmd_sample },
    { "export", cmd_export },
    { "import", cmd_import },
};

static int run_command(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1], *isa = getenv("GRAPHC_ISA");
    if (isa) {
        int rc = kern_isa_parse(isa, kern_isa_cpu(), &env_isa);
        if (rc != 0) {
            isa_refused(NULL, "GRAPHC_ISA", isa, rc);
            return EXIT_USAGE;
        }
    }
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        print_usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("%s (%s; %s; %s; %s kernels)\n", PACKAGE_STRING,
               comm_available() ? "with MPI: data-parallel under mpirun" : "without MPI",
               ONNX_SUPPORT ? "with ONNX: export and import" : "without ONNX",
               !kern_bf16_cpu() ? "no --dtype bf16: no avx512_bf16"
               : kern_amx_cpu() ? "--dtype bf16: avx512_bf16 and amx_bf16"
                                : "--dtype bf16: avx512_bf16",
               kern_isa_name(kern_isa_resolve(env_isa)));
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, cmd) == 0) return commands[i].fn(argc - 1, argv + 1);
    enum { NCOMMANDS = sizeof commands / sizeof commands[0] };
    const char *names[NCOMMANDS];
    for (size_t i = 0; i < NCOMMANDS; i++) names[i] = commands[i].name;
    const char *near = cmd[0] == '-' ? NULL : suggest_nearest(cmd, names, NCOMMANDS);
    if (near) return cli_usage_error(NULL, "unknown command '%s'; did you mean '%s'?", cmd, near);
    if (cmd[0] == '-') {   /* an option before any command: one of graphc's own, mistyped? */
        static const struct option top[] = { { "help", 0, 0, 'h' }, { "version", 0, 0, 'V' }, { 0, 0, 0, 0 } };
        return cli_unknown_option(NULL, top, cmd);
    }
    fprintf(stderr, "graphc: unknown command '%s'\n\n", cmd);
    print_usage(stderr);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    int rc = run_command(argc, argv);
    if (!stdout_ok() && rc == EXIT_OK) rc = EXIT_BAD_INPUT;
    return rc;
}
