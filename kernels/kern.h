/* The compute kernels: plain C functions over contiguous float32 buffers.
 *
 * Both executors (the op-by-op interpreter and the compiled plan) call these and
 * nothing else for arithmetic, so any difference between the two modes comes from
 * scheduling and memory, never from the math.  Every function here:
 *   - takes sizes explicitly, never allocates, never prints, never exits;
 *   - writes its whole output (no reliance on zeroed memory) unless it is named *_acc;
 *   - layouts: images NHWC, conv filters HWIO [KH, KW, Cin, Cout], matrices row-major;
 *   - a kernel that splits its work takes the Pool to split it over (NULL: serial) and
 *     gives the same bits for a given number of threads; scratch sizes depend on that
 *     number, passed as `threads`.
 * BLAS calls live in blas.c only. */
#ifndef GRAPHC_KERN_H
#define GRAPHC_KERN_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "util/elemwise.h"
#include "util/pool.h"

#define KERN_MAX_RANK 6

/* ---- instruction sets (cpu.c) ------------------------------------------------------
 * The kernels that exist in several variants (the direct convolutions, Adam's loop)
 * are written once, width-generic, and compiled once per instruction set
 * (docs/kernels.md); a caller says which to run with a KIsa, and KISA_AUTO (0, what a
 * zeroed options struct holds) runs the best this CPU has.  Every variant takes the
 * same path with the same scratch, so scratch sizes do not depend on it.
 * Order matters: a CPU that runs a variant runs every one below it. */
typedef enum KIsa { KISA_AUTO, KISA_PORTABLE, KISA_AVX2, KISA_AVX512, KISA_COUNT, KISA_BF16 = 16 } KIsa;

/* The best variant this CPU runs: avx512 (avx512f, bw, vl and fma), avx2 (avx2 and
 * fma), else portable (plain C).  Detected once. */
KIsa kern_isa_cpu(void);
/* The variant that runs when `isa` is asked for: the best for KISA_AUTO, and never one
 * the CPU cannot run (the best it can instead). */
KIsa kern_isa_resolve(KIsa isa);
/* "avx512", "avx2", "portable" ("auto" for KISA_AUTO). */
const char *kern_isa_name(KIsa isa);
/* The variant called `name` for a CPU whose best is `cpu`: 0, -1 for a name that is
 * none of them, -2 for one that CPU cannot run (*isa is set either way but for -1). */
int kern_isa_parse(const char *name, KIsa cpu, KIsa *isa);
/* "avx512, avx2 or portable": the names kern_isa_parse takes, for messages. */
const char *kern_isa_names(void);

/* --dtype bf16 (docs/bf16.md): KISA_BF16 or'ed into a KIsa, so that it reaches every
 * kernel the variant does, in both executors.  The variant is the KIsa without it
 * (kern_isa_resolve drops it); kern_gemm, kern_gemm_bias_act, kern_gemm_rows and
 * kern_gemm_block take it: their products round A and B to bfloat16 on packing and
 * accumulate in fp32 (kern_gemm_bf16).  It runs only where kern_bf16_cpu() (the
 * callers refuse it elsewhere: kern_dtype_check). */
static inline bool kern_isa_bf16(KIsa isa) { return (isa & KISA_BF16) != 0; }
/* The CPU has AVX512_BF16 (VCVTNE2PS2BF16, VDPBF16PS) besides the avx512 variant's
 * features.  Detected once. */
bool kern_bf16_cpu(void);
/* The CPU has AMX-TILE and AMX-BF16 and Linux granted this process the tile state
 * (asked once, here), unless GRAPHC_AMX=0 was set: then kern_gemm_bf16 runs on AMX's
 * tiles (kernels/gemm_bf16.c; within the same bound, not the bits of VDPBF16PS). */
bool kern_amx_cpu(void);
/* kern_amx_cpu(), unless a test turned it off: kern_bf16_set_amx(1) (0 restores). */
bool kern_bf16_amx(void);
void kern_bf16_set_amx(int mode);
/* NULL when `isa` runs; else why not, for a message ("needs avx512_bf16, which this
 * CPU lacks", or that the variant asked for is not avx512). */
const char *kern_dtype_check(KIsa isa);
/* "avx512+bf16" ("avx512+bf16+amx" where the products run on AMX), or
 * kern_isa_name's: what runs for `isa`, for headers. */
const char *kern_isa_label(KIsa isa);
/* C = alpha op(A) op(B) + beta C (+ bias[n] on each row, then act), lda/ldb/ldc the
 * stored row strides, with A and B rounded to bf16 (to nearest even; subnormals to
 * zero) and the products summed in fp32, split over pool (NULL: this thread): each
 * element the same bits however the product is cut.  false (C untouched) when it does
 * not run: no AVX512_BF16, K = 0, or no memory for its packing buffer. */
bool kern_gemm_bf16(Pool *pool, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                    size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc, const float *bias,
                    EwAct act);

/* ---- elementwise, with NumPy broadcasting ------------------------------------ */
/* The functions are util/elemwise.def's (EwBinary, EwUnary). */

/* y[yshape] = a[ashape] op b[bshape]; shapes right-aligned as in NumPy; yshape is the
 * broadcast shape (rank yrank >= arank, brank).  Fast paths for equal shapes, a scalar
 * side and a trailing-vector side (a bias). */
