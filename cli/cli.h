/* The graphc command line: one function per subcommand, sharing how a model file is
 * loaded and how errors are shown.  Exit codes: 0 success, 1 a bad model or input
 * file (or a failed run), 2 bad usage. */
#ifndef GRAPHC_CLI_H
#define GRAPHC_CLI_H
#include "graph/graph.h"
#include "graph/lower.h"
#include "kernels/kern.h"

enum { EXIT_OK = 0, EXIT_BAD_INPUT = 1, EXIT_USAGE = 2 };

/* A model file loaded, parsed, lowered and shape-checked. */
typedef struct Model {
    Source src;
    DiagSink diag;
    Program *prog;
    Graph *graph;
} Model;

/* Loads `path`; on failure prints every diagnostic to stderr and returns -1. */
int cli_load_model(Model *m, const char *path);
/* The same without printing: the messages stay in m->diag.  0, -1 (the file could not
 * be read) or -2 (it has errors); cli_report_model prints them as cli_load_model does. */
int cli_load_model_quiet(Model *m, const char *path);
void cli_report_model(Model *m, int rc);
void cli_free_model(Model *m);
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses a non-negative integer flag value; prints a usage error and returns false if bad. */
bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_f64(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* The kernels' variant named by `--isa NAME` (refusing a name that is none, or one this
 * CPU cannot run, with a usage error: false). */
bool cli_parse_isa(const char *cmd, const char *name, KIsa *out);
/* The variant GRAPHC_ISA names (read once, by main), else KISA_AUTO: the default of
 * every command's --isa. */
KIsa cli_isa(void);

int cmd_check(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);

#endif
