/* Training and evaluation runs.  See train.h. */
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec/pipeline.h"
#include "kernels/kern.h"
#include "run/plot.h"
#include "run/train.h"
#include "util/outfile.h"

void run_options_default(RunOptions *o)
{
    memset(o, 0, sizeof *o);
    o->mode = MODE_COMPILED;
    o->lr = -1;
    o->log = LOG_BAR;
    o->out = stdout;
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
        else if (n->dtype == DT_F32 && f->x_input < 0) f->x_input = i;
    }
    if (f->x_input < 0 || f->y_input < 0 || g->ninputs != 2) {
        diag_plain(d, "%s: training feeds one f32 input of examples and one i32 input of class labels "
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
    DataWant want = { .x_name = x->name, .x_type = xtype, .x_rank = x->shape.rank - 1, .y_name = y->name,
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
    if (t->data == DATA_MNIST) {
        const char *dir = o->data_dir ? o->data_dir : t->data_path;
        if ((need_train && dataset_load_mnist(dir, true, &f->train, d) != 0) ||
            dataset_load_mnist(dir, false, &f->test, d) != 0)
            goto fail;
    } else if (t->data == DATA_SYNTHETIC) {
        int32_t classes = want.nclasses > 0 ? want.nclasses : 10;
        int64_t ntest = t->synth_count / 4 > 0 ? t->synth_count / 4 : 1;
        if ((need_train && dataset_synthetic(&f->train, t->synth_count, want.x_shape, want.x_rank, classes, t->seed,
                                             true, d) != 0) ||
            dataset_synthetic(&f->test, ntest, want.x_shape, want.x_rank, classes, t->seed, false, d) != 0)
            goto fail;
    } else {
        diag_plain(d, "%s: the model has no data source (a train block with data = ...)", g->src ? g->src->name : "model");
        return -1;
    }
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
    e->y = gc_calloc((size_t)e->batch, sizeof *e->y);
    if (!e->x || !e->y) { diag_plain(d, "out of memory"); goto fail; }
    return 0;
fail:
    evaluator_free(e);
    return -1;
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

/* ---- progress -------------------------------------------------------------------------------- */

static void fmt_duration(double s, char *buf, size_t n)
{
    if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

static void progress_line(FILE *out, int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double secs,
                          double loss, double acc, bool final)
{
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int64_t filled = steps ? step * WIDTH / steps : WIDTH;
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '=' : '.';
    if (!final && filled < WIDTH) bar[filled > 0 ? filled - 1 : 0] = '>';
    bar[WIDTH] = 0;
    char dur[32];
    fmt_duration(secs, dur, sizeof dur);
    int w = snprintf(NULL, 0, "%lld", (long long)steps);
    fprintf(out, "\rEpoch %lld/%lld  %*lld/%lld [%s] - %s %.0fms/step - loss: %.4f", (long long)epoch, (long long)epochs,
            w, (long long)step, (long long)steps, bar, dur, step ? 1000.0 * secs / (double)step : 0.0, loss);
    if (!isnan(acc)) fprintf(out, " - acc: %.4f", acc);
}

/* Threads per process: --threads, else the cores shared among this machine's ranks. */
static int default_threads(const RunOptions *o, const Comm *comm)
{
    if (o->threads > 0) return o->threads;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), per = cores / comm_local_size(comm);
    return per > 0 ? per : 1;
}

/* Whether every rank holds the same weights and the same buckets (a 52-bit hash of the
 * weights' bytes and of the step's allreduce sizes, compared as its minimum and
 * maximum over the ranks): true when every rank runs the same graphc on the same model
 * and options; checked because a difference would otherwise go unnoticed or pair
 * collectives of different sizes. */
static int weights_agree(Comm *comm, const Graph *tg, const Weights *w, const char *when, DiagSink *d)
{
    if (comm_size(comm) == 1) return 0;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < tg->nnodes; i++)
        if (tg->nodes[i].op == OP_ALLREDUCE) h = (h ^ (uint64_t)shape_numel(&tg->nodes[i].shape)) * 1099511628211ull;
    for (int v = 0; v < w->n; v++) {
        const unsigned char *p = (const unsigned char *)w->data[v];
        size_t len = (size_t)shape_numel(&w->shapes[v]) * 4;
        for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
    }
    double mine = (double)(h >> 12), v[2] = { mine, -mine };
    comm_min_f64(comm, v, 2, "the check that the ranks' weights agree", w->step);
    if (v[0] == -v[1]) return 0;
    diag_plain(d, "the ranks' weights or gradient buckets differ %s (step %lld): every rank must run the same graphc "
               "on the same model with the same options", when, (long long)w->step);
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

int train_run(const Graph *fwd, const RunOptions *o, RunResult *r, Weights *w_out, DiagSink *d)
{
    memset(r, 0, sizeof *r);
    double t0 = now();
    TrainSpec t = fwd->train;
    if (!t.present || t.minimize < 0) {
        diag_plain(d, "%s: the model has no train block: nothing to train", fwd->src ? fwd->src->name : "model");
        return setup_failed(o->comm, d);
    }
    if (o->epochs > 0) t.epochs = o->epochs;
    if (o->steps > 0) t.steps = o->steps;
    if (o->batch > 0) t.batch = o->batch;
    if (o->lr >= 0) t.lr = (float)o->lr;
    if (o->have_seed) t.seed = o->seed;
    /* resuming: the run's seed is the checkpoint's (same order, same masks), unless the
     * user asks for another one */
    Comm *comm = o->comm;
    int R = comm_size(comm), rank = comm_rank(comm);
    bool agreed = false;      /* past the point where every rank said whether it was ready */
    int bad = R;              /* the lowest rank that was not, or R */
    /* only rank 0 speaks; the others report only errors */
    LogMode log = rank == 0 ? o->log : LOG_QUIET;
    if (o->resume_path && !o->have_seed && checkpoint_seed(o->resume_path, &t.seed, d) != 0) return setup_failed(comm, d);
    Pool *pool = pool_new(default_threads(o, comm));
    if (!pool) {
        diag_plain(d, "out of memory");
        return setup_failed(comm, d);
    }

    Feed f;
    Step step = { 0 };
    const Graph *tg = NULL;
    Weights w = { 0 };
    Executor *ex = NULL;
    Evaluator ev = { 0 };
    float *x = NULL;
    int32_t *y = NULL;
    int64_t *perm = NULL, perm_pass = -1;
    int rc = -1;
    if (feed_setup(fwd, &t, o, true, &f, d) != 0) {
        pool_free(pool);
        return setup_failed(comm, d);
    }
    /* the global batch: R ranks of t.batch rows each */
    int64_t gbatch = t.batch * R;
    if (gbatch > f.train.count) {
        if (R > 1)
            diag_plain(d, "%d ranks x batch %lld = %lld is larger than the %lld training examples", R, (long long)t.batch,
                       (long long)gbatch, (long long)f.train.count);
        else
            diag_plain(d, "batch %lld is larger than the %lld training examples", (long long)t.batch, (long long)f.train.count);
        goto out;
    }
    int64_t per_pass = dataset_batches_per_pass(&f.train, gbatch);
    int64_t steps = t.steps ? t.steps : per_pass;
    /* the step, its weights and its evaluation; --max-memory counts the weights, the
     * plan and a batch of inputs before any of them is allocated */
    CompileOptions co = {
        .mode = o->mode, .pool = pool, .ranks = R, .bucket_bytes = o->bucket_bytes, .passes_off = o->passes_off,
        .max_memory = o->max_memory,
        .extra_bytes = t.batch * f.sample_size * 4, .seed = t.seed,
    };
    if (prepare(fwd, FOR_TRAINING, t.batch, &co, &w, &step, d) != 0) goto out;
    tg = step.graph;
    ex = step.ex;
    co.max_memory = 0;
    if (evaluator_init(&ev, fwd, &f, t.batch, &co, &w, comm, d) != 0) goto out;
    if (o->resume_path) {
        if (checkpoint_resume(o->resume_path, tg, &w, o->reset_optimizer, d) != 0) goto out;
        if (w.step < 0 || w.step > t.epochs * steps) {
            diag_plain(d, "%s: the checkpoint is at step %lld, past the %lld steps of this run", o->resume_path,
                       (long long)w.step, (long long)(t.epochs * steps));
            goto out;
        }
    }
    int64_t first = w.step;   /* 0, or where the checkpoint left off */
    const char *save = o->save_path ? o->save_path : t.checkpoint;   /* --save, else the train block's */
    if (o->save_every && !save) {
        diag_plain(d, "saving every %lld steps needs a checkpoint path: --save PATH, or checkpoint = \"...\" in the train block",
                   (long long)o->save_every);
        goto out;
    }
    /* before the first step: an output that cannot be written would lose the run */
    if (rank == 0 && (outfile_check(save, "checkpoint", d) != 0 || outfile_check(o->plot_path, "plot", d) != 0)) goto out;

    if (!exec_fits_memory((double)t.batch * (double)f.sample_size * 4, "a batch of inputs", d)) goto out;
    x = gc_calloc((size_t)(t.batch * f.sample_size), sizeof *x);
    y = gc_calloc((size_t)t.batch, sizeof *y);
    perm = gc_calloc((size_t)f.train.count, sizeof *perm);
    r->nsteps = t.epochs * steps;
    r->nepochs = t.epochs;
    r->first_step = first;
    r->step_loss = gc_calloc((size_t)r->nsteps, sizeof(float));
    r->step_acc = gc_calloc((size_t)r->nsteps, sizeof(float));
    r->epoch_loss = gc_calloc((size_t)t.epochs, sizeof(float));
    r->epoch_acc = gc_calloc((size_t)t.epochs, sizeof(float));
    r->epoch_test_loss = gc_calloc((size_t)t.epochs, sizeof(float));
    r->epoch_test_acc = gc_calloc((size_t)t.epochs, sizeof(float));
    if (!x || !y || !perm || !r->step_loss || !r->step_acc || !r->epoch_loss || !r->epoch_acc || !r->epoch_test_loss ||
        !r->epoch_test_acc) {
        diag_plain(d, "out of memory");
        goto out;
    }
    StepEnv env = {
        .w = &w, .seed = t.seed, .training = true, .d = d, .check_numerics = o->check_numerics, .comm = comm,
        .shard = rank,
    };
    step_env_train(&env, &t, first);
    /* Every rank is ready (or the lowest one that is not says why), and all start from
     * the same weights. */
    agreed = true;
    bad = comm_agree(comm, true);
    if (bad < R) {
        if (rank == 0) diag_plain(d, "rank %d of %d could not start training (its message says why); stopping", bad, R);
        goto out;   /* every rank knows: all stop here */
    }
    if (weights_agree(comm, tg, &w, "at the start", d) != 0) goto stop_together;
    int li = output_index(tg, "loss"), ai = output_index(tg, "accuracy");
    FILE *out = o->out ? o->out : stdout;
    bool tty = log == LOG_BAR && isatty(fileno(out));
    if (log == LOG_BAR) {
        int nt = pool_threads(pool);
        fprintf(out, "Training %s: %lld epochs x %lld steps, batch %lld, %s mode, %s, %d thread%s\n",
                fwd->model_name ? fwd->model_name : "model", (long long)t.epochs, (long long)steps, (long long)t.batch,
                exec_mode_name(o->mode), kern_blas_info(), nt, nt == 1 ? "" : "s");
        if (R > 1) {
            char cd[160];
            fprintf(out, "Data parallel: %d ranks x batch %lld = global batch %lld; %s\n", R, (long long)t.batch,
                    (long long)gbatch, comm_describe(comm, cd, sizeof cd));
        }
        char od[320];
        fprintf(out, "Optimizer %s\n", optim_describe(&t, od, sizeof od));
        if (first) fprintf(out, "Resuming from %s at step %lld\n", o->resume_path, (long long)first);
    }
    for (int64_t i = 0; i < first; i++) r->step_loss[i] = r->step_acc[i] = NAN;
    for (int64_t e = 0; e < t.epochs; e++) r->epoch_loss[e] = r->epoch_acc[e] = r->epoch_test_loss[e] = r->epoch_test_acc[e] = NAN;
    double train_time = 0;
    bool stop_all = false;    /* with several ranks: some rank was asked to stop */
    for (int64_t e = first / steps; e < t.epochs; e++) {
        double te = now(), lsum = 0, asum = 0, last_draw = 0, wait0, busy0;
        comm_stats(comm, &wait0, &busy0);
        int64_t s0 = e == first / steps ? first % steps : 0;
        for (int64_t s = s0; s < steps; s++) {
            int64_t gs = e * steps + s;
            if (R > 1 ? stop_all : o->stop && *o->stop) {
                /* interrupted: the state after step gs-1 is complete; save it and stop */
                r->interrupted = true;
                w.step = gs;
                if (log != LOG_QUIET) fprintf(out, "\nInterrupted at step %lld", (long long)gs);
                if (save && rank == 0) {
                    if (checkpoint_save(save, tg, &w, t.seed, d) != 0) goto out;
                    if (log != LOG_QUIET) fprintf(out, "; saved %s (resume with --resume %s)", save, save);
                } else if (log != LOG_QUIET) {
                    fprintf(out, "; no checkpoint written (give --save PATH)");
                }
                if (log != LOG_QUIET) fputc('\n', out);
                rc = 0;
                goto out;
            }
            dataset_batch_rows(&f.train, gbatch, gs, t.shuffle, t.seed, rank * t.batch, t.batch, x, y, perm, &perm_pass);
            const void *feeds[2];
            feeds[f.x_input] = x;
            feeds[f.y_input] = y;
            float lv = 0, av = NAN;
            float *outs[2] = { NULL, NULL };
            outs[li] = &lv;
            if (ai >= 0) outs[ai] = &av;
            step_env_train(&env, &t, gs);   /* the step's learning rate: a function of gs alone */
            w.step = gs;
            if (executor_run(ex, feeds, outs, &env) != 0) goto out;
            if (R > 1) {
                /* the global batch's loss and accuracy (each rank's are means over its
                 * rows), and whether any rank was asked to stop */
                double v[3] = { lv, av, o->stop && *o->stop ? 1 : 0 };
                comm_sum_f64(comm, v, 3, "the step's loss and accuracy", gs);
                lv = (float)(v[0] / R);
                av = (float)(v[1] / R);
                stop_all = v[2] > 0;
            }
            r->step_loss[gs] = lv;
            r->step_acc[gs] = av;
            lsum += lv;
            asum += av;
            if (o->save_every > 0 && save && rank == 0 && (gs + 1) % o->save_every == 0) {
                w.step = gs + 1;
                if (checkpoint_save(save, tg, &w, t.seed, d) != 0) goto out;
            }
            double el = now() - te;
            int64_t done = s + 1 - s0;
            if (tty && (el - last_draw > 0.1 || s + 1 == steps)) {
                progress_line(out, e + 1, t.epochs, s + 1, steps, el, lsum / (double)done, asum / (double)done, false);
                fflush(out);
                last_draw = el;
            }
        }
        double secs = now() - te;
        train_time += secs;
        w.step = (e + 1) * steps;
        r->epoch_loss[e] = (float)(lsum / (double)(steps - s0));
        r->epoch_acc[e] = (float)(asum / (double)(steps - s0));
        if (o->validate || o->plot_path) {
            double tl, ta;
            env.step = w.step;
            if (evaluate(&ev, &f, env, &tl, &ta) != 0) goto out;
            r->epoch_test_loss[e] = (float)tl;
            r->epoch_test_acc[e] = (float)ta;
        }
        if (log == LOG_BAR) {
            progress_line(out, e + 1, t.epochs, steps, steps, secs, r->epoch_loss[e], r->epoch_acc[e], true);
            if (!isnan(r->epoch_test_loss[e]))
                fprintf(out, " - test_loss: %.4f - test_acc: %.4f", r->epoch_test_loss[e], r->epoch_test_acc[e]);
            fputc('\n', out);
        } else if (log == LOG_JSON) {
            fprintf(out, "{\"epoch\": %lld, \"epochs\": %lld, \"steps\": %lld, \"loss\": %.6f, \"acc\": %.6f, "
                    "\"seconds\": %.3f, \"ms_per_step\": %.3f",
                    (long long)(e + 1), (long long)t.epochs, (long long)steps, r->epoch_loss[e], r->epoch_acc[e], secs,
                    1000 * secs / (double)steps);
            if (!isnan(r->epoch_test_loss[e]))
                fprintf(out, ", \"test_loss\": %.6f, \"test_acc\": %.6f", r->epoch_test_loss[e], r->epoch_test_acc[e]);
            if (R > 1) {
                /* rank 0's view: the gradient allreduces' time from start to completion,
                 * and the part of it the step waited for */
                double wait1, busy1;
                comm_stats(comm, &wait1, &busy1);
                fprintf(out, ", \"ranks\": %d, \"global_batch\": %lld, \"allreduce_ms_per_step\": %.3f, "
                        "\"comm_wait_ms_per_step\": %.3f", R, (long long)gbatch,
                        1000 * (busy1 - busy0) / (double)(steps - s0), 1000 * (wait1 - wait0) / (double)(steps - s0));
            }
            fputs("}\n", out);
        }
        fflush(out);
    }
    r->train_seconds = train_time;
    env.step = w.step;
    if (evaluate(&ev, &f, env, &r->test_loss, &r->test_acc) != 0) goto out;
    r->peak_bytes = executor_peak_bytes(ex);
    r->seconds = now() - t0;
    if (weights_agree(comm, tg, &w, "after training", d) != 0) goto stop_together;
    if (save && rank == 0 && checkpoint_save(save, tg, &w, t.seed, d) != 0) goto out;
    if (o->plot_path && rank == 0) {
        TrainLog lg = {
            .nsteps = (size_t)r->nsteps, .step_loss = r->step_loss, .step_acc = ai >= 0 ? r->step_acc : NULL,
            .nepochs = (size_t)r->nepochs, .epoch_test_loss = r->epoch_test_loss, .epoch_test_acc = r->epoch_test_acc,
            .steps_per_epoch = steps, .title = fwd->model_name,
        };
        if (plot_svg(o->plot_path, &lg, d) != 0) goto out;
    }
    if (log == LOG_BAR) {
        fprintf(out, "Test loss: %.4f - test acc: %.4f (%lld examples) - total time %.1fs (training %.1fs)\n", r->test_loss,
                r->test_acc, (long long)f.test.count, r->seconds, r->train_seconds);
        if (save) fprintf(out, "Saved weights to %s\n", save);
        if (o->plot_path) fprintf(out, "Wrote %s\n", o->plot_path);
    } else if (log == LOG_JSON) {
        fprintf(out, "{\"test_loss\": %.6f, \"test_acc\": %.6f, \"test_examples\": %lld, \"seconds\": %.3f, "
                "\"train_seconds\": %.3f}\n",
                r->test_loss, r->test_acc, (long long)f.test.count, r->seconds, r->train_seconds);
    } else if (rank == 0) {
        fprintf(out, "test_loss %.6f test_acc %.6f\n", r->test_loss, r->test_acc);
    }
    rc = 0;
    goto out;
stop_together:
    /* every rank found the same difference: all stop, rank 0 says why */
    bad = 0;
    if (rank != 0) diag_clear(d);
out:
    if (rc != 0 && R > 1) {
        if (!agreed) {
            setup_failed(comm, d);
        } else if (bad == R) {
            /* the others are inside the step's collectives: stop the job */
            diag_flush(d, stderr);
            comm_abort(comm, 1, "stopping all ranks after the error above");
        }
    }
    evaluator_free(&ev);
    step_free(&step);
    if (rc == 0 && w_out) *w_out = w;
    else weights_free(&w);
    pool_free(pool);
    feed_free(&f);
    gc_free(x);
    gc_free(y);
    gc_free(perm);
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
    int rc = -1;
    CompileOptions co = { .mode = o->mode, .pool = pool, .passes_off = o->passes_off };
    if (evaluator_init(&ev, fwd, &f, t.batch, &co, w, o->comm, d) != 0) {
        feed_free(&f);
        pool_free(pool);
        return setup_failed(o->comm, d);
    }
    int R = comm_size(o->comm), bad = comm_agree(o->comm, true);
    if (bad >= R) {
        StepEnv env = { .w = w, .seed = t.seed, .d = d, .comm = o->comm, .shard = comm_rank(o->comm) };
        rc = evaluate(&ev, &f, env, loss, acc);
    } else if (comm_rank(o->comm) == 0) {
        diag_plain(d, "rank %d of %d could not start evaluating (its message says why); stopping", bad, R);
    }
    evaluator_free(&ev);
    feed_free(&f);
    pool_free(pool);
    return rc;
}
