/* Checkpoints: the format is in docs/checkpoint.md.
 *
 * Writing goes through util/outfile.h: atomic (a crash leaves the old checkpoint or
 * the new one), through a symlink to its target, never over a FIFO or a device.
 *
 * Reading trusts nothing in the file.  It goes record by record through the stream,
 * and every integer is range-checked before it is used: the header's counts against
 * the model, a record's name length, rank and dims before its data is read, and the
 * data's declared size against what is left of the file (of a regular file) or of the
 * most bytes a checkpoint of this model can hold (of a pipe or a device), so a stream
 * that never ends (/dev/zero, a FIFO) is refused after at most that many bytes and
 * memory never grows past the model's own size.  A record's CRC is checked before its
 * fields are compared with the model's, so a damaged file is called damaged.  Nothing
 * in the weights changes unless the whole file is good. */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include "run/train.h"
#include "util/outfile.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checkpoint format is little-endian");

#define CKPT_MAGIC "GRAPHCKP"
#define CKPT_VERSION 1u
#define DIM_MAX (1ull << 40)
/* No run takes more steps, and step + 1 and (double)step stay exact below it. */
#define STEP_MAX (1ull << 53)

enum {
    HEADER_BYTES = 36,     /* magic, version, nvars, step, seed, header_crc */
    NAME_LIMIT = 512,      /* a name has fewer bytes */
    /* name_len, the longest name, role, rank, dims, crc: all of a record but its data */
    RECORD_MAX_OVERHEAD = 4 + (NAME_LIMIT - 1) + 4 + 4 + 8 * MAX_RANK + 4,
    /* the most optimizer state vars one parameter has in any optimizer graphc knows
     * (RMSprop centered with momentum; graph_state_vars): a checkpoint read by a graph
     * without them may hold that many per parameter */
    MAX_STATE_PER_PARAM = OPTIM_MAX_STATE,
};

/* zlib's crc32 takes a 32-bit length: longer buffers go in pieces. */
static uLong crc_of(uLong crc, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
        crc = crc32(crc, b, k);
        b += k;
        n -= k;
    }
    return crc;
}

/* ---- writing ------------------------------------------------------------------------- */

typedef struct Writer {
    FILE *f;
    bool err;    /* a write failed: write no more */
    uLong crc;   /* running CRC of the current record */
} Writer;

static void put(Writer *w, const void *p, size_t n)
{
    if (!w->err && fwrite(p, 1, n, w->f) != n) w->err = true;
    w->crc = crc_of(w->crc, p, n);
}

