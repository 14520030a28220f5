/* The memory planner.  See memplan.h.
 *
 * Every node output that is not a parameter or a fed input gets a buffer; a buffer lives from the node that writes it to the last node that reads it
 * (outputs live to the end).  A reshape is a view of its input and extends its life.
 * Buffers are placed greedily, each into the smallest gap (best fit) among the already
 * placed buffers whose lifetimes overlap its own, in six orders (largest first,
 * longest-lived first, largest size x lifetime first, first made first, and largest
 * first with the nodes' scratch buffers before or after the values); the best order is
 * then improved by a seeded local search (one buffer moved in the order at a time)
 * until it reaches the lower bound or a step limit. */
#include <stdlib.h>
#include <string.h>
#include "exec/memplan.h"
#include "util/rng.h"

/* Steps of local search when the six fixed orders miss the lower bound. */
#define PLACE_CLIMB 3000


/* Where a node's data lives when it is not in the arena. */
static bool outside_arena(const Node *n) { return n->op == OP_INPUT || n->op == OP_PARAM; }

void memplan_free(MemPlan *mp)
{
    gc_free(mp->offset);
    gc_free(mp->size);
    gc_free(mp->first);
    gc_free(mp->last);
    gc_free(mp->stage);
    gc_free(mp->bin);
    gc_free(mp->root);
    memset(mp, 0, sizeof *mp);
}

/* A buffer to place, with the key of the order it is placed in (larger first). */
typedef struct Cand {
    int64_t key, key2;
    int32_t buf;
} Cand;
static int by_key_desc(const void *a, const void *b)
{
    const Cand *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->key2 != y->key2) return x->key2 > y->key2 ? -1 : 1;
    return x->buf - y->buf;   /* stable: earlier node first */
}

