/* The compiled executor.  See compiled.h; the memory plan is memplan.c's. */
#include <stdlib.h>
#include <string.h>
#include "exec/compiled.h"

/* ---- the plan ------------------------------------------------------------------------- */

typedef struct FeedSlot {
    int call;      /* index into calls */
    int arg;       /* which input of that call */
    int input;     /* which feed */
} FeedSlot;

struct CompiledPlan {
    const Graph *g;          /* the graph executed (the caller's, after the compiler's passes) */
    Pool *pool;              /* its threads: the scratch is sized for them */
    MemPlan mp;
    unsigned char *arena;
    KCall *calls;
    int ncalls;
    int *stage_call;         /* stage s runs calls [stage_call[s], stage_call[s + 1]) */
    int *call_bin;           /* in a stage of several calls: the thread that runs each */
    int nstages;
    const void **args;       /* every call's input pointers, back to back */
    FeedSlot *feeds;
    int nfeeds;
    void **out_ptr;          /* data of each graph output */
    size_t *out_bytes;
};

/* The node whose buffer a value is: itself, or what a chain of reshapes views. */
static int32_t base_of(const Graph *g, int32_t id)
{
    while (g->nodes[id].op == OP_RESHAPE) id = g->nodes[id].in[0];
    return id;
}

static void *node_data(CompiledPlan *p, Weights *w, int32_t id)
{
    while (p->g->nodes[id].op == OP_RESHAPE) id = p->g->nodes[id].in[0];   /* a view */
    const Node *n = &p->g->nodes[id];
    if (n->op == OP_PARAM) return w->data[n->a.param.var];
    if (n->op == OP_INPUT) return NULL;   /* patched per run */
    return p->arena + p->mp.offset[id];
}

CompiledPlan *compiled_plan(const Graph *g, Weights *w, Pool *pool, MemPlan *mp, DiagSink *d)
{
    CompiledPlan *p = gc_calloc(1, sizeof *p);
    if (!p) {
        memplan_free(mp);
        diag_plain(d, "out of memory");
        return NULL;
    }
    p->g = g;
    p->pool = pool;
    p->mp = *mp;
    memset(mp, 0, sizeof *mp);
    if (p->mp.threads != pool_threads(pool)) {
        diag_plain(d, "internal error: a memory plan for %d threads given a pool of %d", p->mp.threads, pool_threads(pool));
        compiled_free(p);
        return NULL;
    }
    if (!exec_fits_memory((double)p->mp.arena, "the compiled plan's arena", d)) {
        compiled_free(p);
        return NULL;
    }
    int nargs = 0;
    for (int i = 0; i < g->nnodes; i++) nargs += g->nodes[i].nin;
    p->arena = aligned_alloc(MEMPLAN_ALIGN, (size_t)memplan_align(p->mp.arena ? p->mp.arena : MEMPLAN_ALIGN));
    p->calls = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *p->calls);
    p->args = gc_calloc((size_t)(nargs ? nargs : 1), sizeof *p->args);
    p->feeds = gc_calloc((size_t)(nargs ? nargs : 1), sizeof *p->feeds);
    p->out_ptr = gc_calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *p->out_ptr);
    p->out_bytes = gc_calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *p->out_bytes);
    p->stage_call = gc_calloc((size_t)p->mp.nstages + 1, sizeof *p->stage_call);
    p->call_bin = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *p->call_bin);
    if (!p->arena || !p->calls || !p->args || !p->feeds || !p->out_ptr || !p->out_bytes || !p->stage_call || !p->call_bin) {
        diag_plain(d, "out of memory: the plan needs an arena of %lld bytes", (long long)p->mp.arena);
        compiled_free(p);
        return NULL;
    }
    int a = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->op == OP_INPUT || n->op == OP_PARAM) continue;
        /* a reshape is a view of its input's buffer: nothing to run */
        if (n->op == OP_RESHAPE) continue;
        /* calls are made in node order: a new stage starts at its first call */
        while (p->nstages <= p->mp.stage[i]) p->stage_call[p->nstages++] = p->ncalls;
        p->call_bin[p->ncalls] = p->mp.bin[i];
        KCall *c = &p->calls[p->ncalls];
        c->g = g;
        c->n = n;
        c->pool = pool;
        c->in = &p->args[a];
        for (int k = 0; k < n->nin; k++) {
            int32_t src = base_of(g, n->in[k]);
            p->args[a + k] = node_data(p, w, src);
            if (g->nodes[src].op == OP_INPUT)
                p->feeds[p->nfeeds++] = (FeedSlot){ p->ncalls, k, g->nodes[src].a.input.index };
        }
        a += n->nin;
        c->out = node_data(p, w, i);
        c->scratch = p->mp.size[g->nnodes + i] ? (float *)(p->arena + p->mp.scratch_offset[i]) : NULL;
        p->ncalls++;
    }
    p->stage_call[p->nstages] = p->ncalls;
    for (int i = 0; i < g->noutputs; i++) {
        int32_t o = g->outputs[i].node;
        p->out_ptr[i] = node_data(p, w, o);
        p->out_bytes[i] = node_bytes(&g->nodes[o]);
    }
    return p;
}

