/* Every file graphc writes (checkpoints, plots, dumps) goes through here, so that all
 * of them are written the same safe way:
 *   - the path is followed through symlinks to the file it names (the target), and a
 *     symlink stays a symlink: the target is what gets replaced;
 *   - the target must be a regular file or absent: a FIFO, a device, a socket or a
 *     folder is refused, never replaced by a regular file;
 *   - the data goes to a temporary file beside the target (TARGET.tmp.PID, in the
 *     target's folder, so the rename cannot cross file systems), which is flushed,
 *     fsynced and renamed over the target, and the folder is fsynced: a crash at any
 *     moment leaves the old file or the new one, never a mix;
 *   - on any failure the temporary is removed and the target is left as it was.
 * outfile_check does the same checks and creates (then removes) the temporary, so a
 * long run can find out before it starts that its outputs cannot be written.
 *
 * Messages read "cannot write WHAT 'PATH': reason", with PATH as the caller gave it. */
#ifndef GRAPHC_OUTFILE_H
#define GRAPHC_OUTFILE_H
#include <stdio.h>
#include "util/diag.h"

typedef struct OutFile {
    const char *path;   /* as the caller gave it (borrowed) */
    const char *what;   /* "checkpoint", "plot", ... (borrowed) */
    char *target;       /* path with its symlinks followed */
    char *tmp;          /* the temporary beside target */
    FILE *f;            /* open on tmp */
} OutFile;

/* Opens the temporary for `path`: the stream to write to, or NULL with the reason in
 * `d`.  Finish with outfile_commit or outfile_abort. */
FILE *outfile_open(OutFile *o, const char *path, const char *what, DiagSink *d);
/* Flushes, fsyncs and renames the temporary over the target.  0, or -1 with the reason
 * in `d` (a write error on the stream included); either way o is finished. */
int outfile_commit(OutFile *o, DiagSink *d);
/* Removes the temporary; the target is as it was. */
void outfile_abort(OutFile *o);
/* Whether `path` can be written as outfile_open would (NULL: nothing to check).  0 or
 * -1 with the reason in `d`. */
int outfile_check(const char *path, const char *what, DiagSink *d);

#endif
