/* Models for the suites that compile .net text or files (test_train, test_runloop):
 * compiled from a string named "test.net" (so messages read "test.net:3:5: ...") or
 * from a file under $top_srcdir.  static inline, like testutil.h. */
#ifndef GRAPHC_TESTMODEL_H
#define GRAPHC_TESTMODEL_H
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include "graph/lower.h"

static inline const char *srcdir(void)
{
    const char *s = getenv("top_srcdir");
    return s && *s ? s : ".";
}

typedef struct Compiled {
    Source src;
    DiagSink d;
    Graph *g;
} Compiled;

static inline void compile_str(Compiled *c, const char *text)
{
    ck_assert_int_eq(source_from_string(&c->src, "test.net", text), 0);
    diag_init(&c->d, &c->src);
    int rc = compile_source(&c->src, &c->d, NULL, &c->g);
    ck_assert_msg(rc == 0, "compile failed:\n%s", c->d.buf ? c->d.buf : "");
}

static inline void compile_file(Compiled *c, const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", srcdir(), rel);
    diag_init(&c->d, NULL);
    ck_assert_msg(source_load(&c->src, path, &c->d) == 0, "%s", c->d.buf ? c->d.buf : "");
    c->d.src = &c->src;
    ck_assert_msg(compile_source(&c->src, &c->d, NULL, &c->g) == 0, "%s", c->d.buf ? c->d.buf : "");
}

static inline void compiled_free_all(Compiled *c)
{
    graph_free(c->g);
    diag_free(&c->d);
    source_free(&c->src);
}

#endif
