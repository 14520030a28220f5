/* Splitting a memory-bound loop over a pool: n elements cut into one contiguous range
 * per thread, each a multiple of `unit` long (the last takes the rest), when there are
 * enough to pay for waking the pool.  Each range is computed exactly as the whole
 * would be, so results do not depend on the thread count.  For kernels and for the
 * dispatch that splits elementwise kernels over a pool. */
#ifndef GRAPHC_KERN_SPLIT_H
#define GRAPHC_KERN_SPLIT_H
#include <stddef.h>

/* Fewer elements than this are not worth a wake-up: a pass over 128K floats in L2 takes
 * some 20 us on one thread, a wake-up and the wait for it several us on a quiet
 * machine and far more on a loaded one (charlm's 1024 x 64 activations ran slower
 * split, at 1 << 15: 16.8 -> 15.3 ms CPU per step on 2 threads, Zen 5). */
enum { SPLIT_MIN = 1 << 17 };

typedef struct Range {
    size_t n, unit;   /* elements, and the granule ranges are multiples of */
    int parts;
} Range;

static inline Range split_range(size_t n, size_t unit, int threads)
{
    Range r = { n, unit ? unit : 1, 1 };
    if (threads > 1 && n >= SPLIT_MIN && n / r.unit >= (size_t)threads) r.parts = threads;
    return r;
}

static inline void range_of(const Range *r, int part, size_t *lo, size_t *hi)
{
    size_t units = r->n / r->unit;
    *lo = units * (size_t)part / (size_t)r->parts * r->unit;
    *hi = part == r->parts - 1 ? r->n : units * (size_t)(part + 1) / (size_t)r->parts * r->unit;
}

#endif
