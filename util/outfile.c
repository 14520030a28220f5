/* Output files: see outfile.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/mem.h"
#include "util/outfile.h"

/* the kernel's own limit on symlinks followed in one lookup */
enum { MAX_LINKS = 40, MAX_TMP_TRIES = 100 };

static void say(DiagSink *d, const char *what, const char *path, const char *target, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void say(DiagSink *d, const char *what, const char *path, const char *target, const char *fmt, ...)
{
    char reason[PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (target && strcmp(target, path) != 0)
        diag_plain(d, "cannot write %s '%s' (a symlink to '%s'): %s", what, path, target, reason);
    else
        diag_plain(d, "cannot write %s '%s': %s", what, path, reason);
}

/* The folder of `path`: "." or "/" or the part before the last slash. */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return gc_strdup(".");
    return gc_strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* `path` with every symlink along the last component followed: the file that will be
 * replaced.  *exists tells whether it is there (then *st describes it).  NULL with
 * errno set on failure. */
static char *resolve(const char *path, bool *exists, struct stat *st)
{
    char *cur = gc_strdup(path);
    if (!cur) errno = ENOMEM;
    for (int hops = 0; cur; hops++) {
        if (lstat(cur, st) != 0) {
            if (errno != ENOENT) break;
            *exists = false;   /* a dangling symlink: its target is created */
            return cur;
        }
        if (!S_ISLNK(st->st_mode)) {
            *exists = true;
            return cur;
        }
        char link[PATH_MAX];
        ssize_t n = hops < MAX_LINKS ? readlink(cur, link, sizeof link - 1) : (errno = ELOOP, -1);
        if (n < 0) break;
        link[n] = 0;
        char *next;
        if (link[0] == '/' || !strchr(cur, '/')) {
            next = gc_strdup(link);
        } else {
            /* a relative target is relative to the link's folder */
            char *dir = folder_of(cur);
            size_t len = dir ? strlen(dir) + strlen(link) + 2 : 0;
            next = dir ? gc_malloc(len) : NULL;
            if (next) snprintf(next, len, "%s/%s", dir, link);
            gc_free(dir);
        }
        gc_free(cur);
        cur = next;
        if (!cur) errno = ENOMEM;
    }
    int e = errno;
    gc_free(cur);
    errno = e;
    return NULL;
}

static const char *kind_of(mode_t m)
{
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* Creates the temporary beside `target`: TARGET.tmp.PID, or with a counter after it
 * when that name is taken (another writer, or a leftover of a killed run), or a short
 * name in the folder when the target's name leaves no room.  The fd, or -1. */
static int create_tmp(const char *target, char **tmp)
{
    static int counter;
    size_t n = strlen(target) + 64;
    *tmp = gc_malloc(n);
    if (!*tmp) {
        errno = ENOMEM;
        return -1;
    }
    bool short_name = false;
    for (int k = 0; k < MAX_TMP_TRIES; k++) {
        int c = k ? __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) : 0;
        const char *base = short_name ? ".graphc" : target;
        if (short_name) {
            char *dir = folder_of(target);
            if (!dir) {
                errno = ENOMEM;
                return -1;
            }
            snprintf(*tmp, n, "%s/%s.tmp.%ld.%d", dir, base, (long)getpid(), c);
            gc_free(dir);
        } else if (c) {
            snprintf(*tmp, n, "%s.tmp.%ld.%d", base, (long)getpid(), c);
        } else {
            snprintf(*tmp, n, "%s.tmp.%ld", base, (long)getpid());
        }
        /* 0666 less the umask, as any new file; O_EXCL|O_NOFOLLOW: never through a
         * link or into a file someone else has open */
        int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd >= 0) return fd;
        if (errno == ENAMETOOLONG && !short_name) short_name = true;
        else if (errno != EEXIST) break;
    }
    int e = errno;
    gc_free(*tmp);
    *tmp = NULL;
    errno = e;
    return -1;
}

FILE *outfile_open(OutFile *o, const char *path, const char *what, DiagSink *d)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    o->what = what;
    bool exists;
    struct stat st;
    o->target = resolve(path, &exists, &st);
    if (!o->target) {
        say(d, what, path, NULL, "%s", strerror(errno));
        return NULL;
    }
    if (exists && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) say(d, what, path, o->target, "%s", strerror(EISDIR));
        else say(d, what, path, o->target, "it is %s, not a regular file (graphc writes a new file and renames it over "
                 "the old one; write to a regular file and copy it there)", kind_of(st.st_mode));
        outfile_abort(o);
        return NULL;
    }
    int fd = create_tmp(o->target, &o->tmp);
    if (fd < 0) {
        int e = errno;
        char *dir = folder_of(o->target);
        struct stat ds;
        if (dir && (e == ENOENT || e == ENOTDIR) && stat(dir, &ds) != 0)
            say(d, what, path, o->target, "folder '%s': %s", dir, strerror(errno));
        else
            say(d, what, path, o->target, "cannot create a file in folder '%s': %s", dir ? dir : ".", strerror(e));
        gc_free(dir);
        outfile_abort(o);
        return NULL;
    }
    if (exists) (void)fchmod(fd, st.st_mode & 07777);   /* the new file keeps the old one's mode */
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        say(d, what, path, o->target, "%s", strerror(errno));
        close(fd);
        outfile_abort(o);
        return NULL;
    }
    errno = 0;
    return o->f;
}

/* Makes the rename durable; best effort (some file systems refuse fsync on a folder). */
static void sync_folder_of(const char *path)
{
    char *dir = folder_of(path);
    int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    gc_free(dir);
}

int outfile_commit(OutFile *o, DiagSink *d)
{
    const char *stage = NULL;
    int e = 0;
    /* errno still holds a failed fwrite's reason (outfile_open cleared it) */
    if (fflush(o->f) != 0 || ferror(o->f)) stage = "writing";
    else if (fsync(fileno(o->f)) != 0) stage = "flushing to disk";
    if (stage) e = errno ? errno : EIO;
    if (fclose(o->f) != 0 && !stage) {
        stage = "closing";
        e = errno;
    }
    o->f = NULL;
    if (!stage && rename(o->tmp, o->target) != 0) {
        stage = "renaming";
        e = errno;
    }
    if (stage) {
        say(d, o->what, o->path, o->target, "%s '%s' failed: %s", stage, o->tmp, strerror(e));
        outfile_abort(o);
        return -1;
    }
    sync_folder_of(o->target);
    gc_free(o->tmp);
    gc_free(o->target);
    memset(o, 0, sizeof *o);
    return 0;
}

void outfile_abort(OutFile *o)
{
    if (o->f) fclose(o->f);
    if (o->tmp) unlink(o->tmp);
    gc_free(o->tmp);
    gc_free(o->target);
    memset(o, 0, sizeof *o);
}

int outfile_check(const char *path, const char *what, DiagSink *d)
{
    if (!path) return 0;
    OutFile o;
    if (!outfile_open(&o, path, what, d)) return -1;
    outfile_abort(&o);
    return 0;
}
