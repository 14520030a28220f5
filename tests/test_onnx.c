/* ONNX export and import (onnx/): every shipped model exported and imported back is
 * the same graph with the same weights bit for bit (and the same dump, names aside);
 * damaged and unsupported models are refused with a message that names the field or
 * the node, its op type and its position; allocation failures and damaged bytes give
 * errors, never crashes (the libFuzzer target fuzz/fuzz_onnx.c goes further). */
#include <check.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "exec/exec.h"
#include "graph/lower.h"
#include "graph/passes.h"
#include "onnx/onnx.h"
#include "onnx/pb.h"
#include "util/file.h"
#include "util/rng.h"

static const char *srcdir(void)
{
    const char *s = getenv("top_srcdir");
    return s && *s ? s : ".";
}

/* A model compiled, its inference graph, and random weights (every element, so biases
 * and all take part in the comparisons). */
typedef struct Net {
    Source src;
    DiagSink d;
    Graph *g, *infer;
    Weights w;
} Net;

static void net_from_source(Net *n)
{
    diag_init(&n->d, &n->src);
    ck_assert_msg(compile_source(&n->src, &n->d, NULL, &n->g) == 0 && n->d.nerrors == 0, "%s", n->d.buf ? n->d.buf : "");
    n->infer = pass_inference(n->g, false, &n->d);
    ck_assert_ptr_nonnull(n->infer);
    ck_assert_int_eq(weights_init(&n->w, n->g, 3, &n->d), 0);
    for (int v = 0; v < n->g->nvars; v++)
        for (int64_t i = 0; i < shape_numel(&n->g->vars[v].shape); i++)
            n->w.data[v][i] = 0.2f * (2 * (float)rng_unit(rng_at(5, (uint64_t)v, (uint64_t)i)) - 1);
}

static void net_load(Net *n, const char *model)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s", srcdir(), model);
    memset(n, 0, sizeof *n);
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(source_load(&n->src, path, &d) == 0, "%s", d.buf);
    diag_free(&d);
    net_from_source(n);
}

static void net_text(Net *n, const char *text)
{
    memset(n, 0, sizeof *n);
    ck_assert_int_eq(source_from_string(&n->src, "t.net", text), 0);
    net_from_source(n);
}

static void net_free(Net *n)
{
    weights_free(&n->w);
    graph_free(n->infer);
    graph_free(n->g);
    diag_free(&n->d);
    source_free(&n->src);
}

static void export(Net *n, uint8_t **bytes, size_t *len)
{
    ck_assert_msg(onnx_export(n->infer, &n->w, bytes, len, &n->d) == 0, "%s", n->d.buf ? n->d.buf : "");
}

/* graph_dump_text with what names a value taken out: quoted input names, name=...,
 * var names and source places; what is left is ops, shapes, attributes, inputs. */
static char *dump_without_names(const Graph *g)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    graph_dump_text(g, f);
    fclose(f);
    static const char *const pats[] = { " \"[^\"]*\"", " name=[^ ]*", "@[0-9]+:[0-9]+", "^var [^ ]+", "^graph [^ ]+",
                                        "(param +f32\\[[^]]*\\] +)[^ ]+", "^output [^ ]+", "[ ]+$" };
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        regex_t re;
        ck_assert_int_eq(regcomp(&re, pats[p], REG_EXTENDED | REG_NEWLINE), 0);
        char *out = malloc(strlen(buf) + 1), *o = out;
        const char *s = buf;
        regmatch_t m[2];
        while (regexec(&re, s, 2, m, s == buf || s[-1] == '\n' ? 0 : REG_NOTBOL) == 0 && m[0].rm_eo > 0) {
            memcpy(o, s, (size_t)m[0].rm_so);
            o += m[0].rm_so;
            if (m[1].rm_so >= 0) {   /* keep the group */
                memcpy(o, s + m[1].rm_so, (size_t)(m[1].rm_eo - m[1].rm_so));
                o += m[1].rm_eo - m[1].rm_so;
            }
            s += m[0].rm_eo;
        }
        strcpy(o, s);
        regfree(&re);
        free(buf);
        buf = out;
    }
    return buf;
}

