/* The public C API (include/graphc.h) as a program uses it: only the header, only
 * graphc_* calls (config.h says whether ONNX is built in).  Inputs and outputs by
 * index with their names, shapes and dtypes; inference, training and evaluation;
 * weights saved and loaded; every failure a status and a message, never an exit; two
 * models on two threads, and one model shared by two.  Built twice: linked with the
 * internal library (test_api) and with libgraphc.so (test_api_shared). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config.h"
#include "include/graphc.h"

/* large enough that its products and elementwise ops split over the model's pool */
static const char model[] =
    "input x: f32[B, 256]\ninput y: i32[B]\n"
    "h = relu(dense(x, units=1024))\nlogits = dense(h, units=4)\n"
    "output probs = softmax(logits)\nloss = cross_entropy(logits, y)\n"
    "train { data = synthetic(count=64)\noptimizer = sgd(lr=0.05, momentum=0.9)\nbatch = 64\nminimize = loss }\n";

enum { BATCH = 64, STEPS = 10, FEATURES = 256, CLASSES = 4 };

/* The message of the last call on m, for assertion messages. */
#define MSG(m) graphc_message(m)

static void make_data(int seed, float *x, int32_t *y)
{
    unsigned s = 12345u + (unsigned)seed * 7919u;
    for (int i = 0; i < BATCH * FEATURES; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 8) & 0xffff) / 65536.0f;
    }
    for (int i = 0; i < BATCH; i++) y[i] = (int32_t)((x[i * FEATURES] + x[i * FEATURES + 1]) * 2) % CLASSES;
}

static graphc_model *load_ok(const char *name, const char *src)
{
    graphc_model *m = NULL;
    graphc_status st = graphc_load_string(name, src, &m);
    ck_assert_msg(st == GRAPHC_OK, "%s: status %d: %s", name, st, MSG(m));
    return m;
}

/* ---- threads ------------------------------------------------------------------------ */

typedef struct Job {
    int seed;                  /* which data */
    graphc_model *shared;      /* NULL: the job makes its own model */
    float loss[STEPS];         /* each step's loss */
    float probs[BATCH * CLASSES];
    float half[BATCH / 2 * CLASSES]; /* predict_job: the probabilities at half the batch */
    graphc_status status;
    char error[256];
} Job;

/* A model compiled, trained STEPS steps and run on its batch, all on this thread. */
static void *run_job(void *arg)
{
    Job *j = arg;
    float x[BATCH * FEATURES];
    int32_t y[BATCH];
    make_data(j->seed, x, y);
    const void *in[2] = { x, y };
    void *out[1] = { j->probs };
    graphc_model *m = NULL;
    j->status = graphc_load_string("api.net", model, &m);
    for (int s = 0; s < STEPS && j->status == GRAPHC_OK; s++)
        j->status = graphc_train_step(m, BATCH, in, &j->loss[s], NULL);
    if (j->status == GRAPHC_OK) j->status = graphc_run(m, BATCH, in, out);
    if (j->status != GRAPHC_OK) snprintf(j->error, sizeof j->error, "%s", MSG(m));
    graphc_free(m);
    return NULL;
}

START_TEST(two_models_two_threads)
{
    Job alone[2] = { { .seed = 1 }, { .seed = 2 } }, together[2] = { { .seed = 1 }, { .seed = 2 } };
    for (int k = 0; k < 2; k++) {
        run_job(&alone[k]);
        ck_assert_msg(alone[k].status == GRAPHC_OK, "model %d alone: %s", k, alone[k].error);
    }
    /* the two data sets train differently: the comparison below can fail */
    ck_assert(memcmp(alone[0].loss, alone[1].loss, sizeof alone[0].loss) != 0);
    ck_assert_float_lt(alone[0].loss[STEPS - 1], alone[0].loss[0]);
    pthread_t t[2];
    for (int k = 0; k < 2; k++) ck_assert_int_eq(pthread_create(&t[k], NULL, run_job, &together[k]), 0);
    for (int k = 0; k < 2; k++) ck_assert_int_eq(pthread_join(t[k], NULL), 0);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(together[k].status == GRAPHC_OK, "model %d on its thread: %s", k, together[k].error);
        ck_assert_msg(memcmp(alone[k].loss, together[k].loss, sizeof alone[k].loss) == 0,
                      "model %d: another loss curve when run beside the other", k);
        ck_assert_msg(memcmp(alone[k].probs, together[k].probs, sizeof alone[k].probs) == 0,
                      "model %d: other predictions when run beside the other", k);
    }
}
END_TEST

