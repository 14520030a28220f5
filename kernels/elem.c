/* Elementwise, row-wise, loss, layout, dropout and optimizer kernels. */

/* The loops here are written for the auto-vectorizer, which plain -O2 (GCC 12's
 * "very cheap" cost model) leaves off; measured 2-3x on the elementwise kernels.
 * Set before any include so every function in this file has the same options. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include "kernels/kern.h"
#include "kernels/variant.h"
#include "util/rng.h"

#include <math.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------- */

static size_t shape_numel(const int64_t *shape, int rank)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    return n;
}

/* Sum of n floats, accumulated in double with four independent chains. */
static double sum_d(const float *x, size_t n)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
    }
    for (; i < n; i++)
        s0 += x[i];
    return (s0 + s1) + (s2 + s3);
}

/* ---- broadcast binary ----------------------------------------------------------- */

/* One 2-d block: y[r, j] (contiguous, rows x cols) = a[r*ars + j*acs] OP b[r*brs + j*bcs]
 * with the column strides acs, bcs each 0 (broadcast) or 1 (contiguous). */
#define BIN2D(OP)                                                                  \
    for (size_t r = 0; r < rows; r++) {                                            \
        const float *ar = a + r * ars, *br = b + r * brs;                          \
        float *yr = y + r * cols;                                                  \
        if (acs && bcs) {                                                          \
            for (size_t j = 0; j < cols; j++)                                      \
                yr[j] = OP(ar[j], br[j]);                                          \
        } else if (acs) {                                                          \
            const float bv = br[0];                                                \
            for (size_t j = 0; j < cols; j++)                                      \
                yr[j] = OP(ar[j], bv);                                             \
        } else if (bcs) {                                                          \
            const float av = ar[0];                                                \
            for (size_t j = 0; j < cols; j++)                                      \
                yr[j] = OP(av, br[j]);                                             \
        } else {                                                                   \
            const float v = OP(ar[0], br[0]);                                      \
            for (size_t j = 0; j < cols; j++)                                      \
                yr[j] = v;                                                         \
        }                                                                          \
    }

static void bin2d(EwBinary op, const float *a, size_t ars, bool acs, const float *b, size_t brs,
                  bool bcs, float *y, size_t rows, size_t cols)
{
    switch (op) {
#define BINARY(E, name) case EW_##E: BIN2D(ew_##name) break;
#define UNARY(E, name, reads, param, def)
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    default: break;
    }
}

/* Is `v` (rank vrank) a trailing sub-shape of y, i.e. after dropping its leading 1s,
 * equal to y's last dims?  Returns its element count in *len when so. */
static bool trailing_vector(const int64_t *vshape, int vrank, const int64_t *yshape, int yrank,
                            size_t *len)
{
    int lead = 0;
    while (lead < vrank && vshape[lead] == 1)
        lead++;
    int k = vrank - lead;
    if (k > yrank)
        return false;
    for (int i = 0; i < k; i++)
        if (vshape[lead + i] != yshape[yrank - k + i])
            return false;
    *len = shape_numel(vshape + lead, k);
    return true;
}

/* Iteration over `full` (rank rank, right-aligned with the operands' shapes), innermost
 * dim first: the sizes in shp and each operand's element strides in s1, s2 (0 where it
 * is broadcast), with size-1 dims of `full` dropped and a dim merged into the next
 * inner one when both operands stay contiguous across them.  Returns the dims kept. */
static int collapse_dims(const int64_t *full, int rank, const int64_t *d1, int r1, const int64_t *d2, int r2,
                         int64_t *shp, int64_t *s1, int64_t *s2)
{
    int r = 0;
    int64_t str1 = 1, str2 = 1;
    for (int i = rank - 1; i >= 0; i--) {
        int i1 = i - (rank - r1), i2 = i - (rank - r2);
        int64_t fd = full[i], a = i1 >= 0 ? d1[i1] : 1, b = i2 >= 0 ? d2[i2] : 1;
        int64_t as = a == 1 ? 0 : str1, bs = b == 1 ? 0 : str2;
        str1 *= a;
        str2 *= b;
        if (fd == 1)
            continue;
        if (r > 0 && as == s1[r - 1] * shp[r - 1] && bs == s2[r - 1] * shp[r - 1]) {
            shp[r - 1] *= fd;
        } else {
            shp[r] = fd;
            s1[r] = as;
            s2[r] = bs;
            r++;
        }
    }
    return r;
}

