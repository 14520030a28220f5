/* graphc run's view of a run (cli/progress.c, built into this test): the bar fits
 * every terminal width and never starts a line with a carriage return off a terminal;
 * the ETA and the epoch's time; JSON lines that write NaN and Inf as null with a flag
 * and leave out what was not measured; the terminal's width from the pty, $COLUMNS or 80.
 *
 * `test_progress --json-sample` prints the JSON lines of crafted runs (every kind of
 * number) for tests/cli_run.sh to parse with python3's json module. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "cli/progress.h"

Suite *make_progress_suite(void);

static RunStepInfo step_info(int64_t step, int64_t steps, int64_t done, double seconds, double loss, double acc)
{
    return (RunStepInfo){ .epoch = 2, .epochs = 5, .step = step, .steps = steps, .global_step = steps + step - 1,
                          .done = done, .seconds = seconds, .loss = loss, .acc = acc, .has_acc = true };
}

/* Whether the line holds a bar "[...]" of exactly `w` characters. */
static int bar_width(const char *line)
{
    const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
    return a && b ? (int)(b - a - 1) : 0;
}

/* Running lines are cut to width - 1 columns at every width, however long their
 * figures; the bar shrinks first and goes below 6 columns; the final line keeps its
 * tail whole. */
START_TEST(bar_fits_every_width)
{
    const int64_t steps[] = { 1, 7, 100, 60000, 1000000000 };
    const double losses[] = { 0.0123, 2.3, 1e30, NAN, -INFINITY };
    char line[512];
    for (int width = 1; width <= 200; width++)
        for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
            for (size_t l = 0; l < sizeof losses / sizeof losses[0]; l++) {
                int64_t n = steps[k];
                RunStepInfo s = step_info(n / 2 + 1, n, n / 2 + 1, 3.5, losses[l], 0.25);
                int len = progress_bar_line(line, sizeof line, &s, false, NULL, width);
                ck_assert_int_eq(len, (int)strlen(line));
                ck_assert_msg(len <= width - 1, "width %d: %d columns: '%s'", width, len, line);
                ck_assert(strchr(line, '\r') == NULL && strchr(line, '\n') == NULL);
                int bw = bar_width(line);
                ck_assert_msg(bw == 0 || (bw >= 6 && bw <= 30), "width %d: bar of %d", width, bw);
                s = step_info(n, n, n, 3.5, losses[l], 0.25);
                len = progress_bar_line(line, sizeof line, &s, true, " - test_loss: 0.1000 - test_acc: 0.9000", width);
                ck_assert_msg(strstr(line, " - test_loss: 0.1000 - test_acc: 0.9000"), "width %d: '%s'", width, line);
                bw = bar_width(line);
                ck_assert_msg(bw == 0 || (bw >= 6 && bw <= 30), "width %d: final bar of %d", width, bw);
            }
    /* a typical line on 80 columns keeps a bar; 40 columns have no room for one */
    RunStepInfo s = step_info(45, 100, 45, 4.5, 2.2975, 0.1104);
    progress_bar_line(line, sizeof line, &s, false, NULL, 80);
    ck_assert_msg(bar_width(line) >= 6 && strlen(line) <= 79, "'%s'", line);
    progress_bar_line(line, sizeof line, &s, false, NULL, 40);
    ck_assert_msg(bar_width(line) == 0 && strlen(line) == 39, "'%s'", line);
    progress_bar_line(line, sizeof line, &s, false, NULL, 0);   /* no limit: the full bar */
    ck_assert_int_eq(bar_width(line), 30);
}
END_TEST

/* The ETA is the steps left at the mean time of the steps taken so far (after a resume,
 * only those this run took); the end shows the epoch's time and time per step. */
