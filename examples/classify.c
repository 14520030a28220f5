/* Classify an image with a trained graphc model, through the installed library:
 *
 *     cc classify.c $(pkg-config --cflags --libs graphc) -o classify
 *     ./classify models/mnist.net mnist.ckpt examples/digit.pgm
 *
 * The image is a binary PGM (P5, 8-bit, comment lines allowed) of the model's input
 * size, such as examples/digit.pgm. */
#include <ctype.h>
#include <graphc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next number of a PGM header, after blanks and # comments, and the one blank that
 * ends it; -1 if there is none. */
static long pgm_number(FILE *f)
{
    int ch = fgetc(f);
    while (ch == '#' || isspace(ch)) {
        if (ch == '#')
            while (ch != '\n' && ch != EOF) ch = fgetc(f);
        ch = fgetc(f);
    }
    long v = -1;
    for (; isdigit(ch) && v < 100000; ch = fgetc(f)) v = (v < 0 ? 0 : v * 10) + (ch - '0');
    return isspace(ch) ? v : -1;
}

/* A binary 8-bit PGM into pixels scaled to [0, 1]; 0 or -1. */
static int read_pgm(const char *path, int64_t h, int64_t w, float *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int rc = -1;
    if (fgetc(f) == 'P' && fgetc(f) == '5') {
        long width = pgm_number(f), height = pgm_number(f), maxval = pgm_number(f);
        if (width == w && height == h && maxval > 0 && maxval < 256) {
            int64_t i = 0;
            for (int v; i < h * w && (v = fgetc(f)) != EOF && v <= maxval; i++) out[i] = (float)v / (float)maxval;
            rc = i == h * w && fgetc(f) == EOF ? 0 : -1;   /* every pixel, nothing after */
        }
    }
    fclose(f);
    return rc;
}

/* The model's image input: the one input graphc_run reads, [B, H, W, 1] floats. */
static int image_input(graphc_model *m, graphc_tensor_info *img)
{
    int n, found = -1;
    if (graphc_input_count(m, &n) != GRAPHC_OK) return -1;
    for (int i = 0; i < n; i++) {
        graphc_tensor_info t;
        if (graphc_input_info(m, i, 1, &t) != GRAPHC_OK) return -1;
        if (t.label) continue;
        if (found >= 0 || t.dtype != GRAPHC_F32 || t.rank != 4 || t.dims[3] != 1) return -1;
        found = i;
        *img = t;
    }
    return found;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.net WEIGHTS IMAGE.pgm\n", argv[0]);
        return 2;
    }
    graphc_model *m;
    if (graphc_load(argv[1], &m) != GRAPHC_OK || graphc_load_weights(m, argv[2]) != GRAPHC_OK) {
        fputs(graphc_message(m), stderr);
        graphc_free(m);
        return 1;
    }
    graphc_tensor_info img = { 0 }, probs_info;
    int x = image_input(m, &img), nin = 0, nout = 0;
    if (x < 0 || graphc_input_count(m, &nin) != GRAPHC_OK || graphc_output_count(m, &nout) != GRAPHC_OK || nout < 1 ||
        graphc_output_info(m, 0, 1, &probs_info) != GRAPHC_OK || probs_info.dtype != GRAPHC_F32) {
        fprintf(stderr, "%s: expected one grey image input [B, H, W, 1] and a first output of floats\n", argv[1]);
        graphc_free(m);
        return 1;
    }
    int64_t h = img.dims[1], w = img.dims[2], classes = probs_info.count;
    float *pixels = malloc((size_t)(h * w) * sizeof *pixels);
    float *probs = malloc((size_t)classes * sizeof *probs);
    /* one pointer per input and per output: the labels and other outputs stay NULL */
    const void **in = calloc((size_t)nin, sizeof *in);
    void **out = calloc((size_t)nout, sizeof *out);
    int rc = 1;
    if (!pixels || !probs || !in || !out) {
        fputs("out of memory\n", stderr);
    } else if (read_pgm(argv[3], h, w, pixels) != 0) {
        fprintf(stderr, "%s: not a %lldx%lld binary PGM\n", argv[3], (long long)w, (long long)h);
    } else {
        in[x] = pixels;
        out[0] = probs;
        if (graphc_run(m, 1, in, out) != GRAPHC_OK) {
            fputs(graphc_message(m), stderr);
        } else {
            int best = 0;
            for (int k = 1; k < classes; k++)
                if (probs[k] > probs[best]) best = k;
            printf("%s: class %d (probability %.4f)\n", argv[3], best, probs[best]);
            rc = 0;
        }
    }
    free(pixels);
    free(probs);
    free(in);
    free(out);
    graphc_free(m);
    return rc;
}