static void put_u32(Writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(Writer *w, uint64_t v) { put(w, &v, 8); }

int checkpoint_save(const char *path, const Graph *g, const Weights *wt, uint64_t seed, DiagSink *d)
{
    for (int i = 0; i < g->nvars; i++)
        if (strlen(g->vars[i].name) >= NAME_LIMIT) {
            diag_plain(d, "cannot write checkpoint '%s': the name of tensor '%.40s...' has %zu bytes, more than a "
                       "checkpoint holds (%d)", path, g->vars[i].name, strlen(g->vars[i].name), NAME_LIMIT - 1);
            return -1;
        }
    OutFile of;
    Writer w = { outfile_open(&of, path, "checkpoint", d), false, 0 };
    if (!w.f) return -1;
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
    /* a failed fwrite left the stream's error set: outfile_commit reports it */
    return outfile_commit(&of, d);
}

/* ---- reading ------------------------------------------------------------------------- */

typedef struct Reader {
    FILE *f;
    const char *path;
    bool regular;
    uint64_t pos;          /* bytes read */
    uint64_t size;         /* a regular file's size, else UINT64_MAX */
    uint64_t limit;        /* the most that may be read: size, or less (model_bounds) */
    bool over;             /* a get() stopped at the limit, short of the size */
    uLong crc;             /* running CRC of the current record */
    int ioerr;             /* errno of a read error, or 0 */
    DiagSink *d;
} Reader;

/* Reads n bytes into out (NULL: reads and drops them) and into the running CRC.  false
 * at the end of the stream, on a read error, or past the limit. */
static bool get(Reader *r, void *out, size_t n)
{
    if (n > r->limit - r->pos) {
        r->over = n <= r->size - r->pos;
        return false;
    }
    unsigned char scratch[16384], *o = out;
    while (n > 0) {
        size_t k = o ? n : n < sizeof scratch ? n : sizeof scratch;
        unsigned char *dst = o ? o : scratch;
        size_t got = fread(dst, 1, k, r->f);
        r->crc = crc_of(r->crc, dst, got);
        r->pos += got;
        if (got < k) {
            if (ferror(r->f)) r->ioerr = errno ? errno : EIO;
            return false;
        }
        n -= k;
        if (o) o += k;
    }
    return true;
}

static void fail(Reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(Reader *r, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_plain(r->d, "%s: %s", r->path, msg);
}

/* The message for a get() that came back short, reading `field`. */
static void fail_short(Reader *r, const char *field)
{
    if (r->ioerr) fail(r, "%s: read error: %s", field, strerror(r->ioerr));
    else if (r->over)
        fail(r, "%s: the file goes on past %llu bytes, more than a checkpoint of this model can hold", field,
             (unsigned long long)r->limit);
    else fail(r, "%s: truncated (the file ends after %llu bytes)", field,
              (unsigned long long)(r->regular ? r->size : r->pos));
}

static bool get_u32(Reader *r, uint32_t *v, const char *field)
{
    if (get(r, v, 4)) return true;
    fail_short(r, field);
    return false;
}

static bool get_u64(Reader *r, uint64_t *v, const char *field)
{
    if (get(r, v, 8)) return true;
    fail_short(r, field);
    return false;
}

/* Opens the stream.  A folder is refused; the limit is a regular file's size, else
 * none until the header is read (load then lowers it to what the model can need). */
static int reader_open(Reader *r, const char *path, DiagSink *d)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    r->d = d;
    r->size = UINT64_MAX;
    r->f = fopen(path, "rb");
    struct stat st;
    if (!r->f || fstat(fileno(r->f), &st) != 0) {
        diag_plain(d, "cannot open checkpoint '%s': %s", path, strerror(errno));
        if (r->f) fclose(r->f);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        diag_plain(d, "cannot open checkpoint '%s': %s", path, strerror(EISDIR));
        fclose(r->f);
        return -1;
    }
    r->regular = S_ISREG(st.st_mode);
    if (r->regular) r->size = (uint64_t)st.st_size;
    r->limit = r->size;
    return 0;
}

typedef struct Header {
    uint32_t nvars;
    uint64_t step, seed;
} Header;

/* The magic first (so a stream of anything else is refused after 8 bytes), the
 * version, the CRC, then the step's range. */
static int read_header(Reader *r, Header *h)
{
    char magic[8];
    uint32_t version, hcrc;
    if (!get(r, magic, 8) || memcmp(magic, CKPT_MAGIC, 8) != 0) {
        if (r->ioerr) fail_short(r, "header");
        else fail(r, "not a graphc checkpoint (bad magic)");
        return -1;
    }
    if (!get_u32(r, &version, "header: version")) return -1;
    if (version != CKPT_VERSION) {
        fail(r, "checkpoint version %u; this graphc reads version %u", version, CKPT_VERSION);
        return -1;
    }
    if (!get_u32(r, &h->nvars, "header: tensor count") || !get_u64(r, &h->step, "header: step") ||
        !get_u64(r, &h->seed, "header: seed"))
        return -1;
    uLong want = r->crc;
    if (!get_u32(r, &hcrc, "header: checksum")) return -1;
    if (hcrc != (uint32_t)want) {
        fail(r, "header checksum mismatch (the file is damaged)");
        return -1;
    }
    if (h->step > STEP_MAX) {
        fail(r, "header: step %llu is out of range (at most 2^53)", (unsigned long long)h->step);
        return -1;
    }
    return 0;
}

/* What a load does with g's optimizer state. */
typedef enum StateMode {
    STATE_IF_THERE,   /* loaded when the file has it (all of it, or none) */
    STATE_NEEDED,     /* the file must have it */
    STATE_RESET,      /* zero, whatever the file has */
    STATE_MODE_COUNT
} StateMode;

/* What a load has read so far. */
typedef struct Load {
    const Graph *g;
    StateMode mode;
    Reader r;
    float **staged;        /* per var of g: its data from the file, or NULL */
    bool *seen;            /* per var of g: a record of it was read */
    int *nstate;           /* per var of g: optimizer state records of it read */
    int *max_state;        /* per var of g: how many it may have */
    int nextra;            /* optimizer state records of vars g does not have */
    char first_extra[NAME_LIMIT];
    char **extra;          /* their names (to find one twice) */
} Load;

/* The most records and bytes a checkpoint of g can hold: a record per var of g, and
 * per parameter as many optimizer state records as g has for it or MAX_STATE_PER_PARAM,
 * whichever is more (state of another optimizer, or read by a graph without state),
 * each the size of its parameter. */
static void model_bounds(Load *L, uint64_t *records, uint64_t *bytes)
{
    const Graph *g = L->g;
    *records = 0;
    *bytes = HEADER_BYTES + 4;
    for (int v = 0; v < g->nvars; v++) {
        const Var *var = &g->vars[v];
        if (var->role == VAR_STATE && var->of >= 0 && var->of < g->nvars) L->max_state[var->of]++;
    }
    for (int v = 0; v < g->nvars; v++) {
        uint64_t rec = RECORD_MAX_OVERHEAD + 4 * (uint64_t)shape_numel(&g->vars[v].shape);
        uint64_t copies = 1;
        if (g->vars[v].role == VAR_PARAM) {
            if (L->max_state[v] < MAX_STATE_PER_PARAM) L->max_state[v] = MAX_STATE_PER_PARAM;
            copies += (uint64_t)L->max_state[v];
        } else if (g->vars[v].role == VAR_STATE) {
            copies = 0;   /* counted with its parameter */
        }
        *records += copies;
        *bytes += copies * rec;
    }
}

static int find_var(const Graph *g, const char *name, VarRole role)
{
    for (int k = 0; k < g->nvars; k++)
        if (g->vars[k].role == role && strcmp(g->vars[k].name, name) == 0) return k;
    return -1;
}

/* The parameter of g that state var `name` (PARAM:SUFFIX) belongs to, or -1. */
static int param_of(const Graph *g, const char *name)
{
    const char *colon = strrchr(name, ':');
    if (!colon || colon == name || !colon[1]) return -1;
    for (int k = 0; k < g->nvars; k++)
        if (g->vars[k].role == VAR_PARAM && strncmp(g->vars[k].name, name, (size_t)(colon - name)) == 0 &&
            g->vars[k].name[colon - name] == 0)
            return k;
    return -1;
}

/* Record `name` of shape s is var v of the model (or, v < 0, state of parameter p),
 * whose shape differs. */
static void fail_shape(Load *L, const char *name, const Shape *s, int v, int p)
{
    const Graph *g = L->g;
    char b1[128], b2[128];
    shape_str(g, s, b1, sizeof b1);
    shape_str(g, &g->vars[v >= 0 ? v : p].shape, b2, sizeof b2);
    if (v >= 0) fail(&L->r, "tensor '%s' has shape %s, the model needs %s", name, b1, b2);
    else fail(&L->r, "tensor '%s' has shape %s, its parameter '%s' has %s", name, b1, g->vars[p].name, b2);
}

static const char *role_name(uint32_t role)
{
    return role == VAR_PARAM ? "a parameter" : role == VAR_STATE ? "optimizer state" : "a buffer";
}

/* A record's name: printable UTF-8, no NUL (a NUL would cut it short where it is
 * compared with the model's names). */
static bool name_ok(const char *s, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return false;
    return utf8_valid_prefix(s, n) == n;
}

/* Reads record i's name, role and shape.  0 or -1. */
static int read_record_head(Load *L, uint32_t i, char *name, uint32_t *role, Shape *s, uint64_t *bytes)
{
    Reader *r = &L->r;
    char field[NAME_LIMIT + 64];
    uint32_t nl, rank;
    snprintf(field, sizeof field, "tensor %u: name length", i);
    if (!get_u32(r, &nl, field)) return -1;
    if (nl == 0 || nl >= NAME_LIMIT) {
        fail(r, "tensor %u: name length %u (from 1 to %d)", i, nl, NAME_LIMIT - 1);
        return -1;
    }
    snprintf(field, sizeof field, "tensor %u: name", i);
    if (!get(r, name, nl)) {
        fail_short(r, field);
        return -1;
    }
    name[nl] = 0;
    if (!name_ok(name, nl)) {
        fail(r, "tensor %u: the name holds a NUL, a control character or invalid UTF-8", i);
        return -1;
    }
    snprintf(field, sizeof field, "tensor '%s': role", name);
    if (!get_u32(r, role, field)) return -1;
    snprintf(field, sizeof field, "tensor '%s': rank", name);
    if (!get_u32(r, &rank, field)) return -1;
    if (rank > MAX_RANK) {
        fail(r, "tensor '%s': rank %u (at most %d)", name, rank, MAX_RANK);
        return -1;
    }
    *s = (Shape){ (int)rank, { { 0, -1 } } };
    int64_t numel = 1;
    for (uint32_t k = 0; k < rank; k++) {
        uint64_t dim;
        snprintf(field, sizeof field, "tensor '%s': dimension %u", name, k);
        if (!get_u64(r, &dim, field)) return -1;
        if (dim == 0 || dim > DIM_MAX || !gc_mul_i64(numel, (int64_t)dim, &numel) || numel > INT64_MAX / 4) {
            fail(r, "tensor '%s': dimension %u is %llu (each from 1 to 2^40, the product below 2^61)", name, k,
                 (unsigned long long)dim);
            return -1;
        }
        s->d[k] = (Dim){ (int64_t)dim, -1 };
    }
    *bytes = (uint64_t)numel * sizeof(float);
    return 0;
}

/* Checks a record whose CRC was good against the model, and notes it.  0 or -1. */
static int check_record(Load *L, const char *name, uint32_t role, const Shape *s, int v)
{
    Reader *r = &L->r;
    const Graph *g = L->g;
    if (role >= VAR_ROLE_COUNT) {
        fail(r, "tensor '%s': role %u (0 parameter, 1 optimizer state, 2 buffer)", name, role);
        return -1;
    }
    for (uint32_t o = 0; v < 0 && o < VAR_ROLE_COUNT; o++)
        if (o != role && find_var(g, name, (VarRole)o) >= 0) {
            fail(r, "tensor '%s' is stored as %s; the model has it as %s", name, role_name(role), role_name(o));
            return -1;
        }
    if (v >= 0 && L->seen[v]) {
        fail(r, "tensor '%s' appears twice", name);
        return -1;
    }
    int p = v >= 0 ? (role == VAR_STATE ? g->vars[v].of : -1) : role == VAR_STATE ? param_of(g, name) : -1;
    if (v < 0 && role != VAR_STATE) {
        fail(r, "tensor '%s' is not %s of this model (a checkpoint of another model?)", name, role_name(role));
        return -1;
    }
    if (v < 0 && p < 0) {
        fail(r, "tensor '%s' is optimizer state of no parameter of this model", name);
        return -1;
    }
    if (!shape_eq(s, &g->vars[v >= 0 ? v : p].shape)) {
        fail_shape(L, name, s, v, p);
        return -1;
    }
    for (int k = 0; v < 0 && k < L->nextra; k++)
        if (strcmp(L->extra[k], name) == 0) {
            fail(r, "tensor '%s' appears twice", name);
            return -1;
        }
    if (p >= 0 && L->nstate[p]++ == L->max_state[p]) {
        fail(r, "tensor '%s': parameter '%s' has more optimizer state tensors than an optimizer keeps (%d)", name,
             g->vars[p].name, L->max_state[p]);
        return -1;
    }
    if (v < 0) {
        L->extra[L->nextra] = gc_strdup(name);
        if (!L->extra[L->nextra]) {
            diag_plain(r->d, "out of memory");
            return -1;
        }
        if (L->nextra++ == 0) snprintf(L->first_extra, sizeof L->first_extra, "%s", name);
    } else {
        L->seen[v] = true;
    }
    return 0;
}

/* Reads record i: its head, its data (into the staging buffer of the model's var of
 * that name and shape, else dropped), its CRC, then checks it.  0 or -1. */
static int read_record(Load *L, uint32_t i)
{
    Reader *r = &L->r;
    char name[NAME_LIMIT];
    uint32_t role;
    Shape s;
    uint64_t bytes;
    r->crc = 0;
    if (read_record_head(L, i, name, &role, &s, &bytes) != 0) return -1;
    int v = role < VAR_ROLE_COUNT ? find_var(L->g, name, (VarRole)role) : -1;
    if (bytes > r->limit - r->pos) {
        /* not read: its shape (not checked against its CRC) is the best account */
        if (bytes > r->size - r->pos)
            fail(r, "tensor '%s': truncated: needs %llu bytes of data, %llu left", name, (unsigned long long)bytes,
                 (unsigned long long)(r->size - r->pos));
        else if (v >= 0 && !shape_eq(&s, &L->g->vars[v].shape))
            fail_shape(L, name, &s, v, -1);
        else
            fail(r, "tensor '%s': %llu bytes of data, more than a checkpoint of this model can hold", name,
                 (unsigned long long)bytes);
        return -1;
    }
    float *dst = NULL;   /* NULL: the data is checked and dropped */
    bool wanted = v >= 0 && !(role == VAR_STATE && L->mode == STATE_RESET);
    if (wanted && !L->staged[v] && shape_eq(&s, &L->g->vars[v].shape)) {
        dst = L->staged[v] = gc_malloc((size_t)bytes ? (size_t)bytes : 1);
        if (!dst) {
            diag_plain(r->d, "%s: out of memory for tensor '%s' (%llu bytes)", r->path, name, (unsigned long long)bytes);
            return -1;
        }
    }
    char field[NAME_LIMIT + 32];
    snprintf(field, sizeof field, "tensor '%s': data", name);
    if (!get(r, dst, (size_t)bytes)) {
        fail_short(r, field);
        return -1;
    }
    uLong crc = r->crc;
    uint32_t stored;
    snprintf(field, sizeof field, "tensor '%s': checksum", name);
    if (!get_u32(r, &stored, field)) return -1;
    if (stored != (uint32_t)crc) {
        fail(r, "tensor '%s': checksum mismatch (the file is damaged)", name);
        return -1;
    }
    /* a NaN or an infinity is no weight: the checkpoint of a run that diverged */
    for (uint64_t k = 0; dst && k < bytes / sizeof(float); k++)
        if (!isfinite(dst[k])) {
            fail(r, "tensor '%s': element %llu is %s (the checkpoint of a run that diverged?)", name,
                 (unsigned long long)k, isnan(dst[k]) ? "NaN" : "infinite");
            return -1;
        }
    return check_record(L, name, role, &s, v);
}

/* After the last record: the end marker, then nothing. */
static int read_end(Reader *r)
{
    char end[4];
    if (!get(r, end, 4)) {
        if (r->ioerr || r->over) fail_short(r, "end marker");
        else fail(r, "missing end marker after the last tensor");
        return -1;
    }
    if (memcmp(end, "END.", 4) != 0 || fgetc(r->f) != EOF) {
        fail(r, "unexpected bytes after the last tensor");
        return -1;
    }
    return 0;
}

/* Every parameter of g is there; its optimizer state is all there, or all absent (a
 * part of it would be a damaged file) where the mode allows. */
static int check_complete(Load *L)
{
    StateMode mode = L->mode;
    const Graph *g = L->g;
    int missing = 0, present = 0;
    char first[3][NAME_LIMIT];
    for (int k = 0; k < g->nvars; k++) {
        if (g->vars[k].role != VAR_STATE && !L->seen[k]) {   /* a parameter or a buffer */
            fail(&L->r, "the checkpoint has no tensor '%s' that the model needs", g->vars[k].name);
            return -1;
        }
        if (g->vars[k].role != VAR_STATE) continue;
        if (L->seen[k]) present++;
        else if (missing++ < 3) snprintf(first[missing - 1], NAME_LIMIT, "%s", g->vars[k].name);
    }
    if (missing == 0 || mode == STATE_RESET || (mode == STATE_IF_THERE && present == 0)) return 0;
    char list[3 * NAME_LIMIT + 16];
    snprintf(list, sizeof list, "'%s'%s%s%s%s%s%s", first[0], missing > 1 ? ", '" : "", missing > 1 ? first[1] : "",
             missing > 1 ? "'" : "", missing > 2 ? ", '" : "", missing > 2 ? first[2] : "",
             missing > 3 ? "', ..." : missing > 2 ? "'" : "");
    if (present > 0)
        fail(&L->r, "the checkpoint holds only part of the optimizer state: %d of %d tensors missing (%s); the file is "
             "damaged, or its optimizer kept other state (rmsprop without momentum= or centered=)", missing,
             missing + present, list);
    else
        fail(&L->r, "the checkpoint has no optimizer state for this run: %d tensor%s missing (%s)%s%s%s; resuming would "
             "restart the optimizer from zero (graphc run --reset-optimizer does so on purpose)", missing,
             missing == 1 ? "" : "s", list, L->nextra ? "; it holds another optimizer's state ('" : "",
             L->nextra ? L->first_extra : "", L->nextra ? "', ...)" : "");
    return -1;
}

static int load(const char *path, const Graph *g, Weights *wt, StateMode mode, DiagSink *d)
{
    Load L = { .g = g, .mode = mode };
    Header h;
    int rc = -1;
    size_t n = (size_t)(g->nvars ? g->nvars : 1);
    if (reader_open(&L.r, path, d) != 0) return -1;
    L.staged = gc_calloc(n, sizeof *L.staged);
    L.seen = gc_calloc(n, sizeof *L.seen);
    L.nstate = gc_calloc(n, sizeof *L.nstate);
    L.max_state = gc_calloc(n, sizeof *L.max_state);
    if (!L.staged || !L.seen || !L.nstate || !L.max_state) {
        diag_plain(d, "out of memory");
        goto out;
    }
    uint64_t max_records, max_bytes;
    model_bounds(&L, &max_records, &max_bytes);
    L.extra = gc_calloc((size_t)max_records + 1, sizeof *L.extra);
    if (!L.extra) {
        diag_plain(d, "out of memory");
        goto out;
    }
    if (read_header(&L.r, &h) != 0) goto out;
    if (h.nvars > max_records) {
        fail(&L.r, "header: %u tensors, more than a checkpoint of this model holds (%llu)", h.nvars,
             (unsigned long long)max_records);
        goto out;
    }
    if (L.r.limit > max_bytes) L.r.limit = max_bytes;
    for (uint32_t i = 0; i < h.nvars; i++)
        if (read_record(&L, i) != 0) goto out;
    if (read_end(&L.r) != 0 || check_complete(&L) != 0) goto out;
    for (int k = 0; k < g->nvars; k++) {
        size_t bytes = (size_t)shape_numel(&g->vars[k].shape) * sizeof(float);
        if (mode == STATE_RESET && g->vars[k].role == VAR_STATE) memset(wt->data[k], 0, bytes);
        else if (L.staged[k]) memcpy(wt->data[k], L.staged[k], bytes);
        weights_touch(wt, k);
    }
    wt->step = (int64_t)h.step;
    rc = 0;
out:
    for (int k = 0; L.staged && k < g->nvars; k++) gc_free(L.staged[k]);
    for (int k = 0; L.extra && k < L.nextra; k++) gc_free(L.extra[k]);
    gc_free(L.extra);
    gc_free(L.staged);
    gc_free(L.seen);
    gc_free(L.nstate);
    gc_free(L.max_state);
    fclose(L.r.f);
    return rc;
}

int checkpoint_load(const char *path, const Graph *g, Weights *w, DiagSink *d)
{
    return load(path, g, w, STATE_IF_THERE, d);
}

int checkpoint_resume(const char *path, const Graph *g, Weights *w, bool reset_optimizer, DiagSink *d)
{
    return load(path, g, w, reset_optimizer ? STATE_RESET : STATE_NEEDED, d);
}

int checkpoint_seed(const char *path, uint64_t *seed, DiagSink *d)
{
    /* asked before opening: opening a FIFO would wait for a writer */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        diag_plain(d, "%s: not a regular file: a checkpoint to resume from is read twice (the seed first)", path);
        return -1;
    }
    Reader r;
    Header h;
    if (reader_open(&r, path, d) != 0) return -1;
    int rc = read_header(&r, &h);
    if (rc == 0) *seed = h.seed;
    fclose(r.f);
    return rc;
}
