/* The op-by-op interpreter.  See exec.h.
 *
 * This is the honest eager engine: the same kernels as the compiled plan, with the
 * work an eager framework does per op and nothing more: a shape check with the op's
 * rule, an allocation for the result, a dispatch through the op table, and a free
 * when the last consumer is done.  Reshape is a view: it shares its input's buffer. */
#include <string.h>
#include "exec/exec.h"

int interp_run(const Graph *g, const void *const *feeds, float *const *outs, const StepEnv *env, Pool *pool,
               InterpStats *st)
{
    int nn = g->nnodes, rc = 0;
    size_t nz = (size_t)(nn ? nn : 1);
    void **data = gc_calloc(nz, sizeof *data);
    int32_t *base = gc_calloc(nz, sizeof *base);      /* node whose allocation data[i] lives in */
    int32_t *pending = gc_calloc(nz, sizeof *pending); /* uses left of an allocation, over its views */
    int32_t *uses = gc_calloc(nz, sizeof *uses);
    Shape *rt = gc_calloc(nz, sizeof *rt);             /* shapes as produced at run time */
    bool *owned = gc_calloc(nz, sizeof *owned);
    if (!data || !base || !pending || !uses || !rt || !owned) {
        diag_plain(env->d, "out of memory");
        rc = -1;
        goto out;
    }
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) uses[g->nodes[i].in[k]]++;
    for (int i = 0; i < g->noutputs; i++) uses[g->outputs[i].node]++;

    for (int i = 0; i < nn && rc == 0; i++) {
        const Node *n = &g->nodes[i];
        const Shape *ins[64];
        const void *in[64];
        if (n->nin > 64) { diag_plain(env->d, "node %d: too many inputs", i); rc = -1; break; }
        for (int k = 0; k < n->nin; k++) {
            ins[k] = &rt[n->in[k]];
            in[k] = data[n->in[k]];
        }
        base[i] = i;
        if (n->op == OP_INPUT) {
            rt[i] = n->shape;
            data[i] = (void *)feeds[n->a.input.index];
        } else if (n->op == OP_PARAM) {
            rt[i] = n->shape;
            data[i] = env->w->data[n->a.param.var];
        } else {
            /* run-time shape check, as eager frameworks do on every op */
            if (!shape_check_runtime(g, i, ins, &rt[i], env->d)) { rc = -1; break; }
            if (n->op == OP_RESHAPE) {
                data[i] = (void *)in[0];
                base[i] = base[n->in[0]];
            } else {
                size_t bytes = (size_t)shape_numel(&rt[i]) * 4;
                size_t scratch = dispatch_scratch_bytes(g, n, pool_threads(pool));
                data[i] = gc_malloc(bytes);
                float *sc = scratch ? gc_malloc(scratch) : NULL;
                if (!data[i] || (scratch && !sc)) {
                    gc_free(sc);
                    diag_plain(env->d, "out of memory: %s needs %zu bytes", op_name(n->op), bytes + scratch);
                    rc = -1;
                    break;
                }
                owned[i] = true;
                if (st) {
                    st->allocs += 1 + (scratch > 0);
                    st->alloc_bytes += (int64_t)(bytes + scratch);
                    st->live_bytes += bytes;
                    if (st->live_bytes + scratch > st->peak_bytes) st->peak_bytes = st->live_bytes + scratch;
                }
                KCall c = { g, n, in, data[i], sc, pool, env };
                rc = dispatch_run(&c);
                gc_free(sc);
            }
        }
        pending[base[i]] += uses[i];
        /* each input used once more: free allocations nobody will read again */
        for (int k = 0; k < n->nin; k++) {
            int32_t b = base[n->in[k]];
            if (--pending[b] == 0 && owned[b]) {
                if (st) st->live_bytes -= (size_t)shape_numel(&rt[b]) * 4;
                gc_free(data[b]);
                owned[b] = false;
            }
        }
        if (pending[base[i]] == 0 && owned[base[i]]) {   /* an unused result */
            if (st) st->live_bytes -= (size_t)shape_numel(&rt[i]) * 4;
            gc_free(data[i]);
            owned[i] = false;
        }
    }
    if (rc == 0)
        for (int i = 0; i < g->noutputs; i++) {
            int32_t o = g->outputs[i].node;
            if (outs[i]) memcpy(outs[i], data[o], (size_t)shape_numel(&rt[o]) * 4);
        }
out:
    if (data && owned)
        for (int i = 0; i < nn; i++)
            if (owned[i]) gc_free(data[i]);
    if (st) st->live_bytes = 0;
    gc_free(data);
    gc_free(base);
    gc_free(pending);
    gc_free(uses);
    gc_free(rt);
    gc_free(owned);
    return rc;
}
