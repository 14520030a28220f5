/* libFuzzer target: MNIST-shaped data sets, built so that the fields behind the headers
 * are reached.  The input is a recipe, not a file: it chooses an IDX images file and a
 * labels file (valid magic and type, counts that agree or not, ranks and dims small,
 * zero or hostile, labels in or out of range, plain or gzip, cut after the header, a
 * byte of the gzip stream flipped, data trailing) and the model input they are to feed
 * (shape and classes).  Both sets then go through what graphc run does with them:
 * dataset_load_mnist, dataset_check, batches and slices into buffers sized from the
 * model's input alone, so a set that passes the check with another size overflows
 * them under ASan.  Every refusal must say why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "fuzz/recipe.h"
#include "run/data.h"
#include "util/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    F_GZIP = 1,          /* the file gzip-compressed */
    F_CUT = 2,           /* cut somewhere after the header */
    F_HOSTILE = 4,       /* rank and dims as any 32-bit values */
    F_CORRUPT = 8,       /* one byte of the (compressed) file flipped after the header */
    F_TRAILING = 16,     /* bytes after the data */
    F_COUNT_OFF = 32,    /* the first dim is not the other file's count */
};

#define BODY_CAP (1u << 17)   /* bytes of data written at most: the rest is a cut file */

/* Writes one IDX file of unsigned bytes at path: the given rank and dims, its body
 * cycled from the recipe's bytes (taken mod label_mod when it is not 0), then the
 * flags' damage. */
static void write_idx(const char *path, Recipe *r, int rank, const uint32_t *dims, unsigned flags, unsigned label_mod)
{
    uint8_t head[4 + 4 * 8];
    size_t hn = 0;
    head[hn++] = 0;
    head[hn++] = 0;
    head[hn++] = 0x08;
    head[hn++] = (uint8_t)rank;
    for (int i = 0; i < rank && i < 8; i++) {
        head[hn++] = (uint8_t)(dims[i] >> 24);
        head[hn++] = (uint8_t)(dims[i] >> 16);
        head[hn++] = (uint8_t)(dims[i] >> 8);
        head[hn++] = (uint8_t)dims[i];
    }
    uint64_t declared = 1;
    for (int i = 0; i < rank && i < 8; i++) declared = declared * dims[i] > BODY_CAP ? BODY_CAP + 1 : declared * dims[i];
    size_t body = declared > BODY_CAP ? BODY_CAP : (size_t)declared;
    if (flags & F_CUT) body = body ? take(r, 3) % body : 0;
    size_t extra = flags & F_TRAILING ? 1 + take(r, 1) % 64 : 0;
    size_t total = hn + body + extra;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf) return;
    memcpy(buf, head, hn);
    uint8_t seed = (uint8_t)take(r, 1);
    for (size_t i = 0; i < body + extra; i++) {
        uint8_t v = (uint8_t)(r->n ? r->p[i % r->n] : seed + i);
        buf[hn + i] = label_mod ? (uint8_t)(v % label_mod) : v;
    }
    size_t flip = take(r, 3);
    unsigned mask = take(r, 1) | 1;
    FILE *f = NULL;
    if (flags & F_GZIP) {
        uLongf zn = compressBound(total) + 64;
        uint8_t *z = malloc(zn);
        gzFile gz;
        /* gzip through a real gzFile, then read back to damage it */
        if (z && (gz = gzopen(path, "wb1"))) {
            gzwrite(gz, buf, (unsigned)total);
            gzclose(gz);
            FILE *in = fopen(path, "rb");
            size_t got = in ? fread(z, 1, zn, in) : 0;
            if (in) fclose(in);
            if (flags & F_CORRUPT && got > 10) z[10 + flip % (got - 10)] ^= (uint8_t)mask;
            if (flags & F_CUT && got > 10 && (flip & 1)) got = 10 + flip % (got - 10);
            if ((f = fopen(path, "wb"))) fwrite(z, 1, got, f);
        }
        free(z);
    } else {
        if (flags & F_CORRUPT && total > hn) buf[hn + flip % (total - hn)] ^= (uint8_t)mask;
        if ((f = fopen(path, "wb"))) fwrite(buf, 1, total, f);
    }
    if (f) fclose(f);
    free(buf);
}

