/* graphc export and graphc import: models to and from ONNX (docs/onnx.md). */
#include "config.h"
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli.h"
#ifdef HAVE_ONNX
#include "graph/passes.h"
#include "onnx/onnx.h"
#include "run/train.h"
#include "util/file.h"
#endif

static const char export_usage[] =
    "usage: graphc export FILE.net --weights CKPT -o MODEL.onnx\n"
    "\n"
    "Writes the model's inference graph (dropout removed) with the weights of CKPT as an\n"
    "ONNX model (opset 13): the .net inputs the outputs need and its outputs, by name and\n"
    "NHWC as declared, the batch a symbolic dimension, the weights initializers under\n"
    "their .net names.  Inside, images are NCHW (a Transpose where they enter and leave\n"
    "the convolutions): see docs/onnx.md.\n";

static const char import_usage[] =
    "usage: graphc import MODEL.onnx -o FILE.net [--weights-out CKPT]\n"
    "\n"
    "Reads an ONNX model made of ops graphc knows (docs/onnx.md lists them) and writes it\n"
    "as a .net file: dense and conv2d layers with Keras' names where the pattern allows,\n"
    "else primitive ops; with --weights-out, its weights as a graphc checkpoint.  NCHW\n"
    "images become NHWC inputs ([B, H, W, C]), with the weights reordered to match.\n";

#ifndef HAVE_ONNX
static int no_onnx(const char *cmd, int argc, char **argv, const char *usage)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            break;
        }
    fprintf(stderr, "graphc %s: this graphc was built without ONNX support (configure --without-onnx, or protobuf-c "
            "missing); install libprotobuf-c-dev, protobuf-c-compiler and libonnx-dev and build again\n", cmd);
    return EXIT_BAD_INPUT;
}

int cmd_export(int argc, char **argv) { return no_onnx("export", argc, argv, export_usage); }
int cmd_import(int argc, char **argv) { return no_onnx("import", argc, argv, import_usage); }
#else

/* Whether two paths name one file (the output would overwrite an input). */
static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        { "help", no_argument, 0, 'h' }, { "weights", required_argument, 0, 'w' }, { "output", required_argument, 0, 'o' },
        { 0, 0, 0, 0 },
    };
    const char *weights = NULL, *out = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(export_usage, stdout); return EXIT_OK;
        case 'w': weights = optarg; break;
        case 'o': out = optarg; break;
        case ':': return cli_usage_error("export", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_unknown_option("export", opts, argv[optind - 1]);
        }
    }
    if (optind >= argc) return cli_usage_error("export", "missing FILE");
    if (optind + 1 < argc) return cli_usage_error("export", "one FILE only, got '%s' too", argv[optind + 1]);
    if (!weights) return cli_usage_error("export", "missing --weights CKPT");
    if (!out) return cli_usage_error("export", "missing -o MODEL.onnx");
    const char *file = argv[optind];
    if (same_file(out, file) || same_file(out, weights))
        return cli_usage_error("export", "-o %s would overwrite an input", out);

    Model m;
    if (cli_load_model(&m, file) != 0) { cli_free_model(&m); return EXIT_BAD_INPUT; }
    DiagSink d;
    diag_init(&d, &m.src);   /* export errors point at the .net line of the op */
    Weights w = { 0 };
    uint8_t *bytes = NULL;
    size_t len = 0;
    int rc = EXIT_BAD_INPUT;
    Graph *g = pass_inference(m.graph, false, &d);
    if (g && weights_init(&w, m.graph, 0, &d) == 0 && checkpoint_load(weights, m.graph, &w, &d) == 0 &&
        onnx_export(g, &w, &bytes, &len, &d) == 0 && file_write_atomic(out, bytes, len, &d) == 0) {
        printf("%s: %s as ONNX (opset %d, %zu bytes)\n", out, file, ONNX_OPSET, len);
        rc = EXIT_OK;
    }
    diag_flush(&d, stderr);
    diag_free(&d);
    gc_free(bytes);
    weights_free(&w);
    graph_free(g);
    cli_free_model(&m);
    return rc;
}

/* Largest ONNX file read: protobuf's own limit. */
#define ONNX_MAX_BYTES ((size_t)2 << 30)

int cmd_import(int argc, char **argv)
{
    static const struct option opts[] = {
        { "help", no_argument, 0, 'h' }, { "output", required_argument, 0, 'o' }, { "weights-out", required_argument, 0, 'w' },
        { 0, 0, 0, 0 },
    };
    const char *out = NULL, *wout = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(import_usage, stdout); return EXIT_OK;
        case 'o': out = optarg; break;
        case 'w': wout = optarg; break;
        case ':': return cli_usage_error("import", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_unknown_option("import", opts, argv[optind - 1]);
        }
    }
    if (optind >= argc) return cli_usage_error("import", "missing MODEL.onnx");
    if (optind + 1 < argc) return cli_usage_error("import", "one MODEL.onnx only, got '%s' too", argv[optind + 1]);
    if (!out) return cli_usage_error("import", "missing -o FILE.net");
    const char *file = argv[optind];
    if (same_file(out, file) || same_file(wout, file) || (wout && strcmp(out, wout) == 0) || same_file(out, wout))
        return cli_usage_error("import", "the outputs would overwrite the input or each other");

    DiagSink d;
    diag_init(&d, NULL);
    void *bytes = NULL;
    size_t len = 0;
    OnnxImport im;
    memset(&im, 0, sizeof im);
    int rc = EXIT_BAD_INPUT;
    if (file_read_all(file, ONNX_MAX_BYTES, &bytes, &len, &d) == 0 && onnx_import(bytes, len, file, out, &im, &d) == 0 &&
        file_write_atomic(out, im.net.text, im.net.len, &d) == 0 && (!wout || checkpoint_save(wout, im.graph, &im.w, 0, &d) == 0)) {
        printf("%s: %s as .net (%d input%s, %d output%s, %lld weights)%s%s\n", out, file, im.graph->ninputs,
               im.graph->ninputs == 1 ? "" : "s", im.graph->noutputs, im.graph->noutputs == 1 ? "" : "s",
               (long long)graph_param_count(im.graph), wout ? "; weights in " : "", wout ? wout : "");
        rc = EXIT_OK;
    }
    diag_flush(&d, stderr);
    diag_free(&d);
    gc_free(bytes);
    onnx_import_free(&im);
    return rc;
}
#endif
