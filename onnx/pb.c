/* protobuf-c helpers (see pb.h). */
#include <stdio.h>
#include <string.h>
#include "onnx/pb.h"

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return gc_malloc(size ? size : 1);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    gc_free(p);
}

ProtobufCAllocator pb_allocator = { pb_alloc, pb_free, NULL };

void *pb_new(Arena *a, const ProtobufCMessageDescriptor *desc)
{
    ProtobufCMessage *m = arena_alloc(a, desc->sizeof_message);
    if (m) desc->message_init(m);
    return m;
}

typedef struct Wire {
    const uint8_t *p, *end;
} Wire;

static bool varint(Wire *w, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (w->p >= w->end) return false;
        uint8_t b = *w->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;   /* more than 10 bytes */
}

/* One message's fields, walking into the nested messages the schema declares, with
 * an explicit depth so that a crafted file cannot exhaust the stack. */
static bool check_msg(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len, int depth, char *why, size_t n)
{
    if (depth > PB_MAX_DEPTH) {
        snprintf(why, n, "messages nested more than %d deep", PB_MAX_DEPTH);
        return false;
    }
    Wire w = { p, p + len };
    while (w.p < w.end) {
        uint64_t key, v;
        if (!varint(&w, &key)) { snprintf(why, n, "a truncated field key in %s", desc->name); return false; }
        uint32_t tag = (uint32_t)(key >> 3);
        int type = (int)(key & 7);
        if (tag == 0 || key >> 3 > 0x1fffffff) { snprintf(why, n, "a bad field number in %s", desc->name); return false; }
        switch (type) {
        case PROTOBUF_C_WIRE_TYPE_VARINT:
            if (!varint(&w, &v)) { snprintf(why, n, "a truncated number in %s", desc->name); return false; }
            break;
        case PROTOBUF_C_WIRE_TYPE_64BIT: case PROTOBUF_C_WIRE_TYPE_32BIT: {
            size_t k = type == PROTOBUF_C_WIRE_TYPE_64BIT ? 8 : 4;
            if ((size_t)(w.end - w.p) < k) { snprintf(why, n, "a truncated number in %s", desc->name); return false; }
            w.p += k;
            break;
        }
        case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: {
            if (!varint(&w, &v) || v > (uint64_t)(w.end - w.p)) {
                snprintf(why, n, "a field of %s runs past the end of its message", desc->name);
                return false;
            }
            const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(desc, tag);
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
                !check_msg(f->descriptor, w.p, (size_t)v, depth + 1, why, n))
                return false;
            w.p += v;
            break;
        }
        default:
            snprintf(why, n, "wire type %d (groups or worse) in %s", type, desc->name);
            return false;
        }
    }
    return true;
}

bool pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *bytes, size_t len, char *why, size_t n)
{
    return check_msg(desc, bytes, len, 0, why, n);
}
