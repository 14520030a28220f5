/* Helpers shared by the Check suites that compile .net text and run it (test_exec,
 * test_bench): a model compiled from a string, freed at once, and the passes to turn
 * off for the compiled plan to give the interpreter's bits.  Static inline, so a suite
 * uses only what it needs. */
#ifndef GRAPHC_TESTGRAPH_H
#define GRAPHC_TESTGRAPH_H
#include <check.h>
#include "graph/lower.h"
#include "graph/passes.h"

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

static inline void compiled_free_all(Compiled *c)
{
    graph_free(c->g);
    diag_free(&c->d);
    source_free(&c->src);
}

/* The passes that round otherwise than the ops apart (the gradient GEMMs fused into
 * their updates): off, the compiled plan gives the interpreter's bits. */
static inline uint64_t rounding_passes(void)
{
    uint64_t off = 0;
    for (int i = 0; i < graph_npasses; i++)
        if (graph_passes[i].rounds) off |= (uint64_t)1 << i;
    return off;
}

#endif
