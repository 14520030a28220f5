/* NumPy's .npy format (a magic, a header that is a Python dict literal, the data) and
 * the .npz archive (a zip file of .npy members, stored or deflated).  Only what
 * numpy.save and numpy.savez(_compressed) write is read; everything else is refused
 * naming the field.  See run/sources.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include "run/sources.h"
#include "util/mem.h"

/* ---- the .npy header ------------------------------------------------------------ */

typedef struct Hdr {
    const char *p, *end;
} Hdr;

static void skip_space(Hdr *h)
{
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n')) h->p++;
}

static bool eat(Hdr *h, char c)
{
    skip_space(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return true;
    }
    return false;
}

/* A quoted Python string into out[cap]; false when there is none or it is too long. */
static bool py_string(Hdr *h, char *out, size_t cap)
{
    skip_space(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return false;
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != q) {
        if (n + 1 >= cap) return false;
        out[n++] = *h->p++;
    }
    if (h->p >= h->end) return false;
    h->p++;
    out[n] = 0;
    return true;
}

static bool py_word(Hdr *h, const char *w)
{
    skip_space(h);
    size_t n = strlen(w);
    if ((size_t)(h->end - h->p) >= n && memcmp(h->p, w, n) == 0) {
        h->p += n;
        return true;
    }
    return false;
}

/* The descr's element type, or -1; *swap when its byte order is not the machine's. */
static int descr_type(const char *descr, bool *swap)
{
    const uint16_t probe = 1;
    bool little = *(const uint8_t *)&probe == 1;
    char order = descr[0];
    if (!order || !descr[1]) return -1;
    *swap = (order == '<' && !little) || (order == '>' && little);
    if (order != '<' && order != '>' && order != '|' && order != '=') return -1;
    static const struct { const char *code; ElemType t; } codes[] = {
        { "u1", EL_U8 }, { "i1", EL_I8 }, { "i2", EL_I16 }, { "i4", EL_I32 }, { "i8", EL_I64 },
        { "f4", EL_F32 }, { "f8", EL_F64 }, { "b1", EL_U8 },
    };
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
        if (strcmp(descr + 1, codes[i].code) == 0) return (int)codes[i].t;
    return -1;
}

