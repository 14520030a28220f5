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
 * no padding: each cell has one window at most), and a row of windows hold at most
 * POOL_HITS_MAX channels in all and its window rows times channels be at most
 * POOL_HITS_BUCKETS (maxpool_hits_ok).  A pooled row's hits are found once (in the
 * variant `isa` names: the same in each), sorted (stably, by a counting sort) by the
 * input row they fall on and their channel, and kept in a PoolHits for the rows after
 * it: a channel's hits on one input row in ascending columns, as the scatter's output
 * holds them. */
enum { POOL_HITS_MAX = 16384, POOL_HITS_BUCKETS = 1024, POOL_HITS_MAX_KH = 16 };
typedef struct PoolHits {
    int64_t n, py;                       /* the pooled row held (n < 0: none) */
    int32_t at[POOL_HITS_BUCKETS + 2];   /* channel c's hits on window row r: [at[b], at[b + 1]), b = r * c_ + c */
    int32_t ox[POOL_HITS_MAX];           /* their columns */
    float g[POOL_HITS_MAX];              /* their gradients */
} PoolHits;
bool maxpool_hits_ok(const KPool *q);
/* The hits of channel c on input row oy of image n, in ascending columns: [*first,
 * *first + returned) of h's arrays. */
int64_t maxpool_row_hits(KIsa isa, const KPool *q, const int32_t *idx, const float *yv, const float *dy, int64_t n,
                         int64_t oy, int64_t c, PoolHits *h, int64_t *first);

#endif
