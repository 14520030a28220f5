/* The kernels that exist once per instruction set: kernels/micro.h's width-generic
 * micro-kernels, compiled by kernels/isa_avx512.c, isa_avx2.c and isa_portable.c into a
 * KernVariant each, and kern_variant(), the one place that picks which runs
 * (kernels/cpu.c).  Internal to kernels/: callers name a KIsa (kern.h). */
#ifndef GRAPHC_KERN_VARIANT_H
#define GRAPHC_KERN_VARIANT_H
#include "kernels/kern.h"

/* Filters per block of a packed filter ([F/16][K][16], zero past F): whatever the
 * vector width, so packing and scratch are the same for every variant.  A filter whose
 * count is a multiple of it is read as stored ([K][F]) instead: the same loads, from
 * other addresses. */
enum { PACK_BLOCK = 16 };

/* Output rows of a direct convolution, or a piece of one: `rows` rows of npix pixels
 * each, pixel i of row g's patch starting at strip xs + g*rstep + i*pstep, its kernel
 * row ky at + ky*rowlen, taps (kx, c) of a kernel row consecutive there and in the
 * packed filter; the rows' outputs consecutive in y (rows > 1: whole rows). */
typedef struct FwdRow {
    const float *xs;
    int64_t pstep, rowlen, npix;
    int64_t rows, rstep;   /* rows > 1: one run of pixels, so a tile may span rows */
    int ky0, ky1;          /* the kernel rows that fall inside the image (the others: padding) */
    int kwc;               /* taps per kernel row: KW * C */
    const float *wp;       /* the filter, packed or as stored */
    int64_t wtap;          /* floats from a tap's filters to the next tap's: PACK_BLOCK or F */
    int64_t wblock;        /* from a block of PACK_BLOCK filters to the next: K * PACK_BLOCK or PACK_BLOCK */
    int64_t F;             /* filters; y's pixel stride */
    const float *bias;     /* NULL, or y = y + bias, then relu when `relu` */
    bool relu;
    float *y;              /* pixel 0's F outputs */
    const char *pf;        /* lines to bring into L2 during the row (the next band's input), or NULL */
    int64_t pf_lines;
} FwdRow;

/* The filter gradient's share of a band of output rows g in [g0, g1) (of pixels
 * [0, ow) each) for one kernel row: acc[t * F + f] += sum over the band of
 * x(g, ox, t) dy(g, ox, f), for taps t in [0, kwc) of the kernel row.  x(g, ox, t) is
 * at xs + g*rstep + ox*pstep + t; dy(g, ox, f) at dy + g*dyrow + ox*F + f. */
typedef struct GradwBand {
    const float *xs;
    int64_t rstep, pstep;
    const float *dy;
    int64_t dyrow, ow, g0, g1, F;
    int kwc;
    float *acc;
} GradwBand;

/* One output row of a few-channel convolution, or a piece of one, vectorised over its
 * pixels (conv_direct.c's planar path): npix pixels, all (at most 8) filters; pooled,
 * the G rows of a pooled row's windows, column tile by column tile.  The input rows
 * under them are split into planes of one channel and one column phase (column ix =
 * j * sw + ph - pl at plane[j]): row g's kernel row ky's plane (c, ph) at xr[g * sh +
 * ky] + (c * sw + ph) * pw, so that tap (ky, kx, c) of pixels ox .. ox + VL - 1 is one
 * vector at plane (c, kx % sw) of that row, + ox + kx / sw.  Planes hold at least pw
 * >= npix rounded up to 16, plus (kw - 1) / sw, floats. */
