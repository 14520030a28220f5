/* The optimizers of issue 14 (RMSprop; weight decay, L2 or decoupled; a clipped
 * gradient) over the updates of elem.c, and the sum of squares behind clipping by global
 * norm.  See kern.h (KOptim). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <math.h>
#include "kernels/kern.h"

void kern_rmsprop(float *w, float *sq, float *buf, float *gavg, const float *g, size_t n, float lr, float rho,
                  float eps, float mu)
{
    float c = 1.0f - rho;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float s = rho * sq[i] + c * (gi * gi);
        sq[i] = s;
        if (gavg) {
            float a = rho * gavg[i] + c * gi;
            gavg[i] = a;
            s = s - a * a;
        }
        float avg = sqrtf(s) + eps;
        if (buf) {
            float b = mu * buf[i] + gi / avg;
            buf[i] = b;
            w[i] -= lr * b;
        } else {
            w[i] -= lr * (gi / avg);
        }
    }
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
    for (size_t at = 0; at < n; at += OPTIM_BLOCK) {
        size_t len = n - at < OPTIM_BLOCK ? n - at : OPTIM_BLOCK;
        float *wb = w + at;
        /* PyTorch's order: clip_grad_norm_ scales the gradient, the optimizer adds the
         * weight decay to it (or decays w itself, AdamW), then steps */
        for (size_t i = 0; i < len; i++) gb[i] = g[at + i] * o->scale;
        if (o->l2 != 0.0f)
            for (size_t i = 0; i < len; i++) gb[i] += o->l2 * wb[i];
        if (o->decay != 1.0f)
            for (size_t i = 0; i < len; i++) wb[i] *= o->decay;
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