/* The inference graph with only the inputs its outputs need (export drops the others). */
static Graph *needed_inputs_only(const Graph *g)
{
    bool *keep = calloc((size_t)g->nnodes, sizeof *keep);
    int32_t *alias = calloc((size_t)g->nnodes, sizeof *alias);
    for (int i = 0; i < g->noutputs; i++) keep[g->outputs[i].node] = true;
    for (int i = g->nnodes - 1; i >= 0; i--)
        for (int k = 0; keep[i] && k < g->nodes[i].nin; k++) keep[g->nodes[i].in[k]] = true;
    for (int i = 0; i < g->nnodes; i++) alias[i] = i;
    DiagSink d;
    diag_init(&d, NULL);
    Graph *c = graph_rebuild(g, keep, alias, "infer", &d);
    diag_free(&d);
    free(keep);
    free(alias);
    return c;
}

static void roundtrip(const char *model)
{
    Net n;
    net_load(&n, model);
    uint8_t *bytes;
    size_t len;
    export(&n, &bytes, &len);
    OnnxImport im;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(onnx_import(bytes, len, model, "back.net", &im, &d) == 0, "%s: %s", model, d.buf ? d.buf : "");
    char why[512];
    ck_assert_msg(onnx_graphs_match(n.infer, &n.w, im.graph, &im.w, why, sizeof why), "%s: %s", model, why);
    /* and the dumps, names aside, are the same text */
    Graph *orig = needed_inputs_only(n.infer);
    Graph *back = pass_inference(im.graph, false, &d);
    char *a = dump_without_names(orig), *b = dump_without_names(back);
    ck_assert_msg(strcmp(a, b) == 0, "%s: the dumps differ:\n%s\n----\n%s", model, a, b);
    free(a);
    free(b);
    graph_free(orig);
    graph_free(back);
    onnx_import_free(&im);
    diag_free(&d);
    gc_free(bytes);
    net_free(&n);
}

START_TEST(roundtrip_every_model)
{
    static const char *const models[] = { "mnist.net", "mnist-adam.net", "mlp.net", "lenet5.net", "resnet.net",
                                          "siamese.net", "large.net" };
    roundtrip(models[_i]);
}
END_TEST

/* Ops and layouts the shipped models do not have: every elementwise op, a constant in
 * the middle, pools with "same" padding, concat of images, softmax of an image, a
 * reshape that is not a flatten, a filter that is computed, a shared weight, two
 * outputs of one value and an input as an output. */
START_TEST(roundtrip_more_ops)
{
    Net n;
    net_text(&n,
             "input x: f32[B, 9, 7, 3]\n"
             "input v: f32[B, 8]\n"
             "param W: f32[8, 8] = glorot_uniform()\n"
             "param f: f32[3, 3, 3, 4] = glorot_uniform()\n"
             "a = conv2d(x, f, stride=2, padding=\"same\")\n"
             "b = conv2d(x, f * 0.5, stride=2, padding=\"same\")\n"
             "c = concat(a, exp(-b), axis=3)\n"
             "p = maxpool(c, size=3, stride=2, padding=\"same\") + avgpool(c, size=3, stride=2, padding=\"same\")\n"
             "s = softmax(sigmoid(p) - tanh(p) / 2)\n"
             "output img = s\n"
             "output flat = reshape(s, B, 2, -1)\n"
             "u = matmul(matmul(v, W), W)\n"
             "output vec = sqrt(log(u * u + 1)) - log_softmax(global_avgpool(c) + 0)\n"
             "output vec2 = vec\n"
             "output same = v\n");
    uint8_t *bytes;
    size_t len;
    export(&n, &bytes, &len);
    OnnxImport im;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(onnx_import(bytes, len, "more.onnx", "back.net", &im, &d) == 0, "%s", d.buf ? d.buf : "");
    char why[512];
    ck_assert_msg(onnx_graphs_match(n.infer, &n.w, im.graph, &im.w, why, sizeof why), "%s\n%s", why, im.net.text);
    onnx_import_free(&im);
    diag_free(&d);
    gc_free(bytes);
    net_free(&n);
}
END_TEST