enum { PLANAR_MAX_KH = 16, PLANAR_MAX_FILL = 8, PLANAR_MAX_G = 8, PLANAR_MAX_XR = 32 };
typedef struct PlanarRow {
    const float *xr[PLANAR_MAX_XR];   /* the input rows from the first row's top on */
    int64_t pw;
    int kw, c, sw, sh;
    int G;                 /* output rows: 1, or (pooled) the windows' rows */
    int ky0[PLANAR_MAX_G], ky1[PLANAR_MAX_G];   /* row g's kernel rows inside the image */
    const float *w;        /* [K][8], taps (ky, kx, c), zero past F */
    const float *bias;     /* NULL, or 8 floats: y = y + bias, then relu when `relu` */
    bool relu;
    int64_t F;             /* filters (<= 8), y's pixel stride */
    int64_t npix;
    float *y;              /* pixel 0's F outputs */
    /* planes made between the tiles (the next rows' input rows, so that their reads
     * from memory overlap these rows' FMAs): nfill runs of fill_n pixels of 3
     * channels at stride 2, planes6(fill_src[i], fill_n, fill_dst[i], pw, 0) */
    int nfill;
    int64_t fill_n, fill_pf;   /* fill_pf: floats past src to prefetch (during the tiles) */
    const float *fill_src[PLANAR_MAX_FILL];
    float *fill_dst[PLANAR_MAX_FILL];
    /* Pooled: G x 4 windows at stride G x 4 over the rows' npix pixels (a multiple of
     * 4), each tile's G rows folded into their windows' maxima (and the rows' offsets
     * g * ow, in floats) as made; the pooled pixels go to py (F apart) and, unless
     * NULL, their cells (iy * ow + ix: row 0's offset cell0, plus the row's, plus the
     * column) to pidx. */
    bool pooled;
    int64_t ow;            /* the convolution's row: g's offset g * ow */
    int32_t cell0;
    const float *iota;     /* 0, 1, .. VL - 1 */
    float *py;
    int32_t *pidx;
} PlanarRow;

/* Sparse filter-gradient terms of one filter (conv_direct.c's pooled path): for each
 * term i, its patch's kh rows (xs + (ox[i] - ox0) * pstep + ky * xrow, rsk floats each) times
 * g[i] added into rs (kh rows of rsk), one FMA per tap, term after term: the sums held
 * in registers over the terms.  rsk is the kernel row's kw * c taps rounded up to 16,
 * and the rows are read that far (whatever lies past the taps goes into the sums'
 * padding, never read): whole vectors, no masks. */
typedef struct SparseRows {
    const float *xs;
    int64_t pstep, xrow, n;
    const int32_t *ox;
    const float *g;
    int32_t ox0;
    int kh, rsk;
    float *rs;
    /* lines to ask for while the terms are summed, a share after each term (the next
     * input rows the caller copies after this call, so that their reads overlap these
     * FMAs): npf lines from pf on, 64 bytes apart */
    const float *pf;
    int64_t npf;
} SparseRows;

/* One product for graphc's own GEMM (kernels/gemm_micro.h): C = alpha op(A) op(B) +
 * beta C (+ bias), op = transpose if ta / tb, A, B and C stored row-major with row strides lda,
 * ldb, ldc (A [M, K] or, ta, [K, M]; B [K, N] or, tb, [N, K]). */
typedef struct KGemm {
    bool ta, tb;
    size_t M, N, K;
    float alpha, beta;
    const float *A;
    size_t lda;
    const float *B;
    size_t ldb;
    float *C;
    size_t ldc;
    const float *bias;   /* NULL, or N floats added to each row of C after alpha and beta */
} KGemm;

