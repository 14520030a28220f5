/* The micro-kernels of the direct convolutions and Adam's loop, written once over a
 * vector of VL floats (docs/kernels.md).  Not a header to include anywhere else: each
 * kernels/isa_*.c includes it once, after it defines
 *   VL, V, VM      lanes per vector, the vector type, a mask of the first n lanes
 *   ISA_FN         attributes of a function of the variant (its target)
 *   ISA_INLINE     the same, static and always inlined
 *   NAME(x)        x suffixed with the variant's name;  ISA_ENUM  its KIsa
 *   NV_MAX         vectors of filters per tile (a group of NV_MAX * VL filters)
 *   TILE_NV1, TILE_NV2, TILE_NV4   pixels (taps) per tile with 1, 2 or 4 vectors: as
 *                  many as keep the accumulators, the filter vectors and a broadcast
 *                  in registers (literals 3, 6 or 12, for CASES)
 *   v_zero() v_load(p) v_store(p, v) v_bcast(p) v_fma(a, b, c) = a*b + c, rounded once
 *   v_add(a, b) v_relu(a) = max(a, +0) (a NaN gives +0, as kern_unary's relu)
 *   v_mask(n) v_load_m(p, m) (zero past the mask) v_store_m(p, v, m)
 *   PLANAR_P       vectors of pixels per planar tile (x 8 filters: accumulators); undefined:
 *                  no planar path (conv_direct.c takes the strip path)
 *   v_tr8(a)       a[f] (f < 8): filter f at VL pixels -> the [VL][8] block they make,
 *                  row-major, as 8 vectors
 *   and, for Adam (ISA_ADAM): v_set1 v_mul v_sub v_div v_sqrt, correctly rounded;
 *   ISA_NARROW_ROWS: the file makes its KernVariant itself (from NAME(fwd_row) ...).
 * Every output is one chain of FMAs in a fixed order of taps (forward) or of pixels
 * (filter gradient), whatever the tile, so the way a row is cut into tiles never
 * changes a bit; the variants differ from one another only where the portable one
 * rounds a*b + c twice. */

#ifndef GRAPHC_NO_DIRECT_CONV

#define TILE_MAX 12

/* x kept in a vector register here (an empty asm that claims to change it), so that
 * GCC does not fold its load into every instruction that reads it */
#if defined(__x86_64__) || defined(__i386__)
#define v_keep(x) __asm__("" : "+v"(x))
#else
#define v_keep(x) ((void)0)
#endif

/* switch cases P = 1 .. N with P a constant in each, so that a tile's accumulators are
 * registers */
#define CASES_3(C) case 1: C(1); break; case 2: C(2); break; case 3: C(3); break;
#define CASES_6(C) CASES_3(C) case 4: C(4); break; case 5: C(5); break; case 6: C(6); break;
#define CASES_12(C)                                                                         \
    CASES_6(C) case 7: C(7); break; case 8: C(8); break; case 9: C(9); break;               \
    case 10: C(10); break; case 11: C(11); break; case 12: C(12); break;
#define CASES_(N, C) CASES_##N(C)
#define CASES(N, C) CASES_(N, C)

/* A group of filters [f0, f0 + nv*VL): nv vectors, the last with `last` lanes in F
 * (VL when it is full). */
typedef struct NAME(Group) {
    int nv, pmax, last;
    VM mask;   /* the last vector's lanes */
} NAME(Group);

ISA_INLINE NAME(Group) NAME(group)(int64_t left)
{
    int64_t need = (left + VL - 1) / VL;
    NAME(Group) g;
#if NV_MAX >= 4
    g.nv = need >= 4 ? 4 : need >= 2 ? 2 : 1;
    g.pmax = g.nv == 4 ? TILE_NV4 : g.nv == 2 ? TILE_NV2 : TILE_NV1;
#else
    g.nv = need >= 2 ? 2 : 1;
    g.pmax = g.nv == 2 ? TILE_NV2 : TILE_NV1;
#endif
    int64_t last = left - (int64_t)(g.nv - 1) * VL;
    g.last = last < VL ? (int)last : VL;
    g.mask = v_mask(g.last);
    return g;
}

/* Forward tile: P pixels x NV vectors of filters, over the taps of kernel rows
 * [ky0, ky1); pixel p's patch at xs + xo[p]; wv[v]: vector v's filters at tap 0; bias:
 * the group's (NULL: none). */
