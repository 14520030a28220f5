#include "exec/executor.h"
#include "exec/compiled.h"

static const char *mode_names[EXEC_MODE_COUNT] = { "interp", "compiled" };
const char *exec_mode_name(ExecMode m) { return (unsigned)m < EXEC_MODE_COUNT ? mode_names[m] : "?"; }

struct Executor {
    ExecMode mode;
    const Graph *g;
    Pool *pool;
    InterpStats stats;    /* interpreter */
    CompiledPlan *plan;   /* compiled */
    bool writes;          /* g updates weights (an optimizer step): their versions move */
};

Executor *executor_new(ExecMode mode, const Graph *g, Weights *w, Pool *pool, MemPlan *mp, DiagSink *d)
{
    for (int i = 0; i < g->nnodes; i++)
        if (!shape_concrete(&g->nodes[i].shape)) {
            diag_plain(d, "internal: executing a graph whose shapes are not all bound (node %d)", i);
            if (mp) memplan_free(mp);
            return NULL;
        }
    Executor *e = gc_calloc(1, sizeof *e);
    if (!e) {
        if (mp) memplan_free(mp);
        diag_plain(d, "out of memory");
        return NULL;
    }
    e->mode = mode;
    e->g = g;
    e->pool = pool;
    e->writes = graph_has_updates(g);
    if (mode == MODE_COMPILED) {
        if (!mp) {
            diag_plain(d, "internal error: a compiled executor without a memory plan");
            gc_free(e);
            return NULL;
        }
        e->plan = compiled_plan(g, w, pool, mp, d);
        if (!e->plan) { gc_free(e); return NULL; }
    } else if (mp) {
        memplan_free(mp);
    }
    return e;
}

int executor_run(Executor *e, const void *const *feeds, float *const *outs, const StepEnv *env)
{
    int rc = e->mode == MODE_COMPILED ? compiled_run(e->plan, feeds, outs, env)
                                      : interp_run(e->g, feeds, outs, env, e->pool, &e->stats);
    /* every var, not only those updated: a step that failed half way wrote some */
    if (e->writes) weights_touch(env->w, -1);
    return rc;
}

size_t executor_peak_bytes(const Executor *e)
{
    return e->mode == MODE_COMPILED ? compiled_arena_bytes(e->plan) : e->stats.peak_bytes;
}

void executor_alloc_stats(const Executor *e, int64_t *allocs, int64_t *bytes)
{
    if (e->mode == MODE_COMPILED) {
        compiled_alloc_stats(e->plan, allocs, bytes);
        return;
    }
    *allocs = e->stats.allocs;
    *bytes = e->stats.alloc_bytes;
}

const Graph *executor_graph(const Executor *e) { return e->g; }

const MemPlan *executor_memplan(const Executor *e) { return e->mode == MODE_COMPILED ? compiled_memplan(e->plan) : NULL; }

void executor_free(Executor *e)
{
    if (!e) return;
    compiled_free(e->plan);
    gc_free(e);
}
