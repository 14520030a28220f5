/* The SVG training plot: well-formed for ordinary and odd logs, small for long runs,
 * and written atomically (a failed write leaves nothing new and nothing broken; the
 * rest of util/outfile.h's rules are tested in test_checkpoint.c). */
#include "run/plot.h"
#include "util/mem.h"
#include "util/rng.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

Suite *make_plot_suite(void);

static char tmpdir[64];

static void setup(void)
{
    strcpy(tmpdir, "/tmp/graphc-test-plot-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static char *path_in_tmp(const char *name)
{
    static char p[4][256];
    static int k;
    char *s = p[k++ % 4];
    snprintf(s, 256, "%s/%s", tmpdir, name);
    return s;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return s;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static bool have_xmllint(void)
{
    static int have = -1;
    if (have < 0) {
        have = system("command -v xmllint >/dev/null 2>&1") == 0;
        if (!have) fprintf(stderr, "test_plot: xmllint not installed; well-formedness not checked\n");
    }
    return have;
}

/* Writes the plot and checks the file: the SVG shape, well-formedness (by xmllint
 * when installed), no temporary left.  Returns the text (free it). */
static char *plot_ok(const char *name, const TrainLog *log, size_t *len)
{
    const char *path = path_in_tmp(name);
    DiagSink d;
    diag_init(&d, NULL);
    int rc = plot_svg(path, log, &d);
    ck_assert_msg(rc == 0, "plot_svg failed: %s", d.buf ? d.buf : "");
    ck_assert_int_eq(d.nerrors, 0);
    diag_free(&d);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert(!exists(tmp));
    size_t n;
    char *s = slurp(path, &n);
    const char *start = s;
    if (strncmp(start, "<?xml", 5) == 0) {
        start = strstr(start, "?>");
        ck_assert_ptr_nonnull(start);
        start += 2;
        while (*start == '\n' || *start == ' ') start++;
    }
    ck_assert_msg(strncmp(start, "<svg", 4) == 0, "does not start with <svg: %.40s", s);
    ck_assert_uint_ge(n, 7);
    ck_assert_str_eq(s + n - 7, "</svg>\n");
    ck_assert_uint_eq(strlen(s), n);   /* no NUL inside */
    if (have_xmllint()) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "xmllint --noout '%s'", path);
        ck_assert_msg(system(cmd) == 0, "xmllint rejects %s", path);
    }
    /* numbers are plain: no nan or inf from printf */
    ck_assert_ptr_null(strstr(s, "nan"));
    ck_assert_ptr_null(strstr(s, "inf"));
    ck_assert_ptr_null(strstr(s, "NaN"));
    if (len) *len = n;
    return s;
}

START_TEST(test_plot_small)
{
    float loss[50], acc[50];
    for (int i = 0; i < 50; i++) {
        loss[i] = 2.3f * expf(-0.05f * (float)i) + 0.1f * rng_unit(rng_at(1, 0, (uint64_t)i));
        acc[i] = 1 - loss[i] / 2.5f;
    }
    float tl[5] = {1.5f, 1.0f, NAN, 0.5f, 0.4f};
    float ta[5] = {0.4f, 0.6f, NAN, 0.8f, 0.85f};
    TrainLog log = { .nsteps = 50, .step_loss = loss, .step_acc = acc, .nepochs = 5,
                     .epoch_test_loss = tl, .epoch_test_acc = ta, .steps_per_epoch = 10,
                     .title = "mnist <cnn> & \"friends\" 'v2'" };
    size_t n;
    char *s = plot_ok("small.svg", &log, &n);
    ck_assert_ptr_nonnull(strstr(s, "mnist &lt;cnn&gt; &amp; &quot;friends&quot; &apos;v2&apos;"));
    ck_assert_ptr_null(strstr(s, "<cnn>"));
    ck_assert_ptr_nonnull(strstr(s, "<polyline"));
    ck_assert_ptr_nonnull(strstr(s, "test accuracy per epoch (last 0.8500)"));
    ck_assert_ptr_nonnull(strstr(s, "epoch 5"));
    ck_assert_ptr_nonnull(strstr(s, "smoothed"));
    free(s);
}
END_TEST

START_TEST(test_plot_one_step)
{
    float loss[1] = {2.302585f}, acc[1] = {0.125f};
    TrainLog log = { .nsteps = 1, .step_loss = loss, .step_acc = acc };
    char *s = plot_ok("one.svg", &log, NULL);
    ck_assert_ptr_nonnull(strstr(s, "<circle"));   /* a lone point is a dot */
    ck_assert_ptr_nonnull(strstr(s, "training run"));
    free(s);
}
END_TEST

START_TEST(test_plot_empty)
{
    TrainLog log = { .nsteps = 0, .title = "" };
    char *s = plot_ok("empty.svg", &log, NULL);
    ck_assert_ptr_nonnull(strstr(s, "no loss recorded"));
    free(s);
    /* epochs with no test data at all */
    float nan2[2] = {NAN, NAN};
    float loss[4] = {1, 0.9f, 0.8f, 0.7f};
    TrainLog log2 = { .nsteps = 4, .step_loss = loss, .nepochs = 2, .epoch_test_loss = nan2,
                      .epoch_test_acc = nan2, .steps_per_epoch = 2, .title = "no eval" };
    s = plot_ok("noeval.svg", &log2, NULL);
    ck_assert_ptr_null(strstr(s, "test loss per epoch"));
    ck_assert_ptr_nonnull(strstr(s, "no accuracy recorded"));
    free(s);
}
END_TEST

START_TEST(test_plot_nonfinite)
{
    float loss[40], acc[40];
    for (int i = 0; i < 40; i++) {
        loss[i] = 1.0f / (float)(i + 1);
        acc[i] = (float)i / 40;
    }
    loss[3] = NAN;
    loss[10] = INFINITY;
    loss[11] = -INFINITY;
    loss[39] = NAN;
    acc[5] = NAN;
    TrainLog log = { .nsteps = 40, .step_loss = loss, .step_acc = acc, .steps_per_epoch = 0,
                     .title = "diverging" };
    char *s = plot_ok("nan.svg", &log, NULL);
    ck_assert_ptr_nonnull(strstr(s, "4 non-finite values not drawn"));
    ck_assert_ptr_nonnull(strstr(s, "1 non-finite value not drawn"));
    free(s);
    /* all losses non-finite: a sane axis, a note */
    for (int i = 0; i < 40; i++) loss[i] = (i & 1) ? NAN : INFINITY;
    s = plot_ok("allnan.svg", &log, NULL);
    ck_assert_ptr_nonnull(strstr(s, "no loss recorded"));
    free(s);
    /* one finite but huge outlier does not flatten the rest */
    for (int i = 0; i < 40; i++) loss[i] = 1.0f + 0.01f * (float)i;
    loss[20] = 1e30f;
    s = plot_ok("outlier.svg", &log, NULL);
    ck_assert_ptr_nonnull(strstr(s, "1 above"));
    free(s);
    /* all equal, all huge, all negative */
    for (int i = 0; i < 40; i++) loss[i] = 3e38f;
    free(plot_ok("huge.svg", &log, NULL));
    for (int i = 0; i < 40; i++) loss[i] = -1e-7f * (float)i;
    free(plot_ok("neg.svg", &log, NULL));
}
END_TEST

START_TEST(test_plot_long_run)
{
    size_t n = 100000;
    float *loss = malloc(n * sizeof(float)), *acc = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float r = rng_unit(rng_at(2, 0, i));
        loss[i] = 2.0f / (1 + (float)i / 2000) + 0.3f * r;
        acc[i] = 1 - loss[i] / 2.5f;
    }
    float tl[54], ta[54];
    for (int e = 0; e < 54; e++) {
        tl[e] = 1.0f / (float)(e + 1);
        ta[e] = 1 - tl[e] / 2;
    }
    TrainLog log = { .nsteps = n, .step_loss = loss, .step_acc = acc, .nepochs = 54,
                     .epoch_test_loss = tl, .epoch_test_acc = ta, .steps_per_epoch = 1875,
                     .title = "100k steps" };
    size_t len;
    char *s = plot_ok("long.svg", &log, &len);
    ck_assert_uint_lt(len, 500 * 1024);
    free(s);
    /* an epoch per step, evaluated every epoch: lines and markers thinned */
    float *te = malloc(n * sizeof(float)), *tv = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        te[i] = loss[i] * 1.1f;
        tv[i] = acc[i] * 0.9f;
    }
    TrainLog log2 = { .nsteps = n, .step_loss = loss, .step_acc = acc, .nepochs = n,
                      .epoch_test_loss = te, .epoch_test_acc = tv, .steps_per_epoch = 1,
                      .title = "epoch per step" };
    s = plot_ok("long2.svg", &log2, &len);
    ck_assert_msg(len < 500 * 1024, "%zu bytes", len);
    free(s);
    free(loss);
    free(acc);
    free(te);
    free(tv);
}
END_TEST