ISA_INLINE void NAME(fwd_tile)(const int P, const int NV, const FwdRow *r, const float *xs, const int64_t *xo,
                               const float *const *wv, const NAME(Group) *g, const float *bias, float *y,
                               const char *pf, int pf_ky)
{
    V a[TILE_MAX][NV_MAX];
#pragma GCC unroll 12
    for (int p = 0; p < P; p++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            a[p][v] = v_zero();
    int64_t xoff[TILE_MAX];
#pragma GCC unroll 12
    for (int p = 0; p < P; p++)
        xoff[p] = xo[p];
    for (int ky = r->ky0; ky < r->ky1; ky++) {
        const float *xr = xs + ky * r->rowlen;
        const int64_t tb = (int64_t)ky * r->kwc * r->wtap;
        for (int l = 0; l < pf_ky; l++, pf += 64)
            __builtin_prefetch(pf, 0, 2);
        for (int t = 0; t < r->kwc; t++) {
            V w[NV_MAX];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                w[v] = v_load(wv[v] + tb + t * r->wtap);
                /* in a register: else GCC folds the load into each of the P FMAs that
                 * use it, P loads where one does (from L2 past L1's 48 KiB of filter) */
                v_keep(w[v]);
            }
#pragma GCC unroll 12
            for (int p = 0; p < P; p++) {
                const V b = v_bcast(xr + xoff[p] + t);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    a[p][v] = v_fma(b, w[v], a[p][v]);
            }
        }
    }
    V b[NV_MAX];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        b[v] = !bias ? v_zero() : v < NV - 1 || g->last == VL ? v_load(bias + v * VL) : v_load_m(bias + v * VL, g->mask);
#pragma GCC unroll 12
    for (int p = 0; p < P; p++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            V o = a[p][v];
            if (bias)   /* y + b, as kern_bias_act */
                o = v_add(o, b[v]);
            if (r->relu)
                o = v_relu(o);
            float *dst = y + p * r->F + v * VL;
            if (v < NV - 1 || g->last == VL)
                v_store(dst, o);
            else
                v_store_m(dst, o, g->mask);
        }
}

ISA_FN static void NAME(fwd_row)(const FwdRow *r)
{
    const int64_t F = r->F;
    for (int64_t f0 = 0; f0 < F;) {
        const NAME(Group) g = NAME(group)(F - f0);
        const float *wv[NV_MAX], *bias = r->bias ? r->bias + f0 : NULL;
        for (int v = 0; v < g.nv; v++) {
            int64_t fv = f0 + (int64_t)v * VL;
            wv[v] = r->wp + fv / PACK_BLOCK * r->wblock + fv % PACK_BLOCK;
        }
        /* the rows' pixels, one run, in nearly equal tiles (14 = 5 + 5 + 4: no short
         * tile waiting on FMA latency); a tile may span rows (7x7 maps: 5 rows of 7
         * are 6 tiles of 5-6 pixels, not 10 of 3-4, each reading the whole filter) */
        const int64_t npix = r->npix * (r->rows > 1 ? r->rows : 1);
        const int64_t ntiles = (npix + g.pmax - 1) / g.pmax;
        /* the next band's input, a few lines per kernel row of each tile of the first
         * group of filters: its rows then come from L2 rather than memory (issued all
         * at once, prefetches stall the core on the L1's miss buffers) */
        const char *pf = f0 == 0 ? r->pf : NULL;
        const int nky = r->ky1 - r->ky0;
        const int pf_ky = pf && nky > 0 ? (int)((r->pf_lines + ntiles * nky - 1) / (ntiles * nky)) : 0;
        const char *pf_end = pf ? pf + 64 * r->pf_lines : NULL;
        for (int64_t i = 0, q = 0; i < ntiles; i++) {
            const int pfk = pf && pf < pf_end ? pf_ky : 0;
            const int P = (int)(npix / ntiles + (i < npix % ntiles));
            int64_t xo[TILE_MAX];
            for (int p = 0, gr = (int)(q / r->npix), ox = (int)(q % r->npix); p < P; p++) {
                xo[p] = gr * r->rstep + ox * r->pstep;
                if (++ox == r->npix)
                    ox = 0, gr++;
            }
            float *y = r->y + q * F + f0;
#define FWD1(PP) NAME(fwd_tile)(PP, 1, r, r->xs, xo, wv, &g, bias, y, pf, pfk)
#define FWD2(PP) NAME(fwd_tile)(PP, 2, r, r->xs, xo, wv, &g, bias, y, pf, pfk)
#define FWD4(PP) NAME(fwd_tile)(PP, 4, r, r->xs, xo, wv, &g, bias, y, pf, pfk)
            switch (g.nv) {
#if NV_MAX >= 4
            case 4: switch (P) { CASES(TILE_NV4, FWD4) default: break; } break;
#endif
            case 2: switch (P) { CASES(TILE_NV2, FWD2) default: break; } break;
            default: switch (P) { CASES(TILE_NV1, FWD1) default: break; } break;
            }
#undef FWD1
#undef FWD2
#undef FWD4
            q += P;
            if (pfk)
                pf += 64 * (int64_t)pfk * nky;
        }
        f0 += (int64_t)g.nv * VL;
    }
}

