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

/* The cells of q's input that its windows route a gradient to: where the index idx
 * names one (and, with yv not NULL, the pooled value yv > 0: relu's mask), the pooled
 * gradient dy + 0 when it is not 0.  Windows must not overlap nor pad (stride = size,
 * no padding: each cell has one window at most) and a row of windows hold at most
 * POOL_HITS_MAX channels in all (maxpool_hits_ok).  A pooled row's hits are found once,
 * sorted (stably) by the input row they fall on, and kept in a PoolHits for the rows
 * after it. */
enum { POOL_HITS_MAX = 2048, POOL_HITS_MAX_KH = 16 };
typedef struct PoolHits {
    int64_t n, py;                      /* the pooled row held (n < 0: none) */
    int32_t at[POOL_HITS_MAX_KH + 1];   /* the hits of its window row r: [at[r], at[r + 1]) */
    int32_t ox[POOL_HITS_MAX], f[POOL_HITS_MAX];   /* column, channel */
    float g[POOL_HITS_MAX];
} PoolHits;
bool maxpool_hits_ok(const KPool *q);
/* The hits of input row oy of image n, in the order of the windows then channels (each
 * channel's in ascending columns): [*first, *first + returned) of h's arrays. */
int64_t maxpool_row_hits(const KPool *q, const int32_t *idx, const float *yv, const float *dy, int64_t n, int64_t oy,
                         PoolHits *h, int64_t *first);

#endif