/* ---- damaged and unsupported models ------------------------------------------------- */

static const char tiny[] =
    "input x: f32[B, 4]\n"
    "h = relu(dense(x, units=3))\n"
    "output y = softmax(h)\n";

/* The tiny model's ONNX form unpacked, to be damaged by a test and packed again. */
static Onnx__ModelProto *tiny_model(void)
{
    Net n;
    net_text(&n, tiny);
    uint8_t *bytes;
    size_t len;
    export(&n, &bytes, &len);
    Onnx__ModelProto *m = (Onnx__ModelProto *)protobuf_c_message_unpack(&onnx__model_proto__descriptor, NULL, len, bytes);
    ck_assert_ptr_nonnull(m);
    gc_free(bytes);
    net_free(&n);
    return m;
}

/* Imports m (packed); returns the messages (free them), or NULL when it imported. */
static char *import_error(Onnx__ModelProto *m)
{
    size_t len = protobuf_c_message_get_packed_size(&m->base);
    uint8_t *buf = malloc(len + 1);
    protobuf_c_message_pack(&m->base, buf);
    OnnxImport im;
    DiagSink d;
    diag_init(&d, NULL);
    int rc = onnx_import(buf, len, "bad.onnx", "bad.net", &im, &d);
    char *msg = rc == 0 ? NULL : strdup(d.buf ? d.buf : "(no message)");
    ck_assert_int_eq(rc == 0, d.nerrors == 0);
    if (rc == 0) onnx_import_free(&im);
    diag_free(&d);
    free(buf);
    return msg;
}

static void expect(Onnx__ModelProto *m, const char *want)
{
    char *msg = import_error(m);
    ck_assert_msg(msg && strstr(msg, want), "expected an error with \"%s\", got: %s", want, msg ? msg : "(imported)");
    free(msg);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}

/* The tiny model's nodes: MatMul, Add, Relu, Softmax; initializers kernel, bias. */
START_TEST(unknown_op_names_node_type_position)
{
    Onnx__ModelProto *m = tiny_model();
    Onnx__NodeProto *relu = m->graph->node[2];
    free(relu->op_type);
    relu->op_type = strdup("Erf");
    char *msg = import_error(m);
    ck_assert_msg(msg && strstr(msg, "graphc: error: bad.onnx: node 2 'Relu#5' (Erf): graphc has no such op (it imports Conv, "),
                  "%s", msg ? msg : "(imported)");
    free(msg);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}
END_TEST

static void rename_str(char **s, const char *to)
{
    free(*s);
    *s = strdup(to);
}

START_TEST(graph_errors)
{
    Onnx__ModelProto *m = tiny_model();
    rename_str(&m->graph->node[0]->input[0], m->graph->node[2]->output[0]);   /* MatMul reads Relu */
    expect(m, "(MatMul): the graph has a cycle through this node");

    m = tiny_model();
    rename_str(&m->graph->node[1]->input[1], "nowhere");
    expect(m, "node 1 'Add#4' (Add): its input 'nowhere' is not defined by any node, input or initializer");

    m = tiny_model();
    rename_str(&m->graph->node[1]->output[0], m->graph->node[0]->output[0]);
    expect(m, "node 1 'Add#4' (Add): its output 'matmul#2' is already defined (by another node)");

    m = tiny_model();
    rename_str(&m->graph->output[0]->name, "ghost");
    expect(m, "bad.onnx: graph output 'ghost' is not defined");

    m = tiny_model();
    m->graph->n_node = 3;   /* Softmax gone: y has no producer */
    char *gone = import_error(m);
    ck_assert_msg(gone && strstr(gone, "graph output 'y' is not defined"), "%s", gone ? gone : "(imported)");
    free(gone);
    m->graph->n_node = 4;   /* so that it is freed */
    protobuf_c_message_free_unpacked(&m->base, NULL);

    /* nodes out of order still import (ONNX requires the order; graphc sorts) */
    m = tiny_model();
    Onnx__NodeProto *t = m->graph->node[0];
    m->graph->node[0] = m->graph->node[3];
    m->graph->node[3] = t;
    char *msg = import_error(m);
    ck_assert_msg(msg == NULL, "%s", msg);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}