/* Control characters and invalid UTF-8 in the title still make well-formed XML;
 * valid UTF-8 passes through. */
START_TEST(test_plot_title_bytes)
{
    float loss[3] = {1, 2, 3};
    TrainLog log = { .nsteps = 3, .step_loss = loss, .title = "caf\xc3\xa9 \x01\x1b[31m \xff\xfe end" };
    char *s = plot_ok("bytes.svg", &log, NULL);
    ck_assert_ptr_nonnull(strstr(s, "caf\xc3\xa9"));
    ck_assert_ptr_nonnull(strstr(s, "?? end"));
    free(s);
}
END_TEST

/* Overwriting an existing plot replaces it whole. */
START_TEST(test_plot_overwrite)
{
    const char *path = path_in_tmp("over.svg");
    FILE *f = fopen(path, "w");
    fputs("old content\n", f);
    fclose(f);
    float loss[2] = {1, 0.5f};
    TrainLog log = { .nsteps = 2, .step_loss = loss, .title = "new" };
    free(plot_ok("over.svg", &log, NULL));
    char *s = slurp(path, NULL);
    ck_assert_ptr_null(strstr(s, "old content"));
    free(s);
}
END_TEST

/* Every allocation failing in turn: a clean failure, no file, no temporary. */
START_TEST(test_plot_out_of_memory)
{
    const char *path = path_in_tmp("oom.svg");
    char only_plot[400];   /* no temporary left, whatever failed */
    snprintf(only_plot, sizeof only_plot, "test -z \"$(ls -A '%s' | grep -vx oom.svg)\"", tmpdir);
    float loss[30];
    for (int i = 0; i < 30; i++) loss[i] = 1.0f / (float)(i + 1);
    float tl[3] = {0.5f, 0.3f, 0.2f};
    TrainLog log = { .nsteps = 30, .step_loss = loss, .step_acc = loss, .nepochs = 3,
                     .epoch_test_loss = tl, .epoch_test_acc = tl, .steps_per_epoch = 10, .title = "oom" };
    int rc = -1;
    for (long k = 0; k < 100 && rc != 0; k++) {
        DiagSink d;
        diag_init(&d, NULL);
        gc_mem_fail_after(k);
        rc = plot_svg(path, &log, &d);
        gc_mem_fail_after(-1);
        if (rc != 0) {
            ck_assert_int_ge(d.nerrors, 1);
            ck_assert(!exists(path));
        }
        ck_assert_int_eq(system(only_plot), 0);
        diag_free(&d);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert(exists(path));
}
END_TEST

static void expect_fail(const char *path, const char *reason)
{
    float loss[2] = {1, 0.5f};
    TrainLog log = { .nsteps = 2, .step_loss = loss, .title = "x" };
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_ne(plot_svg(path, &log, &d), 0);
    ck_assert_int_eq(d.nerrors, 1);
    ck_assert_msg(strstr(d.buf, path) != NULL, "message does not name %s: %s", path, d.buf);
    ck_assert_msg(strstr(d.buf, reason) != NULL, "message lacks '%s': %s", reason, d.buf);
    diag_free(&d);
}

START_TEST(test_plot_fail_no_dir)
{
    const char *path = path_in_tmp("missing/sub/plot.svg");
    expect_fail(path, "No such file or directory");
    ck_assert(!exists(path));
    ck_assert(!exists(path_in_tmp("missing")));
    char cmd[300];   /* the folder holds nothing */
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_plot_fail_path_is_dir)
{
    const char *path = path_in_tmp("adir");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    expect_fail(path, "Is a directory");
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert(!exists(path_in_tmp("adir.tmp")));
    char cmd[300];   /* the folder is as it was: empty */
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", path);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The write fails midway (the file size limit): the old plot survives, and no
 * temporary is left. */
START_TEST(test_plot_fail_keeps_old)
{
    const char *path = path_in_tmp("keep.svg");
    FILE *f = fopen(path, "w");
    fputs("<svg>previous</svg>\n", f);
    fclose(f);
    signal(SIGXFSZ, SIG_IGN);
    /* (Check's own messages go through a file: the limit is lifted before any) */
    struct rlimit old, lim = { 64, RLIM_INFINITY };
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    float loss[2] = {1, 0.5f};
    TrainLog log = { .nsteps = 2, .step_loss = loss, .title = "x" };
    DiagSink d;
    diag_init(&d, NULL);
    int rc = plot_svg(path, &log, &d);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(d.buf, path) && strstr(d.buf, "File too large"), "%s", d.buf);
    diag_free(&d);
    char *s = slurp(path, NULL);
    ck_assert_str_eq(s, "<svg>previous</svg>\n");
    free(s);
    char cmd[300];   /* the folder holds the plot alone */
    snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = keep.svg", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *make_plot_suite(void)
{
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("svg");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_plot_small);
    tcase_add_test(tc, test_plot_one_step);
    tcase_add_test(tc, test_plot_empty);
    tcase_add_test(tc, test_plot_nonfinite);
    tcase_add_test(tc, test_plot_long_run);
    tcase_add_test(tc, test_plot_title_bytes);
    tcase_add_test(tc, test_plot_overwrite);
    suite_add_tcase(s, tc);
    TCase *fail = tcase_create("failures");
    tcase_add_checked_fixture(fail, setup, teardown);
    tcase_add_test(fail, test_plot_fail_no_dir);
    tcase_add_test(fail, test_plot_fail_path_is_dir);
    tcase_add_test(fail, test_plot_fail_keeps_old);
    tcase_add_test(fail, test_plot_out_of_memory);
    suite_add_tcase(s, fail);
    return s;
}

int main(void)
{
    have_xmllint();   /* asked once, before the tests fork */
    SRunner *sr = srunner_create(make_plot_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
