/* graphc's own GEMM, written once over a vector of VL floats (docs/kernels.md, "GEMM"):
 * C = alpha op(A) op(B) + beta C, BLIS-style, and a matrix-vector product for one row.
 * Not a header to include anywhere else: each kernels/isa_*.c with FMA includes it once,
 * before kernels/micro.h, after it defines micro.h's primitives and
 *   ISA_GEMM         the CPU has FMA (else only GEMM_MICRO_FNS, all NULL, is defined)
 *   GEMM_MR          rows of C per register tile, at most VL (AVX-512 14, AVX2 6)
 *   GEMM_NV          vectors of columns per register tile (NR = GEMM_NV * VL columns):
 *                    GEMM_MR * GEMM_NV accumulators, GEMM_NV vectors of B and a
 *                    broadcast of A fit the registers
 *   v_transpose(r)   the VL x VL block r[0 .. VL) transposed in place
 *
 * Every element of C is one chain of FMAs over k = 0 .. K-1 in order, started at +0,
 * whatever the tile, the blocking, the thread or the vector width; the chain is carried
 * across blocks of K through memory (C itself when beta is 0), and then
 * C = alpha acc (beta 0) or fma(beta, C, alpha acc), once, then + bias[j] where the
 * product has one (a dense layer's: the bits of adding it after).  So every path here (and the
 * few-rows kernel of micro.h, which makes the same chains) gives the same bits, in the
 * avx2 and avx512 variants alike.
 *
 * Blocking (Goto / BLIS): the columns in blocks of GEMM_NC, K in nearly equal blocks
 * of at most GEMM_KC; B's block packed into panels [kc][NR] (one panel, kc NR floats,
 * stays in L1 while every row tile of A's block goes by); A's rows in nearly equal
 * register tiles of at most GEMM_MR rows, GEMM_MC_TILES of them packed at a time
 * ([kc][rows] each, about 170 KiB: L2) or read in place (gemm_a_direct). */

#ifdef ISA_GEMM

#define GEMM_NR (GEMM_NV * VL)
#define GEMM_KC 256
#define GEMM_MC_TILES 12
#define GEMM_NC 1024
/* The partial sums of a product with beta != 0 and more than one block of K live apart
 * from C (which the last block reads); columns per block shrink so that they stay
 * under this many floats. */
#define GEMM_PART_MAX (1u << 20)
/* Up to this many tiles of rows, B [K, N] is read in place rather than packed. */
#define GEMM_DIRECT_TILES 2

/* Few rows (gemm_rows): rows of B per pass, and the register tile */
#define GEMM_ROWS_KB 32
#if VL == 16
#define GEMM_ROWS_MR 6   /* 6 x 4 vectors: 24 accumulators, 4 of B, a broadcast */
#define GEMM_ROWS_NV 4
#else
#define GEMM_ROWS_MR 6   /* 6 x 2 vectors: 12 accumulators, 2 of B, a broadcast */
#define GEMM_ROWS_NV 2
#endif
#define GEMM_ROWS_MAX 16
#define GEMM_ROWS_BYTES (1u << 20)

/* switch cases R = 1 .. GEMM_MR, R a constant in each (a tile's accumulators are
 * registers) */
#define GEMM_CASES_6(C) case 1: C(1); break; case 2: C(2); break; case 3: C(3); break; \
    case 4: C(4); break; case 5: C(5); break; case 6: C(6); break;
#define GEMM_CASES_14(C) GEMM_CASES_6(C) case 7: C(7); break; case 8: C(8); break; case 9: C(9); break; \
    case 10: C(10); break; case 11: C(11); break; case 12: C(12); break; case 13: C(13); break;      \
    case 14: C(14); break;
#define GEMM_CASES_(N, C) GEMM_CASES_##N(C)
#define GEMM_CASES(N, C) GEMM_CASES_(N, C)

/* The blocking of one product, from its sizes alone. */
typedef struct NAME(GemmBlocks) {
    size_t kb;            /* blocks of K (nearly equal, each at most GEMM_KC) */
    size_t kc_max;        /* the largest */
    size_t nc;            /* columns per block (a multiple of GEMM_NR) */
    size_t tiles;         /* register tiles of rows (nearly equal, each at most GEMM_MR) */
    bool part;            /* partial sums apart from C */
    bool direct;          /* B's whole panels read in place (few rows, B not transposed) */
    bool a_direct;        /* A's tiles read in place, not packed (gemm_a_direct) */
    bool rows;            /* few rows, B streamed row by row (gemm_rows) */
    size_t ap, bp, pp;    /* floats of packed A, packed B, partial sums (with padding) */
} NAME(GemmBlocks);

ISA_INLINE size_t NAME(gemm_cut)(size_t n, size_t parts, size_t i) { return n * i / parts; }

/* A's tiles read where they are, not packed, under a block of B of at most 64 columns
 * (2 panels on AVX-512, 4 on AVX2): a tile's R rows (A [M, K]: R streams of kc floats;
 * stored [K, M]: kc runs of R floats) stay in L1 while those few panels go by, and
 * packing them cost more than it saved.  bench/gemm, one thread, side by side: 1024 x
 * 64 x 256 0.160-0.172 ms against 0.179-0.183 packed, the weight gradient 256 x 64 x
 * 1024 (A stored [K, M]) 0.168-0.176 against 0.186-0.192; at 256 columns (8 panels)
 * reading in place was 5-10% slower.  The broadcasts read the same values in the same
 * order: the same bits. */
