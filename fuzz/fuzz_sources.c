/* libFuzzer target: the data sources of run/sources.h (IDX of every type, .npy, .npz,
 * CSV, CIFAR-10, text).  The input is a recipe: its first byte chooses the format and
 * whether the file is the rest of the input as it is (any bytes) or one built valid
 * (tests/datafiles.h) from the recipe's numbers and then damaged (cut, a byte flipped,
 * hostile dims).  The set then goes through what graphc run does with it: the check
 * against a model's input (often its own shape), batches and slices into buffers
 * sized from that input alone, so a set that passes with another size overflows them
 * under ASan.  Every refusal must say why and leave nothing behind. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fuzz/feed.h"
#include "fuzz/recipe.h"
#include "run/sources.h"
#include "tests/datafiles.h"
#include "util/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { FMT_IDX, FMT_NPY, FMT_NPZ, FMT_CSV, FMT_CIFAR, FMT_TEXT, FMT_COUNT };

static uint8_t file[1 << 17];

/* A valid file of the format from the recipe's numbers; its length. */
static size_t build(int fmt, Recipe *r, bool labels)
{
    uint8_t body[4096];
    for (size_t i = 0; i < sizeof body; i++) body[i] = (uint8_t)(r->n ? r->p[i % r->n] : i);
    uint32_t count = 1 + take(r, 1) % 16, w = 1 + take(r, 1) % 8;
    switch (fmt) {
    case FMT_IDX: {
        static const int codes[6] = { 0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E };
        static const int sizes[6] = { 1, 1, 2, 4, 4, 8 };
        int k = labels ? take(r, 1) % 4 : take(r, 1) % 6;
        uint32_t dims[2] = { count, w };
        if (labels) for (uint32_t i = 0; i < count * (uint32_t)sizes[k]; i++) body[i] = i % (uint32_t)sizes[k] == (uint32_t)sizes[k] - 1 ? body[i] % 4 : 0;
        return df_idx(file, sizeof file, codes[k], labels ? 1 : 2, dims, body, (size_t)count * (labels ? 1 : w) * (size_t)sizes[k]);
    }
    case FMT_NPY: case FMT_NPZ: {
        static const char *descr[5] = { "<f4", "<f8", "|u1", "<i4", ">i8" };
        static const int sizes[5] = { 4, 8, 1, 4, 8 };
        int k = take(r, 1) % 5;
        char shape[64];
        snprintf(shape, sizeof shape, "(%u, %u)", count, w);
        if (k == 0 || k == 1) for (uint32_t i = 0; i < count * w * (uint32_t)sizes[k]; i++) if (i % (uint32_t)sizes[k] == (uint32_t)sizes[k] - 1) body[i] &= 0x3f;   /* finite */
        size_t nx = df_npy(file, sizeof file, descr[k], false, shape, body, (size_t)count * w * (size_t)sizes[k]);
        if (fmt == FMT_NPY) return nx;
        static uint8_t xs[8192], ys[1024];
        memcpy(xs, file, nx);
        int64_t y[16];
        for (uint32_t i = 0; i < count; i++) y[i] = body[i] % 4;
        snprintf(shape, sizeof shape, "(%u,)", count);
        size_t ny = df_npy(ys, sizeof ys, "<i8", false, shape, y, count * sizeof *y);
        const char *names[2] = { "x.npy", "y.npy" };
        const uint8_t *d[2] = { xs, ys };
        size_t len[2] = { nx, ny };
        bool defl[2] = { take(r, 1) & 1, take(r, 1) & 1 };
        return df_zip(file, sizeof file, 2, names, d, len, defl);
    }
    case FMT_CSV: {
        size_t n = (size_t)snprintf((char *)file, sizeof file, "a,b,label\n");
        for (uint32_t i = 0; i < count; i++)
            n += (size_t)snprintf((char *)file + n, sizeof file - n, "%d,%d.%d,%d\n", body[3 * i] - 128, body[3 * i + 1],
                                  body[3 * i + 2], body[i] % 3);
        return n;
    }
    case FMT_CIFAR: {
        uint8_t lab[16];
        for (uint32_t i = 0; i < count; i++) lab[i] = body[i] % 10;
        return df_cifar(file, sizeof file, lab, (int)(count % 4 + 1));
    }
    default: {
        size_t n = 64 + take(r, 1);
        memcpy(file, body, n);
        return n;
    }
    }
}