START_TEST(eta_and_epoch_time)
{
    char line[512];
    RunStepInfo s = step_info(10, 100, 10, 5.0, 0.5, 0.75);
    progress_bar_line(line, sizeof line, &s, false, NULL, 0);
    ck_assert_str_eq(line, "Epoch 2/5   10/100 [==>...........................] - ETA: 45s - loss: 0.5000 - acc: 0.7500");
    s = step_info(1, 100, 1, 2.0, 0.5, 0.75);
    progress_bar_line(line, sizeof line, &s, false, NULL, 0);
    ck_assert_msg(strstr(line, "- ETA: 3m18s -"), "%s", line);
    s = step_info(60, 100, 10, 5.0, 0.5, 0.75);   /* resumed at step 51 of the epoch */
    progress_bar_line(line, sizeof line, &s, false, NULL, 0);
    ck_assert_msg(strstr(line, "- ETA: 20s -"), "%s", line);
    s = step_info(100, 100, 100, 12.3, 0.5, 0.75);
    progress_bar_line(line, sizeof line, &s, true, " - test_loss: 0.4000 - test_acc: 0.8000", 0);
    ck_assert_str_eq(line, "Epoch 2/5  100/100 [==============================] - 12s 123ms/step - loss: 0.5000 - acc: 0.7500"
                           " - test_loss: 0.4000 - test_acc: 0.8000");
    s.has_acc = false;
    s.loss = NAN;
    progress_bar_line(line, sizeof line, &s, true, NULL, 0);
    ck_assert_msg(strstr(line, "- loss: nan") && !strstr(line, "acc"), "%s", line);
}
END_TEST

/* ---- whole runs through the reporter ------------------------------------------------------- */

static void send(Progress *p, RunEvent ev)
{
    RunReporter r = progress_reporter(p);
    r.fn(r.ctx, &ev);
}

/* Two epochs of 8 steps, each step 10 ms, the second epoch tested. */
static void fake_run(Progress *p, double loss0)
{
    send(p, (RunEvent){ .kind = RUN_START, .u.start = { .model = "m", .epochs = 2, .steps = 8, .batch = 4, .mode = "compiled",
                                                        .blas = "BLAS", .ranks = 1, .global_batch = 4, .comm = "one",
                                                        .optimizer = "sgd(lr=0.1)" } });
    for (int64_t e = 1; e <= 2; e++) {
        for (int64_t s = 1; s <= 8; s++) {
            RunStepInfo st = step_info(s, 8, s, 0.01 * (double)s, s == 1 ? loss0 : 0.5, 0.5);
            st.epoch = e;
            st.epochs = 2;
            send(p, (RunEvent){ .kind = RUN_STEP, .u.step = st });
        }
        send(p, (RunEvent){ .kind = RUN_EPOCH, .u.epoch = { .epoch = e, .epochs = 2, .steps = 8, .steps_run = 8,
                                                            .seconds = 0.08, .loss = 0.5, .acc = 0.5, .has_acc = true,
                                                            .tested = e == 2, .test_loss = 0.4, .test_acc = 0.6,
                                                            .ranks = 1, .global_batch = 4 } });
    }
    send(p, (RunEvent){ .kind = RUN_FINISHED, .u.finished = { .test_loss = 0.4, .test_acc = 0.6, .has_acc = true,
                                                              .test_examples = 16, .seconds = 1, .train_seconds = 0.16 } });
}

static char *run_into_string(bool tty, int width, LogMode mode, double loss0)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    Progress p;
    progress_init(&p, f, mode);
    ck_assert(!p.tty);   /* a file is no terminal */
    p.tty = tty;
    p.width = width;
    fake_run(&p, loss0);
    progress_end(&p);
    long n = ftell(f);
    char *buf = calloc((size_t)n + 1, 1);
    rewind(f);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return buf;
}

