/* Training and evaluation runs.  See train.h. */
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec/pipeline.h"
#include "graph/passes.h"
#include "kernels/kern.h"
#include "run/plot.h"
#include "run/sources.h"
#include "run/train.h"
#include "util/outfile.h"

void run_options_default(RunOptions *o)
{
    memset(o, 0, sizeof *o);
    o->mode = MODE_COMPILED;
    o->lr = -1;
}

void run_result_free(RunResult *r)
{
    gc_free(r->step_loss);
    gc_free(r->step_acc);
    gc_free(r->epoch_loss);
    gc_free(r->epoch_acc);
    gc_free(r->epoch_test_loss);
    gc_free(r->epoch_test_acc);
    memset(r, 0, sizeof *r);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the data a model is fed ------------------------------------------------------------- */

typedef struct Feed {
    int x_input, y_input;    /* indices into g->inputs */
    int16_t batch_sym;       /* the symbol of the batch dimension, or -1 */
    int64_t sample_size;
    int64_t labels_per;      /* labels per example (a sequence model: one per position) */
    Dataset train, test;
} Feed;


/* The model's classes: the logits' last dimension when it is a known size, else 0.
 * Its description (what says so) goes into from[n]. */
static int32_t model_classes(const Graph *g, char *from, size_t n)
{
    const Node *lg = g->logits >= 0 ? &g->nodes[g->logits] : NULL;
    if (!lg || lg->shape.rank < 1 || lg->shape.d[lg->shape.rank - 1].sym >= 0 ||
        lg->shape.d[lg->shape.rank - 1].v > INT32_MAX)
        return 0;
    char b[96];
    shape_str(g, &lg->shape, b, sizeof b);
    if (lg->name) snprintf(from, n, "logits '%s' %s%s", lg->name, dtype_name(lg->dtype), b);
    else snprintf(from, n, "logits %s%s", dtype_name(lg->dtype), b);
    return (int32_t)lg->shape.d[lg->shape.rank - 1].v;
}

static int feed_setup(const Graph *g, const TrainSpec *t, const RunOptions *o, bool need_train, Feed *f, DiagSink *d)
{
    memset(f, 0, sizeof *f);
    f->x_input = f->y_input = -1;
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        if (g->inputs[i] == g->label_input) f->y_input = i;
        else if ((n->dtype == DT_F32 || n->dtype == DT_I32) && f->x_input < 0) f->x_input = i;
    }
    if (f->x_input < 0 || f->y_input < 0 || g->ninputs != 2) {
        diag_plain(d, "%s: training feeds one input of examples (f32, or i32 ids) and one i32 input of class labels "
                   "(used as cross_entropy's labels); this model has %d input%s",
                   g->src ? g->src->name : "model", g->ninputs, g->ninputs == 1 ? "" : "s");
        return -1;
    }
    const Node *x = &g->nodes[g->inputs[f->x_input]], *y = &g->nodes[g->inputs[f->y_input]];
    char b[128];
    if (x->shape.rank < 2 || x->shape.d[0].sym < 0 || x->shape.d[0].v != 1) {
        diag_plain(d, "input '%s' %s: the first dimension must be the batch symbol, e.g. f32[B, 28, 28, 1]",
                   x->name, shape_str(g, &x->shape, b, sizeof b));
        return -1;
    }
    f->batch_sym = x->shape.d[0].sym;
    /* what the data must fit: dataset_check compares every set with it */
    char xtype[128], ytype[128], from[160];
    DataWant want = { .x_name = x->name, .x_type = xtype, .x_ids = x->dtype == DT_I32, .x_rank = x->shape.rank - 1,
                      .y_name = y->name,
                      .y_type = ytype, .y_per_example = 1, .classes_from = from };
    snprintf(xtype, sizeof xtype, "%s%s", dtype_name(x->dtype), shape_str(g, &x->shape, b, sizeof b));
    snprintf(ytype, sizeof ytype, "%s%s", dtype_name(y->dtype), shape_str(g, &y->shape, b, sizeof b));
    want.nclasses = model_classes(g, from, sizeof from);
    f->sample_size = 1;
    for (int i = 1; i < x->shape.rank; i++) {
        if (x->shape.d[i].sym >= 0 || i > 4) {
            diag_plain(d, "input '%s' %s: the dimensions after the batch must be known sizes", x->name,
                       shape_str(g, &x->shape, b, sizeof b));
            return -1;
        }
        want.x_shape[i - 1] = x->shape.d[i].v;
        f->sample_size *= x->shape.d[i].v;
    }
    for (int i = 0; i < y->shape.rank; i++)   /* a dim of another symbol: 0, refused */
        if (y->shape.d[i].sym != f->batch_sym) want.y_per_example *= y->shape.d[i].sym >= 0 ? 0 : y->shape.d[i].v;
    f->labels_per = want.y_per_example;
    TrainSpec src = *t;
    if (o->data_dir) src.data_path = o->data_dir;
    if (data_source_open(&src, &want, need_train, &f->train, &f->test, d) != 0) return -1;
    if ((need_train && dataset_check(&f->train, &want, d) != 0) || dataset_check(&f->test, &want, d) != 0) goto fail;
    if (o->train_limit > 0 && f->train.count > o->train_limit) f->train.count = o->train_limit;
    if (o->test_limit > 0 && f->test.count > o->test_limit) f->test.count = o->test_limit;
    return 0;
fail:
    dataset_free(&f->train);
    dataset_free(&f->test);
    return -1;
}

