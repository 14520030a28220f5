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

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.net WEIGHTS IMAGE.pgm\n", argv[0]);
        return 2;
    }
    graphc_model *m;
    if (graphc_compile_file(argv[1], &m) != GRAPHC_OK || graphc_load_weights(m, argv[2]) != GRAPHC_OK) {
        fprintf(stderr, "%s", m ? graphc_diagnostics(m) : "out of memory\n");
        graphc_free(m);
        return 1;
    }
    int64_t dims[6];
    int rank;
    if (graphc_input_shape(m, dims, &rank) != GRAPHC_OK || rank != 3 || dims[2] != 1) {
        fprintf(stderr, "%s: expected a grey image input [B, H, W, 1]\n", argv[1]);
        graphc_free(m);
        return 1;
    }
    int64_t classes = graphc_output_size(m);
    float *pixels = malloc((size_t)(dims[0] * dims[1]) * sizeof *pixels);
    float *probs = malloc((size_t)classes * sizeof *probs);
    int rc = 1;
    if (!pixels || !probs || read_pgm(argv[3], dims[0], dims[1], pixels) != 0) {
        fprintf(stderr, "%s: not a %lldx%lld binary PGM\n", argv[3], (long long)dims[1], (long long)dims[0]);
    } else if (graphc_predict(m, 1, pixels, probs, (size_t)classes) != GRAPHC_OK) {
        fprintf(stderr, "%s", graphc_diagnostics(m));
    } else {
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (probs[k] > probs[best]) best = k;
        printf("%s: class %d (probability %.4f)\n", argv[3], best, probs[best]);
        rc = 0;
    }
    free(pixels);
    free(probs);
    graphc_free(m);
    return rc;
}
