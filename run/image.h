/* Reading images for graphc predict: binary and text PGM, and PNG (through libpng).
 * The first bytes decide the format; any other (PPM, JPEG...) is refused by name.
 * No resizing: an image must have the model's height and width, and hold exactly the
 * pixels its header declares. */
#ifndef GRAPHC_IMAGE_H
#define GRAPHC_IMAGE_H
#include <stdint.h>
#include "util/diag.h"

/* Reads `path` into out[h*w*c] (HWC), values scaled to [0, 1].  c is 1 (grey: colour
 * images are converted) or 3 (RGB: grey is replicated).  0, or -1 with a message
 * naming the file and what is wrong with it. */
int image_load(const char *path, int64_t h, int64_t w, int64_t c, float *out, DiagSink *d);

#endif
