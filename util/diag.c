#include "util/diag.h"
#include "util/mem.h"
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <stdlib.h>

void diag_init(DiagSink *d, const Source *src)
{
    memset(d, 0, sizeof *d);
    d->src = src;
    d->max_errors = 20;
}

void diag_free(DiagSink *d)
{
    gc_free(d->buf);
    d->buf = NULL;
    d->len = d->cap = 0;
}

void diag_clear(DiagSink *d)
{
    d->len = 0;
    if (d->buf) d->buf[0] = 0;
    d->nerrors = d->suppressed = 0;
}

static void append(DiagSink *d, const char *s, size_t n)
{
    if (d->len + n + 1 > d->cap) {
        size_t cap = d->cap ? d->cap : 256;
        while (cap < d->len + n + 1) cap *= 2;
        char *b = gc_realloc(d->buf, cap);
        if (!b) return;   /* out of memory: the message is lost, the count is not */
        d->buf = b;
        d->cap = cap;
    }
    memcpy(d->buf + d->len, s, n);
    d->len += n;
    d->buf[d->len] = 0;
}

static void appendf(DiagSink *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(DiagSink *d, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    append(d, tmp, (size_t)n);
}

/* Continuation bytes of UTF-8 do not start a column. */
static int is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

void diag_line_col(const Source *src, uint32_t off, int *line, int *col)
{
    int l = 1, c = 1;
    if (off > src->len) off = (uint32_t)src->len;
    for (uint32_t i = 0; i < off; i++) {
        unsigned char ch = (unsigned char)src->text[i];
        if (ch == '\n') { l++; c = 1; }
        else if (!is_cont(ch)) c++;
    }
    *line = l;
    *col = c;
}

static const char *level_name[DIAG_LEVEL_COUNT] = { "error", "warning", "note" };

/* The source line of `loc` and a caret line under its span.  Bytes that are not
 * printable UTF-8 text are shown as '?', one column each, so a message about a binary
 * file neither sprays control codes on the terminal nor misplaces the caret. */
static void show_line(DiagSink *d, const Source *s, Loc loc)
{
    uint32_t start = loc.start > s->len ? (uint32_t)s->len : loc.start;
    uint32_t ls = start, le = start;
    while (ls > 0 && s->text[ls - 1] != '\n') ls--;
    while (le < s->len && s->text[le] != '\n') le++;
    uint32_t shown_end = le - ls > 200 ? ls + 200 : le;   /* one screen at most */
    uint32_t end = loc.end > shown_end ? shown_end : loc.end;
    char caret[512];
    size_t cl = 0;
    append(d, "  ", 2);
    for (uint32_t i = ls; i < shown_end;) {
        unsigned char ch = (unsigned char)s->text[i];
        size_t n = 1;
        if (ch >= 0x80) {
            n = (ch & 0xE0) == 0xC0 ? 2 : (ch & 0xF0) == 0xE0 ? 3 : 4;
            size_t room = shown_end - i < 4 ? shown_end - i : 4;
            if (utf8_valid_prefix(s->text + i, room < n ? room : n) < n) n = 0;
        }
        bool printable = n > 0 && (ch >= 0x20 || ch == '\t') && ch != 0x7f;
        if (printable) append(d, s->text + i, n);
        else append(d, "?", 1);
        char mark = i < start ? (ch == '\t' ? '\t' : ' ') : i == start ? '^' : i < end ? '~' : 0;
        if (mark && cl < sizeof caret - 2) caret[cl++] = mark;
        i += printable ? (uint32_t)n : 1;
    }
    if (start >= shown_end && cl < sizeof caret - 2) caret[cl++] = '^';
    caret[cl] = 0;
    append(d, "\n  ", 3);
    append(d, caret, cl);
    append(d, "\n", 1);
}

/* Kernels running at once in a parallel stage (exec/stages.c) may report together:
 * one report at a time. */
static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;

static void vreport(DiagSink *d, const Source *src, DiagLevel level, Loc loc, const char *fmt, va_list ap)
{
    if (level == DIAG_ERROR) {
        d->nerrors++;
        if (d->max_errors && d->nerrors > d->max_errors) { d->suppressed++; return; }
    } else if (d->max_errors && d->nerrors > d->max_errors) {
        return;   /* notes that belong to a suppressed error */
    }
    size_t before = d->len;
    if (src) {
        int line, col;
        diag_line_col(src, loc.start, &line, &col);
        appendf(d, "%s:%d:%d: %s: ", src->name, line, col, level_name[level]);
    } else {
        appendf(d, "graphc: %s: ", level_name[level]);
    }
    char tmp[1024];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    if (n > 0) append(d, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
    append(d, "\n", 1);
    if (src && src->len > 0) show_line(d, src, loc);
    if (d->echo && d->buf) fputs(d->buf + before, d->echo);
}

void diag_vreport(DiagSink *d, DiagLevel level, Loc loc, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&report_mu);
    vreport(d, d->src, level, loc, fmt, ap);
    pthread_mutex_unlock(&report_mu);
}

void diag_report(DiagSink *d, DiagLevel level, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_vreport(d, level, loc, fmt, ap);
    va_end(ap);
}

void diag_plain(DiagSink *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&report_mu);
    vreport(d, NULL, DIAG_ERROR, (Loc){0, 0}, fmt, ap);
    pthread_mutex_unlock(&report_mu);
    va_end(ap);
}

