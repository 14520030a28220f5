/* The structure-aware fuzz targets read their input as a recipe: numbers taken from the
 * front, 0 once the bytes run out (so every input, even an empty one, is a recipe). */
#ifndef GRAPHC_FUZZ_RECIPE_H
#define GRAPHC_FUZZ_RECIPE_H
#include <stddef.h>
#include <stdint.h>

typedef struct Recipe {
    const uint8_t *p;
    size_t n;
} Recipe;

/* The next nbytes (1 to 4) as a big-endian number. */
static inline uint32_t take(Recipe *r, int nbytes)
{
    uint32_t v = 0;
    for (int i = 0; i < nbytes; i++) {
        v = v << 8 | (r->n ? *r->p : 0);
        if (r->n) r->p++, r->n--;
    }
    return v;
}

#endif