static void feed_free(Feed *f)
{
    dataset_free(&f->train);
    dataset_free(&f->test);
}

static int output_index(const Graph *g, const char *name)
{
    for (int i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0) return i;
    return -1;
}

/* ---- evaluation ------------------------------------------------------------------------------ */

typedef struct Evaluator {
    Step full, rest;           /* at the batch, and at the last partial batch */
    int64_t batch, rest_n;
    int64_t first, count;      /* the test examples this rank evaluates */
    Comm *comm;
    float *x;
    int32_t *y;
} Evaluator;

static void evaluator_free(Evaluator *e)
{
    step_free(&e->full);
    step_free(&e->rest);
    gc_free(e->x);
    gc_free(e->y);
    memset(e, 0, sizeof *e);
}

/* With several ranks, rank r evaluates its share [r n / N, (r+1) n / N) of the n test
 * examples and the sums are gathered. */
static int evaluator_init(Evaluator *e, const Graph *fwd, const Feed *f, int64_t batch, const CompileOptions *co,
                          Weights *w, Comm *comm, DiagSink *d)
{
    memset(e, 0, sizeof *e);
    int R = comm_size(comm), r = comm_rank(comm);
    e->comm = comm;
    e->first = f->test.count * r / R;
    e->count = f->test.count * (r + 1) / R - e->first;
    int64_t n = e->count;
    if (n == 0) return 0;   /* more ranks than test examples: nothing here */
    e->batch = batch < n ? batch : n;
    e->rest_n = n % e->batch;
    if (prepare(fwd, FOR_EVALUATION, e->batch, co, w, &e->full, d) != 0 ||
        (e->rest_n && prepare(fwd, FOR_EVALUATION, e->rest_n, co, w, &e->rest, d) != 0))
        goto fail;
    e->x = gc_calloc((size_t)(e->batch * f->sample_size), sizeof *e->x);
    e->y = gc_calloc((size_t)(e->batch * f->labels_per), sizeof *e->y);
    if (!e->x || !e->y) { diag_plain(d, "out of memory"); goto fail; }
    return 0;
fail:
    evaluator_free(e);
    return -1;
}

/* Whether the evaluated graph has an accuracy output (pass_inference adds one beside
 * a cross-entropy loss). */
static bool ev_has_acc(const Evaluator *e)
{
    const Graph *g = e->full.graph ? e->full.graph : e->rest.graph;
    return g && output_index(g, "accuracy") >= 0;
}

static int evaluate(Evaluator *e, const Feed *f, StepEnv env, double *loss, double *acc)
{
    const Graph *g = e->full.graph ? e->full.graph : e->rest.graph;
    int li = g ? output_index(g, "loss") : -1, ai = g ? output_index(g, "accuracy") : -1;
    double lsum = 0, asum = 0;
    env.training = false;
    for (int64_t k = 0; g && k < e->count; k += e->batch) {
        int64_t n = e->count - k < e->batch ? e->count - k : e->batch;
        dataset_slice(&f->test, e->first + k, n, e->x, e->y);
        const void *feeds[2];
        feeds[f->x_input] = e->x;
        feeds[f->y_input] = e->y;
        float outv[8][1];
        float *outs[8] = { 0 };
        if (g->noutputs > 8) return -1;
        if (li >= 0) outs[li] = outv[li];
        if (ai >= 0) outs[ai] = outv[ai];
        /* the model's own outputs (probabilities) are not needed here */
        for (int i = 0; i < g->noutputs; i++)
            if (i != li && i != ai) outs[i] = NULL;
        if (executor_run(n == e->batch ? e->full.ex : e->rest.ex, feeds, outs, &env) != 0) return -1;
        if (li >= 0) lsum += (double)outv[li][0] * (double)n;
        if (ai >= 0) asum += (double)outv[ai][0] * (double)n;
    }
    double sums[2] = { lsum, asum };
    comm_sum_f64(e->comm, sums, 2, "the evaluation's sums", env.step);
    lsum = sums[0];
    asum = sums[1];
    *loss = lsum / (double)f->test.count;
    *acc = ai >= 0 ? asum / (double)f->test.count : NAN;
    return 0;
}

/* Threads per process: --threads, else the cores shared among this machine's ranks. */
static int default_threads(const RunOptions *o, const Comm *comm)
{
    if (o->threads > 0) return o->threads;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), per = cores / comm_local_size(comm);
    return per > 0 ? per : 1;
}

/* ---- what every rank must agree on ---------------------------------------------------------- */

#define FNV_BASIS 1469598103934665603ull

static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Whether every rank holds the same weights and the same buckets (a 52-bit hash of the
 * weights' bytes and of the step's allreduce sizes, compared as its minimum and
 * maximum over the ranks): true when every rank runs the same graphc on the same model
 * and options; checked because a difference would otherwise go unnoticed or pair
 * collectives of different sizes. */
static int weights_agree(Comm *comm, const Graph *tg, const Weights *w, const char *when, DiagSink *d)
{
    if (comm_size(comm) == 1) return 0;
    uint64_t h = FNV_BASIS;
    for (int i = 0; i < tg->nnodes; i++)
        if (tg->nodes[i].op == OP_ALLREDUCE) h = (h ^ (uint64_t)shape_numel(&tg->nodes[i].shape)) * 1099511628211ull;
    for (int v = 0; v < w->n; v++) h = fnv(h, w->data[v], (size_t)shape_numel(&w->shapes[v]) * 4);
    double mine = (double)(h >> 12), v[2] = { mine, -mine };
    comm_min_f64(comm, v, 2, "the check that the ranks' weights agree", w->step);
    if (v[0] == -v[1]) return 0;
    diag_plain(d, "the ranks' weights or gradient buckets differ %s (step %lld): every rank must run the same graphc "
               "on the same model with the same options", when, (long long)w->step);
    return -1;
}

