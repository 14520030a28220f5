/* What the benchmark report stands on: the bytes a step moves (exec_step_bytes) against
 * counts made by hand, and the small-batch paths (a matrix-vector product cut over the
 * pool) against reference sums, and the compiled plan against the interpreter bit for
 * bit with them.  No timing: a timed assertion is noise on a shared machine. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "kernels/kern.h"
#include "tests/testgraph.h"
#include "tests/testutil.h"

/* The step of c's model for `purpose` at `batch`, in `mode`, on the suite's pool,
 * without the passes of `off`. */
static void step_off(Compiled *c, ExecMode mode, Purpose purpose, int64_t batch, uint64_t off, Weights *w, Step *s)
{
    CompileOptions co = { .mode = mode, .pool = tu_pool, .seed = 1, .verify = true, .passes_off = off };
    memset(w, 0, sizeof *w);
    ck_assert_msg(prepare(c->g, purpose, batch, &co, w, s, &c->d) == 0, "%s", c->d.buf ? c->d.buf : "");
}

static void step_at(Compiled *c, ExecMode mode, Purpose purpose, int64_t batch, Weights *w, Step *s)
{
    step_off(c, mode, purpose, batch, 0, w, s);
}

/* The one node of the step's running graph that runs op `op`. */
static const Node *only(const Graph *g, OpKind op)
{
    const Node *found = NULL;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == op) {
            ck_assert_msg(!found, "two %s nodes", op_name(op));
            found = &g->nodes[i];
        }
    ck_assert_msg(found, "no %s node", op_name(op));
    return found;
}

/* ---- bytes per step ------------------------------------------------------------------ */

/* A dense layer with relu at batch 3, inference: the plan fuses it into one
 * matmul_bias_act reading x [3, 6], w [6, 4], b [4] and writing y [3, 4]; the softmax
 * then reads y and writes p [3, 4].  Nothing else moves. */
START_TEST(bytes_dense_inference)
{
    Compiled c;
    compile_str(&c, "input x: f32[B, 6]\noutput p = softmax(relu(dense(x, units=4)))\n");
    Weights w;
    Step s;
    tu_threads(2);
    step_at(&c, MODE_COMPILED, FOR_INFERENCE, 3, &w, &s);
    const Graph *g = executor_graph(s.ex);
    double fused = 4.0 * (3 * 6 + 6 * 4 + 4 + 3 * 4), softmax = 4.0 * (3 * 4 + 3 * 4);
    ck_assert_double_eq(exec_node_bytes(g, only(g, OP_MATMUL_BIAS_ACT), 1), fused);
    ck_assert_double_eq(exec_node_bytes(g, only(g, OP_SOFTMAX), 1), softmax);
    ck_assert_double_eq(exec_step_bytes(g, 2), fused + softmax);
    /* the interpreter's graph runs the ops apart: each intermediate written and read */
    double apart = 4.0 * (3 * 6 + 6 * 4 + 3 * 4)    /* matmul */
                   + 4.0 * (3 * 4 + 4 + 3 * 4)      /* + bias */
                   + 4.0 * (3 * 4 + 3 * 4)          /* relu */
                   + softmax;
    ck_assert_double_eq(exec_step_bytes(s.graph, 1), apart);
    step_free(&s);
    weights_free(&w);
    compiled_free_all(&c);
}
END_TEST

/* Updates: w [5, 3] and b [3] trained by SGD, momentum and Adam at batch 2.  The plan
 * makes w's gradient with a matmul (reads x [2, 5] and dy [2, 3], writes [5, 3]) and
 * updates both parameters in one update_all, which reads each parameter and its
 * gradient and writes the parameter back; momentum reads and writes its velocity too,
 * Adam its two moments. */
