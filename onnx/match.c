/* Whether two graphs compute the same thing (see onnx.h): nodes paired from the outputs
 * back, with a worklist rather than recursion (a long chain is as deep as it is long). */
#include <stdio.h>
#include <string.h>
#include "onnx/onnx.h"
#include "onnx/opmap.h"

static bool differ(char *why, size_t n, const Graph *a, int32_t ia, const char *what)
{
    const Node *x = &a->nodes[ia];
    snprintf(why, n, "%s %s (node %d%s%s): %s", x->name ? "value" : "a", x->name ? x->name : op_name(x->op), (int)ia,
             x->name ? ", " : "", x->name ? op_name(x->op) : "", what);
    return false;
}

static bool same_node(const Graph *a, const Weights *wa, int32_t ia, const Graph *b, const Weights *wb, int32_t ib, char *why, size_t n)
{
    const Node *x = &a->nodes[ia], *y = &b->nodes[ib];
    char s1[128], s2[128], msg[400];
    if (x->op != y->op) {
        snprintf(msg, sizeof msg, "is %s in one graph and %s in the other", op_name(x->op), op_name(y->op));
        return differ(why, n, a, ia, msg);
    }
    if (x->dtype != y->dtype || !shape_eq(&x->shape, &y->shape) || x->nin != y->nin) {
        snprintf(msg, sizeof msg, "is %s%s and %s%s", dtype_name(x->dtype), shape_str(a, &x->shape, s1, sizeof s1),
                 dtype_name(y->dtype), shape_str(b, &y->shape, s2, sizeof s2));
        return differ(why, n, a, ia, msg);
    }
    const OnnxOp *m = onnx_op_of(x->op);
    if (m && m->kind == OM_PARAM) {
        const Var *va = &a->vars[om_param_var(x)], *vb = &b->vars[om_param_var(y)];
        if (!shape_eq(&va->shape, &vb->shape)) return differ(why, n, a, ia, "params of different shapes");
        if (wa && wb && memcmp(wa->data[om_param_var(x)], wb->data[om_param_var(y)], (size_t)shape_numel(&va->shape) * sizeof(float)) != 0)
            return differ(why, n, a, ia, "params of different values");
        return true;
    }
    if (m && m->kind == OM_INPUT) return true;
    if (!om_same_attrs(x, y)) return differ(why, n, a, ia, "different attributes");
    return true;
}

bool onnx_graphs_match(const Graph *a, const Weights *wa, const Graph *b, const Weights *wb, char *why, size_t n)
{
    if (a->noutputs != b->noutputs) {
        snprintf(why, n, "%d outputs and %d outputs", a->noutputs, b->noutputs);
        return false;
    }
    size_t na = (size_t)(a->nnodes ? a->nnodes : 1), nb = (size_t)(b->nnodes ? b->nnodes : 1);
    int32_t *pa = gc_malloc(na * sizeof *pa), *pb = gc_malloc(nb * sizeof *pb), *work = gc_malloc(na * sizeof *work);
    bool ok = pa && pb && work;
    if (!ok) snprintf(why, n, "out of memory");
    for (size_t i = 0; ok && i < na; i++) pa[i] = -1;
    for (size_t i = 0; ok && i < nb; i++) pb[i] = -1;
    int nw = 0;
    /* pairs (ia, ib) are made once each; a node paired twice must meet the same partner */
    for (int o = 0; ok && o < a->noutputs; o++) {
        int32_t ia = a->outputs[o].node, ib = b->outputs[o].node;
        if (pa[ia] < 0 && pb[ib] < 0) {
            pa[ia] = ib;
            pb[ib] = ia;
            work[nw++] = ia;
        } else if (pa[ia] != ib) {
            ok = differ(why, n, a, ia, "is output where the other graph outputs another value");
        }
    }
    while (ok && nw > 0) {
        int32_t ia = work[--nw], ib = pa[ia];
        ok = same_node(a, wa, ia, b, wb, ib, why, n);
        for (int k = 0; ok && k < a->nodes[ia].nin; k++) {
            int32_t xa = a->nodes[ia].in[k], xb = b->nodes[ib].in[k];
            if (pa[xa] < 0 && pb[xb] < 0) {
                pa[xa] = xb;
                pb[xb] = xa;
                work[nw++] = xa;
            } else if (pa[xa] != xb) {
                char msg[64];
                snprintf(msg, sizeof msg, "input %d is another value in the other graph", k);
                ok = differ(why, n, a, ia, msg);
            }
        }
    }
    gc_free(pa);
    gc_free(pb);
    gc_free(work);
    return ok;
}
