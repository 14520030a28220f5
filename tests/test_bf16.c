/* --dtype bf16 (docs/bf16.md): the bf16 GEMM (kernels/gemm_bf16.c) against a scalar
 * reference that rounds the operands to bf16 as the packing must (to nearest, ties to
 * even) and sums in double; the fp32 path untouched without the flag; the same bits on
 * any pool and through every entry point; the compiled plan against the interpreter
 * under bf16.  On a CPU without AVX512_BF16 the kernel tests check the refusal instead
 * and say so. */
#include <string.h>

#include "kernels/kern.h"
#include "tests/testtrain.h"

static bool have_bf16(void)
{
    if (kern_bf16_cpu())
        return true;
    fprintf(stderr, "test_bf16: this CPU lacks avx512_bf16 (or AVX-512): bf16 kernels not run, their refusal checked\n");
    return false;
}

/* op(X)(r, k) of X stored [R, K] (t false) or [K, R] */
static float at(const float *x, bool t, size_t R, size_t K, size_t r, size_t k)
{
    return t ? x[k * R + r] : x[r * K + k];
}

typedef struct Case {
    size_t M, N, K;
} Case;

static const Case cases[] = {
    { 1, 1, 1 }, { 1, 10, 7 }, { 5, 33, 2 }, { 13, 32, 64 }, { 12, 70, 255 }, { 40, 1, 300 },
    { 200, 48, 257 }, { 37, 100, 1000 }, { 256, 10, 1024 }, { 25, 513, 130 },
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* Every case, transposes and epilogue, through kern_gemm_bf16 on 1 and 2 threads:
 * |C - ref| <= (K + 4) 2^-24 S per element, S the sum of the magnitudes of its terms
 * (alpha's products, beta C, the bias): the bound of K + a few fp32 roundings of the
 * sums, given that the operands are rounded exactly as the reference rounds them.  A
 * wrong rounding of an operand (truncation, a swapped pair) is off by about 2^-9 S. */
START_TEST(gemm_bf16_reference)
{
    const Case cs = cases[_i];
    const size_t M = cs.M, N = cs.N, K = cs.K;
    if (!have_bf16()) {
        float c = 0;
        ck_assert(!kern_gemm_bf16(NULL, false, false, 1, 1, 1, 1.0f, &c, 1, &c, 1, 0.0f, &c, 1, NULL, EW_NO_ACT));
        return;
    }
    float *A = malloc(M * K * 4), *B = malloc(K * N * 4), *C0 = malloc(M * N * 4), *C = malloc(M * N * 4);
    float *bias = malloc(N * 4);
    for (size_t i = 0; i < M * K; i++) A[i] = 2.0f * rng_unit(rng_at(1, 1, i)) - 1.0f;
    for (size_t i = 0; i < K * N; i++) B[i] = 2.0f * rng_unit(rng_at(1, 2, i)) - 1.0f;
    for (size_t i = 0; i < M * N; i++) C0[i] = 2.0f * rng_unit(rng_at(1, 3, i)) - 1.0f;
    for (size_t i = 0; i < N; i++) bias[i] = rng_unit(rng_at(1, 4, i)) - 0.5f;
    for (int v = 0; v < 16; v++) {
        bool ta = v & 1, tb = v & 2, with_bias = v & 4, relu = v & 8;
        float alpha = v % 3 == 0 ? 1.0f : -0.37f, beta = v % 5 == 0 ? 0.0f : v % 5 == 1 ? 1.0f : 0.5f;
        for (int threads = 1; threads <= 2; threads++) {
            tu_threads(threads);
            memcpy(C, C0, M * N * 4);
            ck_assert(kern_gemm_bf16(tu_pool, ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N,
                                     with_bias ? bias : NULL, relu ? (EwAct){ EW_RELU, 0 } : EW_NO_ACT));
            for (size_t m = 0; m < M; m++)
                for (size_t n = 0; n < N; n++) {
                    double s = 0, mag = 0;
                    for (size_t k = 0; k < K; k++) {
                        double t = (double)bf16_round(at(A, ta, M, K, m, k)) * bf16_round(at(B, !tb, N, K, n, k));
                        s += t;
                        mag += fabs(t);
                    }
                    double ref = alpha * s + (beta != 0.0f ? beta * (double)C0[m * N + n] : 0.0);
                    mag = fabs(alpha) * mag + fabs(beta * (double)C0[m * N + n]);
                    if (with_bias) {
                        ref += bias[n];
                        mag += fabs(bias[n]);
                    }
                    if (relu)
                        ref = ref > 0 ? ref : 0;
                    double tol = (double)(K + 4) * 0x1p-24 * mag, got = C[m * N + n];
                    ck_assert_msg(fabs(got - ref) <= tol,
                                  "%zux%zux%zu ta %d tb %d bias %d relu %d alpha %g beta %g, %d threads: C[%zu, %zu] = "
                                  "%.9g, expected %.9g (tol %.3g)",
                                  M, N, K, ta, tb, with_bias, relu, alpha, beta, threads, m, n, got, ref, tol);
                }
        }
    }
    free(A), free(B), free(C0), free(C), free(bias);
}
END_TEST

/* Operands that bf16 must round a known way, exactly: 1 + 2^-9 to 1, the ties 1 + 2^-8
 * to 1 and 1 + 3 2^-8 to 1 + 2^-6 (even), in A and in B, each transposed or not; the
 * sums small integers times powers of two, exact in fp32.  Without the flag kern_gemm
 * gives the fp32 products, exactly too: the fp32 path is untouched. */
START_TEST(gemm_bf16_rounds_to_even)
{
    enum { M = 3, N = 20, K = 8 };
    static const float vals[3] = { 1.0f + 0x1p-9f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f };
    static const float rounded[3] = { 1.0f, 1.0f, 1.0f + 0x1p-6f };
    float A[M * K], B[K * N], C[M * N];
    for (int side = 0; side < 2; side++)
        for (int t = 0; t < 2; t++) {
            /* row m of op(A) (or column n of op(B)) all vals[m % 3]; the other operand 1s */
            for (size_t m = 0; m < M; m++)
                for (size_t k = 0; k < K; k++) {
                    float v = side == 0 ? vals[m] : 1.0f;
                    A[t && side == 0 ? k * M + m : m * K + k] = v;
                }
            for (size_t k = 0; k < K; k++)
                for (size_t n = 0; n < N; n++) {
                    float v = side == 1 ? vals[n % 3] : 1.0f;
                    B[t && side == 1 ? n * K + k : k * N + n] = v;
                }
            bool ta = t && side == 0, tb = t && side == 1;
            for (int bf = 0; bf < 2; bf++) {
                if (bf && !kern_bf16_cpu())
                    continue;
                tu_threads(1);
                kern_gemm(tu_pool, bf ? (KIsa)(KISA_AUTO | KISA_BF16) : KISA_AUTO, ta, tb, M, N, K, 1.0f, A, B, 0.0f, C);
                for (size_t m = 0; m < M; m++)
                    for (size_t n = 0; n < N; n++) {
                        int which = side == 0 ? (int)m : (int)(n % 3);
                        float want = K * (bf ? rounded[which] : vals[which]);
                        ck_assert_msg(C[m * N + n] == want, "%s side %s transposed %d: C[%zu, %zu] = %.9g, expected %.9g",
                                      bf ? "bf16" : "fp32", side ? "B" : "A", t, m, n, C[m * N + n], want);
                    }
            }
        }
}
END_TEST

/* The same bits through kern_gemm (1 to 3 threads), kern_gemm_bias_act (bias 0, no
 * act), kern_gemm_rows (a block of rows) and kern_gemm_block (a block with strides). */
START_TEST(gemm_bf16_same_bits)
{
    if (!have_bf16()) {
        ck_assert_ptr_nonnull(kern_dtype_check((KIsa)(KISA_AUTO | KISA_BF16)));
        return;
    }
    enum { M = 70, N = 150, K = 333, R0 = 20, R1 = 50 };
    const KIsa bf = (KIsa)(KISA_AUTO | KISA_BF16);
    float *A = malloc(M * K * 4), *B = malloc(K * N * 4), *ref = malloc(M * N * 4), *C = malloc(M * N * 4);
    float zero[N];
    memset(zero, 0, sizeof zero);
    for (size_t i = 0; i < M * K; i++) A[i] = rng_unit(rng_at(2, 1, i)) - 0.5f;
    for (size_t i = 0; i < K * N; i++) B[i] = rng_unit(rng_at(2, 2, i)) - 0.5f;
    tu_threads(1);
    kern_gemm(tu_pool, bf, false, false, M, N, K, 1.0f, A, B, 0.0f, ref);
    for (int threads = 2; threads <= 3; threads++) {
        tu_threads(threads);
        kern_gemm(tu_pool, bf, false, false, M, N, K, 1.0f, A, B, 0.0f, C);
        ck_assert_msg(memcmp(C, ref, M * N * 4) == 0, "kern_gemm on %d threads", threads);
        kern_gemm_bias_act(tu_pool, bf, false, false, M, N, K, A, B, zero, EW_NO_ACT, C);
        ck_assert_msg(memcmp(C, ref, M * N * 4) == 0, "kern_gemm_bias_act on %d threads", threads);
    }
    memset(C, 0, M * N * 4);
    kern_gemm_rows(bf, false, false, M, N, K, R0, R1, 1.0f, A, B, 0.0f, C);
    ck_assert(memcmp(C, ref + R0 * N, (R1 - R0) * N * 4) == 0);
    /* columns [40, 100) of rows [R0, R1) in place, C's row stride N */
    memset(C, 0, M * N * 4);
    kern_gemm_block(bf, false, false, R1 - R0, 60, K, 1.0f, A + R0 * K, K, B + 40, N, 0.0f, C + R0 * N + 40, N);
    for (size_t m = R0; m < R1; m++)
        ck_assert(memcmp(C + m * N + 40, ref + m * N + 40, 60 * 4) == 0);
    /* and not the fp32 product's bits */
    kern_gemm(tu_pool, KISA_AUTO, false, false, M, N, K, 1.0f, A, B, 0.0f, C);
    ck_assert(memcmp(C, ref, M * N * 4) != 0);
    free(A), free(B), free(ref), free(C);
}
END_TEST

/* Who refuses: the flag with a variant below avx512 always; without AVX512_BF16 any. */
START_TEST(dtype_check)
{
    ck_assert_ptr_null(kern_dtype_check(KISA_AUTO));
    ck_assert_ptr_null(kern_dtype_check(KISA_AVX2));
    ck_assert_ptr_nonnull(kern_dtype_check((KIsa)(KISA_AVX2 | KISA_BF16)));
    ck_assert_ptr_nonnull(kern_dtype_check((KIsa)(KISA_PORTABLE | KISA_BF16)));
    ck_assert_int_eq(kern_isa_resolve((KIsa)(KISA_AVX2 | KISA_BF16)), kern_isa_resolve(KISA_AVX2));
    if (kern_bf16_cpu()) {
        ck_assert_ptr_null(kern_dtype_check((KIsa)(KISA_AUTO | KISA_BF16)));
        ck_assert_str_eq(kern_isa_label((KIsa)(KISA_AVX512 | KISA_BF16)),
                         kern_bf16_amx() ? "avx512+bf16+amx" : "avx512+bf16");   /* test_amx: AMX's label */
    } else {
        ck_assert_ptr_nonnull(strstr(kern_dtype_check((KIsa)(KISA_AUTO | KISA_BF16)), "avx512_bf16"));
    }
}
END_TEST

/* Three SGD steps (lr 0.01) of a model in the interpreter and in the compiled plan
 * (the passes that round otherwise off), both with `isa`: losses and weights. */
static void three_steps_modes(const char *file, int64_t batch, KIsa isa, float loss[2][3], Weights w[2])
{
    Compiled c;
    compile_file(&c, file);
    for (int mode = 0; mode < 2; mode++) {
        CompileOptions co = { .mode = mode == 0 ? MODE_INTERP : MODE_COMPILED, .pool = tu_pool,
                              .passes_off = rounding_passes(), .seed = 3, .verify = true };
        Step st;
        memset(&w[mode], 0, sizeof w[mode]);
        ck_assert_msg(prepare(c.g, FOR_TRAINING, batch, &co, &w[mode], &st, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
        for (int step = 0; step < 3; step++) {
            void **feeds = make_feeds(st.graph, 10, (uint64_t)step);
            float lv = 0, av = 0;
            float *outs[2] = { &lv, &av };
            StepEnv env = { .w = &w[mode], .step = step, .seed = 11, .lr = 0.01f, .training = true, .d = &c.d,
                            .isa = isa };
            ck_assert_int_eq(executor_run(st.ex, (const void *const *)feeds, outs, &env), 0);
            loss[mode][step] = lv;
            free_feeds(st.graph, feeds);
        }
        step_free(&st);
    }
    compiled_free_all(&c);
}

static const char *const exec_models[] = { "models/mnist.net", "models/mlp.net" };

/* Under bf16 the two executors run the same kernels on the same values: the same bits,
 * on 1 and 2 threads.  And bf16 is not fp32: the losses differ. */
START_TEST(bf16_compiled_matches_interp)
{
    if (!have_bf16())
        return;
    for (int threads = 1; threads <= 2; threads++) {
        tu_threads(threads);
        float loss[2][3], loss32[2][3];
        Weights w[2], w32[2];
        three_steps_modes(exec_models[_i], 4, (KIsa)(KISA_AUTO | KISA_BF16), loss, w);
        three_steps_modes(exec_models[_i], 4, KISA_AUTO, loss32, w32);
        for (int step = 0; step < 3; step++)
            ck_assert_msg(memcmp(&loss[0][step], &loss[1][step], 4) == 0, "%s step %d: interp %.9g, compiled %.9g",
                          exec_models[_i], step, loss[0][step], loss[1][step]);
        for (int v = 0; v < w[0].n; v++)
            ck_assert_msg(memcmp(w[0].data[v], w[1].data[v], (size_t)shape_numel(&w[0].shapes[v]) * 4) == 0,
                          "%s: %s differs after 3 steps", exec_models[_i], w[0].names[v]);
        ck_assert_msg(memcmp(loss[1], loss32[1], sizeof loss[1]) != 0, "%s: bf16 gave fp32's losses", exec_models[_i]);
        for (int step = 0; step < 3; step++)   /* and near them: a product rounded, not a broken one */
            ck_assert_float_near_rel(loss[1][step], loss32[1][step], 0.02, 0.0);
        for (int m = 0; m < 2; m++) {
            weights_free(&w[m]);
            weights_free(&w32[m]);
        }
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bf16");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, gemm_bf16_reference, 0, NCASES);
    tcase_add_test(tc, gemm_bf16_rounds_to_even);
    tcase_add_test(tc, gemm_bf16_same_bits);
    tcase_add_test(tc, dtype_check);
    suite_add_tcase(s, tc);
    tc = tcase_create("exec");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, bf16_compiled_matches_interp, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
