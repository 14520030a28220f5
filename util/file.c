/* Whole files in and out (see file.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/file.h"
#include "util/mem.h"

int file_write_atomic(const char *path, const void *data, size_t len, DiagSink *d)
{
    size_t n = strlen(path) + 32;
    char *tmp = gc_malloc(n);
    if (!tmp) { diag_plain(d, "cannot write '%s': out of memory", path); return -1; }
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        diag_plain(d, "cannot write '%s': %s", path, strerror(errno));
        gc_free(tmp);
        return -1;
    }
    const char *p = data;
    size_t left = len;
    int rc = 0;
    while (left > 0 && rc == 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) rc = -1;
        else { p += w; left -= (size_t)w; }
    }
    if (rc == 0 && fsync(fd) != 0) rc = -1;
    int err = errno;
    if (close(fd) != 0 && rc == 0) { rc = -1; err = errno; }
    if (rc == 0 && rename(tmp, path) != 0) { rc = -1; err = errno; }
    if (rc != 0) {
        diag_plain(d, "cannot write '%s': %s", path, strerror(err));
        unlink(tmp);
    } else {
        /* the rename made durable; best effort (some file systems refuse a folder's fsync) */
        char *dir = gc_strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash) *(slash == dir ? slash + 1 : slash) = 0;
        int dfd = dir ? open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dfd >= 0) { (void)fsync(dfd); close(dfd); }
        gc_free(dir);
    }
    gc_free(tmp);
    return rc;
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
