/* The optimizers and schedules of the train block (issue 14): adamw, rmsprop, weight
 * decay, clipping by global norm, learning-rate schedules.  Their kernels against
 * reference loops, the schedules' values, the language's checks and messages, the
 * training step's graph and fusions, the two executors against each other, the
 * data-parallel rewrite, checkpoints and a resume in the middle of a schedule.  The
 * values against PyTorch are tests/optim_torch.py's. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "exec/pipeline.h"
#include "kernels/kern.h"
#include "run/train.h"
#include "tests/testgraph.h"
#include "tests/testutil.h"

/* ---- kernels -------------------------------------------------------------------------- */

static void fill(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)rng_unit(rng_at(seed, TU_STREAM, i));
}

/* RMSprop as torch.optim.RMSprop writes it, in double: the reference for kern_rmsprop
 * (float), 6 steps, every combination of momentum and centered.  And its vector loop
 * (4 lanes) gives the bits of its scalar one: the same steps one element at a time. */
START_TEST(rmsprop_reference)
{
    enum { N = 257, STEPS = 6 };
    bool centered = _i & 1;
    float mu = _i & 2 ? 0.9f : 0.0f;
    const float lr = 0.01f, rho = 0.9f, eps = 1e-6f;
    float w[N], sq[N] = { 0 }, buf[N] = { 0 }, ga[N] = { 0 }, g[N];
    float w1[N], sq1[N] = { 0 }, buf1[N] = { 0 }, ga1[N] = { 0 };
    double rw[N], rsq[N] = { 0 }, rbuf[N] = { 0 }, rga[N] = { 0 };
    fill(w, N, 1, -1, 1);
    memcpy(w1, w, sizeof w);
    for (int i = 0; i < N; i++) rw[i] = w[i];
    for (int s = 0; s < STEPS; s++) {
        fill(g, N, 10 + (uint64_t)s, -2, 2);
        kern_rmsprop(w, sq, mu > 0 ? buf : NULL, centered ? ga : NULL, g, N, lr, rho, eps, mu);
        for (int i = 0; i < N; i++)
            kern_rmsprop(w1 + i, sq1 + i, mu > 0 ? buf1 + i : NULL, centered ? ga1 + i : NULL, g + i, 1, lr, rho, eps, mu);
        for (int i = 0; i < N; i++) {
            double gi = g[i];
            rsq[i] = rho * rsq[i] + (1 - (double)rho) * gi * gi;
            double avg = rsq[i];
            if (centered) {
                rga[i] = rho * rga[i] + (1 - (double)rho) * gi;
                avg -= rga[i] * rga[i];
            }
            avg = sqrt(avg) + eps;
            if (mu > 0) {
                rbuf[i] = mu * rbuf[i] + gi / avg;
                rw[i] -= lr * rbuf[i];
            } else {
                rw[i] -= lr * gi / avg;
            }
        }
    }
    for (int i = 0; i < N; i++) {
        ck_assert_float_near_rel(w[i], rw[i], 1e-5, 1e-6);
        ck_assert_float_near_rel(sq[i], rsq[i], 1e-5, 0);
        if (centered) ck_assert_float_near_rel(ga[i], rga[i], 1e-5, 1e-7);
        if (mu > 0) ck_assert_float_near_rel(buf[i], rbuf[i], 1e-4, 1e-5);
        else ck_assert_float_eq(buf[i], 0.0f);   /* not kept: never touched */
    }
    ck_assert(memcmp(w, w1, sizeof w) == 0 && memcmp(sq, sq1, sizeof sq) == 0 && memcmp(buf, buf1, sizeof buf) == 0 &&
              memcmp(ga, ga1, sizeof ga) == 0);
}
END_TEST

static const KOptim optim_cases[] = {
    { .kind = KOPT_SGD, .lr = 0.1f },
    { .kind = KOPT_MOMENTUM, .lr = 0.1f, .mu = 0.9f },
    { .kind = KOPT_MOMENTUM, .lr = 0.1f, .mu = 0.9f, .nesterov = true },
    { .kind = KOPT_ADAM, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .t = 3 },
    { .kind = KOPT_RMSPROP, .lr = 0.01f, .rho = 0.99f, .eps = 1e-8f },
    { .kind = KOPT_RMSPROP, .lr = 0.01f, .rho = 0.9f, .eps = 1e-8f, .mu = 0.5f, .centered = true },
};
enum { NOPTIM = sizeof optim_cases / sizeof optim_cases[0] };

/* The state arrays case o keeps (KOPTIM_MAX_STATE pointers into st, NULL past them). */
static void state_of(const KOptim *o, float *st, size_t n, float **p)
{
    int k = o->kind == KOPT_SGD ? 0 : o->kind == KOPT_MOMENTUM ? 1 : o->kind == KOPT_ADAM ? 2 :
            1 + (o->mu > 0) + o->centered;
    for (int j = 0; j < KOPTIM_MAX_STATE; j++) p[j] = j < k ? st + (size_t)j * n : NULL;
}

/* kern_optim with a clip scale, L2 or a decoupled decay, in blocks of the gradient:
 * the very bits of the gradient made first (g scale + l2 w, in that order), w decayed,
 * and the optimizer's own kernel on the whole of them.  Over lengths around the block
 * (2048), so every block's state is at its offset. */