void kern_binary(EwBinary op, const float *a, const int64_t *ashape, int arank,
                 const float *b, const int64_t *bshape, int brank,
                 float *y, const int64_t *yshape, int yrank);

/* y[yshape] = sum of x[xshape] over the broadcast axes: the adjoint of broadcasting
 * yshape to xshape (yshape right-aligned, each dim equal to xshape's or 1). */
void kern_sum_to(const float *x, const int64_t *xshape, int xrank,
                 float *y, const int64_t *yshape, int yrank);

/* y[j] = scale * the sum over the rows of x[rows, cols] of x[r, j], accumulated in
 * double (scale 1: the bits of the plain sum). */
void kern_colsum(const float *x, size_t rows, size_t cols, float scale, float *y);

/* acc[j] = sum over the rows of x[rows, cols] of x[r, j], in double: one block of
 * kern_sum_to's [rows, cols] -> [cols] case, for callers that split the rows and add
 * the blocks' sums in a fixed order. */
void kern_colsum_d(const float *x, size_t rows, size_t cols, double *acc);

/* y = f(x) with f's parameter p. */
void kern_unary(EwUnary op, float p, const float *x, float *y, size_t n);
/* dx = f's gradient for dy, given v: the forward input x or output y, as
 * util/elemwise.def says f reads.  dx may be v or dy (in place). */
void kern_unary_grad(EwUnary op, float p, const float *v, const float *dy, float *dx, size_t n);

void kern_scale(const float *x, float s, float *y, size_t n);          /* y = s*x */
/* y[r, c] = act(y[r, c] + bias[c]) over rows x cols, in place. */
void kern_bias_act(float *y, size_t rows, size_t cols, const float *bias, EwAct act);
/* dx[i] = x[i] > 0 ? dx[i] : 0 (a relu gradient applied in place). */
void kern_relu_mask(const float *x, float *dx, size_t n);
/* A relu's mask kept in a bit per element, for a kernel that overwrites x before it
 * masks: bit i % 32 of bits[i / 32] is x[i] > 0 (the last word's other bits clear);
 * then y[i] = that bit ? y[i] : 0, the values kern_relu_mask(x, y) gives. */
void kern_sign_bits(const float *x, uint32_t *bits, size_t n);
void kern_mask_bits(const uint32_t *bits, float *y, size_t n);
void kern_fill(float *y, float v, size_t n);
void kern_copy(const float *x, float *y, size_t n);
void kern_axpy_acc(float a, const float *x, float *y, size_t n);       /* y += a*x */

/* ---- rows: softmax family over the last axis of [rows, cols] -------------------- */
/* e^d of a value less its row's maximum (d <= 0), as the vector math gives it
 * (util/vmath.h: +0 below -104, without glibc's slow underflow path, which a causal
 * mask's -1e9 sent half of attention's scores to). */
static inline float kern_exp_shifted(float d) { return vm_exp_s(d); }
void kern_softmax(const float *x, float *y, size_t rows, size_t cols);
void kern_softmax_grad(const float *y, const float *dy, float *dx, size_t rows, size_t cols);
void kern_log_softmax(const float *x, float *y, size_t rows, size_t cols);
void kern_log_softmax_grad(const float *y, const float *dy, float *dx, size_t rows, size_t cols);

/* Mean over rows of -log softmax(logits)[label].  Returns 0, or -1 - r for the first
 * row r whose label is outside [0, cols) (the loss is then not written). */
int kern_cross_entropy(const float *logits, const int32_t *labels, size_t rows, size_t cols, float *loss);
/* dlogits = dloss * (softmax(logits) - onehot(label)) / rows.  Same status as above. */
int kern_cross_entropy_grad(const float *logits, const int32_t *labels, float dloss,
                            float *dlogits, size_t rows, size_t cols);
/* Number of rows whose argmax equals the label (ties: the first maximum). */
size_t kern_count_correct(const float *logits, const int32_t *labels, size_t rows, size_t cols);

/* mean((a-b)^2) over n; its gradient with respect to a (that for b is the negation). */
void kern_mse(const float *a, const float *b, size_t n, float *loss);
void kern_mse_grad(const float *a, const float *b, float dloss, float *da, size_t n);

/* Sum of all n elements into y[0] (the mean: this, then kern_scale by 1/n). */
void kern_sum_all(const float *x, size_t n, float *y);

/* ---- matrix product (blas.c) ---------------------------------------------- */
/* C[M,N] = alpha * op(A) op(B) + beta * C, op = transpose if ta/tb; A, B row-major
 * as stored ([M,K] or [K,M]; [K,N] or [N,K]). beta = 0 overwrites C.  `isa`: the
 * variant of graphc's own GEMM (kernels/gemm_micro.h, docs/kernels.md), which runs in
 * the x86 variants (portable: sgemm): each element of C one chain of FMAs over k, then
 * alpha and beta, so the same bits whatever the thread count, the cut or the variant.
 * It allocates its packing buffers (through gc_malloc: without them, sgemm). */
void kern_gemm(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha,
               const float *A, const float *B, float beta, float *C);
/* C = act(op(A) op(B) + bias) (bias: N floats, one per column; a dense layer): the
 * bits of kern_gemm then kern_bias_act, the bias added as each tile of C is stored and
 * act applied by each thread to its part of C while it is in cache. */
