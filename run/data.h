/* Datasets for training and evaluation: the IDX format of MNIST (plain or gzip),
 * seeded synthetic data, and a deterministic, resumable stream of batches.
 *
 * Library code: errors go to the DiagSink, each naming the file and the field at
 * fault; nothing here prints or exits.  Every size computation is overflow-checked. */
#ifndef GRAPHC_DATA_H
#define GRAPHC_DATA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "util/diag.h"

#define IDX_MAX_RANK 4
/* A larger IDX payload is refused before anything is allocated. */
#define IDX_MAX_BYTES ((int64_t)2 << 30)

/* One IDX file: rank dims, then dims[0]*...*dims[rank-1] unsigned bytes. */
typedef struct IdxData {
    int rank;
    int64_t dims[IDX_MAX_RANK];
    int64_t size;      /* bytes in data: the product of the dims */
    uint8_t *data;
} IdxData;

/* Reads an IDX file of unsigned bytes (type 0x08), gzip-compressed or not (zlib
 * tells them apart by content, not by name).  The header is checked against the
 * decompressed length: no byte missing, none left over.  Returns 0, or -1 with a
 * message naming `path` in `d` (and *out zeroed). */
int idx_load(const char *path, IdxData *out, DiagSink *d);
void idx_free(IdxData *idx);

typedef struct Dataset {
    int64_t count;
    int rank;
    int64_t shape[4];      /* per-sample shape, e.g. {28,28,1} */
    int64_t sample_size;   /* product of shape */
    float *x;              /* count*sample_size floats scaled to [0,1] */
    int32_t *y;            /* count labels in [0, nclasses) */
    int32_t nclasses;
    char *name;            /* where the examples come from, for messages: the images file,
                            * or "synthetic data" */
    char *labels_name;     /* where the labels come from (the labels file); NULL: as name */
    const char *item;      /* what one example is, plural, for messages: "images" */
} Dataset;

/* Loads MNIST from `dir`: train-images-idx3-ubyte + train-labels-idx1-ubyte (or the
 * t10k-* pair when !train), each preferring the .gz name and falling back to the
 * uncompressed one.  Images must be rank 3, labels rank 1, counts equal, labels 0..9.
 * Pixels are scaled by 1/255 into shape {rows, cols, 1}.  Returns 0, or -1 with a
 * message in `d` and *out zeroed. */
int dataset_load_mnist(const char *dir, bool train, Dataset *out, DiagSink *d);

/* `count` seeded random samples of the given per-sample shape (rank 1..4), labels
 * uniform in [0, nclasses).  Learnable: class c has a fixed random prototype in [0,1)
 * (a pure function of seed, c and the element index, so nothing per class is stored)
 * and a sample is its prototype plus uniform noise of +-0.15, clamped to [0,1].
 * The training set (train) and the test set of one seed share the prototypes, so what
 * is learnt on one holds on the other, and draw their labels and noise apart.
 * Costs O(count * sample_size), so a huge sample with a small count is cheap.
 * Returns 0, or -1 with a message in `d` and *out zeroed. */
int dataset_synthetic(Dataset *out, int64_t count, const int64_t *shape, int rank,
                      int32_t nclasses, uint64_t seed, bool train, DiagSink *d);

/* ---- checking a set against the model it feeds ------------------------------------
 * Every data source's every set (training and test) goes through dataset_check before
 * a model sees it: the batch buffers are sized from the model's input, so a set whose
 * examples have another size would overflow them, and one of the same size but
 * another layout (27x29 for 28x28) would train on misaligned rows without a word. */

/* What the model's inputs take, in the words of its .net file, for dataset_check. */
typedef struct DataWant {
    const char *x_name, *x_type;   /* the examples' input: "image", "f32[B, 28, 28, 1]" */
    int x_rank;                    /* its shape after the batch dimension: 1..4 dims */
    int64_t x_shape[4];
    const char *y_name, *y_type;   /* the labels' input: "label", "i32[B]" */
    int64_t y_per_example;         /* labels it takes per example (1 for i32[B]) */
    int32_t nclasses;              /* the logits' last dimension; 0 when not known */
    const char *classes_from;      /* what says so, e.g. "logits 'logits' f32[B, 10]" */
} DataWant;

/* Checks `ds` against `want`: the examples' shape matches the input's (the same dims
 * once 1s are dropped, or either side one flat dimension of as many values: a
 * [B, 784] input takes 28x28x1 images, a [B, 28, 28] input too, a [B, 14, 56, 1] one
 * does not), one label per example, and every label in [0, nclasses) (in [0,
 * ds->nclasses) when the model's classes are not known).  Loaders check that there
 * are as many labels as examples (they cannot build a Dataset otherwise).  0, or -1
 * with a message naming the file, what it holds and what the input takes. */
int dataset_check(const Dataset *ds, const DataWant *want, DiagSink *d);

/* Frees and zeroes; safe on a zeroed Dataset and twice. */
void dataset_free(Dataset *ds);

/* ---- batches ---------------------------------------------------------------------
 * The stream is a sequence of passes over the data.  Pass p visits the samples in the
 * order of a permutation of [0, count): with shuffle, Fisher-Yates (i from count-1
 * down to 1, swap i with rng_below(rng_at(seed, p, i), i + 1)); without, identity.
 * Each pass yields floor(count / batch) batches, the remainder dropped (tf.data's
 * repeat().batch(b, drop_remainder=True)).  Batch number `step` counts across passes,
 * so a run resumes from any step with the same batches. */

/* floor(count / batch); 0 when batch <= 0 or batch > count. */
int64_t dataset_batches_per_pass(const Dataset *ds, int64_t batch);

/* Fills x[batch*sample_size] and y[batch] (either may be NULL) with batch number
 * `step` >= 0.  With shuffle, perm_cache holds count int64 and *perm_cache_pass the
 * pass it holds (-1 at first): a pass's permutation is computed once, on its first
 * batch.  Requires 1 <= batch <= count (and perm_cache with shuffle); otherwise
 * nothing is written. */
void dataset_batch(const Dataset *ds, int64_t batch, int64_t step, bool shuffle, uint64_t seed,
                   float *x, int32_t *y, int64_t *perm_cache, int64_t *perm_cache_pass);

/* Rows [row0, row0 + nrows) of batch number `step` of size `batch`, into x[nrows *
 * sample_size] and y[nrows]: a data-parallel rank's shard of the global batch (the
 * whole batch is row0 = 0, nrows = batch).  Same requirements as dataset_batch, and
 * 0 <= row0, row0 + nrows <= batch. */
void dataset_batch_rows(const Dataset *ds, int64_t batch, int64_t step, bool shuffle, uint64_t seed, int64_t row0,
                        int64_t nrows, float *x, int32_t *y, int64_t *perm_cache, int64_t *perm_cache_pass);

/* Copies samples [first, first+n) in order, for evaluation; the caller handles the
 * last partial batch.  n is cut to the samples left; nothing is written when first is
 * outside [0, count). */
void dataset_slice(const Dataset *ds, int64_t first, int64_t n, float *x, int32_t *y);

#endif
