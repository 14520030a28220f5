/* What `graphc run` shows of a run, drawn from train_run's events (run/train.h): a
 * Keras-style progress bar, JSON lines, or the results only.
 *
 * The bar: on a terminal one line per epoch, redrawn in place (at most ten times a
 * second, and at the first and last step) and fitted to the terminal's width, so that
 * it never wraps; elsewhere (a file, a pipe) one line per epoch when it ends, with no
 * carriage return.  JSON: one object per epoch and one at the end; a number that is
 * NaN or Inf is written as null with a "<key>_nonfinite" of "nan", "inf" or "-inf"
 * beside it, and a number that was not measured is left out.  Quiet: the final test
 * loss and accuracy on one line, "nan", "inf" or "-inf" when not finite. */
#ifndef GRAPHC_PROGRESS_H
#define GRAPHC_PROGRESS_H
#include <stdio.h>
#include "run/train.h"

typedef enum LogMode { LOG_BAR, LOG_QUIET, LOG_JSON, LOG_MODE_COUNT } LogMode;

typedef struct Progress {
    FILE *out;
    LogMode mode;
    bool tty;            /* out is a terminal: the bar is redrawn in place */
    int width;           /* columns to fit on a terminal; 0: ask it at every draw */
    double last_draw;    /* seconds into the epoch when the bar was last drawn */
    int drawn;           /* columns of the unfinished line on screen (0: none) */
} Progress;

void progress_init(Progress *p, FILE *out, LogMode mode);
/* The reporter to put in RunOptions.report. */
RunReporter progress_reporter(Progress *p);
/* Ends an unfinished bar line (a run stopped by an error), so that what follows starts
 * a line of its own. */
void progress_end(Progress *p);

/* graphc eval's result: "Test loss: 0.0235 - test acc: 0.9926 (10000 examples)". */
void progress_eval_line(FILE *out, const RunEvalInfo *e);

/* The width of the terminal on fd: TIOCGWINSZ, else $COLUMNS, else 80. */
int progress_term_width(int fd);
/* An epoch's bar line into buf (without "\r" or "\n"): while it runs (final false)
 * "Epoch 2/5  17/100 [====>.....] - ETA: 3s - loss: 0.3114 - acc: 0.9102" (the ETA
 * from the mean time of the s->done steps so far), cut to width - 1 columns; at its
 * end "Epoch 2/5 100/100 [==========] - 5s 48ms/step - loss: ... - acc: ..." (s->seconds
 * over s->done steps) followed by `tail`, not cut: it is never redrawn, so its tail
 * may wrap.  The bar shrinks to fit (the final line's as if it had no tail) and is
 * left out when fewer than 6 columns remain for it; width 0 means no limit.  Returns
 * the length. */
int progress_bar_line(char *buf, size_t n, const RunStepInfo *s, bool final, const char *tail, int width);
/* `"key": v` with `decimals` decimals, or `"key": null, "key_nonfinite": "nan"` (or
 * "inf", "-inf") when v is not finite. */
void progress_json_number(FILE *out, const char *key, double v, int decimals);

#endif
