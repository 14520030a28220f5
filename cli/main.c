#include "config.h"
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "exec/comm.h"

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
    "  dump FILE --stage S   print the model at a stage: ast, graph, train, cse, folded,\n"
    "                        fused, planned (text, dot, json; svg for planned)\n"
    "  run FILE              train the model as its train block says, then evaluate\n"
    "  eval FILE --weights P evaluate saved weights on the test set\n"
    "  predict FILE --weights P IMAGE...  classify PGM or PNG images, top-k classes\n"
    "  bench FILE            time the interpreter and the compiled plan side by side\n"
    "  export FILE --weights P -o M.onnx  the inference graph as an ONNX model\n"
    "  import M.onnx -o FILE.net  an ONNX model as a .net file (--weights-out P)\n"
    "\n"
    "options:\n"
    "  -h, --help            show this help (or a command's: graphc COMMAND --help)\n"
    "  -V, --version         show the version\n"
    "\n"
    "exit status: 0 success, 1 bad model or input file, 2 bad usage,\n"
    "130 a run interrupted by Ctrl-C (its checkpoint saved).\n"
    "docs: docs/language.md (the .net language), docs/architecture.md, man graphc.\n";

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

int cli_load_model_quiet(Model *m, const char *path)
{
    memset(m, 0, sizeof *m);
    diag_init(&m->diag, NULL);
    if (source_load(&m->src, path, &m->diag) != 0) return -1;
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
    { "dump", cmd_dump },
    { "run", cmd_run },
    { "eval", cmd_eval },
    { "bench", cmd_bench },
    { "predict", cmd_predict },
    { "export", cmd_export },
    { "import", cmd_import },
};

static int run_command(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("%s (%s; %s)\n", PACKAGE_STRING, comm_available() ? "with MPI: data-parallel under mpirun" : "without MPI",
               ONNX_SUPPORT ? "with ONNX: export and import" : "without ONNX");
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, cmd) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "graphc: unknown command '%s'\n\n%s", cmd, usage);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    int rc = run_command(argc, argv);
    if (!stdout_ok() && rc == EXIT_OK) rc = EXIT_BAD_INPUT;
    return rc;
}
