/* The op-by-op interpreter.  See exec.h.
 *
 * This is the honest eager engine: the same kernels as the compiled plan, with the
 * work an eager framework does per op and nothing more: a shape check with the op's
 * rule, an allocation for the result, a dispatch through the op table, and a free
 * when the last consumer is done.  Reshape is a view: it shares its input's buffer. */
#include <string.h>
#include "exec/exec.h"

/* The interpreter's state during one step: each node's buffer and run-time shape, and
 * what an eager engine counts to free a buffer after its last use. */
typedef struct Interp {
    const Graph *g;
    const StepEnv *env;
    Pool *pool;
    InterpStats *st;
    void **data;
    int32_t *base;      /* node whose allocation data[i] lives in (a reshape: its input's) */
    int32_t *pending;   /* uses left of an allocation, over its views */
    int32_t *uses;
    Shape *rt;          /* shapes as produced at run time */
    bool *owned;
    const Shape **ins;  /* the node being run's input shapes and buffers, as many as */
    const void **in;    /* the widest node has inputs (update_all: two or more a parameter) */
} Interp;

static void interp_free(Interp *I)
{
    if (I->data && I->owned)
        for (int i = 0; i < I->g->nnodes; i++)
            if (I->owned[i]) gc_free(I->data[i]);
    if (I->st) I->st->live_bytes = 0;
    gc_free(I->data);
    gc_free(I->base);
    gc_free(I->pending);
    gc_free(I->uses);
    gc_free(I->rt);
    gc_free(I->owned);
    gc_free(I->ins);
    gc_free(I->in);
}

static int interp_init(Interp *I, const Graph *g, const StepEnv *env, Pool *pool, InterpStats *st)
{
    size_t nz = (size_t)(g->nnodes ? g->nnodes : 1), wide = 1;
    for (int i = 0; i < g->nnodes; i++)
        if ((size_t)g->nodes[i].nin > wide) wide = (size_t)g->nodes[i].nin;
    *I = (Interp){ g, env, pool, st, gc_calloc(nz, sizeof(void *)), gc_calloc(nz, sizeof(int32_t)),
                   gc_calloc(nz, sizeof(int32_t)), gc_calloc(nz, sizeof(int32_t)), gc_calloc(nz, sizeof(Shape)),
                   gc_calloc(nz, sizeof(bool)), gc_calloc(wide, sizeof(Shape *)), gc_calloc(wide, sizeof(void *)) };
    if (!I->data || !I->base || !I->pending || !I->uses || !I->rt || !I->owned || !I->ins || !I->in) {
        diag_plain(env->d, "out of memory");
        return -1;
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) I->uses[g->nodes[i].in[k]]++;
    for (int i = 0; i < g->noutputs; i++) I->uses[g->outputs[i].node]++;
    return 0;
}

/* Node i's result in a fresh allocation (with scratch of its own for the call): the
 * dispatch of an eager engine.  0 or -1. */
static int interp_call(Interp *I, int i, const void *const *in)
{
    const Node *n = &I->g->nodes[i];
    InterpStats *st = I->st;
    size_t bytes = (size_t)shape_numel(&I->rt[i]) * 4;
    size_t scratch = dispatch_scratch_bytes(I->g, n, pool_threads(I->pool));
    /* aligned as PyTorch's CPU allocator aligns, and as the compiled plan's arena; like
     * PyTorch 1.13's, in pages without huge-page advice (util/mem.c) */
    I->data[i] = gc_malloc_aligned(bytes, 64);
    float *sc = scratch ? gc_malloc_aligned(scratch, 64) : NULL;
    if (!I->data[i] || (scratch && !sc)) {
        gc_free(sc);
        diag_plain(I->env->d, "out of memory: %s needs %zu bytes", op_name(n->op), bytes + scratch);
        return -1;
    }
    I->owned[i] = true;
    if (st) {
        st->allocs += 1 + (scratch > 0);
        st->alloc_bytes += (int64_t)(bytes + scratch);
        st->live_bytes += bytes;
        if (st->live_bytes + scratch > st->peak_bytes) st->peak_bytes = st->live_bytes + scratch;
    }
    KCall c = { I->g, n, in, I->data[i], sc, I->pool, I->env, NULL };   /* no pack: weights as stored */
    int rc = dispatch_run(&c);
    gc_free(sc);
    return rc;
}

/* Allocation b is read by nobody any more: freed. */
static void interp_release(Interp *I, int32_t b)
{
    if (I->pending[b] != 0 || !I->owned[b]) return;
    if (I->st) I->st->live_bytes -= (size_t)shape_numel(&I->rt[b]) * 4;
    gc_free(I->data[b]);
    I->owned[b] = false;
}

/* Node i: its shape checked on the actual input shapes, then its buffer (a feed, a
 * weight, a view or a fresh allocation), then the inputs it was the last reader of
 * freed.  0 or -1. */
static int interp_node(Interp *I, int i, const void *const *feeds)
{
    const Node *n = &I->g->nodes[i];
    const Shape **ins = I->ins;
    const void **in = I->in;
    for (int k = 0; k < n->nin; k++) {
        ins[k] = &I->rt[n->in[k]];
        in[k] = I->data[n->in[k]];
    }
    I->base[i] = i;
    if (n->op == OP_INPUT || n->op == OP_PARAM) {
        I->rt[i] = n->shape;
        I->data[i] = n->op == OP_INPUT ? (void *)feeds[n->a.input.index] : I->env->w->data[n->a.param.var];
    } else {
        /* run-time shape check, as eager frameworks do on every op */
        if (!shape_check_runtime(I->g, i, ins, &I->rt[i], I->env->d)) return -1;
        if (n->op == OP_RESHAPE) {
            I->data[i] = (void *)in[0];
            I->base[i] = I->base[n->in[0]];
        } else if (interp_call(I, i, in) != 0) {
            return -1;
        }
    }
    I->pending[I->base[i]] += I->uses[i];
    for (int k = 0; k < n->nin; k++) {   /* each input used once more */
        int32_t b = I->base[n->in[k]];
        I->pending[b]--;
        interp_release(I, b);
    }
    interp_release(I, I->base[i]);   /* an unused result */
    return 0;
}

int interp_run(const Graph *g, const void *const *feeds, float *const *outs, const StepEnv *env, Pool *pool,
               InterpStats *st)
{
    Interp I;
    int rc = interp_init(&I, g, env, pool, st);
    for (int i = 0; i < g->nnodes && rc == 0; i++) rc = interp_node(&I, i, feeds);
    if (rc == 0)
        for (int i = 0; i < g->noutputs; i++) {
            int32_t o = g->outputs[i].node;
            if (outs[i]) memcpy(outs[i], I.data[o], (size_t)shape_numel(&I.rt[o]) * 4);
        }
    interp_free(&I);
    return rc;
}
