/* graphc run and graphc eval. */
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <signal.h>
#include <unistd.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/progress.h"
#include "exec/comm.h"
#include "run/train.h"

static const char run_usage[] =
    "usage: graphc run FILE.net [options]\n"
    "\n"
    "Trains the model as its train block says, then evaluates it on the test set.\n"
    "\n"
    "  --mode MODE       compiled (default: the planned static graph) or interp\n"
    "                    (the op-by-op eager interpreter)\n"
    "  --epochs N        epochs (overrides the train block)\n"
    "  --steps N         steps per epoch (default: the train block, else one pass)\n"
    "  --batch N         batch size\n"
    "  --lr X            learning rate (of a schedule: its first value)\n"
    "  --seed N          seed of initialisation, shuffling and dropout\n"
    "  --threads N       threads (default: all cores)\n"
    "  --isa NAME        the kernels' variant: avx512, avx2 or portable (default: the\n"
    "                    best this CPU runs, or GRAPHC_ISA)\n"
    "  --dtype TYPE      fp32 (default) or bf16: the matrix products (dense layers\n"
    "                    and convolutions, forward and backward, and SGD's fused\n"
    "                    weight update) round their operands to bfloat16 as they\n"
    "                    read them and sum in fp32; weights, activations, losses,\n"
    "                    optimizer state stay fp32 (docs/bf16.md).  Needs avx512_bf16;\n"
    "                    runs on AMX's tiles where the CPU has them (GRAPHC_AMX=0: not)\n"
    "  --data PATH       the data source's file or folder (overrides the train block's)\n"
    "  --train-limit N   train on the first N examples only\n"
    "  --test-limit N    evaluate on the first N test examples only\n"
    "  --validate        evaluate on the test set after every epoch\n"
    "  --save PATH       write the trained weights to a checkpoint (atomically)\n"
    "  --save-every N    also write it every N steps while training\n"
    "  --resume PATH     continue from a checkpoint: weights, optimizer state, step\n"
    "                    (and the run's seed): the same result as a run not stopped;\n"
    "                    refused if the checkpoint lacks the optimizer's state\n"
    "  --reset-optimizer with --resume: start the optimizer's state (momentum's\n"
    "                    velocity, Adam's moments) from zero instead\n"
    "  --plot FILE.svg   draw loss and accuracy per step and test accuracy per epoch\n"
    "                    (an SVG: another extension, .png included, is refused)\n"
    "  --log FORMAT      bar (default), json (a line per epoch; NaN and Inf as null with\n"
    "                    KEY_nonfinite beside), quiet (results only)\n"
    "  --check-numerics  stop at the first NaN or Inf, naming the op, its line, the step\n"
    "                    (without it a NaN or Inf loss stops the run, naming the step)\n"
    "  --max-memory N    refuse to train if the step needs more than N bytes (K, M, G ok)\n"
    "\n"
    "Under mpirun (a build configured --with-mpi) the ranks train data-parallel: each\n"
    "takes its batch of rows of every global batch (ranks x batch), gradients are\n"
    "averaged over the ranks, rank 0 prints and saves (docs/distributed.md).\n"
    "  --bucket-size N   gradient bytes per allreduce bucket (default 4M)\n"
    "  --comm-timeout S  stop the job when a collective takes longer (default 300)\n"
    "\n"
    "Every rank must be started with the same settings (a difference is an error).\n"
    "\n"
    "The same seed and thread count give the same loss curve, bit for bit.  Ctrl-C\n"
    "stops after the current step and writes the checkpoint given by --save.\n";

static const char eval_usage[] =
    "usage: graphc eval FILE.net --weights PATH [--mode MODE] [--batch N] [--threads N] [--data PATH]\n"
    "                   [--test-limit N] [--comm-timeout S] [--isa NAME] [--dtype TYPE]\n"
    "\n"
    "Evaluates saved weights on the test set of the model's data source: prints the test\n"
    "loss, the accuracy and the number of examples evaluated.\n";

enum {
    O_MODE = 256, O_EPOCHS, O_STEPS, O_BATCH, O_LR, O_SEED, O_THREADS, O_DATA, O_TRAIN_LIMIT, O_TEST_LIMIT,
    O_VALIDATE, O_SAVE, O_PLOT, O_LOG, O_WEIGHTS, O_SAVE_EVERY, O_RESUME, O_CHECK_NUMERICS, O_MAX_MEMORY,
    O_BUCKET_SIZE, O_COMM_TIMEOUT, O_RESET_OPTIMIZER, O_ISA, O_DTYPE,
};

