/* The vector loops of max pooling (kernels/pool.c), written once over a vector of VL
 * floats in GCC vector types.  Not a header to include anywhere else: pool.c includes
 * it once per variant, after it defines
 *   VL          lanes per vector
 *   NAME(x)     x suffixed with the variant's name
 *   ISA_FN      attributes of a function of the variant (its target)
 *   ISA_INLINE  the same, static and always inlined
 * Memory-bound loops: one vector instruction does what four did in SSE2, which more
 * than doubled the argmax's speed on a Zen 5 core (the loops were issue-bound).  Every
 * select is bitwise and every compare the scalar one, so each variant gives exactly the
 * scalar loop's values (the tails past the last whole vector are that loop). */

typedef float NAME(vf) __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t NAME(vi) __attribute__((vector_size(VL * sizeof(int32_t))));

ISA_INLINE NAME(vf) NAME(ld)(const float *p)
{
    NAME(vf) v;
    memcpy(&v, p, sizeof v);
    return v;
}

ISA_INLINE NAME(vi) NAME(ldi)(const int32_t *p)
{
    NAME(vi) v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* mask ? a : b, lane by lane, for a mask of all-ones or zero lanes */
ISA_INLINE NAME(vf) NAME(sel)(NAME(vi) m, NAME(vf) a, NAME(vf) b)
{
    return (NAME(vf))((m & (NAME(vi))a) | (~m & (NAME(vi))b));
}

/* io[c] = the cell of the window's maximum of channel c (pool.c's argmax_window rule:
 * px[0] first, a later cell only when strictly greater) */
ISA_FN static void NAME(argmax_window)(const float *const *px, const int32_t *cell, int ncell, int64_t C, int32_t *io)
{
    int64_t c = 0;
    for (; c + VL <= C; c += VL) {
        NAME(vf) best = NAME(ld)(px[0] + c);
        NAME(vi) at = (NAME(vi)){ 0 } + cell[0];
        for (int k = 1; k < ncell; k++) {
            NAME(vf) v = NAME(ld)(px[k] + c);
            NAME(vi) gt = v > best;
            best = NAME(sel)(gt, v, best);
            at = (gt & cell[k]) | (~gt & at);
        }
        memcpy(io + c, &at, sizeof at);
    }
    for (; c < C; c++) {
        float best = px[0][c];
        int32_t at = cell[0];
        for (int k = 1; k < ncell; k++)
            if (px[k][c] > best) best = px[k][c], at = cell[k];
        io[c] = at;
    }
}

/* yo[c] = the window's maximum of channel c, by the same rule */
ISA_FN static void NAME(max_window)(const float *const *px, int ncell, int64_t C, float *yo)
{
    int64_t c = 0;
    for (; c + VL <= C; c += VL) {
        NAME(vf) best = NAME(ld)(px[0] + c);
        for (int k = 1; k < ncell; k++) {
            NAME(vf) v = NAME(ld)(px[k] + c);
            best = NAME(sel)(v > best, v, best);
        }
        memcpy(yo + c, &best, sizeof best);
    }
    for (; c < C; c++) {
        float best = px[0][c];
        for (int k = 1; k < ncell; k++)
            best = px[k][c] > best ? px[k][c] : best;
        yo[c] = best;
    }
}

/* d[c] = 0 + g[c] where io[c] names `cell` (and, with yo, yo[c] > 0), else +0: one
 * input pixel of a scatter whose windows do not overlap */
ISA_FN static void NAME(scatter_pixel)(const int32_t *io, const float *yo, const float *g, int32_t cell, int64_t C,
                                       float *d)
{
    const NAME(vf) zero = { 0 };
    int64_t c = 0;
    for (; c + VL <= C; c += VL) {
        NAME(vi) hit = NAME(ldi)(io + c) == cell;
        if (yo) hit &= NAME(ld)(yo + c) > zero;
        NAME(vf) v = NAME(sel)(hit, NAME(ld)(g + c) + zero, zero);
        memcpy(d + c, &v, sizeof v);
    }
    for (; c < C; c++)
        d[c] = io[c] == cell && (!yo || yo[c] > 0.0f) ? g[c] + 0.0f : 0.0f;
}

/* A run of output pixels whose windows lie inside the image (pool.c's PoolRun): the
 * argmax (io) and the maximum (yo; either may be NULL) of each, by the same rule, the
 * window's cells at the same offsets from every pixel's first.  n is the window's
 * cells, a constant where the function is inlined for the 2x2 and 4x4 windows, which
 * the compiler then unrolls. */
ISA_INLINE void NAME(run_n)(const PoolRun *r, int n, int32_t *io, float *yo)
{
    const int64_t C = r->C;
    for (int64_t i = 0; i < r->npix; i++) {
        const float *x = r->x + i * r->pstep;
        const int32_t cell0 = r->cell0 + (int32_t)i * r->cstep;
        int64_t c = 0;
        for (; c + VL <= C; c += VL) {
            NAME(vf) best = NAME(ld)(x + r->off[0] + c);
            NAME(vi) at = (NAME(vi)){ 0 } + cell0;
            for (int k = 1; k < n; k++) {
                NAME(vf) v = NAME(ld)(x + r->off[k] + c);
                NAME(vi) gt = v > best;
                best = NAME(sel)(gt, v, best);
                at = (gt & (cell0 + r->doff[k])) | (~gt & at);
            }
            if (io) memcpy(io + i * C + c, &at, sizeof at);
            if (yo) memcpy(yo + i * C + c, &best, sizeof best);
        }
        for (; c < C; c++) {
            float best = x[r->off[0] + c];
            int32_t at = cell0;
            for (int k = 1; k < n; k++)
                if (x[r->off[k] + c] > best) best = x[r->off[k] + c], at = cell0 + r->doff[k];
            if (io) io[i * C + c] = at;
            if (yo) yo[i * C + c] = best;
        }
    }
}

ISA_FN static void NAME(run)(const PoolRun *r, int32_t *io, float *yo)
{
    if (r->ncell == 4)
        NAME(run_n)(r, 4, io, yo);
    else if (r->ncell == 16)
        NAME(run_n)(r, 16, io, yo);
    else
        NAME(run_n)(r, r->ncell, io, yo);
}

static const PoolVariant NAME(pool_variant) = { NAME(argmax_window), NAME(max_window), NAME(scatter_pixel), NAME(run) };
