/* graphc predict: classify images with saved weights. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "exec/pipeline.h"
#include "run/image.h"
#include "run/train.h"

static const char predict_usage[] =
    "usage: graphc predict FILE.net --weights PATH [--top K] [--mode MODE] IMAGE...\n"
    "\n"
    "Runs the model on each image (PGM or PNG, of the model's input size; grey or RGB as\n"
    "the input has 1 or 3 channels; values scaled to [0, 1]) and prints the K most\n"
    "likely classes of its first output with their probabilities.  MNIST's digits are\n"
    "white on black: invert a black-on-white drawing first.  A file that cannot be read\n"
    "is reported and the others are classified; the exit status is then 1.\n";

typedef struct Ranked {
    int cls;
    float p;
} Ranked;

static int by_p(const void *a, const void *b)
{
    const Ranked *x = a, *y = b;
    return x->p < y->p ? 1 : x->p > y->p ? -1 : x->cls - y->cls;
}

typedef struct PredictArgs {
    const char *file, *weights;
    int64_t top;
    ExecMode mode;
    int nimg;
    char **images;
} PredictArgs;

/* The command line into *a: -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, PredictArgs *a)
{
    static const struct option opts[] = {
        { "help", no_argument, 0, 'h' }, { "weights", required_argument, 0, 'w' }, { "top", required_argument, 0, 'k' },
        { "mode", required_argument, 0, 'm' }, { 0, 0, 0, 0 },
    };
    *a = (PredictArgs){ .top = 3, .mode = MODE_COMPILED };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(predict_usage, stdout); return EXIT_OK;
        case 'w': a->weights = optarg; break;
        case 'k': if (!cli_parse_i64("predict", "--top", optarg, 1, 1000, &a->top)) return EXIT_USAGE; break;
        case 'm':
            if (strcmp(optarg, "compiled") == 0) a->mode = MODE_COMPILED;
            else if (strcmp(optarg, "interp") == 0) a->mode = MODE_INTERP;
            else return cli_usage_error("predict", "--mode: expected compiled or interp, got '%s'", optarg);
            break;
        case ':': return cli_usage_error("predict", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_unknown_option("predict", opts, argv[optind - 1]);
        }
    }
    if (optind >= argc) return cli_usage_error("predict", "missing FILE");
    if (!a->weights) return cli_usage_error("predict", "missing --weights PATH");
    if (optind + 1 >= argc) return cli_usage_error("predict", "give at least one IMAGE");
    a->file = argv[optind];
    a->nimg = argc - optind - 1;
    a->images = argv + optind + 1;
    return -1;
}

/* The index of the image input (the first f32 input, [B, H, W, C] with H, W, C known)
 * among g's inputs, or -1 after reporting. */
static int image_input(const Graph *g, const char *file, DiagSink *d)
{
    int xi = -1;
    for (int i = 0; i < g->ninputs && xi < 0; i++)
        if (g->nodes[g->inputs[i]].dtype == DT_F32) xi = i;
    const Node *xin = xi >= 0 ? &g->nodes[g->inputs[xi]] : NULL;
    char b[128];
    if (!xin || xin->shape.rank != 4 || xin->shape.d[0].sym < 0 ||
        !shape_concrete(&(Shape){ 3, { xin->shape.d[1], xin->shape.d[2], xin->shape.d[3] } })) {
        diag_plain(d, "%s: predict needs an image input [B, H, W, C]%s%s", file, xin ? ", got " : "",
                   xin ? shape_str(g, &xin->shape, b, sizeof b) : "");
        return -1;
    }
    if (g->noutputs == 0) {
        diag_plain(d, "%s: the model has no output to rank", file);
        return -1;
    }
    return xi;
}

/* The inference step over n images x fed to input xi (the other inputs, labels, are
 * not read at inference: zeros); the first output into *probs (allocated), *per
 * values an image.  0 or -1. */