typedef struct Placed { int64_t off, end; } Placed;
static int by_off(const void *a, const void *b)
{
    const Placed *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Places the buffers cand[0..nb) in that order, each at the bottom of the smallest gap
 * (best fit) left by the already placed buffers whose lifetimes overlap its own, or
 * above them all.  Writes off[buf]; returns the arena's size. */
static int64_t place(const MemPlan *mp, const Cand *cand, int nb, int64_t *off, Placed *placed)
{
    int64_t arena = 0;
    for (int k = 0; k < nb; k++) {
        int32_t b = cand[k].buf;
        int np = 0;
        for (int j = 0; j < k; j++) {
            int32_t o = cand[j].buf;
            if (mp->first[o] <= mp->last[b] && mp->first[b] <= mp->last[o])
                placed[np++] = (Placed){ off[o], off[o] + mp->size[o] };
        }
        qsort(placed, (size_t)np, sizeof *placed, by_off);
        int64_t best = -1, best_gap = INT64_MAX, cur = 0;
        for (int j = 0; j < np; j++) {
            int64_t gap = placed[j].off - cur;
            if (gap >= mp->size[b] && gap < best_gap) { best = cur; best_gap = gap; }
            if (placed[j].end > cur) cur = placed[j].end;
        }
        if (best < 0) best = cur;   /* above everything it overlaps */
        off[b] = best;
        if (best + mp->size[b] > arena) arena = best + mp->size[b];
    }
    return arena;
}

/* The planner's working arrays, over the 2n buffers (node i's output at i, its scratch
 * at n + i). */
typedef struct Planner {
    const Graph *g;
    MemPlan *mp;
    int n;
    int32_t *root;     /* the buffer a view reads, or an in-place output shares */
    bool *inplace;     /* node i writes over an input */
    int32_t *order;    /* the buffers that take space */
    int nb;
    Placed *placed;    /* place(): the overlapping buffers of one placement */
    Cand *cand, *best; /* a placement order, and the best one found */
    int64_t *trial;    /* the offsets of a trial placement */
} Planner;

static void planner_free(Planner *p)
{
    gc_free(p->root);
    gc_free(p->inplace);
    gc_free(p->order);
    gc_free(p->placed);
    gc_free(p->cand);
    gc_free(p->best);
    gc_free(p->trial);
}

static int planner_init(Planner *p, const Graph *g, int threads, MemPlan *mp)
{
    int n = g->nnodes;
    size_t nz = (size_t)(n ? 2 * n : 1);
    memset(p, 0, sizeof *p);
    memset(mp, 0, sizeof *mp);
    p->g = g;
    p->mp = mp;
    p->n = n;
    mp->n = n;
    mp->nbuf = 2 * n;
    mp->threads = threads;
    mp->offset = gc_calloc(nz, sizeof *mp->offset);
    mp->size = gc_calloc(nz, sizeof *mp->size);
    mp->first = gc_calloc(nz, sizeof *mp->first);
    mp->last = gc_calloc(nz, sizeof *mp->last);
    mp->stage = gc_calloc(nz, sizeof *mp->stage);
    mp->bin = gc_calloc(nz, sizeof *mp->bin);
    mp->root = gc_calloc(nz, sizeof *mp->root);
    p->root = gc_calloc(nz, sizeof *p->root);
    p->inplace = gc_calloc(nz, sizeof *p->inplace);
    p->order = gc_calloc(nz, sizeof *p->order);
    p->placed = gc_calloc(nz, sizeof *p->placed);
    p->cand = gc_calloc(nz, sizeof *p->cand);
    p->best = gc_calloc(nz, sizeof *p->best);
    p->trial = gc_calloc(nz, sizeof *p->trial);
    if (mp->offset && mp->size && mp->first && mp->last && mp->stage && mp->bin && mp->root && p->root && p->inplace && p->order &&
        p->placed && p->cand && p->best && p->trial)
        return 0;
    planner_free(p);
    memplan_free(mp);
    return -1;
}

/* Each buffer's size and lifetime: a node's output from the node to its last reader
 * (outputs to the end; a view's reads extend its root's), its scratch while it runs.
 * Then the naive sum: every buffer its own memory, before any sharing.  Every sum and
 * offset of the plan is at most that one; a buffer is at most a few times 2^42 bytes
 * (GRAPH_MAX_ELEMENTS), but there may be millions: false when the sum overflows. */
static bool sizes_and_lifetimes(Planner *p, int threads)
{
    const Graph *g = p->g;
    MemPlan *mp = p->mp;
    int n = p->n;
    for (int i = 0; i < n; i++) {
        const Node *nd = &g->nodes[i];
        p->root[i] = nd->op == OP_RESHAPE ? p->root[nd->in[0]] : i;   /* a view, of a fed input or a parameter too */
        mp->offset[i] = -1;
        mp->first[i] = mp->last[i] = i;
        if (!outside_arena(nd) && p->root[i] == i) mp->size[i] = memplan_align((int64_t)node_bytes(nd));
        /* the node's scratch: a buffer of its own that lives only while it runs */
        size_t sc = dispatch_scratch_bytes(g, nd, threads);
        p->root[n + i] = n + i;
        mp->offset[n + i] = -1;
        mp->first[n + i] = mp->last[n + i] = i;
        mp->size[n + i] = memplan_align((int64_t)sc);
        if ((int64_t)sc > mp->scratch) mp->scratch = (int64_t)sc;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int32_t r = p->root[g->nodes[i].in[k]];
            if (mp->last[r] < i) mp->last[r] = i;
        }
    for (int i = 0; i < g->noutputs; i++) mp->last[p->root[g->outputs[i].node]] = n;
    for (int i = 0; i < 2 * n; i++)
        if (__builtin_add_overflow(mp->naive, mp->size[i], &mp->naive)) return false;
    return true;
}

/* In place: an op marked safe for it (reading each element before writing it) writes
 * over its first input, or for an elementwise op any input, when that input's buffer
 * has no reader after it and has the output's size.  The two buffers become one, alive
 * from the input's producer to the output's last reader. */
static void merge_inplace(Planner *p)
{
    const Graph *g = p->g;
    MemPlan *mp = p->mp;
    for (int i = 0; i < p->n; i++) {
        const Node *nd = &g->nodes[i];
        if (!(op_info[nd->op].traits & OPT_INPLACE) || p->root[i] != i || mp->size[i] == 0 || nd->nin < 1) continue;
        int32_t r = -1;
        int cands = op_info[nd->op].traits & OPT_ELEMWISE ? nd->nin : 1;
        for (int k = 0; k < cands && r < 0; k++) {
            int32_t q = p->root[nd->in[k]];
            /* the same elements, not just the same aligned size: a broadcast operand
             * smaller than the output may round up to its size, and is read again
             * after the output's first row is written */
            if (!outside_arena(&g->nodes[q]) && node_bytes(&g->nodes[q]) == node_bytes(nd) && mp->size[q] == mp->size[i] &&
                mp->last[q] == i)
                r = q;
        }
        if (r < 0) continue;
        p->root[i] = r;
        mp->last[r] = mp->last[i];
        mp->size[i] = 0;
        mp->inplace++;
        p->inplace[i] = true;
    }
}

/* Parallel stages: a buffer used by any op of a stage is alive during all of it
 * (lifetimes widened to whole stages, still counted in nodes). */
static int widen_to_stages(Planner *p, int threads, StageMode stages)
{
    const Graph *g = p->g;
    MemPlan *mp = p->mp;
    int n = p->n;
    mp->nstages = stages_build(g, mp, p->inplace, threads, stages, mp->stage, mp->bin);
    if (mp->nstages < 0) return -1;
    int32_t *span = gc_calloc((size_t)(mp->nstages ? mp->nstages : 1) * 3, sizeof *span);   /* first call, last, calls */
    if (!span) return -1;
    for (int s = 0; s < mp->nstages; s++) span[3 * s] = n, span[3 * s + 1] = -1, span[3 * s + 2] = 0;
    for (int i = 0; i < n; i++) {
        int32_t *sp = &span[3 * mp->stage[i]];
        if (!plan_runs(&g->nodes[i])) continue;
        if (i < sp[0]) sp[0] = i;
        if (i > sp[1]) sp[1] = i;
        if (++sp[2] == 2) mp->parallel++;
    }
    for (int b = 0; b < 2 * n; b++) {
        int32_t *f = &mp->first[b], *l = &mp->last[b];
        const int32_t *sf = *f < n ? &span[3 * mp->stage[*f]] : NULL, *sl = *l < n ? &span[3 * mp->stage[*l]] : NULL;
        if (sf && sf[2] > 1 && sf[0] < *f) *f = sf[0];
        if (sl && sl[2] > 1 && sl[1] > *l) *l = sl[1];
    }
    gc_free(span);
    return 0;
}

/* The buffers that take space, and the lower bound: the most bytes alive at once. */
static void lower_bound(Planner *p)
{
    MemPlan *mp = p->mp;
    p->nb = 0;
    for (int i = 0; i < 2 * p->n; i++)
        if (mp->size[i] > 0) p->order[p->nb++] = i;
    for (int t = 0; t <= p->n; t++) {
        int64_t live = 0;
        for (int k = 0; k < p->nb; k++) {
            int32_t b = p->order[k];
            if (mp->first[b] <= t && t <= mp->last[b]) live += mp->size[b];
        }
        if (live > mp->lower_bound) mp->lower_bound = live;
    }
}

/* Greedy placement is a heuristic: six orders are tried and the smallest arena kept
 * (see the top of the file), then a seeded local search from the best order moves one
 * buffer to another place in the order and keeps the move if the arena is no larger,
 * so the plan is the same every time; both stop at the lower bound. */
static void search_placement(Planner *p)
{
    MemPlan *mp = p->mp;
    int n = p->n, nb = p->nb;
    Cand *cand = p->cand, *best = p->best;
    mp->arena = INT64_MAX;
    for (int strategy = 0; strategy < 6 && mp->arena > mp->lower_bound; strategy++) {
        for (int k = 0; k < nb; k++) {
            int32_t b = p->order[k];
            int64_t size = mp->size[b], life = (int64_t)(mp->last[b] - mp->first[b] + 1);
            int64_t scratch = b >= n;   /* a node's scratch: alive while the node runs */
            Cand *c = &cand[k];
            c->buf = b;
            switch (strategy) {
            case 0: c->key = size; c->key2 = life; break;
            case 1: c->key = life; c->key2 = size; break;
            case 2: c->key = __builtin_mul_overflow(size, life, &c->key) ? INT64_MAX : c->key; c->key2 = size; break;
            case 3: c->key = -(int64_t)mp->first[b]; c->key2 = size; break;
            case 4: c->key = scratch; c->key2 = size; break;      /* scratch first, at the bottom */
            default: c->key = !scratch; c->key2 = size; break;   /* scratch last, into the gaps */
            }
        }
        qsort(cand, (size_t)nb, sizeof *cand, by_key_desc);
        int64_t arena = place(mp, cand, nb, p->trial, p->placed);
        if (arena < mp->arena) {
            mp->arena = arena;
            memcpy(best, cand, (size_t)nb * sizeof *best);
        }
    }
    for (int it = 0; it < PLACE_CLIMB && mp->arena > mp->lower_bound && nb > 1; it++) {
        int from = (int)rng_below(rng_at(0x9A7E, (uint64_t)it, 0), (uint64_t)nb);
        int to = (int)rng_below(rng_at(0x9A7E, (uint64_t)it, 1), (uint64_t)nb);
        memcpy(cand, best, (size_t)nb * sizeof *cand);
        Cand moved = cand[from];
        if (from < to) memmove(cand + from, cand + from + 1, (size_t)(to - from) * sizeof *cand);
        else memmove(cand + to + 1, cand + to, (size_t)(from - to) * sizeof *cand);
        cand[to] = moved;
        int64_t arena = place(mp, cand, nb, p->trial, p->placed);
        if (arena <= mp->arena) {
            mp->arena = arena;
            memcpy(best, cand, (size_t)nb * sizeof *best);
        }
    }
    place(mp, best, nb, mp->offset, p->placed);
    if (nb == 0) mp->arena = 0;
    for (int i = 0; i < n; i++)
        if (p->root[i] != i) mp->offset[i] = mp->offset[p->root[i]];
    mp->scratch_offset = mp->offset + n;
}

/* Without reuse (an ablation), every buffer lives through the whole step, so the
 * placement gives each its own bytes: the naive sum, less what in-place ops share. */
static void no_reuse(Planner *p)
{
    for (int b = 0; b < 2 * p->n; b++) {
        p->mp->first[b] = 0;
        p->mp->last[b] = p->n;
    }
}

/* mp->root: each value's buffer, the chains of views and in-place ops followed (an
 * input's root comes before the node, so one pass in node order resolves them). */
static void export_roots(Planner *p)
{
    for (int i = 0; i < p->n; i++) {
        int32_t r = p->root[i];
        p->mp->root[i] = r == i ? i : p->mp->root[r];
        p->mp->root[p->n + i] = p->n + i;
    }
}

static int plan_arena(const Graph *g, const PlanOptions *o, StageMode stages, MemPlan *mp, DiagSink *d)
{
    int threads = o->threads > 0 ? o->threads : 1;
    Planner p;
    if (planner_init(&p, g, threads, mp) != 0) {
        diag_plain(d, "out of memory planning the arena");
        return -1;
    }
    if (!sizes_and_lifetimes(&p, threads)) {
        char b[32];
        diag_plain(d, "the step's buffers would need more than %s", bytes_str((double)INT64_MAX, b, sizeof b));
        planner_free(&p);
        memplan_free(mp);
        return -1;
    }
    if (!o->no_inplace) merge_inplace(&p);
    if (widen_to_stages(&p, threads, stages) != 0) {
        diag_plain(d, "out of memory planning the arena");
        planner_free(&p);
        memplan_free(mp);
        return -1;
    }
    if (o->no_reuse && !o->per_op) no_reuse(&p);
    lower_bound(&p);
    export_roots(&p);
    mp->per_op = o->per_op;
    if (o->per_op) {
        mp->arena = mp->lower_bound;   /* what the allocator holds at the peak; nothing placed */
        mp->scratch_offset = mp->offset + p.n;
    } else {
        search_placement(&p);
    }
    planner_free(&p);
    return 0;
}

int memplan_build(const Graph *g, const PlanOptions *o, MemPlan *mp, DiagSink *d)
{
    if (plan_arena(g, o, o->stages, mp, d) != 0) return -1;
    /* Stages make lifetimes coarser (whole stages), which can leave the placement
     * above the lower bound where one op at a time reaches it: memory comes first. */
    if (mp->parallel > 0 && mp->arena > mp->lower_bound) {
        MemPlan alone;
        if (plan_arena(g, o, STAGES_OFF, &alone, d) != 0) {
            memplan_free(mp);
            return -1;
        }
        if (alone.arena < mp->arena) {
            memplan_free(mp);
            *mp = alone;
        } else {
            memplan_free(&alone);
        }
    }
    return 0;
}

