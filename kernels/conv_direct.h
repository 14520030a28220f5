/* Direct convolution for few input channels (conv_direct.c), used by the conv
 * kernels in conv.c in place of im2col + sgemm where conv_direct_ok() says so.
 * Internal to exec/: kern.h stays the kernels' one public interface. */
#ifndef GRAPHC_KERN_CONV_DIRECT_H
#define GRAPHC_KERN_CONV_DIRECT_H
#include "kernels/kern.h"

/* Can these sizes take the direct path on this CPU (AVX2 and FMA), and is it on
 * (kern_conv_set_direct)? */
bool conv_direct_ok(const KConv *p);

/* Output pixels [m0, m0 + mc) (rows of the output viewed as [n*oh*ow, f]) of the
 * convolution into y (pixel m0 at y[0]), then y = act(y + bias) when bias is not NULL
 * (act: an epilogue, or act.fn < 0). */
void conv_direct_forward(const KConv *p, const float *x, const float *w, const float *bias, EwAct act,
                         float *y, int64_t m0, int64_t mc);

/* Many input channels (C > 4) and filters (F >= 8): a direct forward kernel on a filter packed once per
 * call (conv_wide_pack into conv_wide_pack_floats floats of scratch: blocks of 16
 * filters, [F/16][K][16], the last zero-filled).  Whether these sizes take it on this
 * CPU, and is it on (kern_conv_set_direct)? */
bool conv_wide_ok(const KConv *p);
size_t conv_wide_pack_floats(const KConv *p);
void conv_wide_pack(const KConv *p, const float *w, float *wp);
/* The input gradient of a stride-1 convolution p is the forward convolution q of dy
 * with the filter flipped and transposed ([KH, KW, F, C], padding KH-1-pt and KW-1-pl):
 * fills *q and says whether q takes the many-channel kernel.  Its packed filter
 * (conv_wide_pack_flipped of p's filter) is conv_wide_pack_floats(q) floats. */
bool conv_wide_grad_input_ok(const KConv *p, KConv *q);
void conv_wide_pack_flipped(const KConv *p, const float *w, float *wp);
/* Output rows [r0, r0 + rc) (rows (n, oy) of the output viewed as [n*oh, ow*f]) into y
 * (row r0 at y[0]) from the packed filter wp, then y = act(y + bias) when bias is not
 * NULL (act: an epilogue, or act.fn < 0). */
void conv_wide_forward(const KConv *p, const float *x, const float *wp, const float *bias, EwAct act, float *y,
                       int64_t r0, int64_t rc);

/* acc[K, F] += the filter gradient's share of output rows [r0, r0 + rc), for the sizes
 * conv_wide_ok takes (no packing: dy's rows are read as they are). */
void conv_wide_grad_filter(const KConv *p, const float *x, const float *dy, float *acc, int64_t r0, int64_t rc);

/* acc[K, F] += the filter gradient's share of output pixels [m0, m0 + mc). */
void conv_direct_grad_filter(const KConv *p, const float *x, const float *dy, float *acc, int64_t m0, int64_t mc);

#endif
