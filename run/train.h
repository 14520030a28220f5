/* Training and evaluation runs: data, the two executors, progress, checkpoints. */
#ifndef GRAPHC_TRAIN_H
#define GRAPHC_TRAIN_H
#include "exec/comm.h"
#include "run/data.h"
#include "exec/executor.h"

/* ---- what a run reports ------------------------------------------------------------------
 * The library never prints: train_run and eval_run tell their caller what happens
 * through RunOptions.report (the graphc command draws its progress bar, JSON lines or
 * quiet results from these events: cli/progress.c).  In a data-parallel job only rank
 * 0 reports.  A number that was not measured is flagged false (has_acc, tested), never
 * given as NaN: a NaN or Inf in an event is a value that was measured.  The strings an
 * event points to live only during the call. */
typedef enum RunEventKind {
    RUN_START,        /* setup done, every rank ready, before the first step: RunStartInfo */
    RUN_STEP,         /* a training step done: RunStepInfo */
    RUN_EVAL,         /* an evaluation on the test set done (per epoch, or the final one): RunEvalInfo */
    RUN_EPOCH,        /* an epoch done, with its metrics: RunEpochInfo */
    RUN_SAVED,        /* a checkpoint written: RunSavedInfo */
    RUN_INTERRUPTED,  /* stopped by *stop (after RUN_SAVED if it saved): RunInterruptInfo */
    RUN_FINISHED,     /* the run is over, results final: RunFinishInfo */
    RUN_EVENT_COUNT
} RunEventKind;

typedef struct RunStartInfo {
    const char *model;             /* the model's name, or "model" */
    int64_t epochs, steps, batch;  /* steps per epoch; batch per rank */
    const char *mode;              /* "compiled" or "interp" */
    const char *blas;              /* kern_blas_info() */
    int threads;                   /* of this rank's pool */
    int ranks;                     /* 1 without MPI */
    int64_t global_batch;          /* ranks x batch */
    const char *comm;              /* comm_describe() */
    const char *optimizer;         /* optim_describe(): "sgd(lr=0.1, momentum=0.9)" */
    const char *resume_path;       /* NULL unless resuming */
    int64_t first_step;            /* 0, or where the checkpoint left off */
    int64_t train_examples, test_examples;
} RunStartInfo;

typedef struct RunStepInfo {
    int64_t epoch, epochs;         /* 1-based */
    int64_t step, steps;           /* 1-based within the epoch */
    int64_t global_step;           /* 0-based over the run */
    int64_t done;                  /* steps this run took in this epoch (fewer than step after a resume) */
    double seconds;                /* since this epoch's first step here started */
    double loss, acc;              /* the means over those steps */
    bool has_acc;                  /* the model has an accuracy output */
} RunStepInfo;

typedef struct RunEvalInfo {
    int64_t epoch;                 /* 1-based after an epoch; 0 for the final evaluation */
    double loss, acc;
    bool has_acc;
    int64_t examples;
    double seconds;
} RunEvalInfo;

typedef struct RunEpochInfo {
    int64_t epoch, epochs;         /* 1-based */
    int64_t steps;                 /* per epoch */
    int64_t steps_run;             /* taken by this run (fewer after a resume) */
    double seconds;                /* of those steps, evaluation excluded */
    double loss, acc;              /* training means over those steps */
    bool has_acc;
    bool tested;                   /* test_loss and test_acc measured (--validate, --plot) */
    double test_loss, test_acc;
    int ranks;
    int64_t global_batch;
    /* rank 0's view with ranks > 1: the gradient allreduces' time from start to
     * completion, and the part of it the step waited for */
    double allreduce_ms_per_step, comm_wait_ms_per_step;
} RunEpochInfo;

typedef enum RunSaveReason { SAVE_EVERY, SAVE_INTERRUPTED, SAVE_FINAL, SAVE_REASON_COUNT } RunSaveReason;

typedef struct RunSavedInfo {
    const char *path;
    int64_t step;                  /* the steps the checkpoint holds */
    RunSaveReason reason;
} RunSavedInfo;

typedef struct RunInterruptInfo {
    int64_t step;                  /* steps complete when stopped */
    const char *saved;             /* the checkpoint written, or NULL (no --save) */
} RunInterruptInfo;

typedef struct RunFinishInfo {
    double test_loss, test_acc;
    bool has_acc;
    int64_t test_examples;
    double seconds, train_seconds;
    const char *saved;             /* the checkpoint written at the end, or NULL */
    const char *plot;              /* the plot written, or NULL */
} RunFinishInfo;

typedef struct RunEvent {
    RunEventKind kind;
    union {                        /* the member named by kind */
        RunStartInfo start;
        RunStepInfo step;
        RunEvalInfo eval;
        RunEpochInfo epoch;
        RunSavedInfo saved;
        RunInterruptInfo interrupted;
        RunFinishInfo finished;
    } u;
} RunEvent;

typedef struct RunReporter {
    void (*fn)(void *ctx, const RunEvent *ev);   /* NULL: report nothing */
    void *ctx;
} RunReporter;

