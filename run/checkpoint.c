/* Checkpoints: the format is in docs/checkpoint.md.
 *
 * Writing is atomic: the file is written beside its target under a temporary name,
 * flushed to disk, renamed over the target, and the folder is flushed, so a crash at
 * any moment leaves either the old checkpoint or the new one, never half of one.
 * Reading checks every length against the file size before reading, and a CRC-32 per
 * tensor; nothing in the weights changes unless the whole file is good. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "run/train.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checkpoint format is little-endian");

#define CKPT_MAGIC "GRAPHCKP"
#define CKPT_VERSION 1u

typedef struct Writer {
    FILE *f;
    bool err;
    uLong crc;   /* running CRC of the current tensor record */
} Writer;

static void put(Writer *w, const void *p, size_t n)
{
    if (!w->err && fwrite(p, 1, n, w->f) != n) w->err = true;
    w->crc = crc32(w->crc, p, (uInt)n);
}

static void put_u32(Writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(Writer *w, uint64_t v) { put(w, &v, 8); }

static int fsync_dir_of(const char *path)
{
    char *copy = gc_strdup(path);
    if (!copy) return -1;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    gc_free(copy);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int checkpoint_save(const char *path, const Graph *g, const Weights *wt, uint64_t seed, DiagSink *d)
{
    size_t n = strlen(path) + 16;
    char *tmp = gc_malloc(n);
    if (!tmp) { diag_plain(d, "out of memory"); return -1; }
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    Writer w = { fopen(tmp, "wb"), false, 0 };
    if (!w.f) {
        diag_plain(d, "cannot write checkpoint '%s': %s", tmp, strerror(errno));
        gc_free(tmp);
        return -1;
    }
    put(&w, CKPT_MAGIC, 8);
    put_u32(&w, CKPT_VERSION);
    put_u32(&w, (uint32_t)g->nvars);
    put_u64(&w, (uint64_t)wt->step);
    put_u64(&w, seed);
    put_u32(&w, (uint32_t)w.crc);
    for (int i = 0; i < g->nvars; i++) {
        const Var *v = &g->vars[i];
        w.crc = 0;
        uint32_t len = (uint32_t)strlen(v->name);
        put_u32(&w, len);
        put(&w, v->name, len);
        put_u32(&w, (uint32_t)v->role);
        put_u32(&w, (uint32_t)v->shape.rank);
        for (int k = 0; k < v->shape.rank; k++) put_u64(&w, (uint64_t)v->shape.d[k].v);
        put(&w, wt->data[i], (size_t)shape_numel(&v->shape) * sizeof(float));
        put_u32(&w, (uint32_t)w.crc);
    }
    put(&w, "END.", 4);
    int rc = 0;
    if (w.err || fflush(w.f) != 0 || fsync(fileno(w.f)) != 0) rc = -1;
    if (fclose(w.f) != 0) rc = -1;
    if (rc == 0 && rename(tmp, path) != 0) rc = -1;
    if (rc != 0) {
        diag_plain(d, "cannot write checkpoint '%s': %s", path, strerror(errno));
        remove(tmp);
    } else {
        fsync_dir_of(path);
    }
    gc_free(tmp);
    return rc;
}

typedef struct Reader {
    const unsigned char *p;
    size_t len, pos;
    uLong crc;
} Reader;

static bool get(Reader *r, void *out, size_t n)
{
    if (n > r->len - r->pos) return false;
    memcpy(out, r->p + r->pos, n);
    r->crc = crc32(r->crc, r->p + r->pos, (uInt)n);
    r->pos += n;
    return true;
}

int checkpoint_load(const char *path, const Graph *g, Weights *wt, DiagSink *d)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        diag_plain(d, "cannot open checkpoint '%s': %s", path, strerror(errno));
        return -1;
    }
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            unsigned char *nb = gc_realloc(buf, cap);
            if (!nb) { gc_free(buf); fclose(f); diag_plain(d, "%s: out of memory", path); return -1; }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    Reader r = { buf, len, 0, 0 };
    float **staged = gc_calloc((size_t)(g->nvars ? g->nvars : 1), sizeof *staged);
    int rc = -1;
    char magic[8];
    uint32_t version, nvars, hcrc;
    uint64_t step, seed;
    if (!staged) { diag_plain(d, "out of memory"); goto out; }
    if (!get(&r, magic, 8) || memcmp(magic, CKPT_MAGIC, 8) != 0) {
        diag_plain(d, "%s: not a graphc checkpoint (bad magic)", path);
        goto out;
    }
    if (!get(&r, &version, 4) || version != CKPT_VERSION) {
        diag_plain(d, "%s: checkpoint version %u; this graphc reads version %u", path, version, CKPT_VERSION);
        goto out;
    }
    if (!get(&r, &nvars, 4) || !get(&r, &step, 8) || !get(&r, &seed, 8)) {
        diag_plain(d, "%s: truncated header", path);
        goto out;
    }
    uLong want = r.crc;
    if (!get(&r, &hcrc, 4) || hcrc != (uint32_t)want) {
        diag_plain(d, "%s: header checksum mismatch (the file is damaged)", path);
        goto out;
    }
    for (uint32_t i = 0; i < nvars; i++) {
        r.crc = 0;
        uint32_t nl, role, rank;
        char name[512];
        if (!get(&r, &nl, 4) || nl >= sizeof name || !get(&r, name, nl)) {
            diag_plain(d, "%s: tensor %u: truncated or bad name", path, i);
            goto out;
        }
        name[nl] = 0;
        if (!get(&r, &role, 4) || !get(&r, &rank, 4) || rank > MAX_RANK) {
            diag_plain(d, "%s: tensor '%s': truncated or bad rank", path, name);
            goto out;
        }
        Shape s = { (int)rank, { { 0, -1 } } };
        int64_t numel = 1;
        for (uint32_t k = 0; k < rank; k++) {
            uint64_t dim;
            if (!get(&r, &dim, 8) || dim == 0 || dim > (1ull << 40) || !gc_mul_i64(numel, (int64_t)dim, &numel)) {
                diag_plain(d, "%s: tensor '%s': truncated or bad dimension %u", path, name, k);
                goto out;
            }
            s.d[k] = (Dim){ (int64_t)dim, -1 };
        }
        size_t bytes = (size_t)numel * sizeof(float);
        if (bytes > r.len - r.pos) {
            diag_plain(d, "%s: tensor '%s': truncated: needs %zu bytes of data, %zu left", path, name, bytes, r.len - r.pos);
            goto out;
        }
        const unsigned char *data = r.p + r.pos;
        r.crc = crc32(r.crc, data, (uInt)bytes);
        r.pos += bytes;
        uLong crc = r.crc;
        uint32_t stored;
        if (!get(&r, &stored, 4)) { diag_plain(d, "%s: tensor '%s': truncated checksum", path, name); goto out; }
        if (stored != (uint32_t)crc) {
            diag_plain(d, "%s: tensor '%s': checksum mismatch (the file is damaged)", path, name);
            goto out;
        }
        int v = -1;
        for (int k = 0; k < g->nvars; k++)
            if (strcmp(g->vars[k].name, name) == 0) v = k;
        if (v < 0) continue;   /* e.g. optimizer state when only evaluating */
        if (!shape_eq(&s, &g->vars[v].shape)) {
            char b1[128], b2[128];
            diag_plain(d, "%s: tensor '%s' has shape %s, the model needs %s", path, name, shape_str(g, &s, b1, sizeof b1),
                       shape_str(g, &g->vars[v].shape, b2, sizeof b2));
            goto out;
        }
        staged[v] = (float *)data;
    }
    char end[4];
    if (!get(&r, end, 4) || memcmp(end, "END.", 4) != 0 || r.pos != r.len) {
        diag_plain(d, "%s: %s after the last tensor", path, r.pos > r.len - 4 ? "missing end marker" : "unexpected bytes");
        goto out;
    }
    /* optimizer state may be missing (evaluation); a buffer (batch norm's running
     * statistics) is the model's as a parameter is */
    for (int k = 0; k < g->nvars; k++)
        if (!staged[k] && g->vars[k].role != VAR_STATE) {
            diag_plain(d, "%s: the checkpoint has no tensor '%s' that the model needs", path, g->vars[k].name);
            goto out;
        }
    for (int k = 0; k < g->nvars; k++)
        if (staged[k]) memcpy(wt->data[k], staged[k], (size_t)shape_numel(&g->vars[k].shape) * sizeof(float));
    wt->step = (int64_t)step;
    (void)seed;
    rc = 0;
out:
    gc_free(staged);
    gc_free(buf);
    return rc;
}

int checkpoint_seed(const char *path, uint64_t *seed, DiagSink *d)
{
    unsigned char head[40];
    FILE *f = fopen(path, "rb");
    if (!f) {
        diag_plain(d, "cannot open checkpoint '%s': %s", path, strerror(errno));
        return -1;
    }
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (n < 36 || memcmp(head, CKPT_MAGIC, 8) != 0) {
        diag_plain(d, "%s: not a graphc checkpoint (bad magic)", path);
        return -1;
    }
    memcpy(seed, head + 24, 8);
    return 0;
}