START_TEST(bytes_updates)
{
    static const struct { const char *opt; int state; } opts[] = {
        { "sgd(lr=0.1)", 0 }, { "sgd(lr=0.1, momentum=0.9)", 1 }, { "adam(lr=0.01)", 2 },
    };
    char text[512];
    snprintf(text, sizeof text,
             "input x: f32[B, 5]\ninput y: i32[B]\nlogits = dense(x, units=3)\nloss = cross_entropy(logits, y)\n"
             "train { data = synthetic(count=4)\noptimizer = %s\nminimize = loss }\n",
             opts[_i].opt);
    Compiled c;
    compile_str(&c, text);
    Weights w;
    Step s;
    tu_threads(1);
    step_at(&c, MODE_COMPILED, FOR_TRAINING, 2, &w, &s);
    const Graph *g = executor_graph(s.ex);
    double W = 4.0 * 5 * 3, x = 4.0 * 2 * 5, dy = 4.0 * 2 * 3, b = 4.0 * 3, state = opts[_i].state;
    ck_assert_double_eq(exec_node_bytes(g, only(g, OP_MATMUL), 1), x + dy + W);
    ck_assert_double_eq(exec_node_bytes(g, only(g, OP_UPDATE_ALL), 1), 2 * (W + b) + (W + b) * (1 + 2 * state));
    step_free(&s);
    weights_free(&w);
    compiled_free_all(&c);
}
END_TEST

/* conv2d_maxpool whose convolution takes im2col + sgemm (a 1x1 convolution): the two ops
 * run apart inside the node, the convolution's output [2, 4, 4, 12] written to the
 * scratch and read back; where a direct kernel takes it, band by band in cache. */
START_TEST(bytes_conv_pool)
{
    Compiled c;
    compile_str(&c, "input image: f32[B, 4, 4, 6]\n"
                    "output y = maxpool(conv2d(image, filters=12, kernel=1, activation=\"relu\"), size=2)\n");
    Weights w;
    Step s;
    tu_threads(2);
    step_at(&c, MODE_COMPILED, FOR_INFERENCE, 2, &w, &s);
    const Graph *g = executor_graph(s.ex);
    const Node *n = only(g, OP_CONV2D_MAXPOOL);
    double io = 4.0 * (2 * 4 * 4 * 6 + 6 * 12 + 12 + 2 * 2 * 2 * 12), conv = 4.0 * 2 * 4 * 4 * 12;
    KConv p = { .n = 2, .h = 4, .w = 4, .c = 6, .kh = 1, .kw = 1, .f = 12, .sh = 1, .sw = 1, .oh = 4, .ow = 4 };
    ck_assert_msg(!kern_conv2d_maxpool_exact(&p), "a 1x1 convolution took a direct kernel: pick another case");
    ck_assert_double_eq(exec_node_bytes(g, n, 2), io + 2 * conv);
    ck_assert_uint_eq(dispatch_scratch_traffic(g, n, 2), (size_t)(2 * conv));
    step_free(&s);
    weights_free(&w);
    compiled_free_all(&c);
}
END_TEST

/* ---- a dense layer at batch 1 ---------------------------------------------------------- */

/* kern_gemm with one row and a large B (cut along K over the pool from 1 MiB of B on),
 * in each layout, at 1 to 3 threads: within rounding of a double-precision reference,
 * alpha and beta applied, and the same bits on a second call (the cut is fixed). */