ISA_INLINE bool NAME(gemm_a_direct)(const NAME(GemmBlocks) *b)
{
    return b->nc <= 64;
}

ISA_INLINE bool NAME(gemm_rows_ok)(const KGemm *g)
{
    return !g->tb && g->M <= GEMM_ROWS_MAX && (double)g->K * (double)g->N * sizeof(float) >= GEMM_ROWS_BYTES;
}

ISA_INLINE NAME(GemmBlocks) NAME(gemm_blocks)(const KGemm *g)
{
    NAME(GemmBlocks) b;
    b.rows = NAME(gemm_rows_ok)(g);
    if (b.rows) {   /* no packing; partial sums apart from C when beta != 0 */
        b.kb = b.kc_max = b.nc = b.tiles = 0;
        b.part = g->beta != 0.0f && g->K > GEMM_ROWS_KB;
        b.direct = b.a_direct = true;
        b.ap = b.bp = 0;
        b.pp = b.part ? g->M * g->N + VL : 0;
        return b;
    }
    b.kb = (g->K + GEMM_KC - 1) / GEMM_KC;
    b.kc_max = (g->K + b.kb - 1) / b.kb;
    size_t ncb = (g->N + GEMM_NC - 1) / GEMM_NC;
    b.nc = ((g->N + ncb - 1) / ncb + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
    b.part = g->beta != 0.0f && b.kb > 1;
    if (b.part) {
        size_t cols = GEMM_PART_MAX / g->M / GEMM_NR * GEMM_NR;
        if (cols < b.nc)
            b.nc = cols > GEMM_NR ? cols : GEMM_NR;
    }
    b.tiles = (g->M + GEMM_MR - 1) / GEMM_MR;
    b.direct = !g->tb && b.tiles <= GEMM_DIRECT_TILES;
    b.a_direct = NAME(gemm_a_direct)(&b);
    b.ap = b.a_direct ? VL : GEMM_MC_TILES * GEMM_MR * b.kc_max + VL;
    b.bp = b.nc * b.kc_max + VL;
    b.pp = b.part ? g->M * b.nc : 0;
    return b;
}

/* Lanes of vector v of a tile nr columns wide that are in C. */
ISA_INLINE int NAME(gemm_lanes)(int nr, int v)
{
    int l = nr - v * VL;
    return l < 0 ? 0 : l > VL ? VL : l;
}

ISA_INLINE V NAME(gemm_ld)(const float *p, int lanes, VM m)
{
    return lanes == VL ? v_load(p) : lanes > 0 ? v_load_m(p, m) : v_zero();
}

ISA_INLINE void NAME(gemm_st)(float *p, V v, int lanes, VM m)
{
    if (lanes == VL)
        v_store(p, v);
    else if (lanes > 0)
        v_store_m(p, v, m);
}

/* Where a tile's results go: C (ldc) at the last block of K, the partial sums (ldp:
 * C itself when beta is 0) before it. */
typedef struct NAME(GemmOut) {
    float *P, *C;
    const float *bias;   /* the tile's first column's, or NULL */
    size_t ldp, ldc;
    float alpha, beta;
    bool first, last;
} NAME(GemmOut);

/* Where a tile's A is (a constant in each call, so each layout gets its own loop):
 * packed [kc][R] (row r of k at ap + k R + r), read in place stored [K, M] (ap + k lda
 * + r) or stored [M, K] (ap + r lda + k). */
enum { GEMM_A_PACKED, GEMM_A_KM, GEMM_A_MK };

/* Row r's value of k = 0 of a tile of A stored [M, K], from three row pointers and two
 * strides in bytes (lb = lda floats, l3 = 3 lda): rows 0-4 from a0, 5-9 from a1 = a0 +
 * 5 lda, 10-13 from a2 = a0 + 10 lda, each as base + l{b,3} x {0, 1, 2, 4}, which is
 * one x86 address.  Written with 14 row pointers (or offsets) the 14-row tile's loop
 * needed more integer registers than there are and spilled two accumulators to the
 * stack (an FMA from memory and a store per k). */
ISA_INLINE const float *NAME(gemm_mk_row)(const char *a0, const char *a1, const char *a2, size_t lb, size_t l3, int r)
{
    const char *base = r < 5 ? a0 : r < 10 ? a1 : a2;
    const int i = r % 5;
    return (const float *)(base + (i == 0 ? 0 : i == 1 ? lb : i == 2 ? 2 * lb : i == 3 ? l3 : 4 * lb));
}

/* The register tile: R rows x GEMM_NV vectors (nr columns of them in C) over kc values
 * of k, A at ap as `am` says (lda: A's stride when read in place), B's columns at bp,
 * row k at bp + k bs (packed: bs = NR; read in place: B's row stride). */
ISA_INLINE void NAME(gemm_tile)(const int R, const int am, size_t kc, const float *ap, size_t lda, const float *bp,
                                size_t bs, int nr, const NAME(GemmOut) *o)
{
    V acc[GEMM_MR][GEMM_NV];
    VM mk[GEMM_NV];
    int ln[GEMM_NV];
    /* the lines of C this tile ends on, on their way while it computes (C is read for
     * beta, and written, in rows far apart: each row a miss otherwise) */
    if (o->last)
#pragma GCC unroll 16
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_NV; v++)
                __builtin_prefetch(o->C + (size_t)r * o->ldc + (size_t)v * VL, 1, 3);
#pragma GCC unroll 4
    for (int v = 0; v < GEMM_NV; v++) {
        ln[v] = NAME(gemm_lanes)(nr, v);
        mk[v] = v_mask(ln[v]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++)
            acc[r][v] = o->first ? v_zero() : NAME(gemm_ld)(o->P + (size_t)r * o->ldp + (size_t)v * VL, ln[v], mk[v]);
    if (am == GEMM_A_MK) {
        const size_t lb = lda * sizeof(float), l3 = 3 * lb;
        const char *a0 = (const char *)ap, *a1 = a0 + 5 * lb, *a2 = a0 + 10 * lb;
        for (size_t k = 0; k < kc; k++, a0 += sizeof(float), a1 += sizeof(float), a2 += sizeof(float)) {
            V b[GEMM_NV];
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_NV; v++)
                b[v] = v_load(bp + k * bs + (size_t)v * VL);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                const V a = v_bcast(NAME(gemm_mk_row)(a0, a1, a2, lb, l3, r));
#pragma GCC unroll 4
                for (int v = 0; v < GEMM_NV; v++)
                    acc[r][v] = v_fma(a, b[v], acc[r][v]);
            }
        }
    } else {
        const size_t aks = am == GEMM_A_KM ? lda : (size_t)R;
        for (size_t k = 0; k < kc; k++) {
            V b[GEMM_NV];
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_NV; v++)
                b[v] = v_load(bp + k * bs + (size_t)v * VL);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                const V a = v_bcast(ap + k * aks + (size_t)r);
#pragma GCC unroll 4
                for (int v = 0; v < GEMM_NV; v++)
                    acc[r][v] = v_fma(a, b[v], acc[r][v]);
            }
        }
    }
    /* alpha and beta read only now (volatile: GCC otherwise loaded one before the loop
     * and kept it in the one vector register a 14-row tile has to spare, spilling an
     * accumulator instead) */
    const V va = v_set1(*(volatile const float *)&o->alpha), vb = v_set1(*(volatile const float *)&o->beta);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++) {
            if (!o->last) {
                NAME(gemm_st)(o->P + (size_t)r * o->ldp + (size_t)v * VL, acc[r][v], ln[v], mk[v]);
                continue;
            }
            float *c = o->C + (size_t)r * o->ldc + (size_t)v * VL;
            V out = v_mul(va, acc[r][v]);
            if (o->beta != 0.0f)
                out = v_fma(vb, NAME(gemm_ld)(c, ln[v], mk[v]), out);
            if (o->bias)
                out = v_add(out, NAME(gemm_ld)(o->bias + (size_t)v * VL, ln[v], mk[v]));
            NAME(gemm_st)(c, out, ln[v], mk[v]);
        }
}

