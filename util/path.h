/* Paths written in a .net file.
 *
 * A path in a model file (a data source's folder or files, the train block's
 * checkpoint) means what a path in an included file means everywhere else: relative
 * to the folder of the file it is written in, not to the working directory.  So
 * `cd /tmp && graphc run ~/graphc/models/mnist.net` reads ~/graphc/data/mnist from
 * mnist("../data/mnist"), and so does the installed copy of the model beside the
 * installed data.  Lowering resolves every such path through path_resolve once
 * (graph/lower.c: lower_path), so the graph holds the paths the readers open and their
 * errors name where they looked. */
#ifndef GRAPHC_PATH_H
#define GRAPHC_PATH_H

/* `path` as the .net file `from` means it: as written when it is absolute, or when
 * `from` has no folder part ("mnist.net", "<stdin>", NULL: the working directory is
 * the file's folder); else the folder of `from` joined to it ("models/" and
 * "../data/mnist": "models/../data/mnist", not normalised, so that a message shows
 * both parts).  gc_free the result; NULL when out of memory. */
char *path_resolve(const char *from, const char *path);

#endif
