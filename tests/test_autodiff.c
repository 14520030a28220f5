/* Autodiff: the training graph's gradient of every parameter, read off an SGD step
 * with lr = 1 (w_before - w_after), against central finite differences of the loss
 * through the inference graph, on small models that use every differentiable op, and
 * on a table of one op and axis at a time (the batch among them) at batch 1 and 3. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "graph/passes.h"
#include "tests/testgraph.h"
#include "tests/testtrain.h"
#include "tests/testutil.h"

static int out_index(const Graph *g, const char *name)
{
    for (int i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0) return i;
    return -1;
}

/* The loss of the inference graph `ig` (bound) for the current weights. */
static double loss_of(const Graph *ig, Weights *w, void **feeds, DiagSink *d)
{
    int li = out_index(ig, "loss");
    ck_assert_int_ge(li, 0);
    float outv[16];
    float *outs[16] = { 0 };
    ck_assert_int_le(ig->noutputs, 16);
    outs[li] = &outv[li];
    StepEnv env = { .w = w, .training = false, .d = d };
    ck_assert_int_eq(interp_run(ig, (const void *const *)feeds, outs, &env, tu_pool, NULL), 0);
    return outv[li];
}

/* The loss of a training step `tg` (bound; SGD, lr 0: the parameters stay) for the
 * current weights: for a model whose training form differs from its inference (batch
 * norm normalizes with the batch's statistics). */
static double train_loss_of(const Graph *tg, Weights *w, void **feeds, DiagSink *d)
{
    float lv = 0, av = 0;
    float *outs[2] = { &lv, &av };
    StepEnv env = { .w = w, .lr = 0.0f, .training = true, .d = d };
    ck_assert_int_eq(interp_run(tg, (const void *const *)feeds, outs, &env, tu_pool, NULL), 0);
    return lv;
}

/* Checks every parameter's gradient in the model `text` with batch `batch`; the
 * finite differences of the inference graph's loss, or with through_step, of the
 * training step's.  `what` names the case in a failure (or NULL). */
static void gradcheck_case(const char *what, const char *text, int64_t batch, int32_t classes, bool through_step)
{
    Compiled c;
    compile_str(&c, text);
    Graph *tg = pass_autodiff(c.g, &c.d);
    ck_assert_msg(tg != NULL, "%s", c.d.buf ? c.d.buf : "");
    ck_assert_int_eq(graph_verify(tg, &c.d), 0);
    Graph *ig = pass_inference(c.g, true, &c.d);
    ck_assert_ptr_nonnull(ig);
    ck_assert_int_eq(graph_bind(tg, "B", batch, &c.d), 0);
    ck_assert_int_eq(graph_bind(ig, "B", batch, &c.d), 0);
    ck_assert_int_eq(graph_verify(tg, &c.d), 0);

    Weights w;
    ck_assert_int_eq(weights_init(&w, tg, 7, &c.d), 0);
    /* Biases start at zero in Keras; move them so their gradients are not special. */
    for (int v = 0; v < w.n; v++)
        for (int64_t k = 0; k < shape_numel(&w.shapes[v]); k++)
            w.data[v][k] += 0.1f * (rng_unit(rng_at(99, (uint64_t)v, (uint64_t)k)) - 0.5f);
    void **feeds = make_feeds(tg, classes, 5);

    /* analytic: one SGD step with lr = 1 moves w by -grad */
    Weights before;
    ck_assert_int_eq(weights_init(&before, tg, 7, &c.d), 0);
    weights_copy_matching(&before, &w);
    float lv = 0, av = 0;
    float *outs[2] = { &lv, &av };
    StepEnv env = { .w = &w, .lr = 1.0f, .training = true, .d = &c.d };
    ck_assert_int_eq(interp_run(tg, (const void *const *)feeds, outs, &env, tu_pool, NULL), 0);
    double base = through_step ? train_loss_of(tg, &before, feeds, &c.d) : loss_of(ig, &before, feeds, &c.d);
    ck_assert_float_near_rel(lv, base, 1e-5, 1e-6);   /* the step's loss is the model's loss */

    int checked = 0;
    for (int v = 0; v < w.n; v++) {
        if (w.roles[v] != VAR_PARAM) continue;
        int64_t n = shape_numel(&w.shapes[v]);
        int64_t stride = n > 12 ? n / 12 : 1;
        for (int64_t k = 0; k < n; k += stride) {
            double analytic = (double)before.data[v][k] - (double)w.data[v][k];
            float keep = before.data[v][k];
            const float eps = 1e-3f;
            before.data[v][k] = keep + eps;
            double lp = through_step ? train_loss_of(tg, &before, feeds, &c.d) : loss_of(ig, &before, feeds, &c.d);
            before.data[v][k] = keep - eps;
            double lm = through_step ? train_loss_of(tg, &before, feeds, &c.d) : loss_of(ig, &before, feeds, &c.d);
            before.data[v][k] = keep;
            double numeric = (lp - lm) / (2.0 * eps);
            ck_assert_msg(tu_near(analytic, numeric, 5e-2, 2e-3),
                          "%s%sbatch %lld: d loss / d %s[%lld]: autodiff %.6g, finite differences %.6g", what ? what : "",
                          what ? ", " : "", (long long)batch, w.names[v], (long long)k, analytic, numeric);
            checked++;
        }
    }
    ck_assert_int_gt(checked, 0);
    weights_free(&before);
    weights_free(&w);
    free_feeds(tg, feeds);
    graph_free(tg);
    graph_free(ig);
    compiled_free_all(&c);
}

