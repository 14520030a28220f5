/* libFuzzer target: the whole front end (lexer, parser, lowering, shape inference) and
 * the passes after it.  Any input must give either errors or a graph that verifies
 * through autodiff, binding and the compiler's passes; a crash or a sanitizer report is
 * a bug.  Seeds: models/ and tests/errors/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "graph/lower.h"

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
        /* the whole pipeline at batch 2, verified after every pass, up to the memory
         * plan: a failure must be an error (a size that overflows), never a verifier's */
        CompileOptions co = { .mode = MODE_COMPILED, .threads = 2, .verify = true };
        Step s;
        if (prepare(g, g->train.minimize >= 0 ? FOR_TRAINING : FOR_INFERENCE, 2, &co, NULL, &s, &d) != 0 &&
            d.buf && strstr(d.buf, "verifier:"))
            abort();
        step_free(&s);
        graph_free(g);
    }
    diag_free(&d);
    source_free(&src);
    return 0;
}
