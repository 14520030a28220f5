#include <string.h>
#include "graph/ops.h"

const OpInfo op_info[OP_COUNT] = {
#define OP(e, name, arity, traits, shape, grad, kernel) [OP_##e] = { name, arity, traits, -1, 0, NULL, 0.0f },
#define EWOP(e, name, arity, traits, shape, grad, kernel, ew, reads, param, def) \
    [OP_##e] = { name, arity, traits, ew, reads, param, def },
#include "graph/ops.def"
#undef OP
#undef EWOP
};

OpKind op_of_unary(int ew)
{
    static const OpKind ops[] = {
#define BINARY(E, name)
#define UNARY(E, name, reads, param, def) OP_##E,
#include "util/elemwise.def"
#undef BINARY
#undef UNARY
    };
    return ew >= 0 && ew < (int)(sizeof ops / sizeof ops[0]) ? ops[ew] : OP_COUNT;
}

OpKind op_by_name(const char *name)
{
    for (int k = 0; k < OP_COUNT; k++)
        if (strcmp(op_info[k].name, name) == 0) return (OpKind)k;
    return OP_COUNT;
}