static void gradcheck(const char *text, int64_t batch, int32_t classes) { gradcheck_case(NULL, text, batch, classes, false); }

START_TEST(grad_dense)
{
    gradcheck("input x: f32[B, 6]\ninput y: i32[B]\n"
              "h = tanh(dense(x, units=5))\nh = sigmoid(dense(h, units=4)) * 2 - 0.5\n"
              "logits = dense(h, units=3)\nloss = cross_entropy(logits, y)\n"
              "train { data = synthetic(count=8)\nminimize = loss }\n", 4, 3);
}
END_TEST

START_TEST(grad_conv_pool)
{
    gradcheck("input x: f32[B, 7, 6, 2]\ninput y: i32[B]\n"
              "h = tanh(conv2d(x, filters=3, kernel=3, stride=2, padding=\"same\"))\n"
              "h = maxpool(h, size=2, stride=1, padding=\"same\")\n"
              "g = tanh(conv2d(x, filters=2, kernel=2))\n"
              "g = avgpool(g, size=3, stride=2, padding=\"same\")\n"
              "logits = dense(concat(flatten(h), flatten(g), axis=1), units=4)\n"
              "loss = cross_entropy(logits, y)\n"
              "train { data = synthetic(count=8)\nminimize = loss }\n", 3, 4);
}
END_TEST

START_TEST(grad_residual_broadcast)
{
    gradcheck("input x: f32[B, 5, 5, 3]\ninput t: f32[B, 3]\n"
              "param s: f32[3] = uniform(low=0.5, high=1.5)\n"
              "r = conv2d(x, filters=3, kernel=3, padding=\"same\")\n"
              "h = sigmoid(x + r * s)\n"
              "h = exp(h) / (1 + sqrt(h + 1)) - log(h + 2)\n"
              "p = global_avgpool(-h)\n"
              "q = softmax(dense(p, units=3)) + log_softmax(dense(p, units=3, name=\"other\"))\n"
              "loss = mse(q, t)\n"
              "train { data = synthetic(count=8)\nminimize = loss }\n", 2, 3);
}
END_TEST

START_TEST(grad_shared_param)
{
    gradcheck("input a: f32[B, 4]\ninput b: f32[B, 4]\ninput y: i32[B]\n"
              "param W: f32[4, 3] = glorot_uniform()\n"
              "u = tanh(matmul(a, W))\nv = tanh(matmul(b, W))\n"
              "h = dense(a, units=3, name=\"enc\") + dense(b, units=3, name=\"enc\")\n"
              "logits = u * v + h\n"
              "loss = cross_entropy(logits, y)\n"
              "train { data = synthetic(count=8)\nminimize = loss }\n", 3, 3);
}
END_TEST

START_TEST(grad_conv_only)
{
    gradcheck("input x: f32[B, 7, 6, 2]\ninput y: i32[B]\n"
              "h = tanh(conv2d(x, filters=3, kernel=3, stride=2, padding=\"same\"))\n"
              "logits = dense(flatten(h), units=4)\n"
              "loss = cross_entropy(logits, y)\n"
              "train { data = synthetic(count=8)\nminimize = loss }\n", 3, 4);
}
END_TEST

