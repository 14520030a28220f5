/* Lowering: the syntax tree of a .net file into a graph of primitive ops.
 * Layers (dense, conv2d with filters=) expand into primitives and create their
 * parameters with Keras' names and initializers; every node keeps its source span;
 * shapes are inferred as nodes are made, so errors point at the line that caused them. */
#ifndef GRAPHC_LOWER_H
#define GRAPHC_LOWER_H
#include "graph/graph.h"
#include "parser/ast.h"

/* Returns a graph (NULL only when out of memory); d->nerrors says whether it is good. */
Graph *lower_program(const Program *p, const Source *src, DiagSink *d);

/* Parse + lower + infer in one step, as the CLI and the tests use it.  On success
 * (return 0) *out is the graph and *prog the tree (free with ast_free, after the graph
 * is no longer dumped).  prog may be NULL when the tree is not wanted. */
int compile_source(const Source *src, DiagSink *d, Program **prog, Graph **out);

/* The names a .net file may call, for --help, suggestions and fuzzers. */
int lower_builtin_names(const char *const **names);
/* The keyword arguments builtin `name` takes (at most 10; NULL after the last when
 * fewer), or NULL for an unknown name. */
const char *const *lower_builtin_keywords(const char *name);
/* The settings of a train block (NULL-terminated). */
const char *const *lower_train_keys(void);

#endif
