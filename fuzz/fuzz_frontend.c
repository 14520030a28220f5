/* libFuzzer target: the whole front end (lexer, parser, lowering, shape inference) and
 * the passes after it.  Any input must give either errors or a graph that verifies
 * through autodiff, binding and the compiler's passes; a crash or a sanitizer report is
 * a bug.  Seeds: models/ and tests/errors/. */
#include <stdint.h>
#include <stdlib.h>
#include "graph/lower.h"
#include "graph/passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Source src;
    DiagSink d;
    Graph *g = NULL;
    if (size > (1u << 20) || source_from_memory(&src, "fuzz.net", data, size) != 0) return 0;
    diag_init(&d, &src);
    if (compile_source(&src, &d, NULL, &g) == 0) {
        if (graph_verify(g, &d) != 0) abort();
        Graph *t = g->train.minimize >= 0 ? pass_autodiff(g, &d) : pass_inference(g, false, &d);
        if (t) {
            if (graph_verify(t, &d) != 0) abort();
            /* binding every symbol may fail (a size that overflows): that is an error, not a crash */
            bool bound = true;
            for (int i = 0; i < t->nsyms && bound; i++) bound = graph_bind(t, t->syms[i], 2, &d) == 0;
            Graph *o = pass_optimize(t, NULL, &d);
            if (o && graph_verify(o, &d) != 0) abort();
            (void)bound;
            graph_free(o);
            graph_free(t);
        }
        graph_free(g);
    }
    diag_free(&d);
    source_free(&src);
    return 0;
}
