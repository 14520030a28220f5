/* A counter-based random number generator: the value at (seed, stream, index) is a
 * pure function of the three, so a dropout mask, a weight initializer or a shuffle
 * gives the same numbers whatever the order of execution or the thread count.
 * The mixer is SplitMix64's finalizer (Steele, Lea, Flood 2014), which passes
 * BigCrush when fed a Weyl sequence, as here. */
#ifndef GRAPHC_RNG_H
#define GRAPHC_RNG_H
#include <stdint.h>

static inline uint64_t rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rng_at(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t key = rng_mix(seed + 0x9E3779B97F4A7C15ull * (stream + 1));
    return rng_mix(key + 0x9E3779B97F4A7C15ull * (index + 1));
}

/* Uniform in [0, 1) with 24 random bits: every value exactly representable. */
static inline float rng_unit(uint64_t bits) { return (float)(bits >> 40) * 0x1p-24f; }

/* Uniform integer in [0, n), n > 0, by Lemire's multiply-shift (bias < n / 2^64). */
static inline uint64_t rng_below(uint64_t bits, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)bits * n) >> 64);
}

#endif