/* Off a terminal: one line per epoch, none starting with (or holding) a carriage return. */
START_TEST(not_a_terminal)
{
    char *out = run_into_string(false, 0, LOG_BAR, 0.5);
    ck_assert_msg(strchr(out, '\r') == NULL, "%s", out);
    int lines = 0, epochs = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        lines++;
        epochs += strncmp(l, "Epoch ", 6) == 0;
        if (strncmp(l, "Epoch 2/2", 9) == 0) ck_assert_msg(strstr(l, "test_loss: 0.4000 - test_acc: 0.6000"), "%s", l);
    }
    ck_assert_int_eq(lines, 5);   /* the header, the optimizer, two epochs, the test line */
    ck_assert_int_eq(epochs, 2);
    free(out);
}
END_TEST

/* On a terminal of 60 columns: the bar is drawn at the first and the last step (the
 * others come within 0.1 s), every running line fits in 59 columns, covers a longer one
 * before it, and the final line replaces it. */
START_TEST(terminal_redraws)
{
    char *out = run_into_string(true, 60, LOG_BAR, 123456789.0);
    int running = 0, finals = 0;
    size_t prev = 0;
    for (char *seg = out; *seg;) {
        size_t len = strcspn(seg, "\r\n");
        char end = seg[len];
        bool is_epoch = strncmp(seg, "Epoch ", 6) == 0;
        if (is_epoch && end == '\r') {
            ck_assert_msg(len <= 59, "%zu columns: %.*s", len, (int)len, seg);
            ck_assert_msg(len >= prev, "a shorter line left %zu columns of the one before", prev - len);
            ck_assert_msg(strstr(seg, "ETA: ") && strstr(seg, "ETA: ") < seg + len, "%.*s", (int)len, seg);
            running++;
            prev = len;
        } else if (is_epoch) {
            ck_assert_int_eq(end, '\n');
            ck_assert_msg(seg > out && seg[-1] == '\r', "the final line overwrites the bar");
            finals++;
            prev = 0;
        }
        seg += len + (end ? 1 : 0);
    }
    ck_assert_int_eq(running, 4);
    ck_assert_int_eq(finals, 2);
    free(out);
}
END_TEST

/* ---- JSON ------------------------------------------------------------------------------------- */

/* The JSON lines of crafted runs: finite numbers, NaN, Inf and -Inf, a model without
 * accuracy, epochs with and without a test, an interruption with a path to escape. */
static void json_sample(FILE *out)
{
    Progress p;
    progress_init(&p, out, LOG_JSON);
    const double odd[] = { 0.25, NAN, INFINITY, -INFINITY, 1e30 };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        RunEpochInfo e = { .epoch = 1, .epochs = 1, .steps = 4, .steps_run = 4, .seconds = 0.5, .loss = odd[i],
                           .acc = 0.5, .has_acc = i % 2 == 0, .tested = i > 0, .test_loss = odd[(i + 1) % 5],
                           .test_acc = odd[i], .ranks = i == 4 ? 2 : 1, .global_batch = 8 };
        send(&p, (RunEvent){ .kind = RUN_EPOCH, .u.epoch = e });
        send(&p, (RunEvent){ .kind = RUN_FINISHED, .u.finished = { .test_loss = odd[i], .test_acc = 0.5,
                                                                   .has_acc = i % 2 == 1, .test_examples = 10 } });
    }
    send(&p, (RunEvent){ .kind = RUN_INTERRUPTED, .u.interrupted = { .step = 3, .saved = "dir \"a\"\\b\t.ckpt" } });
    send(&p, (RunEvent){ .kind = RUN_INTERRUPTED, .u.interrupted = { .step = 3, .saved = NULL } });
}

static char *json_string_of(void (*fn)(FILE *))
{
    static char *buf;   /* static: open_memstream keeps their addresses until fclose */
    static size_t len;
    buf = NULL;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    fn(f);
    fclose(f);
    return buf;
}

/* Non-finite numbers are null with their kind beside them; absent keys are numbers that
 * were not measured, never a NaN. */