/* A block of `rows` rows (the rest of VL taken as zero) of kl <= VL floats at src, row
 * stride ld, transposed: its kl columns stored as vectors at dst, stride ds (the
 * packing of B stored transposed and of A stored as is). */
ISA_INLINE void NAME(gemm_tr_block)(const float *src, size_t ld, int rows, int kl, float *dst, size_t ds)
{
    const VM m = v_mask(kl);
    V r[VL];
#pragma GCC unroll 16
    for (int i = 0; i < VL; i++)
        r[i] = i < rows ? NAME(gemm_ld)(src + (size_t)i * ld, kl, m) : v_zero();
    v_transpose(r);
#pragma GCC unroll 16
    for (int t = 0; t < kl; t++)
        v_store(dst + (size_t)t * ds, r[t]);
}

/* B's block [k0, k0 + kc) x [j0, j0 + nw) packed into panels of GEMM_NR columns,
 * [kc][NR] each, zero past the last column.  (A block read in place, gemm_kblock's
 * `direct`, packs only its last panel, with j0 and nw narrowed to it.) */
__attribute__((noinline)) ISA_FN static void NAME(gemm_pack_b)(const KGemm *g, size_t k0, size_t kc, size_t j0,
                                                               size_t nw, float *bp)
{
    const size_t whole = nw / GEMM_NR * GEMM_NR;   /* columns in whole panels */
    if (!g->tb) {   /* B [K, N]: row by row, each read in order, into every panel */
        const int nr = (int)(nw - whole);
        VM m[GEMM_NV];
        for (int v = 0; v < GEMM_NV; v++)
            m[v] = v_mask(NAME(gemm_lanes)(nr, v));
        for (size_t k = 0; k < kc; k++) {
            const float *src = g->B + (k0 + k) * g->ldb + j0;
            float *dst = bp + k * GEMM_NR;
            size_t p0 = 0;
            for (; p0 < whole; p0 += GEMM_NR, dst += kc * GEMM_NR)
#pragma GCC unroll 4
                for (int v = 0; v < GEMM_NV; v++)
                    v_store(dst + v * VL, v_load(src + p0 + (size_t)v * VL));
            if (nr > 0)
#pragma GCC unroll 4
                for (int v = 0; v < GEMM_NV; v++)
                    v_store(dst + v * VL, NAME(gemm_ld)(src + p0 + (size_t)v * VL, NAME(gemm_lanes)(nr, v), m[v]));
        }
        return;
    }
    /* B stored [N, K]: VL x VL blocks transposed */
    for (size_t p0 = 0; p0 < nw; p0 += GEMM_NR, bp += kc * GEMM_NR) {
        const int nr = nw - p0 < GEMM_NR ? (int)(nw - p0) : GEMM_NR;
        for (int v = 0; v < GEMM_NV; v++) {
            const int lanes = NAME(gemm_lanes)(nr, v);
            const size_t n = j0 + p0 + (size_t)v * VL;
            float *dst = bp + (size_t)v * VL;
            for (size_t kk = 0; kk < kc; kk += VL)
                NAME(gemm_tr_block)(g->B + n * g->ldb + k0 + kk, g->ldb, lanes, kc - kk < VL ? (int)(kc - kk) : VL,
                                    dst + kk * GEMM_NR, GEMM_NR);
        }
    }
}

