/* The op mapping table (see opmap.h). */
#include <string.h>
#include "onnx/opmap.h"

static const OnnxOp table[] = {
    /* graphc op          kind            ONNX op_type          .net form */
    { OP_INPUT,           OM_INPUT,       NULL,                 "input" },
    { OP_PARAM,           OM_PARAM,       NULL,                 "param" },
    { OP_CONST,           OM_CONST,       NULL,                 NULL },
    { OP_MATMUL,          OM_MATMUL,      "MatMul",             "matmul" },
    { OP_CONV2D,          OM_CONV,        "Conv",               "conv2d" },
    { OP_ADD,             OM_BINARY,      "Add",                "+" },
    { OP_SUB,             OM_BINARY,      "Sub",                "-" },
    { OP_MUL,             OM_BINARY,      "Mul",                "*" },
    { OP_DIV,             OM_BINARY,      "Div",                "/" },
    { OP_NEG,             OM_UNARY,       "Neg",                "-" },
    { OP_RELU,            OM_UNARY,       "Relu",               "relu" },
    { OP_SIGMOID,         OM_UNARY,       "Sigmoid",            "sigmoid" },
    { OP_TANH,            OM_UNARY,       "Tanh",               "tanh" },
    { OP_EXP,             OM_UNARY,       "Exp",                "exp" },
    { OP_LOG,             OM_UNARY,       "Log",                "log" },
    { OP_SQRT,            OM_UNARY,       "Sqrt",               "sqrt" },
    { OP_SOFTMAX,         OM_ROWS,        "Softmax",            "softmax" },
    { OP_LOG_SOFTMAX,     OM_ROWS,        "LogSoftmax",         "log_softmax" },
    { OP_MAXPOOL,         OM_POOL,        "MaxPool",            "maxpool" },
    { OP_AVGPOOL,         OM_POOL,        "AveragePool",        "avgpool" },
    { OP_GLOBAL_AVGPOOL,  OM_GLOBAL_POOL, "GlobalAveragePool",  "global_avgpool" },
    { OP_RESHAPE,         OM_RESHAPE,     "Reshape",            "reshape" },
    { OP_CONCAT,          OM_CONCAT,      "Concat",             "concat" },
    { OP_DROPOUT,         OM_IDENTITY,    "Identity",           NULL },
    { OP_BATCH_NORM_INFER, OM_BATCH_NORM, "BatchNormalization", NULL },
};

const OnnxOp *onnx_op_of(OpKind op)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].op == op) return &table[i];
    return NULL;
}

const OnnxOp *onnx_op_named(const char *type)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].onnx && strcmp(table[i].onnx, type) == 0) return &table[i];
    return NULL;
}

const OnnxOp *onnx_op_kind(OmKind kind)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].kind == kind) return &table[i];
    return NULL;
}

bool om_same_attrs(const Node *a, const Node *b)
{
    const OnnxOp *m = onnx_op_of(a->op);
    if (!m || a->op != b->op) return false;
    switch (m->kind) {
    case OM_CONV: case OM_POOL: {
        const WinAttr *x = om_win(a), *y = om_win(b);
        return x->kh == y->kh && x->kw == y->kw && x->sh == y->sh && x->sw == y->sw && x->padding == y->padding &&
               x->pt == y->pt && x->pb == y->pb && x->pl == y->pl && x->pr == y->pr;
    }
    case OM_CONCAT: return om_concat_axis(a) == om_concat_axis(b);
    case OM_CONST: {
        float va = om_const_value(a), vb = om_const_value(b);
        return memcmp(&va, &vb, sizeof va) == 0;   /* bit for bit: -0 is not 0 */
    }
    case OM_MATMUL: return om_matmul_ta(a) == om_matmul_ta(b) && om_matmul_tb(a) == om_matmul_tb(b);
    case OM_RESHAPE: return shape_eq(&a->shape, &b->shape);
    case OM_BATCH_NORM: return om_bn_eps(a) == om_bn_eps(b) && om_bn_momentum(a) == om_bn_momentum(b);
    default: return true;
    }
}