/* The file of the format at path: the rest of the input as it is, or built and damaged. */
static void write_file(const char *path, int fmt, bool raw, Recipe *r, bool labels)
{
    size_t n;
    if (raw) {
        n = r->n < sizeof file ? r->n : sizeof file;
        memcpy(file, r->p, n);
    } else {
        unsigned damage = take(r, 1);
        n = build(fmt, r, labels);
        size_t at = take(r, 3);
        if (damage & 1 && n) file[at % n] ^= (uint8_t)(take(r, 1) | 1);
        if (damage & 2 && n) n = at % n;
        if (damage & 4 && n > 12) memset(file + 4 + at % (n - 8), 0xff, 4);   /* a hostile field */
    }
    df_write(path, file, n);
}

/* What graphc run does with a loaded set, the model's input `want`. */
static void feed(const Dataset *ds, const DataWant *want)
{
    if (ds->count < 1 || ds->sample_size < 1 || !ds->name) abort();
    fuzz_feed(ds, want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/graphc-fuzz-src-XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    Recipe r = { data, size };
    unsigned m = take(&r, 1);
    int fmt = (int)(m % FMT_COUNT);
    bool raw = m & 0x80, own_shape = m & 0x40;
    char x[128], y[128];
    static const char *ext[FMT_COUNT] = { "idx", "npy", "npz", "csv", "", "txt" };
    snprintf(x, sizeof x, "%s/x.%s", dir, ext[fmt]);
    snprintf(y, sizeof y, "%s/y.%s", dir, ext[fmt]);
    TrainSpec t;
    memset(&t, 0, sizeof t);
    t.data_path = x;
    t.data_args.valid = 0.25f;
    t.data_args.context = 1 + take(&r, 1) % 8;
    t.data_args.label = "label";
    DataWant want = { .x_name = "x", .x_type = "f32[B, ...]", .y_name = "y", .y_type = "i32[B]", .y_per_example = 1,
                      .classes_from = "logits" };
    want.x_rank = 1 + take(&r, 1) % 3;
    for (int i = 0; i < want.x_rank; i++) want.x_shape[i] = 1 + take(&r, 1) % 8;
    want.nclasses = (int32_t)(take(&r, 1) % 12);
    switch (fmt) {
    case FMT_IDX: t.data = DATA_IDX; t.data_args.file[DFILE_LABELS] = y; break;
    case FMT_NPY: t.data = DATA_NPY; t.data_args.file[DFILE_LABELS] = y; break;
    case FMT_NPZ: t.data = DATA_NPY; break;
    case FMT_CSV: t.data = DATA_CSV; break;
    case FMT_CIFAR:
        t.data = DATA_CIFAR10;
        t.data_path = dir;
        snprintf(x, sizeof x, "%s/test_batch.bin", dir);
        break;
    default:
        t.data = DATA_TEXT;
        want.x_ids = true;
        want.y_per_example = t.data_args.context;
        want.x_rank = 1;
        want.x_shape[0] = t.data_args.context;
        break;
    }
    if (fmt == FMT_CIFAR) {
        for (int k = 1; k <= 5; k++) {
            char b[128];
            snprintf(b, sizeof b, "%s/data_batch_%d.bin", dir, k);
            write_file(b, fmt, false, &r, false);
        }
    }
    if (fmt == FMT_IDX || fmt == FMT_NPY) write_file(y, fmt, false, &r, true);
    write_file(x, fmt, raw, &r, false);
    Dataset tr, te;
    DiagSink d;
    diag_init(&d, NULL);
    if (data_source_open(&t, &want, true, &tr, &te, &d) == 0) {
        if (own_shape && fmt != FMT_TEXT) {
            want.x_rank = tr.rank;
            memcpy(want.x_shape, tr.shape, sizeof want.x_shape);
        }
        feed(&tr, &want);
        feed(&te, &want);
        dataset_free(&tr);
        dataset_free(&te);
    } else if (d.nerrors == 0 || tr.x || tr.y || te.x || te.text || tr.name) {
        abort();
    }
    diag_free(&d);
    return 0;
}