/* Filter-gradient tile: T taps (xs[0 .. T)) x NV vectors of filters, summed over the
 * band's pixels, then added to acc[t * F]; FULL: the last vector is whole. */
ISA_INLINE void NAME(gradw_tile)(const int T, const int NV, const bool FULL, const GradwBand *b, const float *xs,
                                 const float *dy, VM mask, float *acc)
{
    V a[TILE_MAX][NV_MAX];
#pragma GCC unroll 12
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            a[t][v] = v_zero();
    const int64_t F = b->F, pstep = b->pstep;
    for (int64_t gr = b->g0; gr < b->g1; gr++) {
        const float *xr = xs + gr * b->rstep, *dr = dy + gr * b->dyrow;
        for (int64_t ox = 0; ox < b->ow; ox++) {
            V d[NV_MAX];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                d[v] = FULL || v < NV - 1 ? v_load(dr + ox * F + v * VL) : v_load_m(dr + ox * F + v * VL, mask);
            const float *xp = xr + ox * pstep;
#pragma GCC unroll 12
            for (int t = 0; t < T; t++) {
                const V x = v_bcast(xp + t);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    a[t][v] = v_fma(x, d[v], a[t][v]);
            }
        }
    }
#pragma GCC unroll 12
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *dst = acc + t * F + v * VL;
            if (FULL || v < NV - 1)
                v_store(dst, v_add(v_load(dst), a[t][v]));
            else
                v_store_m(dst, v_add(v_load_m(dst, mask), a[t][v]), mask);
        }
}

ISA_FN static void NAME(gradw_band)(const GradwBand *b)
{
    const int64_t F = b->F;
    for (int64_t f0 = 0; f0 < F;) {
        const NAME(Group) g = NAME(group)(F - f0);
        const int ntiles = (b->kwc + g.pmax - 1) / g.pmax;
        for (int i = 0, t0 = 0; i < ntiles; i++) {
            const int T = b->kwc / ntiles + (i < b->kwc % ntiles);
            const float *xs = b->xs + t0, *dy = b->dy + f0;
            float *acc = b->acc + (int64_t)t0 * F + f0;
#define GW(NVC, FULLC, TT) NAME(gradw_tile)(TT, NVC, FULLC, b, xs, dy, g.mask, acc)
#define GW1F(TT) GW(1, true, TT)
#define GW1P(TT) GW(1, false, TT)
#define GW2F(TT) GW(2, true, TT)
#define GW2P(TT) GW(2, false, TT)
#define GW4F(TT) GW(4, true, TT)
#define GW4P(TT) GW(4, false, TT)
            const bool full = g.last == VL;
            switch (g.nv) {
#if NV_MAX >= 4
            case 4:
                if (full) switch (T) { CASES(TILE_NV4, GW4F) default: break; }
                else switch (T) { CASES(TILE_NV4, GW4P) default: break; }
                break;
#endif
            case 2:
                if (full) switch (T) { CASES(TILE_NV2, GW2F) default: break; }
                else switch (T) { CASES(TILE_NV2, GW2P) default: break; }
                break;
            default:
                if (full) switch (T) { CASES(TILE_NV1, GW1F) default: break; }
                else switch (T) { CASES(TILE_NV1, GW1P) default: break; }
                break;
            }
#undef GW
#undef GW1F
#undef GW1P
#undef GW2F
#undef GW2P
#undef GW4F
#undef GW4P
            t0 += T;
        }
        f0 += (int64_t)g.nv * VL;
    }
}