START_TEST(grad_conv_valid)
{
    gradcheck("input x: f32[B, 5, 5, 2]\ninput y: i32[B]\n"
              "h = tanh(conv2d(x, filters=3, kernel=3))\n"
              "logits = dense(flatten(h), units=4)\n"
              "loss = cross_entropy(logits, y)\n"
              "train { data = synthetic(count=8)\nminimize = loss }\n", 2, 4);
}
END_TEST

/* gelu, silu and leaky_relu (with its alpha): every parameter's gradient through them
 * at batch 1 and 4 (a gradient that reads x, kinks away from the data). */
START_TEST(grad_new_activations)
{
    static const char model[] =
        "input x: f32[B, 6]\ninput y: i32[B]\n"
        "h = gelu(dense(x, units=5))\nh = silu(dense(h, units=5) * 1.5 + 0.25)\n"
        "h = leaky_relu(dense(h, units=4), alpha=0.2)\n"
        "logits = dense(h, units=3, activation=\"leaky_relu\")\nloss = cross_entropy(logits, y)\n"
        "train { data = synthetic(count=8)\nminimize = loss }\n";
    gradcheck(model, 1, 3);
    gradcheck(model, 4, 3);
}
END_TEST

START_TEST(grad_relu_reshape)
{
    gradcheck("input x: f32[B, 4, 4, 1]\ninput y: i32[B]\n"
              "h = relu(conv2d(x, filters=4, kernel=3, padding=\"same\"))\n"
              "h = reshape(h, B, 8, 8)\n"
              "h = relu(dense(reshape(h, -1, 64), units=6))\n"
              "logits = dense(h, units=2)\n"
              "loss = cross_entropy(logits, y)\n"
              "train { data = synthetic(count=8)\nminimize = loss }\n", 3, 2);
}
END_TEST

/* ---- every op's gradient, on every axis it takes, with a symbolic batch ----------------- */

/* Each case routes parameters through one op on one axis (the batch B among them) to a
 * loss; every one runs at batch 1 and at batch 3 (gradcheck: against finite
 * differences).  The tail every case ends with: */
