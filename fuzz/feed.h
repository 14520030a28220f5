/* What graphc run does with a loaded set and a model input, for the data fuzz targets:
 * dataset_check (a refusal must say why), then batches and a slice into buffers sized
 * from the input alone (a set of another size overflows them, which ASan reports),
 * every label read back within the classes. */
#ifndef GRAPHC_FUZZ_FEED_H
#define GRAPHC_FUZZ_FEED_H
#include <stdlib.h>
#include "run/data.h"
#include "util/mem.h"

static inline void fuzz_feed(const Dataset *ds, const DataWant *want)
{
    DiagSink d;
    diag_init(&d, NULL);
    int rc = dataset_check(ds, want, &d);
    if (rc != 0 && d.nerrors == 0) abort();
    diag_free(&d);
    if (rc != 0) return;
    int32_t top = want->nclasses ? want->nclasses : ds->nclasses;
    for (int64_t i = 0; !ds->text && i < ds->count; i++)   /* the check's promise */
        if (ds->y[i] < 0 || ds->y[i] >= top) abort();
    int64_t per = 1, lp = want->y_per_example;
    for (int i = 0; i < want->x_rank; i++) per *= want->x_shape[i];
    int64_t batch = 1 + ds->count / 3;
    float *x = gc_malloc((size_t)(batch * per) * sizeof *x);
    int32_t *y = gc_malloc((size_t)(batch * lp) * sizeof *y);
    int64_t *perm = gc_malloc((size_t)ds->count * sizeof *perm), pass = -1;
    if (x && y && perm) {
        for (int64_t step = 0; step < 4; step++) {
            dataset_batch(ds, batch, step, true, 7, x, y, perm, &pass);
            for (int64_t i = 0; i < batch * lp; i++)
                if (y[i] < 0 || (top > 0 && y[i] >= top)) abort();
        }
        dataset_slice(ds, ds->count - batch, batch, x, y);
    }
    gc_free(x);
    gc_free(y);
    gc_free(perm);
}

#endif
