/* Batch norm's kernels as the op table names them (graph/ops.def), apart from
 * exec/dispatch.c, whose table takes them from here: each turns a node into the
 * arguments of kernels/bnorm.c's functions. */
#ifndef GRAPHC_DISPATCH_BNORM_H
#define GRAPHC_DISPATCH_BNORM_H
#include "exec/exec.h"

int k_bn_stats(const KCall *c);
int k_batch_norm(const KCall *c);   /* batch_norm and batch_norm_infer */
int k_bn_grad_params(const KCall *c);
int k_bn_grad(const KCall *c);
int k_bn_update(const KCall *c);
/* The scratch of a batch norm op (kern_bn_scratch over its channels); 0 for any other. */
size_t dispatch_bn_scratch(const Graph *g, const Node *n);

#endif