static const struct option run_opts[] = {
    { "help", no_argument, 0, 'h' }, { "mode", required_argument, 0, O_MODE },
    { "epochs", required_argument, 0, O_EPOCHS }, { "steps", required_argument, 0, O_STEPS },
    { "batch", required_argument, 0, O_BATCH }, { "lr", required_argument, 0, O_LR },
    { "seed", required_argument, 0, O_SEED }, { "threads", required_argument, 0, O_THREADS },
    { "data", required_argument, 0, O_DATA }, { "train-limit", required_argument, 0, O_TRAIN_LIMIT },
    { "test-limit", required_argument, 0, O_TEST_LIMIT }, { "validate", no_argument, 0, O_VALIDATE },
    { "save", required_argument, 0, O_SAVE }, { "plot", required_argument, 0, O_PLOT },
    { "log", required_argument, 0, O_LOG }, { "weights", required_argument, 0, O_WEIGHTS },
    { "save-every", required_argument, 0, O_SAVE_EVERY }, { "resume", required_argument, 0, O_RESUME },
    { "check-numerics", no_argument, 0, O_CHECK_NUMERICS }, { "max-memory", required_argument, 0, O_MAX_MEMORY },
    { "bucket-size", required_argument, 0, O_BUCKET_SIZE }, { "comm-timeout", required_argument, 0, O_COMM_TIMEOUT },
    { "reset-optimizer", no_argument, 0, O_RESET_OPTIMIZER }, { "isa", required_argument, 0, O_ISA },
    { "dtype", required_argument, 0, O_DTYPE }, { 0, 0, 0, 0 },
};

/* A number of bytes with an optional K, M or G (powers of 1024).  false after a usage error. */
static bool parse_bytes(const char *cmd, const char *flag, const char *arg, int64_t *out)
{
    char num[64];
    size_t len = strlen(arg);
    int64_t mult = 1, v;
    char last = len ? arg[len - 1] : 0;
    if (last == 'K' || last == 'k') mult = 1 << 10;
    else if (last == 'M' || last == 'm') mult = 1 << 20;
    else if (last == 'G' || last == 'g') mult = 1 << 30;
    if (mult > 1) len--;
    if (len == 0 || len >= sizeof num) {
        cli_usage_error(cmd, "%s: expected bytes, e.g. 512M, got '%s'", flag, arg);
        return false;
    }
    memcpy(num, arg, len);
    num[len] = 0;
    if (!cli_parse_i64(cmd, flag, num, 1, INT64_MAX / mult, &v)) return false;
    *out = v * mult;
    return true;
}

static double comm_timeout = COMM_DEFAULT_TIMEOUT;

