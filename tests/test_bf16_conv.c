/* --dtype bf16's direct convolutions (kernels/conv_bf16.c, docs/bf16.md): the forward
 * pass, the stride-1 input gradient, the filter gradient and the fused convolution
 * and max pool, against a
 * reference that rounds the operands to bf16 (nearest even) and sums in double;
 * operands whose rounding is known exactly; the same bits on 1 to 3 threads and
 * fused or not.  On a CPU without AVX512_BF16 there is nothing to run, and the test
 * says so. */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_bf16.h"
#include "kernels/kern.h"
#include "tests/testtrain.h"

static const KIsa BF = (KIsa)(KISA_AUTO | KISA_BF16);

static bool have_bf16(void)
{
    if (kern_bf16_cpu())
        return true;
    fprintf(stderr, "test_bf16_conv: this CPU lacks avx512_bf16 (or AVX-512): nothing to run\n");
    return false;
}

/* n, h, w, c, kh, kw, f, sh, sw, pt, pl (the padding at the bottom and right the same) */
typedef struct CShape {
    int64_t n, h, w, c, kh, kw, f, sh, sw, pt, pl;
} CShape;

static const CShape shapes[] = {
    { 2, 14, 14, 32, 5, 5, 64, 1, 1, 2, 2 },   /* the MNIST CNN's second layer */
    { 2, 28, 28, 32, 3, 3, 32, 1, 1, 1, 1 },   /* fashion-resnet's stages */
    { 2, 7, 7, 128, 3, 3, 128, 1, 1, 1, 1 },
    { 3, 9, 11, 6, 3, 3, 20, 1, 1, 1, 1 },     /* a partial vector of filters, 6 channels */
    { 2, 13, 13, 8, 3, 3, 40, 2, 2, 1, 1 },    /* stride 2: forward only */
    { 1, 10, 12, 16, 5, 5, 70, 1, 1, 0, 0 },   /* no padding, 70 filters */
    { 1, 8, 9, 10, 3, 5, 24, 1, 1, 1, 2 },     /* kh != kw */
    { 1, 3, 400, 32, 3, 3, 16, 1, 1, 1, 1 },   /* a row too wide for the strip: tiles of columns */
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

static KConv conv_of(const CShape *s)
{
    return (KConv){ .n = s->n, .h = s->h, .w = s->w, .c = s->c, .kh = s->kh, .kw = s->kw, .f = s->f, .sh = s->sh,
                    .sw = s->sw, .pt = s->pt, .pl = s->pl, .oh = (s->h + 2 * s->pt - s->kh) / s->sh + 1,
                    .ow = (s->w + 2 * s->pl - s->kw) / s->sw + 1 };
}

static int64_t in_len(const KConv *p) { return p->n * p->h * p->w * p->c; }
static int64_t out_len(const KConv *p) { return p->n * p->oh * p->ow * p->f; }
static int64_t w_len(const KConv *p) { return p->kh * p->kw * p->c * p->f; }

static float *scratch_for(const KConv *p, int threads)
{
    size_t b = kern_conv2d_scratch(p, threads);
    return aligned_alloc(64, (b + 63) / 64 * 64 + 64);
}

static float *random_buf(int64_t n, uint64_t stream)
{
    float *x = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        x[i] = 2.0f * rng_unit(rng_at(7, stream, (uint64_t)i)) - 1.0f;
    return x;
}

/* |got - ref| <= (terms + 4) 2^-24 S, S the sum of the terms' magnitudes and the bias's:
 * the fp32 sums' bound, given that the operands are rounded as the reference rounds
 * them; a wrong rounding of an operand is off by about 2^-9 of a term. */
static void check_near(const char *what, const KConv *p, int64_t at, float got, double ref, double mag, int64_t terms)
{
    const double tol = (double)(terms + 4) * 0x1p-24 * mag;
    ck_assert_msg(fabs(got - ref) <= tol,
                  "%s %lldx%lldx%lld, %lldx%lld -> %lld, stride %lld pad %lld,%lld: [%lld] = %.9g, expected %.9g (tol %.3g)",
                  what, (long long)p->h, (long long)p->w, (long long)p->c, (long long)p->kh, (long long)p->kw,
                  (long long)p->f, (long long)p->sh, (long long)p->pt, (long long)p->pl, (long long)at, got, ref, tol);
}

/* The forward pass with bias and relu (and without either), 1 to 3 threads: against the
 * reference, each thread count the same bits. */
START_TEST(forward_reference)
{
    if (!have_bf16())
        return;
    const KConv p = conv_of(&shapes[_i % NSHAPES]);
    conv_bf16_set_amx(_i < NSHAPES ? 0 : -1);
    ck_assert(kern_conv_direct_used(&p));
    float *x = random_buf(in_len(&p), 1), *w = random_buf(w_len(&p), 2), *bias = random_buf(p.f, 3);
    float *y = malloc((size_t)out_len(&p) * 4), *y1 = malloc((size_t)out_len(&p) * 4);
    for (int epi = 0; epi < 2; epi++) {
        const float *b = epi ? bias : NULL;
        const EwAct act = epi ? (EwAct){ EW_RELU, 0 } : EW_NO_ACT;
        for (int threads = 1; threads <= 3; threads++) {
            tu_threads(threads);
            float *scratch = scratch_for(&p, threads);
            kern_conv2d_bias_act(tu_pool, BF, &p, x, w, b, act, y, scratch);
            free(scratch);
            if (threads > 1) {
                ck_assert_msg(memcmp(y, y1, (size_t)out_len(&p) * 4) == 0, "shape %d: %d threads", _i, threads);
                continue;
            }
            memcpy(y1, y, (size_t)out_len(&p) * 4);
            for (int64_t n = 0; n < p.n; n++)
                for (int64_t oy = 0; oy < p.oh; oy++)
                    for (int64_t ox = 0; ox < p.ow; ox++)
                        for (int64_t f = 0; f < p.f; f++) {
                            double s = 0, mag = 0;
                            for (int64_t ky = 0; ky < p.kh; ky++)
                                for (int64_t kx = 0; kx < p.kw; kx++) {
                                    const int64_t iy = oy * p.sh - p.pt + ky, ix = ox * p.sw - p.pl + kx;
                                    if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
                                        continue;
                                    for (int64_t c = 0; c < p.c; c++) {
                                        double t = (double)bf16_round(x[((n * p.h + iy) * p.w + ix) * p.c + c]) *
                                                   bf16_round(w[((ky * p.kw + kx) * p.c + c) * p.f + f]);
                                        s += t;
                                        mag += fabs(t);
                                    }
                                }
                            if (b) {
                                s += b[f];
                                mag += fabs(b[f]);
                                s = s > 0 ? s : 0;
                            }
                            const int64_t at = ((n * p.oh + oy) * p.ow + ox) * p.f + f;
                            check_near("forward", &p, at, y[at], s, mag, p.kh * p.kw * p.c);
                        }
        }
    }
    free(x), free(w), free(bias), free(y), free(y1);
}
END_TEST

/* The stride-1 input gradient (the flipped filter's forward), 1 to 3 threads. */
START_TEST(grad_input_reference)
{
    if (!have_bf16())
        return;
    const KConv p = conv_of(&shapes[_i % NSHAPES]);
    conv_bf16_set_amx(_i < NSHAPES ? 0 : -1);
    if (p.sh != 1 || p.sw != 1)
        return;
    float *dy = random_buf(out_len(&p), 4), *w = random_buf(w_len(&p), 5);
    float *dx = malloc((size_t)in_len(&p) * 4), *dx1 = malloc((size_t)in_len(&p) * 4);
    for (int threads = 1; threads <= 3; threads++) {
        tu_threads(threads);
        float *scratch = scratch_for(&p, threads);
        kern_conv2d_grad_input(tu_pool, BF, &p, dy, w, dx, scratch);
        free(scratch);
        if (threads > 1) {
            ck_assert_msg(memcmp(dx, dx1, (size_t)in_len(&p) * 4) == 0, "shape %d: %d threads", _i, threads);
            continue;
        }
        memcpy(dx1, dx, (size_t)in_len(&p) * 4);
        for (int64_t n = 0; n < p.n; n++)
            for (int64_t iy = 0; iy < p.h; iy++)
                for (int64_t ix = 0; ix < p.w; ix++)
                    for (int64_t c = 0; c < p.c; c++) {
                        double s = 0, mag = 0;
                        for (int64_t ky = 0; ky < p.kh; ky++)
                            for (int64_t kx = 0; kx < p.kw; kx++) {
                                const int64_t oy = iy + p.pt - ky, ox = ix + p.pl - kx;
                                if (oy < 0 || oy >= p.oh || ox < 0 || ox >= p.ow)
                                    continue;
                                for (int64_t f = 0; f < p.f; f++) {
                                    double t = (double)bf16_round(dy[((n * p.oh + oy) * p.ow + ox) * p.f + f]) *
                                               bf16_round(w[((ky * p.kw + kx) * p.c + c) * p.f + f]);
                                    s += t;
                                    mag += fabs(t);
                                }
                            }
                        const int64_t at = ((n * p.h + iy) * p.w + ix) * p.c + c;
                        check_near("grad input", &p, at, dx[at], s, mag, p.kh * p.kw * p.f);
                    }
    }
    free(dy), free(w), free(dx), free(dx1);
}
END_TEST

/* Operands whose rounding is known: x all 1 + 3 2^-8 (to 1 + 2^-6, the even side of a
 * tie), w all 1 + 2^-8 (a tie, to 1), so that each output is exactly its number of
 * taps inside the image times 1 + 2^-6 (fp32 would give times (1 + 3 2^-8)(1 + 2^-8));
 * then the same for dx through the input gradient. */
START_TEST(rounds_to_even)
{
    if (!have_bf16())
        return;
    const KConv p = conv_of(&shapes[_i % NSHAPES]);
    conv_bf16_set_amx(_i < NSHAPES ? 0 : -1);
    float *x = malloc((size_t)in_len(&p) * 4), *w = malloc((size_t)w_len(&p) * 4), *y = malloc((size_t)out_len(&p) * 4);
    float *dx = malloc((size_t)in_len(&p) * 4), *dy = malloc((size_t)out_len(&p) * 4);
    for (int64_t i = 0; i < in_len(&p); i++)
        x[i] = 1.0f + 3 * 0x1p-8f;
    for (int64_t i = 0; i < w_len(&p); i++)
        w[i] = 1.0f + 0x1p-8f;
    for (int64_t i = 0; i < out_len(&p); i++)
        dy[i] = 1.0f + 3 * 0x1p-8f;
    tu_threads(1);
    float *scratch = scratch_for(&p, 1);
    kern_conv2d(tu_pool, BF, &p, x, w, y, scratch);
    if (p.sh == 1 && p.sw == 1)
        kern_conv2d_grad_input(tu_pool, BF, &p, dy, w, dx, scratch);
    free(scratch);
    for (int64_t oy = 0; oy < p.oh; oy++)
        for (int64_t ox = 0; ox < p.ow; ox++) {
            int64_t taps = 0;
            for (int64_t ky = 0; ky < p.kh; ky++)
                for (int64_t kx = 0; kx < p.kw; kx++) {
                    const int64_t iy = oy * p.sh - p.pt + ky, ix = ox * p.sw - p.pl + kx;
                    taps += iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
                }
            const float want = (float)(taps * p.c) * (1.0f + 0x1p-6f);
            for (int64_t f = 0; f < p.f; f++)
                ck_assert_msg(y[(oy * p.ow + ox) * p.f + f] == want, "shape %d: y[0, %lld, %lld, %lld] = %.9g, expected %.9g",
                              _i, (long long)oy, (long long)ox, (long long)f, y[(oy * p.ow + ox) * p.f + f], want);
        }
    if (p.sh == 1 && p.sw == 1)
        for (int64_t iy = 0; iy < p.h; iy++)
            for (int64_t ix = 0; ix < p.w; ix++) {
                int64_t taps = 0;
                for (int64_t ky = 0; ky < p.kh; ky++)
                    for (int64_t kx = 0; kx < p.kw; kx++) {
                        const int64_t oy = iy + p.pt - ky, ox = ix + p.pl - kx;
                        taps += oy >= 0 && oy < p.oh && ox >= 0 && ox < p.ow;
                    }
                const float want = (float)(taps * p.f) * (1.0f + 0x1p-6f);
                for (int64_t c = 0; c < p.c; c++)
                    ck_assert_msg(dx[(iy * p.w + ix) * p.c + c] == want,
                                  "shape %d: dx[0, %lld, %lld, %lld] = %.9g, expected %.9g", _i, (long long)iy,
                                  (long long)ix, (long long)c, dx[(iy * p.w + ix) * p.c + c], want);
            }
    free(x), free(w), free(y), free(dx), free(dy);
}
END_TEST

/* The filter gradient, 1 to 3 threads (each thread count's own partial sums: compared
 * to the reference, not to each other), and its exactly rounded case: x all 1 + 3 2^-8,
 * dy all 1 + 2^-8, so dW[t, f] is exactly the pixels whose tap t is inside the image
 * times 1 + 2^-6. */
START_TEST(grad_filter_reference)
{
    if (!have_bf16())
        return;
    conv_bf16_set_amx(-1);   /* the VDPBF16PS kernel: where the tiles run it is not taken */
    const KConv p = conv_of(&shapes[_i]);
    float *x = random_buf(in_len(&p), 9), *dy = random_buf(out_len(&p), 10), *dw = malloc((size_t)w_len(&p) * 4);
    const int64_t npix = p.n * p.oh * p.ow;
    for (int threads = 1; threads <= 3; threads++) {
        tu_threads(threads);
        float *scratch = scratch_for(&p, threads);
        kern_conv2d_grad_filter(tu_pool, BF, &p, x, dy, dw, scratch);
        free(scratch);
        for (int64_t ky = 0; ky < p.kh; ky++)
            for (int64_t kx = 0; kx < p.kw; kx++)
                for (int64_t c = 0; c < p.c; c++)
                    for (int64_t f = 0; f < p.f; f++) {
                        double s = 0, mag = 0;
                        for (int64_t n = 0; n < p.n; n++)
                            for (int64_t oy = 0; oy < p.oh; oy++)
                                for (int64_t ox = 0; ox < p.ow; ox++) {
                                    const int64_t iy = oy * p.sh - p.pt + ky, ix = ox * p.sw - p.pl + kx;
                                    if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
                                        continue;
                                    double t = (double)bf16_round(x[((n * p.h + iy) * p.w + ix) * p.c + c]) *
                                               bf16_round(dy[((n * p.oh + oy) * p.ow + ox) * p.f + f]);
                                    s += t;
                                    mag += fabs(t);
                                }
                        const int64_t at = ((ky * p.kw + kx) * p.c + c) * p.f + f;
                        check_near("grad filter", &p, at, dw[at], s, mag, npix);
                    }
    }
    for (int64_t i = 0; i < in_len(&p); i++)
        x[i] = 1.0f + 3 * 0x1p-8f;
    for (int64_t i = 0; i < out_len(&p); i++)
        dy[i] = 1.0f + 0x1p-8f;
    tu_threads(1);
    float *scratch = scratch_for(&p, 1);
    kern_conv2d_grad_filter(tu_pool, BF, &p, x, dy, dw, scratch);
    free(scratch);
    for (int64_t ky = 0; ky < p.kh; ky++)
        for (int64_t kx = 0; kx < p.kw; kx++) {
            int64_t inside = 0;
            for (int64_t oy = 0; oy < p.oh; oy++)
                for (int64_t ox = 0; ox < p.ow; ox++) {
                    const int64_t iy = oy * p.sh - p.pt + ky, ix = ox * p.sw - p.pl + kx;
                    inside += iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
                }
            const float want = (float)(inside * p.n) * (1.0f + 0x1p-6f);
            for (int64_t i = 0; i < p.c * p.f; i++)
                ck_assert_msg(dw[(ky * p.kw + kx) * p.c * p.f + i] == want, "shape %d: dw[%lld, %lld, %lld] = %.9g, expected %.9g",
                              _i, (long long)ky, (long long)kx, (long long)i, dw[(ky * p.kw + kx) * p.c * p.f + i], want);
        }
    conv_bf16_set_amx(0);
    free(x), free(dy), free(dw);
}
END_TEST

/* Where the convolutions run on AMX's tiles the filter gradient stays fp32
 * (conv_bf16_grad_filter_ok): under bf16 it gives fp32's bits there, 1 and 2 threads;
 * elsewhere it is the bf16 kernel checked above. */
START_TEST(grad_filter_fp32_on_amx)
{
    if (!have_bf16())
        return;
    if (!kern_bf16_amx()) {
        fprintf(stderr, "test_bf16_conv: no AMX: the filter gradient is bf16 here (grad_filter_reference)\n");
        return;
    }
    const KConv p = conv_of(&shapes[_i]);
    float *x = random_buf(in_len(&p), 11), *dy = random_buf(out_len(&p), 12);
    float *dw = malloc((size_t)w_len(&p) * 4), *want = malloc((size_t)w_len(&p) * 4);
    for (int threads = 1; threads <= 2; threads++) {
        tu_threads(threads);
        float *scratch = scratch_for(&p, threads);
        kern_conv2d_grad_filter(tu_pool, KISA_AUTO, &p, x, dy, want, scratch);
        kern_conv2d_grad_filter(tu_pool, BF, &p, x, dy, dw, scratch);
        free(scratch);
        ck_assert_msg(memcmp(dw, want, (size_t)w_len(&p) * 4) == 0, "shape %d, %d threads: not fp32's bits", _i, threads);
    }
    free(x), free(dy), free(dw), free(want);
}
END_TEST

/* conv2d_maxpool (and with its index) under bf16: the bits of the convolution and the
 * pool apart, 1 to 3 threads (the MNIST CNN's second layer and its 2x2 pool). */
START_TEST(maxpool_same_bits)
{
    if (!have_bf16())
        return;
    const KConv p = conv_of(&shapes[0]);
    const KPool q = { .n = p.n, .h = p.oh, .w = p.ow, .c = p.f, .kh = 2, .kw = 2, .sh = 2, .sw = 2,
                      .oh = p.oh / 2, .ow = p.ow / 2 };
    const int64_t ny = q.n * q.oh * q.ow * q.c;
    float *x = random_buf(in_len(&p), 6), *w = random_buf(w_len(&p), 7), *bias = random_buf(p.f, 8);
    float *conv = malloc((size_t)out_len(&p) * 4), *ref = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4);
    int32_t *idx = malloc((size_t)ny * 4);
    for (int threads = 1; threads <= 3; threads++) {
        tu_threads(threads);
        float *scratch = scratch_for(&p, threads);
        kern_conv2d_bias_act(tu_pool, BF, &p, x, w, bias, (EwAct){ EW_RELU, 0 }, conv, scratch);
        free(scratch);
        kern_maxpool(KISA_AUTO, &q, conv, ref);
        size_t b = kern_conv2d_maxpool_scratch(&p, &q, threads);
        scratch = aligned_alloc(64, (b + 63) / 64 * 64 + 64);
        kern_conv2d_maxpool(tu_pool, BF, &p, &q, x, w, bias, (EwAct){ EW_RELU, 0 }, y, scratch);
        ck_assert_msg(memcmp(y, ref, (size_t)ny * 4) == 0, "conv2d_maxpool on %d threads", threads);
        memset(y, 0, (size_t)ny * 4);
        kern_conv2d_maxpool_argmax(tu_pool, BF, &p, &q, x, w, bias, (EwAct){ EW_RELU, 0 }, y, idx, scratch);
        ck_assert_msg(memcmp(y, ref, (size_t)ny * 4) == 0, "conv2d_maxpool_argmax on %d threads", threads);
        free(scratch);
    }
    free(x), free(w), free(bias), free(conv), free(ref), free(y), free(idx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bf16_conv");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, forward_reference, 0, 2 * NSHAPES);
    tcase_add_loop_test(tc, grad_input_reference, 0, 2 * NSHAPES);
    tcase_add_loop_test(tc, rounds_to_even, 0, 2 * NSHAPES);
    tcase_add_loop_test(tc, grad_filter_reference, 0, NSHAPES);
    tcase_add_loop_test(tc, grad_filter_fp32_on_amx, 0, NSHAPES);
    tcase_add_test(tc, maxpool_same_bits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
