#include "util/path.h"
#include <string.h>
#include "util/mem.h"

char *path_resolve(const char *from, const char *path)
{
    const char *slash = from ? strrchr(from, '/') : NULL;
    if (path[0] == '/' || path[0] == 0 || !slash) return gc_strdup(path);
    size_t dir = (size_t)(slash - from) + 1, len = strlen(path);
    char *r = gc_malloc(dir + len + 1);
    if (!r) return NULL;
    memcpy(r, from, dir);
    memcpy(r + dir, path, len + 1);
    return r;
}