START_TEST(gemv_split)
{
    const size_t K = 700, N = 520;   /* 1.46 MB of B: split on a pool of 2 or more */
    bool ta = _i & 1, tb = _i & 2;
    float *A = malloc(K * sizeof *A), *B = malloc(K * N * sizeof *B), *C = malloc(N * sizeof *C),
          *C2 = malloc(N * sizeof *C2), *want = malloc(N * sizeof *want), *dot = malloc(N * sizeof *dot);
    ck_assert(A && B && C && C2 && want && dot);
    tu_fill_uniform(A, K, -1, 1, 1);
    tu_fill_uniform(B, K * N, -1, 1, 2);
    for (size_t n = 0; n < N; n++) {
        double s = 0;
        for (size_t k = 0; k < K; k++) s += (double)A[k] * B[tb ? n * K + k : k * N + n];
        dot[n] = (float)s;
    }
    for (int threads = 1; threads <= 3; threads++) {
        tu_threads(threads);
        for (size_t n = 0; n < N; n++) {
            C[n] = C2[n] = (float)(n % 5) - 2;
            want[n] = (float)(0.5 * dot[n] + 0.25 * C[n]);
        }
        /* A stored transposed is [K, 1]: the same floats */
        kern_gemm(tu_pool, KISA_AUTO, ta, tb, 1, N, K, 0.5f, A, B, 0.25f, C);
        kern_gemm(tu_pool, KISA_AUTO, ta, tb, 1, N, K, 0.5f, A, B, 0.25f, C2);
        ck_assert_floats_near_scaled(C, want, N, 1e-5);
        ck_assert_msg(memcmp(C, C2, N * sizeof *C) == 0, "two calls differ (ta %d, tb %d, %d threads)", ta, tb, threads);
        /* beta 0 overwrites, NaN included */
        for (size_t n = 0; n < N; n++) C[n] = NAN;
        kern_gemm(tu_pool, KISA_AUTO, ta, tb, 1, N, K, 1.0f, A, B, 0.0f, C);
        ck_assert_floats_near_scaled(C, dot, N, 1e-5);
    }
    free(A);
    free(B);
    free(C);
    free(C2);
    free(want);
    free(dot);
}
END_TEST

/* kern_gemm with 2 to 4 rows, no transposes, beta 0 and a large B (graphc's own GEMM
 * where the CPU has AVX2 + FMA or AVX-512, B's whole panels read in place; sgemm
 * elsewhere): odd sizes (K a multiple of 8 or not, N not of any vector width, M odd),
 * within rounding of a double-precision reference, alpha applied, and the same bits at
 * 1, 2 and 3 threads (each element one chain over k, however the columns are cut).
 * With graphc's GEMM off, sgemm's values agree within rounding. */
START_TEST(small_m_gemm)
{
    const size_t M = 2 + (size_t)_i % 3, K = _i < 3 ? 331 : 336, N = 1001;   /* 1.3 MB of B */
    float *A = malloc(M * K * sizeof *A), *B = malloc(K * N * sizeof *B), *C[3], *want = malloc(M * N * sizeof *want);
    ck_assert(A && B && want);
    tu_fill_uniform(A, M * K, -1, 1, 3);
    tu_fill_uniform(B, K * N, -1, 1, 4);
    for (size_t i = 0; i < M * N; i++) {
        double s = 0;
        for (size_t k = 0; k < K; k++) s += (double)A[i / N * K + k] * B[k * N + i % N];
        want[i] = (float)(0.75 * s);
    }
    for (int t = 0; t < 3; t++) {
        C[t] = malloc(M * N * sizeof *C[t]);
        ck_assert(C[t]);
        for (size_t i = 0; i < M * N; i++) C[t][i] = NAN;   /* beta 0 overwrites */
        tu_threads(t + 1);
        kern_gemm(tu_pool, KISA_AUTO, false, false, M, N, K, 0.75f, A, B, 0.0f, C[t]);
        ck_assert_floats_near_scaled(C[t], want, M * N, 1e-5);
        if (t > 0) ck_assert_msg(memcmp(C[t], C[0], M * N * sizeof *C[t]) == 0, "%d threads differ from 1", t + 1);
    }
    kern_gemm_set_own(-1);
    kern_gemm(tu_pool, KISA_AUTO, false, false, M, N, K, 0.75f, A, B, 0.0f, C[1]);
    kern_gemm_set_own(0);
    ck_assert_floats_near_scaled(C[1], want, M * N, 1e-5);
    for (int t = 0; t < 3; t++) free(C[t]);
    free(A);
    free(B);
    free(want);
}
END_TEST