START_TEST(optim_blocks)
{
    static const size_t lens[] = { 1, 2047, 2048, 5000 };
    static const float mods[][3] = { { 1, 0, 1 }, { 0.37f, 0, 1 }, { 1, 0.01f, 1 }, { 1, 0, 0.999f }, { 0.5f, 0.02f, 0.99f } };
    const KOptim *base = &optim_cases[_i];
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        for (size_t m = 0; m < sizeof mods / sizeof *mods; m++) {
            KOptim o = *base;
            o.scale = mods[m][0], o.l2 = mods[m][1], o.decay = mods[m][2];
            float *w = malloc(n * 4), *w2 = malloc(n * 4), *g = malloc(n * 4), *g2 = malloc(n * 4);
            float *st = malloc(3 * n * 4), *st2 = malloc(3 * n * 4), *p[3], *p2[3];
            fill(w, n, 1, -1, 1);
            fill(g, n, 2, -1, 1);
            fill(st, 3 * n, 3, 0, 1);   /* positive: RMSprop's and Adam's second moments */
            memcpy(w2, w, n * 4);
            memcpy(st2, st, 3 * n * 4);
            state_of(&o, st, n, p);
            state_of(&o, st2, n, p2);
            kern_optim(&o, w, p, g, n);
            for (size_t i = 0; i < n; i++) {
                g2[i] = g[i] * o.scale;
                if (o.l2 != 0) g2[i] += o.l2 * w2[i];
                w2[i] *= o.decay;
            }
            KOptim plain = o;
            plain.scale = 1, plain.l2 = 0, plain.decay = 1;
            kern_optim(&plain, w2, p2, g2, n);
            ck_assert_msg(memcmp(w, w2, n * 4) == 0 && memcmp(st, st2, 3 * n * 4) == 0,
                          "case %d, n %zu, scale %g l2 %g decay %g: not the bits of the steps apart", _i, n, o.scale,
                          o.l2, o.decay);
            free(w), free(w2), free(g), free(g2), free(st), free(st2);
        }
    }
}
END_TEST

/* The plain kern_optim is each optimizer's own kernel. */
START_TEST(optim_plain_is_the_kernel)
{
    enum { N = 100 };
    float w[2][N], m[2][N], v[2][N], g[N];
    for (int k = 0; k < 2; k++) {
        fill(w[k], N, 1, -1, 1);
        fill(m[k], N, 2, -1, 1);
        fill(v[k], N, 3, 0, 1);
    }
    fill(g, N, 4, -1, 1);
    KOptim o = { .kind = KOPT_ADAM, .lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-7f, .t = 5, .scale = 1,
                 .decay = 1 };
    float *st[3] = { m[0], v[0], NULL };
    kern_optim(&o, w[0], st, g, N);
    kern_adam(KISA_AUTO, w[1], m[1], v[1], g, N, 0.01f, 0.8f, 0.99f, 1e-7f, 5);
    ck_assert(memcmp(w[0], w[1], sizeof w[0]) == 0 && memcmp(m[0], m[1], sizeof m[0]) == 0 &&
              memcmp(v[0], v[1], sizeof v[0]) == 0);
}
END_TEST

/* The sum of squares against long double, and clip_grad_norm_'s factor. */
START_TEST(clip_factor)
{
    enum { N = 100003 };
    float *x = malloc(N * 4);
    fill(x, N, 5, -3, 3);
    long double ref = 0;
    for (int i = 0; i < N; i++) ref += (long double)x[i] * x[i];
    double s = kern_sumsq(x, N);
    ck_assert_float_near_rel(s, (double)ref, 1e-13, 0);
    ck_assert_float_eq(kern_clip_factor(s, 1e9f), 1.0f);   /* a norm below the bound: left as it is */
    ck_assert_float_near_rel(kern_clip_factor(s, 2.0f), 2.0 / (sqrt((double)ref) + 1e-6), 1e-7, 0);
    ck_assert_float_eq(kern_clip_factor(0.0, 1.0f), 1.0f);
    ck_assert(isnan(kern_clip_factor(NAN, 1.0f)));          /* NaN stays, as in PyTorch */
    ck_assert_float_eq(kern_clip_factor(INFINITY, 1.0f), 0.0f);
    free(x);
}
END_TEST

/* The panels of kern_gemm_optim (AdamW, RMSprop) against the GEMM and kern_optim apart,
 * on operands whose products and sums are exact in float (multiples of 1/8, |x| <= 2, K
 * <= 24): the same gradient, so the same bits; at 1, 2 and 3 threads; panels of 8 rows
 * over 37 rows (the last of 5). */