static int infer(const Graph *model, int xi, const float *x, int n, ExecMode mode, Pool *pool, Weights *w,
                 float **probs, int64_t *per, DiagSink *d)
{
    Step step = { 0 };
    void *dummy = NULL;
    const void **feeds = NULL;
    int rc = -1;
    CompileOptions co = { .mode = mode, .pool = pool };
    if (prepare(model, FOR_INFERENCE, n, &co, w, &step, d) != 0) goto out;
    const Graph *g = step.graph;
    const Node *on = &g->nodes[g->outputs[0].node];
    *per = on->shape.rank >= 1 ? shape_numel(&on->shape) / n : 1;
    *probs = gc_calloc((size_t)shape_numel(&on->shape), sizeof **probs);
    feeds = gc_calloc((size_t)g->ninputs, sizeof *feeds);
    size_t most = 0;
    for (int i = 0; i < g->ninputs; i++) {
        size_t bytes = node_bytes(&g->nodes[g->inputs[i]]);
        if (bytes > most) most = bytes;
    }
    dummy = gc_calloc(most ? most : 1, 1);
    if (!*probs || !feeds || !dummy) {
        diag_plain(d, "out of memory");
        goto out;
    }
    for (int i = 0; i < g->ninputs; i++) feeds[i] = i == xi ? x : dummy;
    float *outs[16] = { *probs };
    StepEnv env = { .w = w, .d = d };
    if (g->noutputs > 16 || executor_run(step.ex, feeds, outs, &env) != 0) goto out;
    rc = 0;
out:
    step_free(&step);
    gc_free(dummy);
    gc_free(feeds);
    return rc;
}

/* "IMAGE:  3 (0.9981)  5 (0.0012) ..." for each image: its top classes. */
static int print_top(char **names, const int *good, int n, const float *probs, int64_t per, int64_t top)
{
    Ranked *r = gc_calloc((size_t)per, sizeof *r);
    if (!r) return -1;
    for (int i = 0; i < n; i++) {
        for (int64_t k = 0; k < per; k++) r[k] = (Ranked){ (int)k, probs[i * per + k] };
        qsort(r, (size_t)per, sizeof *r, by_p);
        printf("%s:", names[good[i]]);
        for (int64_t k = 0; k < top && k < per; k++) printf("  %d (%.4f)", r[k].cls, r[k].p);
        putchar('\n');
    }
    gc_free(r);
    return 0;
}

int cmd_predict(int argc, char **argv)
{
    PredictArgs a;
    int status = parse_args(argc, argv, &a);
    if (status >= 0) return status;
    Model m;
    if (cli_load_model(&m, a.file) != 0) { cli_free_model(&m); return EXIT_BAD_INPUT; }
    DiagSink d;
    diag_init(&d, NULL);
    d.max_errors = 0;   /* every bad image is named, however many */
    int rc = EXIT_BAD_INPUT;
    Weights w = { 0 };
    float *x = NULL, *probs = NULL;
    int *good = NULL;   /* indices into images[] of those read */
    int64_t per = 0;
    Pool *pool = pool_new(0);
    int xi = pool ? image_input(m.graph, a.file, &d) : -1;
    if (!pool) diag_plain(&d, "out of memory");
    if (xi < 0) goto out;
    const Node *xin = &m.graph->nodes[m.graph->inputs[xi]];
    int64_t H = xin->shape.d[1].v, W = xin->shape.d[2].v, C = xin->shape.d[3].v;
    size_t per_image = (size_t)(H * W * C);
    if (weights_init(&w, m.graph, 0, &d) != 0 || checkpoint_load(a.weights, m.graph, &w, &d) != 0) goto out;
    /* Every image is read and every bad one reported; the good ones are classified, and
     * the exit status says whether any was bad. */
    x = gc_calloc((size_t)a.nimg, per_image * sizeof *x);
    good = gc_calloc((size_t)a.nimg, sizeof *good);
    if (!x || !good) { diag_plain(&d, "out of memory for %d images", a.nimg); goto out; }
    int ngood = 0;
    for (int i = 0; i < a.nimg; i++)
        if (image_load(a.images[i], H, W, C, x + (size_t)ngood * per_image, &d) == 0) good[ngood++] = i;
    if (ngood == 0 || infer(m.graph, xi, x, ngood, a.mode, pool, &w, &probs, &per, &d) != 0) goto out;
    if (print_top(a.images, good, ngood, probs, per, a.top) != 0) goto out;
    rc = ngood == a.nimg ? EXIT_OK : EXIT_BAD_INPUT;
out:
    diag_flush(&d, stderr);
    diag_free(&d);
    weights_free(&w);
    pool_free(pool);
    gc_free(x);
    gc_free(good);
    gc_free(probs);
    cli_free_model(&m);
    return rc;
}
