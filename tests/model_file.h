/* The .net file of a test program's command line (tests/onnx_run.c, tests/torch_run.c),
 * compiled: 0 with *g, *src and *d for the caller to free (graph_free, diag_free,
 * source_free); or 1 after printing the errors on stderr, nothing left to free. */
#ifndef GRAPHC_TESTS_MODEL_FILE_H
#define GRAPHC_TESTS_MODEL_FILE_H
#include <stdio.h>
#include "graph/lower.h"

static inline int model_file(const char *path, Source *src, DiagSink *d, Graph **g)
{
    *g = NULL;
    diag_init(d, NULL);
    if (source_load(src, path, d) != 0) {
        diag_flush(d, stderr);
        diag_free(d);
        return 1;
    }
    d->src = src;
    if (compile_source(src, d, NULL, g) == 0 && d->nerrors == 0) return 0;
    diag_flush(d, stderr);
    graph_free(*g);
    diag_free(d);
    source_free(src);
    return 1;
}

#endif