/* A's rows [m0, m0 + R) x [k0, k0 + kc) packed [kc][R].  Each k's R values are stored
 * as a whole vector (the lanes past R zero), in order, so the next one overwrites the
 * excess: VL - R floats past the end are written too (the buffers are padded). */
__attribute__((noinline)) ISA_FN static void NAME(gemm_pack_a)(const KGemm *g, size_t m0, int R, size_t k0, size_t kc, float *ap)
{
    if (g->ta) {   /* A stored [K, M]: R contiguous values per k */
        const VM m = v_mask(R);
        const float *src = g->A + k0 * g->lda + m0;
        for (size_t k = 0; k < kc; k++)
            v_store(ap + k * (size_t)R, v_load_m(src + k * g->lda, m));
        return;
    }
    for (size_t kk = 0; kk < kc; kk += VL)   /* A [M, K]: VL x VL blocks transposed */
        NAME(gemm_tr_block)(g->A + m0 * g->lda + k0 + kk, g->lda, R, kc - kk < VL ? (int)(kc - kk) : VL,
                            ap + kk * (size_t)R, (size_t)R);
}

ISA_FN static size_t NAME(gemm_buf)(const KGemm *g)
{
    const NAME(GemmBlocks) b = NAME(gemm_blocks)(g);
    return b.ap + b.bp + b.pp;
}

/* Row tile t of b's nearly equal tiles: its first row and its rows. */
ISA_INLINE size_t NAME(gemm_tile_row)(const NAME(GemmBlocks) *b, size_t M, size_t t)
{
    return NAME(gemm_cut)(M, b->tiles, t);
}

/* One block of K (k0, kc) of one block of columns (j0, nw), B's block packed at bp:
 * A's tiles GEMM_MC_TILES at a time, packed at ap; then panel by panel of B, every
 * tile of the group. */
ISA_INLINE void NAME(gemm_kblock)(const KGemm *g, const NAME(GemmBlocks) *b, size_t k0, size_t kc, size_t j0,
                                  size_t nw, const float *bp, float *ap, NAME(GemmOut) o, float *part)
{
    /* B [K, N] under few rows of A: its whole panels read in place (each panel of B is
     * used by so few tiles that packing it would cost as much as the product), only a
     * last, narrower panel packed (at bp: it must not be read past N) */
    const size_t whole = b->direct ? nw / GEMM_NR * GEMM_NR : 0;
    for (size_t t0 = 0; t0 < b->tiles; t0 += GEMM_MC_TILES) {
        const size_t t1 = b->tiles - t0 < GEMM_MC_TILES ? b->tiles : t0 + GEMM_MC_TILES;
        size_t off[GEMM_MC_TILES], at = 0;
        for (size_t t = t0; t < t1 && !b->a_direct; t++) {
            const size_t m0 = NAME(gemm_tile_row)(b, g->M, t);
            const int R = (int)(NAME(gemm_tile_row)(b, g->M, t + 1) - m0);
            off[t - t0] = at;
            NAME(gemm_pack_a)(g, m0, R, k0, kc, ap + at);
            at += (size_t)R * kc;
        }
        for (size_t p0 = 0; p0 < nw; p0 += GEMM_NR) {
            const int nr = nw - p0 < GEMM_NR ? (int)(nw - p0) : GEMM_NR;
            const float *bpp = p0 < whole ? g->B + k0 * g->ldb + j0 + p0 : bp + (p0 - whole) * kc;
            const size_t bs = p0 < whole ? g->ldb : GEMM_NR;
            for (size_t t = t0; t < t1; t++) {
                const size_t m0 = NAME(gemm_tile_row)(b, g->M, t);
                const int R = (int)(NAME(gemm_tile_row)(b, g->M, t + 1) - m0);
                NAME(GemmOut) ot = o;
                ot.C = g->C + m0 * g->ldc + j0 + p0;
                ot.bias = g->bias ? g->bias + j0 + p0 : NULL;
                ot.P = part ? part + m0 * b->nc + p0 : ot.C;
                if (b->a_direct && g->ta) {   /* A stored [K, M]: k at lda */
                    const float *apt = g->A + k0 * g->lda + m0;
#define GEMM_T(RR) NAME(gemm_tile)(RR, GEMM_A_KM, kc, apt, g->lda, bpp, bs, nr, &ot)
                    switch (R) { GEMM_CASES(GEMM_MR, GEMM_T) default: break; }
#undef GEMM_T
                } else if (b->a_direct) {   /* A [M, K]: row r at lda */
                    const float *apt = g->A + m0 * g->lda + k0;
#define GEMM_T(RR) NAME(gemm_tile)(RR, GEMM_A_MK, kc, apt, g->lda, bpp, bs, nr, &ot)
                    switch (R) { GEMM_CASES(GEMM_MR, GEMM_T) default: break; }
#undef GEMM_T
                } else {
                    const float *apt = ap + off[t - t0];
#define GEMM_T(RR) NAME(gemm_tile)(RR, GEMM_A_PACKED, kc, apt, 0, bpp, bs, nr, &ot)
                    switch (R) { GEMM_CASES(GEMM_MR, GEMM_T) default: break; }
#undef GEMM_T
                }
            }
        }
    }
}

