/* Persistent state: allocation and seeded initialisation of every var. */
#include <math.h>
#include <string.h>
#include "exec/exec.h"
#include "util/rng.h"

/* FNV-1a: a var's random stream comes from its name, not its position. */
static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static void init_var(const Var *v, float *data, size_t n, uint64_t seed)
{
    uint64_t stream = name_hash(v->name);
    switch (v->init) {
    case INIT_ZEROS: memset(data, 0, n * sizeof *data); return;
    case INIT_ONES: for (size_t i = 0; i < n; i++) data[i] = 1; return;
    case INIT_CONSTANT: for (size_t i = 0; i < n; i++) data[i] = v->init_a; return;
    case INIT_UNIFORM: case INIT_GLOROT_UNIFORM: {
        float lo = v->init_a, hi = v->init_b;
        if (v->init == INIT_GLOROT_UNIFORM) {
            hi = sqrtf(6.0f / (float)(v->fan_in + v->fan_out));
            lo = -hi;
        }
        for (size_t i = 0; i < n; i++) data[i] = lo + (hi - lo) * rng_unit(rng_at(seed, stream, i));
        return;
    }
    case INIT_NORMAL: case INIT_HE_NORMAL: {
        float mean = v->init_a, sd = v->init_b;
        if (v->init == INIT_HE_NORMAL) { mean = 0; sd = sqrtf(2.0f / (float)v->fan_in); }
        for (size_t i = 0; i < n; i++) {
            /* Box-Muller on two counter-based uniforms; u1 in (0, 1] */
            double u1 = 1.0 - rng_unit(rng_at(seed, stream, 2 * i));
            double u2 = rng_unit(rng_at(seed, stream, 2 * i + 1));
            data[i] = mean + sd * (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        }
        return;
    }
    case INIT_COUNT: break;
    }
}

int weights_init(Weights *w, const Graph *g, uint64_t seed, DiagSink *d)
{
    memset(w, 0, sizeof *w);
    w->n = g->nvars;
    size_t nv = (size_t)(g->nvars ? g->nvars : 1);
    w->data = gc_calloc(nv, sizeof *w->data);
    w->names = gc_calloc(nv, sizeof *w->names);
    w->shapes = gc_calloc(nv, sizeof *w->shapes);
    w->roles = gc_calloc(nv, sizeof *w->roles);
    w->version = gc_calloc(nv, sizeof *w->version);
    if (!w->data || !w->names || !w->shapes || !w->roles || !w->version) goto oom;
    for (int i = 0; i < g->nvars; i++) {
        const Var *v = &g->vars[i];
        int64_t n = shape_numel(&v->shape);
        size_t bytes;
        if (n < 0 || !gc_mul_size((size_t)n, sizeof(float), &bytes)) {
            diag_plain(d, "parameter '%s' is too large", v->name);
            weights_free(w);
            return -1;
        }
        w->data[i] = gc_malloc_aligned(bytes, 64);   /* as the arena's tensors (memplan.h) */
        if (!w->data[i]) {
            diag_plain(d, "out of memory allocating parameter '%s' (%zu bytes)", v->name, bytes);
            weights_free(w);
            return -1;
        }
        w->names[i] = v->name;
        w->shapes[i] = v->shape;
        w->roles[i] = v->role;
        init_var(v, w->data[i], (size_t)n, seed);
        w->version[i] = 1;
    }
    return 0;
oom:
    diag_plain(d, "out of memory");
    weights_free(w);
    return -1;
}

void weights_free(Weights *w)
{
    if (w->data)
        for (int i = 0; i < w->n; i++) gc_free(w->data[i]);
    gc_free(w->data);
    gc_free(w->names);
    gc_free(w->shapes);
    gc_free(w->roles);
    gc_free(w->version);
    memset(w, 0, sizeof *w);
}

void weights_copy_matching(Weights *dst, const Weights *src)
{
    for (int i = 0; i < dst->n; i++)
        for (int j = 0; j < src->n; j++)
            if (strcmp(dst->names[i], src->names[j]) == 0 && shape_eq(&dst->shapes[i], &src->shapes[j])) {
                memcpy(dst->data[i], src->data[j], (size_t)shape_numel(&dst->shapes[i]) * sizeof(float));
                weights_touch(dst, i);
                break;
            }
    dst->step = src->step;
}

void weights_touch(Weights *w, int v)
{
    if (!w->version)
        return;
    for (int i = v < 0 ? 0 : v; i < (v < 0 ? w->n : v + 1); i++) w->version[i]++;
}