START_TEST(json_nonfinite)
{
    char *out = json_string_of(json_sample);
    ck_assert_msg(strstr(out, "{\"epoch\": 1, \"epochs\": 1, \"steps\": 4, \"loss\": 0.250000, \"acc\": 0.500000, "
                              "\"seconds\": 0.500, \"ms_per_step\": 125.000}\n"), "%s", out);
    ck_assert_msg(strstr(out, "\"loss\": null, \"loss_nonfinite\": \"nan\", \"seconds\""), "%s", out);
    ck_assert_msg(strstr(out, "\"test_loss\": null, \"test_loss_nonfinite\": \"inf\""), "%s", out);
    ck_assert_msg(strstr(out, "\"loss\": null, \"loss_nonfinite\": \"-inf\""), "%s", out);
    ck_assert_msg(strstr(out, "\"test_acc\": null, \"test_acc_nonfinite\": \"inf\""), "%s", out);
    ck_assert_msg(strstr(out, "{\"test_loss\": null, \"test_loss_nonfinite\": \"nan\", \"test_acc\": 0.500000, "
                              "\"test_examples\": 10"), "%s", out);
    ck_assert_msg(strstr(out, "{\"interrupted\": true, \"step\": 3, \"checkpoint\": \"dir \\\"a\\\"\\\\b\\u0009.ckpt\"}\n"),
                  "%s", out);
    ck_assert_msg(strstr(out, "{\"interrupted\": true, \"step\": 3}\n"), "%s", out);
    ck_assert_msg(!strstr(out, "nan,") && !strstr(out, "inf,") && !strstr(out, "nan}") && !strstr(out, "inf}"), "%s", out);
    /* the model without accuracy: no acc key in its lines at all */
    char *second = strchr(out, '\n') + 1;
    second = strchr(second, '\n') + 1;   /* the second epoch line */
    ck_assert_msg(strncmp(second, "{\"epoch\"", 8) == 0 && !strstr(strtok(second, "\n"), "acc"), "%s", second);
    free(out);
}
END_TEST

/* ---- the terminal's width --------------------------------------------------------------------- */

START_TEST(terminal_width)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);   /* no terminal: $COLUMNS, else 80 */
    unsetenv("COLUMNS");
    ck_assert_int_eq(progress_term_width(fds[1]), 80);
    setenv("COLUMNS", "57", 1);
    ck_assert_int_eq(progress_term_width(fds[1]), 57);
    setenv("COLUMNS", "57x", 1);
    ck_assert_int_eq(progress_term_width(fds[1]), 80);
    setenv("COLUMNS", "0", 1);
    ck_assert_int_eq(progress_term_width(fds[1]), 80);
    close(fds[0]);
    close(fds[1]);
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(m, 0);
    ck_assert(grantpt(m) == 0 && unlockpt(m) == 0);
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    ck_assert_int_ge(s, 0);
    struct winsize ws = { .ws_row = 24, .ws_col = 100 };
    ck_assert_int_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
    setenv("COLUMNS", "57", 1);
    ck_assert_int_eq(progress_term_width(s), 100);   /* the terminal's own word first */
    ws.ws_col = 0;                                  /* a terminal that does not know */
    ck_assert_int_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
    ck_assert_int_eq(progress_term_width(s), 57);
    close(s);
    close(m);
}
END_TEST

Suite *make_progress_suite(void)
{
    Suite *s = suite_create("progress");
    TCase *tc = tcase_create("bar");
    tcase_add_test(tc, bar_fits_every_width);
    tcase_add_test(tc, eta_and_epoch_time);
    tcase_add_test(tc, not_a_terminal);
    tcase_add_test(tc, terminal_redraws);
    tcase_add_test(tc, terminal_width);
    suite_add_tcase(s, tc);
    tc = tcase_create("json");
    tcase_add_test(tc, json_nonfinite);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--json-sample") == 0) {
        json_sample(stdout);
        return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(make_progress_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
