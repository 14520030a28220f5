/* Batch norm's kernels.  See dispatch_bnorm.h; the forms are graph/bnorm.c's. */
#include "exec/dispatch_bnorm.h"
#include "kernels/kern.h"

static const float *in_f(const KCall *c, int k) { return (const float *)c->in[k]; }

/* Input 0 of the node viewed as [rows, C], C its last axis (the channels). */
static void bn_dims(const KCall *c, size_t *rows, size_t *C)
{
    const Shape *s = &c->g->nodes[c->n->in[0]].shape;
    *C = (size_t)s->d[s->rank - 1].v;
    *rows = *C ? (size_t)shape_numel(s) / *C : 0;
}

size_t dispatch_bn_scratch(const Graph *g, const Node *n)
{
    switch (n->op) {
    case OP_BATCH_NORM_STATS: case OP_BATCH_NORM: case OP_BATCH_NORM_INFER: case OP_BATCH_NORM_GRAD_PARAMS:
    case OP_BATCH_NORM_GRAD: {
        const Shape *s = &g->nodes[n->in[0]].shape;
        return kern_bn_scratch((size_t)s->d[s->rank - 1].v);
    }
    default: return 0;
    }
}

int k_bn_stats(const KCall *c)
{
    size_t rows, C;
    bn_dims(c, &rows, &C);
    kern_bn_stats(c->pool, in_f(c, 0), rows, C, c->out, (double *)(void *)c->scratch);
    return 0;
}

/* batch_norm(x, stats, gamma, beta, ... [, residual]) with the batch's statistics, or
 * batch_norm_infer(x, gamma, beta, moving_mean, moving_variance) with the running ones */
int k_batch_norm(const KCall *c)
{
    size_t rows, C;
    bn_dims(c, &rows, &C);
    bool train = c->n->op == OP_BATCH_NORM;
    const float *gamma = in_f(c, train ? 2 : 1), *beta = in_f(c, train ? 3 : 2);
    const float *mean = train ? in_f(c, 1) : in_f(c, 3), *var = train ? in_f(c, 1) + C : in_f(c, 4);
    float *scale = c->scratch;
    kern_bn_scale(var, gamma, c->n->a.bn.eps, C, scale);
    EwAct act = c->n->a.bn.act >= 0 ? (EwAct){ op_info[c->n->a.bn.act].ew, c->n->a.bn.act_p } : EW_NO_ACT;
    const float *res = train && c->n->nin == 7 ? in_f(c, 6) : NULL;   /* pass bn_add */
    kern_bn_apply(c->pool, in_f(c, 0), res, rows, C, mean, scale, beta, act, c->out);
    return 0;
}

/* (x, stats, dy) -> [2, C]; with the batch norm's relu (pass bn_relu_grad),
 * (x, stats, dy, gamma, beta) */
int k_bn_grad_params(const KCall *c)
{
    size_t rows, C;
    bn_dims(c, &rows, &C);
    BnRelu relu = c->n->a.bn.act == OP_RELU ? (BnRelu){ in_f(c, 3), in_f(c, 4) } : BN_NO_RELU;
    kern_bn_grad_params(c->pool, in_f(c, 0), in_f(c, 2), rows, C, in_f(c, 1), c->n->a.bn.eps, relu, c->out,
                        (double *)(void *)c->scratch);
    return 0;
}

/* (dy, x, stats, gamma, d) -> dx; with the batch norm's relu, (dy, x, stats, gamma, d,
 * beta) */
int k_bn_grad(const KCall *c)
{
    size_t rows, C;
    bn_dims(c, &rows, &C);
    BnRelu relu = c->n->a.bn.act == OP_RELU ? (BnRelu){ in_f(c, 3), in_f(c, 5) } : BN_NO_RELU;
    kern_bn_grad_input(c->pool, in_f(c, 0), in_f(c, 1), rows, C, in_f(c, 2), in_f(c, 3), in_f(c, 4), c->n->a.bn.eps,
                       relu, c->out, c->scratch);
    return 0;
}

/* (moving_mean, stats): the running statistics in place */
int k_bn_update(const KCall *c)
{
    const Node *n = c->n;
    const Shape *st = &c->g->nodes[n->in[1]].shape;
    if (n->a.update.count < 1) {
        diag_plain(c->env->d, "internal error: batch_norm_update of '%s' before the batch is bound",
                   c->g->vars[n->a.update.var].name);
        return -1;
    }
    kern_bn_update(c->env->w->data[n->a.update.var], c->env->w->data[n->a.update.state[0]], in_f(c, 1),
                   (size_t)st->d[1].v, n->a.update.momentum, n->a.update.count);
    ((float *)c->out)[0] = 0;
    return 0;
}