START_TEST(gemm_optim_panels)
{
    enum { M = 37, N = 20, K = 9 };
    KOptim o = _i == 0 ? (KOptim){ .kind = KOPT_ADAM, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .t = 2,
                                   .scale = 1, .decay = 0.999f }
                       : (KOptim){ .kind = KOPT_RMSPROP, .lr = 0.01f, .rho = 0.9f, .eps = 1e-8f, .mu = 0.9f,
                                   .centered = true, .scale = 1, .l2 = 0.01f, .decay = 1 };
    float a[K * M], b[K * N], gr[M * N], w0[M * N], st0[3 * M * N];
    for (int i = 0; i < K * M; i++) a[i] = (float)((int)rng_below(rng_at(7, 1, (uint64_t)i), 33) - 16) / 8;
    for (int i = 0; i < K * N; i++) b[i] = (float)((int)rng_below(rng_at(7, 2, (uint64_t)i), 33) - 16) / 8;
    fill(w0, M * N, 8, -1, 1);
    fill(st0, 3 * M * N, 9, 0, 1);
    float want_w[M * N], want_st[3 * M * N], *p[3];
    memcpy(want_w, w0, sizeof w0);
    memcpy(want_st, st0, sizeof st0);
    state_of(&o, want_st, M * N, p);
    kern_gemm(NULL, KISA_AUTO, true, false, M, N, K, 1.0f, a, b, 0.0f, gr);   /* a^T b */
    kern_optim(&o, want_w, p, gr, M * N);
    kern_gemm_optim_set_panel(8);
    for (int t = 1; t <= 3; t++) {
        tu_threads(t);
        float w[M * N], st[3 * M * N];
        memcpy(w, w0, sizeof w0);
        memcpy(st, st0, sizeof st0);
        state_of(&o, st, M * N, p);
        size_t bytes = kern_gemm_optim_scratch(true, false, M, N, K, t);
        float *scratch = malloc(bytes);
        kern_gemm_optim(tu_pool, true, false, M, N, K, a, b, &o, w, p, scratch);
        free(scratch);
        ck_assert_msg(memcmp(w, want_w, sizeof w) == 0 && memcmp(st, want_st, sizeof st) == 0,
                      "%d threads: the panels' bits differ from the ops apart", t);
    }
    kern_gemm_optim_set_panel(0);
    tu_threads(1);
    /* a long K by parts of K (kernels/update.c): a partial [M, N] per part, from K alone */
    ck_assert_uint_eq(kern_gemm_optim_scratch(true, false, M, N, 1100, 1), 2 * M * N * sizeof(float));
    ck_assert_uint_eq(kern_gemm_optim_scratch(true, false, M, N, 2600, 3), 5 * M * N * sizeof(float));
}
END_TEST

/* ---- schedules ------------------------------------------------------------------------ */

START_TEST(schedules)
{
    TrainSpec t;
    memset(&t, 0, sizeof t);
    t.lr = 0.1f;
    ck_assert_float_near_rel(optim_lr(&t, 0), 0.1f, 0, 0);
    ck_assert_float_near_rel(optim_lr(&t, 1000000), 0.1f, 0, 0);
    t.sched = (LrSchedule){ .kind = SCHED_STEP, .every = 3, .factor = 0.5f };
    static const double step_want[] = { 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025 };
    for (int s = 0; s < 7; s++) ck_assert_float_near_rel(optim_lr(&t, s), (float)0.1 * step_want[s] / 0.1, 1e-12, 0);
    /* cosine from 1 to 0.2 over 4 steps, then 0.2 */
    t.lr = 1;
    t.sched = (LrSchedule){ .kind = SCHED_COSINE, .steps = 4, .min = 0.2f };
    double m = (double)0.2f;
    double cos_want[] = { 1, m + (1 - m) * (1 + sqrt(0.5)) / 2, m + (1 - m) / 2, m + (1 - m) * (1 - sqrt(0.5)) / 2, m, m };
    for (int s = 0; s < 6; s++) ck_assert_float_near_rel(optim_lr(&t, s), cos_want[s], 1e-12, 1e-15);
    /* a warmup of 4 steps, then the schedule from its own step 0 */
    t.sched.warmup = 4;
    for (int s = 0; s < 4; s++) ck_assert_float_near_rel(optim_lr(&t, s), (s + 1) / 4.0, 1e-12, 0);
    for (int s = 4; s < 10; s++) ck_assert_float_near_rel(optim_lr(&t, s), cos_want[s - 4 < 5 ? s - 4 : 5], 1e-12, 1e-15);
    /* the step's environment carries it, as a float */
    StepEnv e;
    memset(&e, 0, sizeof e);
    t.momentum = 0.3f;
    step_env_train(&e, &t, 5);
    ck_assert_int_eq(e.step, 5);
    ck_assert(e.lr == (float)optim_lr(&t, 5) && e.momentum == 0.3f);
}
END_TEST

/* ---- the language --------------------------------------------------------------------- */

#define NET_HEAD "input x: f32[B, 4]\ninput y: i32[B]\nlogits = dense(x, units=3)\nloss = cross_entropy(logits, y)\n"

static Graph *try_compile(Compiled *c, const char *train)
{
    char text[2048];
    snprintf(text, sizeof text, NET_HEAD "train {\n  data = synthetic(count=16)\n  minimize = loss\n%s}\n", train);
    ck_assert_int_eq(source_from_string(&c->src, "t.net", text), 0);
    diag_init(&c->d, &c->src);
    c->g = NULL;
    compile_source(&c->src, &c->d, NULL, &c->g);
    return c->g;
}

