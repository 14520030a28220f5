/* Helpers shared by the suites of tests/test_autodiff.c, tests/test_exec.c and
 * tests/test_training.c: the source tree, a model file of it compiled, random feeds,
 * a model's step planned on the suite's pool, and a main() that runs one suite.
 * Static inline, so a suite uses only what it needs. */
#ifndef GRAPHC_TESTTRAIN_H
#define GRAPHC_TESTTRAIN_H
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "tests/testgraph.h"
#include "tests/testutil.h"

/* The source tree: make check's top_srcdir, "." when run by hand. */
static inline const char *srcdir(void)
{
    const char *s = getenv("top_srcdir");
    return s && *s ? s : ".";
}

/* The file `rel` of the source tree, compiled into c. */
static inline void compile_file(Compiled *c, const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", srcdir(), rel);
    diag_init(&c->d, NULL);
    ck_assert_msg(source_load(&c->src, path, &c->d) == 0, "%s", c->d.buf ? c->d.buf : "");
    c->d.src = &c->src;
    ck_assert_msg(compile_source(&c->src, &c->d, NULL, &c->g) == 0, "%s", c->d.buf ? c->d.buf : "");
}

/* Random feeds for every input of a bound graph: f32 in [0,1), labels in [0, classes). */
static inline void **make_feeds(const Graph *g, int32_t classes, uint64_t seed)
{
    void **f = calloc((size_t)g->ninputs, sizeof *f);
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        int64_t cnt = shape_numel(&n->shape);
        if (n->dtype == DT_F32) {
            float *x = malloc((size_t)cnt * 4);
            for (int64_t k = 0; k < cnt; k++) x[k] = rng_unit(rng_at(seed, (uint64_t)i, (uint64_t)k));
            f[i] = x;
        } else {
            int32_t *y = malloc((size_t)cnt * 4);
            for (int64_t k = 0; k < cnt; k++) y[k] = (int32_t)rng_below(rng_at(seed, (uint64_t)i, (uint64_t)k), (uint64_t)classes);
            f[i] = y;
        }
    }
    return f;
}

static inline void free_feeds(const Graph *g, void **f)
{
    for (int i = 0; i < g->ninputs; i++) free(f[i]);
    free(f);
}

/* The model's step for `purpose` at `batch`, its weights from seed 1, compiled on the
 * suite's pool (callers set its threads first: the scratch depends on them). */
static inline void plan_at(Compiled *c, Purpose purpose, int64_t batch, Weights *w, Step *s)
{
    CompileOptions co = { .mode = MODE_COMPILED, .pool = tu_pool, .seed = 1, .verify = true };
    memset(w, 0, sizeof *w);
    ck_assert_msg(prepare(c->g, purpose, batch, &co, w, s, &c->d) == 0, "%s", c->d.buf ? c->d.buf : "");
}

/* Runs the suite s (every test in a child of its own): the exit status of main(). */
static inline int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