void kern_gemm_bias_act(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, const float *A,
                        const float *B, const float *bias, EwAct act, float *C);
/* A dense layer's weights B [K, N] packed once for the few-rows products that stream
 * them (kernels/gemm_micro.h "B packed once"): made by kern_gemm_pack for one variant
 * and read by kern_gemm_bias_act_packed, which gives kern_gemm_bias_act's bits.  The
 * caller owns it and packs again whenever B is written (exec/compiled.c: a version per
 * weight). */
typedef struct KGemmPack {
    KIsa isa;      /* the variant it was made for */
    int np;        /* columns per panel */
    size_t K, N;
    float *data;   /* [ceil(N / np)][K][np], zero past N; NULL: none */
    void *raw;     /* data's allocation */
} KGemmPack;
/* Whether kern_gemm_bias_act(isa, ta, tb, M, N, K) would stream B from a pack: B as
 * stored, at least 1 MiB of it, M <= 16, the variant's own GEMM (not bf16), not the
 * long-K split. */
bool kern_gemm_pack_ok(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K);
/* Packs B [K, N] into pk for isa (its buffer kept when the sizes match).  false: out of
 * memory (pk emptied). */
bool kern_gemm_pack(KIsa isa, size_t K, size_t N, const float *B, KGemmPack *pk);
void kern_gemm_pack_free(KGemmPack *pk);
/* kern_gemm_bias_act (tb false) with B read from pk when it was made for isa, K and N
 * (else from B): the same bits. */
void kern_gemm_bias_act_packed(Pool *pool, KIsa isa, bool ta, size_t M, size_t N, size_t K, const float *A,
                               const KGemmPack *pk, const float *B, const float *bias, EwAct act, float *C);
/* Rows [r0, r1) of kern_gemm's C, on the calling thread (for a caller that splits the
 * work itself): C points at row r0 of C, [r1 - r0, N] contiguous. */
void kern_gemm_rows(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, size_t r0, size_t r1, float alpha,
                    const float *A, const float *B, float beta, float *C);
/* Rows per panel for a caller that makes an [M, N] product a panel of rows at a time
 * into scratch and consumes each panel while it is in cache (>= 1, <= M). */
size_t kern_gemm_panel_rows(size_t M, size_t N);
/* The same product on the calling thread, on blocks with explicit leading dimensions (lda,
 * ldb, ldc: the row strides of A, B, C as stored), never split: for a kernel that
 * splits its own work over the pool (a pool job runs kern_gemm's split serially anyway)
 * or reads a block of columns in place.  M, N, K >= 1. */
void kern_gemm_block(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
                     const float *B, size_t ldb, float beta, float *C, size_t ldc);
const char *kern_blas_info(void);   /* e.g. "OpenBLAS 0.3.21, core Haswell" */
/* kern_gemm with one row (M = 1, a dense layer at batch 1): graphc's own GEMV where its
 * GEMM runs (B not transposed: each row of B read once, in order, the columns cut over
 * the pool from 1 MiB of B on; the same bits as any other cut); else an sgemv, cut
 * along K over the pool from 1 MiB of B on (partials summed in block order: the bits
 * depend on the thread count). */
/* Test hook: graphc's own GEMM off (mode < 0: sgemm), forced on whatever the sizes
 * (> 0, where the variant has one), or automatic (0). */
void kern_gemm_set_own(int mode);

/* ---- convolution, NHWC x HWIO -> NHWC ------------------------------------------- */
typedef struct KConv {
    int64_t n, h, w, c;       /* input batch, height, width, channels */
    int64_t kh, kw, f;        /* filter height, width, output channels */
    int64_t sh, sw;           /* strides */
    int64_t pt, pl;           /* zero padding at top and left (bottom/right implied) */
    int64_t oh, ow;           /* output height and width */
} KConv;

/* The three convolution kernels below, for the scratch each needs. */
typedef enum KConvOp { KCONV_FORWARD, KCONV_GRAD_INPUT, KCONV_GRAD_FILTER, KCONV_OP_COUNT } KConvOp;
/* Scratch bytes kernel `op` touches for these sizes on a pool of `threads`,
 * by the path it takes: im2col chunks (bounded, whatever the batch or image), a [K, F]
 * partial sum per thread for the filter gradient, the filter packed for the direct
 * kernels (the input gradient's; the forward's when its count is not a multiple of
 * 16); 0 when it needs none (then NULL may be passed).  The same for every KIsa. */
size_t kern_conv_scratch(const KConv *p, KConvOp op, int threads);
/* The most of the three: one buffer that serves them all. */
size_t kern_conv2d_scratch(const KConv *p, int threads);
/* Test hook: im2col chunk height in output pixels (0: automatic, about 1 MiB). */
void kern_conv_set_chunk_rows(size_t rows);
/* An image network's convolutions run graphc's own direct kernels (kernels/conv_direct.c,
 * docs/kernels.md) in the variant `isa` names, instead of im2col + sgemm: few input
 * channels (C <= 4) at any size; more with at least 8 filters where a row's patches
 * fit 32 KiB or the packed filter 256 KiB (not the identity cases): the forward pass,
 * the filter gradient and, at stride 1, the input gradient (on the filter flipped
 * into the scratch).  Which sizes take them does not depend on the CPU.
 * Test hooks: whether these sizes take them, and mode < 0 to turn them off (0:
 * automatic). */
