/* The graph verifier: the invariants every pass must keep.  Tests run it after every
 * pass; a violation is a bug in graphc, not in the user's model. */
#include <string.h>
#include "graph/graph.h"

static int bad(DiagSink *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(DiagSink *d, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (d) diag_plain(d, "verifier: %s", msg);
    else fprintf(stderr, "graphc: verifier: %s\n", msg);
    return 1;
}

int graph_verify(const Graph *g, DiagSink *d)
{
    int errs = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if ((unsigned)n->op >= OP_COUNT) { errs += bad(d, "node %d: op %d out of range", i, n->op); continue; }
        const OpInfo *oi = &op_info[n->op];
        if (oi->arity >= 0 && n->nin != oi->arity)
            errs += bad(d, "node %d (%s): %d inputs, the op takes %d", i, oi->name, n->nin, oi->arity);
        if (oi->arity < 0 && n->nin < 1) errs += bad(d, "node %d (%s): no inputs", i, oi->name);
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] < 0 || n->in[k] >= i)
                errs += bad(d, "node %d (%s): input %d is %d, not an earlier node", i, oi->name, k, n->in[k]);
        if (n->op == OP_PARAM && (n->a.param.var < 0 || n->a.param.var >= g->nvars))
            errs += bad(d, "node %d: param var %d out of range", i, n->a.param.var);
        if ((oi->traits & OPT_UPDATE) && n->op != OP_UPDATE_ALL && (n->a.update.var < 0 || n->a.update.var >= g->nvars))
            errs += bad(d, "node %d (%s): var %d out of range", i, oi->name, n->a.update.var);
        if (n->op == OP_UPDATE_ALL)
            for (int k = 0; k + 1 < n->nin; k += 2)
                if (g->nodes[n->in[k]].op != OP_PARAM) errs += bad(d, "node %d (update_all): input %d is not a param", i, k);
        if (n->fwd >= g->nnodes) errs += bad(d, "node %d: forward link %d out of range", i, n->fwd);
        if (n->shape.rank < 0 || n->shape.rank > MAX_RANK) errs += bad(d, "node %d: rank %d", i, n->shape.rank);
    }
    for (int i = 0; i < g->ninputs; i++)
        if (g->inputs[i] < 0 || g->inputs[i] >= g->nnodes || g->nodes[g->inputs[i]].op != OP_INPUT)
            errs += bad(d, "input %d is not an input node", i);
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i].node < 0 || g->outputs[i].node >= g->nnodes)
            errs += bad(d, "output '%s' refers to node %d", g->outputs[i].name, g->outputs[i].node);
    if (g->train.minimize >= g->nnodes) errs += bad(d, "minimize refers to node %d", g->train.minimize);
    if (errs) return errs;

    /* Shapes must be what a fresh inference says. */
    Graph *c = graph_clone(g);
    if (!c) return bad(d, "out of memory");
    DiagSink quiet;
    diag_init(&quiet, g->src);
    if (graph_infer_shapes(c, &quiet)) errs += bad(d, "shape inference fails on the graph: %s", quiet.buf ? quiet.buf : "");
    for (int i = 0; !errs && i < g->nnodes; i++) {
        if (!shape_eq(&c->nodes[i].shape, &g->nodes[i].shape) || c->nodes[i].dtype != g->nodes[i].dtype) {
            char b1[128], b2[128];
            errs += bad(d, "node %d (%s): shape %s, but inference gives %s", i, op_name(g->nodes[i].op),
                        shape_str(g, &g->nodes[i].shape, b1, sizeof b1), shape_str(c, &c->nodes[i].shape, b2, sizeof b2));
        }
    }
    diag_free(&quiet);
    graph_free(c);
    return errs;
}
