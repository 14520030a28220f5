/* libFuzzer target: the whole front end (lexer, parser, lowering, shape inference) and
 * everything after it, on any bytes as a .net file: fuzz_pipeline checks that they are
 * refused with an error, or that every stage verifies and a small training model runs
 * the same on both executors; a crash or a sanitizer report is a bug.  Seeds: models/
 * and tests/errors/.  (fuzz_modelgen generates models instead of mutating them.) */
#include <stdint.h>
#include "fuzz/pipeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size <= (1u << 20)) fuzz_pipeline((const char *)data, size, true);
    return 0;
}
