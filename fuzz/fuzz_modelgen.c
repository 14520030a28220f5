/* libFuzzer target: the structure-aware one.  Its input is not a model but the choice
 * bytes of fuzz/modelgen.c, which turns any of them into a valid-looking model (deep
 * nesting, huge and zero dimensions, every builtin and train setting, several inputs
 * and outputs); the model then goes through fuzz_pipeline: every stage, verified, and
 * a step on both executors, which must agree.  fuzz_frontend mutates model text
 * instead. */
#include <stdint.h>
#include <stdlib.h>
#include "fuzz/modelgen.h"
#include "fuzz/pipeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len;
    char *text = modelgen(data, size, &len);
    if (text) fuzz_pipeline(text, len, true);
    free(text);
    return 0;
}