/* ---- few rows of C, B [K, N] large: B streamed row by row ---------------------------
 * (gemm_rows) GEMM_ROWS_KB rows of B at a time, walked along their columns: as many
 * streams read in order, each byte once, while the row tiles of A go by (the second
 * and third read the block from L1); the chains go on in P (C itself when beta is 0)
 * from block to block and end in the same epilogue as gemm_tile's: the same bits. */

ISA_INLINE void NAME(gemm_rows_tile)(const int R, const bool whole, const KGemm *g, size_t m0, size_t n0, size_t k0,
                                     int kc, const float *b, size_t bs, const NAME(GemmOut) *o)
{
    V acc[GEMM_ROWS_MR][GEMM_ROWS_NV];
    VM mk[GEMM_ROWS_NV];
    int ln[GEMM_ROWS_NV];
    const int nr = whole ? GEMM_ROWS_NV * VL : (int)(g->N - n0);
#pragma GCC unroll 4
    for (int v = 0; v < GEMM_ROWS_NV; v++) {
        ln[v] = whole ? VL : NAME(gemm_lanes)(nr, v);
        mk[v] = v_mask(ln[v]);
    }
    float *P = o->P + m0 * o->ldp + n0;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_ROWS_NV; v++)
            acc[r][v] = o->first ? v_zero() : NAME(gemm_ld)(P + (size_t)r * o->ldp + (size_t)v * VL, ln[v], mk[v]);
    /* A [M, K]: row m at lda, k at 1; stored [K, M]: k at lda, m at 1.  b: B's row k0
     * at column n0, row k0 + k at b + k bs (as stored, or a packed panel) */
    const size_t ars = g->ta ? 1 : g->lda, aks = g->ta ? g->lda : 1;
    const float *a = g->A + m0 * ars + k0 * aks;
    for (int k = 0; k < kc; k++, a += aks, b += bs) {
        V bv[GEMM_ROWS_NV];
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_ROWS_NV; v++)
            bv[v] = NAME(gemm_ld)(b + (size_t)v * VL, ln[v], mk[v]);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const V av = v_bcast(a + (size_t)r * ars);
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_ROWS_NV; v++)
                acc[r][v] = v_fma(av, bv[v], acc[r][v]);
        }
    }
    const V va = v_set1(o->alpha), vb = v_set1(o->beta);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_ROWS_NV; v++) {
            if (!o->last) {
                NAME(gemm_st)(P + (size_t)r * o->ldp + (size_t)v * VL, acc[r][v], ln[v], mk[v]);
                continue;
            }
            float *c = o->C + (m0 + (size_t)r) * o->ldc + n0 + (size_t)v * VL;
            V out = v_mul(va, acc[r][v]);
            if (o->beta != 0.0f)
                out = v_fma(vb, NAME(gemm_ld)(c, ln[v], mk[v]), out);
            if (o->bias)
                out = v_add(out, NAME(gemm_ld)(o->bias + n0 + (size_t)v * VL, ln[v], mk[v]));
            NAME(gemm_st)(c, out, ln[v], mk[v]);
        }
}

