/* Files of the data sources' formats, built in memory for the tests (tests/test_sources.c)
 * and the fuzz target (fuzz/fuzz_sources.c): IDX of any type, .npy, zip archives
 * (.npz) with stored or deflated members, CIFAR-10 records.  Each writer returns the
 * bytes written into out[cap], or 0 when they do not fit. */
#ifndef GRAPHC_TESTS_DATAFILES_H
#define GRAPHC_TESTS_DATAFILES_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

/* An IDX file: magic with `type` (0x08 ... 0x0e), the dims big-endian, then `body`
 * (already big-endian). */
static inline size_t df_idx(uint8_t *out, size_t cap, int type, int rank, const uint32_t *dims, const void *body,
                            size_t nbody)
{
    size_t n = 4 + 4 * (size_t)rank + nbody;
    if (n > cap) return 0;
    out[0] = out[1] = 0;
    out[2] = (uint8_t)type;
    out[3] = (uint8_t)rank;
    for (int i = 0; i < rank; i++) {
        out[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        out[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        out[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        out[7 + 4 * i] = (uint8_t)dims[i];
    }
    if (nbody) memcpy(out + 4 + 4 * rank, body, nbody);
    return n;
}

/* A .npy file (version 1.0) with the header dict written from `descr`, `fortran` and
 * `shape` (a Python tuple as text, "(3, 4)"), padded as numpy pads it, then body. */
static inline size_t df_npy(uint8_t *out, size_t cap, const char *descr, bool fortran, const char *shape,
                            const void *body, size_t nbody)
{
    char h[512];
    int hl = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
                      fortran ? "True" : "False", shape);
    if (hl < 0 || (size_t)hl + 64 >= sizeof h) return 0;
    while ((10 + hl + 1) % 64) h[hl++] = ' ';
    h[hl++] = '\n';
    size_t n = 10 + (size_t)hl + nbody;
    if (n > cap) return 0;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)(hl & 0xff);
    out[9] = (uint8_t)(hl >> 8);
    memcpy(out + 10, h, (size_t)hl);
    if (nbody) memcpy(out + 10 + hl, body, nbody);
    return n;
}

static inline void df_le16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void df_le32(uint8_t *p, uint32_t v) { df_le16(p, v & 0xffff); df_le16(p + 2, v >> 16); }

/* A zip archive of n members (names[i], data[i] of len[i] bytes), each deflated when
 * deflated[i], else stored: local headers, the central directory, its end record. */
static inline size_t df_zip(uint8_t *out, size_t cap, int n, const char *const *names, const uint8_t *const *data,
                            const size_t *len, const bool *deflated)
{
    size_t at = 0, offs[16];
    uint32_t crcs[16], csz[16];
    if (n > 16) return 0;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(names[i]);
        if (at + 30 + nl > cap) return 0;
        uint8_t *h = out + at, *body = h + 30 + nl;
        size_t room = cap - at - 30 - nl, c;
        crcs[i] = (uint32_t)crc32(crc32(0, Z_NULL, 0), data[i], (uInt)len[i]);
        if (deflated[i]) {
            z_stream z;
            memset(&z, 0, sizeof z);
            if (deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return 0;
            z.next_in = (Bytef *)(uintptr_t)data[i];
            z.avail_in = (uInt)len[i];
            z.next_out = body;
            z.avail_out = (uInt)room;
            int r = deflate(&z, Z_FINISH);
            c = z.total_out;
            deflateEnd(&z);
            if (r != Z_STREAM_END) return 0;
        } else {
            if (len[i] > room) return 0;
            memcpy(body, data[i], len[i]);
            c = len[i];
        }
        memcpy(h, "PK\3\4", 4);
        df_le16(h + 4, 20);
        df_le16(h + 6, 0);
        df_le16(h + 8, deflated[i] ? 8 : 0);
        df_le32(h + 10, 0);
        df_le32(h + 14, crcs[i]);
        df_le32(h + 18, (uint32_t)c);
        df_le32(h + 22, (uint32_t)len[i]);
        df_le16(h + 26, (uint32_t)nl);
        df_le16(h + 28, 0);
        memcpy(h + 30, names[i], nl);
        offs[i] = at;
        csz[i] = (uint32_t)c;
        at += 30 + nl + c;
    }
    size_t cd = at;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(names[i]);
        if (at + 46 + nl > cap) return 0;
        uint8_t *h = out + at;
        memset(h, 0, 46);
        memcpy(h, "PK\1\2", 4);
        df_le16(h + 4, 20);
        df_le16(h + 6, 20);
        df_le16(h + 10, deflated[i] ? 8 : 0);
        df_le32(h + 16, crcs[i]);
        df_le32(h + 20, csz[i]);
        df_le32(h + 24, (uint32_t)len[i]);
        df_le16(h + 28, (uint32_t)nl);
        df_le32(h + 42, (uint32_t)offs[i]);
        memcpy(h + 46, names[i], nl);
        at += 46 + nl;
    }
    if (at + 22 > cap) return 0;
    uint8_t *e = out + at;
    memset(e, 0, 22);
    memcpy(e, "PK\5\6", 4);
    df_le16(e + 8, (uint32_t)n);
    df_le16(e + 10, (uint32_t)n);
    df_le32(e + 12, (uint32_t)(at - cd));
    df_le32(e + 16, (uint32_t)cd);
    return at + 22;
}

/* CIFAR-10 records: record r has label labels[r] and pixel byte (channel c, pixel p)
 * = (r * 31 + c * 7 + p) % 256. */
static inline size_t df_cifar(uint8_t *out, size_t cap, const uint8_t *labels, int n)
{
    size_t need = (size_t)n * 3073;
    if (need > cap) return 0;
    for (int r = 0; r < n; r++) {
        uint8_t *rec = out + (size_t)r * 3073;
        rec[0] = labels[r];
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 1024; p++) rec[1 + c * 1024 + p] = (uint8_t)((r * 31 + c * 7 + p) % 256);
    }
    return need;
}

static inline int df_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

#endif
