/* Ops of the graph IR: the enum, traits and names, from ops.def. */
#ifndef GRAPHC_OPS_H
#define GRAPHC_OPS_H
#include <stdbool.h>
#include "util/elemwise.h"

typedef enum OpKind {
#define OP(e, name, arity, traits, shape, grad, kernel) OP_##e,
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
    OPT_UNARY    = 1 << 6,  /* an elementwise function of util/elemwise.def, one input */
    OPT_BINARY   = 1 << 7,  /* an elementwise function of util/elemwise.def, two inputs */
};

typedef struct OpInfo {
    const char *name;
    int arity;          /* -1: variadic */
    unsigned traits;
    /* OPT_UNARY and OPT_BINARY: the function's EwUnary or EwBinary; else -1 */
    int ew;
    /* OPT_UNARY: what its gradient reads (EW_READS_X or EW_READS_Y), the name of its one
     * numeric parameter in the language or NULL, and the parameter's default */
    int reads;
    const char *param;
    float param_default;
} OpInfo;

extern const OpInfo op_info[OP_COUNT];
static inline const char *op_name(OpKind k) { return (unsigned)k < OP_COUNT ? op_info[k].name : "?"; }
static inline bool op_has(OpKind k, unsigned traits) { return (op_info[k].traits & traits) != 0; }
/* The op of an elementwise unary function, by its EwUnary; OP_COUNT if none. */
OpKind op_of_unary(int ew);
/* The op named `name`, or OP_COUNT. */
OpKind op_by_name(const char *name);

#endif
