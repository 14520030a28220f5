/* Training and evaluation runs: data, the two executors, progress, checkpoints. */
#ifndef GRAPHC_TRAIN_H
#define GRAPHC_TRAIN_H
#include "exec/comm.h"
#include "run/data.h"
#include "exec/executor.h"

typedef enum LogMode { LOG_BAR, LOG_QUIET, LOG_JSON, LOG_MODE_COUNT } LogMode;

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
    LogMode log;
    FILE *out;                      /* progress and results (stdout) */
    /* Data parallel (docs/distributed.md): with a Comm of N ranks, each rank trains on
     * its `batch` rows of every global batch of N * batch, gradients are averaged by the
     * allreduce ops of pass_allreduce, only rank 0 prints and writes checkpoints, and
     * evaluation is split over the ranks. */
    Comm *comm;                     /* NULL: one process */
    int64_t bucket_bytes;           /* gradient bucket size (0: ALLREDUCE_DEFAULT_BUCKET) */
    KIsa isa;                       /* the kernels' variant (KISA_AUTO: the best the CPU runs) */
} RunOptions;

typedef struct RunResult {
    int64_t nsteps;
    float *step_loss, *step_acc;    /* per step */
    int64_t nepochs;
    float *epoch_loss, *epoch_acc;  /* training means per epoch */
    float *epoch_test_loss, *epoch_test_acc; /* NaN where not evaluated */
    double test_loss, test_acc;
    double seconds, train_seconds;
    size_t peak_bytes;
    int64_t first_step;             /* where this run started (resume); earlier entries are NaN */
    bool interrupted;               /* stopped by *stop before the end */
} RunResult;

void run_options_default(RunOptions *o);
/* Trains the forward graph `fwd` (lowered and inferred, symbols unbound) as its train
 * block and the options say, then evaluates.  `w_out`, if not NULL, receives the
 * trained weights (free with weights_free).  0, or -1 with the error in d. */
int train_run(const Graph *fwd, const RunOptions *o, RunResult *r, Weights *w_out, DiagSink *d);
/* Evaluates weights `w` on the test set of fwd's data source.  0 or -1. */
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