START_TEST(train_block_values)
{
    Compiled c;
    char desc[320];
    ck_assert_ptr_nonnull(try_compile(&c, "  optimizer = adamw()\n"));
    const TrainSpec *t = &c.g->train;
    ck_assert_int_eq(t->optim, OPTIM_ADAMW);
    ck_assert(t->lr == 0.001f && t->eps == 1e-8f && t->weight_decay == 0.01f && t->beta1 == 0.9f && t->beta2 == 0.999f);
    ck_assert_int_eq(t->sched.kind, SCHED_CONSTANT);
    ck_assert_str_eq(optim_describe(t, desc, sizeof desc), "adamw(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.01)");
    compiled_free_all(&c);

    ck_assert_ptr_nonnull(try_compile(&c, "  optimizer = rmsprop(momentum=0.5, centered=true)\n  clip_norm = 2\n"
                                          "  lr = step_decay(0.02, every=100, factor=0.5)\n  warmup = 10\n"));
    t = &c.g->train;
    ck_assert_int_eq(t->optim, OPTIM_RMSPROP);
    ck_assert(t->lr == 0.02f && t->rho == 0.99f && t->eps == 1e-8f && t->momentum == 0.5f && t->centered);
    ck_assert(t->clip_norm == 2.0f && t->sched.kind == SCHED_STEP && t->sched.every == 100 && t->sched.factor == 0.5f);
    ck_assert_int_eq(t->sched.warmup, 10);
    ck_assert_str_eq(optim_describe(t, desc, sizeof desc),
                     "rmsprop(rho=0.99, eps=1e-08, momentum=0.5, centered=true), lr = step_decay(0.02, every=100, "
                     "factor=0.5), warmup = 10, clip_norm = 2");
    compiled_free_all(&c);

    /* the block's lr, before or after the optimizer, replaces its default */
    ck_assert_ptr_nonnull(try_compile(&c, "  lr = cosine(0.5, steps=20, min=0.01)\n"
                                          "  optimizer = sgd(momentum=0.9, weight_decay=0.0001)\n"));
    t = &c.g->train;
    ck_assert(t->lr == 0.5f && t->sched.kind == SCHED_COSINE && t->sched.steps == 20 && t->sched.min == 0.01f);
    ck_assert(t->weight_decay == 0.0001f && t->momentum == 0.9f);
    ck_assert_str_eq(optim_describe(t, desc, sizeof desc),
                     "sgd(momentum=0.9, weight_decay=0.0001), lr = cosine(0.5, steps=20, min=0.01)");
    compiled_free_all(&c);
    ck_assert_ptr_nonnull(try_compile(&c, "  optimizer = adam(weight_decay=0.1)\n  lr = 0.25\n"));
    ck_assert(c.g->train.lr == 0.25f && c.g->train.weight_decay == 0.1f && c.g->train.eps == 1e-7f);
    compiled_free_all(&c);
}
END_TEST

/* Every mistake, its message and place (the first error's line). */
static const struct {
    const char *train, *first;
} train_errors[] = {
    { "  optimizer = sgd(lr=0.1)\n  lr = 0.2\n",
      "t.net:9:8: error: train: the learning rate is set twice: here and by lr= in the optimizer at line 8; keep one" },
    { "  optimizer = adamw(lr=cosine(0.1, steps=5))\n",
      "t.net:8:24: error: adamw: a schedule goes in the train block as its own entry: lr = cosine(...)" },
    { "  lr = cosine(0.1, steps=5, min=0.5)\n", "t.net:8:33: error: cosine: 'min' (0.5) must not be above the starting "
      "learning rate (0.1)" },
    { "  lr = step_decay(0.1, factor=0.5)\n", "t.net:8:8: error: step_decay: missing keyword argument 'every'" },
    { "  lr = step_decay(every=3)\n", "t.net:8:8: error: step_decay: give the starting learning rate first, e.g. "
      "step_decay(0.1, every=1000, factor=0.5)" },
    { "  lr = cosine(0, steps=5)\n", "t.net:8:15: error: cosine: the learning rate must be above 0 and at most 1e6, got 0" },
    { "  lr = -1\n", "t.net:8:8: error: train: 'lr' must be a number above 0 (at most 1e6) or a schedule: step_decay(...), "
      "cosine(...)" },
    { "  warmup = 2.5\n", "t.net:8:12: error: train: 'warmup' must be an integer from 0 to 1073741824" },
    { "  clip_norm = 0\n", "t.net:8:15: error: train: 'clip_norm' must be a number above 0 (the largest global norm of "
      "the gradients)" },
    { "  clip_nrom = 1\n", "t.net:8:3: error: train: unknown setting 'clip_nrom'; did you mean 'clip_norm'?" },
    { "  optimizer = adamw(weight_dcay=0.1)\n",
      "t.net:8:21: error: adamw: unknown keyword argument 'weight_dcay'; did you mean 'weight_decay'?" },
    { "  optimizer = rmsprop(alpha=0.9)\n",
      "t.net:8:23: error: rmsprop: unknown keyword argument 'alpha' (it takes lr, rho, eps, momentum, centered, weight_decay)" },
    { "  optimizer = rmsprop(centered=1)\n", "t.net:8:32: error: rmsprop: 'centered' must be true or false, got number" },
    { "  optimizer = adamw(weight_decay=-0.1)\n",
      "t.net:8:34: error: adamw: 'weight_decay' must be between 0 and 1e+06, got -0.1" },
    { "  lr = 0.1\n  lr = 0.2\n", "t.net:9:3: error: train: 'lr' is set twice" },
    /* one mistake, one message: a bad lr is not also "set twice" */
    { "  optimizer = sgd(lr=0.1)\n  lr = 0\n", "t.net:9:8: error: train: 'lr' must be a number above 0 (at most 1e6) or "
      "a schedule: step_decay(...), cosine(...)" },
    /* 0.99999999 would be 1 in float */
    { "  optimizer = adamw(beta2=0.99999999)\n", "t.net:8:27: error: adamw: 'beta2' must be from 0 to 0.99999994 (the float "
      "below 1), got 0.99999999" },
    { "  optimizer = rmsprop(rho=1)\n", "t.net:8:27: error: rmsprop: 'rho' must be from 0 to 0.99999994 (the float below "
      "1), got 1" },
};