void kern_binary(EwBinary op, const float *a, const int64_t *ashape, int arank,
                 const float *b, const int64_t *bshape, int brank,
                 float *y, const int64_t *yshape, int yrank)
{
    size_t ny = shape_numel(yshape, yrank);
    if (ny == 0)
        return;
    size_t na = shape_numel(ashape, arank), nb = shape_numel(bshape, brank);
    size_t len;

    /* Fast paths: equal shapes, a scalar side, a trailing vector (bias) side. */
    if (na == ny && nb == ny) {
        bin2d(op, a, 0, true, b, 0, true, y, 1, ny);
        return;
    }
    if (nb == 1 && na == ny) {
        bin2d(op, a, 0, true, b, 0, false, y, 1, ny);
        return;
    }
    if (na == 1 && nb == ny) {
        bin2d(op, a, 0, false, b, 0, true, y, 1, ny);
        return;
    }
    if (na == ny && trailing_vector(bshape, brank, yshape, yrank, &len)) {
        bin2d(op, a, len, true, b, 0, true, y, ny / len, len);
        return;
    }
    if (nb == ny && trailing_vector(ashape, arank, yshape, yrank, &len)) {
        bin2d(op, a, 0, true, b, len, true, y, ny / len, len);
        return;
    }

    /* General path.  Build dims innermost first, with element strides (0 where the
     * operand is broadcast), dropping size-1 dims of y and merging a dim into the
     * next inner one when both operands stay contiguous across them. */
    int64_t shp[KERN_MAX_RANK], sa[KERN_MAX_RANK], sb[KERN_MAX_RANK];
    int r = collapse_dims(yshape, yrank, ashape, arank, bshape, brank, shp, sa, sb);
    if (r == 0) {
        bin2d(op, a, 0, false, b, 0, false, y, 1, 1);
        return;
    }
    /* The innermost dim has strides 0 or 1; the next one gives the block's rows. */
    size_t cols = (size_t)shp[0];
    size_t rows = r >= 2 ? (size_t)shp[1] : 1;
    size_t ars = r >= 2 ? (size_t)sa[1] : 0, brs = r >= 2 ? (size_t)sb[1] : 0;
    bool acs = sa[0] != 0, bcs = sb[0] != 0;
    size_t block = rows * cols, nouter = ny / block;
    int64_t idx[KERN_MAX_RANK] = {0};
    size_t oa = 0, ob = 0;
    for (size_t o = 0; o < nouter; o++) {
        bin2d(op, a + oa, ars, acs, b + ob, brs, bcs, y + o * block, rows, cols);
        for (int d = 2; d < r; d++) {
            idx[d]++;
            oa += (size_t)sa[d];
            ob += (size_t)sb[d];
            if (idx[d] < shp[d])
                break;
            oa -= (size_t)(sa[d] * shp[d]);
            ob -= (size_t)(sb[d] * shp[d]);
            idx[d] = 0;
        }
    }
}

/* ---- sum_to: the adjoint of broadcasting --------------------------------------- */

/* The vector math: it gives util/elemwise.h's bits in every variant, so the best the CPU
 * runs does it whatever variant a caller asked for (as batch norm's loops). */
static const KernVariant *vmath(void) { return kern_variant(KISA_AUTO); }

enum { COLSUM_BLOCK = 256 };

void kern_colsum_d(const float *x, size_t rows, size_t cols, double *acc)
{
    vmath()->colsum_d(x, rows, cols, cols, acc);
}

