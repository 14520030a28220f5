/* A generator of .net models that look valid, for fuzzing the front end and everything
 * after it.  A stream of choice bytes (a fuzzer's input, or random bytes for a
 * campaign) makes every decision, so any byte string is a model, and a small change to
 * the bytes is a small change to the model.
 *
 * Mostly models that compile and train: one f32 input of examples and one i32 input
 * of labels, ops chosen to fit the shapes so far, a loss, a train block.  Among them,
 * what hostile files hold: expressions nested up to and past the parser's limit,
 * dimensions that are zero, negative or huge, calls of every builtin in graph/lower.c's
 * table with keyword arguments from its own list (so a builtin or keyword added there
 * is generated without a change here), values of the wrong kind, unknown names, every
 * train-block setting (graph/lower.c's list) with every optimizer and data source,
 * several inputs and outputs.  When the bytes run out every choice is the first, the
 * simplest, so generation always ends. */
#ifndef GRAPHC_MODELGEN_H
#define GRAPHC_MODELGEN_H
#include <stddef.h>
#include <stdint.h>

/* The model that `n` choice bytes describe, NUL-terminated (malloc'd: free it), or
 * NULL when out of memory; *len is its length. */
char *modelgen(const uint8_t *bytes, size_t n, size_t *len);

/* `text` after a few edits that `n` choice bytes pick: a span deleted, duplicated or
 * cut off, two lines swapped, a number replaced by one at an edge, a token of the
 * language (graph/lower.c's builtin names and train settings among them) inserted.
 * Malloc'd and NUL-terminated, or NULL when out of memory; *outlen its length. */
char *modelgen_mutate(const char *text, size_t len, const uint8_t *bytes, size_t n, size_t *outlen);

#endif