/* Inference on the shared model, ROUNDS times with alternating batch sizes (each
 * change compiles the step again while the other thread may be using it).  A batch
 * size always gives what it gave the first time, bit for bit (another size may round
 * differently). */
enum { ROUNDS = 6 };
static void *predict_job(void *arg)
{
    Job *j = arg;
    float x[BATCH * FEATURES];
    int32_t y[BATCH];
    make_data(j->seed, x, y);
    const void *in[2] = { x, NULL };
    float probs[BATCH * CLASSES];
    void *out[1] = { probs };
    j->status = GRAPHC_OK;
    for (int r = 0; r < ROUNDS && j->status == GRAPHC_OK; r++) {
        int64_t b = r % 2 ? BATCH / 2 : BATCH;
        float *first = r % 2 ? j->half : j->probs;
        size_t bytes = (size_t)b * CLASSES * sizeof *probs;
        j->status = graphc_run(j->shared, b, in, out);
        if (j->status == GRAPHC_OK && r < 2) {
            memcpy(first, probs, bytes);
        } else if (j->status == GRAPHC_OK && memcmp(first, probs, bytes) != 0) {
            snprintf(j->error, sizeof j->error, "round %d: other probabilities than the first time", r);
            j->status = GRAPHC_ERR_RUN;
        }
    }
    if (j->status != GRAPHC_OK && !j->error[0]) snprintf(j->error, sizeof j->error, "%s", MSG(j->shared));
    return NULL;
}

START_TEST(one_model_two_threads)
{
    graphc_model *m = load_ok("api.net", model);
    Job alone[2] = { { .seed = 3, .shared = m }, { .seed = 4, .shared = m } };
    Job together[2] = { { .seed = 3, .shared = m }, { .seed = 4, .shared = m } };
    for (int k = 0; k < 2; k++) {
        predict_job(&alone[k]);
        ck_assert_msg(alone[k].status == GRAPHC_OK, "job %d alone: %s", k, alone[k].error);
    }
    ck_assert(memcmp(alone[0].probs, alone[1].probs, sizeof alone[0].probs) != 0);
    pthread_t t[2];
    for (int k = 0; k < 2; k++) ck_assert_int_eq(pthread_create(&t[k], NULL, predict_job, &together[k]), 0);
    for (int k = 0; k < 2; k++) ck_assert_int_eq(pthread_join(t[k], NULL), 0);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(together[k].status == GRAPHC_OK, "job %d beside the other: %s", k, together[k].error);
        ck_assert_msg(memcmp(alone[k].probs, together[k].probs, sizeof alone[k].probs) == 0 &&
                      memcmp(alone[k].half, together[k].half, sizeof alone[k].half) == 0,
                      "job %d: other predictions when the model is shared", k);
    }
    graphc_free(m);
}
END_TEST

/* ---- inputs and outputs ------------------------------------------------------------- */

/* Three inputs (two of floats, one of labels), two outputs, as siamese.net. */
static const char pair_model[] =
    "input left: f32[B, 3, 2]\ninput right: f32[B, 3, 2]\ninput label: i32[B]\n"
    "output sum = left + right\noutput prod = flatten(left * right)\n"
    "logits = dense(flatten(left - right), units=2)\nloss = cross_entropy(logits, label)\n"
    "train { data = synthetic(count=8); optimizer = sgd(lr=0.1); batch = 4; minimize = loss }\n";