#define GT_TRAIN "train { data = synthetic(count=8)\nminimize = loss }\n"
static const struct GradCase {
    const char *what, *text;
    int32_t classes;      /* labels and ids in [0, classes) */
    bool through_step;    /* finite differences of the training step's loss (batch norm) */
} grad_cases[] = {
    { "concat axis 0 (the batch)",
      "input x: f32[B, 4]\ninput t: f32[B, 6]\n"
      "h = concat(tanh(dense(x, units=3)), sigmoid(dense(x, units=3, name=\"b\")), axis=0)\n"
      "loss = mse(reshape(h, B, 6), t)\n" GT_TRAIN, 3, false },
    { "concat axis 0 of B and 2*B (offsets in multiples of B)",
      "input x: f32[B, 4]\ninput t: f32[B, 9]\n"
      "a = tanh(dense(x, units=3))\nb = sigmoid(dense(x, units=3, name=\"b\"))\n"
      "h = concat(b, concat(a, b, axis=0), axis=0)\n"
      "loss = mse(reshape(h, B, 9), t)\n" GT_TRAIN, 3, false },
    { "concat axis 1 (-1)",
      "input x: f32[B, 4]\ninput t: f32[B, 5]\n"
      "h = concat(tanh(dense(x, units=3)), dense(x, units=2, name=\"b\"), axis=-1)\n"
      "loss = mse(h, t)\n" GT_TRAIN, 3, false },
    { "concat rank 4, axis 0",
      "input x: f32[B, 3, 2, 2]\ninput t: f32[B, 24]\nparam p: f32[3, 2, 2] = uniform(low=0.5, high=1.5)\n"
      "h = concat(x * p, tanh(x * p + 1), axis=0)\n"
      "loss = mse(reshape(h, B, 24), t)\n" GT_TRAIN, 3, false },
    { "concat rank 4, axis 1",
      "input x: f32[B, 3, 2, 2]\ninput t: f32[B, 24]\nparam p: f32[3, 2, 2] = uniform(low=0.5, high=1.5)\n"
      "h = concat(x * p, tanh(x * p + 1), axis=1)\n"
      "loss = mse(flatten(h), t)\n" GT_TRAIN, 3, false },
    { "concat rank 4, axis 2",
      "input x: f32[B, 3, 2, 2]\ninput t: f32[B, 24]\nparam p: f32[3, 2, 2] = uniform(low=0.5, high=1.5)\n"
      "h = concat(x * p, tanh(x * p + 1), axis=2)\n"
      "loss = mse(flatten(h), t)\n" GT_TRAIN, 3, false },
    { "concat rank 4, axis 3",
      "input x: f32[B, 3, 2, 2]\ninput t: f32[B, 24]\nparam p: f32[3, 2, 2] = uniform(low=0.5, high=1.5)\n"
      "h = concat(x * p, tanh(x * p + 1), axis=3)\n"
      "loss = mse(flatten(h), t)\n" GT_TRAIN, 3, false },
    { "softmax and log_softmax over the last axis, rank 2",
      "input x: f32[B, 4]\ninput y: i32[B]\n"
      "h = softmax(dense(x, units=4)) * log_softmax(dense(x, units=4, name=\"b\"))\n"
      "loss = cross_entropy(dense(h, units=3, name=\"c\"), y)\n" GT_TRAIN, 3, false },
    { "softmax and log_softmax over the last axis, rank 3",
      "input x: f32[B, 2, 3]\ninput t: f32[B, 2, 3]\nparam p: f32[2, 3] = uniform(low=0.5, high=1.5)\n"
      "loss = mse(softmax(x * p) + log_softmax(x * p * 2), t)\n" GT_TRAIN, 3, false },
    { "softmax and log_softmax over the batch (rank 1)",
      "input x: f32[B, 4]\ninput t: f32[B]\n"
      "h = reshape(dense(x, units=1), B)\n"
      "loss = mse(softmax(h) + log_softmax(h * 2), t)\n" GT_TRAIN, 3, false },
    { "reshape merging the batch into one axis, and moving it",
      "input x: f32[B, 4]\ninput t: f32[4, B]\nparam p: f32[4] = uniform(low=0.5, high=1.5)\n"
      "h = reshape(reshape(x * p, -1) * 2, 2, B, 2)\n"
      "loss = mse(reshape(tanh(h), 4, B), t)\n" GT_TRAIN, 3, false },
    { "broadcasting along the batch: add, sub, mul, div against [4], [1, 4] and [B, 1]",
      "input x: f32[B, 4]\ninput t: f32[B, 4]\n"
      "param p: f32[4] = uniform(low=0.5, high=1.5)\nparam q: f32[1, 4] = uniform(low=0.5, high=1.5)\n"
      "c = dense(x, units=1)\n"
      "h = (x + p) * q - c / (q + 1) + x / (p * q) - (c - p)\n"
      "loss = mse(h, t)\n" GT_TRAIN, 3, false },
    { "matmul contracting the batch",
      "input x: f32[B, 4]\ninput u: f32[3, B]\ninput t: f32[3, 5]\n"
      "loss = mse(matmul(u, tanh(dense(x, units=5))), t)\n" GT_TRAIN, 3, false },
    { "matmul and dense, the batch in the rows",
      "input x: f32[B, 4]\ninput y: i32[B]\nparam W: f32[4, 3] = glorot_uniform()\n"
      "loss = cross_entropy(matmul(x, W) + dense(x, units=3), y)\n" GT_TRAIN, 3, false },
    { "elementwise: neg, relu, sigmoid, tanh, exp, log, sqrt",
      "input x: f32[B, 4]\ninput t: f32[B, 4]\nparam p: f32[4] = uniform(low=0.5, high=1.5)\n"
      "h = x * p - 0.5\n"
      "loss = mse(-relu(h) + sigmoid(h) * tanh(h) + exp(h) / 4 + log(sigmoid(h) + 1) + sqrt(h * h + 1), t)\n" GT_TRAIN, 3, false },
    { "elementwise with parameters or without: gelu, silu, leaky_relu",
      "input x: f32[B, 4]\ninput t: f32[B, 4]\nparam p: f32[4] = uniform(low=0.5, high=1.5)\n"
      "h = x * p - 0.5\n"
      "loss = mse(gelu(h) + silu(h) * 0.5 + leaky_relu(h, alpha=0.2), t)\n" GT_TRAIN, 3, false },
    { "dropout at rate 0 (the identity: the inference graph drops it)",
      "input x: f32[B, 4]\ninput t: f32[B, 3]\n"
      "loss = mse(dropout(tanh(dense(x, units=3)), rate=0), t)\n" GT_TRAIN, 3, false },
    { "conv2d (layer, explicit filter, strides) over height and width",
      "input x: f32[B, 5, 6, 2]\ninput t: f32[B, 3, 3, 2]\nparam w: f32[2, 2, 2, 2] = glorot_uniform()\n"
      "h = conv2d(x, filters=2, kernel=3, padding=\"same\", stride=2) + conv2d(x, w, stride=2, padding=\"same\")\n"
      "loss = mse(h, t)\n" GT_TRAIN, 3, false },
    { "maxpool and avgpool, valid and same",
      "input x: f32[B, 5, 5, 2]\ninput t: f32[B, 2, 2, 2]\nparam p: f32[5, 5, 2] = uniform(low=0.5, high=1.5)\n"
      "h = x * p\n"
      "loss = mse(maxpool(h, size=2) + avgpool(h, size=3, stride=3, padding=\"same\"), t)\n" GT_TRAIN, 3, false },
    { "global_avgpool over height and width",
      "input x: f32[B, 3, 4, 2]\ninput t: f32[B, 2]\nparam p: f32[3, 4, 2] = uniform(low=0.5, high=1.5)\n"
      "loss = mse(global_avgpool(tanh(x * p)), t)\n" GT_TRAIN, 3, false },
    { "mse over rank 1 and rank 3",
      "input x: f32[B, 2, 3]\ninput t: f32[B, 2, 3]\ninput s: f32[B]\nparam p: f32[2, 3] = uniform(low=0.5, high=1.5)\n"
      "loss = mse(x * p, t) + mse(reshape(dense(flatten(x), units=1), B), s)\n" GT_TRAIN, 3, false },
    /* the transformer ops (issue 14) */
    { "transpose (every permutation kind), slice, split, indexing with a dropped axis, concat along a middle axis",
      "input x: f32[B, 4, 6]\ninput y: i32[B]\n"
      "param W: f32[4, 6] = uniform(low=-1, high=1)\n"
      "h = tanh(x * W)\n"
      "q, k, v = split(h, 3, axis=-1)\n"
      "t = transpose(q, perm=[0, 2, 1]) * 2 + permute(k, 0, 2, 1)\n"
      "u = transpose(permute(v, 2, 0, 1), perm=[1, 2, 0]) + slice(h, axis=2, start=1, end=5)[:, :, -2:]\n"
      "w = concat(u, h[:, 0:2, 2:4], axis=1) * reshape(h[:, 3, 0:3][:, 1:], B, 1, 2)\n"
      "r = permute(reshape(h, B, 2, 2, 6), 0, 2, 3, 1)\n"
      "z = dense(reshape(w, B, -1), units=3) + dense(reshape(t, B, -1), units=3) + dense(reshape(r, B, -1), units=3)\n"
      "z = z + dense(reshape(h[:, :, 0:3] * h[:, :, 2:5], B, -1), units=3)\n"
      "loss = cross_entropy(z, y)\n" GT_TRAIN, 3, false },
    { "batch_matmul with each pair of transpose flags, over two batch axes",
      "input x: f32[B, 2, 3, 4]\ninput y: i32[B]\n"
      "param P: f32[2, 3, 4] = uniform(low=-1, high=1)\n"
      "a = tanh(x + P)\nb = sigmoid(x * P)\n"
      "c = batch_matmul(a, b, transpose_b=true)\n"
      "d = batch_matmul(a, b, transpose_a=true)\n"
      "e = batch_matmul(c, a)\n"
      "f = batch_matmul(d, a, transpose_a=true, transpose_b=true)\n"
      "z = dense(reshape(e, B, -1), units=3) + dense(reshape(f, B, -1), units=3)\n"
      "loss = cross_entropy(z, y)\n" GT_TRAIN, 3, false },
    { "sum, mean and max over each axis (the batch too), a run of axes, all; softmax and log_softmax along each axis",
      "input x: f32[B, 3, 4]\ninput t: f32[B, 3]\n"
      "param P: f32[3, 4] = uniform(low=-1, high=1)\n"
      "h = tanh(x + P) * 2\n"
      "a = sum(h, axis=0) + mean(h, axis=1, keepdims=true) + max(h, axis=2, keepdims=true)\n"
      "b = max(h, axis=[0, 1]) + sum(h, axis=[1, 2], keepdims=true) + mean(h) + max(h)\n"
      "c = softmax(h, axis=0) + log_softmax(h, axis=1) + softmax(h, axis=-1) + log_softmax(h)\n"
      "d = max(c * a + b, axis=2) + mean(a, axis=-1)\n"
      "loss = mse(d, t)\n" GT_TRAIN, 3, false },
    { "pow, max, min, clip, softplus, gelu (tanh), where, causal_mask, binary cross entropy",
      "input x: f32[B, 4, 4]\ninput t: f32[B, 4, 4]\n"
      "param P: f32[4, 4] = uniform(low=-1, high=1)\n"
      "param Q: f32[4] = uniform(low=0.5, high=1.5)\n"
      "h = x * 2 - 1 + P\n"
      "a = pow(sigmoid(h) + 0.5, Q) + max(h, P * 0.5) - min(h, 0.25) + clip(h, min=-0.6, max=0.4)\n"
      "b = softplus(h) * gelu(h, approximate=\"tanh\") + where(greater(P, 0), h, a) + where(less(x, 0.5), 1, h)\n"
      "c = softmax(causal_mask(a + b), axis=-1) + causal_mask(b, value=0)\n"
      "loss = binary_cross_entropy(c, t)\n" GT_TRAIN, 3, false },
    { "embedding (ids repeat: its rows' sums), learned positions, layer_norm over one and two axes, cross entropy per token with label smoothing",
      "input ids: i32[B, 5]\ninput y: i32[B, 5]\n"
      "param pos: f32[5, 6] = uniform(low=-0.5, high=0.5)\n"
      "h = embedding(ids, vocab=4, dim=6) * 4 + pos\n"
      "h = layer_norm(h, eps=1e-5)\n"
      "g = layer_norm(reshape(h, B, 5, 2, 3), axis=[-2, -1])\n"
      "h = h + reshape(g, B, 5, 6) * h\n"
      "loss = cross_entropy(dense(h, units=4), y, label_smoothing=0.1)\n" GT_TRAIN, 4, false },
    { "multi_head_attention, causal and not, through its parameters and the input",
      "input ids: i32[B, 4]\ninput y: i32[B, 4]\n"
      "h = embedding(ids, vocab=3, dim=8) * 3\n"
      "a = multi_head_attention(h, heads=2, causal=true)\n"
      "b = multi_head_attention(h + a, heads=4, dim=3)\n"
      "loss = cross_entropy(dense(h + a + b, units=3), y)\n" GT_TRAIN, 3, false },
    /* batch norm (its training form) on every axis it takes: NHWC images, [B, F] and
     * [B, T, F]; against the training step's own loss (the inference graph normalizes
     * with the running statistics).  At batch 1 the [B, F] one has a single value per
     * feature: its output is beta. */
    { "batch_norm on images, [B, F] and [B, T, F]",
      "input x: f32[B, 5, 4, 3]\ninput y: i32[B]\n"
      "h = tanh(batch_norm(conv2d(x, filters=4, kernel=3, padding=\"same\"), momentum=0.9))\n"
      "t = batch_norm(reshape(h, B, 10, 8), eps=0.01) * 0.5\n"
      "g = batch_norm(dense(flatten(t), units=5))\n"
      "logits = dense(sigmoid(g), units=3) + dense(flatten(h), units=3, name=\"skip\")\n"
      "loss = cross_entropy(logits, y)\n" GT_TRAIN, 3, true },
};

