/* The transformer kernels (issue 14): layout, ops along a run of axes, masks, embedding
 * rows, layer normalization, the sequence losses.  See kern.h for each contract. */

#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include "kernels/kern.h"
#include "kernels/variant.h"

#include <math.h>
#include <string.h>

/* ---- layout ------------------------------------------------------------------------ */

/* A run of n floats copied: 16 at a time with copies of a constant size, which the
 * compiler inlines (the heads' split and merge copy runs of 16: a call of memcpy per
 * run cost more than the copy). */
static inline void copy_run(uint32_t *d, const uint32_t *s, size_t n)
{
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        memcpy(d + j, s + j, 16 * sizeof *d);
    if (j < n)
        memcpy(d + j, s + j, (n - j) * sizeof *d);
}

void kern_transpose(const void *xv, const int64_t *xshape, int rank, const int8_t *perm, void *yv, size_t r0, size_t r1)
{
    const uint32_t *x = xv;
    uint32_t *y = yv;
    if (rank <= 1) {   /* nothing to permute */
        memcpy(y + r0, x + r0, (r1 - r0) * sizeof *y);
        return;
    }
    /* x's element strides, then y's dims and the x stride each y axis walks */
    int64_t xs[KERN_MAX_RANK], yd[KERN_MAX_RANK], ys[KERN_MAX_RANK];
    xs[rank - 1] = 1;
    for (int i = rank - 2; i >= 0; i--)
        xs[i] = xs[i + 1] * xshape[i + 1];
    for (int i = 0; i < rank; i++) {
        yd[i] = xshape[perm[i]];
        ys[i] = xs[perm[i]];
    }
    size_t inner = 1;
    for (int i = 1; i < rank; i++)
        inner *= (size_t)yd[i];
    size_t last = (size_t)yd[rank - 1];
    int64_t ls = ys[rank - 1];
    for (size_t r = r0; r < r1; r++) {
        /* y's row r: walk its other axes with a counter, the last one in a loop */
        int64_t idx[KERN_MAX_RANK] = { 0 };
        size_t off = (size_t)((int64_t)r * ys[0]);
        uint32_t *yr = y + r * inner;
        for (size_t k = 0; k < inner; k += last) {
            const uint32_t *xr = x + off;
            if (ls == 1)
                copy_run(yr + k, xr, last);
            else
                for (size_t j = 0; j < last; j++)
                    yr[k + j] = xr[(size_t)ls * j];
            for (int d = rank - 2; d >= 1; d--) {
                idx[d]++;
                off += (size_t)ys[d];
                if (idx[d] < yd[d])
                    break;
                off -= (size_t)(ys[d] * yd[d]);
                idx[d] = 0;
            }
        }
    }
}

void kern_slice_add(const float *x, int64_t total_len, int64_t off, int64_t len, size_t outer, size_t inner, float *y)
{
    size_t ystride = (size_t)total_len * inner, w = (size_t)len * inner, yo = (size_t)off * inner;
    for (size_t o = 0; o < outer; o++) {
        const float *xr = x + o * w;
        float *yr = y + o * ystride + yo;
        for (size_t j = 0; j < w; j++)
            yr[j] += xr[j];
    }
}

/* ---- along an axis ------------------------------------------------------------------- */

void kern_softmax_axis(const float *x, float *y, size_t outer, size_t len, size_t inner, bool is_log)
{
    if (inner == 1) {
        if (is_log)
            kern_log_softmax(x, y, outer, len);
        else
            kern_softmax(x, y, outer, len);
        return;
    }
    if (len == 0)
        return;
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
            const float *xr = x + o * len * inner + i;
            float *yr = y + o * len * inner + i;
            float m = xr[0];
            for (size_t l = 1; l < len; l++)
                m = xr[l * inner] > m ? xr[l * inner] : m;
            if (is_log) {
                double s = 0;
                for (size_t l = 0; l < len; l++)
                    s += kern_exp_shifted(xr[l * inner] - m);
                float shift = m + (float)log(s);
                for (size_t l = 0; l < len; l++)
                    yr[l * inner] = xr[l * inner] - shift;
            } else {
                float s = 0.0f;
                for (size_t l = 0; l < len; l++) {
                    float e = kern_exp_shifted(xr[l * inner] - m);
                    yr[l * inner] = e;
                    s += e;
                }
                float inv = 1.0f / s;
                for (size_t l = 0; l < len; l++)
                    yr[l * inner] *= inv;
            }
        }
}