static const char *first_line(const DiagSink *d, char *buf, size_t n)
{
    const char *s = d->buf ? d->buf : "";
    size_t k = strcspn(s, "\n");
    snprintf(buf, n, "%.*s", (int)(k < n ? k : n - 1), s);
    return buf;
}

START_TEST(train_block_errors)
{
    Compiled c;
    char got[512];
    ck_assert_ptr_null(try_compile(&c, train_errors[_i].train));
    ck_assert_msg(strcmp(first_line(&c.d, got, sizeof got), train_errors[_i].first) == 0, "got\n%s\nexpected\n%s", got,
                  train_errors[_i].first);
    ck_assert_int_eq(c.d.nerrors, 1);
    compiled_free_all(&c);
}
END_TEST

/* A schedule or an optimizer outside the train block. */
START_TEST(train_values_outside)
{
    Compiled c;
    ck_assert_int_eq(source_from_string(&c.src, "t.net", "input x: f32[B, 4]\nr = cosine(0.1, steps=3)\noutput y = x\n"), 0);
    diag_init(&c.d, &c.src);
    c.g = NULL;
    ck_assert_int_ne(compile_source(&c.src, &c.d, NULL, &c.g), 0);
    char got[512];
    ck_assert_str_eq(first_line(&c.d, got, sizeof got), "t.net:2:5: error: cosine() is a learning-rate schedule: it belongs "
                     "in the train block (lr = cosine(0.001, steps=10000, min=0))");
    compiled_free_all(&c);
}
END_TEST

/* ---- the training step ---------------------------------------------------------------- */

/* dense/kernel (64 x 256, 64 KiB) updates early, in a matmul_update when not clipped;
 * dense_1 and dense_2 read relu outputs (matmul_grad_update for SGD and momentum). */
#define MODEL_FMT                                                                        \
    "model opt\ninput x: f32[B, 64]\ninput label: i32[B]\n"                              \
    "h = dense(x, units=256, activation=\"relu\")\nh2 = dense(h, units=32, activation=\"relu\")\n" \
    "logits = dense(h2, units=10)\nloss = cross_entropy(logits, label)\n"               \
    "train {\n  data = synthetic(count=64)\n  batch = 8\n  minimize = loss\n%s\n}\n"

static const char *const configs[] = {
    "  optimizer = sgd(lr=0.05, weight_decay=0.01)",
    "  optimizer = sgd(lr=0.05, momentum=0.9, weight_decay=0.01)\n  clip_norm = 0.5",
    "  optimizer = sgd(momentum=0.9, nesterov=true, weight_decay=0.001)\n  lr = step_decay(0.05, every=2, factor=0.5)",
    "  optimizer = sgd(lr=0.05, momentum=0.9)\n  warmup = 3",
    "  optimizer = adam(weight_decay=0.01)\n  lr = cosine(0.01, steps=6, min=0.001)",
    "  optimizer = adamw(lr=0.01, weight_decay=0.1)",
    "  optimizer = adamw(weight_decay=0.1)\n  lr = cosine(0.01, steps=6)\n  warmup = 2\n  clip_norm = 0.3",
    "  optimizer = rmsprop(lr=0.001)",
    "  optimizer = rmsprop(lr=0.001, momentum=0.9, centered=true, weight_decay=0.01)\n  clip_norm = 0.2",
    "  optimizer = rmsprop(centered=true)\n  lr = step_decay(0.002, every=3)\n  warmup = 2",
    "  optimizer = sgd(lr=0.05, momentum=0.9, weight_decay=0.01)",   /* the GEMM forms' weight decay */
};
enum { NCONFIGS = sizeof configs / sizeof configs[0] };

static void compile_config(Compiled *c, int k)
{
    char text[2048];
    snprintf(text, sizeof text, MODEL_FMT, configs[k]);
    compile_str(c, text);
}

static void **feeds_for(const Graph *g, uint64_t seed)
{
    void **f = calloc((size_t)g->ninputs, sizeof *f);
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        int64_t cnt = shape_numel(&n->shape);
        f[i] = malloc((size_t)cnt * 4);
        for (int64_t k = 0; k < cnt; k++) {
            uint64_t r = rng_at(seed, (uint64_t)i, (uint64_t)k);
            if (n->dtype == DT_F32) ((float *)f[i])[k] = (float)rng_unit(r) * 2 - 1;
            else ((int32_t *)f[i])[k] = (int32_t)rng_below(r, 10);
        }
    }
    return f;
}

static void free_feeds(const Graph *g, void **f)
{
    for (int i = 0; i < g->ninputs; i++) free(f[i]);
    free(f);
}

/* `steps` training steps of st from step `first`, the train block's hyperparameters and
 * schedule; the losses into loss[] when not NULL. */