bool kern_conv_direct_used(const KConv *p);
void kern_conv_set_direct(int mode);
void kern_conv2d(Pool *pool, KIsa isa, const KConv *p, const float *x, const float *w, float *y, float *scratch);
/* conv2d, then y[., f] = act(y[., f] + bias[f]) on each chunk while it is in cache.
 * The same arithmetic as the three ops apart. */
void kern_conv2d_bias_act(Pool *pool, KIsa isa, const KConv *p, const float *x, const float *w, const float *bias,
                          EwAct act, float *y, float *scratch);
void kern_conv2d_grad_input(Pool *pool, KIsa isa, const KConv *p, const float *dy, const float *w, float *dx,
                            float *scratch);
void kern_conv2d_grad_filter(Pool *pool, KIsa isa, const KConv *p, const float *x, const float *dy, float *dw,
                             float *scratch);

/* ---- pooling, NHWC ---------------------------------------------------------------- */
typedef struct KPool {
    int64_t n, h, w, c;
    int64_t kh, kw, sh, sw, pt, pl, oh, ow;
} KPool;
/* Padding cells are ignored (max over real cells; avg divides by real cells).  The
 * max pooling kernels that take a KIsa run that variant's vector loops (kernels/pool.c),
 * the same bits in every variant. */
void kern_maxpool(KIsa isa, const KPool *p, const float *x, float *y);
/* dx from x, y and dy: the gradient goes to the first cell equal to the max. */
void kern_maxpool_grad(const KPool *p, const float *x, const float *y, const float *dy, float *dx);
/* Max pooling through indices (the compiled plan's form, graph/fuse.c): the input can
 * be freed after the forward pass.  idx[n, oy, ox, c] is the cell (iy * w + ix) of
 * image n holding the window's maximum, the first in row-major window order as in
 * kern_maxpool and kern_maxpool_grad (strict >), or -1 for a window of padding only.
 * gather gives exactly kern_maxpool's y; scatter exactly kern_maxpool_grad's dx (the
 * same additions in the same order), and with y (not NULL) also relu's gradient
 * mask y > 0, which at the routed cell equals x > 0. */
void kern_maxpool_argmax(KIsa isa, const KPool *p, const float *x, int32_t *idx);
void kern_maxpool_gather(KIsa isa, const KPool *p, const float *x, const int32_t *idx, float *y);
void kern_maxpool_scatter(KIsa isa, const KPool *p, const int32_t *idx, const float *y, const float *dy, float *dx);
/* A bias gradient through a max pool (graph/fuse.c's pooled_grads): for each part k <
 * parts, kern_colsum_d of pixels [m[k], m[k + 1]) of kern_maxpool_scatter(p, idx, y,
 * dy)'s output, viewed as [pixels, C], into acc + k * C, without making it: the same
 * sums in the same order (a zero adds nothing), in the variant `isa` names (the same
 * bits in each), where kern_maxpool_scatter_sum_ok (windows that neither overlap nor
 * pad, stride = size). */
bool kern_maxpool_scatter_sum_ok(const KPool *p);
void kern_maxpool_scatter_colsum_d(KIsa isa, const KPool *p, const int32_t *idx, const float *y, const float *dy,
                                   const int64_t *m, int parts, double *acc);
/* kern_conv2d_grad_filter(p, x, dy) where dy = kern_maxpool_scatter(q, idx, y, dpool)
 * (q's windows neither overlap nor pad), without making dy: only the cells the
 * windows route a gradient to are read (a 4x4 pool's: a sixteenth), each with the
 * taps of its patch, in the order the dense kernel sums them, so the same bits where
 * kern_conv2d_grad_filter_pooled_exact (the direct kernels at these sizes, K * F <=
 * 4096) and the input is finite (a zero times an infinity would be a NaN there).
 * The scratch is kern_conv_scratch(p, KCONV_GRAD_FILTER)'s. */
bool kern_conv2d_grad_filter_pooled_exact(const KConv *p, const KPool *q);
/* Does the pooled kernel pay, against the scatter and the dense kernel (the same bits)?
 * Where the windows are large and the rows wide: each row's sums are added to the
 * accumulator whatever few terms the row has. */
bool kern_conv2d_grad_filter_pooled_pays(const KConv *p, const KPool *q);
/* Test hook: 0 automatic; > 0 the pooled kernel pays wherever it is exact, < 0 nowhere
 * (set before the plan is made: the scratch depends on it). */
void kern_conv_set_pooled(int mode);
void kern_conv2d_grad_filter_pooled(Pool *pool, KIsa isa, const KConv *p, const KPool *q, const float *x,
                                    const int32_t *idx, const float *y, const float *dpool, float *dw, float *scratch);
/* kern_maxpool_grad, then kern_relu_mask(x, dx) (x is the relu's output), image by
 * image while it is in cache: the same bits as the two calls. */