START_TEST(grad_table)
{
    const struct GradCase *gc = &grad_cases[_i / 2];
    gradcheck_case(gc->what, gc->text, _i % 2 ? 3 : 1, gc->classes, gc->through_step);
}
END_TEST

/* The table covers every op a .net file can differentiate, and concat on every axis. */
START_TEST(grad_table_covers_every_op)
{
    bool seen[OP_COUNT] = { false }, concat_axis[4] = { false };
    for (size_t k = 0; k < sizeof grad_cases / sizeof *grad_cases; k++) {
        Compiled c;
        compile_str(&c, grad_cases[k].text);
        for (int i = 0; i < c.g->nnodes; i++) {
            const Node *n = &c.g->nodes[i];
            seen[n->op] = true;
            if (n->op == OP_CONCAT && n->shape.rank == 4) concat_axis[n->a.concat.axis] = true;
        }
        compiled_free_all(&c);
    }
    for (int op = 0; op < OP_COUNT; op++)
        if (autodiff_has_rule((OpKind)op) && op != OP_INPUT && op != OP_PARAM && op != OP_CONST && op != OP_ACCURACY)
            ck_assert_msg(seen[op], "no gradient case uses %s", op_name((OpKind)op));
    for (int a = 0; a < 4; a++) ck_assert_msg(concat_axis[a], "no gradient case concatenates rank 4 along axis %d", a);
}
END_TEST

