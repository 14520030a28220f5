/* The bytes a step moves: what each kernel must read and write at least, counted from
 * the bound graph's shapes.  See exec.h (exec_node_bytes).  A memory-bound step (a large
 * image through a 3-channel first layer) is held against these bytes at the machine's
 * measured bandwidth, as a compute-bound one is against its flops at the FMA peak. */
#include "exec/exec.h"

static double var_bytes(const Graph *g, int var) { return var >= 0 ? (double)shape_numel(&g->vars[var].shape) * 4 : 0; }

/* A parameter var's update: its values written back and its optimizer state read and
 * written (its values' read is counted with the node's inputs). */
static double update_writes(const Graph *g, int var)
{
    int st[OPTIM_MAX_STATE];
    return var_bytes(g, var) * (1 + 2 * graph_state_vars(g, var, st));
}

/* The node whose buffer a value is (through reshape views). */
static int32_t base(const Graph *g, int32_t id)
{
    while (g->nodes[id].op == OP_RESHAPE) id = g->nodes[id].in[0];
    return id;
}

double exec_node_bytes(const Graph *g, const Node *n, int threads)
{
    if (n->op == OP_INPUT || n->op == OP_PARAM || n->op == OP_RESHAPE) return 0;
    double bytes = 0;
    /* each buffer read once, however many of the inputs name it */
    for (int k = 0; k < n->nin; k++) {
        int32_t b = base(g, n->in[k]);
        bool seen = false;
        for (int j = 0; j < k && !seen; j++) seen = base(g, n->in[j]) == b;
        if (!seen) bytes += (double)node_bytes(&g->nodes[b]);
    }
    switch (n->op) {
    case OP_SGD_UPDATE: case OP_MOMENTUM_UPDATE: case OP_ADAM_UPDATE: case OP_ADAMW_UPDATE: case OP_RMSPROP_UPDATE:
    case OP_MATMUL_UPDATE:
        return bytes + update_writes(g, n->a.update.var);
    case OP_UPDATE_ALL:
        for (int k = 0; k + 1 < n->nin; k += 2) bytes += update_writes(g, g->nodes[base(g, n->in[k])].a.param.var);
        return bytes;
    case OP_MATMUL_GRAD_UPDATE:   /* its output is a gradient, written like any */
        bytes += update_writes(g, n->a.update.var);
        break;
    case OP_MAXPOOL_VALUES:   /* reads the first half of its input, its own size */
        bytes -= (double)node_bytes(n);
        break;
    default:
        break;
    }
    return bytes + (double)node_bytes(n) + (double)dispatch_scratch_traffic(g, n, threads);
}

double exec_step_bytes(const Graph *g, int threads)
{
    double bytes = 0;
    for (int i = 0; i < g->nnodes; i++) bytes += exec_node_bytes(g, &g->nodes[i], threads);
    return bytes;
}