ISA_INLINE void NAME(gemm_rows)(const KGemm *g, float *part)
{
    const size_t tiles = (g->M + GEMM_ROWS_MR - 1) / GEMM_ROWS_MR, cols = (size_t)GEMM_ROWS_NV * VL;
    NAME(GemmOut) o = { part ? part : g->C, g->C, g->bias, part ? g->N : g->ldc, g->ldc, g->alpha, g->beta, true, true };
    for (size_t k0 = 0; k0 < g->K; k0 += GEMM_ROWS_KB) {
        const int kc = g->K - k0 < GEMM_ROWS_KB ? (int)(g->K - k0) : GEMM_ROWS_KB;
        o.first = k0 == 0;
        o.last = k0 + (size_t)kc == g->K;
        for (size_t n0 = 0; n0 < g->N; n0 += cols)
            for (size_t t = 0; t < tiles; t++) {
                const size_t m0 = NAME(gemm_cut)(g->M, tiles, t);
                const int R = (int)(NAME(gemm_cut)(g->M, tiles, t + 1) - m0);
                if (g->N - n0 >= cols) {
#define GEMM_ROWS_T(RR) NAME(gemm_rows_tile)(RR, true, g, m0, n0, k0, kc, g->B + k0 * g->ldb + n0, g->ldb, &o)
                    switch (R) { GEMM_CASES_6(GEMM_ROWS_T) default: break; }
#undef GEMM_ROWS_T
                } else {
#define GEMM_ROWS_T(RR) NAME(gemm_rows_tile)(RR, false, g, m0, n0, k0, kc, g->B + k0 * g->ldb + n0, g->ldb, &o)
                    switch (R) { GEMM_CASES_6(GEMM_ROWS_T) default: break; }
#undef GEMM_ROWS_T
                }
            }
    }
}

/* ---- B packed once (kern_gemm_pack in kernels/blas.c) --------------------------------
 * A dense layer's weights, B [K, N], that do not change between calls (an inference
 * plan's), copied once into panels of GEMM_PACK_NP columns, [K][NP] each (zero past N),
 * panel p at p K NP.  A panel is then one contiguous stream, where B as stored has each
 * pass read 32 rows 4 KB apart (gemm_rows) or 8 (gemv).  The chains are gemm_rows' and
 * gemv's, k in order from +0, carried through C or a partial row: the same bits. */
#define GEMM_PACK_NP (GEMM_ROWS_NV * VL)
/* rows of a panel per pass of the row tiles: 32 KiB on AVX-512, in L1 while the second
 * and third tiles read it */
#define GEMM_PACK_KB 128

/* Few rows (M <= GEMM_ROWS_MAX, beta 0): C's columns of panels [p0, p1), each panel
 * GEMM_PACK_KB rows at a time for every tile of rows, the chains carried in C. */
ISA_FN static void NAME(gemm_rows_packed)(const KGemm *g, const float *pack, size_t p0, size_t p1)
{
    const size_t tiles = (g->M + GEMM_ROWS_MR - 1) / GEMM_ROWS_MR;
    NAME(GemmOut) o = { g->C, g->C, g->bias, g->ldc, g->ldc, g->alpha, 0.0f, true, true };
    for (size_t p = p0; p < p1; p++) {
        const size_t n0 = p * GEMM_PACK_NP;
        const bool whole = g->N - n0 >= GEMM_PACK_NP;
        const float *panel = pack + p * g->K * GEMM_PACK_NP;
        for (size_t k0 = 0; k0 < g->K; k0 += GEMM_PACK_KB) {
            const int kc = g->K - k0 < GEMM_PACK_KB ? (int)(g->K - k0) : GEMM_PACK_KB;
            o.first = k0 == 0;
            o.last = k0 + (size_t)kc == g->K;
            for (size_t t = 0; t < tiles; t++) {
                const size_t m0 = NAME(gemm_cut)(g->M, tiles, t);
                const int R = (int)(NAME(gemm_cut)(g->M, tiles, t + 1) - m0);
                const float *b = panel + k0 * GEMM_PACK_NP;
                if (whole) {
#define GEMM_ROWS_T(RR) NAME(gemm_rows_tile)(RR, true, g, m0, n0, k0, kc, b, GEMM_PACK_NP, &o)
                    switch (R) { GEMM_CASES_6(GEMM_ROWS_T) default: break; }
#undef GEMM_ROWS_T
                } else {
#define GEMM_ROWS_T(RR) NAME(gemm_rows_tile)(RR, false, g, m0, n0, k0, kc, b, GEMM_PACK_NP, &o)
                    switch (R) { GEMM_CASES_6(GEMM_ROWS_T) default: break; }
#undef GEMM_ROWS_T
                }
            }
        }
    }
}

/* One row: P[0, N) = a[k0, k1) B[k0, k1) from the pack, one chain per column from +0
 * (gemv's), two panels at a time (8 chains on AVX-512: enough FMAs in flight). */
ISA_FN static void NAME(gemv_packed)(const KGemm *g, const float *pack, size_t k0, size_t k1, float *P)
{
    const size_t as = g->ta ? g->lda : 1, panels = (g->N + GEMM_PACK_NP - 1) / GEMM_PACK_NP;
    for (size_t p = 0; p < panels; p += 2) {
        const bool two = p + 1 < panels;
        const float *b0 = pack + (p * g->K + k0) * GEMM_PACK_NP;
        const float *b1 = two ? b0 + g->K * GEMM_PACK_NP : b0;   /* the last, alone: itself again, not stored */
        const float *a = g->A + k0 * as;
        V c[2 * GEMM_ROWS_NV];
#pragma GCC unroll 8
        for (int v = 0; v < 2 * GEMM_ROWS_NV; v++)
            c[v] = v_zero();
        for (size_t k = k0; k < k1; k++, a += as, b0 += GEMM_PACK_NP, b1 += GEMM_PACK_NP) {
            const V av = v_bcast(a);
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_ROWS_NV; v++) {
                c[v] = v_fma(av, v_load(b0 + (size_t)v * VL), c[v]);
                c[GEMM_ROWS_NV + v] = v_fma(av, v_load(b1 + (size_t)v * VL), c[GEMM_ROWS_NV + v]);
            }
        }
        for (int h = 0; h < (two ? 2 : 1); h++) {
            const size_t n0 = (p + (size_t)h) * GEMM_PACK_NP;
            const int nr = g->N - n0 < GEMM_PACK_NP ? (int)(g->N - n0) : GEMM_PACK_NP;
            for (int v = 0; v < GEMM_ROWS_NV; v++) {
                const int lanes = NAME(gemm_lanes)(nr, v);
                NAME(gemm_st)(P + n0 + (size_t)v * VL, c[h * GEMM_ROWS_NV + v], lanes, v_mask(lanes));
            }
        }
    }
}

