/* The graphc command line: one function per subcommand, sharing how a model file is
 * loaded and how errors are shown.  Exit codes: 0 success, 1 a bad model or input
 * file (or a failed run), 2 bad usage. */
#ifndef GRAPHC_CLI_H
#define GRAPHC_CLI_H
#include <getopt.h>
#include "graph/graph.h"
#include "graph/lower.h"
#include "exec/executor.h"
#include "kernels/kern.h"

enum { EXIT_OK = 0, EXIT_BAD_INPUT = 1, EXIT_USAGE = 2 };

/* A model file loaded, parsed, lowered and shape-checked. */
typedef struct Model {
    Source src;
    DiagSink diag;
    Program *prog;
    Graph *graph;
} Model;

/* Reads the model file a command was given: "-" is standard input ("<stdin>" in
 * messages); a name without a folder that is no file here is NAME.net here, else the
 * installed model of that name ($(pkgdatadir)/models: `graphc run mnist`).  0, or -1
 * with the reason (where it looked) in d. */
int cli_source_load(Source *src, const char *path, DiagSink *d);
/* An install path configure chose (GRAPHC_PKGDATADIR, GRAPHC_DOCDIR) for the prefix
 * this binary runs from (cli/find.c): into buf, or `compiled` itself. */
const char *cli_install_path(const char *compiled, char *buf, size_t n);
/* Loads `path` (as cli_source_load reads it); on failure prints every diagnostic to
 * stderr and returns -1. */
int cli_load_model(Model *m, const char *path);
/* The same without printing: the messages stay in m->diag.  0, -1 (the file could not
 * be read) or -2 (it has errors); cli_report_model prints them as cli_load_model does. */
int cli_load_model_quiet(Model *m, const char *path);
void cli_report_model(Model *m, int rc);
void cli_free_model(Model *m);
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for an option getopt_long did not know (`arg`: argv[optind - 1]),
 * with the nearest of `opts` when it looks like a typo ("did you mean '--epochs'?"). */
int cli_unknown_option(const char *cmd, const struct option *opts, const char *arg);
/* Whether `path` may be given to --plot: a name ending in .svg (what the plots are);
 * else a usage error saying so, and false.  Refused before anything runs, so a long
 * run does not end with a picture in a file whose name says it is something else. */
bool cli_plot_path(const char *cmd, const char *path);
/* Parses a non-negative integer flag value; prints a usage error and returns false if bad. */
bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_f64(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* --mode's value: EXIT_OK with *out, or EXIT_USAGE after the usage error. */
int cli_parse_mode(const char *cmd, const char *s, ExecMode *out);

/* 1234567 as "1,234,567" into res; res. */
const char *cli_format_commas(int64_t v, char *res, size_t n);
void cli_print_commas(int64_t v, FILE *out);
/* FLOPs with a unit: "27.88 MFLOP". */
void cli_print_flops(double f, FILE *out);
/* graphc summary's table of m (cli/summary.c), planned at `batch` (0: the train
 * block's) for `threads`.  0, or -1 after reporting to d. */
int cli_print_summary(const Model *m, int64_t batch, int threads, FILE *out, DiagSink *d);
/* The kernels' variant named by `--isa NAME` (refusing a name that is none, or one this
 * CPU cannot run, with a usage error: false). */
bool cli_parse_isa(const char *cmd, const char *name, KIsa *out);
/* `--dtype NAME`: fp32 or bf16 (*bf16 set), else a usage error (false). */
bool cli_parse_dtype(const char *cmd, const char *name, bool *bf16);
/* The dtype chosen into *isa (KISA_BF16, kern.h), once every option is read: false,
 * after an error naming what is missing, when bf16 cannot run here (no avx512_bf16, or
 * a variant below avx512 asked for). */
bool cli_apply_dtype(const char *cmd, bool bf16, KIsa *isa);
/* The variant GRAPHC_ISA names (read once, by main), else KISA_AUTO: the default of
 * every command's --isa. */
KIsa cli_isa(void);

int cmd_check(int argc, char **argv);
int cmd_summary(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_sample(int argc, char **argv);
/* For a model trained on text(): prints the unigram and bigram baselines' loss on its
 * validation bytes (data_dir, if not NULL, in place of its file).  0 (also when the
 * source is not text), or -1 with the error in d. */
int cli_text_baselines(const Graph *g, const char *data_dir, DiagSink *d);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);

#endif