#ifdef PLANAR_P   /* the variants with a planar path (docs/kernels.md) */
/* The planes of a run of n pixels of 3 channels at stride 2 (large.net's first layer):
 * plane (c, ph) = d + (c * 2 + ph) * pw gets src[6k + ph * 3 + c] at k.  GCC 12 does
 * not vectorise this gather of stride 6; v_deint6, where the variant has it, does
 * whole vectors. */
ISA_FN static void NAME(planes6)(const float *src, int64_t n, float *d, int64_t pw, int64_t pf)
{
    int64_t k = 0;
#ifdef V_DEINT6
    k = v_deint6(src, n, d, pw, pf);
    src += 6 * k;
#endif
    float *d0 = d, *d1 = d + pw, *d2 = d + 2 * pw, *d3 = d + 3 * pw, *d4 = d + 4 * pw, *d5 = d + 5 * pw;
    for (; k < n; k++, src += 6) {
        d0[k] = src[0], d2[k] = src[1], d4[k] = src[2];
        d1[k] = src[3], d3[k] = src[4], d5[k] = src[5];
    }
}

/* One step of a window's argmax across its columns: lane l against lane l ^ s (s = 1,
 * then 2, by v_swap), the right one winning where it is larger or, equal, in an
 * earlier row (so the first maximal cell in row-major order wins, as kern_maxpool's
 * strict > over the window's cells in order); v the values, gi the rows' offsets
 * (g * ow), c the columns.  Lanes l with l & s come out meaningless. */
ISA_INLINE void NAME(argmax_step)(const int s, V *v, V *gi, V *c)
{
    const V sv = v_swap(*v, s), sg = v_swap(*gi, s), sc = v_swap(*c, s);
    const VB m = vb_or(vm_lt(*v, sv), vb_and(vm_eq(sv, *v), vm_lt(sg, *gi)));
    *v = vm_sel(m, sv, *v);
    *gi = vm_sel(m, sg, *gi);
    *c = vm_sel(m, sc, *c);
}

/* The pooled epilogue of pixel vector a (8 filters, pixels ox0 .. ox0 + VL - 1 of row
 * g of the windows): folded into the maxima of the windows' rows so far (at m: 8
 * vectors of maxima, then 8 of their rows' offsets; the tile's, in the caller's L1),
 * or, on the last row, pooled across the columns, 4 lanes a window (the first maximal
 * cell wins, as above; without an index the maximum alone, which is the same value:
 * relu left no NaN nor -0) and stored as the pooled pixels ox0 / 4 .. of r->py (and
 * r->pidx).
 * Without an index (`late`, planar_tile) a holds the sums before bias and relu, and
 * they are applied once to each window's maximum: fl(a + b) is monotonic in a and so
 * is relu, so relu(fl(max a + b)) is the maximum of the cells' relu(fl(a + b)), the same
 * value, for 16 fewer operations per pixel vector and row (they compete with the FMAs
 * for the same two ports).  A NaN cell (relu makes it 0) must not win: the maxima
 * start at -inf and take the new cell as the first operand of vmaxps, which returns
 * the second where either is NaN; all NaN: -inf + b, relu 0, as the cells' zeros. */