/* The compiled plan and the interpreter at batch 1 and 3, a dense layer large enough for
 * the cut matrix-vector product and the few-rows kernel, inference and a training step,
 * 1 to 3 threads: the same bits (both run the same kernels, cut the same way for a
 * thread count), without the passes that round otherwise (as tests/test_exec.c's
 * compiled_matches_interp). */
START_TEST(small_batch_compiled_matches_interp)
{
    Compiled c;
    compile_str(&c, "input x: f32[B, 1024]\ninput y: i32[B]\n"
                    "h = relu(dense(x, units=400))\nlogits = dense(h, units=10)\n"
                    "output p = softmax(logits)\nloss = cross_entropy(logits, y)\n"
                    "train { data = synthetic(count=4)\noptimizer = sgd(lr=0.1)\nminimize = loss }\n");
    const int64_t batch = _i ? 3 : 1;
    float x[3 * 1024];
    int32_t y[3] = { 3, 0, 9 };
    tu_fill_uniform(x, 3 * 1024, 0, 1, 7);
    for (int threads = 1; threads <= 3; threads++) {
        tu_threads(threads);
        for (int purpose = FOR_TRAINING; purpose <= FOR_INFERENCE; purpose += FOR_INFERENCE - FOR_TRAINING) {
            float out[2][4][32];   /* [mode][output]: every output's values */
            size_t len[4] = { 0 };
            int nout = 0;
            Weights w[2];
            for (int m = 0; m < 2; m++) {
                Step s;
                step_off(&c, m ? MODE_COMPILED : MODE_INTERP, (Purpose)purpose, batch, rounding_passes(), &w[m], &s);
                const void *feeds[2] = { x, y };
                float *outs[4] = { NULL };
                nout = s.graph->noutputs < 4 ? s.graph->noutputs : 4;
                for (int o = 0; o < nout; o++) {
                    len[o] = (size_t)shape_numel(&s.graph->nodes[s.graph->outputs[o].node].shape);
                    ck_assert_uint_le(len[o], 32);
                    outs[o] = out[m][o];
                }
                StepEnv env = { .w = &w[m], .seed = 1, .lr = 0.1f, .training = purpose == FOR_TRAINING, .d = &c.d };
                ck_assert_msg(executor_run(s.ex, feeds, outs, &env) == 0, "%s", c.d.buf ? c.d.buf : "");
                step_free(&s);
            }
            for (int o = 0; o < nout; o++)
                ck_assert_msg(memcmp(out[0][o], out[1][o], len[o] * sizeof(float)) == 0,
                              "%s, batch %d, %d threads, output %d: interp %.9g, compiled %.9g",
                              purpose == FOR_TRAINING ? "training" : "inference", (int)batch, threads, o, out[0][o][0],
                              out[1][o][0]);
            for (int v = 0; v < w[0].n; v++)
                ck_assert_msg(memcmp(w[0].data[v], w[1].data[v], (size_t)shape_numel(&w[0].shapes[v]) * 4) == 0,
                              "batch %d, %d threads: var %d differs after a step", (int)batch, threads, v);
            weights_free(&w[0]);
            weights_free(&w[1]);
        }
    }
    compiled_free_all(&c);
}
END_TEST

static Suite *make_bench_suite(void)
{
    Suite *s = suite_create("bench");
    TCase *tc = tcase_create("bytes");
    tcase_add_test(tc, bytes_dense_inference);
    tcase_add_loop_test(tc, bytes_updates, 0, 3);
    tcase_add_test(tc, bytes_conv_pool);
    suite_add_tcase(s, tc);
    tc = tcase_create("small batch");
    tcase_add_loop_test(tc, gemv_split, 0, 4);
    tcase_add_loop_test(tc, small_m_gemm, 0, 6);
    tcase_add_loop_test(tc, small_batch_compiled_matches_interp, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(make_bench_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    pool_free(tu_pool);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
