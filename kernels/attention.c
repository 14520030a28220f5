/* Fused attention (graph/fuse.c, pass attention): per (example, head) block, the
 * scores q k^T of the scaled queries, the causal mask and softmax, and the weighted sum
 * of the values, with the [T, T] probabilities in the calling thread's scratch (16 KiB
 * for charlm's 64 positions: in L1) instead of a [B, H, T, T] tensor written and read
 * back; and the backward from the output's gradient, which makes the probabilities
 * again rather than keep them (docs/kernels.md, "Attention").
 *
 * q, k, v and the output are [B, T, H, d] as the projections make them: block (b, h)
 * is T rows of d floats, H * d apart, read and written in place by the GEMM's leading
 * dimensions, so the heads need no transposed copy.  Each step is the kernel the ops
 * apart run (the scaling as `mul`, the products through kern_gemm_block, whose every
 * element is one chain of FMAs over k whatever the cut, the rows through
 * kern_softmax_causal and kern_softmax_grad_causal), so the fused op gives their
 * bits. */
#include "kernels/kern.h"

size_t kern_attention_scratch(size_t T, size_t d, bool grad)
{
    return T * d + (grad ? 2 : 1) * T * T;
}

/* Block blk's first float in q, k, v or the output. */
static size_t block_at(const KAttn *p, size_t blk)
{
    return ((blk / p->H) * p->T * p->H + blk % p->H) * p->d;
}

/* qs = q * scale (block `at`, as `mul` rounds it), then P = softmax(mask(qs k^T)) into
 * P [T, T]. */
static void probs(const KAttn *p, const float *q, const float *k, size_t at, float *qs, float *P)
{
    size_t T = p->T, d = p->d, ld = p->H * d;
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < d; c++) qs[t * d + c] = q[at + t * ld + c] * p->scale;
    kern_gemm_block(p->isa, false, true, T, T, d, 1.0f, qs, d, k + at, ld, 0.0f, P, T);
    if (p->causal)
        kern_softmax_causal(P, P, 0, T, T, T, p->value);
    else
        kern_softmax(P, P, T, T);
}

void kern_attention(const KAttn *p, const float *q, const float *k, const float *v, float *o, size_t blk0, size_t blk1,
                    float *scratch)
{
    size_t T = p->T, d = p->d, ld = p->H * d;
    float *qs = scratch, *P = scratch + T * d;
    for (size_t blk = blk0; blk < blk1; blk++) {
        size_t at = block_at(p, blk);
        probs(p, q, k, at, qs, P);
        kern_gemm_block(p->isa, false, false, T, d, T, 1.0f, P, T, v + at, ld, 0.0f, o + at, ld);
    }
}

/* With P again: dP = dy v^T, dS = P (dP - rowsum(P dP)) (masked), dv = P^T dy,
 * dq = scale dS k, dk = dS^T qs: the four products and the softmax gradient of the ops
 * apart. */
void kern_attention_grad(const KAttn *p, const float *q, const float *k, const float *v, const float *dy, float *dq,
                         float *dk, float *dv, size_t blk0, size_t blk1, float *scratch)
{
    size_t T = p->T, d = p->d, ld = p->H * d;
    float *qs = scratch, *P = scratch + T * d, *dS = P + T * T;
    for (size_t blk = blk0; blk < blk1; blk++) {
        size_t at = block_at(p, blk);
        probs(p, q, k, at, qs, P);
        kern_gemm_block(p->isa, false, true, T, T, d, 1.0f, dy + at, ld, v + at, ld, 0.0f, dS, T);
        if (p->causal)
            kern_softmax_grad_causal(P, dS, dS, 0, T, T, T, 0.0f);
        else
            kern_softmax_grad(P, dS, dS, T, T);
        kern_gemm_block(p->isa, true, false, T, d, T, 1.0f, P, T, dy + at, ld, 0.0f, dv + at, ld);
        kern_gemm_block(p->isa, false, false, T, d, T, 1.0f, dS, T, k + at, ld, 0.0f, dq + at, ld);
        for (size_t t = 0; t < T; t++)   /* the scale's `mul`, after the product as apart */
            for (size_t c = 0; c < d; c++) dq[at + t * ld + c] *= p->scale;
        kern_gemm_block(p->isa, true, false, T, d, T, 1.0f, dS, T, qs, d, 0.0f, dk + at, ld);
    }
}
