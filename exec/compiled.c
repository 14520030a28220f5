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

/* Per-op allocation (MemPlan.per_op, an ablation: what one arena buys): each buffer of
 * the plan allocated before the stage that writes it and freed after the stage of its
 * last reader, as the interpreter does, and its pointer written into the calls. */
typedef struct PerOp {
    void **ptr;              /* each buffer's memory while it is alive (2n: values, then scratch) */
    int32_t *use_start;      /* buffer b's places in the calls: use[use_start[b] .. use_start[b + 1]) */
    int32_t *use;            /* >= 0: an index into args; else -(2c + 1): call c's out, -(2c + 2): its scratch */
    int32_t *alloc_start;    /* stage s allocates alloc[alloc_start[s] .. alloc_start[s + 1]) */
    int32_t *alloc;
    int32_t *free_start;     /* and frees after it; at index nstages, what lives to the end */
    int32_t *freed;
    int64_t allocs, bytes;   /* allocations made over every run, and their bytes */
} PerOp;

/* A dense layer's weights packed once for its call (kern_gemm_pack): in a plan that
 * does not write them (inference), where the product streams them (kern_gemm_pack_ok),
 * made again before a run whenever the var's version has moved since. */
typedef struct Pack {
    int call;
    int var;
    uint64_t version;        /* w->version[var] when packed; 0: not yet */
    KGemmPack pk;            /* pk.isa: the variant it was made for */
} Pack;

struct CompiledPlan {
    const Graph *g;          /* the graph executed (the caller's, after the compiler's passes) */
    Weights *w;              /* the weights its calls point into */
    Pack *packs;
    int npacks;
    Pool *pool;              /* its threads: the scratch is sized for them */
    MemPlan mp;
    unsigned char *arena;    /* NULL with per-op allocation */
    bool own_arena;          /* false: mp.external's, borrowed */
    PerOp *po;               /* per-op allocation, or NULL */
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
    if (p->mp.per_op) return NULL;        /* allocated per run */
    return p->arena + p->mp.offset[id];
}

static void perop_free_tables(PerOp *po)
{
    if (!po) return;
    gc_free(po->ptr);
    gc_free(po->use_start);
    gc_free(po->use);
    gc_free(po->alloc_start);
    gc_free(po->alloc);
    gc_free(po->free_start);
    gc_free(po->freed);
    gc_free(po);
}

/* Buffer b (a value or a scratch of the memory plan) takes memory. */
static bool perop_buffer(const MemPlan *mp, int32_t b) { return mp->root[b] == b && mp->size[b] > 0; }

/* Where each buffer is used: calls' inputs, outputs and scratch (counted, then filled). */
static void perop_uses(CompiledPlan *p, int32_t *count, int32_t *use)
{
    const MemPlan *mp = &p->mp;
    int n = p->g->nnodes;
    for (int c = 0; c < p->ncalls; c++) {
        const KCall *k = &p->calls[c];
        int32_t i = (int32_t)(k->n - p->g->nodes), a = (int32_t)(k->in - p->args);
        int32_t bufs[2] = { mp->root[i], n + i };   /* its output, its scratch */
        for (int j = 0; j < 2; j++)
            if (perop_buffer(mp, bufs[j])) {
                if (use) use[count[bufs[j]]] = -(2 * c + 1 + j);
                count[bufs[j]]++;
            }
        for (int j = 0; j < k->n->nin; j++) {
            int32_t b = mp->root[k->n->in[j]];
            if (!perop_buffer(mp, b)) continue;
            if (use) use[count[b]] = a + j;
            count[b]++;
        }
    }
}

/* The stage each buffer is allocated in, or freed after (nstages: at the end). */
static int32_t perop_stage(const CompiledPlan *p, int32_t b, bool at_free)
{
    int32_t t = at_free ? p->mp.last[b] : p->mp.first[b];
    return t >= p->g->nnodes ? p->mp.nstages : p->mp.stage[t];
}

