/* A self-contained SVG picture of a training run: what a Keras user would open
 * TensorBoard for.  Two panels, one above the other:
 *   - loss: training loss per step (faint raw line, bold exponential moving average)
 *     and the test loss per epoch as markers;
 *   - accuracy: training accuracy per step (raw and smoothed) and the test accuracy
 *     per epoch as markers.
 * Both share the step axis, with light vertical lines at the epoch boundaries.
 * Non-finite values are skipped (and counted in a note); long runs are downsampled
 * (min and max per pixel column) so the file stays small. */
#ifndef GRAPHC_PLOT_H
#define GRAPHC_PLOT_H
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include "util/diag.h"

typedef struct TrainLog {
    size_t nsteps;
    const float *step_loss;        /* nsteps values, or NULL */
    const float *step_acc;         /* nsteps values, or NULL */
    size_t nepochs;
    const float *epoch_test_loss;  /* nepochs values, NaN where no evaluation; or NULL */
    const float *epoch_test_acc;   /* likewise */
    int64_t steps_per_epoch;       /* epoch e ends after step (e+1)*steps_per_epoch; <= 0: unknown */
    const char *title;             /* UTF-8; may be NULL */
} TrainLog;

/* Writes the SVG to `path` as util/outfile.h writes every file: atomically, through a
 * symlink to its target, never over anything but a regular file.  On failure any file
 * already at `path` is left as it was, and a message naming the path and the system's
 * reason goes to `d`.  Returns 0 or -1. */
int plot_svg(const char *path, const TrainLog *log, DiagSink *d);

/* A waterfall (graphc bench --ablate): a total bar, the steps that take it to another
 * total, each a floating bar from where the one before ended (green where it goes
 * down, red where it goes up), one row each, with a note to the right; a second
 * measure of the same (CPU time beside wall time) as a thin bar inside each row. */
typedef struct WaterfallBar {
    const char *label;
    double from, to;               /* a total bar: 0 and the total */
    double from2, to2;             /* the second measure; both 0: none */
    bool total;
    const char *note;              /* may be NULL */
} WaterfallBar;
typedef struct Waterfall {
    const char *title, *subtitle, *axis;   /* UTF-8; may be NULL */
    const WaterfallBar *bars;
    int nbars;
} Waterfall;
/* Written to `path` as plot_svg writes. */
int plot_waterfall(const char *path, const Waterfall *w, DiagSink *d);

#endif
