#include "graph/ops.h"

const OpInfo op_info[OP_COUNT] = {
#define OP(e, name, arity, traits) [OP_##e] = { name, arity, traits },
#include "graph/ops.def"
#undef OP
};