/* A list per stage: CSR from each buffer's stage. */
static int perop_by_stage(const CompiledPlan *p, bool at_free, int32_t **start, int32_t **list)
{
    int ns = p->mp.nstages + 1, nb = p->mp.nbuf;
    *start = gc_calloc((size_t)ns + 1, sizeof **start);
    *list = gc_calloc((size_t)(nb ? nb : 1), sizeof **list);
    if (!*start || !*list) return -1;
    for (int32_t b = 0; b < nb; b++)
        if (perop_buffer(&p->mp, b)) (*start)[perop_stage(p, b, at_free) + 1]++;
    for (int s = 0; s < ns; s++) (*start)[s + 1] += (*start)[s];
    int32_t *fill = gc_calloc((size_t)ns, sizeof *fill);
    if (!fill) return -1;
    for (int32_t b = 0; b < nb; b++)
        if (perop_buffer(&p->mp, b)) {
            int32_t s = perop_stage(p, b, at_free);
            (*list)[(*start)[s] + fill[s]++] = b;
        }
    gc_free(fill);
    return 0;
}

static PerOp *perop_new(CompiledPlan *p)
{
    PerOp *po = gc_calloc(1, sizeof *po);
    int nb = p->mp.nbuf;
    if (!po) return NULL;
    po->ptr = gc_calloc((size_t)(nb ? nb : 1), sizeof *po->ptr);
    po->use_start = gc_calloc((size_t)nb + 1, sizeof *po->use_start);
    if (!po->ptr || !po->use_start) goto fail;
    perop_uses(p, po->use_start + 1, NULL);
    for (int b = 0; b < nb; b++) po->use_start[b + 1] += po->use_start[b];
    po->use = gc_calloc((size_t)(po->use_start[nb] ? po->use_start[nb] : 1), sizeof *po->use);
    int32_t *fill = gc_calloc((size_t)(nb ? nb : 1), sizeof *fill);
    if (!po->use || !fill) {
        gc_free(fill);
        goto fail;
    }
    memcpy(fill, po->use_start, (size_t)nb * sizeof *fill);
    perop_uses(p, fill, po->use);
    gc_free(fill);
    if (perop_by_stage(p, false, &po->alloc_start, &po->alloc) != 0 ||
        perop_by_stage(p, true, &po->free_start, &po->freed) != 0)
        goto fail;
    return po;
fail:
    perop_free_tables(po);
    return NULL;
}

/* Allocates the buffers stage s starts and writes their pointers into the calls. */
static int perop_alloc(CompiledPlan *p, int s, DiagSink *d)
{
    PerOp *po = p->po;
    for (int32_t k = po->alloc_start[s]; k < po->alloc_start[s + 1]; k++) {
        int32_t b = po->alloc[k];
        size_t bytes = (size_t)p->mp.size[b];
        void *m = gc_malloc(bytes);
        if (!m) {
            diag_plain(d, "out of memory: %s needs %zu bytes", op_name(p->g->nodes[b % p->g->nnodes].op), bytes);
            return -1;
        }
        po->ptr[b] = m;
        po->allocs++;
        po->bytes += (int64_t)bytes;
        for (int32_t u = po->use_start[b]; u < po->use_start[b + 1]; u++) {
            int32_t v = po->use[u];
            if (v >= 0) p->args[v] = m;
            else if ((-v - 1) % 2 == 0) p->calls[(-v - 1) / 2].out = m;
            else p->calls[(-v - 1) / 2].scratch = m;
        }
    }
    return 0;
}

/* Frees the buffers whose last reader is in stage s (s = nstages: the rest). */
static void perop_free(PerOp *po, int s)
{
    for (int32_t k = po->free_start[s]; k < po->free_start[s + 1]; k++) {
        gc_free(po->ptr[po->freed[k]]);
        po->ptr[po->freed[k]] = NULL;
    }
}

/* The calls whose weights are worth packing once: matmul_bias_act with a parameter
 * as B (as stored), in a graph with no update op.  The ISA is the run's (StepEnv),
 * so the pack is made at the first run (compiled_packs).  Without memory for the
 * table, no packs. */
static void plan_packs(CompiledPlan *p)
{
    const Graph *g = p->g;
    if (graph_has_updates(g)) return;
    for (int c = 0; c < p->ncalls; c++) {
        const Node *n = p->calls[c].n;
        if (n->op != OP_MATMUL_BIAS_ACT || n->a.matmul.tb) continue;
        const Node *b = &g->nodes[base_of(g, n->in[1])];
        if (b->op != OP_PARAM) continue;
        if (!p->packs && !(p->packs = gc_calloc((size_t)p->ncalls, sizeof *p->packs))) return;
        p->packs[p->npacks++] = (Pack){ .call = c, .var = b->a.param.var };
    }
}

