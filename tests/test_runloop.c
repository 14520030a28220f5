/* The training loop's reports (run/train.h): the events of a run in their order and
 * with the figures of its RunResult; a NaN loss, non-finite weights and an interruption
 * seen through them; nothing printed by the library, whatever happens. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "graph/lower.h"
#include "graph/passes.h"
#include "run/train.h"
#include "testgraph.h"
#include "testutil.h"

Suite *make_runloop_suite(void);

/* 64 synthetic examples, batch 8: 8 steps an epoch, 16 test examples. */
static const char small_net[] =
    "input x: f32[B, 8]\ninput y: i32[B]\n"
    "h = dense(x, units=16, activation=\"tanh\")\nlogits = dense(h, units=4)\n"
    "loss = cross_entropy(logits, y)\n"
    "train { data = synthetic(count=64)\noptimizer = sgd(lr=0.1, momentum=0.9)\nbatch = 8\nepochs = 2\n"
    "minimize = loss\nseed = 5 }\n";

/* Three linear layers and a learning rate far too high: the loss is finite for the
 * first four steps and NaN at step 4 (the weights overflow in the forward pass). */
static const char diverging_net[] =
    "input x: f32[B, 4]\ninput y: i32[B]\n"
    "logits = dense(dense(dense(x, units=16), units=16), units=3)\n"
    "loss = cross_entropy(logits, y)\n"
    "train { data = synthetic(count=64)\nbatch = 8\nepochs = 5\noptimizer = sgd(lr=100)\nminimize = loss\nseed = 3 }\n";

/* ---- an event recorder ---------------------------------------------------------------------- */

enum { MAX_EVENTS = 512 };

typedef struct Rec {
    int n;
    RunEvent ev[MAX_EVENTS];
    volatile int *stop;        /* set when the step of global step stop_at is reported */
    int64_t stop_at;
    char optimizer[128];       /* RUN_START's (its strings live only during the call) */
} Rec;

static void record(void *ctx, const RunEvent *ev)
{
    Rec *r = ctx;
    ck_assert_int_lt(r->n, MAX_EVENTS);
    r->ev[r->n++] = *ev;
    if (ev->kind == RUN_START) snprintf(r->optimizer, sizeof r->optimizer, "%s", ev->u.start.optimizer);
    if (r->stop && ev->kind == RUN_STEP && ev->u.step.global_step == r->stop_at) *r->stop = 1;
}

static int count_kind(const Rec *r, RunEventKind k)
{
    int n = 0;
    for (int i = 0; i < r->n; i++) n += r->ev[i].kind == k;
    return n;
}

static char tmpdir[64];