/* The whole product on the calling thread, buf: gemm_buf(g) floats, 64-byte aligned.
 * M, N, K >= 1. */
ISA_FN static void NAME(gemm)(const KGemm *g, float *buf)
{
    const NAME(GemmBlocks) b = NAME(gemm_blocks)(g);
    if (b.rows) {
        NAME(gemm_rows)(g, b.part ? buf : NULL);
        return;
    }
    float *bp = buf, *ap = buf + b.bp, *part = b.part ? ap + b.ap : NULL;
    NAME(GemmOut) o = { NULL, NULL, NULL, part ? b.nc : g->ldc, g->ldc, g->alpha, g->beta, true, true };
    for (size_t j0 = 0; j0 < g->N; j0 += b.nc) {
        const size_t nw = g->N - j0 < b.nc ? g->N - j0 : b.nc;
        for (size_t kbi = 0; kbi < b.kb; kbi++) {
            const size_t k0 = NAME(gemm_cut)(g->K, b.kb, kbi), kc = NAME(gemm_cut)(g->K, b.kb, kbi + 1) - k0;
            const size_t whole = b.direct ? nw / GEMM_NR * GEMM_NR : 0;
            if (whole < nw)
                NAME(gemm_pack_b)(g, k0, kc, j0 + whole, nw - whole, bp);
            o.first = kbi == 0;
            o.last = kbi + 1 == b.kb;
            NAME(gemm_kblock)(g, &b, k0, kc, j0, nw, bp, ap, o, part);
        }
    }
}

/* ---- one row: C[1, N] = alpha a op(B) + beta C, B [K, N] as stored (not tb) ----------
 * Columns [n0, n1), GEMV_KB rows of B at a time (as many streams read in order; their
 * broadcasts of a stay in registers), the chains carried in GEMV_COLS floats of a
 * panel of columns on the stack (L1) from block to block. */
#define GEMV_KB 8
#define GEMV_COLS 1024

ISA_INLINE void NAME(gemv_block)(const KGemm *g, size_t n0, size_t nw, size_t k0, int kb, float *acc, bool first,
                                 bool last)
{
    const size_t as = g->ta ? g->lda : 1;
    V a[GEMV_KB];
#pragma GCC unroll 8
    for (int i = 0; i < GEMV_KB; i++)
        a[i] = i < kb ? v_bcast(g->A + (k0 + (size_t)i) * as) : v_zero();
    const V va = v_set1(g->alpha), vb = v_set1(g->beta);
    const float *B = g->B + k0 * g->ldb + n0;
    size_t x = 0;
    if (kb == GEMV_KB && !last)   /* the common case: 4 vectors' chains side by side */
        for (; x + 4 * VL <= nw; x += 4 * VL) {
            V c[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                c[u] = first ? v_zero() : v_load(acc + x + (size_t)u * VL);
#pragma GCC unroll 8
            for (int i = 0; i < GEMV_KB; i++)
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++)
                    c[u] = v_fma(a[i], v_load(B + (size_t)i * g->ldb + x + (size_t)u * VL), c[u]);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                v_store(acc + x + (size_t)u * VL, c[u]);
        }
    for (; x < nw; x += VL) {
        const int lanes = nw - x < VL ? (int)(nw - x) : VL;
        const VM m = v_mask(lanes);
        V c = first ? v_zero() : NAME(gemm_ld)(acc + x, lanes, m);
        if (kb == GEMV_KB) {
#pragma GCC unroll 8
            for (int i = 0; i < GEMV_KB; i++)
                c = v_fma(a[i], NAME(gemm_ld)(B + (size_t)i * g->ldb + x, lanes, m), c);
        } else {
            for (int i = 0; i < kb; i++)
                c = v_fma(a[i], NAME(gemm_ld)(B + (size_t)i * g->ldb + x, lanes, m), c);
        }
        if (!last) {
            NAME(gemm_st)(acc + x, c, lanes, m);
            continue;
        }
        float *cc = g->C + n0 + x;
        V out = v_mul(va, c);
        if (g->beta != 0.0f)
            out = v_fma(vb, NAME(gemm_ld)(cc, lanes, m), out);
        NAME(gemm_st)(cc, out, lanes, m);
    }
}

