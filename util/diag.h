/* One diagnostic sink for the whole front end and the checks after it.
 *
 * A diagnostic is `file:line:col: error: message`, then the source line and a
 * `^~~~` under the span.  Library code never prints or exits on its own: it reports
 * here, counts, and returns a failure; the CLI decides what to do.  Every location is
 * a byte span in the source text, turned into line and column only when printed. */
#ifndef GRAPHC_DIAG_H
#define GRAPHC_DIAG_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A span of bytes [start, end) in a Source; {0,0} with no source means "no place". */
typedef struct Loc {
    uint32_t start;
    uint32_t end;
} Loc;

typedef struct Source {
    char *name;        /* file name as the user gave it */
    char *text;        /* contents, NUL-terminated (a NUL inside is an error) */
    size_t len;        /* bytes in text, not counting the final NUL */
} Source;

typedef enum DiagLevel { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE, DIAG_LEVEL_COUNT } DiagLevel;

typedef struct DiagSink {
    const Source *src; /* may be NULL: messages then carry no place */
    char *buf;         /* everything reported so far, formatted */
    size_t len, cap;
    int nerrors;
    int max_errors;    /* stop recording after this many (0: no limit) */
    int suppressed;    /* errors past max_errors */
    FILE *echo;        /* if set, each message is also written here at once */
} DiagSink;

void diag_init(DiagSink *d, const Source *src);
void diag_free(DiagSink *d);
/* Forgets every message reported so far (a rank whose failure another reports). */
void diag_clear(DiagSink *d);
void diag_report(DiagSink *d, DiagLevel level, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void diag_vreport(DiagSink *d, DiagLevel level, Loc loc, const char *fmt, va_list ap);
#define diag_error(d, loc, ...) diag_report((d), DIAG_ERROR, (loc), __VA_ARGS__)
#define diag_note(d, loc, ...) diag_report((d), DIAG_NOTE, (loc), __VA_ARGS__)
/* An error about a file or a field, not a place in a .net source. */
void diag_plain(DiagSink *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes the "too many errors" line, if any were suppressed, and the buffer. */
void diag_flush(DiagSink *d, FILE *out);
/* Line (1-based) and column (1-based, in characters) of a byte offset. */
void diag_line_col(const Source *src, uint32_t off, int *line, int *col);

/* Reads a whole file into a Source.  Returns 0, or -1 with a message in `d`. */
int source_load(Source *src, const char *path, DiagSink *d);
/* The same from an open stream (standard input, say), called `name` in messages. */
int source_read(Source *src, FILE *f, const char *name, DiagSink *d);
int source_from_string(Source *src, const char *name, const char *text);
/* A Source from `len` bytes that may contain NULs (a fuzzer's input, say). */
int source_from_memory(Source *src, const char *name, const void *bytes, size_t len);
void source_free(Source *src);

/* Length of the longest prefix that is valid UTF-8; equals len when all is valid. */
size_t utf8_valid_prefix(const char *s, size_t len);

#endif
