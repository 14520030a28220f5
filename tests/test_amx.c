/* --dtype bf16 on AMX (kernels/gemm_bf16.c): the tile engine and the VDPBF16PS one
 * each against a reference that rounds the operands to bf16 and sums in double, on
 * every shape that has a tail (rows, columns, 16-pair steps, a K block, an odd K),
 * transposes, alpha, beta, bias; the same bits on pools of 1 to 3 threads; the gaps of
 * a wider C left alone; the label the headers print.  The two engines do not give the
 * same bits (the tile unit rounds its sums its own way), so each is held to the bound.
 * On a CPU (or a Linux) without AMX it says so and checks that nothing claims AMX. */
#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "tests/testtrain.h"

static bool have_amx(void)
{
    if (kern_amx_cpu())
        return true;
    fprintf(stderr, "test_amx: no AMX-BF16 here (CPU, Linux, or GRAPHC_AMX=0): the tile engine not run\n");
    return false;
}

typedef struct Case {
    size_t M, N, K;
} Case;

/* 32-row blocks and 16-pair steps: below, at and past each; 192 rows (MC) and 256 K
 * (a KC block of 128 pairs) and past them */
static const Case cases[] = {
    { 1, 1, 1 },     { 3, 17, 5 },     { 16, 16, 32 },  { 17, 31, 33 },   { 32, 32, 64 },  { 33, 33, 63 },
    { 47, 100, 255 }, { 64, 64, 256 }, { 100, 70, 257 }, { 193, 40, 600 }, { 256, 10, 1024 }, { 7, 513, 130 },
};
enum { NCASES = sizeof cases / sizeof cases[0] };

static void fill(float *x, size_t n, uint64_t stream)
{
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * rng_unit(rng_at(7, stream, i)) - 1.0f;
}

/* Each case's 16 forms (transposes, bias, relu, alpha, beta): both engines within
 * (K + 4) 2^-24 S of the reference per element, S the sum of the magnitudes of its
 * terms (as test_bf16: K fp32 roundings of the sums and a few for the epilogue, the
 * operands rounded exactly as the reference rounds them); AMX on 2 and 3 threads the
 * bits of 1.  A dropped 16-pair step, a row of A read at the wrong stride or an
 * operand truncated rather than rounded is off by far more (about 2^-9 S). */
START_TEST(amx_reference)
{
    const Case cs = cases[_i];
    const size_t M = cs.M, N = cs.N, K = cs.K;
    if (!have_amx()) {
        ck_assert(!kern_bf16_amx());
        return;
    }
    float *A = malloc(M * K * 4), *B = malloc(K * N * 4), *C0 = malloc(M * N * 4), *bias = malloc(N * 4);
    float *one = malloc(M * N * 4), *got = malloc(M * N * 4);
    fill(A, M * K, 1), fill(B, K * N, 2), fill(C0, M * N, 3), fill(bias, N, 4);
    for (int v = 0; v < 16; v++) {
        bool ta = v & 1, tb = v & 2, with_bias = v & 4, relu = v & 8;
        float alpha = v % 3 == 0 ? 1.0f : -0.37f, beta = v % 5 == 0 ? 0.0f : v % 5 == 1 ? 1.0f : 0.5f;
        EwAct act = relu ? (EwAct){ EW_RELU, 0 } : EW_NO_ACT;
        for (int run = 0; run < 4; run++) {   /* VDPBF16PS on 1 thread, then AMX on 1, 2, 3 */
            kern_bf16_set_amx(run == 0);
            tu_threads(run == 0 ? 1 : run);
            float *C = run == 1 ? one : got;
            memcpy(C, C0, M * N * 4);
            ck_assert(kern_gemm_bf16(tu_pool, ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N,
                                     with_bias ? bias : NULL, act));
            if (run >= 2) {
                ck_assert_msg(memcmp(C, one, M * N * 4) == 0, "%zux%zux%zu form %d: AMX on %d threads, not the bits of 1",
                              M, N, K, v, run);
                continue;
            }
            for (size_t m = 0; m < M; m++)
                for (size_t n = 0; n < N; n++) {
                    double s = 0, mag = 0;
                    for (size_t k = 0; k < K; k++) {
                        double t = (double)bf16_round(ta ? A[k * M + m] : A[m * K + k]) *
                                   bf16_round(tb ? B[n * K + k] : B[k * N + n]);
                        s += t;
                        mag += fabs(t);
                    }
                    double c0 = C0[m * N + n], ref = alpha * s + (beta != 0.0f ? beta * c0 : 0.0);
                    mag = fabs(alpha) * mag + fabs(beta * c0);
                    if (with_bias) {
                        ref += bias[n];
                        mag += fabs(bias[n]);
                    }
                    if (relu)
                        ref = ref > 0 ? ref : 0;
                    double tol = (double)(K + 4) * 0x1p-24 * mag, x = C[m * N + n];
                    ck_assert_msg(fabs(x - ref) <= tol,
                                  "%zux%zux%zu ta %d tb %d bias %d relu %d alpha %g beta %g, %s: C[%zu, %zu] = %.9g, "
                                  "expected %.9g (tol %.3g)",
                                  M, N, K, ta, tb, with_bias, relu, alpha, beta, run ? "AMX" : "VDPBF16PS", m, n, x,
                                  ref, tol);
                }
        }
    }
    kern_bf16_set_amx(0);
    free(A), free(B), free(C0), free(bias), free(one), free(got);
}
END_TEST

/* A wider leading dimension than N (a column block of a bigger C, as the executors'
 * views are): AMX writes the bits it writes into a compact C inside [0, N) of each row,
 * and nothing past. */
START_TEST(amx_keeps_ldc_gaps)
{
    enum { M = 40, N = 21, K = 70, LDC = 50 };
    if (!have_amx())
        return;
    float A[M * K], B[K * N], C[M * LDC], W[M * N];
    fill(A, M * K, 5), fill(B, K * N, 6), fill(C, M * LDC, 7);
    for (size_t m = 0; m < M; m++) memcpy(W + m * N, C + m * LDC, N * 4);
    ck_assert(kern_gemm_bf16(NULL, false, false, M, N, K, 1.0f, A, K, B, N, 0.5f, W, N, NULL, EW_NO_ACT));
    float C1[M * LDC];
    memcpy(C1, C, sizeof C);
    ck_assert(kern_gemm_bf16(NULL, false, false, M, N, K, 1.0f, A, K, B, N, 0.5f, C1, LDC, NULL, EW_NO_ACT));
    for (size_t m = 0; m < M; m++)
        for (size_t n = 0; n < LDC; n++)
            ck_assert_msg(C1[m * LDC + n] == (n < N ? W[m * N + n] : C[m * LDC + n]), "C[%zu, %zu]", m, n);
}
END_TEST

/* The headers say which engine ran: "avx512+bf16+amx" with AMX, "avx512+bf16" with the
 * test hook (or GRAPHC_AMX=0) turning it off. */
START_TEST(amx_label)
{
    if (!have_amx()) {
        ck_assert(strstr(kern_isa_label(KISA_BF16), "amx") == NULL);
        return;
    }
    ck_assert_str_eq(kern_isa_label(KISA_BF16), "avx512+bf16+amx");
    kern_bf16_set_amx(1);
    ck_assert_str_eq(kern_isa_label(KISA_BF16), "avx512+bf16");
    kern_bf16_set_amx(0);
    ck_assert_str_eq(kern_isa_label(KISA_AVX512), "avx512");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("amx");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, amx_reference, 0, NCASES);
    tcase_add_test(tc, amx_keeps_ldc_gaps);
    tcase_add_test(tc, amx_label);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