/* A fingerprint of a data set: its size and up to 64 evenly spaced examples, so that
 * ranks reading different files (or limits) are told apart without hashing it all. */
static uint64_t dataset_hash(const Dataset *ds)
{
    uint64_t h = fnv(FNV_BASIS, &ds->count, sizeof ds->count);
    h = fnv(h, &ds->sample_size, sizeof ds->sample_size);
    int64_t n = ds->count < 64 ? ds->count : 64;
    for (int64_t k = 0; k < n; k++) {
        int64_t i = k * ds->count / n;
        if (ds->text) {   /* a window and the byte after it */
            h = fnv(h, ds->text + i * ds->stride, (size_t)ds->sample_size + 1);
            continue;
        }
        h = fnv(h, ds->x + i * ds->sample_size, (size_t)ds->sample_size * sizeof *ds->x);
        h = fnv(h, ds->y + i, sizeof *ds->y);
    }
    return h;
}

static uint64_t model_hash(const Graph *fwd)
{
    return fwd->src && fwd->src->text ? fnv(FNV_BASIS, fwd->src->text, fwd->src->len) : 0;
}

typedef enum SettingKind { SET_INT, SET_LR, SET_MODE, SET_YES_NO, SET_HASH } SettingKind;

/* One run setting that must be the same on every rank. */
typedef struct Setting {
    const char *name;    /* as the user knows it, e.g. "--batch" */
    SettingKind kind;
    uint64_t v;          /* SET_LR: the float's bits */
} Setting;

enum { MAX_SETTINGS = 20 };

static void setting_str(const Setting *s, uint64_t v, char *buf, size_t n)
{
    switch (s->kind) {
    case SET_LR: {
        float f;
        uint32_t bits = (uint32_t)v;
        memcpy(&f, &bits, sizeof f);
        snprintf(buf, n, "%g", f);
        break;
    }
    case SET_MODE: snprintf(buf, n, "%s", exec_mode_name((ExecMode)v)); break;
    case SET_YES_NO: snprintf(buf, n, "%s", v ? "yes" : "no"); break;
    case SET_HASH: snprintf(buf, n, "hash %016llx", (unsigned long long)v); break;
    default: snprintf(buf, n, "%lld", (long long)v); break;
    }
}

/* The ranks whose value of one setting differs from rank 0's, as runs of consecutive
 * ranks holding the same value (the first few of them). */
typedef struct Differ {
    uint64_t v0;          /* rank 0's value */
    int nruns, more;      /* runs kept; differing ranks past them */
    struct { uint64_t v; int first, last; } run[4];
} Differ;

static void differ_add(Differ *df, int q, uint64_t v)
{
    if (q == 0) {
        df->v0 = v;
        return;
    }
    if (v == df->v0) return;
    if (df->nruns > 0 && df->run[df->nruns - 1].v == v && df->run[df->nruns - 1].last == q - 1) {
        df->run[df->nruns - 1].last = q;
    } else if (df->nruns < 4) {
        df->run[df->nruns].v = v;
        df->run[df->nruns].first = df->run[df->nruns].last = q;
        df->nruns++;
    } else {
        df->more++;
    }
}

/* "--batch is 32 on rank 0 but 16 on ranks 1-3" */
static size_t differ_str(const Differ *df, const Setting *s, char *buf, size_t n)
{
    char a[48];
    size_t used = 0;
#define PUT(...) (used += (size_t)snprintf(buf + used, used < n ? n - used : 0, __VA_ARGS__))
    setting_str(s, df->v0, a, sizeof a);
    PUT("%s is %s on rank 0 but", s->name, a);
    for (int i = 0; i < df->nruns; i++) {
        setting_str(s, df->run[i].v, a, sizeof a);
        if (df->run[i].first == df->run[i].last) PUT("%s %s on rank %d", i ? "," : "", a, df->run[i].first);
        else PUT("%s %s on ranks %d-%d", i ? "," : "", a, df->run[i].first, df->run[i].last);
    }
    if (df->more) PUT(" (and on %d more rank%s)", df->more, df->more == 1 ? "" : "s");
#undef PUT
    return used < n ? used : n ? n - 1 : 0;
}

/* Compares the settings of every rank.  0 when they agree; else -1 on every rank, with
 * one message on rank 0 naming each setting that differs and the ranks' values.  The
 * values travel as 32-bit halves in doubles (exact), each rank in its own slots of a
 * sum over blocks of RANK_BLOCK ranks: nothing is allocated, so no rank can fail here
 * alone and leave the others in the collective. */