/* Parses the header dict {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * into out's rank, dims, size and type.  *swap: the data is in the other byte order. */
static int parse_header(Hdr *h, const char *what, IdxData *out, bool *swap, DiagSink *d)
{
    bool seen_descr = false, seen_order = false, seen_shape = false;
    if (!eat(h, '{')) {
        diag_plain(d, "%s: bad header: not a Python dict", what);
        return -1;
    }
    while (!eat(h, '}')) {
        char key[32], descr[32];
        if (!py_string(h, key, sizeof key) || !eat(h, ':')) {
            diag_plain(d, "%s: bad header: expected 'key': value in the dict", what);
            return -1;
        }
        if (strcmp(key, "descr") == 0) {
            skip_space(h);
            if (h->p < h->end && *h->p == '[') {
                diag_plain(d, "%s: header field 'descr' is a list: structured arrays are not read, save a plain "
                           "numeric array", what);
                return -1;
            }
            if (!py_string(h, descr, sizeof descr)) {
                diag_plain(d, "%s: header field 'descr' is not a type string", what);
                return -1;
            }
            int t = descr_type(descr, swap);
            if (t < 0) {
                diag_plain(d, "%s: header field 'descr' is '%s'%s: graphc reads float32, float64, uint8, int8, int16, "
                           "int32 and int64", what, descr, strchr(descr, 'O') ? " (Python objects)" : "");
                return -1;
            }
            out->type = (ElemType)t;
            seen_descr = true;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (py_word(h, "True")) {
                diag_plain(d, "%s: header field 'fortran_order' is True: save the array in C order "
                           "(numpy.ascontiguousarray)", what);
                return -1;
            }
            if (!py_word(h, "False")) {
                diag_plain(d, "%s: header field 'fortran_order' is not True or False", what);
                return -1;
            }
            seen_order = true;
        } else if (strcmp(key, "shape") == 0) {
            if (!eat(h, '(')) {
                diag_plain(d, "%s: header field 'shape' is not a tuple", what);
                return -1;
            }
            int rank = 0;
            int64_t size = 1;
            while (!eat(h, ')')) {
                skip_space(h);
                int64_t v = 0;
                const char *start = h->p;
                while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
                    if (v > (INT64_MAX - 9) / 10) {
                        diag_plain(d, "%s: header field 'shape': dimension %d overflows", what, rank + 1);
                        return -1;
                    }
                    v = v * 10 + (*h->p++ - '0');
                }
                if (h->p == start) {
                    diag_plain(d, "%s: header field 'shape': dimension %d is not a number", what, rank + 1);
                    return -1;
                }
                if (rank == ARRAY_MAX_RANK) {
                    diag_plain(d, "%s: header field 'shape' has more than %d dimensions", what, ARRAY_MAX_RANK);
                    return -1;
                }
                if (v == 0) {
                    diag_plain(d, "%s: header field 'shape': dimension %d is 0 (an empty array)", what, rank + 1);
                    return -1;
                }
                if (!gc_mul_i64(size, v, &size)) {
                    diag_plain(d, "%s: header field 'shape': the product of the dimensions overflows", what);
                    return -1;
                }
                out->dims[rank++] = v;
                if (!eat(h, ',') && !(skip_space(h), h->p < h->end && *h->p == ')')) {
                    diag_plain(d, "%s: header field 'shape' is not a tuple of integers", what);
                    return -1;
                }
            }
            if (rank == 0) {
                diag_plain(d, "%s: header field 'shape' is () (a scalar): an array of examples is needed", what);
                return -1;
            }
            out->rank = rank;
            out->size = size;
            seen_shape = true;
        } else {
            diag_plain(d, "%s: bad header: unknown field '%s'", what, key);
            return -1;
        }
        if (!eat(h, ',')) {
            if (!eat(h, '}')) {
                diag_plain(d, "%s: bad header: expected ',' or '}' after field '%s'", what, key);
                return -1;
            }
            break;
        }
    }
    const char *missing = !seen_descr ? "descr" : !seen_order ? "fortran_order" : !seen_shape ? "shape" : NULL;
    if (missing) {
        diag_plain(d, "%s: bad header: field '%s' is missing", what, missing);
        return -1;
    }
    return 0;
}

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* Parses the .npy image buf[len] (named `what` in messages) into out, copying the data. */
static int npy_parse(const uint8_t *buf, int64_t len, const char *what, IdxData *out, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        diag_plain(d, "%s: not a .npy file (no \\x93NUMPY magic)", what);
        return -1;
    }
    int major = buf[6];
    if (major < 1 || major > 3) {
        diag_plain(d, "%s: unsupported .npy format version %d.%d", what, major, buf[7]);
        return -1;
    }
    int64_t start = major == 1 ? 10 : 12;
    if (len < start) {
        diag_plain(d, "%s: truncated header: %" PRId64 " bytes", what, len);
        return -1;
    }
    int64_t hlen = major == 1 ? le16(buf + 8) : le32(buf + 8);
    if (hlen > len - start) {
        diag_plain(d, "%s: truncated header: the header length field says %" PRId64 " bytes, %" PRId64 " follow",
                   what, hlen, len - start);
        return -1;
    }
    Hdr h = { (const char *)buf + start, (const char *)buf + start + hlen };
    bool swap = false;
    if (parse_header(&h, what, out, &swap, d) != 0) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    int es = elem_size(out->type);
    int64_t nbytes, have = len - start - hlen;
    if (!gc_mul_i64(out->size, es, &nbytes) || nbytes > IDX_MAX_BYTES) {
        diag_plain(d, "%s: header field 'shape': %" PRId64 " elements of %d bytes, more than the %" PRId64
                   " GiB limit", what, out->size, es, IDX_MAX_BYTES >> 30);
        memset(out, 0, sizeof *out);
        return -1;
    }
    if (have != nbytes) {
        diag_plain(d, "%s: %s: header field 'shape' promises %" PRId64 " bytes of data, the file has %" PRId64, what,
                   have < nbytes ? "truncated" : "trailing data", nbytes, have);
        memset(out, 0, sizeof *out);
        return -1;
    }
    out->data = gc_malloc(nbytes ? (size_t)nbytes : 1);
    if (!out->data) {
        diag_plain(d, "%s: out of memory for %" PRId64 " bytes", what, nbytes);
        memset(out, 0, sizeof *out);
        return -1;
    }
    memcpy(out->data, buf + start + hlen, (size_t)nbytes);
    if (swap)
        for (int64_t i = 0; i < out->size; i++)
            for (int a = 0, b = es - 1; a < b; a++, b--) {
                uint8_t t = out->data[i * es + a];
                out->data[i * es + a] = out->data[i * es + b];
                out->data[i * es + b] = t;
            }
    return 0;
}

int npy_load(const char *path, IdxData *out, DiagSink *d)
{
    uint8_t *buf;
    int64_t len;
    memset(out, 0, sizeof *out);
    if (data_read_file(path, DATA_MAX_FILE, &buf, &len, d) != 0) return -1;
    int rc = npy_parse(buf, len, path, out, d);
    gc_free(buf);
    return rc;
}

