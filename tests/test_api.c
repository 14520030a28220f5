/* The public C API (include/graphc.h) as a program uses it: only the header, only
 * graphc_* calls.  Two models run on two threads at once, each on its own pool, and
 * give what they give alone (the library's promise: one model per thread). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "include/graphc.h"

/* large enough that its products and elementwise ops split over the model's pool */
static const char model[] =
    "input x: f32[B, 256]\ninput y: i32[B]\n"
    "h = relu(dense(x, units=1024))\nlogits = dense(h, units=4)\n"
    "output probs = softmax(logits)\nloss = cross_entropy(logits, y)\n"
    "train { data = synthetic(count=64)\noptimizer = sgd(lr=0.05, momentum=0.9)\nbatch = 64\nminimize = loss }\n";

enum { BATCH = 64, STEPS = 10, FEATURES = 256, CLASSES = 4 };

typedef struct Job {
    int seed;                  /* which data */
    float loss[STEPS];         /* each step's loss */
    float probs[BATCH * CLASSES];
    graphc_status status;
    char error[256];
} Job;

static void job_data(int seed, float *x, int32_t *y)
{
    unsigned s = 12345u + (unsigned)seed * 7919u;
    for (int i = 0; i < BATCH * FEATURES; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 8) & 0xffff) / 65536.0f;
    }
    for (int i = 0; i < BATCH; i++) y[i] = (int32_t)((x[i * FEATURES] + x[i * FEATURES + 1]) * 2) % CLASSES;
}

/* A model compiled, trained STEPS steps and run on its batch, all on this thread. */
static void *run_job(void *arg)
{
    Job *j = arg;
    float x[BATCH * FEATURES];
    int32_t y[BATCH];
    job_data(j->seed, x, y);
    graphc_model *m = NULL;
    j->status = graphc_compile_string("api.net", model, &m);
    for (int s = 0; s < STEPS && j->status == GRAPHC_OK; s++)
        j->status = graphc_train_step(m, BATCH, x, y, &j->loss[s], NULL);
    if (j->status == GRAPHC_OK) j->status = graphc_predict(m, BATCH, x, j->probs, BATCH * CLASSES);
    if (j->status != GRAPHC_OK) snprintf(j->error, sizeof j->error, "%s", graphc_diagnostics(m));
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

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("threads");
    tcase_add_test(tc, two_models_two_threads);
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