void kern_colsum(const float *x, size_t rows, size_t cols, float scale, float *y)
{
    double acc[COLSUM_BLOCK];
    for (size_t j0 = 0; j0 < cols; j0 += COLSUM_BLOCK) {
        size_t jn = cols - j0 < COLSUM_BLOCK ? cols - j0 : COLSUM_BLOCK;
        vmath()->colsum_d(x + j0, rows, jn, cols, acc);
        for (size_t j = 0; j < jn; j++)
            y[j0 + j] = (float)(acc[j] * scale);
    }
}

void kern_sum_to(const float *x, const int64_t *xshape, int xrank,
                 float *y, const int64_t *yshape, int yrank)
{
    size_t ny = shape_numel(yshape, yrank), nx = shape_numel(xshape, xrank);
    if (ny == 0)
        return;
    if (nx == 0) {
        memset(y, 0, ny * sizeof *y);
        return;
    }
    /* Dims innermost first: x is contiguous; y's stride is 0 on the summed dims. */
    int64_t shp[KERN_MAX_RANK], sx[KERN_MAX_RANK], sy[KERN_MAX_RANK];
    int r = collapse_dims(xshape, xrank, xshape, xrank, yshape, yrank, shp, sx, sy);
    /* Fast paths: nothing summed, everything summed, [rows, cols] -> [cols]. */
    if (r == 0 || (r == 1 && sy[0] != 0)) {
        memmove(y, x, ny * sizeof *y);
        return;
    }
    if (r == 1) {
        y[0] = (float)sum_d(x, nx);
        return;
    }
    if (r == 2 && sy[0] != 0 && sy[1] == 0) {
        kern_colsum(x, (size_t)shp[1], (size_t)shp[0], 1.0f, y);
        return;
    }

    /* General path: zero y, then add each 2-d block [rows, cols] of x in. */
    memset(y, 0, ny * sizeof *y);
    size_t cols = (size_t)shp[0], rows = (size_t)shp[1];
    size_t yrs = (size_t)sy[1];
    bool ycs = sy[0] != 0;
    size_t block = rows * cols, nouter = nx / block;
    int64_t idx[KERN_MAX_RANK] = {0};
    size_t oy = 0;
    for (size_t o = 0; o < nouter; o++) {
        const float *xb = x + o * block;
        float *yb = y + oy;
        for (size_t rr = 0; rr < rows; rr++) {
            const float *xr = xb + rr * cols;
            float *yr = yb + rr * yrs;
            if (ycs) {
                for (size_t j = 0; j < cols; j++)
                    yr[j] += xr[j];
            } else {
                yr[0] += (float)sum_d(xr, cols);
            }
        }
        for (int d = 2; d < r; d++) {
            idx[d]++;
            oy += (size_t)sy[d];
            if (idx[d] < shp[d])
                break;
            oy -= (size_t)(sy[d] * shp[d]);
            idx[d] = 0;
        }
    }
}

/* ---- unary --------------------------------------------------------------------- */

void kern_unary(EwUnary op, float p, const float *x, float *y, size_t n)
{
    size_t i0 = vmath()->unary(op, x, y, n);
    switch (op) {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def)                                                     \
    case EW_##E:                                                                              \
        for (size_t i = i0; i < n; i++)                                                       \
            y[i] = ew_##name(x[i], p);                                                        \
        break;
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    default:
        break;
    }
}

/* dy is loaded whatever v is (relu: a select, not a branch). */
void kern_unary_grad(EwUnary op, float p, const float *v, const float *dy, float *dx, size_t n)
{
    size_t i0 = vmath()->unary_grad(op, v, dy, dx, n);
    switch (op) {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def)                                                     \
    case EW_##E:                                                                              \
        for (size_t i = i0; i < n; i++)                                                       \
            dx[i] = ew_##name##_grad(v[i], dy[i], p);                                         \
        break;
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    default:
        break;
    }
}

void kern_bias_act(float *y, size_t rows, size_t cols, const float *bias, EwAct act)
{
    for (size_t r = 0; r < rows; r++) {
        float *yr = y + r * cols;
        for (size_t j = 0; j < cols; j++)
            yr[j] += bias[j];
        if (act.fn >= 0)
            kern_unary((EwUnary)act.fn, act.p, yr, yr, cols);
    }
}

