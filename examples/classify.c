/* Classify an image with a trained graphc model, through the installed library:
 *
 *     cc classify.c $(pkg-config --cflags --libs graphc) -o classify
 *     ./classify models/mnist.net mnist.ckpt digit.pgm
 *
 * The image is a binary PGM (P5, 8-bit) of the model's input size. */
#include <graphc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A binary 8-bit PGM into pixels scaled to [0, 1]; 0 or -1. */
static int read_pgm(const char *path, int64_t h, int64_t w, float *out)
{
    FILE *f = fopen(path, "rb");
    int width, height, maxval;
    if (!f) return -1;
    if (fscanf(f, "P5 %d %d %d", &width, &height, &maxval) != 3 || width != w || height != h || maxval <= 0 ||
        maxval > 255 || fgetc(f) == EOF) {
        fclose(f);
        return -1;
    }
    for (int64_t i = 0; i < h * w; i++) {
        int v = fgetc(f);
        if (v == EOF) { fclose(f); return -1; }
        out[i] = (float)v / (float)maxval;
    }
    fclose(f);
    return 0;
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
