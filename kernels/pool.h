/* Internal to kernels/ (kern.h stays the kernels' one public interface): the max
 * pooling that conv.c's conv2d_maxpool runs on the convolution rows in its scratch. */
#ifndef GRAPHC_KERN_POOL_H
#define GRAPHC_KERN_POOL_H
#include "kernels/kern.h"

/* Output rows [oy0, oy1) of one image's max pooling into y (row oy0 at y[0]), from
 * its input rows from row0 on (row row0 at x[0]; no window of these rows reaches
 * above it). */
void maxpool_rows(const KPool *p, const float *x, int64_t row0, int64_t oy0, int64_t oy1, float *y);

#endif
