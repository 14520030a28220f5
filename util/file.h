/* Whole files in and out, for commands whose output replaces a file the user may have. */
#ifndef GRAPHC_FILE_H
#define GRAPHC_FILE_H
#include <stddef.h>
#include "util/diag.h"

/* Writes data[0..len) to `path` as util/outfile.h writes every file: atomically (a
 * failure at any moment leaves the old file whole), through a symlink to its target,
 * never over anything but a regular file.  0, or -1 with the reason in d. */
int file_write_atomic(const char *path, const void *data, size_t len, DiagSink *d);

/* Reads all of `path` (at most `limit` bytes) into *data (gc_free it).  0, or -1 with
 * the reason in d. */
int file_read_all(const char *path, size_t limit, void **data, size_t *len, DiagSink *d);

#endif
