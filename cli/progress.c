/* graphc run's progress bar, JSON lines and quiet results.  See progress.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "cli/progress.h"

enum { BAR_MAX = 30, BAR_MIN = 6 };

void progress_init(Progress *p, FILE *out, LogMode mode)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->mode = mode;
    p->tty = isatty(fileno(out));
}

int progress_term_width(int fd)
{
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *cols = getenv("COLUMNS");
    char *end;
    long v = cols ? strtol(cols, &end, 10) : 0;
    return cols && end != cols && *end == 0 && v > 0 && v < 100000 ? (int)v : 80;
}

static void fmt_duration(double s, char *buf, size_t n)
{
    if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* v with `decimals` decimals, or "nan", "inf", "-inf" (never printf's "-nan") */
static void fmt_value(double v, int decimals, char *buf, size_t n)
{
    if (isfinite(v)) snprintf(buf, n, "%.*f", decimals, v);
    else snprintf(buf, n, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

int progress_bar_line(char *buf, size_t n, const RunStepInfo *s, bool final, const char *tail, int width)
{
    char head[96], rest[160], t[32], l[32], a[32];
    int sw = snprintf(NULL, 0, "%lld", (long long)s->steps);
    int hl = snprintf(head, sizeof head, "Epoch %lld/%lld  %*lld/%lld", (long long)s->epoch, (long long)s->epochs, sw,
                      (long long)s->step, (long long)s->steps);
    fmt_value(s->loss, 4, l, sizeof l);
    double per = s->done > 0 ? s->seconds / (double)s->done : 0;
    if (final) {
        fmt_duration(s->seconds, t, sizeof t);
        snprintf(rest, sizeof rest, " - %s %.0fms/step - loss: %s", t, 1000 * per, l);
    } else {
        fmt_duration(per * (double)(s->steps - s->step), t, sizeof t);
        snprintf(rest, sizeof rest, " - ETA: %s - loss: %s", t, l);
    }
    if (s->has_acc) {
        fmt_value(s->acc, 4, a, sizeof a);
        size_t rl = strlen(rest);
        snprintf(rest + rl, sizeof rest - rl, " - acc: %s", a);
    }
    if (!final || !tail) tail = "";
    int bw = BAR_MAX;
    if (width > 0) {
        /* the final line's bar is the one drawn while the epoch ran: the tail of test
         * metrics may wrap, as that line is never redrawn */
        int avail = width - 1 - hl - (int)strlen(rest) - 3;   /* " [" and "]" */
        if (avail < bw) bw = avail;
    }
    char bar[BAR_MAX + 4] = "";
    if (bw >= BAR_MIN) {
        int64_t filled = s->steps ? s->step * bw / s->steps : bw;
        bar[0] = ' ';
        bar[1] = '[';
        for (int i = 0; i < bw; i++) bar[2 + i] = i < filled ? '=' : '.';
        if (!final && filled < bw) bar[2 + (filled > 0 ? filled - 1 : 0)] = '>';
        bar[2 + bw] = ']';
        bar[3 + bw] = 0;
    }
    int len = snprintf(buf, n, "%s%s%s%s", head, bar, rest, tail);
    if (len >= (int)n) len = n ? (int)n - 1 : 0;
    if (!final && width > 0 && len > width - 1) {
        len = width > 1 ? width - 1 : 0;
        buf[len] = 0;
    }
    return len;
}

void progress_json_number(FILE *out, const char *key, double v, int decimals)
{
    if (isfinite(v)) fprintf(out, "\"%s\": %.*f", key, decimals, v);
    else fprintf(out, "\"%s\": null, \"%s_nonfinite\": \"%s\"", key, key, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

void progress_eval_line(FILE *out, const RunEvalInfo *e)
{
    char l[32], a[32];
    fmt_value(e->loss, 4, l, sizeof l);
    fmt_value(e->acc, 4, a, sizeof a);
    fprintf(out, "Test loss: %s", l);
    if (e->has_acc) fprintf(out, " - test acc: %s", a);
    fprintf(out, " (%lld examples)\n", (long long)e->examples);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(out, "\\%c", *c);
        else if (*c < 0x20) fprintf(out, "\\u%04x", *c);
        else fputc(*c, out);
    }
    fputc('"', out);
}

/* Writes a bar line: on a terminal over the unfinished one (padded to cover it),
 * elsewhere only when it is final. */
static void draw(Progress *p, const RunStepInfo *s, bool final, const char *tail)
{
    char line[512];
    int width = p->tty ? (p->width > 0 ? p->width : progress_term_width(fileno(p->out))) : 0;
    int len = progress_bar_line(line, sizeof line, s, final, tail, width);
    if (p->tty) fprintf(p->out, "\r%s%*s", line, p->drawn > len ? p->drawn - len : 0, "");
    else fputs(line, p->out);
    if (final) {
        fputc('\n', p->out);
        p->drawn = 0;
    } else {
        p->drawn = len;
    }
    fflush(p->out);
}

static void bar_event(Progress *p, const RunEvent *ev)
{
    FILE *out = p->out;
    switch (ev->kind) {
    case RUN_START: {
        const RunStartInfo *s = &ev->u.start;
        fprintf(out, "Training %s: %lld epochs x %lld steps, batch %lld, %s mode, %s, %d thread%s\n", s->model,
                (long long)s->epochs, (long long)s->steps, (long long)s->batch, s->mode, s->blas, s->threads,
                s->threads == 1 ? "" : "s");
        if (s->ranks > 1)
            fprintf(out, "Data parallel: %d ranks x batch %lld = global batch %lld; %s\n", s->ranks, (long long)s->batch,
                    (long long)s->global_batch, s->comm);
        fprintf(out, "Optimizer %s\n", s->optimizer);
        if (s->resume_path) fprintf(out, "Resuming from %s at step %lld\n", s->resume_path, (long long)s->first_step);
        fflush(out);
        break;
    }
    case RUN_STEP: {
        const RunStepInfo *s = &ev->u.step;
        if (s->done == 1) p->last_draw = 0;
        if (p->tty && (s->done == 1 || s->step == s->steps || s->seconds - p->last_draw >= 0.1)) {
            draw(p, s, false, NULL);
            p->last_draw = s->seconds;
        }
        break;
    }
    case RUN_EPOCH: {
        const RunEpochInfo *e = &ev->u.epoch;
        char tail[128] = "", tl[32], ta[32];
        if (e->tested) {
            fmt_value(e->test_loss, 4, tl, sizeof tl);
            fmt_value(e->test_acc, 4, ta, sizeof ta);
            if (e->has_acc) snprintf(tail, sizeof tail, " - test_loss: %s - test_acc: %s", tl, ta);
            else snprintf(tail, sizeof tail, " - test_loss: %s", tl);
        }
        RunStepInfo s = {
            .epoch = e->epoch, .epochs = e->epochs, .step = e->steps, .steps = e->steps, .done = e->steps_run,
            .seconds = e->seconds, .loss = e->loss, .acc = e->acc, .has_acc = e->has_acc,
        };
        draw(p, &s, true, tail);
        break;
    }
    case RUN_INTERRUPTED: {
        const RunInterruptInfo *i = &ev->u.interrupted;
        progress_end(p);
        fprintf(out, "Interrupted at step %lld", (long long)i->step);
        if (i->saved) fprintf(out, "; saved %s (resume with --resume %s)\n", i->saved, i->saved);
        else fputs("; no checkpoint written (give --save PATH)\n", out);
        fflush(out);
        break;
    }
    case RUN_FINISHED: {
        const RunFinishInfo *f = &ev->u.finished;
        char tl[32], ta[32];
        fmt_value(f->test_loss, 4, tl, sizeof tl);
        fmt_value(f->test_acc, 4, ta, sizeof ta);
        fprintf(out, "Test loss: %s", tl);
        if (f->has_acc) fprintf(out, " - test acc: %s", ta);
        fprintf(out, " (%lld examples) - total time %.1fs (training %.1fs)\n", (long long)f->test_examples, f->seconds,
                f->train_seconds);
        if (f->saved) fprintf(out, "Saved weights to %s\n", f->saved);
        if (f->plot) fprintf(out, "Wrote %s\n", f->plot);
        fflush(out);
        break;
    }
    default: break;   /* evaluations and checkpoints show in the lines above */
    }
}

static void json_event(Progress *p, const RunEvent *ev)
{
    FILE *out = p->out;
    switch (ev->kind) {
    case RUN_EPOCH: {
        const RunEpochInfo *e = &ev->u.epoch;
        fprintf(out, "{\"epoch\": %lld, \"epochs\": %lld, \"steps\": %lld, ", (long long)e->epoch, (long long)e->epochs,
                (long long)e->steps);
        progress_json_number(out, "loss", e->loss, 6);
        if (e->has_acc) {
            fputs(", ", out);
            progress_json_number(out, "acc", e->acc, 6);
        }
        fprintf(out, ", \"seconds\": %.3f, \"ms_per_step\": %.3f", e->seconds,
                e->steps_run ? 1000 * e->seconds / (double)e->steps_run : 0.0);
        if (e->tested) {
            fputs(", ", out);
            progress_json_number(out, "test_loss", e->test_loss, 6);
            if (e->has_acc) {
                fputs(", ", out);
                progress_json_number(out, "test_acc", e->test_acc, 6);
            }
        }
        if (e->ranks > 1)
            fprintf(out, ", \"ranks\": %d, \"global_batch\": %lld, \"allreduce_ms_per_step\": %.3f, "
                    "\"comm_wait_ms_per_step\": %.3f", e->ranks, (long long)e->global_batch, e->allreduce_ms_per_step,
                    e->comm_wait_ms_per_step);
        fputs("}\n", out);
        fflush(out);
        break;
    }
    case RUN_INTERRUPTED:
        fprintf(out, "{\"interrupted\": true, \"step\": %lld", (long long)ev->u.interrupted.step);
        if (ev->u.interrupted.saved) {
            fputs(", \"checkpoint\": ", out);
            json_string(out, ev->u.interrupted.saved);
        }
        fputs("}\n", out);
        fflush(out);
        break;
    case RUN_FINISHED: {
        const RunFinishInfo *f = &ev->u.finished;
        fputc('{', out);
        progress_json_number(out, "test_loss", f->test_loss, 6);
        if (f->has_acc) {
            fputs(", ", out);
            progress_json_number(out, "test_acc", f->test_acc, 6);
        }
        fprintf(out, ", \"test_examples\": %lld, \"seconds\": %.3f, \"train_seconds\": %.3f}\n",
                (long long)f->test_examples, f->seconds, f->train_seconds);
        fflush(out);
        break;
    }
    default: break;
    }
}

static void on_event(void *ctx, const RunEvent *ev)
{
    Progress *p = ctx;
    if (p->mode == LOG_BAR) {
        bar_event(p, ev);
    } else if (p->mode == LOG_JSON) {
        json_event(p, ev);
    } else if (ev->kind == RUN_FINISHED) {
        const RunFinishInfo *f = &ev->u.finished;
        char tl[32], ta[32];
        fmt_value(f->test_loss, 6, tl, sizeof tl);
        fmt_value(f->test_acc, 6, ta, sizeof ta);
        fprintf(p->out, "test_loss %s", tl);
        if (f->has_acc) fprintf(p->out, " test_acc %s", ta);
        fputc('\n', p->out);
    }
}

RunReporter progress_reporter(Progress *p)
{
    return (RunReporter){ .fn = on_event, .ctx = p };
}

void progress_end(Progress *p)
{
    if (p->drawn > 0) {
        fputc('\n', p->out);
        fflush(p->out);
    }
    p->drawn = 0;
}