void kern_maxpool_grad_relu(const KPool *p, const float *x, const float *y, const float *dy, float *dx);
/* conv2d_maxpool (graph/fuse.c): kern_conv2d_bias_act(p, x, w, bias, act) (bias NULL:
 * kern_conv2d), then kern_maxpool(q) of its output (q->h, q->w, q->c = p->oh, p->ow,
 * p->f), without writing the convolution's output: it is made band by band in each
 * thread's scratch and pooled there.  The same bits as the two calls (with the same
 * isa) where these sizes take the direct kernels (kern_conv2d_maxpool_exact, whatever
 * the variant); on im2col + sgemm the same values to rounding only (sgemm's bits
 * depend on how its calls are cut). */
bool kern_conv2d_maxpool_exact(const KConv *p);
/* Test hook: pooled rows per band (0: automatic, the conv rows in about 96 KiB). */
void kern_conv_set_pool_band(size_t rows);
size_t kern_conv2d_maxpool_scratch(const KConv *p, const KPool *q, int threads);
void kern_conv2d_maxpool(Pool *pool, KIsa isa, const KConv *p, const KPool *q, const float *x, const float *w,
                         const float *bias, EwAct act, float *y, float *scratch);
/* The same, with also kern_maxpool_argmax's index of the convolution's output into idx
 * (laid out as y): a training step's forward, whose backward needs only y and idx
 * (graph/fuse.c's conv_pool_argmax).  The same scratch. */
void kern_conv2d_maxpool_argmax(Pool *pool, KIsa isa, const KConv *p, const KPool *q, const float *x, const float *w,
                                const float *bias, EwAct act, float *y, int32_t *idx, float *scratch);
void kern_avgpool(const KPool *p, const float *x, float *y);
void kern_avgpool_grad(const KPool *p, const float *dy, float *dx);
/* [n, hw, c] -> [n, c] mean over hw, and its gradient. */
void kern_global_avgpool(const float *x, float *y, size_t n, size_t hw, size_t c);
void kern_global_avgpool_grad(const float *dy, float *dx, size_t n, size_t hw, size_t c);

/* ---- concat along one axis: inputs viewed as [outer, len_i * inner] -------------- */
/* y's row stride is total_len*inner; input i goes to column offset (sum of earlier
 * len_j) * inner.  The gradient is kern_slice for each input. */
void kern_concat(const float *const *xs, const int64_t *lens, int nx, size_t outer, size_t inner, float *y);
void kern_slice(const float *y, int64_t total_len, int64_t off, int64_t len, size_t outer, size_t inner, float *x);

/* ---- dropout with inverted scaling, counter-based mask ---------------------------- */
/* keep element i iff rng_unit(rng_at(seed, stream, i)) >= rate; kept values are scaled
 * by 1/(1-rate).  The gradient regenerates the same mask from the same arguments. */
/* `first`: the index of element 0 in the whole tensor when x is a shard of it (a rank's
 * rows of the global batch); the mask is that part of the whole tensor's mask. */
void kern_dropout(const float *x, float *y, size_t n, float rate, uint64_t seed, uint64_t stream, uint64_t first);
void kern_dropout_grad(const float *dy, float *dx, size_t n, float rate, uint64_t seed, uint64_t stream, uint64_t first);

/* ---- optimizer updates, in place ---------------------------------------------------- */
void kern_sgd(float *w, const float *g, size_t n, float lr);
/* v = mu*v + g; w -= lr*(nesterov ? g + mu*v : v)   (PyTorch's formulation) */
void kern_momentum(float *w, float *v, const float *g, size_t n, float lr, float mu, bool nesterov);
/* Adam (Kingma & Ba) with bias correction at step t (1-based); the vector loop of
 * variant `isa` (portable: the scalar loop), the same bits in every variant. */
void kern_adam(KIsa isa, float *w, float *m, float *v, const float *g, size_t n, float lr,
               float beta1, float beta2, float eps, int64_t t);
/* ---- optimizer updates inside the GEMM that makes their gradient (update.c) --------
 * The gradient op(A) op(B) [M, N] of a weight w [M, N] is never stored whole.
 * Momentum (not Nesterov): v = op(A) op(B) + mu v in one GEMM into the velocity, then
 * v += l2 w (weight decay, when l2 is not 0) and w -= lr v over the pool.  (SGD needs
 * no kernel of its own: kern_gemm with alpha -lr, beta 1 - lr l2 into w.) */
void kern_gemm_momentum(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, const float *A,
                        const float *B, float *w, float *v, float lr, float mu, float l2);
/* Any optimizer that reads the gradient elementwise (Adam, AdamW, RMSprop): the
 * gradient a panel of rows at a time into scratch (kern_gemm_optim_scratch bytes),
 * each panel's rows of w and its state st (as kern_optim's) updated from it by
 * kern_optim, or, at a long K and a small w, by parts of K summed before kern_optim;
 * the panels and the parts are fixed by the sizes, so the bits do not depend on the
 * thread count. */
size_t kern_gemm_optim_scratch(bool ta, bool tb, size_t M, size_t N, size_t K, int threads);
/* A weight's gradient at a long K (kern_gemm's cut of K, kernels/blas.c): the number of
 * parts of K kern_gemm makes op(A) op(B) in (1: not cut), for the isa and from the
 * sizes alone (kern_gemm_kparts_of: as if the variant had graphc's GEMM, for sizing
 * scratch).  kern_gemm_kparts_sum makes the parts over the pool, each [M, N] from +0
 * into part (parts x M x N floats), and leaves their sum, in part order, in its first
 * M x N: kern_gemm's and kern_gemm_optim's one way to the same bits. */
