/* Training: a tiny model to near-zero loss; one epoch of MNIST on a subset; the same
 * seed gives the same curve bit for bit; checkpoints round-trip and refuse damage. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "exec/compiled.h"
#include "exec/pipeline.h"
#include "run/train.h"
#include "tests/testgraph.h"
#include "tests/testtrain.h"
#include "tests/testutil.h"

/* ---- training ------------------------------------------------------------------------------ */

START_TEST(tiny_model_to_zero_loss)
{
    Compiled c;
    compile_str(&c, "input x: f32[B, 8]\ninput y: i32[B]\n"
                    "h = dense(x, units=32, activation=\"tanh\")\nlogits = dense(h, units=4)\n"
                    "loss = cross_entropy(logits, y)\n"
                    "train { data = synthetic(count=32)\noptimizer = adam(lr=0.01)\nbatch = 32\nepochs = 300\n"
                    "minimize = loss\nshuffle = false }\n");
    RunOptions o;
    run_options_default(&o);
    RunResult r;
    ck_assert_msg(train_run(c.g, &o, &r, NULL, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
    ck_assert_msg(r.step_loss[0] > 1.0f, "starts near log(4): %g", r.step_loss[0]);
    ck_assert_msg(r.step_loss[r.nsteps - 1] < 0.01f, "final loss %g", r.step_loss[r.nsteps - 1]);
    ck_assert_float_near_rel(r.step_acc[r.nsteps - 1], 1.0, 0, 1e-6);
    run_result_free(&r);
    compiled_free_all(&c);
}
END_TEST

/* models/charlm.net learns to continue a text: windows of a sentence repeated, each
 * position's label the byte after it, 40 steps in the compiled plan (the train block's
 * AdamW at its schedule's base rate, without the decay) take the loss from about
 * log(256) to under half of it.  The integer inputs are fed as a text source feeds
 * them. */
static void text_windows(int32_t *ids, int32_t *next, int64_t batch, int64_t len, uint64_t seed)
{
    static const char text[] = "the quick brown fox jumps over the lazy dog. ";
    const size_t n = sizeof text - 1;
    for (int64_t b = 0; b < batch; b++) {
        size_t at = (size_t)rng_below(rng_at(seed, 1, (uint64_t)b), n);
        for (int64_t t = 0; t < len; t++) {
            ids[b * len + t] = (unsigned char)text[(at + (size_t)t) % n];
            next[b * len + t] = (unsigned char)text[(at + (size_t)t + 1) % n];
        }
    }
}

START_TEST(charlm_learns)
{
    enum { BATCH = 8, LEN = 64, STEPS = 40 };
    Compiled c;
    compile_file(&c, "models/charlm.net");
    Weights w;
    Step st;
    plan_at(&c, FOR_TRAINING, BATCH, &w, &st);
    const TrainSpec *t = &c.g->train;
    int32_t *ids = malloc(BATCH * LEN * sizeof *ids), *next = malloc(BATCH * LEN * sizeof *next);
    float first = 0, lv = 0, av = 0;
    for (int step = 0; step < STEPS; step++) {
        text_windows(ids, next, BATCH, LEN, (uint64_t)step);
        const void *feeds[2] = { ids, next };
        float *outs[2] = { &lv, &av };
        StepEnv env = { .w = &w, .step = step, .seed = 5, .lr = t->lr, .beta1 = t->beta1, .beta2 = t->beta2, .eps = t->eps,
                        .training = true, .d = &c.d };
        ck_assert_msg(executor_run(st.ex, feeds, outs, &env) == 0, "%s", c.d.buf ? c.d.buf : "");
        ck_assert_msg(isfinite(lv), "step %d: loss %g", step, lv);
        if (step == 0) first = lv;
    }
    ck_assert_msg(first > 4.5f && first < 6.5f, "the first loss %g is not about log(256) = 5.55", first);
    ck_assert_msg(lv < 0.5f * first, "after %d steps the loss is %g (from %g)", STEPS, lv, first);
    free(ids);
    free(next);
    step_free(&st);
    weights_free(&w);
    compiled_free_all(&c);
}
END_TEST

/* An id outside the vocabulary stops the step in either executor, with the embedding's
 * line and the id's position, as a label out of range does. */
START_TEST(embedding_id_out_of_range)
{
    Compiled c;
    compile_str(&c, "input ids: i32[B, 3]\ninput y: i32[B, 3]\n"
                    "loss = cross_entropy(dense(embedding(ids, vocab=5, dim=4), units=5), y)\n"
                    "train { data = synthetic(count=8)\nminimize = loss }\n");
    for (int mode = 0; mode < 2; mode++) {
        CompileOptions co = { .mode = mode ? MODE_COMPILED : MODE_INTERP, .pool = tu_pool, .seed = 1 };
        Weights w = { 0 };
        Step st;
        ck_assert_int_eq(prepare(c.g, FOR_TRAINING, 2, &co, &w, &st, &c.d), 0);
        int32_t ids[6] = { 0, 1, 2, 4, 5, 3 }, y[6] = { 0 };
        const void *feeds[2] = { ids, y };
        float lv, av;
        float *outs[2] = { &lv, &av };
        DiagSink d;
        diag_init(&d, NULL);
        StepEnv env = { .w = &w, .training = true, .d = &d };
        ck_assert_int_eq(executor_run(st.ex, feeds, outs, &env), -1);
        ck_assert_msg(d.buf && strstr(d.buf, "test.net:3:28: embedding: id 5 at position 4 of the ids is outside [0, 5)"),
                      "%s", d.buf ? d.buf : "(nothing)");
        diag_free(&d);
        step_free(&st);
        weights_free(&w);
    }
    compiled_free_all(&c);
}
END_TEST

START_TEST(mnist_subset_one_epoch)
{
    Compiled c;
    compile_file(&c, "models/mlp.net");
    RunOptions o;
    run_options_default(&o);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/data/mnist", srcdir());
    o.data_dir = dir;
    o.epochs = 1;
    o.train_limit = 6000;
    o.test_limit = 2000;
    o.threads = 1;
    RunResult r;
    ck_assert_msg(train_run(c.g, &o, &r, NULL, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
    /* chance is 0.10; an MLP sees 6000 examples once and should clear 0.85 */
    ck_assert_msg(r.test_acc > 0.85, "test accuracy %.4f", r.test_acc);
    ck_assert_msg(r.step_loss[0] > 2.0 && r.epoch_loss[0] < 1.0, "loss %g -> %g", r.step_loss[0], r.epoch_loss[0]);
    run_result_free(&r);
    compiled_free_all(&c);
}
END_TEST

/* Options for a short quiet run on the bundled MNIST (dir holds the data path). */
static void short_mnist_run(RunOptions *o, char *dir, size_t len, int64_t epochs, int64_t steps)
{
    run_options_default(o);
    snprintf(dir, len, "%s/data/mnist", srcdir());
    o->data_dir = dir;
    o->epochs = epochs;
    o->steps = steps;
    o->test_limit = 256;
}

START_TEST(same_seed_same_curve)
{
    Compiled c;
    compile_file(&c, "models/lenet5.net");
    RunResult r[3];
    /* the interpreter's curve is the plan's bit for bit without the one fusion that
     * rounds differently (gemm_update_curve checks it with that fusion) */
    for (int k = 0; k < 3; k++) {
        RunOptions o;
        char dir[1024];
        short_mnist_run(&o, dir, sizeof dir, 2, 6);
        o.passes_off = rounding_passes();
        o.threads = 2;
        o.mode = k == 1 ? MODE_INTERP : MODE_COMPILED;
        o.have_seed = true;
        o.seed = k == 2 ? 8 : 7;
        ck_assert_msg(train_run(c.g, &o, &r[k], NULL, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
    }
    ck_assert_int_eq(r[0].nsteps, 12);
    ck_assert_msg(memcmp(r[0].step_loss, r[1].step_loss, 12 * sizeof(float)) == 0, "same seed, different curve");
    ck_assert_msg(memcmp(r[0].step_loss, r[2].step_loss, 12 * sizeof(float)) != 0, "another seed, the same curve");
    for (int k = 0; k < 3; k++) run_result_free(&r[k]);
    compiled_free_all(&c);
}
END_TEST

/* Work split across threads (convolutions, elementwise ops, pooling) computes what one
 * thread computes: the same first loss, and the same curve up to summation order. */
START_TEST(threads_agree)
{
    Compiled c;
    compile_file(&c, "models/lenet5.net");
    RunResult r[2];
    for (int k = 0; k < 2; k++) {
        RunOptions o;
        char dir[1024];
        short_mnist_run(&o, dir, sizeof dir, 1, 4);
        o.batch = 128;
        o.threads = k + 1;
        ck_assert_msg(train_run(c.g, &o, &r[k], NULL, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
    }
    ck_assert_float_near_rel(r[1].step_loss[0], r[0].step_loss[0], 1e-6, 0);
    for (int s = 1; s < 4; s++) ck_assert_float_near_rel(r[1].step_loss[s], r[0].step_loss[s], 1e-4, 0);
    ck_assert_float_near_rel(r[1].test_loss, r[0].test_loss, 1e-4, 0);
    for (int k = 0; k < 2; k++) run_result_free(&r[k]);
    compiled_free_all(&c);
}
END_TEST

/* --check-numerics names the first op that makes a NaN, its line and the step, in both
 * modes (without it the NaN loss stops the run, naming the step); --max-memory
 * refuses a step that needs more, saying how much it needs. */
START_TEST(numerics_and_memory_limit)
{
    Compiled c;
    compile_str(&c, "input x: f32[B, 4]\ninput y: i32[B]\nh = log(dense(x, units=3) - 100)\n"
                    "loss = cross_entropy(h, y)\n"
                    "train { data = synthetic(count=16)\nbatch = 4\nminimize = loss }\n");
    for (int mode = 0; mode < 2; mode++) {
        RunOptions o;
        run_options_default(&o);
        o.mode = mode ? MODE_COMPILED : MODE_INTERP;
        o.check_numerics = true;
        RunResult r;
        DiagSink d;
        diag_init(&d, NULL);
        ck_assert_int_eq(train_run(c.g, &o, &r, NULL, &d), -1);
        ck_assert_msg(strstr(d.buf, "test.net:3:5: step 0: log produced NaN"), "%s", d.buf);
        diag_free(&d);
        run_result_free(&r);
        /* without the check, the NaN loss stops the run at the same step, which the
         * message names (the op is --check-numerics' to name) */
        o.check_numerics = false;
        diag_init(&d, NULL);
        ck_assert_int_eq(train_run(c.g, &o, &r, NULL, &d), RUN_FAILED);
        ck_assert(isnan(r.step_loss[0]));
        ck_assert_msg(strstr(d.buf, "the loss is NaN at step 0 (epoch 1/1, step 1/4)") &&
                      strstr(d.buf, "--check-numerics names the op"), "%s", d.buf);
        diag_free(&d);
        run_result_free(&r);
    }
    RunOptions o;
    run_options_default(&o);
    o.max_memory = 100;   /* this tiny step needs a few hundred bytes */
    RunResult r;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(train_run(c.g, &o, &r, NULL, &d), -1);
    ck_assert_msg(strstr(d.buf, "more than --max-memory 100"), "%s", d.buf);
    diag_free(&d);
    run_result_free(&r);
    compiled_free_all(&c);
}
END_TEST

START_TEST(checkpoint_roundtrip_and_damage)
{
    Compiled c;
    compile_str(&c, "input x: f32[B, 5]\ninput y: i32[B]\nlogits = dense(relu(dense(x, units=7)), units=3)\n"
                    "loss = cross_entropy(logits, y)\n"
                    "train { data = synthetic(count=64)\noptimizer = adam()\nbatch = 8\nepochs = 2\nminimize = loss }\n");
    char path[] = "/tmp/graphc-ckpt-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    RunOptions o;
    run_options_default(&o);
    o.save_path = path;
    RunResult r;
    Weights trained;
    ck_assert_msg(train_run(c.g, &o, &r, &trained, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");

    /* load into fresh weights of the forward graph: eval gives the same loss */
    Weights w;
    ck_assert_int_eq(weights_init(&w, c.g, 123, &c.d), 0);
    ck_assert_msg(checkpoint_load(path, c.g, &w, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
    for (int v = 0; v < w.n; v++)
        ck_assert(memcmp(w.data[v], trained.data[v], (size_t)shape_numel(&w.shapes[v]) * 4) == 0);
    double loss, acc;
    run_options_default(&o);
    ck_assert_int_eq(eval_run(c.g, &o, &w, &loss, &acc, &c.d), 0);
    ck_assert_float_near_rel(loss, r.test_loss, 1e-6, 1e-7);

    /* damage: a flipped byte in the data, then a truncation, then a wrong model */
    FILE *f = fopen(path, "r+b");
    fseek(f, -40, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -40, SEEK_END);
    fputc(ch ^ 0x5a, f);
    fclose(f);
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(checkpoint_load(path, c.g, &w, &d), -1);
    ck_assert_msg(strstr(d.buf, "checksum mismatch") && strstr(d.buf, path), "%s", d.buf);
    diag_free(&d);
    ck_assert_int_eq(truncate(path, 100), 0);
    diag_init(&d, NULL);
    ck_assert_int_eq(checkpoint_load(path, c.g, &w, &d), -1);
    ck_assert_msg(strstr(d.buf, "truncated"), "%s", d.buf);
    diag_free(&d);
    /* nothing changed in w by the failed loads */
    for (int v = 0; v < w.n; v++)
        ck_assert(memcmp(w.data[v], trained.data[v], (size_t)shape_numel(&w.shapes[v]) * 4) == 0);
    unlink(path);
    weights_free(&w);
    weights_free(&trained);
    run_result_free(&r);
    compiled_free_all(&c);
}
END_TEST

static Suite *make_training_suite(void)
{
    Suite *s = suite_create("training");
    TCase *tc = tcase_create("runs");
    tcase_add_test(tc, tiny_model_to_zero_loss);
    tcase_add_test(tc, charlm_learns);
    tcase_add_test(tc, embedding_id_out_of_range);
    tcase_add_test(tc, mnist_subset_one_epoch);
    tcase_add_test(tc, same_seed_same_curve);
    tcase_add_test(tc, threads_agree);
    tcase_add_test(tc, numerics_and_memory_limit);
    tcase_add_test(tc, checkpoint_roundtrip_and_damage);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(make_training_suite()); }
