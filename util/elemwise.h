/* The scalar math of the elementwise functions listed in util/elemwise.def, shared by
 * the kernels (a loop over each, vectorized by the compiler; exp, tanh and the functions
 * made of them are util/vmath.h's, whose vector loops give these bits) and constant
 * folding (one value), so a folded constant has the bits the kernel would give.  Below both the
 * graph and the kernels: it knows neither.
 *
 * Each gradient returns dx for the incoming gradient dy, written as the kernels have
 * always computed it (the same operations in the same order: the bits of every result
 * depend on that). */
#ifndef GRAPHC_ELEMWISE_H
#define GRAPHC_ELEMWISE_H
#include <math.h>
#include "util/vmath_scalar.h"

/* What a unary gradient reads besides dy (see elemwise.def). */
enum { EW_READS_X, EW_READS_Y };

typedef enum EwBinary {
#define BINARY(E, name) EW_##E,
#define UNARY(E, name, reads, param, def)
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    EW_BINARY_COUNT
} EwBinary;

typedef enum EwUnary {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) EW_##E,
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    EW_UNARY_COUNT
} EwUnary;

/* A unary function with its parameter, applied after a GEMM's bias (an epilogue);
 * fn < 0: none. */
typedef struct EwAct {
    int fn;      /* an EwUnary, or -1 */
    float p;
} EwAct;
#define EW_NO_ACT ((EwAct){ -1, 0.0f })

/* ---- binary ------------------------------------------------------------------------ */
static inline float ew_add(float a, float b) { return a + b; }
static inline float ew_sub(float a, float b) { return a - b; }
static inline float ew_mul(float a, float b) { return a * b; }
static inline float ew_div(float a, float b) { return a / b; }

/* ---- unary ------------------------------------------------------------------------- */
static inline float ew_neg(float x, float p) { (void)p; return -x; }
static inline float ew_neg_grad(float v, float dy, float p) { (void)v, (void)p; return -dy; }

/* relu's gradient reads its output: y > 0 exactly where x > 0.  dy is selected, not
 * multiplied (a NaN gradient where x <= 0 gives 0). */
static inline float ew_relu(float x, float p) { (void)p; return x > 0.0f ? x : 0.0f; }
static inline float ew_relu_grad(float y, float dy, float p) { (void)p; return y > 0.0f ? dy : 0.0f; }

static inline float ew_sigmoid(float x, float p) { (void)p; return vm_sigmoid_s(x); }
static inline float ew_sigmoid_grad(float y, float dy, float p) { (void)p; return dy * y * (1.0f - y); }

static inline float ew_tanh(float x, float p) { (void)p; return vm_tanh_s(x); }
static inline float ew_tanh_grad(float y, float dy, float p) { (void)p; return dy * (1.0f - y * y); }

static inline float ew_exp(float x, float p) { (void)p; return vm_exp_s(x); }
static inline float ew_exp_grad(float y, float dy, float p) { (void)p; return dy * y; }

static inline float ew_log(float x, float p) { (void)p; return logf(x); }
static inline float ew_log_grad(float x, float dy, float p) { (void)p; return dy / x; }

static inline float ew_sqrt(float x, float p) { (void)p; return sqrtf(x); }
static inline float ew_sqrt_grad(float y, float dy, float p) { (void)p; return 0.5f * dy / y; }

/* GELU, erf form (PyTorch's default): x Phi(x), its derivative Phi(x) + x phi(x); Phi as
 * erfc(-x / sqrt 2) / 2, which keeps its relative accuracy for negative x (1 + erf(.)
 * cancels there). */
static inline float ew_gelu(float x, float p) { (void)p; return 0.5f * x * erfcf(-x * 0.70710678f); }
static inline float ew_gelu_grad(float x, float dy, float p)
{
    (void)p;
    return dy * (0.5f * erfcf(-x * 0.70710678f) + x * 0.39894228f * expf(-0.5f * x * x));
}

/* SiLU (swish): x sigmoid(x); its derivative s (1 + x (1 - s)), s = sigmoid(x). */
static inline float ew_silu(float x, float p) { (void)p; return vm_silu_s(x); }
static inline float ew_silu_grad(float x, float dy, float p) { (void)p; return vm_silu_grad_s(x, dy); }