/* ---- the .npz archive: a zip file ----------------------------------------------- */

/* One member of the central directory. */
typedef struct ZipEntry {
    uint32_t method, flags, crc;
    uint64_t csize, usize, offset;
} ZipEntry;

/* Finds member `name` in the zip image buf[len]: 1 found (in *e), 0 not there, -1
 * reported (a damaged archive). */
static int zip_find(const uint8_t *buf, int64_t len, const char *path, const char *name, ZipEntry *e, DiagSink *d)
{
    int64_t eocd = -1;
    for (int64_t p = len - 22; p >= 0 && p >= len - 22 - 65535; p--)
        if (memcmp(buf + p, "PK\5\6", 4) == 0) { eocd = p; break; }
    if (eocd < 0) {
        diag_plain(d, "%s: not a .npz (zip) archive: no end of central directory record", path);
        return -1;
    }
    uint64_t nent = le16(buf + eocd + 10), cdsize = le32(buf + eocd + 12), cdoff = le32(buf + eocd + 16);
    if ((nent == 0xffff || cdsize == 0xffffffffu || cdoff == 0xffffffffu) && eocd >= 20 &&
        memcmp(buf + eocd - 20, "PK\6\7", 4) == 0) {
        uint64_t z = le64(buf + eocd - 20 + 8);
        if (z > (uint64_t)len - 56 || len < 56 || memcmp(buf + z, "PK\6\6", 4) != 0) {
            diag_plain(d, "%s: zip64 end of central directory record: offset %" PRIu64 " is outside the file", path, z);
            return -1;
        }
        nent = le64(buf + z + 32);
        cdsize = le64(buf + z + 40);
        cdoff = le64(buf + z + 48);
    }
    if (cdoff > (uint64_t)len || cdsize > (uint64_t)len - cdoff) {
        diag_plain(d, "%s: central directory: offset %" PRIu64 " + size %" PRIu64 " is outside the file's %" PRId64
                   " bytes", path, cdoff, cdsize, len);
        return -1;
    }
    const uint8_t *p = buf + cdoff, *end = buf + cdoff + cdsize;
    size_t nl = strlen(name);
    for (uint64_t i = 0; i < nent; i++) {
        if (end - p < 46 || memcmp(p, "PK\1\2", 4) != 0) {
            diag_plain(d, "%s: central directory: entry %" PRIu64 " of %" PRIu64 " is damaged", path, i + 1, nent);
            return -1;
        }
        uint32_t n = le16(p + 28), x = le16(p + 30), c = le16(p + 32);
        if ((uint64_t)(end - p) < 46ull + n + x + c) {
            diag_plain(d, "%s: central directory: entry %" PRIu64 " runs past its end", path, i + 1);
            return -1;
        }
        if (n == nl && memcmp(p + 46, name, nl) == 0) {
            e->flags = le16(p + 8);
            e->method = le16(p + 10);
            e->crc = le32(p + 16);
            e->csize = le32(p + 20);
            e->usize = le32(p + 24);
            e->offset = le32(p + 42);
            /* zip64: the extra field (id 1) holds, in this order, each size that is 0xffffffff */
            const uint8_t *xp = p + 46 + n, *xe = xp + x;
            while (xe - xp >= 4) {
                uint32_t id = le16(xp), sz = le16(xp + 2);
                if ((uint32_t)(xe - xp - 4) < sz) break;
                if (id == 1) {
                    const uint8_t *q = xp + 4, *qe = q + sz;
                    uint64_t *f[3] = { &e->usize, &e->csize, &e->offset };
                    for (int k = 0; k < 3; k++)
                        if (*f[k] == 0xffffffffu && qe - q >= 8) { *f[k] = le64(q); q += 8; }
                }
                xp += 4 + sz;
            }
            return 1;
        }
        p += 46 + n + x + c;
    }
    return 0;
}