size_t kern_gemm_kparts(KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K);
size_t kern_gemm_kparts_of(bool ta, bool tb, size_t M, size_t N, size_t K);
void kern_gemm_kparts_sum(Pool *pool, KIsa isa, bool ta, bool tb, size_t M, size_t N, size_t K, size_t parts,
                          const float *A, const float *B, float *part);
/* Test hook: rows per panel (0: automatic, kern_gemm_panel_rows). */
void kern_gemm_optim_set_panel(size_t rows);
typedef struct KOptim KOptim;
void kern_gemm_optim(Pool *pool, bool ta, bool tb, size_t M, size_t N, size_t K, const float *A, const float *B,
                     const KOptim *o, float *w, float *const *st, float *scratch);
/* A dense layer's backward whose input x [B, K] is a relu output, with the update of its
 * weight w [K, N]: out = (x > 0 ? dy w^T : 0) and w's update from x^T dy, where out
 * may be x itself (x is read whole before it is written); l2 the weight decay, as
 * kern_gemm_momentum's and SGD's GEMM above take it.  Momentum without weight decay
 * gives the bits of the ops apart; SGD goes panel by panel of x's columns and rounds
 * otherwise.  Scratch: kern_dense_backward_scratch bytes. */
size_t kern_dense_backward_scratch(size_t B, size_t K, bool sgd, int threads);
void kern_dense_backward_sgd(Pool *pool, KIsa isa, const float *x, const float *dy, float *w, float *out, size_t B, size_t K,
                             size_t N, float lr, float l2, float *scratch);
void kern_dense_backward_momentum(Pool *pool, KIsa isa, const float *x, const float *dy, float *w, float *v, float *out,
                                  size_t B, size_t K, size_t N, float lr, float mu, float l2, float *scratch);

/* ---- the transformer kernels (seq.c, blas.c; issue 14) ----------------------------
 * Ops along a run of axes see their tensor as [outer, len, inner]: the axes before the
 * run, the run, the axes after it.  Sums are accumulated in double. */

/* C[b] = alpha op(A[b]) op(B[b]) + beta C[b] for b < batch, each matrix stored as
 * kern_gemm's and the batch's matrices back to back (A[b] at A + b M K, ...): one BLAS
 * call per matrix, the batch spread over the pool (a batch smaller than the pool: each
 * product split as kern_gemm splits it). */
void kern_gemm_batch(Pool *pool, KIsa isa, bool ta, bool tb, size_t batch, size_t M, size_t N, size_t K, float alpha,
                     const float *A, const float *B, float beta, float *C);

/* y = x with its axes permuted (y's axis i is x's axis perm[i]), for 4-byte elements of
 * any type; only y's rows [r0, r1) along its first axis are written. */
void kern_transpose(const void *x, const int64_t *xshape, int rank, const int8_t *perm, void *y, size_t r0, size_t r1);

/* softmax (or log-softmax) along the middle axis of [outer, len, inner], and its
 * gradient from y and dy; inner 1 is kern_softmax's (kern_log_softmax's) rows. */
void kern_softmax_axis(const float *x, float *y, size_t outer, size_t len, size_t inner, bool is_log);
void kern_softmax_axis_grad(const float *y, const float *dy, float *dx, size_t outer, size_t len, size_t inner, bool is_log);

/* y[o, i] = scale * sum over l of x[o, l, i] (scale 1/len: the mean); the max; dx of the
 * max: dy[o, i] at the first l where x equals y, 0 elsewhere; dx = scale * dy copied
 * along the middle axis (the sum's and mean's gradient). */
void kern_reduce_sum(const float *x, size_t outer, size_t len, size_t inner, float scale, float *y);
void kern_reduce_max(const float *x, size_t outer, size_t len, size_t inner, float *y);
void kern_reduce_max_grad(const float *x, const float *y, const float *dy, size_t outer, size_t len, size_t inner, float *dx);
void kern_expand(const float *dy, size_t outer, size_t len, size_t inner, float scale, float *dx);

/* y[yshape] = cond != 0 ? a : b, the three broadcast to yshape (NumPy's rule). */
void kern_where(const float *cond, const int64_t *cshape, int crank, const float *a, const int64_t *ashape, int arank,
                const float *b, const int64_t *bshape, int brank, float *y, const int64_t *yshape, int yrank);

/* mats matrices [T, S]: y = x with element (i, j) replaced by value where j > i + S - T
 * (a later position than the query's); y may be x. */
void kern_causal_mask(const float *x, float *y, size_t mats, size_t T, size_t S, float value);
/* The softmax over the last axis of causal_mask(x), and causal_mask(softmax_grad(y,
 * dy), value), over rows [r0, r1) of [mats * T, S] scores, with the bits of the ops
 * apart; y may be x, dx may be y or dy. */
void kern_softmax_causal(const float *x, float *y, size_t r0, size_t r1, size_t T, size_t S, float value);
void kern_softmax_grad_causal(const float *y, const float *dy, float *dx, size_t r0, size_t r1, size_t T, size_t S,
                              float value);

