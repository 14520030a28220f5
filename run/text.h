/* Byte-level language models (docs/training.md, "charlm"): the baselines a model's
 * validation loss is read against, and the choice of the next byte when sampling. */
#ifndef GRAPHC_TEXT_H
#define GRAPHC_TEXT_H
#include "run/data.h"

/* The loss per byte (nats, natural log) that two count models of the training bytes
 * get on the bytes the validation windows predict: each window's positions 1..context,
 * the very bytes a model's validation loss averages over.
 *   unigram: p(b) = (n(b) + 1) / (N + 256)                 (add-one)
 *   bigram:  p(b | a) = (n(a b) + p(b)) / (n(a.) + 1)       (add-one toward the unigram)
 * where n counts bytes and byte pairs of the training text and n(a.) the pairs starting
 * with a.  Both sets must be text (dataset_text).  0, or -1 when they are not. */
int text_baselines(const Dataset *train, const Dataset *valid, double *unigram, double *bigram);

/* The index drawn from probabilities p[n] at `temperature` with u uniform in [0, 1):
 * p_i^(1/T) renormalized, by the inverse of its running sum; T = 0 takes the most
 * likely (the lowest index among equals).  Entries that are not finite or negative
 * count as 0; with nothing left, 0. */
int text_pick(const float *p, int n, double temperature, double u);

#endif