typedef struct RunOptions {
    ExecMode mode;
    int64_t epochs, steps, batch;   /* 0: as the train block says */
    double lr;                      /* < 0: as the train block says */
    bool have_seed;
    uint64_t seed;
    int threads;                    /* 0: all cores */
    int64_t train_limit;            /* use only the first N training samples (0: all) */
    int64_t test_limit;             /* evaluate on the first N test samples (0: all) */
    bool validate;                  /* evaluate on the test set after every epoch */
    const char *save_path;          /* checkpoint written at the end (and every save_every steps) */
    int64_t save_every;             /* steps between checkpoints while training (0: only at the end) */
    const char *resume_path;        /* continue from this checkpoint: weights, optimizer state, step */
    bool reset_optimizer;           /* resume even if the checkpoint has no optimizer state (zeros) */
    volatile int *stop;             /* set (by a signal handler) to stop after the current step */
    bool check_numerics;            /* stop at the first NaN or Inf, naming the op and its line */
    int64_t max_memory;             /* refuse to train if the step needs more bytes (0: no limit) */
    uint64_t passes_off;            /* compiler passes switched off (CompileOptions.passes_off) */
    const char *plot_path;          /* SVG of the run */
    const char *data_dir;           /* overrides mnist("...") */
    RunReporter report;             /* progress and results (rank 0 only) */
    /* Data parallel (docs/distributed.md): with a Comm of N ranks, each rank trains on
     * its `batch` rows of every global batch of N * batch, gradients are averaged by the
     * allreduce ops of pass_allreduce, only rank 0 reports and writes checkpoints, and
     * evaluation is split over the ranks.  Every rank must be started with the same
     * settings (checked at the start: a difference is an error naming it). */
    Comm *comm;                     /* NULL: one process */
    int64_t bucket_bytes;           /* gradient bucket size (0: ALLREDUCE_DEFAULT_BUCKET) */
} RunOptions;

typedef struct RunResult {
    int64_t nsteps;
    float *step_loss, *step_acc;    /* per step */
    int64_t nepochs;
    float *epoch_loss, *epoch_acc;  /* training means per epoch */
    float *epoch_test_loss, *epoch_test_acc; /* NaN where not evaluated */
    double test_loss, test_acc;
    int64_t test_examples;
    double seconds, train_seconds;
    size_t peak_bytes;
    int64_t first_step;             /* where this run started (resume); earlier entries are NaN */
    bool interrupted;               /* stopped by *stop before the end */
} RunResult;

/* train_run's and eval_run's failures: RUN_FAILED with the reason in d.  In a
 * data-parallel job, RUN_STOP_JOB says that this rank failed while the others may be
 * waiting for it inside a collective: the caller reports d and ends the whole job
 * (comm_abort).  Every rank reaching the same error returns RUN_FAILED, and only the
 * lowest of them (rank 0 when all do) keeps the message. */
enum { RUN_OK = 0, RUN_FAILED = -1, RUN_STOP_JOB = -2 };

void run_options_default(RunOptions *o);
/* Trains the forward graph `fwd` (lowered and inferred, symbols unbound) as its train
 * block and the options say, then evaluates.  `w_out`, if not NULL, receives the
 * trained weights (free with weights_free).  A loss that becomes NaN or Inf stops the
 * run with an error naming the step; no checkpoint of non-finite weights is written.
 * RUN_OK (also when stopped by *stop: r->interrupted), or RUN_FAILED / RUN_STOP_JOB with
 * the error in d.  r is filled as far as the run went; free it with run_result_free. */
int train_run(const Graph *fwd, const RunOptions *o, RunResult *r, Weights *w_out, DiagSink *d);
/* Evaluates weights `w` on the test set of fwd's data source, reporting RUN_EVAL (with
 * the number of examples).  RUN_OK, or RUN_FAILED with the error in d. */
int eval_run(const Graph *fwd, const RunOptions *o, Weights *w, double *loss, double *acc, DiagSink *d);
void run_result_free(RunResult *r);

/* ---- checkpoints (docs/checkpoint.md) ------------------------------------------------- */
/* Writes every var of `g` atomically (temp file, fsync, rename, fsync of the folder). */
int checkpoint_save(const char *path, const Graph *g, const Weights *w, uint64_t seed, DiagSink *d);
/* Loads the vars of `g` present in the file; every param of g must be there with the
 * same shape, and g's optimizer state is loaded when the file has it (all of it, or
 * none: then it is left as it is).  Records of optimizer state that g does not have
 * are checked and skipped.  Nothing is changed in `w` unless the whole file is valid. */
int checkpoint_load(const char *path, const Graph *g, Weights *w, DiagSink *d);
/* The same for resuming training graph g: every optimizer state var of g must be there
 * too (to go on as if never stopped), unless reset_optimizer, which sets it to zero
 * instead (the file's, if any, is checked and not used). */
int checkpoint_resume(const char *path, const Graph *g, Weights *w, bool reset_optimizer, DiagSink *d);
/* The seed a checkpoint was trained with (to resume with the same masks and order),
 * from its header, which is checked; the file must be a regular file. */
int checkpoint_seed(const char *path, uint64_t *seed, DiagSink *d);

#endif
