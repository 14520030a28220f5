/* Where graphc finds what `make install` put beside it (the models and the MNIST data
 * under $(pkgdatadir), the docs under $(docdir)), and the model file a command names.
 *
 * The install paths are configure's, moved with the binary when it runs from the bin
 * folder of another prefix (`make install prefix=DIR`, `DESTDIR`, a copied tree):
 * DIR/bin/graphc looks in DIR/share/graphc when that exists. */
#include "config.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/cli.h"
#include "util/suggest.h"

const char *cli_install_path(const char *compiled, char *buf, size_t n)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return compiled;
    exe[len] = 0;
    *strrchr(exe, '/') = 0;   /* the folder graphc runs from */
    /* configure's bindir and `compiled` after their common folders: "/bin", "/share/graphc" */
    const char *bindir = GRAPHC_BINDIR;
    size_t common = 0;
    for (size_t i = 0; bindir[i] && bindir[i] == compiled[i]; i++)
        if (bindir[i] == '/') common = i;
    const char *bin_tail = bindir + common;
    size_t el = strlen(exe), bl = strlen(bin_tail);
    if (el < bl || strcmp(exe + el - bl, bin_tail) != 0) return compiled;
    struct stat st;
    if (snprintf(buf, n, "%.*s%s", (int)(el - bl), exe, compiled + common) >= (int)n || stat(buf, &st) != 0 ||
        !S_ISDIR(st.st_mode))
        return compiled;
    return buf;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The message for a bare model name found nowhere: the installed models, and the
 * nearest of them to `name` if it looks like a typo. */
static void not_found(const char *name, const char *models, DiagSink *d)
{
    char list[512] = "";
    const char *names[64];
    char store[64][64];
    int n = 0;
    DIR *dir = opendir(models);
    for (struct dirent *e; dir && (e = readdir(dir)) && n < 64;) {
        size_t len = strlen(e->d_name);
        if (len <= 4 || len - 4 >= sizeof store[0] || strcmp(e->d_name + len - 4, ".net") != 0) continue;
        snprintf(store[n], sizeof store[n], "%.*s", (int)(len - 4), e->d_name);
        names[n] = store[n];
        n++;
    }
    if (dir) closedir(dir);
    for (int i = 0; i < n; i++)   /* in order, for a stable message */
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) { const char *t = names[i]; names[i] = names[j]; names[j] = t; }
    for (int i = 0; i < n; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", names[i]);
    }
    char base[64];
    size_t bl = strlen(name);
    if (bl > 4 && strcmp(name + bl - 4, ".net") == 0) bl -= 4;
    snprintf(base, sizeof base, "%.*s", (int)(bl < sizeof base ? bl : sizeof base - 1), name);
    const char *near = suggest_nearest(base, names, n);
    if (near)
        diag_plain(d, "cannot open '%s': No such file or directory, nor an installed model; did you mean '%s' (%s/%s.net)?",
                   name, near, models, near);
    else if (n)
        diag_plain(d, "cannot open '%s': No such file or directory, nor an installed model (in %s: %s)", name, models, list);
    else
        diag_plain(d, "cannot open '%s': No such file or directory (and no installed models in %s)", name, models);
}

int cli_source_load(Source *src, const char *path, DiagSink *d)
{
    if (strcmp(path, "-") == 0) return source_read(src, stdin, "<stdin>", d);
    if (strchr(path, '/') || is_file(path)) return source_load(src, path, d);
    /* A bare name that is no file here (a folder `mnist` is none): NAME.net here, then
     * the installed NAME(.net). */
    char dir[PATH_MAX], cand[PATH_MAX + 64];
    const char *models = cli_install_path(GRAPHC_PKGDATADIR "/models", dir, sizeof dir);
    size_t len = strlen(path);
    bool net = len > 4 && strcmp(path + len - 4, ".net") == 0;
    const char *ext = net ? "" : ".net";
    if (!net && snprintf(cand, sizeof cand, "%s.net", path) < (int)sizeof cand && is_file(cand))
        return source_load(src, cand, d);
    if (snprintf(cand, sizeof cand, "%s/%s%s", models, path, ext) < (int)sizeof cand && is_file(cand))
        return source_load(src, cand, d);
    memset(src, 0, sizeof *src);
    not_found(path, models, d);
    return -1;
}