/* Leaky ReLU: x, or alpha x for x <= 0 (alpha = p; 0.01 by default, as PyTorch's).  Its
 * gradient reads x: with a negative alpha, y > 0 does not say where x was. */
static inline float ew_leaky_relu(float x, float p) { return x > 0.0f ? x : p * x; }
static inline float ew_leaky_relu_grad(float x, float dy, float p) { return x > 0.0f ? dy : p * dy; }

/* ---- the transformer family (issue 14) ---------------------------------------------- */
/* Binary: their gradients are rules of graph/autodiff.c (g_pow, g_max, ...).  max and
 * min pass the gradient to a where a == b; greater and less make a mask (1 or 0) for
 * where() and have no gradient.  max and min give NaN when either operand is one, as
 * PyTorch's maximum, minimum and clamp do: clip(sqrt(-1), ...) must not hide the NaN
 * (it gave the bound, and g_max sent the gradient to the NaN side). */
static inline float ew_pow(float a, float b) { return powf(a, b); }
static inline float ew_max(float a, float b) { return a >= b || a != a ? a : b; }
static inline float ew_min(float a, float b) { return a <= b || a != a ? a : b; }
static inline float ew_greater(float a, float b) { return a > b ? 1.0f : 0.0f; }
static inline float ew_less(float a, float b) { return a < b ? 1.0f : 0.0f; }

/* Softplus, log(1 + e^x), as PyTorch's (beta 1, threshold 20): x itself above 20, where
 * log1p(e^x) equals x in float; its derivative sigmoid(x), 1 above 20. */
static inline float ew_softplus(float x, float p) { (void)p; return x > 20.0f ? x : log1pf(expf(x)); }
static inline float ew_softplus_grad(float x, float dy, float p)
{
    (void)p;
    if (x > 20.0f) return dy;
    float z = expf(x);
    return dy * z / (z + 1.0f);
}

/* GELU, tanh form (PyTorch's approximate="tanh"): x (1 + tanh(u)) / 2 with u = k (x +
 * 0.044715 x^3), k = sqrt(2 / pi), computed as x sigmoid(2u), the same function without
 * 1 + tanh(u)'s cancellation for negative x; its derivative s + 2 x s (1 - s) u'. */
static inline float ew_gelu_tanh(float x, float p) { (void)p; return vm_gelu_tanh_s(x); }
static inline float ew_gelu_tanh_grad(float x, float dy, float p) { (void)p; return vm_gelu_tanh_grad_s(x, dy); }

/* ---- by enum: for constant folding and tests (the kernels loop over the inline
 * functions above directly) ---------------------------------------------------------- */
static inline float ew_binary(EwBinary op, float a, float b)
{
    switch (op) {
#define BINARY(E, name) case EW_##E: return ew_##name(a, b);
#define UNARY(E, name, reads, param, def)
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    default: return NAN;
    }
}

static inline float ew_unary(EwUnary op, float x, float p)
{
    switch (op) {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) case EW_##E: return ew_##name(x, p);
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    default: return NAN;
    }
}

static inline float ew_unary_grad(EwUnary op, float v, float dy, float p)
{
    switch (op) {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) case EW_##E: return ew_##name##_grad(v, dy, p);
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    default: return NAN;
    }
}

/* A unary function's name, what its gradient reads (EW_READS_X or EW_READS_Y) and its
 * parameter's default, from elemwise.def. */
static inline const char *ew_unary_name(EwUnary op)
{
    static const char *const names[] = {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) #name,
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    };
    return (unsigned)op < EW_UNARY_COUNT ? names[op] : "?";
}

static inline int ew_unary_reads(EwUnary op)
{
    static const int reads_of[] = {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) EW_READS_##reads,
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    };
    return (unsigned)op < EW_UNARY_COUNT ? reads_of[op] : EW_READS_X;
}

static inline float ew_unary_default(EwUnary op)
{
    static const float defaults[] = {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) def,
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    };
    return (unsigned)op < EW_UNARY_COUNT ? defaults[op] : 0.0f;
}

#endif
