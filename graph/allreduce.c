/* pass_allreduce: the training step of one rank of a data-parallel job.  See
 * passes.h and docs/distributed.md.
 *
 * For each bucket b of gradients g1..gk (in the order the backward pass makes them):
 *
 *   ab  = allreduce(g1, ..., gk)       after gk: packs them into f32[n1+...+nk] and
 *                                      starts their sum over the ranks
 *   wb  = allreduce_wait(ab)           just before the updates: the sum / ranks
 *   gi' = reshape(slice(wb, off_i, n_i), shape of gi)   what update i reads
 *
 * Every buffer is an ordinary node, so the memory planner places the buckets in the
 * arena like any other value (a bucket lives from its allreduce to its wait, and the
 * wait works in place).  A clip_scale (clipping by global norm) reads the gi' too, the
 * mean gradients, and comes with the updates after them. */
#include <stdlib.h>
#include <string.h>
#include "graph/passes.h"

typedef struct Grad {
    int32_t update, grad;
} Grad;

static int by_grad(const void *a, const void *b)
{
    const Grad *x = a, *y = b;
    return (x->grad > y->grad) - (x->grad < y->grad);
}

Graph *pass_allreduce(const Graph *g, int64_t bucket_bytes, DiagSink *d)
{
    Graph *c = graph_clone(g);
    Grad *gr = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *gr);
    int32_t *first = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *first);   /* bucket -> first index into gr */
    int32_t *ar = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *ar);         /* bucket -> its allreduce node */
    int32_t *after = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *after);   /* node -> bucket to start after it, or -1 */
    bool *is_update = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *is_update);
    int32_t *order = NULL, *tail = NULL;
    Graph *out = NULL;
    if (!c || !gr || !first || !ar || !after || !is_update) { diag_plain(d, "out of memory"); goto done; }
    int ng = 0, n0 = g->nnodes, clip = -1;
    for (int i = 0; i < n0; i++) {
        const Node *n = &g->nodes[i];
        after[i] = -1;
        if (n->op == OP_CLIP_SCALE) is_update[i] = true, clip = i;   /* placed with the updates */
        if (!(op_info[n->op].traits & OPT_UPDATE)) continue;
        if (n->op == OP_UPDATE_ALL || n->op == OP_MATMUL_UPDATE || n->op == OP_MATMUL_GRAD_UPDATE) {
            diag_plain(d, "internal error: pass_allreduce runs before fusion");
            goto done;
        }
        is_update[i] = true;
        gr[ng++] = (Grad){ i, n->in[1] };
    }
    qsort(gr, (size_t)ng, sizeof *gr, by_grad);
    /* buckets, closed when they reach bucket_bytes */
    int nb = 0;
    int64_t bytes = 0;
    for (int j = 0; j < ng; j++) {
        if (bytes == 0) first[nb] = j;
        bytes += shape_numel(&g->nodes[gr[j].grad].shape) * 4;
        if (bytes >= bucket_bytes || j == ng - 1) {
            after[gr[j].grad] = nb++;
            bytes = 0;
        }
    }
    first[nb] = ng;
    /* the new nodes, appended (graph_reorder puts them in place) */
    int ntail = 0;
    tail = gc_calloc((size_t)(3 * ng + 2 * nb + 1), sizeof *tail);
    order = gc_calloc((size_t)(n0 + 3 * ng + 2 * nb + 1), sizeof *order);
    if (!tail || !order) { diag_plain(d, "out of memory"); goto done; }
    for (int b = 0; b < nb; b++) {
        int k = first[b + 1] - first[b];
        int32_t *in = gc_calloc((size_t)k, sizeof *in);
        if (!in) { diag_plain(d, "out of memory"); goto done; }
        for (int j = 0; j < k; j++) in[j] = gr[first[b] + j].grad;
        NodeAttr a = { .allreduce = { b } };
        Loc loc = g->nodes[in[k - 1]].loc;
        ar[b] = graph_add_inferred(c, OP_ALLREDUCE, in, k, loc, &a, NULL, d);
        gc_free(in);
        if (ar[b] < 0) goto done;
        int32_t w = graph_add_inferred(c, OP_ALLREDUCE_WAIT, &ar[b], 1, loc, &a, NULL, d);
        if (w < 0) goto done;
        tail[ntail++] = w;
        int64_t off = 0;
        for (int j = first[b]; j < first[b + 1]; j++) {
            const Node *gn = &c->nodes[gr[j].grad];
            Shape gs = gn->shape;
            Loc gl = c->nodes[gr[j].update].loc;
            int64_t len = shape_numel(&gs);
            NodeAttr sa = { .slice = { 0, off, len } };
            int32_t s = graph_add_inferred(c, OP_SLICE, &w, 1, gl, &sa, NULL, d);
            int32_t r = s < 0 ? -1 : graph_add_inferred(c, OP_RESHAPE, &s, 1, gl, NULL, &gs, d);
            if (r < 0) goto done;
            tail[ntail++] = s;
            tail[ntail++] = r;
            c->nodes[gr[j].update].in[1] = r;
            for (int q = 0; clip >= 0 && q < c->nodes[clip].nin; q++)
                if (c->nodes[clip].in[q] == gr[j].grad) c->nodes[clip].in[q] = r;
            off += len;
        }
    }
    /* the order: the step as it was with each allreduce right after its bucket's last
     * gradient; then the waits and unpacking; then the updates */
    int no = 0;
    for (int i = 0; i < n0; i++) {
        if (is_update[i]) continue;
        order[no++] = i;
        if (after[i] >= 0) order[no++] = ar[after[i]];
    }
    for (int j = 0; j < ntail; j++) order[no++] = tail[j];
    for (int i = 0; i < n0; i++)
        if (is_update[i]) order[no++] = i;
    out = graph_reorder(c, order, no, g->stage, d);
done:
    graph_free(c);
    gc_free(gr);
    gc_free(first);
    gc_free(ar);
    gc_free(after);
    gc_free(is_update);
    gc_free(tail);
    gc_free(order);
    return out;
}