START_TEST(inputs_and_outputs_described)
{
    graphc_model *m = load_ok("pair.net", pair_model);
    int nin = 0, nout = 0;
    ck_assert_int_eq(graphc_input_count(m, &nin), GRAPHC_OK);
    ck_assert_int_eq(graphc_output_count(m, &nout), GRAPHC_OK);
    ck_assert_int_eq(nin, 3);
    ck_assert_int_eq(nout, 2);
    typedef struct Want {
        const char *name;
        graphc_dtype dtype;
        int rank, label;
        int64_t dims[3];       /* at batch 5 */
    } Want;
    static const Want want_in[3] = {
        { "left", GRAPHC_F32, 3, 0, { 5, 3, 2 } },
        { "right", GRAPHC_F32, 3, 0, { 5, 3, 2 } },
        { "label", GRAPHC_I32, 1, 1, { 5 } },
    }, want_out[2] = {
        { "sum", GRAPHC_F32, 3, 0, { 5, 3, 2 } },
        { "prod", GRAPHC_F32, 2, 0, { 5, 6 } },
    };
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < (side ? nout : nin); i++) {
            graphc_tensor_info t, u;
            const Want *w = side ? &want_out[i] : &want_in[i];
            graphc_status st = side ? graphc_output_info(m, i, 5, &t) : graphc_input_info(m, i, 5, &t);
            ck_assert_msg(st == GRAPHC_OK, "%s", MSG(m));
            ck_assert_str_eq(t.name, w->name);
            ck_assert_int_eq(t.dtype, w->dtype);
            ck_assert_int_eq(t.rank, w->rank);
            ck_assert_int_eq(t.label, w->label);
            int64_t count = 1;
            for (int k = 0; k < t.rank; k++) {
                ck_assert_int_eq(t.dims[k], w->dims[k]);
                count *= w->dims[k];
            }
            ck_assert_int_eq(t.count, count);
            /* batch 0: the batch's size unknown, the others as before */
            st = side ? graphc_output_info(m, i, 0, &u) : graphc_input_info(m, i, 0, &u);
            ck_assert_int_eq(st, GRAPHC_OK);
            ck_assert_int_eq(u.dims[0], -1);
            ck_assert_int_eq(u.count, -1);
            for (int k = 1; k < t.rank; k++) ck_assert_int_eq(u.dims[k], t.dims[k]);
        }
    graphc_free(m);
}
END_TEST

START_TEST(several_inputs_and_outputs_run)
{
    graphc_model *m = load_ok("pair.net", pair_model);
    enum { B = 3, N = B * 6 };
    float left[N], right[N], sum[N], prod[N];
    for (int i = 0; i < N; i++) left[i] = (float)i * 0.5f - 2, right[i] = 3 - (float)i * 0.25f;
    memset(sum, 0xff, sizeof sum);
    memset(prod, 0xff, sizeof prod);
    const void *in[3] = { left, right, NULL };   /* the label: no output needs it */
    void *out[2] = { sum, prod };
    ck_assert_msg(graphc_run(m, B, in, out) == GRAPHC_OK, "%s", MSG(m));
    ck_assert_str_eq(MSG(m), "");
    for (int i = 0; i < N; i++) {
        ck_assert_float_eq(sum[i], left[i] + right[i]);
        ck_assert_float_eq(prod[i], left[i] * right[i]);
    }
    /* an output not wanted is not written */
    float sum2[N];
    memset(sum2, 0, sizeof sum2);
    void *only_sum[2] = { sum2, NULL };
    ck_assert_int_eq(graphc_run(m, B, in, only_sum), GRAPHC_OK);
    ck_assert_int_eq(memcmp(sum, sum2, sizeof sum), 0);
    graphc_free(m);
}
END_TEST

/* ---- training, evaluation, weights -------------------------------------------------- */

