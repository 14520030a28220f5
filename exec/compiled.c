/* The compiled executor.  See compiled.h.
 *
 * Memory planning: every node output that is not a parameter or a fed input gets a
 * buffer; a buffer lives from the node that writes it to the last node that reads it
 * (outputs live to the end).  A reshape is a view of its input and extends its life.
 * Buffers are placed greedily, largest first, each into the smallest gap (best fit)
 * among the already placed buffers whose lifetimes overlap its own. */
#include <stdlib.h>
#include <string.h>
#include "exec/compiled.h"
#include "graph/passes.h"

#define ALIGN 64

static int64_t align_up(int64_t v) { return (v + ALIGN - 1) & ~(int64_t)(ALIGN - 1); }

/* Where a node's data lives when it is not in the arena. */
static bool outside_arena(const Node *n) { return n->op == OP_INPUT || n->op == OP_PARAM; }

void memplan_free(MemPlan *mp)
{
    gc_free(mp->offset);
    gc_free(mp->size);
    gc_free(mp->first);
    gc_free(mp->last);
    memset(mp, 0, sizeof *mp);
}

static const MemPlan *sort_plan;
static int by_size_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t sx = sort_plan->size[x], sy = sort_plan->size[y];
    if (sx != sy) return sx > sy ? -1 : 1;
    return x - y;   /* stable: earlier node first */
}

