/* Whole files in and out (see file.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "util/file.h"
#include "util/mem.h"
#include "util/outfile.h"

int file_write_atomic(const char *path, const void *data, size_t len, DiagSink *d)
{
    OutFile of;
    FILE *f = outfile_open(&of, path, "file", d);
    if (!f) return -1;
    /* a failed fwrite leaves the stream's error set: outfile_commit reports it */
    (void)fwrite(data, 1, len, f);
    return outfile_commit(&of, d);
}

int file_read_all(const char *path, size_t limit, void **data, size_t *len, DiagSink *d)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) { diag_plain(d, "cannot open '%s': %s", path, strerror(errno)); return -1; }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        diag_plain(d, "cannot read '%s': not a regular file", path);
        fclose(f);
        return -1;
    }
    if ((unsigned long long)st.st_size > limit) {
        diag_plain(d, "'%s' is %lld bytes, more than the %zu this reads", path, (long long)st.st_size, limit);
        fclose(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    char *buf = gc_malloc(size ? size : 1);
    if (!buf) { diag_plain(d, "cannot read '%s': out of memory", path); fclose(f); return -1; }
    size_t got = fread(buf, 1, size, f);
    bool bad = ferror(f) || got != size;
    fclose(f);
    if (bad) {
        diag_plain(d, "cannot read '%s': %s", path, got != size ? "it changed while read" : strerror(errno));
        gc_free(buf);
        return -1;
    }
    *data = buf;
    *len = size;
    return 0;
}
