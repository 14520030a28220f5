/* Vector math: exp, tanh and the elementwise functions made of them, written once over
 * a vector of floats and instantiated for each instruction set (kernels/isa_*.c, through
 * kernels/vmath.h) and for one float (util/vmath_scalar.h, which util/elemwise.h uses:
 * constant folding and every scalar loop).  Not a header to include anywhere else; the
 * includer defines
 *   VF, VI, VB       the float vector, an int32 vector of as many lanes, a lane mask
 *   VM_FN            static inline, with the variant's target attribute
 *   VM_NAME(x)       x suffixed with the instance's name
 *   vm_set1(f) vm_seti(i)  every lane f (i)
 *   vm_add vm_sub vm_mul vm_div   each rounded once (never an FMA)
 *   vm_lt vm_eq      ordered comparisons (false with a NaN) giving a VB
 *   vm_sel(m, a, b)  a where m, else b
 *   vm_bits(f) vm_float(i)   the same bits seen as ints or floats
 *   vm_iadd vm_isub vm_iand vm_ior, vm_isra(i, n) vm_isll(i, n) (n a constant)
 * and may define
 *   vm_scale2(p, n)  p 2^n rounded once, n a whole number in a float (else vm_exp
 *                    makes 2^n from the exponent bits in two products)
 *
 * Why every instance gives the same bits: each lane does the same IEEE operations in
 * the same order, with no FMA (a fused a*b + c would round once where the scalar and
 * portable code round twice), comparisons and selects instead of min/max (whose NaN
 * rules differ from one instruction set to the next), and integer work on the exponent.
 * Measured accuracy is in docs/kernels.md ("Vector math"). */

/* e^x: x = n ln2 + r, |r| <= ln2 / 2 (Cody and Waite: ln2 in two parts, the first with
 * 9 trailing zero bits so that n ln2_hi is exact for |n| < 512), e^r by Cephes' expf
 * polynomial, times 2^n made as two powers of two so that results below FLT_MIN come out
 * as the denormals they are.  x is clamped to 89, where e^x overflows (+inf gives +inf);
 * below -104, where e^x rounds to +0 (-inf too), the answer is +0; a NaN is returned
 * quieted. */
VM_FN VF VM_NAME(vm_exp)(VF x)
{
    const VF lo = vm_set1(-104.0f), hi = vm_set1(89.0f), magic = vm_set1(12582912.0f);   /* 1.5 * 2^23 */
    /* below lo the answer is +0, selected at the end: computed, its underflow would
     * cost a microcode assist per vector on x86 (a causal mask's -1e9 is half of
     * attention's scores), so those lanes compute e^0 instead; NaNs take hi */
    const VB under = vm_lt(x, lo);
    VF xc = vm_sel(under, vm_set1(0.0f), x);
    xc = vm_sel(vm_lt(xc, hi), xc, hi);
    /* n = x log2(e) rounded to nearest: its integer in the low bits of t's significand */
    VF t = vm_add(vm_mul(xc, vm_set1(1.44269504088896341f)), magic);
    VF n = vm_sub(t, magic);
    VF r = vm_sub(vm_sub(xc, vm_mul(n, vm_set1(0.693145751953125f))), vm_mul(n, vm_set1(1.42860682030941723e-6f)));
    VF z = vm_mul(r, r);
    VF p = vm_add(vm_mul(vm_set1(1.9875691500e-4f), r), vm_set1(1.3981999507e-3f));
    p = vm_add(vm_mul(p, r), vm_set1(8.3334519073e-3f));
    p = vm_add(vm_mul(p, r), vm_set1(4.1665795894e-2f));
    p = vm_add(vm_mul(p, r), vm_set1(1.6666665459e-1f));
    p = vm_add(vm_mul(p, r), vm_set1(5.0000001201e-1f));
    p = vm_add(vm_add(vm_mul(p, z), r), vm_set1(1.0f));
#ifdef vm_scale2
    /* p 2^n rounded once (an instruction: AVX-512's vscalefps), as below */
    VF y = vm_sel(under, vm_set1(0.0f), vm_scale2(p, n));
#else
    /* 2^n = 2^n1 2^n2, n1 = n / 2 rounded down: both normal for n in [-150, 128], so
     * p 2^n1 is exact (p is near 1) and the second product rounds p 2^n once */
    VI ni = vm_isub(vm_bits(t), vm_bits(magic));
    VI n1 = vm_isra(ni, 1), n2 = vm_isub(ni, n1);
    VF s1 = vm_float(vm_isll(vm_iadd(n1, vm_seti(127)), 23)), s2 = vm_float(vm_isll(vm_iadd(n2, vm_seti(127)), 23));
    VF y = vm_sel(under, vm_set1(0.0f), vm_mul(vm_mul(p, s1), s2));
#endif
    return vm_sel(vm_eq(x, x), y, vm_add(x, x));
}