static void setup(void)
{
    strcpy(tmpdir, "/tmp/graphc-test-runloop-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static void tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* The step count a checkpoint holds (bytes 16..23 of the header, docs/checkpoint.md). */
static int64_t checkpoint_step(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    int64_t step = -1;
    ck_assert_int_eq(fseek(f, 16, SEEK_SET), 0);
    ck_assert_int_eq(fread(&step, sizeof step, 1, f), 1);
    fclose(f);
    return step;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

/* The model of `text`, and options that report to rec, on one thread, saving to
 * tmpdir/name when name is given (ckpt receives the path). */
static void run_setup(Compiled *c, const char *text, RunOptions *o, Rec *rec, char *ckpt, size_t n, const char *name)
{
    compile_str(c, text);
    run_options_default(o);
    o->threads = 1;
    o->report = (RunReporter){ record, rec };
    if (name) {
        tmp_path(ckpt, n, name);
        o->save_path = ckpt;
    }
}

/* Asserts that path holds the len bytes of `before` (read_all's), and frees it. */
static void assert_unchanged(const char *path, char *before, size_t len)
{
    size_t now;
    char *after = read_all(path, &now);
    ck_assert_msg(now == len && memcmp(before, after, len) == 0, "%s changed", path);
    free(before);
    free(after);
}

/* ---- the events of a run ------------------------------------------------------------------- */

/* A run with --validate and --save-every 5: every event in its place, each figure the
 * one the RunResult holds. */
START_TEST(events_in_order)
{
    Compiled c;
    char ckpt[128];
    Rec rec = { 0 };
    RunOptions o;
    run_setup(&c, small_net, &o, &rec, ckpt, sizeof ckpt, "run.ckpt");
    o.validate = true;
    o.save_every = 5;
    RunResult r;
    ck_assert_msg(train_run(c.g, &o, &r, NULL, &c.d) == RUN_OK, "%s", c.d.buf ? c.d.buf : "");
    ck_assert_int_eq(r.nsteps, 16);

    int i = 0;
    const RunEvent *ev = &rec.ev[i++];
    ck_assert_int_eq(ev->kind, RUN_START);
    ck_assert_int_eq(ev->u.start.epochs, 2);
    ck_assert_int_eq(ev->u.start.steps, 8);
    ck_assert_int_eq(ev->u.start.batch, 8);
    ck_assert_int_eq(ev->u.start.ranks, 1);
    ck_assert_int_eq(ev->u.start.global_batch, 8);
    ck_assert_int_eq(ev->u.start.train_examples, 64);
    ck_assert_int_eq(ev->u.start.test_examples, 16);
    ck_assert_int_eq(ev->u.start.first_step, 0);
    ck_assert_ptr_null(ev->u.start.resume_path);
    ck_assert_str_eq(rec.optimizer, "sgd(lr=0.1, momentum=0.9)");
    ck_assert_str_eq(ev->u.start.mode, "compiled");
    for (int64_t e = 0; e < 2; e++) {
        double lsum = 0, asum = 0;
        for (int64_t s = 0; s < 8; s++) {
            int64_t gs = e * 8 + s;
            lsum += r.step_loss[gs];
            asum += r.step_acc[gs];
            ev = &rec.ev[i++];
            ck_assert_msg(ev->kind == RUN_STEP, "event %d is %d, not step %lld", i - 1, ev->kind, (long long)gs);
            const RunStepInfo *st = &ev->u.step;
            ck_assert_int_eq(st->global_step, gs);
            ck_assert_int_eq(st->epoch, e + 1);
            ck_assert_int_eq(st->step, s + 1);
            ck_assert_int_eq(st->steps, 8);
            ck_assert_int_eq(st->done, s + 1);
            ck_assert(st->has_acc);
            ck_assert_float_near_rel(st->loss, lsum / (double)(s + 1), 1e-12, 0);
            ck_assert_float_near_rel(st->acc, asum / (double)(s + 1), 1e-12, 0);
            ck_assert(st->seconds >= 0);
            if ((gs + 1) % 5 == 0) {
                ev = &rec.ev[i++];
                ck_assert_int_eq(ev->kind, RUN_SAVED);
                ck_assert_int_eq(ev->u.saved.step, gs + 1);
                ck_assert_int_eq(ev->u.saved.reason, SAVE_EVERY);
                ck_assert_str_eq(ev->u.saved.path, ckpt);
            }
        }
        ev = &rec.ev[i++];
        ck_assert_int_eq(ev->kind, RUN_EVAL);
        ck_assert_int_eq(ev->u.eval.epoch, e + 1);
        ck_assert_int_eq(ev->u.eval.examples, 16);
        double test_loss = ev->u.eval.loss;
        ev = &rec.ev[i++];
        ck_assert_int_eq(ev->kind, RUN_EPOCH);
        const RunEpochInfo *ep = &ev->u.epoch;
        ck_assert_int_eq(ep->epoch, e + 1);
        ck_assert_int_eq(ep->steps_run, 8);
        ck_assert(ep->tested && ep->has_acc);
        ck_assert_float_near_rel(ep->loss, r.epoch_loss[e], 0, 0);
        ck_assert_float_near_rel(ep->acc, r.epoch_acc[e], 0, 0);
        ck_assert_float_near_rel(ep->test_loss, test_loss, 0, 0);
        ck_assert_float_near_rel((float)ep->test_loss, r.epoch_test_loss[e], 0, 0);
        ck_assert(isfinite(ep->test_loss) && ep->test_loss > 0);
    }
    ev = &rec.ev[i++];
    ck_assert_int_eq(ev->kind, RUN_EVAL);
    ck_assert_int_eq(ev->u.eval.epoch, 0);
    ck_assert_float_near_rel(ev->u.eval.loss, r.test_loss, 0, 0);
    ev = &rec.ev[i++];
    ck_assert_int_eq(ev->kind, RUN_SAVED);
    ck_assert_int_eq(ev->u.saved.reason, SAVE_FINAL);
    ck_assert_int_eq(ev->u.saved.step, 16);
    ev = &rec.ev[i++];
    ck_assert_int_eq(ev->kind, RUN_FINISHED);
    ck_assert_float_near_rel(ev->u.finished.test_loss, r.test_loss, 0, 0);
    ck_assert_float_near_rel(ev->u.finished.test_acc, r.test_acc, 0, 0);
    ck_assert_int_eq(ev->u.finished.test_examples, 16);
    ck_assert_str_eq(ev->u.finished.saved, ckpt);
    ck_assert_ptr_null(ev->u.finished.plot);
    ck_assert_int_eq(i, rec.n);   /* nothing after the end */
    ck_assert_int_eq(checkpoint_step(ckpt), 16);
    run_result_free(&r);
    compiled_free_all(&c);
}
END_TEST

/* graphc eval's count of examples comes with the evaluation's event. */
START_TEST(eval_event)
{
    Compiled c;
    Rec rec = { 0 };
    RunOptions o;
    run_setup(&c, small_net, &o, &rec, NULL, 0, NULL);
    o.test_limit = 10;
    Weights w;
    ck_assert_int_eq(weights_init(&w, c.g, 1, &c.d), 0);
    double loss, acc;
    ck_assert_int_eq(eval_run(c.g, &o, &w, &loss, &acc, &c.d), RUN_OK);
    ck_assert_int_eq(rec.n, 1);
    ck_assert_int_eq(rec.ev[0].kind, RUN_EVAL);
    ck_assert_int_eq(rec.ev[0].u.eval.examples, 10);
    ck_assert(rec.ev[0].u.eval.has_acc);
    ck_assert_float_near_rel(rec.ev[0].u.eval.loss, loss, 0, 0);
    ck_assert_float_near_rel(rec.ev[0].u.eval.acc, acc, 0, 0);
    weights_free(&w);
    compiled_free_all(&c);
}
END_TEST

/* Stopped at the step after global step 2: the state after 3 steps is saved and said so. */
START_TEST(interrupted)
{
    Compiled c;
    char ckpt[128];
    volatile int stop = 0;
    Rec rec = { .stop = &stop, .stop_at = 2 };
    RunOptions o;
    run_setup(&c, small_net, &o, &rec, ckpt, sizeof ckpt, "stop.ckpt");
    o.stop = &stop;
    RunResult r;
    ck_assert_int_eq(train_run(c.g, &o, &r, NULL, &c.d), RUN_OK);
    ck_assert(r.interrupted);
    ck_assert_int_eq(count_kind(&rec, RUN_STEP), 3);
    ck_assert_int_eq(count_kind(&rec, RUN_EPOCH) + count_kind(&rec, RUN_FINISHED) + count_kind(&rec, RUN_EVAL), 0);
    ck_assert_int_eq(rec.ev[rec.n - 2].kind, RUN_SAVED);
    ck_assert_int_eq(rec.ev[rec.n - 2].u.saved.reason, SAVE_INTERRUPTED);
    ck_assert_int_eq(rec.ev[rec.n - 2].u.saved.step, 3);
    ck_assert_int_eq(rec.ev[rec.n - 1].kind, RUN_INTERRUPTED);
    ck_assert_int_eq(rec.ev[rec.n - 1].u.interrupted.step, 3);
    ck_assert_str_eq(rec.ev[rec.n - 1].u.interrupted.saved, ckpt);
    ck_assert_int_eq(checkpoint_step(ckpt), 3);
    run_result_free(&r);
    compiled_free_all(&c);
}
END_TEST

/* ---- non-finite numbers ----------------------------------------------------------------------- */

/* The loss turns NaN at step 4: the run stops there with an error naming the step and
 * the epoch, the checkpoints of --save-every before it stay (the last one of step 4),
 * and nothing after the failure is reported. */
START_TEST(nan_loss_stops)
{
    Compiled c;
    char ckpt[128];
    Rec rec = { 0 };
    RunOptions o;
    run_setup(&c, diverging_net, &o, &rec, ckpt, sizeof ckpt, "div.ckpt");
    o.save_every = 1;
    RunResult r;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(train_run(c.g, &o, &r, NULL, &d), RUN_FAILED);
    ck_assert_msg(d.buf && strstr(d.buf, "test.net: the loss is NaN at step 4 (epoch 1/5, step 5/8): stopping") &&
                  strstr(d.buf, "--check-numerics names the op"), "%s", d.buf ? d.buf : "");
    for (int s = 0; s < 4; s++) ck_assert_msg(isfinite(r.step_loss[s]), "step %d: %g", s, r.step_loss[s]);
    ck_assert(isnan(r.step_loss[4]));
    ck_assert_int_eq(count_kind(&rec, RUN_STEP), 4);
    ck_assert_int_eq(count_kind(&rec, RUN_SAVED), 4);
    ck_assert_int_eq(rec.ev[rec.n - 1].kind, RUN_SAVED);
    ck_assert_int_eq(rec.ev[rec.n - 1].u.saved.step, 4);
    ck_assert_int_eq(checkpoint_step(ckpt), 4);
    /* the checkpoint kept is a good one: it loads, and its weights are finite */
    Graph *tg = pass_autodiff(c.g, &c.d);
    Weights w;
    ck_assert_int_eq(weights_init(&w, tg, 0, &c.d), 0);
    ck_assert_msg(checkpoint_load(ckpt, tg, &w, &c.d) == 0, "%s", c.d.buf);
    for (int v = 0; v < w.n; v++)
        for (int64_t k = 0; k < shape_numel(&w.shapes[v]); k++) ck_assert(isfinite(w.data[v][k]));
    weights_free(&w);
    graph_free(tg);
    diag_free(&d);
    run_result_free(&r);

    /* without --save-every, the checkpoint that was there before the run is untouched */
    size_t len;
    char *before = read_all(ckpt, &len);
    o.save_every = 0;
    diag_init(&d, NULL);
    ck_assert_int_eq(train_run(c.g, &o, &r, NULL, &d), RUN_FAILED);
    assert_unchanged(ckpt, before, len);
    diag_free(&d);
    run_result_free(&r);
    compiled_free_all(&c);
}
END_TEST

/* The forward pass is finite (sqrt(0) = 0) but the gradient is not (sqrt's at 0 is
 * infinite, times 0 is NaN): the first dense layer's weights are NaN after step 0,
 * whose loss is finite. */
static const char nan_gradient_net[] =
    "input x: f32[B, 8]\ninput y: i32[B]\n"
    "h = sqrt(dense(x, units=16) * 0)\nlogits = dense(h, units=4)\n"
    "loss = cross_entropy(logits, y)\n"
    "train { data = synthetic(count=64)\nbatch = 8\nepochs = 2\nminimize = loss\nseed = 5 }\n";

/* Weights that turn non-finite while the loss is still finite are never written: the
 * save after step 1 is refused with an error, and the file that was there stays as it
 * was, in both modes. */
START_TEST(nonfinite_weights_not_saved)
{
    for (int mode = 0; mode < 2; mode++) {
        Compiled c;
        char ckpt[128];
        Rec rec = { 0 };
        RunOptions o;
        run_setup(&c, nan_gradient_net, &o, &rec, ckpt, sizeof ckpt, "out.ckpt");
        o.mode = mode ? MODE_INTERP : MODE_COMPILED;
        o.save_every = 1;
        FILE *f = fopen(ckpt, "wb");
        ck_assert_ptr_nonnull(f);
        fputs("the checkpoint of an earlier run", f);
        fclose(f);
        size_t len;
        char *before = read_all(ckpt, &len);
        RunResult r;
        DiagSink d;
        diag_init(&d, NULL);
        ck_assert_int_eq(train_run(c.g, &o, &r, NULL, &d), RUN_FAILED);
        ck_assert_msg(d.buf && strstr(d.buf, "the weights after step 1 hold NaN or Inf (first in 'dense/kernel')") &&
                      strstr(d.buf, ckpt), "%s", d.buf ? d.buf : "");
        ck_assert(isfinite(r.step_loss[0]));
        ck_assert_int_eq(count_kind(&rec, RUN_STEP), 1);
        ck_assert_int_eq(count_kind(&rec, RUN_SAVED), 0);
        assert_unchanged(ckpt, before, len);
        diag_free(&d);
        run_result_free(&r);
        compiled_free_all(&c);
    }
}
END_TEST

/* ---- the library prints nothing ------------------------------------------------------------ */

/* Runs fn with stdout and stderr sent to files, and returns how many bytes reached them. */
static long captured(void (*fn)(void))
{
    char out[128], err[128];
    tmp_path(out, sizeof out, "stdout");
    tmp_path(err, sizeof err, "stderr");
    fflush(stdout);
    fflush(stderr);
    int o0 = dup(1), e0 = dup(2);
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert(o0 >= 0 && e0 >= 0 && fo >= 0 && fe >= 0);
    dup2(fo, 1);
    dup2(fe, 2);
    fn();
    fflush(stdout);
    fflush(stderr);
    dup2(o0, 1);
    dup2(e0, 2);
    close(o0);
    close(e0);
    close(fo);
    close(fe);
    struct stat so, se;
    ck_assert(stat(out, &so) == 0 && stat(err, &se) == 0);
    return (long)(so.st_size + se.st_size);
}

static void quiet_runs(void)
{
    Compiled c, div;
    compile_str(&c, small_net);
    compile_str(&div, diverging_net);
    char ckpt[128];
    tmp_path(ckpt, sizeof ckpt, "quiet.ckpt");
    RunOptions o;
    run_options_default(&o);
    o.validate = true;
    o.save_path = ckpt;
    o.check_numerics = true;
    RunResult r;
    Weights w;
    ck_assert_int_eq(train_run(c.g, &o, &r, &w, &c.d), RUN_OK);   /* no reporter at all */
    run_result_free(&r);
    double loss, acc;
    ck_assert_int_eq(eval_run(c.g, &o, &w, &loss, &acc, &c.d), RUN_OK);
    weights_free(&w);
    ck_assert_int_eq(train_run(div.g, &o, &r, NULL, &div.d), RUN_FAILED);   /* --check-numerics' error */
    run_result_free(&r);
    o.check_numerics = false;
    ck_assert_int_eq(train_run(div.g, &o, &r, NULL, &div.d), RUN_FAILED);   /* the NaN loss */
    run_result_free(&r);
    o.data_dir = "/nonexistent";
    compiled_free_all(&c);
    compile_str(&c, "input x: f32[B, 28, 28, 1]\ninput y: i32[B]\nloss = cross_entropy(dense(flatten(x), units=10), y)\n"
                    "train { data = mnist(\"nowhere\")\nminimize = loss }\n");
    ck_assert_int_eq(train_run(c.g, &o, &r, NULL, &c.d), RUN_FAILED);   /* a setup error */
    run_result_free(&r);
    ck_assert_int_gt(c.d.nerrors + div.d.nerrors, 0);
    compiled_free_all(&c);
    compiled_free_all(&div);
}

START_TEST(prints_nothing)
{
    ck_assert_int_eq(captured(quiet_runs), 0);
}
END_TEST

Suite *make_runloop_suite(void)
{
    Suite *s = suite_create("runloop");
    TCase *tc = tcase_create("events");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, events_in_order);
    tcase_add_test(tc, eval_event);
    tcase_add_test(tc, interrupted);
    tcase_add_test(tc, nan_loss_stops);
    tcase_add_test(tc, nonfinite_weights_not_saved);
    tcase_add_test(tc, prints_nothing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(make_runloop_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