START_TEST(training_lowers_the_loss)
{
    graphc_model *m = load_ok("api.net", model);
    float x[BATCH * FEATURES];
    int32_t y[BATCH];
    make_data(5, x, y);
    const void *in[2] = { x, y };
    float before, acc_before, after, loss, acc;
    ck_assert_msg(graphc_evaluate(m, BATCH, in, &before, &acc_before) == GRAPHC_OK, "%s", MSG(m));
    ck_assert(acc_before >= 0 && acc_before <= 1);
    /* the step's loss is the loss before its update: the evaluation's */
    ck_assert_msg(graphc_train_step(m, BATCH, in, &loss, &acc) == GRAPHC_OK, "%s", MSG(m));
    ck_assert_msg(fabsf(loss - before) <= 1e-5f * fabsf(before), "step loss %g, evaluated %g", loss, before);
    ck_assert_float_eq_tol(acc, acc_before, 1e-6);
    for (int s = 1; s < STEPS; s++) ck_assert_int_eq(graphc_train_step(m, BATCH, in, &loss, NULL), GRAPHC_OK);
    ck_assert_int_eq(graphc_evaluate(m, BATCH, in, &after, NULL), GRAPHC_OK);
    ck_assert_msg(after < 0.9f * before, "loss %g after %d steps, %g before", after, STEPS, before);
    graphc_free(m);
}
END_TEST

#define TMP_TEMPLATE "/tmp/graphc-api-XXXXXX"
static char tmp_dir[] = TMP_TEMPLATE;

START_TEST(weights_saved_and_loaded)
{
    char path[64];
    snprintf(path, sizeof path, "%s/w.ckpt", tmp_dir);
    float x[BATCH * FEATURES];
    int32_t y[BATCH];
    make_data(6, x, y);
    const void *in[2] = { x, y };
    graphc_model *a = load_ok("api.net", model), *b = load_ok("api.net", model);
    float loss;
    for (int s = 0; s < 3; s++) ck_assert_int_eq(graphc_train_step(a, BATCH, in, &loss, NULL), GRAPHC_OK);
    ck_assert_msg(graphc_save_weights(a, path) == GRAPHC_OK, "%s", MSG(a));
    ck_assert_msg(graphc_load_weights(b, path) == GRAPHC_OK, "%s", MSG(b));
    float pa[BATCH * CLASSES], pb[BATCH * CLASSES];
    void *oa[1] = { pa }, *ob[1] = { pb };
    ck_assert_int_eq(graphc_run(a, BATCH, in, oa), GRAPHC_OK);
    ck_assert_int_eq(graphc_run(b, BATCH, in, ob), GRAPHC_OK);
    ck_assert_int_eq(memcmp(pa, pb, sizeof pa), 0);
    /* the optimizer's state and step came along: the next steps are the same */
    float la, lb;
    for (int s = 0; s < 2; s++) {
        ck_assert_int_eq(graphc_train_step(a, BATCH, in, &la, NULL), GRAPHC_OK);
        ck_assert_int_eq(graphc_train_step(b, BATCH, in, &lb, NULL), GRAPHC_OK);
        ck_assert_msg(la == lb, "step %d after loading: loss %.9g, the saver's %.9g", s, lb, la);
    }
    unlink(path);
    graphc_free(a);
    graphc_free(b);
}
END_TEST

/* A compiled inference step keeps the dense layer's weights packed (1 MiB of them:
 * kernels/blas.c's kern_gemm_pack) from one run to the next; every write of the weights
 * must reach it.  After a training step, and after loading a checkpoint between two
 * runs of one step (one batch size: another compiles the step again), the outputs at
 * batch 1 (the GEMV) and 4 (few rows) are those of a fresh model given the same
 * weights. */