/* Parses the options shared by run and eval.  Returns -1 to go on, else an exit code. */
static int parse_opts(const char *cmd, int argc, char **argv, RunOptions *o, LogMode *log, const char **weights,
                      const char *usage)
{
    int c;
    int64_t v;
    bool bf16 = false;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", run_opts, NULL)) != -1) {
        bool eval_ok = c == 'h' || c == O_MODE || c == O_BATCH || c == O_THREADS || c == O_DATA || c == O_WEIGHTS ||
                       c == O_TEST_LIMIT || c == O_COMM_TIMEOUT || c == O_ISA || c == O_DTYPE || c == ':' || c == '?';
        if (weights == NULL && c == O_WEIGHTS) return cli_usage_error(cmd, "--weights is for 'graphc eval'");
        if (weights != NULL && !eval_ok) return cli_usage_error(cmd, "option '%s' is for 'graphc run'", argv[optind - 1]);
        switch (c) {
        case 'h': fputs(usage, stdout); return EXIT_OK;
        case O_MODE:
            if (strcmp(optarg, "compiled") == 0) o->mode = MODE_COMPILED;
            else if (strcmp(optarg, "interp") == 0) o->mode = MODE_INTERP;
            else return cli_usage_error(cmd, "--mode: expected compiled or interp, got '%s'", optarg);
            break;
        case O_EPOCHS: if (!cli_parse_i64(cmd, "--epochs", optarg, 1, 1 << 30, &o->epochs)) return EXIT_USAGE; break;
        case O_STEPS: if (!cli_parse_i64(cmd, "--steps", optarg, 1, 1 << 30, &o->steps)) return EXIT_USAGE; break;
        case O_BATCH: if (!cli_parse_i64(cmd, "--batch", optarg, 1, 1 << 24, &o->batch)) return EXIT_USAGE; break;
        case O_LR: if (!cli_parse_f64(cmd, "--lr", optarg, 0, 1e6, &o->lr)) return EXIT_USAGE; break;
        case O_SEED:
            if (!cli_parse_i64(cmd, "--seed", optarg, 0, INT64_MAX, &v)) return EXIT_USAGE;
            o->seed = (uint64_t)v;
            o->have_seed = true;
            break;
        case O_THREADS:
            if (!cli_parse_i64(cmd, "--threads", optarg, 1, 256, &v)) return EXIT_USAGE;
            o->threads = (int)v;
            break;
        case O_DATA: o->data_dir = optarg; break;
        case O_TRAIN_LIMIT: if (!cli_parse_i64(cmd, "--train-limit", optarg, 1, INT64_MAX, &o->train_limit)) return EXIT_USAGE; break;
        case O_TEST_LIMIT: if (!cli_parse_i64(cmd, "--test-limit", optarg, 1, INT64_MAX, &o->test_limit)) return EXIT_USAGE; break;
        case O_VALIDATE: o->validate = true; break;
        case O_SAVE: o->save_path = optarg; break;
        case O_SAVE_EVERY: if (!cli_parse_i64(cmd, "--save-every", optarg, 1, INT64_MAX, &o->save_every)) return EXIT_USAGE; break;
        case O_RESUME: o->resume_path = optarg; break;
        case O_RESET_OPTIMIZER: o->reset_optimizer = true; break;
        case O_CHECK_NUMERICS: o->check_numerics = true; break;
        case O_MAX_MEMORY: if (!parse_bytes(cmd, "--max-memory", optarg, &o->max_memory)) return EXIT_USAGE; break;
        case O_BUCKET_SIZE: if (!parse_bytes(cmd, "--bucket-size", optarg, &o->bucket_bytes)) return EXIT_USAGE; break;
        case O_COMM_TIMEOUT: if (!cli_parse_f64(cmd, "--comm-timeout", optarg, 0.001, 1e7, &comm_timeout)) return EXIT_USAGE; break;
        case O_PLOT:
            if (!cli_plot_path(cmd, optarg)) return EXIT_USAGE;
            o->plot_path = optarg;
            break;
        case O_LOG:
            if (strcmp(optarg, "bar") == 0) *log = LOG_BAR;
            else if (strcmp(optarg, "json") == 0) *log = LOG_JSON;
            else if (strcmp(optarg, "quiet") == 0) *log = LOG_QUIET;
            else return cli_usage_error(cmd, "--log: expected bar, json or quiet, got '%s'", optarg);
            break;
        case O_WEIGHTS: *weights = optarg; break;
        case O_ISA: if (!cli_parse_isa(cmd, optarg, &o->isa)) return EXIT_USAGE; break;
        case O_DTYPE: if (!cli_parse_dtype(cmd, optarg, &bf16)) return EXIT_USAGE; break;
        case ':': return cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
        default: return cli_unknown_option(cmd, run_opts, argv[optind - 1]);
        }
    }
    if (optind != argc - 1) return cli_usage_error(cmd, optind == argc ? "missing FILE" : "expected one FILE");
    if (o->reset_optimizer && !o->resume_path) return cli_usage_error(cmd, "--reset-optimizer goes with --resume PATH");
    if (!cli_apply_dtype(cmd, bf16, &o->isa)) return EXIT_USAGE;
    return -1;
}

static volatile int interrupted;
static volatile sig_atomic_t under_mpirun, stopped_by_mpirun;

/* Ctrl-C or SIGTERM: the run stops after the step in progress and saves.  When mpirun
 * (our parent) sends it, it is ending the job: Open MPI passes a Ctrl-C on as SIGCONT,
 * then SIGTERM a second later and SIGKILL a second after that, and it has stopped
 * reading the ranks' stdout and stderr (a pty and a pipe).  A rank 0 blocked writing its
 * progress bar there would never reach the save, so from then on such writes fail
 * instead of blocking (a write blocked now returns too: no SA_RESTART). */
static void on_sigint(int sig, siginfo_t *info, void *uctx)
{
    (void)sig;
    (void)uctx;
    if (interrupted) _exit(130);   /* a second Ctrl-C does not wait */
    interrupted = 1;
    if (under_mpirun && info && info->si_pid == getppid()) {
        stopped_by_mpirun = 1;
        for (int fd = 1; fd <= 2; fd++) {
            int fl = fcntl(fd, F_GETFL);
            if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        }
    }
}

/* The last word of a job that MPI stops (a collective that failed or never completed). */
static void comm_fatal(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "graphc: %s\n", msg);
    fflush(stderr);
}

/* Joins the MPI job when started by mpirun, and loads the model on every rank; only
 * the lowest rank that fails to load it reports why.  0, or an exit code. */