/* tanh: x where |x| < 2^-12 (tanh rounds to it; this keeps -0 and the denormals), an odd
 * polynomial below 0.625 (Cephes' tanhf), 1 - 2 / (e^2|x| + 1) with x's sign above
 * (+-1 once e^2|x| overflows; a NaN stays one). */
VM_FN VF VM_NAME(vm_tanh)(VF x)
{
    const VI sign = vm_seti((int32_t)0x80000000u);
    VF ax = vm_float(vm_iand(vm_bits(x), vm_seti(0x7fffffff)));
    VF z = vm_mul(x, x);
    VF p = vm_add(vm_mul(vm_set1(-5.70498872745e-3f), z), vm_set1(2.06390887954e-2f));
    p = vm_add(vm_mul(p, z), vm_set1(-5.37397155531e-2f));
    p = vm_add(vm_mul(p, z), vm_set1(1.33314422036e-1f));
    p = vm_add(vm_mul(p, z), vm_set1(-3.33332819422e-1f));
    VF small = vm_add(vm_mul(vm_mul(p, z), x), x);
    VF e = VM_NAME(vm_exp)(vm_add(ax, ax));
    VF big = vm_sub(vm_set1(1.0f), vm_div(vm_set1(2.0f), vm_add(e, vm_set1(1.0f))));
    big = vm_float(vm_ior(vm_bits(big), vm_iand(vm_bits(x), sign)));
    VF y = vm_sel(vm_lt(ax, vm_set1(0.625f)), small, big);
    return vm_sel(vm_lt(ax, vm_set1(2.44140625e-4f)), x, y);
}

/* ---- the elementwise functions of util/elemwise.def made of them -------------------- */

/* sigmoid: 1 / (1 + e^-x) */
VM_FN VF VM_NAME(vm_sigmoid)(VF x)
{
    return vm_div(vm_set1(1.0f), vm_add(vm_set1(1.0f), VM_NAME(vm_exp)(vm_sub(vm_set1(0.0f), x))));
}

/* SiLU: x / (1 + e^-x); its derivative dy s (1 + x (1 - s)), s = sigmoid(x). */
VM_FN VF VM_NAME(vm_silu)(VF x)
{
    return vm_div(x, vm_add(vm_set1(1.0f), VM_NAME(vm_exp)(vm_sub(vm_set1(0.0f), x))));
}
VM_FN VF VM_NAME(vm_silu_grad)(VF x, VF dy)
{
    VF s = VM_NAME(vm_sigmoid)(x);
    return vm_mul(vm_mul(dy, s), vm_add(vm_set1(1.0f), vm_mul(x, vm_sub(vm_set1(1.0f), s))));
}

/* GELU's tanh form as x sigmoid(2u), u = k (x + 0.044715 x^3) (util/elemwise.h says
 * why); its derivative dy (s + 2 x s (1 - s) k (1 + 3 0.044715 x^2)). */
VM_FN VF VM_NAME(vm_gelu_tanh)(VF x)
{
    VF x2 = vm_mul(x, x);
    VF u = vm_add(x, vm_mul(vm_mul(vm_set1(0.044715f), x2), x));
    return vm_div(x, vm_add(vm_set1(1.0f), VM_NAME(vm_exp)(vm_mul(vm_set1(-2.0f * 0.7978845608f), u))));
}
VM_FN VF VM_NAME(vm_gelu_tanh_grad)(VF x, VF dy)
{
    const VF k = vm_set1(0.7978845608f), one = vm_set1(1.0f);
    VF x2 = vm_mul(x, x);
    VF u = vm_add(x, vm_mul(vm_mul(vm_set1(0.044715f), x2), x));
    VF s = vm_div(one, vm_add(one, VM_NAME(vm_exp)(vm_mul(vm_set1(-2.0f * 0.7978845608f), u))));
    VF du = vm_mul(k, vm_add(one, vm_mul(vm_set1(3.0f * 0.044715f), x2)));
    VF g = vm_add(s, vm_mul(vm_mul(vm_mul(vm_add(x, x), s), vm_sub(one, s)), du));
    return vm_mul(dy, g);
}