static int settings_agree(Comm *comm, const Setting *set, int n, DiagSink *d)
{
    enum { RANK_BLOCK = 32 };
    int R = comm_size(comm), rank = comm_rank(comm);
    if (R == 1) return 0;
    double block[RANK_BLOCK * MAX_SETTINGS * 2];
    Differ df[MAX_SETTINGS];
    memset(df, 0, sizeof df);
    if (n > MAX_SETTINGS) n = MAX_SETTINGS;
    for (int q0 = 0; q0 < R; q0 += RANK_BLOCK) {
        memset(block, 0, sizeof block);
        if (rank >= q0 && rank < q0 + RANK_BLOCK)
            for (int k = 0; k < n; k++) {
                block[((rank - q0) * n + k) * 2] = (double)(set[k].v >> 32);
                block[((rank - q0) * n + k) * 2 + 1] = (double)(set[k].v & 0xffffffffu);
            }
        comm_sum_f64(comm, block, (size_t)RANK_BLOCK * (size_t)n * 2, "the comparison of the ranks' settings", -1);
        for (int q = q0; q < R && q < q0 + RANK_BLOCK; q++)
            for (int k = 0; k < n; k++) {
                const double *p = block + ((q - q0) * n + k) * 2;
                differ_add(&df[k], q, (uint64_t)p[0] << 32 | (uint64_t)p[1]);
            }
    }
    char msg[1024] = "";
    size_t used = 0;
    for (int k = 0; k < n; k++) {
        if (df[k].nruns == 0 || used + 3 >= sizeof msg) continue;
        if (used) used += (size_t)snprintf(msg + used, sizeof msg - used, "; ");
        used += differ_str(&df[k], &set[k], msg + used, sizeof msg - used);
    }
    if (!msg[0]) return 0;
    if (rank == 0)
        diag_plain(d, "the ranks were started with different settings: %s. Every rank must run the same model on the "
                   "same data with the same options", msg);
    return -1;
}

/* A rank that fails before training tells the others, which are waiting in the
 * agreement; only the lowest failing rank reports (the same mistake fails every rank
 * alike).  Returns -1. */
static int setup_failed(Comm *comm, DiagSink *d)
{
    if (comm_size(comm) > 1 && comm_agree(comm, false) != comm_rank(comm)) diag_clear(d);
    return -1;
}

/* ---- the run ------------------------------------------------------------------------------------- */

/* How a part of the run ends.  After the start, a rank that fails alone may leave the
 * others blocked in a collective (the job must be stopped); ranks that stop together
 * (they all saw the same thing) leave the message with one of them only. */
typedef enum Stop { GO_ON = 0, STOP_ALONE, STOP_TOGETHER, STOP_INTERRUPTED } Stop;

/* Everything a training run holds, so that each part of it is a function of its own. */
typedef struct Run {
    const Graph *fwd;
    const RunOptions *o;
    RunResult *r;
    DiagSink *d;
    TrainSpec t;            /* the train block with the options applied */
    Comm *comm;
    int R, rank;
    Feed f;
    int64_t gbatch;         /* the global batch: R ranks of t.batch rows each */
    int64_t steps;          /* per epoch */
    int64_t first;          /* the step this run starts at: 0, or where the checkpoint left off */
    const char *save;       /* --save, else the train block's checkpoint, or NULL */
    Pool *pool;             /* this run's threads */
    Step step;              /* the training step */
    const Graph *tg;        /* step.graph */
    Weights w;
    Executor *ex;           /* step.ex */
    Evaluator ev;
    float *x;               /* a batch of this rank's rows */
    int32_t *y;
    int64_t *perm, perm_pass;
    StepEnv env;
    int li, ai;             /* tg's loss and accuracy outputs (ai < 0: no accuracy) */
    bool stop_all;          /* with several ranks: some rank was asked to stop */
    double t0;
} Run;

static void emit(const Run *run, RunEvent ev)
{
    if (run->rank == 0 && run->o->report.fn) run->o->report.fn(run->o->report.ctx, &ev);
}

static const char *model_file(const Graph *g)
{
    return g->src ? g->src->name : "model";
}

/* The train block with the options applied. */
static int spec_setup(Run *run)
{
    const RunOptions *o = run->o;
    TrainSpec *t = &run->t;
    *t = run->fwd->train;
    if (!t->present || t->minimize < 0) {
        diag_plain(run->d, "%s: the model has no train block: nothing to train", model_file(run->fwd));
        return -1;
    }
    if (o->epochs > 0) t->epochs = o->epochs;
    if (o->steps > 0) t->steps = o->steps;
    if (o->batch > 0) t->batch = o->batch;
    if (o->lr >= 0) t->lr = (float)o->lr;
    if (o->have_seed) t->seed = o->seed;
    /* resuming: the run's seed is the checkpoint's (same order, same masks), unless the
     * user asks for another one */
    if (o->resume_path && !o->have_seed && checkpoint_seed(o->resume_path, &t->seed, run->d) != 0) return -1;
    run->save = o->save_path ? o->save_path : t->checkpoint;
    if (o->save_every && !run->save) {
        diag_plain(run->d, "saving every %lld steps needs a checkpoint path: --save PATH, or checkpoint = \"...\" in the "
                   "train block", (long long)o->save_every);
        return -1;
    }
    run->pool = pool_new(default_threads(o, run->comm));
    if (!run->pool) {
        diag_plain(run->d, "out of memory");
        return -1;
    }
    return 0;
}

/* The data, and the steps it gives. */
static int data_setup(Run *run)
{
    Feed *f = &run->f;
    if (feed_setup(run->fwd, &run->t, run->o, true, f, run->d) != 0) return -1;
    run->gbatch = run->t.batch * run->R;
    if (run->gbatch > f->train.count) {
        if (run->R > 1)
            diag_plain(run->d, "%d ranks x batch %lld = %lld is larger than the %lld training examples", run->R,
                       (long long)run->t.batch, (long long)run->gbatch, (long long)f->train.count);
        else
            diag_plain(run->d, "batch %lld is larger than the %lld training examples", (long long)run->t.batch,
                       (long long)f->train.count);
        return -1;
    }
    int64_t per_pass = dataset_batches_per_pass(&f->train, run->gbatch);
    run->steps = run->t.steps ? run->t.steps : per_pass;
    return 0;
}