void diag_flush(DiagSink *d, FILE *out)
{
    if (d->buf && !d->echo) fputs(d->buf, out);
    if (d->suppressed) {
        fprintf(out, "%s: error: too many errors (%d more not shown)\n",
                d->src ? d->src->name : "graphc", d->suppressed);
        d->suppressed = 0;
    }
    if (d->buf) { d->len = 0; d->buf[0] = 0; }
}

/* A .net file larger than this is refused before reading (a model is a few KB). */
#define SOURCE_MAX_BYTES (64u << 20)

int source_load(Source *src, const char *path, DiagSink *d)
{
    memset(src, 0, sizeof *src);
    FILE *f = fopen(path, "rb");
    if (!f) {
        diag_plain(d, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    int rc = source_read(src, f, path, d);
    fclose(f);
    return rc;
}

int source_read(Source *src, FILE *f, const char *name, DiagSink *d)
{
    memset(src, 0, sizeof *src);
    size_t cap = 4096, len = 0;
    char *buf = gc_malloc(cap);
    for (;;) {
        if (!buf) { diag_plain(d, "'%s': out of memory", name); return -1; }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
        if (len + 1 == cap) {
            if (cap >= SOURCE_MAX_BYTES) {
                gc_free(buf);
                diag_plain(d, "'%s': file is larger than %u MiB; not a model", name, SOURCE_MAX_BYTES >> 20);
                return -1;
            }
            char *nb = gc_realloc(buf, cap * 2);
            if (!nb) gc_free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    if (ferror(f)) {
        gc_free(buf);
        diag_plain(d, "cannot read '%s'", name);
        return -1;
    }
    buf[len] = 0;
    src->name = gc_strdup(name);
    src->text = buf;
    src->len = len;
    return src->name ? 0 : -1;
}

int source_from_string(Source *src, const char *name, const char *text)
{
    src->name = gc_strdup(name);
    src->len = strlen(text);
    src->text = gc_strndup(text, src->len);
    return src->name && src->text ? 0 : -1;
}

int source_from_memory(Source *src, const char *name, const void *bytes, size_t len)
{
    src->name = gc_strdup(name);
    src->text = gc_malloc(len + 1);
    src->len = len;
    if (!src->name || !src->text) return -1;
    memcpy(src->text, bytes, len);
    src->text[len] = 0;
    return 0;
}

void source_free(Source *src)
{
    gc_free(src->name);
    gc_free(src->text);
    memset(src, 0, sizeof *src);
}

size_t utf8_valid_prefix(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
        else return i;
        if (i + n > len) return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        /* overlong forms, surrogates and values past U+10FFFF are not UTF-8 */
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return i;
        i += n;
    }
    return len;
}
