/* The direct convolutions in bf16 (conv_bf16.c, docs/bf16.md): used by
 * conv.c in place of conv_direct_forward and conv_direct_grad_filter under --dtype bf16:
 * the forward pass, the fused conv2d_maxpool, the stride-1 input gradient and the
 * filter gradient.  Internal to kernels/. */
#ifndef GRAPHC_KERN_CONV_BF16_H
#define GRAPHC_KERN_CONV_BF16_H
#include "kernels/kern.h"

/* Does `isa` (with KISA_BF16) run p's direct forward in bf16?  p takes the direct
 * kernel (conv_direct_ok), has an even number of channels above 4 (each kernel row's
 * taps paired, VDPBF16PS's pairs; the few-channel first layers stay on the fp32 planar
 * path), and the CPU has AVX512_BF16.  The same answer for the packing and the rows. */
bool conv_bf16_ok(KIsa isa, const KConv *p);

/* p's filter (HWIO, [K, F]) rounded to bf16 (nearest even) in pairs of taps, blocks of
 * 16 filters ([F/16][K/2][16] words, zero past F): K F / 2 words rounded up to whole
 * blocks, which the direct path's packing scratch (conv_pack_floats(p) floats) holds.
 * _flipped: the filter of the forward convolution q whose output is p's input
 * gradient (conv_direct_grad_input_ok), from p's. */
void conv_bf16_pack(const KConv *p, const float *w, void *wp);
void conv_bf16_pack_flipped(const KConv *p, const float *w, void *wp);

/* conv_direct_forward's contract, in bf16: output rows [r0, r0 + rc) into y (row r0 at
 * y[0]) from the packed filter, the input rounded to bf16 as its rows are copied, the
 * products summed in fp32 (each output one chain over the taps in a fixed order, so
 * the same bits however the rows are cut), then y = act(y + bias) when bias is not
 * NULL. */
void conv_bf16_forward(const KConv *p, const float *x, const void *wp, const float *bias, EwAct act, float *y,
                       int64_t r0, int64_t rc);

/* conv_direct_grad_filter's contract in bf16: acc[K, F] += the filter gradient's share
 * of output rows [r0, r0 + rc), x and dy rounded to bf16, pairs of output pixels summed
 * by VDPBF16PS in fp32, a band of rows at a time (each band's sum from +0, then added
 * to acc). */
/* conv_bf16_ok, but for the filter gradient, which has no tile path yet: false where
 * the convolutions run on AMX's tiles (there VDPBF16PS has a quarter of the FMA's
 * rate, and this kernel ran at 0.53-0.67x fp32's), so it stays fp32 on those CPUs. */
bool conv_bf16_grad_filter_ok(KIsa isa, const KConv *p);
void conv_bf16_grad_filter(const KConv *p, const float *x, const float *dy, float *acc, int64_t r0, int64_t rc);

/* Test hook: mode < 0 keeps the forward off AMX's tiles (0: wherever the CPU has them
 * and a kernel row's taps are whole tiles). */
void conv_bf16_set_amx(int mode);

#endif