/* The training step and the evaluation (the pipeline), and the weights, or the
 * checkpoint's. */
static int step_setup(Run *run)
{
    const Graph *fwd = run->fwd;
    const RunOptions *o = run->o;
    const Feed *f = &run->f;
    TrainSpec t = run->t;
    DiagSink *d = run->d;
    /* the step, its weights and its evaluation; --max-memory counts the weights, the
     * plan and a batch of inputs before any of them is allocated */
    CompileOptions co = {
        .mode = o->mode, .pool = run->pool, .ranks = run->R, .bucket_bytes = o->bucket_bytes, .passes_off = o->passes_off,
        .max_memory = o->max_memory, .extra_bytes = t.batch * f->sample_size * 4, .seed = t.seed,
    };
    if (prepare(fwd, FOR_TRAINING, t.batch, &co, &run->w, &run->step, d) != 0) return -1;
    run->tg = run->step.graph;
    run->ex = run->step.ex;
    co.max_memory = 0;
    if (evaluator_init(&run->ev, fwd, f, t.batch, &co, &run->w, run->comm, d) != 0) return -1;
    if (o->resume_path) {
        if (checkpoint_resume(o->resume_path, run->tg, &run->w, o->reset_optimizer, d) != 0) return -1;
        if (run->w.step < 0 || run->w.step > t.epochs * run->steps) {
            diag_plain(d, "%s: the checkpoint is at step %lld, past the %lld steps of this run", o->resume_path,
                       (long long)run->w.step, (long long)(t.epochs * run->steps));
            return -1;
        }
    }
    run->first = run->w.step;
    /* before the first step: an output that cannot be written would lose the run */
    if (run->rank == 0 && (outfile_check(run->save, "checkpoint", d) != 0 || outfile_check(o->plot_path, "plot", d) != 0))
        return -1;
    return 0;
}

/* A batch's buffers, and the result's arrays (NaN for what this run does not measure). */
static int buffers_setup(Run *run)
{
    RunResult *r = run->r;
    int64_t n = run->t.batch * run->f.sample_size;
    if (!exec_fits_memory((double)n * 4, "a batch of inputs", run->d)) return -1;
    run->x = gc_calloc((size_t)n, sizeof *run->x);
    run->y = gc_calloc((size_t)(run->t.batch * run->f.labels_per), sizeof *run->y);
    run->perm = gc_calloc((size_t)run->f.train.count, sizeof *run->perm);
    run->perm_pass = -1;
    r->nsteps = run->t.epochs * run->steps;
    r->nepochs = run->t.epochs;
    r->first_step = run->first;
    r->step_loss = gc_calloc((size_t)r->nsteps, sizeof(float));
    r->step_acc = gc_calloc((size_t)r->nsteps, sizeof(float));
    r->epoch_loss = gc_calloc((size_t)r->nepochs, sizeof(float));
    r->epoch_acc = gc_calloc((size_t)r->nepochs, sizeof(float));
    r->epoch_test_loss = gc_calloc((size_t)r->nepochs, sizeof(float));
    r->epoch_test_acc = gc_calloc((size_t)r->nepochs, sizeof(float));
    if (!run->x || !run->y || !run->perm || !r->step_loss || !r->step_acc || !r->epoch_loss || !r->epoch_acc ||
        !r->epoch_test_loss || !r->epoch_test_acc) {
        diag_plain(run->d, "out of memory");
        return -1;
    }
    for (int64_t i = 0; i < run->first; i++) r->step_loss[i] = r->step_acc[i] = NAN;
    for (int64_t e = 0; e < r->nepochs; e++)
        r->epoch_loss[e] = r->epoch_acc[e] = r->epoch_test_loss[e] = r->epoch_test_acc[e] = NAN;
    return 0;
}

/* What must be the same on every rank for the ranks to train one model together. */
static int train_settings(const Run *run, Setting *set)
{
    const TrainSpec *t = &run->t;
    const RunOptions *o = run->o;
    uint32_t lr;
    memcpy(&lr, &t->lr, sizeof lr);
    int n = 0;
    set[n++] = (Setting){ "--batch", SET_INT, (uint64_t)t->batch };
    set[n++] = (Setting){ "steps per epoch (--steps)", SET_INT, (uint64_t)run->steps };
    set[n++] = (Setting){ "--epochs", SET_INT, (uint64_t)t->epochs };
    set[n++] = (Setting){ "--lr", SET_LR, lr };
    set[n++] = (Setting){ "--seed", SET_INT, t->seed };
    set[n++] = (Setting){ "--mode", SET_MODE, (uint64_t)o->mode };
    set[n++] = (Setting){ "the model file", SET_HASH, model_hash(run->fwd) };
    set[n++] = (Setting){ "training examples (--train-limit)", SET_INT, (uint64_t)run->f.train.count };
    set[n++] = (Setting){ "test examples (--test-limit)", SET_INT, (uint64_t)run->f.test.count };
    set[n++] = (Setting){ "the training data", SET_HASH, dataset_hash(&run->f.train) };
    set[n++] = (Setting){ "the test data", SET_HASH, dataset_hash(&run->f.test) };
    set[n++] = (Setting){ "the step resumed from (--resume)", SET_INT, (uint64_t)run->first };
    int64_t bucket = o->bucket_bytes > 0 ? o->bucket_bytes : ALLREDUCE_DEFAULT_BUCKET;
    set[n++] = (Setting){ "--bucket-size", SET_INT, (uint64_t)bucket };
    set[n++] = (Setting){ "a checkpoint (--save)", SET_YES_NO, run->save != NULL };
    set[n++] = (Setting){ "--save-every", SET_INT, (uint64_t)o->save_every };
    set[n++] = (Setting){ "evaluation after every epoch (--validate, --plot)", SET_YES_NO, o->validate || o->plot_path };
    return n;
}

