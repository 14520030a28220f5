/* ONNX export and import (docs/onnx.md), through protobuf-c and the C that protoc-c
 * generates from onnx.proto at build time.  Built only with ONNX support (HAVE_ONNX).
 *
 * Export writes an inference graph (pass_inference's) as an ONNX model, NCHW inside
 * with the model's NHWC interface kept: a Transpose where an image enters the
 * convolutions and where one leaves them.  Import reads a model made of the ops graphc
 * knows into a .net file and the weights it declares.
 *
 * Ownership: onnx_export's buffer is the caller's (gc_free); an OnnxImport owns its
 * text, graph and weights until onnx_import_free. */
#ifndef GRAPHC_ONNX_H
#define GRAPHC_ONNX_H
#include <stdint.h>
#include "exec/exec.h"

#define ONNX_OPSET 13       /* the opset export writes */
#define ONNX_IR_VERSION 7   /* the IR version of opset 13 */

/* The ONNX model of the inference graph `g` (symbols unbound, from pass_inference)
 * with the values of its vars in `w`, serialized into *out (*len bytes).  Only the
 * inputs the outputs need are the model's inputs.  An op with no ONNX form is an error
 * at its .net line (d's source).  0, or -1 after reporting to d. */
int onnx_export(const Graph *g, const Weights *w, uint8_t **out, size_t *len, DiagSink *d);

typedef struct OnnxImport {
    Source net;      /* the .net file: its name (net_name as given) and text */
    Graph *graph;    /* net's graph, lowered and inferred */
    Weights w;       /* the values of graph's vars, from the ONNX initializers */
} OnnxImport;

/* Reads the ONNX model in bytes[0..len) (`name` names it in messages) into a .net
 * file called net_name, its graph and its weights.  Every field is checked; a model
 * with an op graphc does not know, or that needs a layout change graphc cannot
 * express, is an error naming the node, its op type and its position in graph.node.
 * 0, or -1 after reporting to d (then *m holds nothing). */
int onnx_import(const void *bytes, size_t len, const char *name, const char *net_name, OnnxImport *m, DiagSink *d);
/* Largest ONNX file read: protobuf's own limit. */
#define ONNX_MAX_BYTES ((size_t)2 << 30)
/* onnx_import of the file at `path` (graphc import, the C API): 0, -1 (the file could
 * not be read) or -2 (it is not a model graphc can import), after reporting to d. */
int onnx_import_file(const char *path, const char *net_name, OnnxImport *m, DiagSink *d);
void onnx_import_free(OnnxImport *m);

/* Whether graphs a and b compute the same thing from their outputs back: the same ops
 * with the same attributes, shapes, dtypes and inputs in the same order, inputs of the
 * same shapes and dtypes, the same constants, and params of the same shapes
 * (with wa and wb not NULL, also the same values, bit for bit).  Names are not
 * compared.  false with the first difference in why[0..n). */
bool onnx_graphs_match(const Graph *a, const Weights *wa, const Graph *b, const Weights *wb, char *why, size_t n);

#endif