/* Fused self-attention (kernels/attention.c): q, k, v and the output [B, T, H, d], one
 * block of T rows per (example, head), rows H * d apart; the probabilities P [B, H, T,
 * T].  Each writes blocks [blk0, blk1) (blk = b * H + h): kern_attention o =
 * softmax(mask(scale q k^T)) v with P in scratch; in a training step kern_attention_probs
 * P and kern_attention_out o = P v apart, and kern_attention_grad dq, dk, dv from the
 * output's gradient dy and that P.  scratch: kern_attention_scratch floats, the calling
 * thread's own.  The bits of the ops apart (mul, batch_matmul, softmax_causal or
 * softmax, and their gradients). */
typedef struct KAttn {
    size_t B, T, H, d;
    float scale;    /* q's factor */
    bool causal;    /* key j > query i masked */
    float value;    /* what the mask puts in the masked scores */
    KIsa isa;       /* the GEMM's variant */
} KAttn;
typedef enum KAttnStep { KATTN_FUSED, KATTN_PROBS, KATTN_OUT, KATTN_GRAD } KAttnStep;
size_t kern_attention_scratch(KAttnStep step, size_t T, size_t d);
void kern_attention(const KAttn *p, const float *q, const float *k, const float *v, float *o, size_t blk0, size_t blk1,
                    float *scratch);
void kern_attention_probs(const KAttn *p, const float *q, const float *k, float *P, size_t blk0, size_t blk1,
                          float *scratch);
void kern_attention_out(const KAttn *p, const float *P, const float *v, float *o, size_t blk0, size_t blk1);
void kern_attention_grad(const KAttn *p, const float *q, const float *k, const float *v, const float *P, const float *dy,
                         float *dq, float *dk, float *dv, size_t blk0, size_t blk1, float *scratch);

/* y[r] = table[ids[r]] for r < n (rows of dim); returns 0, or -1 - r for the first id
 * outside [0, vocab) (y is then not complete). */
int kern_embedding(const int32_t *ids, size_t n, const float *table, size_t vocab, size_t dim, float *y);
/* The table's gradient, columns [c0, c1) only (a caller splits the columns; the rows of
 * a column are added in the ids' order, so the bits do not depend on the split):
 * dt[v, c] = sum of dy[r, c] over the r with ids[r] == v.  Touches the rows of the ids
 * used and zeroes the others; no one-hot.  Returns as kern_embedding. */
int kern_embedding_grad(const int32_t *ids, size_t n, const float *dy, size_t vocab, size_t dim, size_t c0, size_t c1,
                        float *dt);

/* Layer normalization of the rows of x [rows, cols]: (x - mean) / sqrt(var + eps) * gamma
 * + beta, mean and (biased) variance per row; the input's gradient from dy (the mean and
 * deviation recomputed from x), with res [rows, cols] added to it unless res is NULL
 * (the bits of the gradient, then `add`; dx may be x, dy or res); gamma's gradient
 * acc[c] += dy * xhat over the rows. */
void kern_layer_norm(const float *x, const float *gamma, const float *beta, size_t rows, size_t cols, float eps, float *y);
void kern_layer_norm_grad(const float *x, const float *gamma, const float *dy, const float *res, size_t rows, size_t cols,
                          float eps, float *dx);
void kern_layer_norm_grad_scale(const float *x, const float *dy, size_t rows, size_t cols, float eps, double *acc);

/* kern_cross_entropy and its gradient with label smoothing s (PyTorch's): the target of
 * a row is (1 - s) one-hot(label) + s / cols. */
int kern_cross_entropy_ls(const float *logits, const int32_t *labels, size_t rows, size_t cols, float s, float *loss);
int kern_cross_entropy_ls_grad(const float *logits, const int32_t *labels, float dloss, float *dlogits, size_t rows,
                               size_t cols, float s);
/* The gradient's rows [r0, r1) of a batch of `rows` (each row's values do not depend on
 * the others: the pool's parts give the bits of the whole); a bad label returns -1 - its
 * row in the batch. */
int kern_cross_entropy_ls_grad_rows(const float *logits, const int32_t *labels, float dloss, float *dlogits, size_t r0,
                                    size_t r1, size_t rows, size_t cols, float s);

/* Binary cross entropy with logits, mean over n: max(x, 0) - x t + log(1 + exp(-|x|));
 * its gradient with respect to x, (sigmoid(x) - t) dloss / n, or to t, -x dloss / n. */
void kern_bce_logits(const float *x, const float *t, size_t n, float *loss);
void kern_bce_logits_grad(const float *x, const float *t, float dloss, size_t n, bool wrt_target, float *d);

/* The adjoint of kern_slice: x [outer, len, inner] added into y [outer, total_len,
 * inner] at offset off along the middle axis. */
void kern_slice_add(const float *x, int64_t total_len, int64_t off, int64_t len, size_t outer, size_t inner, float *y);
/* ---- batch norm over the last axis of x [rows, C] (bnorm.c) --------------------------
 * Sums over the rows in float over runs of 16 rows, added in double, in a fixed grid of
 * blocks added in order: the bits do not depend on the thread count.  Every function here that takes scratch takes
 * kern_bn_scratch(C) bytes (8-byte aligned). */