/* Before a run: each pack made (again) where the variant's product streams B and the
 * weights or the variant changed since; the call reads it, or B as stored where it
 * could not be made. */
static void compiled_packs(CompiledPlan *p, KIsa isa)
{
    for (int i = 0; i < p->npacks; i++) {
        Pack *k = &p->packs[i];
        KCall *c = &p->calls[k->call];
        const Node *n = c->n;
        const Shape *a = &p->g->nodes[n->in[0]].shape;
        bool ta = n->a.matmul.ta;
        size_t M = (size_t)n->shape.d[0].v, N = (size_t)n->shape.d[1].v, K = (size_t)a->d[ta ? 0 : 1].v;
        c->pack = NULL;
        if (!kern_gemm_pack_ok(isa, ta, false, M, N, K)) continue;
        if (k->version != p->w->version[k->var] || k->pk.isa != isa || !k->pk.data) {
            k->version = 0;
            if (!kern_gemm_pack(isa, K, N, p->w->data[k->var], &k->pk)) continue;
            k->version = p->w->version[k->var];
        }
        c->pack = &k->pk;
    }
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
    p->own_arena = !p->mp.per_op && !p->mp.external;
    if (p->own_arena)
        p->arena = gc_aligned_pages((size_t)memplan_align(p->mp.arena ? p->mp.arena : MEMPLAN_ALIGN), MEMPLAN_ALIGN);
    else
        p->arena = p->mp.external;   /* NULL with per-op allocation: node_data leaves the pointers */
    p->calls = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *p->calls);
    p->args = gc_calloc((size_t)(nargs ? nargs : 1), sizeof *p->args);
    p->feeds = gc_calloc((size_t)(nargs ? nargs : 1), sizeof *p->feeds);
    p->out_ptr = gc_calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *p->out_ptr);
    p->out_bytes = gc_calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *p->out_bytes);
    p->stage_call = gc_calloc((size_t)p->mp.nstages + 1, sizeof *p->stage_call);
    p->call_bin = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *p->call_bin);
    if ((!p->arena && !p->mp.per_op) || !p->calls || !p->args || !p->feeds || !p->out_ptr || !p->out_bytes || !p->stage_call || !p->call_bin) {
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
        /* with per-op allocation the scratch too is allocated per run */
        c->scratch = p->mp.size[g->nnodes + i] && !p->mp.per_op ? (float *)(p->arena + p->mp.scratch_offset[i]) : NULL;
        p->ncalls++;
    }
    p->stage_call[p->nstages] = p->ncalls;
    p->w = w;
    plan_packs(p);
    for (int i = 0; i < g->noutputs; i++) {
        int32_t o = g->outputs[i].node;
        p->out_ptr[i] = node_data(p, w, o);
        p->out_bytes[i] = node_bytes(&g->nodes[o]);
    }
    if (p->mp.per_op) {
        p->po = perop_new(p);
        if (!p->po) {
            diag_plain(d, "out of memory");
            compiled_free(p);
            return NULL;
        }
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

static int profile_stage(CompiledPlan *p, StageJob *j, const StepEnv *env);
static int stage_end(CompiledPlan *p, const StageJob *j);

/* Stage s: one call on this thread, or several at once on the pool. */
static int run_stage(CompiledPlan *p, int s, const StepEnv *env)
{
    int lo = p->stage_call[s], hi = p->stage_call[s + 1];
    for (int i = lo; i < hi; i++) p->calls[i].env = env;
    if (hi - lo == 1) return dispatch_run(&p->calls[lo]);
    StageJob j = { .p = p, .lo = lo, .hi = hi };
    int T = pool_threads(p->pool);
    if (env->prof_idle) return profile_stage(p, &j, env);
    pool_run(p->pool, T, stage_task, &j);
    return stage_end(p, &j);
}

/* A stage run with its threads' idle time counted: thread t is idle for the stage's
 * wall time less its members' times, put on its last member (a thread without one is
 * idle throughout, put on the stage's first call); the process's CPU time is shared
 * out by the members' times. */
static int profile_stage(CompiledPlan *p, StageJob *j, const StepEnv *env)
{
    int T = pool_threads(p->pool);
    double before[STAGE_MAX];
    int lo = j->lo, hi = j->hi < lo + STAGE_MAX ? j->hi : lo + STAGE_MAX;
    for (int i = lo; i < hi; i++) before[i - lo] = env->prof_ns[p->calls[i].n - p->g->nodes];
    int64_t cpu0 = pool_cpu_ns(p->pool);
    double t0 = exec_now_ns();
    pool_run(p->pool, T, stage_task, j);
    double wall = exec_now_ns() - t0, cpu = (double)(pool_cpu_ns(p->pool) - cpu0);
    double busy[POOL_MAX_THREADS] = { 0 }, sum = 0;
    int last[POOL_MAX_THREADS];
    for (int t = 0; t < T; t++) last[t] = lo;
    for (int i = lo; i < hi; i++) {
        double d = env->prof_ns[p->calls[i].n - p->g->nodes] - before[i - lo];
        busy[p->call_bin[i]] += d;
        last[p->call_bin[i]] = i;
        sum += d;
    }
    for (int i = lo; i < hi; i++) {
        int32_t n = (int32_t)(p->calls[i].n - p->g->nodes);
        env->prof_cpu[n] += sum > 0 ? cpu * (env->prof_ns[n] - before[i - lo]) / sum : cpu / (hi - lo);
    }
    for (int t = 0; t < T; t++) env->prof_idle[p->calls[last[t]].n - p->g->nodes] += wall - busy[t];
    return stage_end(p, j);
}

/* After a stage's job: its calls' failures, then the numerics checks. */
static int stage_end(CompiledPlan *p, const StageJob *j)
{
    for (int t = 0; t < pool_threads(p->pool); t++)
        if (j->rc[t] != 0) return -1;
    /* numerics are checked after the stage, in call order, on this thread */
    for (int i = j->lo; i < j->hi; i++)
        if (dispatch_check(&p->calls[i]) != 0) return -1;
    return 0;
}

int compiled_run(CompiledPlan *p, const void *const *feeds, float *const *outs, const StepEnv *env)
{
    for (int i = 0; i < p->nfeeds; i++) {
        const FeedSlot *f = &p->feeds[i];
        ((const void **)p->calls[f->call].in)[f->arg] = feeds[f->input];
    }
    compiled_packs(p, env->isa);
    int rc = 0;
    for (int s = 0; s < p->nstages && rc == 0; s++) {
        if (p->po && perop_alloc(p, s, env->d) != 0) rc = -1;
        if (rc == 0) rc = run_stage(p, s, env);
        if (p->po) perop_free(p->po, s);
    }
    for (int i = 0; i < p->g->noutputs && rc == 0; i++) {
        if (!outs[i]) continue;
        const void *src = p->out_ptr[i];
        int32_t o = base_of(p->g, p->g->outputs[i].node);
        if (p->g->nodes[o].op == OP_INPUT) src = feeds[p->g->nodes[o].a.input.index];
        else if (p->po && perop_buffer(&p->mp, p->mp.root[o])) src = p->po->ptr[p->mp.root[o]];
        memcpy(outs[i], src, p->out_bytes[i]);
    }
    if (p->po)   /* what lives to the end, or everything still alive after a failure */
        for (int s = 0; s <= p->mp.nstages; s++) perop_free(p->po, s);
    return rc;
}

size_t compiled_arena_bytes(const CompiledPlan *p) { return (size_t)p->mp.arena; }

void compiled_alloc_stats(const CompiledPlan *p, int64_t *allocs, int64_t *bytes)
{
    *allocs = p->po ? p->po->allocs : 0;
    *bytes = p->po ? p->po->bytes : 0;
}
const MemPlan *compiled_memplan(const CompiledPlan *p) { return &p->mp; }

void compiled_free(CompiledPlan *p)
{
    if (!p) return;
    if (p->own_arena) free(p->arena);
    for (int i = 0; i < p->npacks; i++) kern_gemm_pack_free(&p->packs[i].pk);
    gc_free(p->packs);
    perop_free_tables(p->po);
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
