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
#include "util/pool.h"
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

static int plan_arena(const Graph *g, MemPlan *mp, StageMode stages, DiagSink *d)
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
    Cand *cand = gc_calloc(nz, sizeof *cand), *best = gc_calloc(nz, sizeof *best);
    int64_t *trial = gc_calloc(nz, sizeof *trial);
    mp->stage = gc_calloc(nz, sizeof *mp->stage);
    mp->bin = gc_calloc(nz, sizeof *mp->bin);
    int32_t *span = gc_calloc(3 * nz, sizeof *span);   /* each stage's first and last call, and calls */
    bool *inplace = gc_calloc(nz, sizeof *inplace);
    int rc = 0;
    if (!mp->offset || !mp->size || !mp->first || !mp->last || !root || !order || !placed || !cand || !best || !trial ||
        !mp->stage || !mp->bin || !span || !inplace)
        goto out_of_memory;
    for (int i = 0; i < n; i++) {
        const Node *nd = &g->nodes[i];
        root[i] = nd->op == OP_RESHAPE ? root[nd->in[0]] : i;   /* a view, of a fed input or a parameter too */
        mp->offset[i] = -1;
        mp->first[i] = mp->last[i] = i;
        if (!outside_arena(nd) && root[i] == i) mp->size[i] = memplan_align((int64_t)node_bytes(nd));
        /* the node's scratch: a buffer of its own that lives only while it runs */
        size_t sc = dispatch_scratch_bytes(g, nd);
        root[n + i] = n + i;
        mp->offset[n + i] = -1;
        mp->first[n + i] = mp->last[n + i] = i;
        mp->size[n + i] = memplan_align((int64_t)sc);
        if ((int64_t)sc > mp->scratch) mp->scratch = (int64_t)sc;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int32_t r = root[g->nodes[i].in[k]];
            if (mp->last[r] < i) mp->last[r] = i;
        }
    for (int i = 0; i < g->noutputs; i++) mp->last[root[g->outputs[i].node]] = n;
    /* the naive sum: every buffer its own memory, before any sharing.  Every sum and
     * offset below is at most this; a buffer is at most a few times 2^42 bytes
     * (GRAPH_MAX_ELEMENTS), but there may be millions. */
    for (int i = 0; i < 2 * n; i++)
        if (__builtin_add_overflow(mp->naive, mp->size[i], &mp->naive)) {
            diag_plain(d, "the step's buffers would need more than %s", bytes_str((double)INT64_MAX, (char[32]){ 0 }, 32));
            rc = -1;
            goto done;
        }
    /* In place: an op marked safe for it (reading each element before writing it)
     * writes over its first input, or for an elementwise op any input, when that
     * input's buffer has no reader after it and has the output's size.  The two buffers
     * become one, alive from the input's producer to the output's last reader. */
    for (int i = 0; i < n; i++) {
        const Node *nd = &g->nodes[i];
        if (!(op_info[nd->op].traits & OPT_INPLACE) || root[i] != i || mp->size[i] == 0 || nd->nin < 1) continue;
        int32_t r = -1;
        int cands = op_info[nd->op].traits & OPT_ELEMWISE ? nd->nin : 1;
        for (int k = 0; k < cands && r < 0; k++) {
            int32_t q = root[nd->in[k]];
            if (!outside_arena(&g->nodes[q]) && mp->size[q] == mp->size[i] && mp->last[q] == i) r = q;
        }
        if (r < 0) continue;
        root[i] = r;
        mp->last[r] = mp->last[i];
        mp->size[i] = 0;
        mp->inplace++;
        inplace[i] = true;
    }
    /* Parallel stages: a buffer used by any op of a stage is alive during all of it
     * (lifetimes widened to whole stages, still counted in nodes). */
    mp->nstages = stages_build(g, mp, inplace, pool_threads(), stages, mp->stage, mp->bin);
    if (mp->nstages < 0) goto out_of_memory;
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
    /* Greedy placement is a heuristic: six orders are tried and the smallest arena
     * kept (see the top of the file). */
    mp->arena = INT64_MAX;
    for (int strategy = 0; strategy < 6 && mp->arena > mp->lower_bound; strategy++) {
        for (int k = 0; k < nb; k++) {
            int32_t b = order[k];
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
        int64_t arena = place(mp, cand, nb, trial, placed);
        if (arena < mp->arena) {
            mp->arena = arena;
            memcpy(best, cand, (size_t)nb * sizeof *best);
        }
    }
    /* Local search from the best order: move one buffer to another place in the order,
     * keep the move if the arena is no larger; seeded, so the plan is the same every
     * time.  It stops at the lower bound. */
    for (int it = 0; it < PLACE_CLIMB && mp->arena > mp->lower_bound && nb > 1; it++) {
        int from = (int)rng_below(rng_at(0x9A7E, (uint64_t)it, 0), (uint64_t)nb);
        int to = (int)rng_below(rng_at(0x9A7E, (uint64_t)it, 1), (uint64_t)nb);
        memcpy(cand, best, (size_t)nb * sizeof *cand);
        Cand moved = cand[from];
        if (from < to) memmove(cand + from, cand + from + 1, (size_t)(to - from) * sizeof *cand);
        else memmove(cand + to + 1, cand + to, (size_t)(from - to) * sizeof *cand);
        cand[to] = moved;
        int64_t arena = place(mp, cand, nb, trial, placed);
        if (arena <= mp->arena) {
            mp->arena = arena;
            memcpy(best, cand, (size_t)nb * sizeof *best);
        }
    }
    place(mp, best, nb, mp->offset, placed);
    if (nb == 0) mp->arena = 0;
    for (int i = 0; i < n; i++)
        if (root[i] != i) mp->offset[i] = mp->offset[root[i]];
    mp->scratch_offset = mp->offset + n;
    goto done;
out_of_memory:
    diag_plain(d, "out of memory planning the arena");
    rc = -1;
done:
    gc_free(root);
    gc_free(order);
    gc_free(placed);
    gc_free(cand);
    gc_free(best);
    gc_free(trial);
    gc_free(span);
    gc_free(inplace);
    if (rc) memplan_free(mp);
    return rc;
}

int memplan_build(const Graph *g, MemPlan *mp, DiagSink *d)
{
    if (plan_arena(g, mp, stages_mode(), d) != 0) return -1;
    /* Stages make lifetimes coarser (whole stages), which can leave the placement
     * above the lower bound where one op at a time reaches it: memory comes first. */
    if (mp->parallel > 0 && mp->arena > mp->lower_bound) {
        MemPlan alone;
        if (plan_arena(g, &alone, STAGES_OFF, d) != 0) {
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