static void run_steps(const Step *st, const TrainSpec *t, Weights *w, int first, int steps, float *loss, DiagSink *d)
{
    for (int s = first; s < first + steps; s++) {
        void **feeds = feeds_for(st->graph, (uint64_t)(s % 2));   /* two batches, in turn */
        float lv = 0, av = 0;
        float *outs[2] = { &lv, &av };
        StepEnv env = { .w = w, .seed = 5, .training = true, .d = d };
        step_env_train(&env, t, s);
        ck_assert_msg(executor_run(st->ex, (const void *const *)feeds, outs, &env) == 0, "%s", d->buf ? d->buf : "");
        if (loss) loss[s - first] = lv;
        free_feeds(st->graph, feeds);
    }
}

static void prepare_step(Compiled *c, ExecMode mode, uint64_t off, Weights *w, Step *st)
{
    CompileOptions co = { .mode = mode, .pool = tu_pool, .passes_off = off, .seed = 3, .verify = true };
    memset(w, 0, sizeof *w);
    ck_assert_msg(prepare(c->g, FOR_TRAINING, 8, &co, w, st, &c->d) == 0, "%s", c->d.buf ? c->d.buf : "");
}

static int count_op(const Graph *g, OpKind op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op;
    return n;
}

/* The training step's graph: with clip_norm, one clip_scale reads every gradient and
 * every update multiplies by it; the state vars as PyTorch names them. */
START_TEST(step_graph)
{
    Compiled c;
    compile_config(&c, _i);
    Graph *tg = pass_autodiff(c.g, &c.d);
    ck_assert_ptr_nonnull(tg);
    ck_assert_int_eq(graph_verify(tg, &c.d), 0);
    const TrainSpec *t = &tg->train;
    bool clip = t->clip_norm > 0;
    ck_assert_int_eq(count_op(tg, OP_CLIP_SCALE), clip);
    int32_t cs = -1, nupdates = 0;
    for (int i = 0; i < tg->nnodes; i++)
        if (tg->nodes[i].op == OP_CLIP_SCALE) cs = i;
    for (int i = 0; i < tg->nnodes; i++) {
        const Node *n = &tg->nodes[i];
        if (!op_has(n->op, OPT_UPDATE)) continue;
        nupdates++;
        ck_assert_int_eq(n->nin, clip ? 3 : 2);
        if (clip) {
            ck_assert_int_eq(n->in[2], cs);
            ck_assert_int_lt(cs, i);
        }
        static const OpKind want[OPTIM_KIND_COUNT] = { OP_SGD_UPDATE, OP_ADAM_UPDATE, OP_ADAMW_UPDATE, OP_RMSPROP_UPDATE };
        ck_assert_int_eq(n->op, t->optim == OPTIM_SGD && t->momentum > 0 ? OP_MOMENTUM_UPDATE : want[t->optim]);
        int st[OPTIM_MAX_STATE];
        int ns = graph_state_vars(tg, n->a.update.var, st);
        int expect = t->optim == OPTIM_SGD ? t->momentum > 0 : t->optim == OPTIM_RMSPROP ? 1 + (t->momentum > 0) + t->centered : 2;
        ck_assert_int_eq(ns, expect);
        if (t->optim == OPTIM_RMSPROP) {
            char name[300];
            snprintf(name, sizeof name, "%s:square_avg", tg->vars[n->a.update.var].name);
            ck_assert_str_eq(tg->vars[st[0]].name, name);
            if (t->centered) {
                snprintf(name, sizeof name, "%s:grad_avg", tg->vars[n->a.update.var].name);
                ck_assert_str_eq(tg->vars[st[ns - 1]].name, name);
            }
        }
        for (int k = 0; k < OPTIM_MAX_STATE; k++) ck_assert_int_eq(n->a.update.state[k], st[k]);
    }
    ck_assert_int_eq(nupdates, 6);
    if (clip) ck_assert_int_eq(tg->nodes[cs].nin, 6);   /* every parameter's gradient */
    graph_free(tg);
    compiled_free_all(&c);
}
END_TEST

/* The two executors: without the passes that round otherwise (the gradient GEMMs in
 * their updates), the compiled plan gives the interpreter's bits, weights and optimizer
 * state, after 6 steps through the schedule.  With every pass: the fusions expected
 * (a clipped gradient is never made inside its update; AdamW and RMSprop ride
 * matmul_update's panels), and the loss within 1e-5 of the interpreter's for 20 steps. */