ISA_INLINE void NAME(planar_pool)(const PlanarRow *r, const int g, V a[8], float *m, int64_t ox0)
{
    V gi[8];
    const bool ix = r->pidx != NULL, late = !ix && r->relu;
#pragma GCC unroll 8
    for (int f = 0; f < 8; f++) {
        gi[f] = v_zero();
        if (g == 0 && late)
            a[f] = v_max(a[f], v_set1(-__builtin_inff()));
        else if (g > 0 && !ix)
            a[f] = v_max(a[f], v_load(m + f * VL));
        else if (g > 0) {
            const V old = v_load(m + f * VL);
            const VB gt = vm_lt(old, a[f]);
            a[f] = vm_sel(gt, a[f], old);
            /* row 0's offsets are zeros, never stored */
            gi[f] = vm_sel(gt, v_set1((float)(g * r->ow)), g > 1 ? v_load(m + (8 + f) * VL) : v_zero());
        }
    }
    if (g < r->G - 1) {
#pragma GCC unroll 8
        for (int f = 0; f < 8; f++) {
            v_store(m + f * VL, a[f]);
            if (ix && g > 0)
                v_store(m + (8 + f) * VL, gi[f]);
        }
        return;
    }
    V cell[8];
    const V col = v_add(v_load(r->iota), v_set1((float)ox0));
#pragma GCC unroll 8
    for (int f = 0; f < 8; f++) {
        cell[f] = v_zero();
        if (!ix) {
            const V t = v_max(a[f], v_swap(a[f], 1));
            a[f] = v_max(t, v_swap(t, 2));
            if (late) {   /* as planar_tile would have, per cell */
                if (r->bias)
                    a[f] = v_add(a[f], v_bcast(r->bias + f));
                a[f] = v_relu(a[f]);
            }
            continue;
        }
        V c = col;
        NAME(argmax_step)(1, &a[f], &gi[f], &c);
        NAME(argmax_step)(2, &a[f], &gi[f], &c);
        cell[f] = vm_float(vm_iadd(v_cvti(v_add(gi[f], c)), vm_seti(r->cell0)));
    }
    const int64_t F = r->F, np = (r->npix - ox0) / 4 < VL / 4 ? (r->npix - ox0) / 4 : VL / 4;
    float *y = r->py + ox0 / 4 * F;
    int32_t *idx = ix ? r->pidx + ox0 / 4 * F : NULL;
    V o[2], oi[2];
    v_pool_tr(a, o);
    if (ix)
        v_pool_tr(cell, oi);
    if (F == 8 && np == VL / 4) {
        v_store(y, o[0]);
        v_store(y + VL, o[1]);
        if (ix) {
            v_store((float *)idx, oi[0]);
            v_store((float *)idx + VL, oi[1]);
        }
        return;
    }
    float t[2 * VL], ti[2 * VL];
    v_store(t, o[0]);
    v_store(t + VL, o[1]);
    if (ix) {
        v_store(ti, oi[0]);
        v_store(ti + VL, oi[1]);
    }
    for (int64_t i = 0; i < np; i++) {
        memcpy(y + i * F, t + 8 * i, (size_t)F * sizeof *y);
        if (ix)
            memcpy(idx + i * F, ti + 8 * i, (size_t)F * sizeof *idx);
    }
}

/* Planar tile (PlanarRow): P vectors of VL pixels x 8 filters of row g, one FMA per
 * tap, pixel vector and filter, the taps in fwd_tile's order (ky, kx, c): each output
 * the same chain of FMAs as there, so the same bits.  Then bias and relu, and the
 * tile transposed (v_tr8) into pixels x filters, as y is laid out, or pooled (m: the
 * tile's maxima so far).  Fills [i0, i1)'s sources are prefetched from pf0 on, `lines`
 * lines each, a few per kernel column. */
ISA_INLINE void NAME(planar_tile)(const int P, const PlanarRow *r, const int g, int64_t ox, float *m, int64_t pf0,
                                  int lines, int i0, int i1)
{
    V a[PLANAR_P][8];
#pragma GCC unroll 4
    for (int p = 0; p < P; p++)
#pragma GCC unroll 8
        for (int f = 0; f < 8; f++)
            a[p][f] = v_zero();
    const int C = r->c, sw = r->sw, ky0 = r->ky0[g], ky1 = r->ky1[g];
    const int64_t pw = r->pw;
    const float *const *xr = r->xr + g * r->sh;
    const int nkk = (ky1 - ky0) * r->kw, per = nkk > 0 ? (lines + nkk - 1) / nkk : 0;
    int li = 0;
    for (int ky = ky0; ky < ky1; ky++)
        /* kx's phase kx % sw and column kx / sw counted, not divided: an idiv per tap
         * was a few % of the tile (sw is not a constant here) */
        for (int kx = 0, ph = 0, kq = 0; kx < r->kw; kx++) {
            for (int l = 0; l < per && li < lines; l++, li++)
                for (int i = i0; i < i1; i++)
                    __builtin_prefetch((const char *)(r->fill_src[i] + pf0) + 64 * li, 0, 3);
            const float *xk = xr[ky] + (int64_t)ph * pw + kq + ox;
            const float *wk = r->w + (ky * r->kw + kx) * C * 8;
            for (int c = 0; c < C; c++) {
                V x[PLANAR_P];
#pragma GCC unroll 4
                for (int p = 0; p < P; p++)
                    x[p] = v_load(xk + c * sw * pw + p * VL);
#pragma GCC unroll 8
                for (int f = 0; f < 8; f++) {
                    const V w = v_bcast(wk + c * 8 + f);
#pragma GCC unroll 4
                    for (int p = 0; p < P; p++)
                        a[p][f] = v_fma(x[p], w, a[p][f]);
                }
            }
            if (++ph == sw)
                ph = 0, kq++;
        }
    const int64_t F = r->F;
    const bool late = r->pooled && !r->pidx && r->relu;   /* bias and relu after the pool: planar_pool */
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
#pragma GCC unroll 8
        for (int f = 0; f < 8 && !late; f++) {
            if (r->bias)   /* y + b, as kern_bias_act */
                a[p][f] = v_add(a[p][f], v_bcast(r->bias + f));
            if (r->relu)
                a[p][f] = v_relu(a[p][f]);
        }
        if (r->pooled) {
            NAME(planar_pool)(r, g, a[p], m + p * 16 * VL, ox + p * VL);
            continue;
        }
        v_tr8(a[p]);
        const int64_t left = r->npix - ox - p * VL;
        float *y = r->y + (ox + p * VL) * F;
        if (F == 8 && left >= VL) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                v_store(y + k * VL, a[p][k]);
        } else {
            float t[8 * VL];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                v_store(t + k * VL, a[p][k]);
            for (int64_t i = 0; i < left && i < VL; i++)
                memcpy(y + i * F, t + 8 * i, (size_t)F * sizeof *y);
        }
    }
}

