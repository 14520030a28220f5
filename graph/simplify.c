/* Common subexpression elimination and constant folding.
 *
 * CSE: two nodes with the same op, the same inputs and the same attributes compute the
 * same value; the later one is replaced by the earlier.  Sources other than constants,
 * updates (they write state) and dropout (each has its own mask stream, so its
 * attributes differ anyway) are never merged.
 *
 * Folding: an elementwise function whose inputs are all scalar constants becomes a
 * constant, computed with the kernels' own scalar math (util/elemwise.h). */
#include <math.h>
#include <string.h>
#include "graph/passes.h"

static bool same_node(const Node *a, const Node *b)
{
    if (a->op != b->op || a->nin != b->nin || a->dtype != b->dtype || !shape_eq(&a->shape, &b->shape)) return false;
    if (a->nin && memcmp(a->in, b->in, (size_t)a->nin * sizeof *a->in) != 0) return false;
    if (!shape_eq(&a->tshape, &b->tshape)) return false;
    return memcmp(&a->a, &b->a, sizeof a->a) == 0;
}

static bool mergeable(const Node *n)
{
    unsigned t = op_info[n->op].traits;
    if (n->op == OP_CONST) return true;
    return !(t & (OPT_SOURCE | OPT_UPDATE)) && n->op != OP_DROPOUT && n->op != OP_DROPOUT_GRAD;
}

Graph *pass_cse(const Graph *g, DiagSink *d)
{
    Graph *c = graph_clone(g);
    size_t nz = (size_t)(g->nnodes ? g->nnodes : 1);
    bool *keep = gc_calloc(nz, sizeof *keep);
    int32_t *alias = gc_calloc(nz, sizeof *alias);
    if (!c || !keep || !alias) {
        diag_plain(d, "out of memory");
        graph_free(c);
        gc_free(keep);
        gc_free(alias);
        return NULL;
    }
    for (int i = 0; i < c->nnodes; i++) {
        Node *n = &c->nodes[i];
        keep[i] = true;
        alias[i] = i;
        for (int k = 0; k < n->nin; k++) n->in[k] = alias[n->in[k]];   /* inputs already merged */
        if (!mergeable(n)) continue;
        /* quadratic, but graphs are hundreds of nodes; the match is on earlier nodes only */
        for (int j = 0; j < i; j++)
            if (keep[j] && same_node(&c->nodes[j], n)) {
                alias[i] = j;
                keep[i] = false;
                break;
            }
    }
    Graph *out = graph_rebuild(c, keep, alias, "cse", d);
    graph_free(c);
    gc_free(keep);
    gc_free(alias);
    return out;
}

/* The value of an elementwise function on scalars: util/elemwise.h's, which the kernels
 * run too, so the folded constant has the kernel's bits. */
static bool fold_value(const Node *n, const float *v, float *out)
{
    const OpInfo *info = &op_info[n->op];
    if (info->ew < 0) return false;
    *out = info->traits & OPT_BINARY ? ew_binary((EwBinary)info->ew, v[0], v[1])
                                     : ew_unary((EwUnary)info->ew, v[0], n->a.unary.p);
    return true;
}

Graph *pass_fold(const Graph *g, DiagSink *d)
{
    Graph *c = graph_clone(g);
    if (!c) { diag_plain(d, "out of memory"); return NULL; }
    for (int i = 0; i < c->nnodes; i++) {
        Node *n = &c->nodes[i];
        if (op_info[n->op].ew < 0 || n->shape.rank != 0) continue;
        float v[2];
        bool all_const = true;
        for (int k = 0; k < n->nin; k++) {
            const Node *in = &c->nodes[n->in[k]];
            if (in->op != OP_CONST) { all_const = false; break; }
            v[k] = in->a.cnst.value;
        }
        float y;
        if (!all_const || !fold_value(n, v, &y)) continue;
        /* the node becomes a constant; its inputs are left for DCE */
        n->op = OP_CONST;
        n->nin = 0;
        n->in = NULL;
        memset(&n->a, 0, sizeof n->a);
        n->a.cnst.value = y;
    }
    c->stage = "folded";
    Graph *out = pass_dce(c, d);
    graph_free(c);
    if (out) out->stage = "folded";
    return out;
}
