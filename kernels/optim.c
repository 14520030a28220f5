/* The optimizers of issue 14 (RMSprop; weight decay, L2 or decoupled; a clipped
 * gradient) over the updates of elem.c, and the sum of squares behind clipping by global
 * norm.  See kern.h (KOptim). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <math.h>
#include "kernels/kern.h"
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* One form of RMSprop's loop, specialized by the caller (constant flags).  The
 * compiler does not vectorize it (sqrtf may set errno), so on x86-64 four lanes go at
 * a time in SSE2 (every x86-64 has it), operation for operation the scalar loop: sqrt
 * and division are correctly rounded in both and nothing is contracted into FMAs
 * (-std=c11), so the same bits. */
static inline __attribute__((always_inline)) void rmsprop_loop(float *restrict w, float *restrict sq,
                                                               float *restrict buf, float *restrict gavg,
                                                               const float *restrict g, size_t n, float lr, float rho,
                                                               float eps, float mu, bool centered, bool momentum)
{
    float c = 1.0f - rho;
    size_t i = 0;
#ifdef __SSE2__
    const __m128 vr = _mm_set1_ps(rho), vc = _mm_set1_ps(c), ve = _mm_set1_ps(eps), vl = _mm_set1_ps(lr),
                 vm = _mm_set1_ps(mu);
    for (; i + 4 <= n; i += 4) {
        __m128 gi = _mm_loadu_ps(g + i);
        __m128 s = _mm_add_ps(_mm_mul_ps(vr, _mm_loadu_ps(sq + i)), _mm_mul_ps(vc, _mm_mul_ps(gi, gi)));
        _mm_storeu_ps(sq + i, s);
        if (centered) {
            __m128 a = _mm_add_ps(_mm_mul_ps(vr, _mm_loadu_ps(gavg + i)), _mm_mul_ps(vc, gi));
            _mm_storeu_ps(gavg + i, a);
            s = _mm_sub_ps(s, _mm_mul_ps(a, a));
        }
        __m128 avg = _mm_add_ps(_mm_sqrt_ps(s), ve);
        __m128 wi = _mm_loadu_ps(w + i);
        if (momentum) {
            __m128 b = _mm_add_ps(_mm_mul_ps(vm, _mm_loadu_ps(buf + i)), _mm_div_ps(gi, avg));
            _mm_storeu_ps(buf + i, b);
            _mm_storeu_ps(w + i, _mm_sub_ps(wi, _mm_mul_ps(vl, b)));
        } else {
            _mm_storeu_ps(w + i, _mm_sub_ps(wi, _mm_mul_ps(vl, _mm_div_ps(gi, avg))));
        }
    }
#endif
    for (; i < n; i++) {
        float gi = g[i];
        float s = rho * sq[i] + c * (gi * gi);
        sq[i] = s;
        if (centered) {
            float a = rho * gavg[i] + c * gi;
            gavg[i] = a;
            s = s - a * a;
        }
        float avg = sqrtf(s) + eps;
        if (momentum) {
            float b = mu * buf[i] + gi / avg;
            buf[i] = b;
            w[i] -= lr * b;
        } else {
            w[i] -= lr * (gi / avg);
        }
    }
}

void kern_rmsprop(float *w, float *sq, float *buf, float *gavg, const float *g, size_t n, float lr, float rho,
                  float eps, float mu)
{
    if (gavg && buf) rmsprop_loop(w, sq, buf, gavg, g, n, lr, rho, eps, mu, true, true);
    else if (gavg) rmsprop_loop(w, sq, NULL, gavg, g, n, lr, rho, eps, mu, true, false);
    else if (buf) rmsprop_loop(w, sq, buf, NULL, g, n, lr, rho, eps, mu, false, true);
    else rmsprop_loop(w, sq, NULL, NULL, g, n, lr, rho, eps, mu, false, false);
}

/* The optimizer's own step on n elements, the gradient as given. */
static void optim_step(const KOptim *o, float *w, float *const *st, const float *g, size_t n)
{
    switch (o->kind) {
    case KOPT_SGD: kern_sgd(w, g, n, o->lr); break;
    case KOPT_MOMENTUM: kern_momentum(w, st[0], g, n, o->lr, o->mu, o->nesterov); break;
    case KOPT_ADAM: kern_adam(w, st[0], st[1], g, n, o->lr, o->beta1, o->beta2, o->eps, o->t); break;
    default: {
        int k = 1;
        float *buf = o->mu > 0 ? st[k++] : NULL;
        float *gavg = o->centered ? st[k] : NULL;
        kern_rmsprop(w, st[0], buf, gavg, g, n, o->lr, o->rho, o->eps, o->mu);
        break;
    }
    }
}

/* The gradient made in blocks that stay in L1 (8 KiB), so the step reads it back from
 * there; large enough that Adam's two pow() per call do not count. */
enum { OPTIM_BLOCK = 2048 };

void kern_optim(const KOptim *o, float *w, float *const *st, const float *g, size_t n)
{
    if (o->scale == 1.0f && o->l2 == 0.0f && o->decay == 1.0f) {
        optim_step(o, w, st, g, n);
        return;
    }
    float gb[OPTIM_BLOCK];
    const float scale = o->scale, l2 = o->l2, decay = o->decay;   /* not reloaded past the stores into w */
    for (size_t at = 0; at < n; at += OPTIM_BLOCK) {
        size_t len = n - at < OPTIM_BLOCK ? n - at : OPTIM_BLOCK;
        float *wb = w + at;
        /* PyTorch's order: clip_grad_norm_ scales the gradient, the optimizer adds the
         * weight decay to it (or decays w itself, AdamW), then steps */
        for (size_t i = 0; i < len; i++) gb[i] = g[at + i] * scale;
        if (l2 != 0.0f)
            for (size_t i = 0; i < len; i++) gb[i] += l2 * wb[i];
        if (decay != 1.0f)
            for (size_t i = 0; i < len; i++) wb[i] *= decay;
        float *sb[KOPTIM_MAX_STATE];
        for (int k = 0; k < KOPTIM_MAX_STATE; k++) sb[k] = st[k] ? st[k] + at : NULL;
        optim_step(o, wb, sb, gb, len);
    }
}

double kern_sumsq(const float *x, size_t n)
{
    /* eight partial sums (a fixed order, so the bits do not depend on the compiler's
     * vectorization), each a double: a float sum of millions of squares would lose
     * digits the clipping factor keeps */
    double acc[8] = { 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
    double s = 0;
    for (; i < n; i++) s += (double)x[i] * (double)x[i];
    for (int j = 0; j < 8; j++) s += acc[j];
    return s;
}

float kern_clip_factor(double sumsq, float max_norm)
{
    double coef = (double)max_norm / (sqrt(sumsq) + 1e-6);
    return coef >= 1.0 ? 1.0f : (float)coef;   /* NaN stays NaN, as torch.clamp keeps it */
}