START_TEST(executors_agree)
{
    Compiled c;
    compile_config(&c, _i);
    const TrainSpec *t = &c.g->train;
    Weights w[2];
    Step st[2];
    for (int m = 0; m < 2; m++) {
        prepare_step(&c, m ? MODE_COMPILED : MODE_INTERP, rounding_passes(), &w[m], &st[m]);
        run_steps(&st[m], t, &w[m], 0, 6, NULL, &c.d);
        step_free(&st[m]);
    }
    for (int v = 0; v < w[0].n; v++)
        ck_assert_msg(memcmp(w[0].data[v], w[1].data[v], (size_t)shape_numel(&w[0].shapes[v]) * 4) == 0,
                      "%s: %s differs after 6 steps", configs[_i], w[0].names[v]);
    weights_free(&w[0]);
    weights_free(&w[1]);

    enum { STEPS = 20 };
    float loss[2][STEPS];
    for (int m = 0; m < 2; m++) {
        prepare_step(&c, m ? MODE_COMPILED : MODE_INTERP, 0, &w[m], &st[m]);
        if (m == 1) {
            const Graph *fg = executor_graph(st[1].ex);
            bool clip = t->clip_norm > 0, nesterov = t->nesterov;
            ck_assert_int_eq(count_op(fg, OP_MATMUL_UPDATE), clip || nesterov ? 0 : 1);
            if (clip) {
                ck_assert_int_eq(count_op(fg, OP_MATMUL_GRAD_UPDATE), 0);
                for (int i = 0; i < fg->nnodes; i++)
                    if (fg->nodes[i].op == OP_UPDATE_ALL) ck_assert_int_eq(fg->nodes[i].nin % 2, 1);
            }
        }
        run_steps(&st[m], t, &w[m], 0, STEPS, loss[m], &c.d);
        step_free(&st[m]);
        weights_free(&w[m]);
    }
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(isfinite(loss[0][s]) && fabs((double)loss[1][s] - loss[0][s]) <= 1e-5 * fabs((double)loss[0][s]),
                      "%s step %d: interp %.9g, compiled %.9g", configs[_i], s, loss[0][s], loss[1][s]);
    ck_assert_msg(loss[0][STEPS - 2] < loss[0][0], "%s: no progress on the first batch (%g -> %g)", configs[_i], loss[0][0],
                  loss[0][STEPS - 2]);
    compiled_free_all(&c);
}
END_TEST

/* Clipping in a data-parallel step: the clip_scale reads the mean gradients (the
 * allreduce's slices), so one process gives the bits of the step without allreduce. */
