/* Pictures of the memory plan: `graphc dump --stage planned` in text, SVG, and as the
 * fused graph's dot and json with each node's buffer, scratch and stage added
 * (docs/dump-formats.md). */
#include <string.h>
#include "exec/memplan.h"

void memplan_dump_text(const Graph *g, const MemPlan *mp, FILE *out)
{
    fprintf(out, "plan %s (stage planned): %d nodes\n", g->model_name ? g->model_name : "(unnamed)", g->nnodes);
    fprintf(out, "naive sum %lld bytes, lower bound %lld, arena %lld (%.3fx the lower bound, %.2fx below the naive sum), "
            "largest scratch %lld (in the arena), %d op%s in place\n",
            (long long)mp->naive, (long long)mp->lower_bound, (long long)mp->arena,
            mp->lower_bound ? (double)mp->arena / (double)mp->lower_bound : 1.0,
            mp->arena ? (double)mp->naive / (double)mp->arena : 1.0, (long long)mp->scratch, mp->inplace,
            mp->inplace == 1 ? "" : "s");
    fprintf(out, "%d stages for %d threads, %d of them running several ops at once (\"stage S/T\": stage S, on thread T)\n",
            mp->nstages, mp->threads, mp->parallel);
    fprintf(out, "%-6s %-20s %12s %12s %6s %6s\n", "node", "op", "offset", "bytes", "from", "to");
    for (int b = 0; b < mp->nbuf; b++) {
        int i = b < mp->n ? b : b - mp->n;
        const Node *n = &g->nodes[i];
        if (mp->offset[b] < 0 || (b >= mp->n && mp->size[b] == 0)) continue;
        char st[48] = "";
        if (b < mp->n && plan_runs(n) && stage_calls(g, mp, mp->stage[i]) > 1)
            snprintf(st, sizeof st, "  stage %d/%d", mp->stage[i], mp->bin[i]);
        fprintf(out, "%%%-5d %-20s %12lld %12lld %6d %6d%s%s\n", i, op_name(n->op), (long long)mp->offset[b],
                (long long)mp->size[b], mp->first[b], mp->last[b],
                b >= mp->n ? "  (scratch)" : mp->size[b] == 0 ? "  (view or in place)" : "", st);
    }
}

/* Buffers as boxes on an offset-versus-time chart: x is the node index (time), y the
 * arena offset; a dashed line marks the lower bound. */
void memplan_dump_svg(const Graph *g, const MemPlan *mp, FILE *out)
{
    const double W = 960, H = 540, L = 70, R = 20, T = 40, B = 50;
    double tmax = mp->n > 0 ? mp->n + 1 : 1, ymax = (double)(mp->arena > mp->lower_bound ? mp->arena : mp->lower_bound);
    if (ymax <= 0) ymax = 1;
    double sx = (W - L - R) / tmax, sy = (H - T - B) / ymax;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
            "font-size=\"11\">\n", W, H);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(out, "<text x=\"%.0f\" y=\"22\" font-size=\"14\" font-weight=\"bold\">memory plan of %s: arena %.2f MB, "
            "lower bound %.2f MB, naive sum %.2f MB</text>\n",
            L, g->model_name ? g->model_name : "model", mp->arena / 1e6, mp->lower_bound / 1e6, mp->naive / 1e6);
    for (int b = 0; b < mp->nbuf; b++) {
        int i = b < mp->n ? b : b - mp->n;
        if (mp->offset[b] < 0 || mp->size[b] == 0) continue;
        double x = L + mp->first[b] * sx, w = (mp->last[b] - mp->first[b] + 1) * sx;
        double y = H - B - (double)(mp->offset[b] + mp->size[b]) * sy, h = (double)mp->size[b] * sy;
        unsigned hue = b >= mp->n ? 0u : (unsigned)(g->nodes[i].op * 47u % 360u);
        fprintf(out, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"hsl(%u,60%%,70%%)\" "
                "stroke=\"#333\" stroke-width=\"0.5\"><title>%%%d %s: %.2f MB, live %d..%d</title></rect>\n",
                x, y, w > 0.5 ? w : 0.5, h > 0.5 ? h : 0.5, hue, i, op_name(g->nodes[i].op), mp->size[b] / 1e6,
                mp->first[b], mp->last[b]);
    }
    double lb = H - B - (double)mp->lower_bound * sy;
    fprintf(out, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#c00\" stroke-dasharray=\"6,4\"/>\n", L, lb,
            W - R, lb);
    fprintf(out, "<text x=\"%.0f\" y=\"%.2f\" fill=\"#c00\" text-anchor=\"end\">lower bound</text>\n", W - R, lb - 4);
    fprintf(out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
    fprintf(out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T, L, H - B);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">time (node index in execution order)</text>\n",
            (L + W - R) / 2, H - 15);
    fprintf(out, "<text x=\"15\" y=\"%.0f\" transform=\"rotate(-90 15 %.0f)\" text-anchor=\"middle\">arena offset</text>\n",
            (T + H - B) / 2, (T + H - B) / 2);
    for (int k = 0; k <= 4; k++) {
        double v = ymax * k / 4, y = H - B - v * sy;
        fprintf(out, "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\">%.1f MB</text>\n", L - 4, y + 4, v / 1e6);
    }
    fputs("</svg>\n", out);
}

