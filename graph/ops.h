/* Ops of the graph IR: the enum, traits and names, from ops.def. */
#ifndef GRAPHC_OPS_H
#define GRAPHC_OPS_H

typedef enum OpKind {
#define OP(e, name, arity, traits) OP_##e,
#include "graph/ops.def"
#undef OP
    OP_COUNT
} OpKind;

enum {
    OPT_SOURCE   = 1 << 0,  /* no inputs: data comes from outside the graph */
    OPT_ELEMWISE = 1 << 1,  /* output[i] depends on inputs at i only (after broadcast) */
    OPT_INPLACE  = 1 << 2,  /* the output may share input 0's buffer (same size) */
    OPT_INTERNAL = 1 << 3,  /* made by passes, not callable from a .net file */
    OPT_UPDATE   = 1 << 4,  /* writes persistent state: never removed, runs last */
    OPT_VIEW     = 1 << 5,  /* output is input 0's data reinterpreted (no copy needed) */
};

typedef struct OpInfo {
    const char *name;
    int arity;      /* -1: variadic */
    unsigned traits;
} OpInfo;

extern const OpInfo op_info[OP_COUNT];
static inline const char *op_name(OpKind k) { return op_info[k].name; }

#endif