/* The rows in tiles of PLANAR_P vectors (each tile's G rows one after the other, so
 * that a pooled window's maxima stay in m, in L1: through a run of a whole row's, 60
 * KB on large.net, they went to L2 and back on every row), and between the tiles, a
 * tile's share of the planes of the next rows (r->fill), so that their reads from
 * memory overlap the FMAs.  The rows after those (r->fill_pf floats further on) are
 * prefetched a few lines per kernel column of the tile before: issued between the
 * fills, 36 lines at once, the prefetches stalled the core until the misses came back
 * (no more than the L1's miss buffers in flight), and the reads barely overlapped the
 * FMAs (large's conv2d_maxpool, batch 4, one thread: 9.4-10.5 ms against 8.7-8.9
 * spread). */
ISA_FN static void NAME(planar_row)(const PlanarRow *r)
{
    float m[PLANAR_P * 16 * VL] = { 0 };   /* row 0 never reads it; zeros for GCC's sake */
    const int64_t tiles = (r->npix + PLANAR_P * VL - 1) / (PLANAR_P * VL);
    const int G = r->G;
    int64_t t = 0, k0 = 0;
    for (int64_t ox = 0; ox < r->npix; ox += PLANAR_P * VL) {
        const int64_t left = (r->npix - ox + VL - 1) / VL;
        const int64_t k1 = ++t == tiles ? r->fill_n : r->fill_n * t / tiles / 16 * 16;
        const int64_t pf0 = 6 * k0 + r->fill_pf;
        const int lines = r->nfill > 0 && k1 > k0 ? (int)((6 * (k1 - k0) * (int64_t)sizeof(float) + 63) / 64) : 0;
        for (int g = 0; g < G; g++) {
            const int i0 = r->nfill * g / G, i1 = r->nfill * (g + 1) / G;
            switch (left < PLANAR_P ? (int)left : PLANAR_P) {
#if PLANAR_P >= 3
            case 3: NAME(planar_tile)(3, r, g, ox, m, pf0, lines, i0, i1); break;
#endif
#if PLANAR_P >= 2
            case 2: NAME(planar_tile)(2, r, g, ox, m, pf0, lines, i0, i1); break;
#endif
            default: NAME(planar_tile)(1, r, g, ox, m, pf0, lines, i0, i1); break;
            }
        }
        for (int i = 0; i < r->nfill && k1 > k0; i++)
            NAME(planes6)(r->fill_src[i] + 6 * k0, k1 - k0, r->fill_dst[i] + k0, r->pw, 0);
        k0 = k1 > k0 ? k1 : k0;
    }
}

#define PLANAR_FNS NAME(planar_row), NAME(planes6)
#else
#define PLANAR_FNS NULL, NULL
#endif

