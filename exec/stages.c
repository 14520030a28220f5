/* Parallel stages: which consecutive ops of a plan run at the same time.
 *
 * The plan runs its calls in node order.  Each large kernel splits its own work over
 * the pool; an op too small to split runs on one thread while the others sleep.  Here
 * consecutive ops that do not depend on each other are grouped into a stage whose ops
 * run at once, each whole on one thread (a kernel called inside a pool job runs its
 * parts serially, with the same partition, so the bits do not change).  A group is
 * made only when a cost model says it is faster than running its ops one after the
 * other, and only when it does not raise the most bytes alive at once.
 *
 * Called by memplan_build, on the buffers it has sized (lifetimes in node order, after
 * the in-place merges).  See docs/architecture.md, "Parallel stages". */
#include <stdlib.h>
#include <string.h>
#include "exec/memplan.h"
#include "util/pool.h"

/* The cost model: one thread's throughput on FLOP-bound and byte-bound kernels on the
 * machines this was tuned on (AVX2, about 3 GHz), the time above which a kernel splits
 * its work over the pool (and runs about 0.85 T times faster), and the cost of waking
 * the pool for a stage and waiting for it. */
#define SERIAL_FLOPS_PER_NS 30.0
#define SERIAL_BYTES_PER_NS 8.0
#define SPLIT_ABOVE_NS 40000.0
#define SPLIT_EFFICIENCY 0.85
#define STAGE_WAKE_NS 6000.0

/* The node whose buffer a value is (through reshape views). */
static int32_t base(const Graph *g, int32_t id)
{
    while (g->nodes[id].op == OP_RESHAPE) id = g->nodes[id].in[0];
    return id;
}

/* The cost model's estimate of one op's time on one thread, in nanoseconds. */
static double stage_est_ns(const Graph *g, const Node *n)
{
    double bytes = (double)node_bytes(n);
    for (int k = 0; k < n->nin; k++) bytes += (double)node_bytes(&g->nodes[n->in[k]]);
    return node_flops(g, n) / SERIAL_FLOPS_PER_NS + bytes / SERIAL_BYTES_PER_NS;
}

/* The op's time when it runs alone: split over the pool if it is large enough. */
static double alone_ns(double est, int threads)
{
    return est > SPLIT_ABOVE_NS ? est / (SPLIT_EFFICIENCY * threads) : est;
}

/* Whether op j writes a parameter that op m reads or writes (updates write every
 * parameter they take; other ops only read). */
static bool param_conflict(const Graph *g, const Node *j, const Node *m)
{
    bool wj = op_info[j->op].traits & OPT_UPDATE, wm = op_info[m->op].traits & OPT_UPDATE;
    if (!wj && !wm) return false;
    for (int a = 0; a < j->nin; a++) {
        const Node *pa = &g->nodes[base(g, j->in[a])];
        if (pa->op != OP_PARAM) continue;
        for (int b = 0; b < m->nin; b++) {
            const Node *pb = &g->nodes[base(g, m->in[b])];
            if (pb->op == OP_PARAM && pb->a.param.var == pa->a.param.var) return true;
        }
    }
    return false;
}

/* Longest-processing-time assignment of the members to `threads` bins: bin[k] for each
 * member; returns the largest bin's total. */
static double lpt(const int32_t *mem, int nm, const double *est, int threads, int32_t *bin)
{
    double load[POOL_MAX_THREADS] = { 0 };
    bool done[STAGE_MAX] = { false };
    if (threads > POOL_MAX_THREADS) threads = POOL_MAX_THREADS;
    for (int r = 0; r < nm; r++) {
        int pick = -1;
        for (int k = 0; k < nm; k++)
            if (!done[k] && (pick < 0 || est[mem[k]] > est[mem[pick]])) pick = k;
        done[pick] = true;
        int b = 0;
        for (int t = 1; t < threads; t++)
            if (load[t] < load[b]) b = t;
        load[b] += est[mem[pick]];
        bin[pick] = b;
    }
    double mx = 0;
    for (int t = 0; t < threads; t++)
        if (load[t] > mx) mx = load[t];
    return mx;
}

