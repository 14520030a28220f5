/* graphc bench --ablate (run/ablate.c): every configuration computes what the
 * interpreter computes (bit for bit unless a pass marked `rounds` runs, within 1e-5
 * relative then), the tables have their rows and columns, the JSON its keys, the
 * waterfall its bars; and the per-op allocation and no-reuse plans it measures.  A few
 * steps of small models: nothing here is timed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "exec/pipeline.h"
#include "graph/passes.h"
#include "run/ablate.h"
#include "tests/model_file.h"
#include "tests/testgraph.h"
#include "util/pool.h"

static Pool *pool;

/* A file of the source tree, compiled. */
static void compile_file(Compiled *c, const char *rel)
{
    const char *top = getenv("top_srcdir");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", top && *top ? top : ".", rel);
    ck_assert_msg(model_file(path, &c->src, &c->d, &c->g) == 0, "%s does not compile", path);
}

static void setup(void) { pool = pool_new(2); }
static void teardown(void) { pool_free(pool); }

/* Every pass of graph_passes is in exactly one step. */
START_TEST(steps_cover_the_passes)
{
    for (int i = 0; i < graph_npasses; i++) {
        int in = 0;
        for (int k = 0; k < ablate_nsteps; k++) {
            char names[128];
            snprintf(names, sizeof names, "%s", ablate_steps[k].passes);
            char *save = NULL;
            for (char *t = strtok_r(names, ",", &save); t; t = strtok_r(NULL, ",", &save)) in += strcmp(t, graph_passes[i].name) == 0;
        }
        ck_assert_msg(in == 1, "pass %s is in %d ablation steps", graph_passes[i].name, in);
    }
}
END_TEST

static const struct {
    const char *file;
    int64_t batch;
    bool infer;
} cases[] = {
    { "models/mlp.net", 16, false },      /* momentum: dense_backward */
    { "models/mnist.net", 4, false },     /* SGD, conv, max pool by indices, dropout, GEMM updates */
    { "models/mnist.net", 4, true },      /* a convolution with its max pool */
    { "models/resnet.net", 2, false },    /* residual adds, global pooling */
};

static Ablation *measure(const char *file, int64_t batch, bool infer, Compiled *c)
{
    compile_file(c, file);
    BenchOptions o = { .infer = infer, .steps = 3, .warmup = 1 };
    Ablation *a = calloc(1, sizeof *a);
    ck_assert_ptr_nonnull(a);
    int rc = ablate_measure(c->g, &o, batch, pool, a, &c->d);
    ck_assert_msg(rc == 0, "%s: %s", file, c->d.buf ? c->d.buf : "");
    return a;
}

/* Which step bits a configuration can have (see canonical() in run/ablate.c). */
static bool on(const AblateConfig *cf, int k) { return cf->on >> k & 1; }

START_TEST(configurations_agree_with_the_interpreter)
{
    Compiled c;
    Ablation *a = measure(cases[_i].file, cases[_i].batch, cases[_i].infer, &c);
    int n = ablate_nsteps;
    ck_assert_int_eq(a->add[0], 0);
    ck_assert_int_eq(a->cfg[0].on, 0);
    ck_assert_int_eq(a->cfg[a->add[n]].on, (1u << n) - 1);
    /* the removal of the last step (the stages) is the adding table's last but one */
    ck_assert_int_eq(a->remove[n - 1], a->add[n - 1]);
    ck_assert_int_eq(a->ncfg, 2 * n);
    for (int k = 0; k < a->ncfg; k++) {
        const AblateConfig *cf = &a->cfg[k];
        const char *f = cases[_i].file;
        ck_assert_msg(cf->same_bits || (cf->rounds && cf->max_rel <= 1e-5), "%s%s, configuration %#x: outputs differ "
                      "by %g relative%s", f, cases[_i].infer ? " --infer" : "", cf->on, cf->max_rel,
                      cf->rounds ? "" : " where no pass rounds otherwise");
        ck_assert(cf->ms > 0 && cf->ms_p25 <= cf->ms && cf->ms <= cf->ms_p75);
        ck_assert_msg(cf->peak > 0, "%s configuration %#x: peak %lld", f, cf->on, (long long)cf->peak);
        /* an arena allocates nothing per step; the interpreter and per-op allocation do */
        bool arena = on(cf, 0) && on(cf, 1);
        if (arena) ck_assert_msg(cf->allocs == 0 && cf->alloc_bytes == 0, "%s configuration %#x", f, cf->on);
        else ck_assert_msg(cf->allocs > 0 && cf->alloc_bytes > 0, "%s configuration %#x", f, cf->on);
    }
    /* without reuse the arena holds every buffer at once: more than with it, and more
     * than per-op allocation's peak */
    const AblateConfig *per_op = &a->cfg[a->add[1]], *naive = &a->cfg[a->add[2]], *reuse = &a->cfg[a->add[3]];
    ck_assert_int_gt(naive->peak, reuse->peak);
    ck_assert_int_gt(naive->peak, per_op->peak);
    ck_assert_int_ge(naive->peak, (int64_t)naive->alloc_bytes);
    free(a);
    compiled_free_all(&c);
}
END_TEST