/* Every rank is ready (or the lowest one that is not says why), started with the same
 * settings, and holds the same weights; then the run is announced. */
static Stop run_start(Run *run)
{
    DiagSink *d = run->d;
    int bad = comm_agree(run->comm, true);
    if (bad < run->R) {
        if (run->rank == 0)
            diag_plain(d, "rank %d of %d could not start training (its message says why); stopping", bad, run->R);
        return STOP_TOGETHER;   /* every rank knows: all stop here */
    }
    Setting set[MAX_SETTINGS];
    if (settings_agree(run->comm, set, train_settings(run, set), d) != 0) return STOP_TOGETHER;
    if (weights_agree(run->comm, run->tg, &run->w, "at the start", d) != 0) {
        if (run->rank != 0) diag_clear(d);
        return STOP_TOGETHER;
    }
    const TrainSpec *t = &run->t;
    run->li = output_index(run->tg, "loss");
    run->ai = output_index(run->tg, "accuracy");
    run->env = (StepEnv){
        .w = &run->w, .seed = t->seed, .training = true, .d = d, .check_numerics = run->o->check_numerics,
        .comm = run->comm, .shard = run->rank, .isa = run->o->isa,
    };
    step_env_train(&run->env, t, run->first);
    char cd[160], od[320];
    emit(run, (RunEvent){ .kind = RUN_START, .u.start = {
        .model = run->fwd->model_name ? run->fwd->model_name : "model", .epochs = t->epochs, .steps = run->steps,
        .batch = t->batch, .mode = exec_mode_name(run->o->mode), .blas = kern_blas_info(),
        .isa = kern_isa_label(run->o->isa),
        .threads = pool_threads(run->pool), .ranks = run->R,
        .global_batch = run->gbatch, .comm = comm_describe(run->comm, cd, sizeof cd),
        .optimizer = optim_describe(t, od, sizeof od),
        .resume_path = run->first ? run->o->resume_path : NULL, .first_step = run->first,
        .train_examples = run->f.train.count, .test_examples = run->f.test.count } });
    return GO_ON;
}

/* The first var of w holding a NaN or an Inf, or -1. */
static int nonfinite_var(const Weights *w)
{
    for (int v = 0; v < w->n; v++) {
        int64_t n = shape_numel(&w->shapes[v]);
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(w->data[v][i])) return v;
    }
    return -1;
}

/* Writes the checkpoint of `step` steps (rank 0), never of non-finite weights: then the
 * run stops and the last checkpoint stays.  Every rank checks its own weights and they
 * agree on the outcome, so that all stop at the same save point. */
static Stop save_checkpoint(Run *run, int64_t step, RunSaveReason why)
{
    int v = nonfinite_var(&run->w), bad = comm_agree(run->comm, v < 0);
    if (bad < run->R) {
        if (bad == run->rank)
            diag_plain(run->d, "%s: the weights after step %lld hold NaN or Inf (first in '%s'): stopping without "
                       "writing them to %s (a checkpoint written before is kept); --check-numerics names the op "
                       "that first makes a NaN or Inf", model_file(run->fwd), (long long)step,
                       v >= 0 ? run->w.names[v] : "?", run->save);
        return STOP_TOGETHER;
    }
    if (run->rank != 0) return GO_ON;
    run->w.step = step;
    if (checkpoint_save(run->save, run->tg, &run->w, run->t.seed, run->d) != 0) return STOP_ALONE;
    emit(run, (RunEvent){ .kind = RUN_SAVED, .u.saved = { .path = run->save, .step = step, .reason = why } });
    return GO_ON;
}

/* Stopped by *stop before step gs: the state after step gs-1 is complete; save it. */
static Stop interrupt(Run *run, int64_t gs)
{
    run->r->interrupted = true;
    run->w.step = gs;
    if (run->save) {
        Stop s = save_checkpoint(run, gs, SAVE_INTERRUPTED);
        if (s != GO_ON) return s;
    }
    emit(run, (RunEvent){ .kind = RUN_INTERRUPTED, .u.interrupted = { .step = gs, .saved = run->save } });
    return STOP_INTERRUPTED;
}

static const char *nonfinite_name(double v)
{
    return isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf";
}

/* Training step gs (step s of epoch e): this rank's rows of the global batch, and the
 * global batch's loss and accuracy in *loss and *acc.  A non-finite loss stops every
 * rank (they all hold the same). */