typedef struct KernVariant {
    KIsa isa;
    int lanes;   /* floats per vector */
    void (*fwd_row)(const FwdRow *r);
    void (*gradw_band)(const GradwBand *b);
    /* the planar path (NULL: the strip path) and its planes of 3 channels at stride 2
     * (prefetching pf floats ahead of src) */
    void (*planar_row)(const PlanarRow *r);
    void (*planes6)(const float *src, int64_t n, float *d, int64_t pw, int64_t pf);
    void (*sparse_rows)(const SparseRows *s);
    /* Adam's loop over whole vectors (the scalar loop's bits); returns the elements it
     * did.  NULL: the scalar loop does them all. */
    size_t (*adam)(float *w, float *m, float *v, const float *g, size_t n, float beta1, float beta2, float c1, float c2,
                   float step, float rsb2, float eps);
    /* graphc's GEMM (kernels/gemm_micro.h, kernels/blas.c): the floats of packing
     * buffer gemm needs for g; g's whole product on the calling thread (M, N, K >= 1,
     * buf 64-byte aligned); one row (M = 1, not tb), columns [n0, n1) only, no buffer.
     * Each element one chain of FMAs over k: the same bits however a product is cut.
     * NULL (portable): sgemm. */
    size_t (*gemm_buf)(const KGemm *g);
    void (*gemm)(const KGemm *g, float *buf);
    void (*gemv)(const KGemm *g, size_t n0, size_t n1);
    /* P[M, N] (row stride ldp) = op(A) B over K's rows [k0, k1) only (not tb), each
     * element one chain of FMAs from +0 (blas.c's own_ksplit) */
    void (*gemm_kpart)(const KGemm *g, size_t k0, size_t k1, float *P, size_t ldp);
    int gemm_nr;   /* columns per register tile, the unit a product's columns are cut in */
    /* B packed once into panels of gemm_pack_np columns (kern_gemm_pack): few rows of
     * C (M <= 16, beta 0), the columns of panels [p0, p1); one row's partial P[0, N)
     * over K's rows [k0, k1), from +0.  g->B unused. */
    void (*gemm_rows_packed)(const KGemm *g, const float *pack, size_t p0, size_t p1);
    void (*gemv_packed)(const KGemm *g, const float *pack, size_t k0, size_t k1, float *P);
    int gemm_pack_np;
    /* The vector math (kernels/vmath.h): util/elemwise.h's bits in every variant.  unary
     * and unary_grad do whole vectors of the functions they have and return how many
     * elements they did (the caller's scalar loop the rest); row_max and exp_sum are a
     * softmax row's maximum and its sum of e^(x - m), each term stored in y unless NULL. */
    size_t (*unary)(EwUnary op, const float *x, float *y, size_t n);
    size_t (*unary_grad)(EwUnary op, const float *v, const float *dy, float *dx, size_t n);
    float (*row_max)(const float *x, size_t n);
    float (*exp_sum)(const float *x, float m, float *y, size_t n);
    /* kern_softmax's rows (cols >= 1), from those two and a scaling */
    void (*softmax)(const float *x, float *y, size_t rows, size_t cols);
    /* a causal mask's rows: rows [0, rows) (ld apart) over n entries each, row r's from
     * keep + r on taken as `value`, then softmax's rows: their bits, y may be x */
    void (*softmax_keep)(const float *x, float *y, size_t rows, size_t n, size_t ld, size_t keep, float value);
    /* Layer norm's (kern.h) and softmax's gradient's rows, their sums in VM_ACC lanes;
     * row_stats is one row's mean and 1 / sqrt(var + eps) */
    void (*row_stats)(const float *x, size_t n, float eps, float *mean, float *rstd);
    void (*layer_norm)(const float *x, const float *gamma, const float *beta, size_t rows, size_t cols, float eps,
                       float *y);
    void (*layer_norm_grad)(const float *x, const float *gamma, const float *dy, const float *res, size_t rows,
                            size_t cols, float eps, float *dx);
    void (*softmax_grad)(const float *y, const float *dy, float *dx, size_t rows, size_t cols);
    /* Column sums in double of dy xhat (layer norm's gamma gradient, added into acc),
     * each column in row order (the scalar loop's bits) */
    void (*ln_scale_d)(const float *x, const float *dy, size_t rows, size_t cols, float eps, double *acc);
    /* acc[j] = column j's sum over the rows (ld apart), in double, in row order */
    void (*colsum_d)(const float *x, size_t rows, size_t cols, size_t ld, double *acc);
} KernVariant;

/* The variant that runs for `isa` (kern_isa_resolve's). */
const KernVariant *kern_variant(KIsa isa);

/* The instantiations (kernels/isa_*.c).  The x86 ones are built with GCC or clang for
 * x86 only, and not in the fuzz build (GRAPHC_NO_DIRECT_CONV: its targets never reach a
 * convolution, and instrumenting the micro-kernels took clang minutes); without them
 * kern_isa_cpu() is portable, and without the direct convolutions too the portable
 * variant has none (NULL fwd_row and gradw_band: conv.c's im2col path runs). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(GRAPHC_NO_DIRECT_CONV)
#define KERN_X86_VARIANTS 1
extern const KernVariant kern_variant_avx2, kern_variant_avx512;
#endif
extern const KernVariant kern_variant_portable;

#ifdef KERN_X86_VARIANTS
/* AMX's code (kernels/gemm_bf16.c, conv_bf16.c), and the 64 bytes LDTILECFG reads:
 * palette 1, then each tile's bytes a row and rows. */
#define AMX_FN __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
typedef struct TileCfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileCfg;
#endif

#endif
