/* Direct convolution (conv_direct.c), used by the conv kernels in conv.c in place of
 * im2col + sgemm where conv_direct_ok() says so; its micro-kernels are kernels/micro.h's,
 * in the variant the caller passes.  Internal to kernels/: kern.h stays the kernels'
 * one public interface. */
#ifndef GRAPHC_KERN_CONV_DIRECT_H
#define GRAPHC_KERN_CONV_DIRECT_H
#include "kernels/variant.h"

/* Do these sizes take the direct forward kernel (and so the direct filter gradient),
 * and is it on (kern_conv_set_direct)?  The same
 * answer for every variant: few input channels (C <= 4) at any width, in tiles of
 * columns where a row's patches do not fit the strip; more (C > 4) with at least 8
 * filters where a whole row's do, or where the packed filter is at most 256 KiB. */
bool conv_direct_ok(const KConv *p);

/* The filter as the forward kernel reads it: packed once per call into blocks of
 * PACK_BLOCK filters, [F/16][K][16], the last zero-filled; or, where F is a multiple of
 * PACK_BLOCK and at most 64 or read by few pixels, as stored ([K][F]), copied only when
 * w is not 64-byte aligned.  conv_pack makes the copy, into conv_pack_floats(p) floats
 * of scratch, which the callers keep whether it is needed or not. */
bool conv_pack_needed(const KConv *p, const float *w);
size_t conv_pack_floats(const KConv *p);
void conv_pack(const KConv *p, const float *w, float *wp);
/* The input gradient of a stride-1 convolution p is the forward convolution q of dy
 * with the filter flipped and transposed ([KH, KW, F, C], padding KH-1-pt and KW-1-pl):
 * fills *q and says whether q takes the direct kernel.  Its filter, always a copy
 * (conv_pack_flipped of p's filter, in the layout q is read in), is conv_pack_floats(q)
 * floats. */
bool conv_direct_grad_input_ok(const KConv *p, KConv *q);
void conv_pack_flipped(const KConv *p, const float *w, float *wp);

/* Output rows [r0, r0 + rc) (rows (n, oy) of the output viewed as [n*oh, ow*f]) into y
 * (row r0 at y[0]) from the filter wp in the layout above (as stored, or conv_pack's),
 * then y = act(y + bias) when bias is not NULL (act: an epilogue, or act.fn < 0).  Each
 * output's value does not depend on how the rows are cut into calls. */
void conv_direct_forward(const KernVariant *kv, const KConv *p, const float *x, const float *wp, const float *bias,
                         EwAct act, float *y, int64_t r0, int64_t rc);

/* conv2d_maxpool in one pass where the planar path runs it (the variant has one,
 * whole rows fit its planes, bias and relu, the pool's windows kh x 4 at stride kh x 4
 * without padding, and such sizes that a window's cells are exact in floats): pooled
 * rows [r0, r0 + rc) (of q's output viewed as [n*oh, ow*c]) into y (row r0 at y[0])
 * and, unless NULL, their index into idx (as kern_maxpool_argmax's), the convolution's
 * rows pooled as they are made, in registers, from the planes of their input rows in
 * conv_direct_pool_floats(p, q) floats of ring (per thread; 0 where the planar path
 * does not run whole rows).  The bits of conv_direct_forward and maxpool_rows apart. */
bool conv_direct_pool_ok(const KernVariant *kv, const KConv *p, const KPool *q, const float *bias, EwAct act);
size_t conv_direct_pool_floats(const KConv *p, const KPool *q);
void conv_direct_pool(const KernVariant *kv, const KConv *p, const KPool *q, const float *x, const float *wp,
                      const float *bias, float *y, int32_t *idx, int64_t r0, int64_t rc, float *ring);

/* acc[K, F] += the filter gradient's share of output rows [r0, r0 + rc) (dy's rows
 * read as they are, x's a band of rows at a time). */
void conv_direct_grad_filter(const KernVariant *kv, const KConv *p, const float *x, const float *dy, float *acc,
                             int64_t r0, int64_t rc);

/* conv_direct_grad_filter's sums where dy is the scatter of a max pool q's gradient
 * dpool through idx (and the mask yv > 0 unless NULL), without making dy: the same
 * bands and tiles, each tap's chain with its zero terms left out, so the same bits
 * (for a finite x).  Needs conv_pooled_ok. */
bool conv_pooled_ok(const KConv *p, const KPool *q);
void conv_direct_grad_filter_pooled(const KernVariant *kv, const KConv *p, const KPool *q, const float *x,
                                    const int32_t *idx, const float *yv, const float *dpool, float *acc, int64_t r0,
                                    int64_t rc);

#endif
