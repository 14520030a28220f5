/* The importer's insides, shared by onnx/import.c (the model: checks, values, tensors,
 * attributes, order), onnx/import_ops.c (one converter per ONNX op) and onnx/emit.c
 * (the .net text).
 *
 * An ONNX value becomes an IVal: a tensor of the graph being built (a graphc node), a
 * constant float tensor (an initializer or Constant, made a param or a scalar constant
 * where an op reads it), or a short vector of integers (a shape, an axis list), whose
 * entries may be the batch symbol where it was read from a shape.
 *
 * graphc has no transpose, so a tensor's layout is tracked instead of changed: an ONNX
 * image [N, C, H, W] is held as graphc's [N, H, W, C] (LAY_NCHW), and a flatten of one
 * as [N, H*W*C] whose element order differs from ONNX's [N, C*H*W] (LAY_FLAT, undone in
 * the weights of the dense layer that reads it). */
#ifndef GRAPHC_ONNX_IMP_H
#define GRAPHC_ONNX_IMP_H
#include "onnx/onnx.h"
#include "onnx/opmap.h"
#include "onnx/pb.h"

typedef enum Lay {
    LAY_SAME,   /* graphc's tensor is ONNX's */
    LAY_NCHW,   /* ONNX [N, C, H, W] held as [N, H, W, C] */
    LAY_NC11,   /* ONNX [N, C, 1, 1] held as [N, C] (a global pool's output) */
    LAY_FLAT,   /* ONNX [N, C*H*W] held as [N, H*W*C]; c, h, w say how */
    LAY_OIHW,   /* a computed filter: ONNX [O, I, H, W] held as graphc's [H, W, I, O] */
    LAY_COUNT
} Lay;

typedef enum VKind { VK_NONE, VK_TENSOR, VK_FLOATS, VK_INTS, VK_KIND_COUNT } VKind;

typedef struct IVal {
    const char *name;       /* the ONNX value's name */
    VKind kind;
    int producer;           /* index in graph.node, or -1 (input, initializer) */
    int uses;               /* readers among the nodes the outputs need, and outputs */
    /* VK_TENSOR */
    int32_t node;
    Lay lay;
    int64_t c, h, w;        /* LAY_FLAT */
    bool padded;            /* a Pad's output, zeros around the image that only a Conv
                             * may read (it takes them as its own padding) */
    int64_t pad[4];         /* padded: top, left, bottom, right */
    /* VK_FLOATS: the ONNX shape and row-major data; VK_INTS: a vector (rank 1) or a
     * scalar (rank 0) of integers, each a number (sym < 0) or v times symbol sym */
    int rank;
    int64_t dims[MAX_RANK];
    int64_t numel;
    float *f;
    Dim *iv;
} IVal;

typedef struct NameMap NameMap;

/* A param made from a constant, transformed for the op that reads it (filters from
 * OIHW, a Gemm's transposed weights, rows reordered for a LAY_FLAT input...): the same
 * constant read the same way gives the same param, so shared weights stay shared. */
typedef struct ParamKey {
    int val;                /* the IVal */
    int xform;              /* XF_* */
    int64_t c, h, w;        /* XF_* with a flat input's row order */
    float scale;            /* Gemm's alpha or beta */
} ParamKey;

typedef struct Imp {
    const char *file;       /* the ONNX file's name, for messages */
    DiagSink *d;
    const Onnx__GraphProto *gp;
    int64_t opset;          /* of the default domain */
    Graph *g;               /* the graph being built (no source) */
    float **vdata;          /* vdata[v]: the values of g's var v */
    int vdata_cap;
    IVal *vals;
    int nvals, vals_cap;
    NameMap *map;           /* value name -> index in vals */
    ParamKey *pkeys;        /* pkeys[i] made param node pnode[i] */
    int32_t *pnode;
    int npk, pk_cap;
    int cur;                /* the node being converted (index in graph.node), or -1 */
    char producer[160];     /* who wrote the model, for the .net file's header */
    bool oom;
} Imp;

/* ---- import.c ----------------------------------------------------------------------- */
/* Reports "FILE: node N 'name' (Op): message" while a node is converted, else
 * "FILE: message"; returns false. */
bool imp_fail(Imp *I, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool imp_oom(Imp *I);
/* The value an input of the current node names (NULL: absent or empty, as optional
 * inputs are). */
IVal *imp_in(Imp *I, const Onnx__NodeProto *n, size_t k);
/* Defines output k of the current node (v's kind and fields copied). */
bool imp_set_out(Imp *I, const Onnx__NodeProto *n, size_t k, const IVal *v);
/* Fails if output k >= 1 of node n is read by anything. */
bool imp_extra_outputs_unused(Imp *I, const Onnx__NodeProto *n, size_t from);

/* Attributes, checked for type and range; absent ones take `def`. */
const Onnx__AttributeProto *imp_attr(const Onnx__NodeProto *n, const char *name);
bool imp_attr_int(Imp *I, const Onnx__NodeProto *n, const char *name, int64_t def, int64_t lo, int64_t hi, int64_t *out);
bool imp_attr_float(Imp *I, const Onnx__NodeProto *n, const char *name, float def, float *out);
/* An INTS attribute of exactly `count` values in [lo, hi] (count < 0: up to MAX_RANK);
 * *got is how many (0 when absent). */
bool imp_attr_ints(Imp *I, const Onnx__NodeProto *n, const char *name, int count, int64_t lo, int64_t hi, int64_t *out, int *got);
/* A STRING attribute, or def; NUL-terminated copy into buf. */
bool imp_attr_string(Imp *I, const Onnx__NodeProto *n, const char *name, const char *def, char *buf, size_t size);
/* A TensorProto as a constant IVal (floats, or integers of rank <= 1). */
bool imp_tensor(Imp *I, const Onnx__TensorProto *t, const char *what, IVal *out);

/* The ONNX shape of a tensor value, as its layout makes it from graphc's. */
Shape imp_onnx_shape(const Imp *I, const IVal *v);
/* A graphc node: graph_add_inferred, its shape error reported as the current node's. */
int32_t imp_node(Imp *I, OpKind op, const int32_t *in, int nin, const NodeAttr *a, const Shape *tshape);
/* A param of `shape` whose values are `data` (copied), under a name made from `name`. */
int32_t imp_param(Imp *I, const char *name, Shape shape, const float *data);

/* ---- import_ops.c ------------------------------------------------------------------- */
typedef bool (*ImpOpFn)(Imp *I, const Onnx__NodeProto *n);
/* The converter of an ONNX op type, its accepted attributes (NULL-terminated), and
 * how many inputs it takes; NULL when graphc does not know the op. */
typedef struct ImpOp {
    const char *type;
    ImpOpFn fn;
    int min_in, max_in;
    const char *attrs[8];
} ImpOp;
const ImpOp *imp_op(const char *type);
/* The op types graphc imports, for the message about one it does not. */
void imp_op_list(char *buf, size_t size);
/* Whether a rank-4 graph input is an NCHW image (then graphc's input is its NHWC
 * transposition) rather than a tensor to take as it is. */
bool imp_input_is_image(Imp *I, const char *name);

/* ---- emit.c ------------------------------------------------------------------------- */
/* The .net text of graph g (outputs, inputs, params with their values in vdata);
 * renames g's vars to the names the text gives them (Keras' for layers).  NULL after
 * reporting. `header` is the comment written first. */
char *imp_emit(Graph *g, const char *header, DiagSink *d);

#endif