/* The data of entry e: a copy (stored) or its inflation (deflated), CRC checked. */
static int zip_extract(const uint8_t *buf, int64_t len, const char *what, const ZipEntry *e, uint8_t **out,
                       DiagSink *d)
{
    *out = NULL;
    if (e->flags & 1) {
        diag_plain(d, "%s: the member is encrypted", what);
        return -1;
    }
    if (e->method != 0 && e->method != 8) {
        diag_plain(d, "%s: compression method %u: graphc reads stored (0) and deflated (8) members", what, e->method);
        return -1;
    }
    if (e->offset > (uint64_t)len || (uint64_t)len - e->offset < 30 || memcmp(buf + e->offset, "PK\3\4", 4) != 0) {
        diag_plain(d, "%s: local header at offset %" PRIu64 " is missing or damaged", what, e->offset);
        return -1;
    }
    uint64_t data = e->offset + 30 + le16(buf + e->offset + 26) + le16(buf + e->offset + 28);
    if (data > (uint64_t)len || e->csize > (uint64_t)len - data) {
        diag_plain(d, "%s: truncated: the member's %" PRIu64 " bytes run past the end of the file", what, e->csize);
        return -1;
    }
    if (e->usize > (uint64_t)IDX_MAX_BYTES) {
        diag_plain(d, "%s: uncompressed size %" PRIu64 " is more than the %" PRId64 " GiB limit", what, e->usize,
                   IDX_MAX_BYTES >> 30);
        return -1;
    }
    if (e->method == 0 && e->csize != e->usize) {
        diag_plain(d, "%s: a stored member of compressed size %" PRIu64 " and size %" PRIu64, what, e->csize, e->usize);
        return -1;
    }
    /* one byte more than promised, to catch a stream that gives more (sizes fit in an
     * unsigned int: the member is below 2 GiB and the archive below DATA_MAX_FILE) */
    uint8_t *u = gc_malloc((size_t)e->usize + 1);
    if (!u) {
        diag_plain(d, "%s: out of memory for %" PRIu64 " bytes", what, e->usize);
        return -1;
    }
    if (e->method == 0) {
        memcpy(u, buf + data, (size_t)e->usize);
    } else {
        z_stream z;
        memset(&z, 0, sizeof z);
        if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
            diag_plain(d, "%s: out of memory for zlib", what);
            gc_free(u);
            return -1;
        }
        z.next_in = (Bytef *)(uintptr_t)(buf + data);
        z.avail_in = (uInt)e->csize;
        z.next_out = u;
        z.avail_out = (uInt)e->usize + 1;
        int zr = inflate(&z, Z_FINISH);
        uint64_t produced = z.total_out;
        char msg[96];
        snprintf(msg, sizeof msg, "%s", z.msg ? z.msg : "invalid data");
        inflateEnd(&z);
        if (zr != Z_STREAM_END || produced != e->usize) {
            if (zr == Z_DATA_ERROR || zr == Z_STREAM_ERROR) diag_plain(d, "%s: corrupt deflate stream: %s", what, msg);
            else if (zr == Z_STREAM_END || produced > e->usize)
                diag_plain(d, "%s: the deflate stream gives %s%" PRIu64 " bytes, the header says %" PRIu64, what,
                           produced > e->usize ? "more than " : "", produced, e->usize);
            else
                diag_plain(d, "%s: truncated deflate stream: it ends after %" PRIu64 " of %" PRIu64 " bytes", what,
                           produced, e->usize);
            gc_free(u);
            return -1;
        }
    }
    uint32_t crc = (uint32_t)crc32(crc32(0, Z_NULL, 0), u, (uInt)e->usize);
    if (crc != e->crc) {
        diag_plain(d, "%s: CRC mismatch: the data's CRC-32 is %08x, the archive says %08x", what, crc, e->crc);
        gc_free(u);
        return -1;
    }
    *out = u;
    return 0;
}

int npz_load(const char *path, const char *member, IdxData *out, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    uint8_t *buf, *u = NULL;
    int64_t len;
    if (data_read_file(path, DATA_MAX_FILE, &buf, &len, d) != 0) return -1;
    char name[128], what[4200];
    snprintf(name, sizeof name, "%s.npy", member);
    snprintf(what, sizeof what, "%s: member '%s'", path, name);
    ZipEntry e;
    int rc = -1, found = zip_find(buf, len, path, name, &e, d);
    if (found == 0) diag_plain(d, "%s: no member '%s' in the archive", path, name);
    if (found == 1 && zip_extract(buf, len, what, &e, &u, d) == 0) rc = npy_parse(u, (int64_t)e.usize, what, out, d);
    gc_free(u);
    gc_free(buf);
    return rc;
}

bool npz_has(const char *path, const char *member)
{
    DiagSink quiet;
    diag_init(&quiet, NULL);
    uint8_t *buf;
    int64_t len;
    bool has = false;
    if (data_read_file(path, DATA_MAX_FILE, &buf, &len, &quiet) == 0) {
        char name[128];
        snprintf(name, sizeof name, "%s.npy", member);
        ZipEntry e;
        has = zip_find(buf, len, path, name, &e, &quiet) == 1;
        gc_free(buf);
    }
    diag_free(&quiet);
    return has;
}