int stages_build(const Graph *g, const MemPlan *mp, const bool *inplace, int threads, StageMode m, int32_t *stage,
                 int32_t *bin)
{
    int n = g->nnodes;
    double *est = gc_calloc((size_t)(n ? n : 1), sizeof *est);
    int64_t *live = gc_calloc((size_t)(n + 1), sizeof *live);
    if (!est || !live) {
        gc_free(est);
        gc_free(live);
        return -1;
    }
    /* the most bytes alive at once when every op runs alone */
    int64_t peak = 0;
    for (int b = 0; b < mp->nbuf; b++)
        if (mp->size[b] > 0)
            for (int t = mp->first[b]; t <= mp->last[b] && t <= n; t++) live[t] += mp->size[b];
    for (int t = 0; t <= n; t++)
        if (live[t] > peak) peak = live[t];
    for (int i = 0; i < n; i++) {
        est[i] = plan_runs(&g->nodes[i]) ? stage_est_ns(g, &g->nodes[i]) : 0;
        bin[i] = 0;
    }
    int32_t mem[STAGE_MAX], tbin[STAGE_MAX];
    int nm = 0, ns = -1;
    for (int j = 0; j < n; j++) {
        const Node *nj = &g->nodes[j];
        if (!plan_runs(nj)) {   /* sources and views run nothing: they join the current stage */
            stage[j] = ns < 0 ? 0 : ns;
            continue;
        }
        bool ok = m != STAGES_OFF && threads > 1 && nm > 0 && nm < STAGE_MAX && !inplace[j] && nj->op != OP_ALLREDUCE &&
                  nj->op != OP_ALLREDUCE_WAIT;
        for (int k = 0; ok && k < nm; k++) {
            const Node *mk = &g->nodes[mem[k]];
            if (inplace[mem[k]] || mk->op == OP_ALLREDUCE || mk->op == OP_ALLREDUCE_WAIT || param_conflict(g, nj, mk))
                ok = false;
            for (int a = 0; ok && a < nj->nin; a++)
                if (base(g, nj->in[a]) == mem[k]) ok = false;
        }
        if (ok) {
            /* faster together than one after the other? */
            mem[nm] = j;
            double seq = 0;
            for (int k = 0; k <= nm; k++) seq += alone_ns(est[mem[k]], threads);
            double par = lpt(mem, nm + 1, est, threads, tbin) + STAGE_WAKE_NS;
            ok = par < seq || m == STAGES_ALL;
        }
        if (ok) {
            /* and no more bytes alive at once than the peak of the plan without stages:
             * every buffer alive at any moment of the stage is alive during all of it */
            int a = mem[0];
            int64_t during = 0;
            for (int b = 0; b < mp->nbuf; b++)
                if (mp->size[b] > 0 && mp->first[b] <= j && mp->last[b] >= a) during += mp->size[b];
            ok = during <= peak;
        }
        if (ok) {
            nm++;
            stage[j] = ns;
            continue;
        }
        /* close the current stage, start one with j */
        if (nm > 1) {
            lpt(mem, nm, est, threads, tbin);
            for (int k = 0; k < nm; k++) bin[mem[k]] = tbin[k];
        }
        ns++;
        nm = 0;
        mem[nm++] = j;
        stage[j] = ns;
    }
    if (nm > 1) {
        lpt(mem, nm, est, threads, tbin);
        for (int k = 0; k < nm; k++) bin[mem[k]] = tbin[k];
    }
    gc_free(est);
    gc_free(live);
    return ns + 1;
}

int stage_calls(const Graph *g, const MemPlan *mp, int s)
{
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) k += mp->stage[i] == s && plan_runs(&g->nodes[i]);
    return k;
}