END_TEST

START_TEST(model_errors)
{
    Onnx__ModelProto *m = tiny_model();
    m->opset_import[0]->version = 99;
    expect(m, "bad.onnx: the opset 99; graphc reads opsets 9 to 21 of the default domain");

    m = tiny_model();
    m->has_ir_version = 0;
    expect(m, "IR version 0; graphc reads versions 3 to 10");

    m = tiny_model();
    m->graph->input[0]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    expect(m, "input 'x' is int64; graphc's inputs are float or int32");

    m = tiny_model();
    m->graph->input[0]->type->tensor_type->shape->dim[1]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE__NOT_SET;
    expect(m, "input 'x': dimension 1 has no size");

    m = tiny_model();
    m->graph->node[0]->domain = strdup("com.microsoft");
    expect(m, "node 0 'MatMul#2' (MatMul): its domain is 'com.microsoft'");
}
END_TEST

START_TEST(tensor_errors)
{
    Onnx__ModelProto *m = tiny_model();
    m->graph->initializer[0]->raw_data.len -= 4;
    expect(m, "initializer 'dense/kernel': float[12 elements] holds 44 bytes of data");

    m = tiny_model();
    m->graph->initializer[0]->dims[0] = (int64_t)1 << 50;
    expect(m, "initializer 'dense/kernel': dimension 0 (1125899906842624) is negative or too large");

    m = tiny_model();
    m->graph->initializer[0]->dims[0] = -4;
    expect(m, "dimension 0 (-4) is negative or too large");

    m = tiny_model();
    m->graph->initializer[0]->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    expect(m, "initializer 'dense/kernel': its type is double");

    m = tiny_model();
    m->graph->initializer[0]->has_data_location = 1;
    m->graph->initializer[0]->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    expect(m, "its data is in an external file");

    m = tiny_model();
    Onnx__AttributeProto *axis = m->graph->node[3]->attribute[0];
    axis->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    expect(m, "node 3 'Softmax#6' (Softmax): attribute 'axis' must be an int");

    m = tiny_model();
    m->graph->node[3]->attribute[0]->i = 0;
    expect(m, "(Softmax): along axis 0 of a tensor; graphc's is along the last axis");

    m = tiny_model();
    rename_str(&m->graph->node[3]->attribute[0]->name, "beta");
    expect(m, "attribute 'beta' is not one graphc understands for Softmax");
}
END_TEST

/* A model whose messages nest 40 deep (graph, node, attribute, graph...): refused
 * before protobuf-c's recursion sees it. */
START_TEST(deep_nesting)
{
    const ProtobufCFieldDescriptor *graph = protobuf_c_message_descriptor_get_field_by_name(&onnx__model_proto__descriptor, "graph");
    const ProtobufCFieldDescriptor *node = protobuf_c_message_descriptor_get_field_by_name(&onnx__graph_proto__descriptor, "node");
    const ProtobufCFieldDescriptor *attr = protobuf_c_message_descriptor_get_field_by_name(&onnx__node_proto__descriptor, "attribute");
    const ProtobufCFieldDescriptor *sub = protobuf_c_message_descriptor_get_field_by_name(&onnx__attribute_proto__descriptor, "g");
    uint8_t *buf = malloc(1 << 16), *tmp = malloc(1 << 16);
    size_t len = 0;
    /* wraps buf[0..len) as field `id` (length-delimited), lengths below 128 then 16384 */
#define WRAP(id)                                                   \
    do {                                                           \
        size_t h = 0;                                              \
        tmp[h++] = (uint8_t)((id) << 3 | 2);                       \
        if (len < 128) tmp[h++] = (uint8_t)len;                    \
        else { tmp[h++] = (uint8_t)(len | 0x80); tmp[h++] = (uint8_t)(len >> 7); } \
        memcpy(tmp + h, buf, len);                                 \
        len += h;                                                  \
        memcpy(buf, tmp, len);                                     \
    } while (0)
    for (int i = 0; i < 40; i++) {
        WRAP(sub->id);
        WRAP(attr->id);
        WRAP(node->id);
    }
    WRAP(graph->id);
#undef WRAP
    OnnxImport im;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(onnx_import(buf, len, "deep.onnx", "d.net", &im, &d), -1);
    ck_assert_msg(strstr(d.buf, "deep.onnx: not an ONNX model (messages nested more than 32 deep)"), "%s", d.buf);
    diag_free(&d);
    free(buf);
    free(tmp);
}
END_TEST