/* The lines of a table: those after `title` up to the blank line or "sum of". */
static int table_rows(const char *text, const char *title, int *columns)
{
    const char *p = strstr(text, title);
    ck_assert_msg(p != NULL, "no table '%s' in:\n%s", title, text);
    p = strchr(p, '\n') + 1;
    ck_assert_msg(strncmp(p, "  configuration", 15) == 0, "no header under '%s'", title);
    p = strchr(p, '\n') + 1;
    int rows = 0;
    while (*p && strncmp(p, "  sum of", 8) != 0) {
        const char *e = strchr(p, '\n');
        ck_assert_ptr_nonnull(e);
        /* the label is 40 wide: count the fields after it */
        char line[512];
        size_t len = (size_t)(e - p) < sizeof line - 1 ? (size_t)(e - p) : sizeof line - 1;
        memcpy(line, p, len);
        line[len] = 0;
        ck_assert_msg(len > 43, "short row: '%s'", line);
        int fields = 0;
        char *save = NULL;
        for (char *t = strtok_r(line + 42, " ", &save); t; t = strtok_r(NULL, " ", &save)) fields++;
        columns[rows++] = fields;
        p = e + 1;
    }
    return rows;
}

START_TEST(tables_json_and_plot)
{
    Compiled c;
    Ablation *a = measure("models/mlp.net", 8, false, &c);
    int n = ablate_nsteps, cols[64];

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ablate_print(a, f, false);
    fclose(f);
    ck_assert_int_eq(table_rows(text, "adding one optimization", cols), n + 1);
    /* interpreter: ms, spread, CPU ms, faults, MB alloc, peak, "reference"; then each
     * step adds its gain and share in wall and in CPU time, and "same bits" is two
     * words */
    ck_assert_int_eq(cols[0], 7);
    for (int k = 1; k <= n; k++) ck_assert_msg(cols[k] == 12, "row %d has %d fields:\n%s", k, cols[k], text);
    ck_assert_int_eq(table_rows(text, "removing one optimization", cols), n + 1);
    for (int k = 1; k <= n; k++) ck_assert_msg(cols[k] == 12, "removal row %d has %d fields", k, cols[k]);
    ck_assert_ptr_nonnull(strstr(text, "load average"));
    free(text);

    f = open_memstream(&text, &len);
    ablate_print(a, f, true);
    fclose(f);
    static const char *keys[] = { "model", "step", "batch", "threads", "cpus", "blas", "steps", "warmup",
                                  "configurations", "load_before", "load_after", "shared_arena_bytes", "interp_ms",
                                  "compiled_ms", "gap_ms", "ratio", "interp_cpu_ms", "compiled_cpu_ms", "cpu_gap_ms",
                                  "add_sum_ms", "remove_sum_ms", "remove_sum_cpu_ms", "add", "remove" };
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        char q[64];
        snprintf(q, sizeof q, "\"%s\": ", keys[k]);
        ck_assert_msg(strstr(text, q) != NULL, "no key %s in %s", keys[k], text);
    }
    static const char *row_keys[] = { "step", "what", "ms", "ms_p25", "ms_p75", "delta_ms", "share", "cpu_ms",
                                      "cpu_delta_ms", "cpu_share", "minor_faults_per_step", "allocs_per_step", "alloc_bytes_per_step",
                                      "peak_bytes", "same_bits", "max_rel_diff", "rounds" };
    int rows = 0;
    for (const char *p = strstr(text, "\"add\": ["); (p = strstr(p + 1, "{\"step\": ")); rows++) {
        const char *end = strchr(p, '}');
        for (size_t k = 0; k < sizeof row_keys / sizeof *row_keys; k++) {
            char q[64];
            snprintf(q, sizeof q, "\"%s\": ", row_keys[k]);
            const char *at = strstr(p, q);
            ck_assert_msg(at && at < end, "row %d has no %s", rows, row_keys[k]);
        }
    }
    ck_assert_int_eq(rows, 2 * n + 1);   /* the adding table with the interpreter, the removal table */
    ck_assert_ptr_eq(strchr(text, '\n'), text + len - 1);   /* one line */
    free(text);

    char path[] = "/tmp/graphc_ablate_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(ablate_plot(a, path, &c.d), 0);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char buf[1 << 16];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    unlink(path);
    buf[got] = 0;
    ck_assert(strncmp(buf, "<?xml", 5) == 0 && strcmp(buf + got - 7, "</svg>\n") == 0);
    int bars = 0;
    for (const char *p = buf; (p = strstr(p, "<rect x=")); p++) bars++;
    ck_assert_int_eq(bars, 2 * (n + 2));   /* the interpreter, each step, the compiled plan: wall and CPU */
    ck_assert_ptr_nonnull(strstr(buf, ablate_steps[0].what));
    free(a);
    compiled_free_all(&c);
}
END_TEST

/* A plot that cannot be written is reported, naming the path. */
START_TEST(plot_error_names_the_path)
{
    Compiled c;
    Ablation *a = measure("models/mlp.net", 4, true, &c);
    ck_assert_int_ne(ablate_plot(a, "/nonexistent-dir/w.svg", &c.d), 0);
    ck_assert_ptr_nonnull(strstr(c.d.buf, "/nonexistent-dir/w.svg"));
    free(a);
    compiled_free_all(&c);
}
END_TEST

static Suite *make_ablate_suite(void)
{
    Suite *s = suite_create("ablate");
    TCase *tc = tcase_create("ablate");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, steps_cover_the_passes);
    tcase_add_loop_test(tc, configurations_agree_with_the_interpreter, 0, (int)(sizeof cases / sizeof *cases));
    tcase_add_test(tc, tables_json_and_plot);
    tcase_add_test(tc, plot_error_names_the_path);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(make_ablate_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