/* a, b, c = split(x, 3): the parts' gradients are one slice_grad of three pieces (a
 * copy of each side by side), not a sum of zero-padded copies */
START_TEST(split_gradient_one_op)
{
    Compiled c;
    compile_str(&c, "input x: f32[B, 6]\ninput y: i32[B]\n"
                    "h = dense(x, units=9)\n"
                    "q, k, v = split(h, 3)\n"
                    "loss = cross_entropy(q * k + v, y)\n"
                    "train { data = synthetic(count=8)\nminimize = loss }\n");
    Graph *tg = pass_autodiff(c.g, &c.d);
    ck_assert_ptr_nonnull(tg);
    int pieces = 0, grads = 0;
    for (int i = 0; i < tg->nnodes; i++)
        if (tg->nodes[i].op == OP_SLICE_GRAD) {
            grads++;
            pieces = tg->nodes[i].nin;
            ck_assert_int_eq(tg->nodes[i].a.pieces.n, 3);
            for (int k = 0; k < 3; k++) ck_assert_int_eq(tg->nodes[i].a.pieces.off[k], 3 * k);
        }
    ck_assert_int_eq(grads, 1);
    ck_assert_int_eq(pieces, 3);
    graph_free(tg);
    compiled_free_all(&c);
}
END_TEST

