/* The one place where the ONNX code meets graphc's ops: which OpKind becomes which ONNX
 * op and how it is written in a .net file, and the node attributes the exporter reads
 * and the importer sets.  A rename in graph/ops.def or graph/graph.h's NodeAttr is a
 * change here and nowhere else in onnx/. */
#ifndef GRAPHC_ONNX_OPMAP_H
#define GRAPHC_ONNX_OPMAP_H
#include "graph/graph.h"

/* How an op is exported and imported: the exporter and the importer switch on this,
 * never on an OpKind. */
typedef enum OmKind {
    OM_INPUT, OM_PARAM, OM_CONST,
    OM_UNARY,        /* elementwise, one input, any layout */
    OM_BINARY,       /* elementwise with broadcasting */
    OM_ROWS,         /* softmax-like, along the last axis */
    OM_MATMUL,
    OM_CONV,
    OM_POOL,         /* a window: maxpool, avgpool */
    OM_GLOBAL_POOL,
    OM_RESHAPE,
    OM_CONCAT,
    OM_IDENTITY,     /* at inference (dropout) */
    OM_BATCH_NORM,   /* batch norm's inference form: the running statistics */
    OM_KIND_COUNT
} OmKind;

typedef struct OnnxOp {
    OpKind op;
    OmKind kind;
    const char *onnx;   /* the ONNX op_type (NULL: a source, no node) */
    const char *net;    /* its .net form: a function name, or an operator ("+", "-") */
} OnnxOp;

/* The entry of a graphc op, or NULL when it has no ONNX form. */
const OnnxOp *onnx_op_of(OpKind op);
/* The entry whose ONNX op_type is `type` (the first, for ops two graphc ops share). */
const OnnxOp *onnx_op_named(const char *type);
/* The entry of kind `kind` (for the sources and the kinds with one op). */
const OnnxOp *onnx_op_kind(OmKind kind);
/* The graphc op of a kind with one op (om_op(OM_CONV)), or of an ONNX op type
 * (om_op_named("Add")): code outside this table names no OpKind. */
static inline OpKind om_op(OmKind kind) { return onnx_op_kind(kind)->op; }
static inline OpKind om_op_named(const char *type) { return onnx_op_named(type)->op; }

/* ---- node attributes ---------------------------------------------------------------- */
static inline const WinAttr *om_win(const Node *n) { return &n->a.win; }
static inline int om_concat_axis(const Node *n) { return n->a.concat.axis; }
static inline float om_const_value(const Node *n) { return n->a.cnst.value; }
static inline int om_param_var(const Node *n) { return n->a.param.var; }
static inline bool om_matmul_ta(const Node *n) { return n->a.matmul.ta; }
static inline bool om_matmul_tb(const Node *n) { return n->a.matmul.tb; }
static inline float om_bn_eps(const Node *n) { return n->a.bn.eps; }
static inline float om_bn_momentum(const Node *n) { return n->a.bn.momentum; }

static inline NodeAttr om_attr_win(int kh, int kw, int sh, int sw, Padding p)
{
    return (NodeAttr){ .win = { .kh = kh, .kw = kw, .sh = sh, .sw = sw, .padding = p, .act = -1 } };
}
static inline NodeAttr om_attr_concat(int axis) { return (NodeAttr){ .concat = { axis } }; }
static inline NodeAttr om_attr_const(float v) { return (NodeAttr){ .cnst = { v } }; }
static inline NodeAttr om_attr_param(int var) { return (NodeAttr){ .param = { var } }; }
static inline NodeAttr om_attr_input(int index) { return (NodeAttr){ .input = { index } }; }
static inline NodeAttr om_attr_matmul(void) { return (NodeAttr){ .matmul = { false, false, -1 } }; }

/* Whether two nodes of the same op have the same attributes (what a .net file can say:
 * windows, strides, padding, axes, constants, reshape targets). */
bool om_same_attrs(const Node *a, const Node *b);

#endif