/* The files of one set (train or t10k) in dir, from the recipe. */
static void write_set(const char *dir, const char *set, Recipe *r)
{
    unsigned fi = take(r, 1), fl = take(r, 1);
    uint32_t count = 1 + take(r, 1) % 64, dims[8];
    int rank = 3;
    dims[0] = count;
    dims[1] = 1 + take(r, 1) % 40;
    dims[2] = 1 + take(r, 1) % 40;
    if (fi & F_HOSTILE) {
        rank = take(r, 1) % 7;   /* 0 and 5, 6 are refused */
        for (int i = 0; i < rank; i++) dims[i] = take(r, 1) & 1 ? take(r, 4) : take(r, 1);
        count = dims[0];
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, set);
    char gz[520];
    snprintf(gz, sizeof gz, "%s.gz", path);
    unlink(path);
    unlink(gz);
    write_idx(fi & F_GZIP ? gz : path, r, rank, dims, fi, 0);
    uint32_t ldims[8] = { count };
    int lrank = 1;
    if (fl & F_COUNT_OFF) ldims[0] = count + (take(r, 1) % 5) - 2;
    if (fl & F_HOSTILE) {
        lrank = take(r, 1) % 4;
        for (int i = 0; i < lrank; i++) ldims[i] = take(r, 1) & 1 ? take(r, 4) : take(r, 1);
    }
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, set);
    snprintf(gz, sizeof gz, "%s.gz", path);
    unlink(path);
    unlink(gz);
    static const unsigned mods[3] = { 10, 12, 0 };   /* labels in range, some out, any byte */
    write_idx(fl & F_GZIP ? gz : path, r, lrank, ldims, fl, mods[take(r, 1) % 3]);
}

/* What graphc run does with one loaded set: check it, then batches and slices into
 * buffers sized from the model's input only. */
static void feed(const Dataset *ds, const DataWant *want)
{
    if (ds->count < 1 || ds->rank != 3 || ds->sample_size != ds->shape[0] * ds->shape[1] || !ds->name ||
        !ds->labels_name)
        abort();
    for (int64_t i = 0; i < ds->count * ds->sample_size; i++)
        if (!(ds->x[i] >= 0.0f && ds->x[i] <= 1.0f)) abort();
    DiagSink d;
    diag_init(&d, NULL);
    if (dataset_check(ds, want, &d) != 0) {
        if (d.nerrors == 0) abort();
        diag_free(&d);
        return;
    }
    int64_t per = 1;
    for (int i = 0; i < want->x_rank; i++) per *= want->x_shape[i];
    for (int64_t i = 0; i < ds->count; i++)
        if (ds->y[i] < 0 || ds->y[i] >= (want->nclasses ? want->nclasses : ds->nclasses)) abort();
    int64_t batch = 1 + ds->count / 3;
    float *x = gc_malloc((size_t)(batch * per) * sizeof *x);
    int32_t *y = gc_malloc((size_t)batch * sizeof *y);
    int64_t *perm = gc_malloc((size_t)ds->count * sizeof *perm), pass = -1;
    if (x && y && perm) {
        for (int64_t step = 0; step < 4; step++) dataset_batch(ds, batch, step, true, 7, x, y, perm, &pass);
        dataset_slice(ds, ds->count - batch, batch, x, y);
    }
    gc_free(x);
    gc_free(y);
    gc_free(perm);
    diag_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/graphc-fuzz-data-XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    Recipe r = { data, size };
    /* the model: an example input of rank 1..4 (often the images' own shape), classes */
    unsigned m = take(&r, 1);
    DataWant want = { .x_name = "image", .x_type = "f32[B, ...]", .y_name = "label", .y_type = "i32[B]",
                      .y_per_example = 1, .classes_from = "logits" };
    want.x_rank = 1 + m % 4;
    for (int i = 0; i < want.x_rank; i++) want.x_shape[i] = 1 + take(&r, 1) % 40;
    want.nclasses = (int32_t)(take(&r, 1) % 14);
    write_set(dir, "train", &r);
    write_set(dir, "t10k", &r);
    for (int train = 0; train < 2; train++) {
        Dataset ds;
        DiagSink d;
        diag_init(&d, NULL);
        if (dataset_load_mnist(dir, train, &ds, &d) == 0) {
            /* the images' own shape, sometimes: the check then passes and the batches run */
            if (m & 0x80) {
                want.x_rank = 3;
                memcpy(want.x_shape, ds.shape, sizeof want.x_shape);
            }
            feed(&ds, &want);
            dataset_free(&ds);
        } else if (d.nerrors == 0 || ds.x || ds.y || ds.name) {
            abort();   /* a failure must say why, and leave nothing behind */
        }
        diag_free(&d);
    }
    return 0;
}