/* Imports bytes: whether it did; a failure must have said why. */
static bool imports(const uint8_t *bytes, size_t len)
{
    OnnxImport im;
    DiagSink d;
    diag_init(&d, NULL);
    int rc = onnx_import(bytes, len, "damaged.onnx", "d.net", &im, &d);
    ck_assert_int_eq(rc == 0, d.nerrors == 0);
    if (rc == 0) onnx_import_free(&im);
    diag_free(&d);
    return rc == 0;
}

/* Every prefix of a model, and the model with bytes changed at random: an error or a
 * model, never a crash (in the sanitizer build, never a leak or a bad read). */
START_TEST(damaged_bytes)
{
    Net n;
    net_load(&n, "lenet5.net");
    uint8_t *bytes;
    size_t len;
    export(&n, &bytes, &len);
    uint8_t *copy = malloc(len);
    int imported = 0;
    for (size_t cut = 0; cut < len; cut += cut < 4096 ? 1 : 997) imported += imports(bytes, cut);
    ck_assert_int_eq(imported, 0);   /* no prefix has the outputs' producers and the weights */
    for (int trial = 0; trial < 300; trial++) {
        memcpy(copy, bytes, len);
        for (int k = 0; k < 1 + trial % 8; k++) {
            uint64_t r = rng_at(9, (uint64_t)trial, (uint64_t)k);
            size_t at = (size_t)(r % len);
            /* the first 4 KB hold the structure; the rest is mostly weights */
            if (trial % 2) at %= len < 4096 ? len : 4096;
            copy[at] = (uint8_t)(r >> 32);
        }
        imports(copy, len);
    }
    free(copy);
    gc_free(bytes);
    net_free(&n);
}
END_TEST

/* The n-th allocation failing, for every n until the import succeeds: each time an
 * error said, never a crash (a child process, as a crash would end the suite). */
START_TEST(allocation_failure)
{
    Net n;
    net_load(&n, "resnet.net");
    uint8_t *bytes;
    size_t len;
    export(&n, &bytes, &len);
    for (long k = 0;; k++) {
        fflush(NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            OnnxImport im;
            DiagSink d;
            diag_init(&d, NULL);
            gc_mem_fail_after(k);
            int rc = onnx_import(bytes, len, "r.onnx", "r.net", &im, &d);
            uint8_t *out = NULL;
            size_t olen;
            int erc = rc == 0 ? onnx_export(im.graph, &im.w, &out, &olen, &d) : -1;
            gc_mem_fail_after(-1);
            int code = rc == 0 && erc == 0 ? 0 : d.nerrors > 0 ? 1 : 2;
            if (rc == 0) onnx_import_free(&im);
            gc_free(out);
            diag_free(&d);
            _exit(code);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) <= 1, "allocation %ld failing: %s", k,
                      WIFEXITED(status) ? "a failure without a message" : "a crash");
        if (WEXITSTATUS(status) == 0) break;
        ck_assert_int_lt(k, 100000);
    }
    gc_free(bytes);
    net_free(&n);
}
END_TEST

static Suite *make_onnx_suite(void)
{
    Suite *s = suite_create("onnx");
    TCase *tc = tcase_create("roundtrip");
    tcase_add_loop_test(tc, roundtrip_every_model, 0, 7);
    tcase_add_test(tc, roundtrip_more_ops);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, unknown_op_names_node_type_position);
    tcase_add_test(tc, graph_errors);
    tcase_add_test(tc, model_errors);
    tcase_add_test(tc, tensor_errors);
    tcase_add_test(tc, deep_nesting);
    suite_add_tcase(s, tc);
    tc = tcase_create("robustness");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, damaged_bytes);
    tcase_add_test(tc, allocation_failure);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(make_onnx_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