/* The op table's companions: every op has a shape rule and a kernel, and every op a
 * .net file can use has a gradient rule. */
START_TEST(op_tables_complete)
{
    for (int op = 0; op < OP_COUNT; op++) {
        ck_assert_msg(graph_has_shape_rule((OpKind)op), "%s has no shape rule", op_name((OpKind)op));
        ck_assert_msg(dispatch_has_kernel((OpKind)op), "%s has no kernel", op_name((OpKind)op));
        if (!(op_info[op].traits & OPT_INTERNAL))
            ck_assert_msg(autodiff_has_rule((OpKind)op), "%s has no gradient rule", op_name((OpKind)op));
    }
}
END_TEST

/* Parameters not on a path to the loss get no gradient and no update. */
START_TEST(unreachable_params)
{
    Compiled c;
    compile_str(&c, "input x: f32[B, 3]\ninput y: i32[B]\n"
                    "side = dense(x, units=2, name=\"side\")\noutput side\n"
                    "loss = cross_entropy(dense(x, units=2), y)\n"
                    "train { data = synthetic(count=8)\nminimize = loss }\n");
    Graph *tg = pass_autodiff(c.g, &c.d);
    ck_assert_ptr_nonnull(tg);
    int updates = 0;
    for (int i = 0; i < tg->nnodes; i++)
        if (op_info[tg->nodes[i].op].traits & OPT_UPDATE) {
            updates++;
            ck_assert_msg(strncmp(tg->vars[tg->nodes[i].a.update.var].name, "side", 4) != 0, "'side' was updated");
        }
    ck_assert_int_eq(updates, 2);
    graph_free(tg);
    compiled_free_all(&c);
}
END_TEST

static Suite *make_autodiff_suite(void)
{
    Suite *s = suite_create("autodiff");
    TCase *tc = tcase_create("gradients");
    tcase_add_test(tc, grad_dense);
    tcase_add_test(tc, grad_conv_pool);
    tcase_add_test(tc, grad_residual_broadcast);
    tcase_add_test(tc, grad_shared_param);
    tcase_add_test(tc, grad_relu_reshape);
    tcase_add_test(tc, grad_new_activations);
    tcase_add_test(tc, grad_conv_only);
    tcase_add_test(tc, grad_conv_valid);
    tcase_add_loop_test(tc, grad_table, 0, 2 * (int)(sizeof grad_cases / sizeof *grad_cases));
    tcase_add_test(tc, grad_table_covers_every_op);
    tcase_add_test(tc, split_gradient_one_op);
    tcase_add_test(tc, unreachable_params);
    tcase_add_test(tc, op_tables_complete);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(make_autodiff_suite()); }