void kern_relu_mask(const float *x, float *dx, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = dx[i];
        dx[i] = x[i] > 0.0f ? g : 0.0f;
    }
}

/* Bit k of a word, as a table: the loops below test lanes against it, which the
 * vectorizer takes (a shift by the lane's index it does not, without AVX2). */
static const uint32_t bit_of[32] = {
    1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,
    1u << 8,  1u << 9,  1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
    1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
    1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31,
};

void kern_sign_bits(const float *x, uint32_t *bits, size_t n)
{
    for (size_t i = 0; i < n; i += 32) {
        size_t len = n - i < 32 ? n - i : 32;
        uint32_t b = 0;
        if (len == 32)
            for (size_t k = 0; k < 32; k++)
                b |= x[i + k] > 0.0f ? bit_of[k] : 0u;
        else
            for (size_t k = 0; k < len; k++)
                b |= x[i + k] > 0.0f ? bit_of[k] : 0u;
        bits[i / 32] = b;
    }
}

void kern_mask_bits(const uint32_t *bits, float *y, size_t n)
{
    for (size_t i = 0; i < n; i += 32) {
        size_t len = n - i < 32 ? n - i : 32;
        uint32_t b = bits[i / 32];
        if (len == 32)
            for (size_t k = 0; k < 32; k++) {
                float g = y[i + k];
                y[i + k] = b & bit_of[k] ? g : 0.0f;
            }
        else
            for (size_t k = 0; k < len; k++) {
                float g = y[i + k];
                y[i + k] = b & bit_of[k] ? g : 0.0f;
            }
    }
}

void kern_scale(const float *x, float s, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = s * x[i];
}

void kern_fill(float *y, float v, size_t n)
{
    if (v == 0.0f && !signbit(v)) {
        memset(y, 0, n * sizeof *y);
        return;
    }
    for (size_t i = 0; i < n; i++)
        y[i] = v;
}

void kern_copy(const float *x, float *y, size_t n)
{
    if (x != y && n)
        memmove(y, x, n * sizeof *y);
}

void kern_axpy_acc(float a, const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* ---- softmax family --------------------------------------------------------------- */

/* log(sum(exp(x - m))) for the row maximum m. */
static double row_lse_shifted(const float *x, size_t cols, float m)
{
    return log((double)vmath()->exp_sum(x, m, NULL, cols));
}

void kern_softmax(const float *x, float *y, size_t rows, size_t cols)
{
    if (cols)
        vmath()->softmax(x, y, rows, cols);
}

void kern_softmax_grad(const float *y, const float *dy, float *dx, size_t rows, size_t cols)
{
    if (cols)
        vmath()->softmax_grad(y, dy, dx, rows, cols);
}

void kern_log_softmax(const float *x, float *y, size_t rows, size_t cols)
{
    if (cols == 0)
        return;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = vmath()->row_max(xr, cols);
        float shift = m + (float)row_lse_shifted(xr, cols, m);
        for (size_t j = 0; j < cols; j++)
            yr[j] = xr[j] - shift;
    }
}

void kern_log_softmax_grad(const float *y, const float *dy, float *dx, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *dyr = dy + r * cols;
        float *dxr = dx + r * cols;
        float s = (float)sum_d(dyr, cols);
        for (size_t j = 0; j < cols; j++)
            dxr[j] = dyr[j] - kern_exp_shifted(yr[j]) * s;
    }
}

/* ---- losses --------------------------------------------------------------------- */

static int check_labels(const int32_t *labels, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        if (labels[r] < 0 || (size_t)labels[r] >= cols)
            return -1 - (int)r;
    return 0;
}

int kern_cross_entropy(const float *logits, const int32_t *labels, size_t rows, size_t cols, float *loss)
{
    return kern_cross_entropy_ls(logits, labels, rows, cols, 0.0f, loss);
}

