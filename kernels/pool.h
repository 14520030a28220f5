/* Internal to kernels/ (kern.h stays the kernels' one public interface): the max
 * pooling that conv.c's conv2d_maxpool runs on the convolution rows in its scratch. */
#ifndef GRAPHC_KERN_POOL_H
#define GRAPHC_KERN_POOL_H
#include "kernels/kern.h"

/* Output rows [oy0, oy1) of one image's max pooling into y (row oy0 at y[0]), from
 * its input rows from row0 on (row row0 at x[0]; no window of these rows reaches
 * above it), in the variant `isa` names (the same bits in each); with idx (not NULL)
 * also kern_maxpool_argmax's index of those rows, laid out as y. */
void maxpool_rows(KIsa isa, const KPool *p, const float *x, int64_t row0, int64_t oy0, int64_t oy1, float *y,
                  int32_t *idx);

/* The cells of row oy of image n of q's input that windows [px0, px1) of that row of
 * windows route a gradient to: where the index idx names a cell of row oy (and, with yv
 * not NULL, the pooled value yv > 0: relu's mask), the pooled gradient dy + 0 when it is
 * not 0.  Windows must not overlap nor pad (stride = size, no padding: each cell has one
 * window at most).  In the order of the windows then channels: each channel's cells in
 * ascending columns.  Writes at most (px1 - px0) * q->c of column ox, channel f, value
 * g; returns how many. */
int64_t maxpool_row_hits(const KPool *q, const int32_t *idx, const float *yv, const float *dy, int64_t n, int64_t oy,
                         int64_t px0, int64_t px1, int32_t *ox, int32_t *f, float *g);

#endif
