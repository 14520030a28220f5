/* libFuzzer target: graphc import (onnx/).  Any input is imported whole or refused
 * with a message; an imported model exports again.  Seeds: the shipped models as
 * fuzz/run.sh exports them. */
#include <stdint.h>
#include <stdlib.h>
#include "onnx/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    DiagSink d;
    diag_init(&d, NULL);
    OnnxImport im;
    int rc = onnx_import(data, size, "fuzz.onnx", "fuzz.net", &im, &d);
    if ((rc == 0) != (d.nerrors == 0)) abort();   /* a failure always says why */
    if (rc == 0) {
        uint8_t *out = NULL;
        size_t len;
        if (onnx_export(im.graph, &im.w, &out, &len, &d) != 0 && d.nerrors == 0) abort();
        gc_free(out);
        onnx_import_free(&im);
    }
    diag_free(&d);
    return 0;
}