/* Without smoothing, the sums the kernel has always made (the same bits). */
int kern_cross_entropy_ls(const float *logits, const int32_t *labels, size_t rows, size_t cols, float s, float *loss)
{
    int st = check_labels(labels, rows, cols);
    if (st)
        return st;
    double total = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = logits + r * cols;
        float m = vmath()->row_max(xr, cols);
        double lse = (double)m + row_lse_shifted(xr, cols, m);
        if (s == 0.0f) {
            total += lse - xr[labels[r]];
        } else {   /* (1 - s) (lse - x[label]) + s (lse - mean(x)) */
            double mean = 0;
            for (size_t j = 0; j < cols; j++)
                mean += xr[j];
            total += lse - (1.0 - s) * xr[labels[r]] - s * mean / (double)cols;
        }
    }
    *loss = rows ? (float)(total / (double)rows) : 0.0f;
    return 0;
}

int kern_cross_entropy_grad(const float *logits, const int32_t *labels, float dloss,
                            float *dlogits, size_t rows, size_t cols)
{
    return kern_cross_entropy_ls_grad(logits, labels, dloss, dlogits, rows, cols, 0.0f);
}

int kern_cross_entropy_ls_grad(const float *logits, const int32_t *labels, float dloss, float *dlogits, size_t rows,
                               size_t cols, float s)
{
    return kern_cross_entropy_ls_grad_rows(logits, labels, dloss, dlogits, 0, rows, rows, cols, s);
}

int kern_cross_entropy_ls_grad_rows(const float *logits, const int32_t *labels, float dloss, float *dlogits, size_t r0,
                                    size_t r1, size_t rows, size_t cols, float s)
{
    int st = check_labels(labels + r0, r1 - r0, cols);
    if (st)
        return st - (int)r0;
    float scale = dloss / (float)rows, spread = s / (float)cols;
    for (size_t r = r0; r < r1; r++) {
        float *dr = dlogits + r * cols;
        kern_softmax(logits + r * cols, dr, 1, cols);
        dr[labels[r]] -= 1.0f - s;
        if (s != 0.0f)
            for (size_t j = 0; j < cols; j++)
                dr[j] -= spread;
        for (size_t j = 0; j < cols; j++)
            dr[j] *= scale;
    }
    return 0;
}

size_t kern_count_correct(const float *logits, const int32_t *labels, size_t rows, size_t cols)
{
    size_t correct = 0;
    if (cols == 0)
        return 0;
    float (*row_max)(const float *, size_t) = vmath()->row_max;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = logits + r * cols;
        /* the first maximum, as `xr[j] > xr[best]` from best = 0 finds it: row_max
         * passes over NaNs after x[0] as that test does (a NaN x[0]: index 0) */
        float m = row_max(xr, cols);
        size_t best = 0;
        if (m == m)
            while (xr[best] != m)
                best++;
        if (labels[r] >= 0 && (size_t)labels[r] == best)
            correct++;
    }
    return correct;
}

void kern_mse(const float *a, const float *b, size_t n, float *loss)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        s += d * d;
    }
    *loss = n ? (float)(s / (double)n) : 0.0f;
}

void kern_mse_grad(const float *a, const float *b, float dloss, float *da, size_t n)
{
    if (n == 0)
        return;
    float k = 2.0f * dloss / (float)n;
    for (size_t i = 0; i < n; i++)
        da[i] = k * (a[i] - b[i]);
}

void kern_sum_all(const float *x, size_t n, float *y)
{
    y[0] = (float)sum_d(x, n);
}

/* ---- concat / slice ---------------------------------------------------------------- */

void kern_concat(const float *const *xs, const int64_t *lens, int nx, size_t outer, size_t inner, float *y)
{
    size_t total = 0;
    for (int i = 0; i < nx; i++)
        total += (size_t)lens[i];
    size_t ystride = total * inner;
    size_t off = 0;
    for (int i = 0; i < nx; i++) {
        size_t w = (size_t)lens[i] * inner;
        if (w)
            for (size_t o = 0; o < outer; o++)
                memcpy(y + o * ystride + off, xs[i] + o * w, w * sizeof *y);
        off += w;
    }
}