static int start(const char *cmd, const char *path, Comm **comm, Model *m)
{
    DiagSink d;
    diag_init(&d, NULL);
    const char *np = getenv("OMPI_COMM_WORLD_SIZE");
    if (!comm_available() && np && atoi(np) > 1) {
        if (getenv("OMPI_COMM_WORLD_RANK") && atoi(getenv("OMPI_COMM_WORLD_RANK")) == 0)
            fprintf(stderr, "graphc %s: started by mpirun with %s processes, but this graphc was built without MPI "
                    "(./configure --with-mpi): each process would train alone\n", cmd, np);
        diag_free(&d);
        return EXIT_BAD_INPUT;
    }
    if (comm_open(comm, comm_timeout, &d) != 0) {
        diag_flush(&d, stderr);
        diag_free(&d);
        return EXIT_BAD_INPUT;
    }
    diag_free(&d);
    comm_on_fatal(*comm, comm_fatal, NULL);
    int rc = cli_load_model_quiet(m, path);
    int R = comm_size(*comm), rank = comm_rank(*comm), bad = comm_agree(*comm, rc == 0);
    if (bad >= R ? rank == 0 : bad == rank) cli_report_model(m, rc);
    else if (bad < R && rank == 0) fprintf(stderr, "graphc %s: rank %d of %d could not load %s; stopping\n", cmd, bad, R, path);
    if (bad >= R) return 0;
    cli_free_model(m);
    comm_close(*comm);
    *comm = NULL;
    return EXIT_BAD_INPUT;
}

/* After a failed run: the error, and when this rank failed while the others wait for
 * it inside a collective, the end of the whole job. */
static int run_failed(int rc, Comm *comm, DiagSink *d)
{
    diag_flush(d, stderr);
    if (rc == RUN_STOP_JOB) {
        fprintf(stderr, "graphc: rank %d of %d: stopping all ranks after the error above\n", comm_rank(comm), comm_size(comm));
        fflush(stderr);
        fflush(stdout);
        comm_abort(comm, EXIT_BAD_INPUT);
    }
    return EXIT_BAD_INPUT;
}

int cmd_run(int argc, char **argv)
{
    RunOptions o;
    run_options_default(&o);
    o.isa = cli_isa();
    LogMode log = LOG_BAR;
    int rc = parse_opts("run", argc, argv, &o, &log, NULL, run_usage);
    if (rc >= 0) return rc;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigint;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    o.stop = &interrupted;
    Model m;
    rc = start("run", argv[optind], &o.comm, &m);
    if (rc != 0) return rc;
    under_mpirun = comm_size(o.comm) > 1;
    Progress p;
    progress_init(&p, stdout, log);
    o.report = progress_reporter(&p);
    RunResult r;
    DiagSink d;
    diag_init(&d, NULL);
    rc = train_run(m.graph, &o, &r, NULL, &d);
    progress_end(&p);
    if (rc == RUN_OK) {
        diag_flush(&d, stderr);
        rc = r.interrupted ? 130 : EXIT_OK;
    } else {
        rc = run_failed(rc, o.comm, &d);
    }
    diag_free(&d);
    run_result_free(&r);
    cli_free_model(&m);
    if (rc == 130 && stopped_by_mpirun) {
        /* MPI_Finalize would wait for mpirun's PMIx server, which no longer answers,
         * until the SIGKILL */
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    comm_close(o.comm);
    return rc;
}

static void keep_eval(void *ctx, const RunEvent *ev)
{
    if (ev->kind == RUN_EVAL) *(RunEvalInfo *)ctx = ev->u.eval;
}

int cmd_eval(int argc, char **argv)
{
    RunOptions o;
    run_options_default(&o);
    o.isa = cli_isa();
    LogMode log = LOG_BAR;
    const char *weights = NULL;
    int rc = parse_opts("eval", argc, argv, &o, &log, &weights, eval_usage);
    if (rc >= 0) return rc;
    if (!weights) return cli_usage_error("eval", "missing --weights PATH");
    Model m;
    rc = start("eval", argv[optind], &o.comm, &m);
    if (rc != 0) return rc;
    DiagSink d;
    diag_init(&d, NULL);
    Weights w;
    double loss, acc;
    RunEvalInfo res = { 0 };
    o.report = (RunReporter){ .fn = keep_eval, .ctx = &res };
    rc = EXIT_BAD_INPUT;
    if (weights_init(&w, m.graph, 0, &d) == 0) {
        if (checkpoint_load(weights, m.graph, &w, &d) == 0 && eval_run(m.graph, &o, &w, &loss, &acc, &d) == RUN_OK) {
            if (comm_rank(o.comm) == 0) progress_eval_line(stdout, &res);
            rc = comm_rank(o.comm) == 0 && cli_text_baselines(m.graph, o.data_dir, &d) != 0 ? EXIT_BAD_INPUT : EXIT_OK;
        }
        weights_free(&w);
    }
    diag_flush(&d, stderr);
    diag_free(&d);
    cli_free_model(&m);
    comm_close(o.comm);
    return rc;
}
