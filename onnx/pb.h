/* protobuf-c for the ONNX code: allocation through gc_malloc (so tests can make it
 * fail), messages built in an Arena, and a bounded check of the wire format before
 * protobuf-c unpacks it (protobuf-c recurses into nested messages without a limit). */
#ifndef GRAPHC_ONNX_PB_H
#define GRAPHC_ONNX_PB_H
#include "onnx/onnx.pb-c.h"
#include "util/diag.h"
#include "util/mem.h"

/* Nested messages deeper than this are refused (ONNX models nest about 6 deep). */
#define PB_MAX_DEPTH 32

/* The allocator protobuf-c unpacks with: gc_malloc and gc_free. */
extern ProtobufCAllocator pb_allocator;

/* Whether bytes[0..len) is a well-formed message of descriptor `desc` with nesting at
 * most PB_MAX_DEPTH; false with the reason in why[0..n). */
bool pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *bytes, size_t len, char *why, size_t n);

/* A zeroed message of `desc` from the arena, initialised (NULL when out of memory). */
void *pb_new(Arena *a, const ProtobufCMessageDescriptor *desc);

#endif