typedef struct PlanCtx {
    const Graph *g;
    const MemPlan *mp;
} PlanCtx;

/* A node of a stage of several ops: which stage, on which thread. */
static bool in_parallel_stage(const PlanCtx *c, int i)
{
    return plan_runs(&c->g->nodes[i]) && c->mp->stage && stage_calls(c->g, c->mp, c->mp->stage[i]) > 1;
}

static void plan_node(const void *ctx, int i, bool json, FILE *out)
{
    const PlanCtx *c = ctx;
    const MemPlan *mp = c->mp;
    int s = mp->n + i;
    bool buf = mp->offset[i] >= 0, scratch = mp->offset[s] >= 0 && mp->size[s] > 0;
    if (json) {
        if (buf)
            fprintf(out, ", \"buffer\": {\"offset\": %lld, \"bytes\": %lld, \"from\": %d, \"to\": %d}",
                    (long long)mp->offset[i], (long long)mp->size[i], mp->first[i], mp->last[i]);
        else
            fputs(", \"buffer\": null", out);
        if (scratch)
            fprintf(out, ", \"scratch\": {\"offset\": %lld, \"bytes\": %lld}", (long long)mp->offset[s],
                    (long long)mp->size[s]);
        else
            fputs(", \"scratch\": null", out);
        if (mp->root[i] != i) fprintf(out, ", \"in_buffer_of\": %d", mp->root[i]);
        fprintf(out, ", \"stage\": %d, \"thread\": %d", mp->stage ? mp->stage[i] : 0, mp->bin ? mp->bin[i] : 0);
        return;
    }
    if (buf && mp->size[i] > 0)
        fprintf(out, "\\noffset %lld, %lld bytes, live %d..%d", (long long)mp->offset[i], (long long)mp->size[i],
                mp->first[i], mp->last[i]);
    else if (buf)
        fprintf(out, "\\nin %%%d's buffer (view or in place)", mp->root[i]);
    if (scratch) fprintf(out, "\\nscratch %lld bytes at %lld", (long long)mp->size[s], (long long)mp->offset[s]);
    if (in_parallel_stage(c, i)) fprintf(out, "\\nstage %d/%d", mp->stage[i], mp->bin[i]);
}

static void plan_top(const void *ctx, bool json, FILE *out)
{
    const PlanCtx *c = ctx;
    const MemPlan *mp = c->mp;
    if (json) {
        fprintf(out, ",\n \"plan\": {\"threads\": %d, \"arena\": %lld, \"lower_bound\": %lld, \"naive\": %lld, "
                "\"largest_scratch\": %lld, \"in_place\": %d, \"stages\": %d, \"parallel_stages\": %d, \"per_op\": %s}",
                mp->threads, (long long)mp->arena, (long long)mp->lower_bound, (long long)mp->naive,
                (long long)mp->scratch, mp->inplace, mp->nstages, mp->parallel, mp->per_op ? "true" : "false");
        return;
    }
    fprintf(out, "  labelloc=t;\n  label=\"memory plan: arena %lld bytes, lower bound %lld, naive sum %lld; "
            "%d stages for %d threads\";\n", (long long)mp->arena, (long long)mp->lower_bound, (long long)mp->naive,
            mp->nstages, mp->threads);
    /* the ops of each stage that runs several at once, boxed together */
    for (int st = 0; mp->stage && st < mp->nstages; st++) {
        bool open = false;
        for (int i = 0; i < mp->n; i++) {
            if (mp->stage[i] != st || !in_parallel_stage(c, i)) continue;
            if (!open) fprintf(out, "  subgraph cluster_stage%d {\n    label=\"stage %d: at once\"; style=dashed;\n   ", st, st);
            open = true;
            fprintf(out, " n%d;", i);
        }
        if (open) fputs("\n  }\n", out);
    }
}

void memplan_dump_dot(const Graph *g, const MemPlan *mp, FILE *out)
{
    PlanCtx c = { g, mp };
    DumpExtra x = { .stage = "planned", .node = plan_node, .top = plan_top, .ctx = &c };
    graph_dump_dot_extra(g, &x, out);
}

void memplan_dump_json(const Graph *g, const MemPlan *mp, FILE *out)
{
    PlanCtx c = { g, mp };
    DumpExtra x = { .stage = "planned", .node = plan_node, .top = plan_top, .ctx = &c };
    graph_dump_json_extra(g, &x, out);
}