/* One stage of several calls, as a pool job: task t runs the calls of bin t, each
 * kernel whole on this thread (its own pool_run runs serially inside a job). */
typedef struct StageJob {
    CompiledPlan *p;
    int lo, hi;
    int rc[POOL_MAX_THREADS];
} StageJob;

static void stage_task(void *arg, int task, int worker)
{
    (void)worker;
    StageJob *j = arg;
    for (int i = j->lo; i < j->hi; i++)
        if (j->p->call_bin[i] == task && dispatch_kernel(&j->p->calls[i]) != 0) j->rc[task] = -1;
}

int compiled_run(CompiledPlan *p, const void *const *feeds, float *const *outs, const StepEnv *env)
{
    for (int i = 0; i < p->nfeeds; i++) {
        const FeedSlot *f = &p->feeds[i];
        ((const void **)p->calls[f->call].in)[f->arg] = feeds[f->input];
    }
    for (int s = 0; s < p->nstages; s++) {
        int lo = p->stage_call[s], hi = p->stage_call[s + 1];
        for (int i = lo; i < hi; i++) p->calls[i].env = env;
        if (hi - lo == 1) {
            if (dispatch_run(&p->calls[lo]) != 0) return -1;
            continue;
        }
        StageJob j = { .p = p, .lo = lo, .hi = hi };
        int T = pool_threads(p->pool);
        pool_run(p->pool, T, stage_task, &j);
        for (int t = 0; t < T; t++)
            if (j.rc[t] != 0) return -1;
        /* numerics are checked after the stage, in call order, on this thread */
        for (int i = lo; i < hi; i++)
            if (dispatch_check(&p->calls[i]) != 0) return -1;
    }
    for (int i = 0; i < p->g->noutputs; i++) {
        if (!outs[i]) continue;
        const void *src = p->out_ptr[i];
        int32_t o = base_of(p->g, p->g->outputs[i].node);
        if (p->g->nodes[o].op == OP_INPUT) src = feeds[p->g->nodes[o].a.input.index];
        memcpy(outs[i], src, p->out_bytes[i]);
    }
    return 0;
}

size_t compiled_arena_bytes(const CompiledPlan *p) { return (size_t)p->mp.arena; }
const MemPlan *compiled_memplan(const CompiledPlan *p) { return &p->mp; }

void compiled_free(CompiledPlan *p)
{
    if (!p) return;
    free(p->arena);
    gc_free(p->calls);
    gc_free(p->stage_call);
    gc_free(p->call_bin);
    gc_free(p->args);
    gc_free(p->feeds);
    gc_free(p->out_ptr);
    gc_free(p->out_bytes);
    memplan_free(&p->mp);
    gc_free(p);
}

const Graph *compiled_graph(const CompiledPlan *p) { return p->g; }