void kern_softmax_axis_grad(const float *y, const float *dy, float *dx, size_t outer, size_t len, size_t inner, bool is_log)
{
    if (inner == 1) {
        if (is_log)
            kern_log_softmax_grad(y, dy, dx, outer, len);
        else
            kern_softmax_grad(y, dy, dx, outer, len);
        return;
    }
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
            size_t at = o * len * inner + i;
            const float *yr = y + at, *dyr = dy + at;
            float *dxr = dx + at;
            double acc = 0;
            for (size_t l = 0; l < len; l++)
                acc += is_log ? (double)dyr[l * inner] : (double)yr[l * inner] * dyr[l * inner];
            float d = (float)acc;
            for (size_t l = 0; l < len; l++)
                dxr[l * inner] = is_log ? dyr[l * inner] - kern_exp_shifted(yr[l * inner]) * d : yr[l * inner] * (dyr[l * inner] - d);
        }
}

void kern_reduce_sum(const float *x, size_t outer, size_t len, size_t inner, float scale, float *y)
{
    for (size_t o = 0; o < outer; o++)
        kern_colsum(x + o * len * inner, len, inner, scale, y + o * inner);
}

void kern_reduce_max(const float *x, size_t outer, size_t len, size_t inner, float *y)
{
    for (size_t o = 0; o < outer; o++) {
        const float *xo = x + o * len * inner;
        float *yo = y + o * inner;
        memcpy(yo, xo, inner * sizeof *yo);
        for (size_t l = 1; l < len; l++) {
            const float *xr = xo + l * inner;
            for (size_t i = 0; i < inner; i++)
                yo[i] = xr[i] > yo[i] ? xr[i] : yo[i];
        }
    }
}

void kern_reduce_max_grad(const float *x, const float *y, const float *dy, size_t outer, size_t len, size_t inner, float *dx)
{
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
            const float *xr = x + o * len * inner + i;
            float *dxr = dx + o * len * inner + i;
            float m = y[o * inner + i];
            bool routed = false;
            for (size_t l = 0; l < len; l++) {
                bool here = !routed && xr[l * inner] == m;
                dxr[l * inner] = here ? dy[o * inner + i] : 0.0f;
                routed |= here;
            }
        }
}

void kern_expand(const float *dy, size_t outer, size_t len, size_t inner, float scale, float *dx)
{
    for (size_t o = 0; o < outer; o++)
        for (size_t l = 0; l < len; l++) {
            const float *src = dy + o * inner;
            float *dst = dx + (o * len + l) * inner;
            if (scale == 1.0f)
                memcpy(dst, src, inner * sizeof *dst);
            else
                for (size_t i = 0; i < inner; i++)
                    dst[i] = scale * src[i];
        }
}

/* ---- masks ---------------------------------------------------------------------------- */

void kern_where(const float *cond, const int64_t *cshape, int crank, const float *a, const int64_t *ashape, int arank,
                const float *b, const int64_t *bshape, int brank, float *y, const int64_t *yshape, int yrank)
{
    size_t ny = 1;
    for (int i = 0; i < yrank; i++)
        ny *= (size_t)yshape[i];
    /* each operand's stride along each of y's axes: 0 where it is broadcast */
    const int64_t *shp[3] = { cshape, ashape, bshape };
    const int ranks[3] = { crank, arank, brank };
    int64_t st[3][KERN_MAX_RANK];
    for (int k = 0; k < 3; k++) {
        int64_t s = 1;
        for (int i = yrank - 1; i >= 0; i--) {
            int j = i - (yrank - ranks[k]);
            int64_t d = j >= 0 ? shp[k][j] : 1;
            st[k][i] = d == 1 ? 0 : s;
            s *= d;
        }
    }
    int64_t idx[KERN_MAX_RANK] = { 0 };
    size_t oc = 0, oa = 0, ob = 0;
    for (size_t e = 0; e < ny; e++) {
        y[e] = cond[oc] != 0.0f ? a[oa] : b[ob];
        for (int d = yrank - 1; d >= 0; d--) {
            idx[d]++;
            oc += (size_t)st[0][d];
            oa += (size_t)st[1][d];
            ob += (size_t)st[2][d];
            if (idx[d] < yshape[d])
                break;
            oc -= (size_t)(st[0][d] * yshape[d]);
            oa -= (size_t)(st[1][d] * yshape[d]);
            ob -= (size_t)(st[2][d] * yshape[d]);
            idx[d] = 0;
        }
    }
}

static const KernVariant *vmath(void);

/* A row of keys with those from `keep` on replaced by value (yr may be xr). */
static void mask_row(const float *xr, float *yr, size_t keep, size_t S, float value)
{
    if (yr != xr)
        memcpy(yr, xr, keep * sizeof *yr);
    for (size_t j = keep; j < S; j++)
        yr[j] = value;
}

void kern_causal_mask(const float *x, float *y, size_t mats, size_t T, size_t S, float value)
{
    for (size_t m = 0; m < mats; m++)
        for (size_t i = 0; i < T; i++)   /* keys 0 .. i + S - T stay */
            mask_row(x + (m * T + i) * S, y + (m * T + i) * S, i + 1 + (S - T), S, value);
}