static Stop train_step(Run *run, int64_t e, int64_t s, int64_t gs, float *loss, float *acc)
{
    const Feed *f = &run->f;
    dataset_batch_rows(&f->train, run->gbatch, gs, run->t.shuffle, run->t.seed, run->rank * run->t.batch, run->t.batch,
                       run->x, run->y, run->perm, &run->perm_pass);
    const void *feeds[2];
    feeds[f->x_input] = run->x;
    feeds[f->y_input] = run->y;
    float lv = 0, av = NAN;
    float *outs[2] = { NULL, NULL };
    outs[run->li] = &lv;
    if (run->ai >= 0) outs[run->ai] = &av;
    step_env_train(&run->env, &run->t, gs);   /* the step's learning rate: a function of gs alone */
    run->w.step = gs;
    if (executor_run(run->ex, feeds, outs, &run->env) != 0) return STOP_ALONE;
    if (run->R > 1) {
        /* the global batch's loss and accuracy (each rank's are means over its rows),
         * and whether any rank was asked to stop */
        const RunOptions *o = run->o;
        double v[3] = { lv, av, o->stop && *o->stop ? 1 : 0 };
        comm_sum_f64(run->comm, v, 3, "the step's loss and accuracy", gs);
        lv = (float)(v[0] / run->R);
        av = (float)(v[1] / run->R);
        run->stop_all = v[2] > 0;
    }
    run->r->step_loss[gs] = lv;
    run->r->step_acc[gs] = av;
    if (!isfinite(lv)) {
        if (run->rank == 0)
            diag_plain(run->d, "%s: the loss is %s at step %lld (epoch %lld/%lld, step %lld/%lld): stopping; no checkpoint "
                       "of these weights is written (one written before is kept); --check-numerics names the op that "
                       "first makes a NaN or Inf", model_file(run->fwd), nonfinite_name(lv), (long long)gs,
                       (long long)(e + 1), (long long)run->t.epochs, (long long)(s + 1), (long long)run->steps);
        return STOP_TOGETHER;
    }
    *loss = lv;
    *acc = av;
    return GO_ON;
}

/* The test set's loss and accuracy after `epoch` (0: after training), reported. */
static Stop test(Run *run, int64_t epoch, double *loss, double *acc)
{
    double t0 = now();
    run->env.step = run->w.step;
    if (evaluate(&run->ev, &run->f, run->env, loss, acc) != 0) return STOP_ALONE;
    emit(run, (RunEvent){ .kind = RUN_EVAL, .u.eval = {
        .epoch = epoch, .loss = *loss, .acc = *acc, .has_acc = run->ai >= 0, .examples = run->f.test.count,
        .seconds = now() - t0 } });
    return GO_ON;
}

/* Epoch e (0-based), from where the run starts in it; evaluated after it if asked. */
static Stop train_epoch(Run *run, int64_t e)
{
    const RunOptions *o = run->o;
    RunResult *r = run->r;
    int64_t steps = run->steps, s0 = e == run->first / steps ? run->first % steps : 0;
    double te = now(), lsum = 0, asum = 0, wait0, busy0;
    comm_stats(run->comm, &wait0, &busy0);
    for (int64_t s = s0; s < steps; s++) {
        int64_t gs = e * steps + s;
        if (run->R > 1 ? run->stop_all : o->stop && *o->stop) return interrupt(run, gs);
        float lv, av;
        Stop st = train_step(run, e, s, gs, &lv, &av);
        if (st != GO_ON) return st;
        lsum += lv;
        asum += av;
        int64_t done = s + 1 - s0;
        emit(run, (RunEvent){ .kind = RUN_STEP, .u.step = {
            .epoch = e + 1, .epochs = run->t.epochs, .step = s + 1, .steps = steps, .global_step = gs, .done = done,
            .seconds = now() - te, .loss = lsum / (double)done, .acc = asum / (double)done, .has_acc = run->ai >= 0 } });
        if (o->save_every > 0 && run->save && (gs + 1) % o->save_every == 0) {
            st = save_checkpoint(run, gs + 1, SAVE_EVERY);
            if (st != GO_ON) return st;
        }
    }
    double secs = now() - te;
    r->train_seconds += secs;
    run->w.step = (e + 1) * steps;
    r->epoch_loss[e] = (float)(lsum / (double)(steps - s0));
    r->epoch_acc[e] = (float)(asum / (double)(steps - s0));
    RunEpochInfo info = {
        .epoch = e + 1, .epochs = run->t.epochs, .steps = steps, .steps_run = steps - s0, .seconds = secs,
        .loss = r->epoch_loss[e], .acc = r->epoch_acc[e], .has_acc = run->ai >= 0, .ranks = run->R,
        .global_batch = run->gbatch,
    };
    if (run->R > 1) {
        double wait1, busy1;
        comm_stats(run->comm, &wait1, &busy1);
        info.allreduce_ms_per_step = 1000 * (busy1 - busy0) / (double)(steps - s0);
        info.comm_wait_ms_per_step = 1000 * (wait1 - wait0) / (double)(steps - s0);
    }
    if (o->validate || o->plot_path) {
        Stop st = test(run, e + 1, &info.test_loss, &info.test_acc);
        if (st != GO_ON) return st;
        info.tested = true;
        r->epoch_test_loss[e] = (float)info.test_loss;
        r->epoch_test_acc[e] = (float)info.test_acc;
    }
    emit(run, (RunEvent){ .kind = RUN_EPOCH, .u.epoch = info });
    return GO_ON;
}