START_TEST(packed_weights_follow_every_write)
{
    char path[64];
    snprintf(path, sizeof path, "%s/p.ckpt", tmp_dir);
    float x[BATCH * FEATURES];
    int32_t y[BATCH];
    make_data(7, x, y);
    const void *in[2] = { x, y };
    static const int64_t batches[] = { 1, 4 };
    for (size_t i = 0; i < 2; i++) {
        int64_t n = batches[i];
        size_t bytes = (size_t)n * CLASSES * sizeof(float);
        graphc_model *a = load_ok("api.net", model), *c = load_ok("api.net", model);
        float pa[4 * CLASSES], pb[4 * CLASSES], pc[4 * CLASSES], loss;
        void *oa[1] = { pa }, *ob[1] = { pb }, *oc[1] = { pc };
        ck_assert_int_eq(graphc_run(a, n, in, oa), GRAPHC_OK);   /* packs of the initial weights */
        ck_assert_int_eq(graphc_run(c, n, in, oc), GRAPHC_OK);
        ck_assert_int_eq(graphc_train_step(a, BATCH, in, &loss, NULL), GRAPHC_OK);
        ck_assert_msg(graphc_save_weights(a, path) == GRAPHC_OK, "%s", MSG(a));
        ck_assert_msg(graphc_load_weights(c, path) == GRAPHC_OK, "%s", MSG(c));
        graphc_model *b = load_ok("api.net", model);
        ck_assert_msg(graphc_load_weights(b, path) == GRAPHC_OK, "%s", MSG(b));
        ck_assert_int_eq(graphc_run(b, n, in, ob), GRAPHC_OK);
        ck_assert_int_eq(graphc_run(a, n, in, oa), GRAPHC_OK);
        ck_assert_int_eq(graphc_run(c, n, in, oc), GRAPHC_OK);
        ck_assert_msg(memcmp(pa, pb, bytes) == 0, "batch %lld after a training step: probs[0] %.9g, a fresh model's %.9g",
                      (long long)n, pa[0], pb[0]);
        ck_assert_msg(memcmp(pc, pb, bytes) == 0, "batch %lld after loading weights: probs[0] %.9g, a fresh model's %.9g",
                      (long long)n, pc[0], pb[0]);
        unlink(path);
        graphc_free(a);
        graphc_free(b);
        graphc_free(c);
    }
}
END_TEST

/* ---- errors ------------------------------------------------------------------------- */

