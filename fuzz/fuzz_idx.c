/* libFuzzer target: the IDX reader (every element type, plain and gzip), through a file
 * as graphc reads it.  Any input: a loaded array whose size matches its header, or an error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "run/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/graphc-fuzz-idx-%ld", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    IdxData idx;
    DiagSink d;
    diag_init(&d, NULL);
    if (idx_load(path, &idx, &d) == 0) {
        int64_t n = 1;
        for (int i = 0; i < idx.rank; i++) n *= idx.dims[i];
        if (n != idx.size || idx.rank < 1 || idx.rank > IDX_MAX_RANK) abort();
        volatile uint8_t sum = 0;
        for (int64_t i = 0; i < idx.size * elem_size(idx.type); i++) sum += idx.data[i];   /* every byte readable */
        idx_free(&idx);
    } else if (d.nerrors == 0) {
        abort();   /* a failure must say why */
    }
    diag_free(&d);
    unlink(path);
    return 0;
}