void kern_slice(const float *y, int64_t total_len, int64_t off, int64_t len, size_t outer, size_t inner, float *x)
{
    size_t ystride = (size_t)total_len * inner, w = (size_t)len * inner, yo = (size_t)off * inner;
    if (w == 0)
        return;
    for (size_t o = 0; o < outer; o++)
        memcpy(x + o * w, y + o * ystride + yo, w * sizeof *x);
}

/* ---- dropout ------------------------------------------------------------------------ */

/* out[i] = in[i] / (1 - rate) where the mask keeps element first + i, else 0.  The key
 * is rng_at's per-(seed, stream) half hoisted out of the loop; the bits equal
 * rng_at(seed, stream, first + i).  `first` places a shard of a larger tensor (a rank's
 * rows of the global batch) so that its mask is that part of the whole tensor's. */
static void dropout_apply(const float *in, float *out, size_t n, float rate, uint64_t seed, uint64_t stream,
                          uint64_t first)
{
    if (rate >= 1.0f) {   /* rng_unit < 1: nothing is kept */
        memset(out, 0, n * sizeof *out);
        return;
    }
    const uint64_t golden = 0x9E3779B97F4A7C15ull;
    uint64_t key = rng_mix(seed + golden * (stream + 1));
    float scale = 1.0f / (1.0f - rate);
    for (size_t i = 0; i < n; i++) {
        float u = rng_unit(rng_mix(key + golden * (first + (uint64_t)i + 1)));
        /* Branch-free (a random mask mispredicts half the time): v & (keep ? ~0 : 0). */
        float v = in[i] * scale;
        uint32_t bits, mask = 0u - (uint32_t)(u >= rate);
        memcpy(&bits, &v, sizeof bits);
        bits &= mask;
        memcpy(&out[i], &bits, sizeof bits);
    }
}

void kern_dropout(const float *x, float *y, size_t n, float rate, uint64_t seed, uint64_t stream, uint64_t first)
{
    dropout_apply(x, y, n, rate, seed, stream, first);
}

void kern_dropout_grad(const float *dy, float *dx, size_t n, float rate, uint64_t seed, uint64_t stream, uint64_t first)
{
    dropout_apply(dy, dx, n, rate, seed, stream, first);
}

/* ---- optimizers ------------------------------------------------------------------------ */

void kern_sgd(float *w, const float *g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

void kern_momentum(float *w, float *v, const float *g, size_t n, float lr, float mu, bool nesterov)
{
    if (nesterov) {
        for (size_t i = 0; i < n; i++) {
            float vi = mu * v[i] + g[i];
            v[i] = vi;
            w[i] -= lr * (g[i] + mu * vi);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float vi = mu * v[i] + g[i];
            v[i] = vi;
            w[i] -= lr * vi;
        }
    }
}

/* The variant's vector loop does whole vectors (Adam reads and writes three arrays per
 * parameter, so that makes it bound by memory instead of by the scalar square roots
 * and divisions: 3136 x 1024 weights on one thread, 8.9 -> 2.7 ms with AVX), this
 * loop the rest: the same bits either way (kernels/micro.h).  The scalar loop does not
 * vectorize by itself: sqrtf may set errno. */
void kern_adam(KIsa isa, float *w, float *m, float *v, const float *g, size_t n, float lr,
               float beta1, float beta2, float eps, int64_t t)
{
    if (t < 1)
        t = 1;
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    /* PyTorch: w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). */
    float step = (float)((double)lr / bc1);
    float rsb2 = (float)(1.0 / sqrt(bc2));
    float c1 = 1.0f - beta1, c2 = 1.0f - beta2;
    const KernVariant *kv = kern_variant(isa);
    size_t i = kv->adam ? kv->adam(w, m, v, g, n, beta1, beta2, c1, c2, step, rsb2, eps) : 0;
    for (; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + c1 * gi;
        float vi = beta2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] -= step * mi / (sqrtf(vi) * rsb2 + eps);
    }
}