START_TEST(allreduce_clipped)
{
    Compiled c;
    compile_config(&c, 8);
    Weights w[2];
    for (int variant = 0; variant < 2; variant++) {
        Graph *tg = pass_autodiff(c.g, &c.d);
        ck_assert_ptr_nonnull(tg);
        if (variant) {
            Graph *dp = pass_allreduce(tg, 4096, &c.d);
            ck_assert_msg(dp != NULL, "%s", c.d.buf ? c.d.buf : "");
            graph_free(tg);
            tg = dp;
            ck_assert_int_eq(graph_verify(tg, &c.d), 0);
            for (int i = 0; i < tg->nnodes; i++) {
                const Node *n = &tg->nodes[i];
                if (n->op != OP_CLIP_SCALE) continue;
                for (int k = 0; k < n->nin; k++) {
                    const Node *r = &tg->nodes[n->in[k]];
                    ck_assert_int_eq(r->op, OP_RESHAPE);
                    ck_assert_int_eq(tg->nodes[tg->nodes[r->in[0]].in[0]].op, OP_ALLREDUCE_WAIT);
                }
            }
        }
        ck_assert_int_eq(graph_bind(tg, "B", 8, &c.d), 0);
        CompileOptions co = { .mode = MODE_INTERP, .pool = tu_pool, .seed = 3, .verify = true };
        Step st;
        memset(&w[variant], 0, sizeof w[variant]);
        ck_assert_msg(prepare_from(tg, FOR_TRAINING, 8, &co, &w[variant], &st, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
        run_steps(&st, &c.g->train, &w[variant], 0, 3, NULL, &c.d);
        step_free(&st);
    }
    for (int v = 0; v < w[0].n; v++)
        ck_assert_msg(memcmp(w[0].data[v], w[1].data[v], (size_t)shape_numel(&w[0].shapes[v]) * 4) == 0, "%s differs",
                      w[0].names[v]);
    weights_free(&w[0]);
    weights_free(&w[1]);
    compiled_free_all(&c);
}
END_TEST

/* ---- checkpoints and resuming --------------------------------------------------------- */

static char tmpdir[64];

/* A run of the config's model: `epochs` of 4 steps, from `resume` if not NULL, saved to
 * `save`.  0 or -1 (the error in c->d). */
static int run_model(Compiled *c, int64_t epochs, const char *resume, const char *save, ExecMode mode)
{
    RunOptions o;
    run_options_default(&o);
    o.epochs = epochs;
    o.steps = 4;
    o.threads = 2;
    o.mode = mode;
    o.resume_path = resume;
    o.save_path = save;
    RunResult r;
    int rc = train_run(c->g, &o, &r, NULL, &c->d);
    if (rc == 0) run_result_free(&r);
    return rc;
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    ck_assert_ptr_nonnull(fa);
    ck_assert_ptr_nonnull(fb);
    int ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
    } while (ca == cb && ca != EOF);
    fclose(fa);
    fclose(fb);
    return ca == cb;
}

/* Stopped after 4 steps (of 8) and resumed from its checkpoint, a run ends with the
 * bytes of the run never stopped: the schedule (warmup 2, then cosine or step decay) is
 * a function of the step, the optimizer state (RMSprop's three tensors, AdamW's two)
 * is in the checkpoint.  In both executors. */
START_TEST(resume_mid_schedule)
{
    static const int cfg[] = { 6, 9, 8 };
    Compiled c;
    compile_config(&c, cfg[_i / 2]);
    ExecMode mode = _i % 2 ? MODE_INTERP : MODE_COMPILED;
    tu_mkdtemp(tmpdir, sizeof tmpdir, "graphc-optim");
    char whole[128], half[128], rest[128];
    snprintf(whole, sizeof whole, "%s/whole.ckpt", tmpdir);
    snprintf(half, sizeof half, "%s/half.ckpt", tmpdir);
    snprintf(rest, sizeof rest, "%s/rest.ckpt", tmpdir);
    ck_assert_msg(run_model(&c, 2, NULL, whole, mode) == 0, "%s", c.d.buf ? c.d.buf : "");
    ck_assert_msg(run_model(&c, 1, NULL, half, mode) == 0, "%s", c.d.buf ? c.d.buf : "");
    ck_assert_msg(run_model(&c, 2, half, rest, mode) == 0, "%s", c.d.buf ? c.d.buf : "");
    ck_assert_msg(same_file(whole, rest), "%s: the resumed run ends elsewhere", configs[cfg[_i / 2]]);
    ck_assert_msg(!same_file(whole, half), "the checkpoints do not change with the steps");
    tu_rmtree(tmpdir);
    compiled_free_all(&c);
}
END_TEST

/* RMSprop's state round trip (three tensors per parameter), and what readers make of
 * it: evaluation (a graph without optimizer state) reads such a checkpoint; a resume
 * with RMSprop centered from one without grad_avg is refused, naming it. */
START_TEST(rmsprop_checkpoints)
{
    Compiled c, other;
    compile_config(&c, 8);
    tu_mkdtemp(tmpdir, sizeof tmpdir, "graphc-optim");
    char path[128];
    snprintf(path, sizeof path, "%s/r.ckpt", tmpdir);
    Weights w, back, ev;
    Step st, es;
    prepare_step(&c, MODE_COMPILED, 0, &w, &st);
    run_steps(&st, &c.g->train, &w, 0, 2, NULL, &c.d);
    w.step = 2;
    ck_assert_int_eq(checkpoint_save(path, st.graph, &w, 5, &c.d), 0);
    memset(&back, 0, sizeof back);
    ck_assert_int_eq(weights_init(&back, st.graph, 99, &c.d), 0);
    ck_assert_msg(checkpoint_resume(path, st.graph, &back, false, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
    int nstate = 0;
    for (int v = 0; v < w.n; v++) {
        ck_assert_msg(memcmp(w.data[v], back.data[v], (size_t)shape_numel(&w.shapes[v]) * 4) == 0, "%s", w.names[v]);
        nstate += w.roles[v] == VAR_STATE;
    }
    ck_assert_int_eq(nstate, 18);
    ck_assert_int_eq(back.step, 2);
    CompileOptions co = { .mode = MODE_COMPILED, .pool = tu_pool, .seed = 4 };
    memset(&ev, 0, sizeof ev);
    ck_assert_int_eq(prepare(c.g, FOR_EVALUATION, 8, &co, &ev, &es, &c.d), 0);
    ck_assert_msg(checkpoint_load(path, es.graph, &ev, &c.d) == 0, "%s", c.d.buf ? c.d.buf : "");
    step_free(&es);
    weights_free(&ev);
    step_free(&st);
    weights_free(&w);
    weights_free(&back);

    /* from RMSprop without momentum nor centered: square_avg only */
    compile_config(&other, 7);
    ck_assert_int_eq(run_model(&other, 1, NULL, path, MODE_COMPILED), 0);
    ck_assert_int_ne(run_model(&c, 2, path, NULL, MODE_COMPILED), 0);
    ck_assert_msg(strstr(c.d.buf, "only part of the optimizer state") && strstr(c.d.buf, "momentum_buffer") &&
                  strstr(c.d.buf, "rmsprop without momentum= or centered="), "%s", c.d.buf);
    tu_rmtree(tmpdir);
    compiled_free_all(&other);
    compiled_free_all(&c);
}
END_TEST

static Suite *make_optim_suite(void)
{
    Suite *s = suite_create("optimizers");
    TCase *k = tcase_create("kernels");
    tcase_add_loop_test(k, rmsprop_reference, 0, 4);
    tcase_add_loop_test(k, optim_blocks, 0, NOPTIM);
    tcase_add_test(k, optim_plain_is_the_kernel);
    tcase_add_test(k, clip_factor);
    tcase_add_loop_test(k, gemm_optim_panels, 0, 2);
    suite_add_tcase(s, k);
    TCase *l = tcase_create("language");
    tcase_add_test(l, schedules);
    tcase_add_test(l, train_block_values);
    tcase_add_loop_test(l, train_block_errors, 0, (int)(sizeof train_errors / sizeof *train_errors));
    tcase_add_test(l, train_values_outside);
    suite_add_tcase(s, l);
    TCase *x = tcase_create("steps");
    tcase_set_timeout(x, 600);
    tcase_add_loop_test(x, step_graph, 0, NCONFIGS);
    tcase_add_loop_test(x, executors_agree, 0, NCONFIGS);
    tcase_add_test(x, allreduce_clipped);
    tcase_add_loop_test(x, resume_mid_schedule, 0, 6);
    tcase_add_test(x, rmsprop_checkpoints);
    suite_add_tcase(s, x);
    return s;
}

int main(void)
{
    tu_threads(1);
    SRunner *sr = srunner_create(make_optim_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    pool_free(tu_pool);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