/* Causal attention's softmax and its gradient with the mask, over rows [r0, r1) of the
 * [mats * T, S] scores, a matrix (or the part of one in the range) at a time, with the
 * bits of the two ops apart: the softmax by the vector math's masked rows (the mask in
 * registers, kernels/vmath.h), the gradient's rows differentiated, then masked, while
 * they are in L1 (a 64 x 64 matrix is 16 KiB).  One call of the variant's rows per
 * matrix: one per row cost as much as the pass saved. */
void kern_softmax_causal(const float *x, float *y, size_t r0, size_t r1, size_t T, size_t S, float value)
{
    if (S == 0)
        return;
    const KernVariant *vm = vmath();
    for (size_t lo = r0, hi; lo < r1; lo = hi) {
        hi = (lo / T + 1) * T < r1 ? (lo / T + 1) * T : r1;
        vm->softmax_keep(x + lo * S, y + lo * S, hi - lo, S, S, lo % T + 1 + (S - T), value);
    }
}

void kern_softmax_grad_causal(const float *y, const float *dy, float *dx, size_t r0, size_t r1, size_t T, size_t S,
                              float value)
{
    for (size_t lo = r0, hi; lo < r1; lo = hi) {
        hi = (lo / T + 1) * T < r1 ? (lo / T + 1) * T : r1;
        kern_softmax_grad(y + lo * S, dy + lo * S, dx + lo * S, hi - lo, S);
        for (size_t r = lo; r < hi; r++)
            mask_row(dx + r * S, dx + r * S, r % T + 1 + (S - T), S, value);
    }
}

/* ---- embedding ------------------------------------------------------------------------ */

int kern_embedding(const int32_t *ids, size_t n, const float *table, size_t vocab, size_t dim, float *y)
{
    for (size_t r = 0; r < n; r++) {
        if (ids[r] < 0 || (size_t)ids[r] >= vocab)
            return -1 - (int)r;
        memcpy(y + r * dim, table + (size_t)ids[r] * dim, dim * sizeof *y);
    }
    return 0;
}

int kern_embedding_grad(const int32_t *ids, size_t n, const float *dy, size_t vocab, size_t dim, size_t c0, size_t c1,
                        float *dt)
{
    for (size_t r = 0; r < n; r++)
        if (ids[r] < 0 || (size_t)ids[r] >= vocab)
            return -1 - (int)r;
    for (size_t v = 0; v < vocab; v++)
        memset(dt + v * dim + c0, 0, (c1 - c0) * sizeof *dt);
    for (size_t r = 0; r < n; r++) {
        float *row = dt + (size_t)ids[r] * dim;
        const float *src = dy + r * dim;
        for (size_t c = c0; c < c1; c++)
            row[c] += src[c];
    }
    return 0;
}

/* ---- layer normalization -------------------------------------------------------------- */

/* The rows' vector loops are the variant's (kernels/vmath.h): their sums in fixed lanes,
 * so every variant gives the same bits. */
static const KernVariant *vmath(void) { return kern_variant(KISA_AUTO); }

void kern_layer_norm(const float *x, const float *gamma, const float *beta, size_t rows, size_t cols, float eps, float *y)
{
    if (cols)
        vmath()->layer_norm(x, gamma, beta, rows, cols, eps, y);
}

void kern_layer_norm_grad(const float *x, const float *gamma, const float *dy, const float *res, size_t rows, size_t cols,
                          float eps, float *dx)
{
    if (cols)
        vmath()->layer_norm_grad(x, gamma, dy, res, rows, cols, eps, dx);
}

void kern_layer_norm_grad_scale(const float *x, const float *dy, size_t rows, size_t cols, float eps, double *acc)
{
    if (cols)
        vmath()->ln_scale_d(x, dy, rows, cols, eps, acc);
}

/* ---- binary cross entropy ------------------------------------------------------------- */

void kern_bce_logits(const float *x, const float *t, size_t n, float *loss)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double xi = x[i];
        s += (xi > 0 ? xi : 0) - xi * t[i] + log1p(exp(-fabs(xi)));
    }
    *loss = n ? (float)(s / (double)n) : 0.0f;
}

void kern_bce_logits_grad(const float *x, const float *t, float dloss, size_t n, bool wrt_target, float *d)
{
    if (n == 0)
        return;
    float k = dloss / (float)n;
    for (size_t i = 0; i < n; i++) {
        if (wrt_target) {
            d[i] = -x[i] * k;
        } else {
            float s = 1.0f / (1.0f + expf(-x[i]));
            d[i] = (s - t[i]) * k;
        }
    }
}
