/* libFuzzer target: the checkpoint reader, against a small fixed model (Adam: two
 * optimizer state tensors per parameter).
 *
 * Each input is read twice: as it is (so the CRC checks themselves are fuzzed), then
 * with every CRC recomputed where the input's own fields place it (fix_crcs), so that
 * a mutated count, length, role, rank, dim or value gets past the CRC to the checks
 * behind it, as it would in a file crafted on purpose.  Each version goes through the
 * four ways graphc reads a checkpoint: the forward graph (eval, predict), the training
 * graph (the C API), resuming, resuming with --reset-optimizer.
 * A refused load must say why and change no weight; an accepted one must leave only
 * finite values and a step below 2^53. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "run/train.h"
#include "graph/lower.h"
#include "exec/pipeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static Source src;
static Graph *fwd, *train;
static Weights wf, wt, before_f, before_t;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    DiagSink d;
    source_from_string(&src, "fuzz.net",
                       "input x: f32[B, 3]\ninput y: i32[B]\n"
                       "loss = cross_entropy(dense(relu(dense(x, units=4)), units=2), y)\n"
                       "train { data = synthetic(count=8)\noptimizer = adam()\nminimize = loss }\n");
    diag_init(&d, &src);
    if (compile_source(&src, &d, NULL, &fwd) != 0) abort();
    train = pipeline_base(fwd, FOR_TRAINING, 1, 0, &d);
    if (!train || weights_init(&wf, fwd, 1, &d) != 0 || weights_init(&before_f, fwd, 1, &d) != 0 ||
        weights_init(&wt, train, 1, &d) != 0 || weights_init(&before_t, train, 1, &d) != 0)
        abort();
    diag_free(&d);
    snprintf(path, sizeof path, "/tmp/graphc-fuzz-ckpt-%ld", (long)getpid());
    return 0;
}

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void put_crc(uint8_t *at, const uint8_t *from, size_t n)
{
    uint32_t c = (uint32_t)crc32(0, from, (uInt)n);
    memcpy(at, &c, 4);
}

/* Writes each CRC where the input's fields place it (docs/checkpoint.md), as far as
 * they can be followed inside the input. */
static void fix_crcs(uint8_t *b, size_t n)
{
    if (n < 36) return;
    put_crc(b + 32, b, 32);
    uint32_t nvars = rd32(b + 12);
    size_t pos = 36;
    for (uint32_t i = 0; i < nvars; i++) {
        size_t start = pos;
        if (n - pos < 4) return;
        uint32_t nl = rd32(b + pos);
        pos += 4;
        if (nl > n - pos || n - pos - nl < 8) return;
        pos += nl;
        uint32_t rank = rd32(b + pos + 4);
        pos += 8;
        if (rank > MAX_RANK) return;   /* refused before its CRC is read */
        uint64_t numel = 1;
        for (uint32_t k = 0; k < rank; k++) {
            if (n - pos < 8) return;
            uint64_t dim = rd64(b + pos);
            pos += 8;
            if (dim > n || (dim && numel > n / dim)) return;
            numel *= dim;
        }
        if (numel > (n - pos) / 4) return;
        pos += (size_t)numel * 4;
        if (n - pos < 4) return;
        put_crc(b + pos, b + start, pos - start);
        pos += 4;
    }
}

static bool same(const Weights *a, const Weights *b)
{
    for (int v = 0; v < a->n; v++)
        if (memcmp(a->data[v], b->data[v], (size_t)shape_numel(&a->shapes[v]) * 4) != 0) return false;
    return a->step == b->step;
}

static void sane(const Weights *w)
{
    if (w->step < 0 || (uint64_t)w->step > (1ull << 53)) abort();
    for (int v = 0; v < w->n; v++)
        for (int64_t i = 0; i < shape_numel(&w->shapes[v]); i++)
            if (!isfinite(w->data[v][i])) abort();
}

static void load_all_ways(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, size, f);
    fclose(f);
    for (int way = 0; way < 4; way++) {
        Weights *w = way == 0 ? &wf : &wt, *before = way == 0 ? &before_f : &before_t;
        DiagSink d;
        diag_init(&d, NULL);
        weights_copy_matching(w, before);
        w->step = before->step = 0;
        int rc = way == 0 ? checkpoint_load(path, fwd, w, &d)
                 : way == 1 ? checkpoint_load(path, train, w, &d)
                            : checkpoint_resume(path, train, w, way == 3, &d);
        if (rc != 0 && (d.nerrors == 0 || !same(w, before))) abort();
        if (rc == 0) sane(w);
        diag_free(&d);
    }
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_all_ways(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    fix_crcs(fixed, size);
    if (memcmp(fixed, data, size) != 0) load_all_ways(fixed, size);
    free(fixed);
    return 0;
}