typedef struct Placed { int64_t off, end; } Placed;
static int by_off(const void *a, const void *b)
{
    const Placed *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

int memplan_build(const Graph *g, MemPlan *mp, DiagSink *d)
{
    int n = g->nnodes;
    memset(mp, 0, sizeof *mp);
    mp->n = n;
    mp->nbuf = 2 * n;
    size_t nz = (size_t)(n ? 2 * n : 1);
    mp->offset = gc_calloc(nz, sizeof *mp->offset);
    mp->size = gc_calloc(nz, sizeof *mp->size);
    mp->first = gc_calloc(nz, sizeof *mp->first);
    mp->last = gc_calloc(nz, sizeof *mp->last);
    int32_t *root = gc_calloc(nz, sizeof *root);     /* the buffer a view reads */
    int32_t *order = gc_calloc(nz, sizeof *order);
    Placed *placed = gc_calloc(nz, sizeof *placed);
    if (!mp->offset || !mp->size || !mp->first || !mp->last || !root || !order || !placed) {
        diag_plain(d, "out of memory planning the arena");
        gc_free(root); gc_free(order); gc_free(placed);
        memplan_free(mp);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const Node *nd = &g->nodes[i];
        root[i] = nd->op == OP_RESHAPE && !outside_arena(&g->nodes[nd->in[0]]) ? root[nd->in[0]] : i;
        mp->offset[i] = -1;
        mp->first[i] = mp->last[i] = i;
        if (!outside_arena(nd) && root[i] == i) mp->size[i] = align_up((int64_t)node_bytes(nd));
        /* the node's scratch: a buffer of its own that lives only while it runs */
        size_t sc = dispatch_scratch_bytes(g, nd);
        root[n + i] = n + i;
        mp->offset[n + i] = -1;
        mp->first[n + i] = mp->last[n + i] = i;
        mp->size[n + i] = align_up((int64_t)sc);
        if ((int64_t)sc > mp->scratch) mp->scratch = (int64_t)sc;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int32_t r = root[g->nodes[i].in[k]];
            if (mp->last[r] < i) mp->last[r] = i;
        }
    for (int i = 0; i < g->noutputs; i++) mp->last[root[g->outputs[i].node]] = n;
    /* the naive sum: every buffer its own memory, before any sharing */
    for (int i = 0; i < 2 * n; i++) mp->naive += mp->size[i];
    /* In place: an op marked safe for it (elementwise, reading each element before
     * writing it) writes over its first input when that input's buffer has no reader
     * after it and has the output's size.  The two buffers become one, alive from the
     * input's producer to the output's last reader. */
    for (int i = 0; i < n; i++) {
        const Node *nd = &g->nodes[i];
        if (!(op_info[nd->op].traits & OPT_INPLACE) || root[i] != i || mp->size[i] == 0 || nd->nin < 1) continue;
        int32_t r = root[nd->in[0]];
        if (outside_arena(&g->nodes[r]) || mp->size[r] != mp->size[i] || mp->last[r] != i) continue;
        root[i] = r;
        mp->last[r] = mp->last[i];
        mp->size[i] = 0;
        mp->inplace++;
    }
    /* updates and the accuracy metric read the step's results until the end */
    int nb = 0;
    for (int i = 0; i < 2 * n; i++)
        if (mp->size[i] > 0) order[nb++] = i;
    /* lower bound: the most bytes live at once */
    for (int t = 0; t <= n; t++) {
        int64_t live = 0;
        for (int k = 0; k < nb; k++) {
            int32_t b = order[k];
            if (mp->first[b] <= t && t <= mp->last[b]) live += mp->size[b];
        }
        if (live > mp->lower_bound) mp->lower_bound = live;
    }
    sort_plan = mp;
    qsort(order, (size_t)nb, sizeof *order, by_size_desc);
    for (int k = 0; k < nb; k++) {
        int32_t b = order[k];
        int np = 0;
        for (int j = 0; j < k; j++) {
            int32_t o = order[j];
            if (mp->first[o] <= mp->last[b] && mp->first[b] <= mp->last[o])
                placed[np++] = (Placed){ mp->offset[o], mp->offset[o] + mp->size[o] };
        }
        qsort(placed, (size_t)np, sizeof *placed, by_off);
        int64_t best = -1, best_gap = INT64_MAX, cur = 0;
        for (int j = 0; j < np; j++) {
            int64_t gap = placed[j].off - cur;
            if (gap >= mp->size[b] && gap < best_gap) { best = cur; best_gap = gap; }
            if (placed[j].end > cur) cur = placed[j].end;
        }
        if (best < 0) best = cur;   /* above everything it overlaps */
        mp->offset[b] = best;
        if (best + mp->size[b] > mp->arena) mp->arena = best + mp->size[b];
    }
    for (int i = 0; i < n; i++)
        if (root[i] != i) mp->offset[i] = mp->offset[root[i]];
    mp->scratch_offset = mp->offset + n;
    gc_free(root);
    gc_free(order);
    gc_free(placed);
    return 0;
}

/* ---- the plan ------------------------------------------------------------------------- */

typedef struct FeedSlot {
    int call;      /* index into calls */
    int arg;       /* which input of that call */
    int input;     /* which feed */
} FeedSlot;

struct CompiledPlan {
    const Graph *g;          /* the graph executed: the caller's, after the plan's passes */
    Graph *owned;            /* that graph, owned by the plan */
    MemPlan mp;
    unsigned char *arena;
    KCall *calls;
    int ncalls;
    const void **args;       /* every call's input pointers, back to back */
    FeedSlot *feeds;
    int nfeeds;
    void **out_ptr;          /* data of each graph output */
    size_t *out_bytes;
};

static void *node_data(CompiledPlan *p, Weights *w, int32_t id)
{
    const Node *n = &p->g->nodes[id];
    if (n->op == OP_PARAM) return w->data[n->a.param.var];
    if (n->op == OP_INPUT) return NULL;   /* patched per run */
    return p->arena + p->mp.offset[id];
}

CompiledPlan *compiled_plan(const Graph *g, Weights *w, DiagSink *d)
{
    CompiledPlan *p = gc_calloc(1, sizeof *p);
    if (!p) { diag_plain(d, "out of memory"); return NULL; }
    /* the compiler's passes, decided once here */
    p->owned = pass_optimize(g, NULL, d);
    if (!p->owned) { gc_free(p); return NULL; }
    g = p->g = p->owned;
    if (memplan_build(g, &p->mp, d) != 0) { graph_free(p->owned); gc_free(p); return NULL; }
    if (!exec_fits_memory((double)p->mp.arena, "the compiled plan's arena", d)) {
        compiled_free(p);
        return NULL;
    }
    int nargs = 0;
    for (int i = 0; i < g->nnodes; i++) nargs += g->nodes[i].nin;
    p->arena = aligned_alloc(ALIGN, (size_t)align_up(p->mp.arena ? p->mp.arena : ALIGN));
    p->calls = gc_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *p->calls);
    p->args = gc_calloc((size_t)(nargs ? nargs : 1), sizeof *p->args);
    p->feeds = gc_calloc((size_t)(nargs ? nargs : 1), sizeof *p->feeds);
    p->out_ptr = gc_calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *p->out_ptr);
    p->out_bytes = gc_calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *p->out_bytes);
    if (!p->arena || !p->calls || !p->args || !p->feeds || !p->out_ptr || !p->out_bytes) {
        diag_plain(d, "out of memory: the plan needs an arena of %lld bytes", (long long)p->mp.arena);
        compiled_free(p);
        return NULL;
    }
    int a = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->op == OP_INPUT || n->op == OP_PARAM) continue;
        /* a reshape shares its input's buffer: nothing to run */
        if (n->op == OP_RESHAPE && p->mp.offset[i] == p->mp.offset[n->in[0]] && !outside_arena(&g->nodes[n->in[0]]))
            continue;
        KCall *c = &p->calls[p->ncalls];
        c->g = g;
        c->n = n;
        c->in = &p->args[a];
        for (int k = 0; k < n->nin; k++) {
            int32_t src = n->in[k];
            p->args[a + k] = node_data(p, w, src);
            if (g->nodes[src].op == OP_INPUT)
                p->feeds[p->nfeeds++] = (FeedSlot){ p->ncalls, k, g->nodes[src].a.input.index };
        }
        a += n->nin;
        c->out = node_data(p, w, i);
        c->scratch = p->mp.size[g->nnodes + i] ? (float *)(p->arena + p->mp.scratch_offset[i]) : NULL;
        p->ncalls++;
    }
    for (int i = 0; i < g->noutputs; i++) {
        int32_t o = g->outputs[i].node;
        p->out_ptr[i] = node_data(p, w, o);
        p->out_bytes[i] = node_bytes(&g->nodes[o]);
    }
    return p;
}

int compiled_run(CompiledPlan *p, const void *const *feeds, float *const *outs, const StepEnv *env)
{
    for (int i = 0; i < p->nfeeds; i++) {
        const FeedSlot *f = &p->feeds[i];
        ((const void **)p->calls[f->call].in)[f->arg] = feeds[f->input];
    }
    for (int i = 0; i < p->ncalls; i++) {
        KCall *c = &p->calls[i];
        c->env = env;
        if (dispatch_run(c) != 0) return -1;
    }
    for (int i = 0; i < p->g->noutputs; i++) {
        if (!outs[i]) continue;
        const void *src = p->out_ptr[i];
        int32_t o = p->g->outputs[i].node;
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
    gc_free(p->args);
    gc_free(p->feeds);
    gc_free(p->out_ptr);
    gc_free(p->out_bytes);
    memplan_free(&p->mp);
    graph_free(p->owned);
    gc_free(p);
}

const Graph *compiled_graph(const CompiledPlan *p) { return p->g; }
