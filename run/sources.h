/* The data sources of a train block (docs/language.md, "Data"): IDX files of any type,
 * NumPy .npy and .npz, CSV, CIFAR-10's binary batches, a folder of PNG files per class
 * and byte-level text, besides mnist() and synthetic() (run/data.h).
 *
 * Every loader checks what it reads against the file's own size before it allocates,
 * and refuses a bad file with a message naming the file and the field (line and
 * column for CSV); nothing here prints or exits.  A source without a test set of its
 * own holds out a fraction `valid` of its examples: example i goes to the test set
 * when floor((i + 1) * valid) > floor(i * valid), an even interleave that needs no
 * seed and takes every class of a file sorted by class; text holds out its last
 * bytes instead, since windows that overlap across the cut would leak. */
#ifndef GRAPHC_SOURCES_H
#define GRAPHC_SOURCES_H
#include "graph/graph.h"
#include "run/data.h"

/* Files larger than this are refused (CSV, text, .npy and .npz are read whole). */
#define DATA_MAX_FILE ((int64_t)1 << 30)

/* One .npy file, or the member `member` ("x" for x.npy) of a .npz archive (stored or
 * deflated; its CRC checked).  float32/float64/uint8/int8/int16/int32/int64, C order,
 * either byte order (big-endian is converted); Fortran order, object and structured
 * arrays are refused naming the header field.  0, or -1 reported. */
int npy_load(const char *path, IdxData *out, DiagSink *d);
int npz_load(const char *path, const char *member, IdxData *out, DiagSink *d);
/* Whether the archive has member `member` (.npy added); false for anything unreadable. */
bool npz_has(const char *path, const char *member);

/* Examples from an array whose first dimension is the count: floats, unsigned bytes
 * scaled by 1/255 as pixels, the other types as they are.  Labels from an array of
 * `count` integers >= 0 (shape [count] or [count, 1]; floats must be whole numbers).
 * Both 0, or -1 with a message naming `path`. */
int dataset_from_arrays(const IdxData *x, const char *xpath, const IdxData *y, const char *ypath, Dataset *out,
                        DiagSink *d);

/* A CSV file with a header row: the column `label` (integers >= 0, or names: the
 * classes are then the distinct names sorted, or those of `classes` when given), the
 * other columns the features, all numbers.  `classes_out`, when not NULL, receives
 * the names (NULL when the labels are integers; free with csv_classes_free). */
typedef struct CsvClasses {
    char **name;
    int32_t n;
} CsvClasses;
int dataset_load_csv(const char *path, const char *label, const CsvClasses *classes, Dataset *out,
                     CsvClasses *classes_out, DiagSink *d);
void csv_classes_free(CsvClasses *c);

/* CIFAR-10's binary version in `dir`: data_batch_1.bin .. data_batch_5.bin (train) or
 * test_batch.bin, records of 1 label byte (0..9) and 3072 bytes of 32x32 pixels plane
 * by plane (red, green, blue), made into 32x32x3 (HWC) floats in [0, 1]. */
int dataset_load_cifar10(const char *dir, bool train, Dataset *out, DiagSink *d);

/* A folder per class (sorted by name: the labels 0, 1, ...) of PNG (or PGM) files,
 * each of exactly h x w (no resizing), read as c channels (1: grey, 3: RGB). */
int dataset_load_images(const char *dir, int64_t h, int64_t w, int64_t c, Dataset *out, DiagSink *d);

/* Bytes [from, to) of a text file as windows of `context` bytes, `stride` apart, each
 * position labelled with the byte after it (next-byte prediction). */
int dataset_text(const char *name, const uint8_t *text, int64_t from, int64_t to, int64_t context, int64_t stride,
                 Dataset *out, DiagSink *d);

/* Splits `all` (freed) into the examples kept and those held out by `valid`. */
int dataset_split(Dataset *all, double valid, Dataset *train, Dataset *test, DiagSink *d);

/* The training and test sets of train block `t` for a model whose inputs `want`
 * describes (synthetic data and images take their shape from it).  The training set
 * only when need_train.  0, or -1 reported with both sets zeroed. */
int data_source_open(const TrainSpec *t, const DataWant *want, bool need_train, Dataset *train, Dataset *test,
                     DiagSink *d);

#endif