size_t kern_bn_scratch(size_t C);
/* stats [2, C]: the mean and the (biased) variance of each column. */
void kern_bn_stats(Pool *pool, const float *x, size_t rows, size_t C, float *stats, double *scratch);
/* The normalization y = (x - mean) * scale + beta: scale = gamma / sqrt(var + eps)
 * (with a batch's statistics, or the running ones).  The mean is taken off first: x *
 * scale + (beta - mean * scale) would lose the digits of a small spread about a large
 * mean. */
void kern_bn_scale(const float *var, const float *gamma, float eps, size_t C, float *scale);
/* y[r, c] = act((x[r, c] - mean[c]) * scale[c] + beta[c] [+ res[r, c]]) (res NULL: none;
 * the sum rounded before res is added, the bits of the ops apart); y may be x or res. */
void kern_bn_apply(Pool *pool, const float *x, const float *res, size_t rows, size_t C, const float *mean,
                   const float *scale, const float *beta, EwAct act, float *y);
/* The relu a batch norm applied (kern_bn_apply with EW_RELU), taken by its backward
 * instead of relu's gradient: dy where (x - mean) * scale + beta > 0, else +0 (the
 * bits of kern_unary_grad's relu on the output), scale = kern_bn_scale(var, gamma,
 * eps).  So the backward never reads the output.  gamma NULL: dy as given. */
typedef struct BnRelu {
    const float *gamma, *beta;
} BnRelu;
#define BN_NO_RELU ((BnRelu){ NULL, NULL })
/* The backward's first pass: d [2, C] = the sums over the rows of dy (x - mean) / sqrt(var
 * + eps) (gamma's gradient) and of dy (beta's), stats as kern_bn_stats gives them. */
void kern_bn_grad_params(Pool *pool, const float *x, const float *dy, size_t rows, size_t C, const float *stats, float eps,
                         BnRelu relu, float *d, double *scratch);
/* The second: dx = gamma / sqrt(var + eps) * (dy - d[1] / rows - (x - mean) / sqrt(var
 * + eps) * d[0] / rows), the gradient through the batch's statistics included; dx may
 * be dy. */
void kern_bn_grad_input(Pool *pool, const float *dy, const float *x, size_t rows, size_t C, const float *stats,
                        const float *gamma, const float *d, float eps, BnRelu relu, float *dx, float *scratch);
/* The running statistics, Keras' way: mean = momentum * mean + (1 - momentum) * the
 * batch's; var the same with the batch's variance times count / (count - 1), count the
 * values per channel (Bessel's correction, as PyTorch keeps it). */
void kern_bn_update(float *mean, float *var, const float *stats, size_t C, float momentum, int64_t count);

/* ---- issue 14's optimizers, weight decay and clipping (optim.c) ----------------------
 * Every optimizer as PyTorch 1.13 defines it (torch.optim.SGD, Adam, AdamW, RMSprop,
 * and torch.nn.utils.clip_grad_norm_ before the step). */
typedef enum KOptimKind { KOPT_SGD, KOPT_MOMENTUM, KOPT_ADAM, KOPT_RMSPROP, KOPT_KIND_COUNT } KOptimKind;
#define KOPTIM_MAX_STATE 3
struct KOptim {
    KOptimKind kind;
    float lr;
    float mu;             /* MOMENTUM, RMSPROP: the momentum (RMSPROP: 0, none) */
    bool nesterov;        /* MOMENTUM */
    float beta1, beta2;   /* ADAM */
    float rho;            /* RMSPROP: the squares' average's decay (PyTorch's alpha) */
    bool centered;        /* RMSPROP: the gradient's average subtracted under the root */
    float eps;            /* ADAM, RMSPROP */
    int64_t t;            /* ADAM: the step, from 1 (bias correction) */
    float scale;          /* the gradient's factor (clipping by global norm); 1: none */
    float l2;             /* weight decay added to the gradient, g + l2 w; 0: none */
    float decay;          /* w *= decay before the step (AdamW: 1 - lr weight_decay); 1: none */
    KIsa isa;             /* ADAM: the variant of its vector loop (kern_adam) */
};
/* One step on n elements of a parameter w, its optimizer state st (KOPTIM_MAX_STATE
 * pointers, in the order the optimizer keeps them, NULL past the last: momentum's
 * velocity; Adam's m, v; RMSprop's square_avg, then its momentum buffer when mu > 0,
 * then its gradient average when centered) and its gradient g: g' = g scale + l2 w,
 * w *= decay, then the optimizer's step on g'.  Without scale, l2 and decay, exactly
 * kern_sgd, kern_momentum or kern_adam. */
void kern_optim(const KOptim *o, float *w, float *const *st, const float *g, size_t n);
/* RMSprop: s = rho s + (1 - rho) g^2; centered (gavg): a = rho a + (1 - rho) g and
 * s - a^2 under the root; avg = sqrt(.) + eps; with a momentum buffer (buf),
 * b = mu b + g / avg and w -= lr b, else w -= lr (g / avg). */
void kern_rmsprop(float *w, float *sq, float *buf, float *gavg, const float *g, size_t n, float lr, float rho,
                  float eps, float mu);
/* The sum of x's squares in double, in a fixed order. */
double kern_sumsq(const float *x, size_t n);
/* The factor a clipped gradient is multiplied by: min(1, max_norm / (sqrt(sumsq) +
 * 1e-6)), as clip_grad_norm_ computes it. */
float kern_clip_factor(double sumsq, float max_norm);

#endif
