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

/* The bucket (window row r, channel c) of each of a pooled row's cells, none (kh * c)
 * where it routes nothing, and its column in the window's row (rel - r * w), with no
 * branch on the data; MASK: relu's, yv > 0.  Vectorized by the compiler (pool.c's
 * options), as wide as the variant. */
ISA_INLINE void NAME(hits_buckets_n)(const bool MASK, const KPool *q, const int32_t *idx, const float *yv,
                                     const float *dy, int32_t base, int32_t *bucket, int32_t *col)
{
    const int32_t C = (int32_t)q->c, w = (int32_t)q->w, span = (int32_t)(q->kh * q->w), none = (int32_t)q->kh * C;
    const double inv = 1.0 / (double)w;
    for (int32_t e0 = 0; e0 < (int32_t)q->ow * C; e0 += C)
        for (int32_t c = 0; c < C; c++) {
            const int32_t e = e0 + c, rel = idx[e] - base;
            int32_t r = (int32_t)((double)rel * inv);   /* rel / w to within one, then exact */
            r -= r * w > rel;
            r += (r + 1) * w <= rel;
            const bool hit = ((uint32_t)rel < (uint32_t)span) & (dy[e] + 0.0f != 0.0f) & (!MASK || yv[e] > 0.0f);
            bucket[e] = hit ? r * C + c : none;
            col[e] = rel - r * w;
        }
}

ISA_FN static void NAME(hits_buckets)(const KPool *q, const int32_t *idx, const float *yv, const float *dy, int32_t base,
                                      int32_t *bucket, int32_t *col)
{
    if (yv)
        NAME(hits_buckets_n)(true, q, idx, yv, dy, base, bucket, col);
    else
        NAME(hits_buckets_n)(false, q, idx, NULL, dy, base, bucket, col);
}

/* Each of ns (1 or 2) ColsumSegs (pool.c) over npix pooled pixels: acc[c] += g[c] of
 * each pixel whose index io[c] names a cell in [lo, lo + len) (and, with yo, yo[c] >
 * 0), pixel after pixel, each channel its own chain of doubles, VL / 2 channels to a
 * vector.  A pixel that routes nothing there adds +0, which leaves the sum as it was
 * (it starts at +0, so it is never -0).  Two segments (two parts' chains) go in
 * lockstep: one chain alone waits for each add (0.8 ns a pixel against 0.53 for two,
 * Zen 5). */
enum { NAME(DL) = VL / 2 };
typedef double NAME(vd) __attribute__((vector_size(NAME(DL) * sizeof(double))));
typedef float NAME(hf) __attribute__((vector_size(NAME(DL) * sizeof(float))));
typedef int32_t NAME(hi) __attribute__((vector_size(NAME(DL) * sizeof(int32_t))));
typedef uint32_t NAME(hu) __attribute__((vector_size(NAME(DL) * sizeof(uint32_t))));

/* pixel i's term of channels [c, c + VL / 2) of segment e */
ISA_INLINE NAME(vd) NAME(colsum_term)(const bool MASK, const ColsumSeg *e, int64_t i, int64_t C, int64_t c)
{
    NAME(hi) at;
    NAME(hf) v, y;
    memcpy(&at, e->io + i * C + c, sizeof at);
    memcpy(&v, e->g + i * C + c, sizeof v);
    NAME(hi) hit = (NAME(hi))((NAME(hu))at - (uint32_t)e->lo < e->len);
    if (MASK) {
        memcpy(&y, e->yo + i * C + c, sizeof y);
        hit &= y > (NAME(hf)){ 0 };
    }
#ifdef POOL_CVT_PD
    return (NAME(vd))POOL_CVT_PD((NAME(hf))(hit & (NAME(hi))v));
#else
    return __builtin_convertvector((NAME(hf))(hit & (NAME(hi))v), NAME(vd));
#endif
}

ISA_INLINE void NAME(colsum_n)(const bool MASK, const int NS, const bool PF, const ColsumSeg *sg, int64_t npix, int64_t C)
{
    const int64_t DL = NAME(DL);
    const ColsumSeg e0 = sg[0], e1 = sg[NS - 1];
    int64_t c = 0;
    for (; c + DL <= C; c += DL) {
        NAME(vd) s0, s1;
        memcpy(&s0, e0.acc + c, sizeof s0);
        memcpy(&s1, e1.acc + c, sizeof s1);
        for (int64_t i = 0; i < npix; i++) {
            if (PF) {   /* the next pooled row's, on its first conv row's pass */
                __builtin_prefetch(e0.io + i * C + c + e0.pf);
                __builtin_prefetch(e0.g + i * C + c + e0.pf);
                if (MASK) __builtin_prefetch(e0.yo + i * C + c + e0.pf);
                if (NS == 2) {
                    __builtin_prefetch(e1.io + i * C + c + e1.pf);
                    __builtin_prefetch(e1.g + i * C + c + e1.pf);
                    if (MASK) __builtin_prefetch(e1.yo + i * C + c + e1.pf);
                }
            }
            s0 += NAME(colsum_term)(MASK, &e0, i, C, c);
            if (NS == 2)
                s1 += NAME(colsum_term)(MASK, &e1, i, C, c);
        }
        if (NS == 2)
            memcpy(e1.acc + c, &s1, sizeof s1);
        memcpy(e0.acc + c, &s0, sizeof s0);
    }
    for (; c < C; c++)
        for (int k = 0; k < NS; k++) {
            const ColsumSeg *e = &sg[k];
            double s = e->acc[c];
            for (int64_t i = 0; i < npix; i++) {
                const bool hit = (uint32_t)e->io[i * C + c] - (uint32_t)e->lo < e->len && (!MASK || e->yo[i * C + c] > 0.0f);
                s += hit ? (double)e->g[i * C + c] : 0.0;
            }
            e->acc[c] = s;
        }
}

ISA_FN static void NAME(colsum)(const ColsumSeg *sg, int ns, int64_t npix, int64_t C)
{
    const bool pf = sg[0].pf && sg[ns - 1].pf;
    if (ns == 2 && pf)
        sg[0].yo ? NAME(colsum_n)(true, 2, true, sg, npix, C) : NAME(colsum_n)(false, 2, true, sg, npix, C);
    else if (ns == 2)
        sg[0].yo ? NAME(colsum_n)(true, 2, false, sg, npix, C) : NAME(colsum_n)(false, 2, false, sg, npix, C);
    else
        sg[0].yo ? NAME(colsum_n)(true, 1, false, sg, npix, C) : NAME(colsum_n)(false, 1, false, sg, npix, C);
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

static const PoolVariant NAME(pool_variant) = { NAME(argmax_window), NAME(max_window), NAME(scatter_pixel), NAME(run),
                                                NAME(hits_buckets), NAME(colsum) };