/* SparseRows: each term x * g + rs as gradw_tile's x * dy + a, so a chain of them is
 * that tile's chain with its zero terms left out.  NA vectors of sums in registers
 * (kh rows of rsk / VL), off[v] the patch's offset of vector v.  Whole vectors: a
 * masked load of the patch's last taps was 40% of the time (Zen 5); through memory,
 * each term's sums waited for the last term's store (of the same filter). */
ISA_INLINE void NAME(sparse_tile)(const int NA, const SparseRows *s, const int64_t *off)
{
    V a[TILE_NV1];
#pragma GCC unroll 12
    for (int v = 0; v < NA; v++)
        a[v] = v_load(s->rs + v * VL);
    const int64_t per = s->n > 0 ? (s->npf + s->n - 1) / s->n : 0;
    const char *pf = (const char *)s->pf, *pf1 = pf + 64 * s->npf;
    for (int64_t i = 0; i < s->n; i++) {
        const float *px = s->xs + (s->ox[i] - s->ox0) * s->pstep;
        const V g = v_bcast(s->g + i);
        for (int64_t l = 0; l < per && pf < pf1; l++, pf += 64)
            __builtin_prefetch(pf);
#pragma GCC unroll 12
        for (int v = 0; v < NA; v++)
            a[v] = v_fma(v_load(px + off[v]), g, a[v]);
    }
#pragma GCC unroll 12
    for (int v = 0; v < NA; v++)
        v_store(s->rs + v * VL, a[v]);
}

ISA_FN static void NAME(sparse_rows)(const SparseRows *s)
{
    const int nvr = s->rsk / VL, na = s->kh * nvr;
    if (na <= TILE_NV1) {
        int64_t off[TILE_NV1];
        for (int v = 0; v < na; v++)
            off[v] = v / nvr * s->xrow + v % nvr * VL;
#define SPARSE(NAC) NAME(sparse_tile)(NAC, s, off)
        switch (na) { CASES(TILE_NV1, SPARSE) default: break; }
#undef SPARSE
        return;
    }
    for (int64_t l = 0; l < s->npf; l++)
        __builtin_prefetch((const char *)s->pf + 64 * l);
    for (int64_t i = 0; i < s->n; i++) {   /* more sums than registers: through memory */
        const float *px = s->xs + (s->ox[i] - s->ox0) * s->pstep;
        const V g = v_bcast(s->g + i);
        for (int ky = 0; ky < s->kh; ky++)
            for (int t = 0; t < s->rsk; t += VL) {
                float *r = s->rs + ky * s->rsk + t;
                v_store(r, v_fma(v_load(px + ky * s->xrow + t), g, v_load(r)));
            }
    }
}

#define CONV_ROW_FNS NAME(fwd_row), NAME(gradw_band), PLANAR_FNS, NAME(sparse_rows)
#else
#define CONV_ROW_FNS NULL, NULL, NULL, NULL, NULL
#endif

#ifdef ISA_ADAM
/* Adam's loop VL lanes at a time, operation for operation kern_adam's scalar loop
 * (separate multiplies and adds: the scalar code is not contracted into FMAs under
 * -std=c11; sqrt and division are correctly rounded in both), so the same bits. */
ISA_FN static size_t NAME(adam)(float *w, float *m, float *v, const float *g, size_t n, float beta1, float beta2,
                                float c1, float c2, float step, float rsb2, float eps)
{
    const V b1 = v_set1(beta1), b2 = v_set1(beta2), k1 = v_set1(c1), k2 = v_set1(c2), st = v_set1(step),
            rs = v_set1(rsb2), ep = v_set1(eps);
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        const V gi = v_load(g + i);
        const V mi = v_add(v_mul(b1, v_load(m + i)), v_mul(k1, gi));
        const V vi = v_add(v_mul(b2, v_load(v + i)), v_mul(v_mul(k2, gi), gi));
        v_store(m + i, mi);
        v_store(v + i, vi);
        const V den = v_add(v_mul(v_sqrt(vi), rs), ep);
        v_store(w + i, v_sub(v_load(w + i), v_div(v_mul(st, mi), den)));
    }
    return i;
}
#define ADAM_FN NAME(adam)
#else
#define ADAM_FN NULL
#endif

#ifndef ISA_NARROW_ROWS   /* else the including file makes the table */
const KernVariant NAME(kern_variant) = { ISA_ENUM, VL, CONV_ROW_FNS, ADAM_FN, GEMM_MICRO_FNS,
                                         VMATH_FNS };
#endif