ISA_FN static void NAME(gemv)(const KGemm *g, size_t n0, size_t n1)
{
    float acc[GEMV_COLS];
    for (size_t p0 = n0; p0 < n1; p0 += GEMV_COLS) {
        const size_t nw = n1 - p0 < GEMV_COLS ? n1 - p0 : GEMV_COLS;
        for (size_t k0 = 0; k0 < g->K; k0 += GEMV_KB) {
            const int kb = g->K - k0 < GEMV_KB ? (int)(g->K - k0) : GEMV_KB;
            NAME(gemv_block)(g, p0, nw, k0, kb, acc, k0 == 0, k0 + (size_t)kb == g->K);
        }
    }
}


/* ---- few rows, long K: the partial product of K's rows [k0, k1) ---------------------
 * P[M, N] (row stride ldp) = op(A)[:, k0:k1] B[k0:k1, :], B [K, N] as stored (not tb),
 * each element one chain of FMAs over k in order from +0 (blas.c's own_ksplit sums the
 * parts).  B is read row by row, GEMM_KS_NV vectors of a row at a time: each 64 rows
 * (GEMM_KS_KB) of B are read from memory once, by the first tile of rows, and from L1
 * by the others; the chains go on in P from block to block.  The prefetches may reach
 * past B's end: a prefetch does not fault. */
#define GEMM_KS_NV 4
/* rows per tile: GEMM_KS_MR x 4 accumulators, 4 vectors of B and a broadcast in the
 * registers (6 with 32 of them, 2 with 16) */
#if VL == 16
#define GEMM_KS_MR 6
#define GEMM_KS_CASES(C) GEMM_CASES_6(C)
#else
#define GEMM_KS_MR 2
#define GEMM_KS_CASES(C) case 1: C(1); break; case 2: C(2); break;
#endif
#define GEMM_KS_KB 64
/* B's rows this far ahead are prefetched by the first tile of rows (the hardware's
 * prefetch alone streamed a few GB/s on the Zen 5) */
#define GEMM_KS_PF 32

ISA_INLINE void NAME(gemm_ks_tile)(const int R, const KGemm *g, size_t m0, size_t n0, size_t k0, size_t kc, float *P,
                                   size_t ldp, bool first, bool pf)
{
    V acc[GEMM_KS_MR][GEMM_KS_NV];
    VM mk[GEMM_KS_NV];
    int ln[GEMM_KS_NV];
    const int nr = g->N - n0 < (size_t)(GEMM_KS_NV * VL) ? (int)(g->N - n0) : GEMM_KS_NV * VL;
#pragma GCC unroll 4
    for (int v = 0; v < GEMM_KS_NV; v++) {
        ln[v] = NAME(gemm_lanes)(nr, v);
        mk[v] = v_mask(ln[v]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_KS_NV; v++)
            acc[r][v] = first ? v_zero() : NAME(gemm_ld)(P + (m0 + (size_t)r) * ldp + n0 + (size_t)v * VL, ln[v], mk[v]);
    /* A [M, K]: row m at lda, k at 1; stored [K, M]: k at lda, m at 1 */
    const size_t ars = g->ta ? 1 : g->lda, aks = g->ta ? g->lda : 1;
    const float *a = g->A + m0 * ars + k0 * aks, *b = g->B + k0 * g->ldb + n0;
    for (size_t k = 0; k < kc; k++, a += aks, b += g->ldb) {
        V bv[GEMM_KS_NV];
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_KS_NV; v++) {
            if (pf && ln[v] > 0)
                __builtin_prefetch(b + GEMM_KS_PF * g->ldb + (size_t)v * VL, 0, 3);
            bv[v] = NAME(gemm_ld)(b + (size_t)v * VL, ln[v], mk[v]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const V av = v_bcast(a + (size_t)r * ars);
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_KS_NV; v++)
                acc[r][v] = v_fma(av, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_KS_NV; v++)
            NAME(gemm_st)(P + (m0 + (size_t)r) * ldp + n0 + (size_t)v * VL, acc[r][v], ln[v], mk[v]);
}

ISA_FN static void NAME(gemm_kpart)(const KGemm *g, size_t k0, size_t k1, float *P, size_t ldp)
{
    const size_t cols = (size_t)GEMM_KS_NV * VL;
    for (size_t kb = k0; kb < k1; kb += GEMM_KS_KB) {
        const size_t kc = k1 - kb < GEMM_KS_KB ? k1 - kb : GEMM_KS_KB;
        for (size_t n0 = 0; n0 < g->N; n0 += cols)
            for (size_t m0 = 0; m0 < g->M; m0 += GEMM_KS_MR) {
                const int R = g->M - m0 < GEMM_KS_MR ? (int)(g->M - m0) : GEMM_KS_MR;
#define GEMM_KS_T(RR) NAME(gemm_ks_tile)(RR, g, m0, n0, kb, kc, P, ldp, kb == k0, m0 == 0)
                switch (R) { GEMM_KS_CASES(GEMM_KS_T) default: break; }
#undef GEMM_KS_T
            }
    }
}

#define GEMM_MICRO_FNS NAME(gemm_buf), NAME(gemm), NAME(gemv), NAME(gemm_kpart), GEMM_NR, \
    NAME(gemm_rows_packed), NAME(gemv_packed), GEMM_PACK_NP
#else
#define GEMM_MICRO_FNS NULL, NULL, NULL, NULL, 0, NULL, NULL, 0
#endif