/* After the last epoch: the test set, the checkpoint, the plot. */
static Stop run_finish(Run *run)
{
    const RunOptions *o = run->o;
    RunResult *r = run->r;
    Stop st = test(run, 0, &r->test_loss, &r->test_acc);
    if (st != GO_ON) return st;
    r->test_examples = run->f.test.count;
    r->peak_bytes = executor_peak_bytes(run->ex);
    r->seconds = now() - run->t0;
    if (weights_agree(run->comm, run->tg, &run->w, "after training", run->d) != 0) {
        if (run->rank != 0) diag_clear(run->d);
        return STOP_TOGETHER;
    }
    if (run->save) {
        st = save_checkpoint(run, run->w.step, SAVE_FINAL);
        if (st != GO_ON) return st;
    }
    if (o->plot_path && run->rank == 0) {
        TrainLog lg = {
            .nsteps = (size_t)r->nsteps, .step_loss = r->step_loss, .step_acc = run->ai >= 0 ? r->step_acc : NULL,
            .nepochs = (size_t)r->nepochs, .epoch_test_loss = r->epoch_test_loss, .epoch_test_acc = r->epoch_test_acc,
            .steps_per_epoch = run->steps, .title = run->fwd->model_name,
        };
        if (plot_svg(o->plot_path, &lg, run->d) != 0) return STOP_ALONE;
    }
    emit(run, (RunEvent){ .kind = RUN_FINISHED, .u.finished = {
        .test_loss = r->test_loss, .test_acc = r->test_acc, .has_acc = run->ai >= 0, .test_examples = r->test_examples,
        .seconds = r->seconds, .train_seconds = r->train_seconds, .saved = run->save, .plot = o->plot_path } });
    return GO_ON;
}

static void run_free(Run *run)
{
    evaluator_free(&run->ev);
    step_free(&run->step);
    weights_free(&run->w);
    pool_free(run->pool);
    feed_free(&run->f);
    gc_free(run->x);
    gc_free(run->y);
    gc_free(run->perm);
}

int train_run(const Graph *fwd, const RunOptions *o, RunResult *r, Weights *w_out, DiagSink *d)
{
    memset(r, 0, sizeof *r);
    Run run = { .fwd = fwd, .o = o, .r = r, .d = d, .comm = o->comm, .t0 = now() };
    run.R = comm_size(run.comm);
    run.rank = comm_rank(run.comm);
    int rc;
    if (spec_setup(&run) != 0 || data_setup(&run) != 0 || step_setup(&run) != 0 || buffers_setup(&run) != 0) {
        rc = setup_failed(run.comm, d);
    } else {
        Stop s = run_start(&run);
        for (int64_t e = run.first / run.steps; s == GO_ON && e < run.t.epochs; e++) s = train_epoch(&run, e);
        if (s == GO_ON) s = run_finish(&run);
        rc = s == GO_ON || s == STOP_INTERRUPTED ? RUN_OK : s == STOP_ALONE && run.R > 1 ? RUN_STOP_JOB : RUN_FAILED;
    }
    if (rc == RUN_OK && w_out) {
        *w_out = run.w;
        memset(&run.w, 0, sizeof run.w);
    }
    run_free(&run);
    return rc;
}

int eval_run(const Graph *fwd, const RunOptions *o, Weights *w, double *loss, double *acc, DiagSink *d)
{
    Feed f;
    Evaluator ev;
    TrainSpec t = fwd->train;
    if (o->batch > 0) t.batch = o->batch;
    Pool *pool = pool_new(default_threads(o, o->comm));
    if (!pool) {
        diag_plain(d, "out of memory");
        return setup_failed(o->comm, d);
    }
    if (feed_setup(fwd, &t, o, false, &f, d) != 0) {
        pool_free(pool);
        return setup_failed(o->comm, d);
    }
    int rc = RUN_FAILED;
    CompileOptions co = { .mode = o->mode, .pool = pool, .passes_off = o->passes_off };
    if (evaluator_init(&ev, fwd, &f, t.batch, &co, w, o->comm, d) != 0) {
        feed_free(&f);
        pool_free(pool);
        return setup_failed(o->comm, d);
    }
    int R = comm_size(o->comm), rank = comm_rank(o->comm), bad = comm_agree(o->comm, true);
    /* each rank evaluates its share of the test set with its own copy of the weights */
    uint64_t wh = FNV_BASIS;
    for (int v = 0; v < w->n; v++) wh = fnv(wh, w->data[v], (size_t)shape_numel(&w->shapes[v]) * 4);
    Setting set[] = {
        { "the model file", SET_HASH, model_hash(fwd) },
        { "test examples (--test-limit)", SET_INT, (uint64_t)f.test.count },
        { "the test data", SET_HASH, dataset_hash(&f.test) },
        { "the weights (--weights)", SET_HASH, wh },
    };
    if (bad < R) {
        if (rank == 0) diag_plain(d, "rank %d of %d could not start evaluating (its message says why); stopping", bad, R);
    } else if (settings_agree(o->comm, set, (int)(sizeof set / sizeof set[0]), d) == 0) {
        StepEnv env = { .w = w, .seed = t.seed, .d = d, .comm = o->comm, .shard = rank, .isa = o->isa };
        double t0 = now();
        if (evaluate(&ev, &f, env, loss, acc) == 0) {
            rc = RUN_OK;
            if (rank == 0 && o->report.fn)
                o->report.fn(o->report.ctx, &(RunEvent){ .kind = RUN_EVAL, .u.eval = {
                    .loss = *loss, .acc = *acc, .has_acc = ev_has_acc(&ev),
                    .examples = f.test.count, .seconds = now() - t0 } });
        }
    }
    evaluator_free(&ev);
    feed_free(&f);
    pool_free(pool);
    return rc;
}