#define ck_assert_fails(call, m, status, text)                                                          \
    do {                                                                                                \
        graphc_status st_ = (call);                                                                     \
        ck_assert_msg(st_ == (status), "%s: status %d, expected %d (%s)", #call, st_, (status), MSG(m)); \
        ck_assert_msg(strstr(MSG(m), (text)), "%s: message '%s' lacks '%s'", #call, MSG(m), (text));    \
    } while (0)

START_TEST(bad_models_are_statuses_and_messages)
{
    graphc_model *m = NULL;
    ck_assert_fails(graphc_load("/nonexistent/m.net", &m), m, GRAPHC_ERR_FILE, "/nonexistent/m.net");
    ck_assert_ptr_nonnull(m);
    /* a model that did not load refuses every call, saying why */
    int n;
    ck_assert_fails(graphc_input_count(m, &n), m, GRAPHC_ERR_ARG, "graphc_input_count: the model did not load");
    ck_assert_fails(graphc_run(m, 1, NULL, NULL), m, GRAPHC_ERR_ARG, "did not load");
    graphc_free(m);
    /* every error of the source, with place and caret */
    ck_assert_fails(graphc_load_string("bad.net", "input x: f32[B, 4]\noutput y = relux(x)\noutput z = x +\n", &m), m,
                    GRAPHC_ERR_MODEL, "bad.net:2:12: error: unknown function 'relux'");
    ck_assert_msg(strstr(MSG(m), "  output y = relux(x)\n             ^~~~~"), "no caret: %s", MSG(m));
    ck_assert_msg(strstr(MSG(m), "bad.net:3:"), "the second error is missing: %s", MSG(m));
    graphc_free(m);
    ck_assert_int_eq(graphc_load_string(NULL, "x", &m), GRAPHC_ERR_ARG);
    graphc_free(m);
    ck_assert_int_eq(graphc_load(NULL, NULL), GRAPHC_ERR_ARG);
    ck_assert_int_eq(graphc_run(NULL, 1, NULL, NULL), GRAPHC_ERR_ARG);
    ck_assert(strlen(graphc_message(NULL)) > 0);
    /* not an ONNX model, or no ONNX in this build */
    char path[64];
    snprintf(path, sizeof path, "%s/junk.onnx", tmp_dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("\x08\x07junk that is not a model", f);
    fclose(f);
#ifdef HAVE_ONNX
    ck_assert_fails(graphc_load(path, &m), m, GRAPHC_ERR_MODEL, "junk.onnx");
#else
    ck_assert_fails(graphc_load(path, &m), m, GRAPHC_ERR_UNSUPPORTED, "without ONNX support");
#endif
    graphc_free(m);
    unlink(path);
}
END_TEST

START_TEST(bad_calls_are_statuses_and_messages)
{
    graphc_model *m = load_ok("pair.net", pair_model);
    graphc_tensor_info t;
    ck_assert_fails(graphc_input_info(m, 3, 1, &t), m, GRAPHC_ERR_ARG, "3 is not an index of the model's 3 inputs");
    ck_assert_fails(graphc_output_info(m, -1, 1, &t), m, GRAPHC_ERR_ARG, "-1 is not an index of the model's 2 outputs");
    ck_assert_fails(graphc_output_info(m, 0, -2, &t), m, GRAPHC_ERR_ARG, "the batch is negative");
    ck_assert_fails(graphc_output_info(m, 0, INT64_MAX / 2, &t), m, GRAPHC_ERR_ARG, "too large");
    ck_assert_fails(graphc_input_info(m, 0, 1, NULL), m, GRAPHC_ERR_ARG, "NULL");
    /* a success clears the message */
    ck_assert_int_eq(graphc_input_info(m, 0, 1, &t), GRAPHC_OK);
    ck_assert_str_eq(MSG(m), "");
    float left[6] = { 0 }, sum[6];
    void *out[2] = { sum, NULL };
    const void *no_right[3] = { left, NULL, NULL };
    ck_assert_fails(graphc_run(m, 1, no_right, out), m, GRAPHC_ERR_ARG, "input 1 ('right') is needed");
    ck_assert_fails(graphc_run(m, 1, NULL, out), m, GRAPHC_ERR_ARG, "the inputs array is NULL");
    const void *in[3] = { left, left, NULL };
    ck_assert_fails(graphc_run(m, 0, in, out), m, GRAPHC_ERR_ARG, "the batch must be at least 1");
    /* training reads the labels */
    ck_assert_fails(graphc_train_step(m, 1, in, NULL, NULL), m, GRAPHC_ERR_ARG, "input 2 ('label') is needed");
    int32_t bad_label[1] = { 7 };
    const void *in_bad[3] = { left, left, bad_label };
    ck_assert_fails(graphc_train_step(m, 1, in_bad, NULL, NULL), m, GRAPHC_ERR_RUN, "7");
    ck_assert_fails(graphc_load_weights(m, "/nonexistent/w.ckpt"), m, GRAPHC_ERR_FILE, "/nonexistent/w.ckpt");
    ck_assert_fails(graphc_save_weights(m, "/nonexistent/dir/w.ckpt"), m, GRAPHC_ERR_FILE, "/nonexistent/dir/w.ckpt");
    graphc_free(m);
    /* a model without a train block does not train */
    m = load_ok("infer.net", "input x: f32[B, 2]\noutput y = x * 2\n");
    float x[2] = { 1, 2 };
    const void *xin[1] = { x };
    ck_assert_fails(graphc_train_step(m, 1, xin, NULL, NULL), m, GRAPHC_ERR_ARG, "infer.net has no train block");
    ck_assert_fails(graphc_evaluate(m, 1, xin, NULL, NULL), m, GRAPHC_ERR_ARG, "graphc_evaluate: infer.net has no train block");
    graphc_free(m);
}
END_TEST

static void make_tmp(void)
{
    memcpy(tmp_dir, TMP_TEMPLATE, sizeof tmp_dir);
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}
static void remove_tmp(void) { rmdir(tmp_dir); }

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("threads");
    tcase_add_test(tc, two_models_two_threads);
    tcase_add_test(tc, one_model_two_threads);
    suite_add_tcase(s, tc);
    tc = tcase_create("io");
    tcase_add_test(tc, inputs_and_outputs_described);
    tcase_add_test(tc, several_inputs_and_outputs_run);
    suite_add_tcase(s, tc);
    tc = tcase_create("training");
    tcase_add_checked_fixture(tc, make_tmp, remove_tmp);
    tcase_add_test(tc, training_lowers_the_loss);
    tcase_add_test(tc, weights_saved_and_loaded);
    tcase_add_test(tc, packed_weights_follow_every_write);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, make_tmp, remove_tmp);
    tcase_add_test(tc, bad_models_are_statuses_and_messages);
    tcase_add_test(tc, bad_calls_are_statuses_and_messages);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(api_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
