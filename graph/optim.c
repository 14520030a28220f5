/* The train block's optimizer and learning-rate schedule as functions of the step.
 *
 * The learning rate of a step depends on the global step alone (no state carried from
 * one step to the next), so a run resumed from a checkpoint at step k continues the
 * schedule where it stopped, bit for bit.  The training loop computes it each step and
 * passes it to the kernels in the step's environment (exec/exec.h, StepEnv.lr). */
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "graph/graph.h"

double optim_lr(const TrainSpec *t, int64_t step)
{
    const LrSchedule *s = &t->sched;
    double base = t->lr;
    if (step < 0) step = 0;
    /* linear warmup to the schedule's first value (the base) */
    if (step < s->warmup) return base * (double)(step + 1) / (double)s->warmup;
    int64_t k = step - s->warmup;
    switch (s->kind) {
    case SCHED_STEP:
        return base * pow((double)s->factor, (double)(k / s->every));
    case SCHED_COSINE:
        if (k >= s->steps) return s->min;
        return s->min + (base - s->min) * (1.0 + cos(M_PI * (double)k / (double)s->steps)) / 2.0;
    default:
        return base;
    }
}

/* Appends to buf (of n bytes, NUL-terminated), as snprintf would write at its end. */
static void append(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t n, const char *fmt, ...)
{
    size_t k = strlen(buf);
    if (k + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - k, fmt, ap);
    va_end(ap);
}

const char *optim_describe(const TrainSpec *t, char *buf, size_t n)
{
    if (!n) return buf;
    buf[0] = 0;
    bool sched = t->sched.kind != SCHED_CONSTANT;
    /* the optimizer's lr is the schedule's base: written with the schedule */
    switch (t->optim) {
    case OPTIM_SGD:
        append(buf, n, "sgd(");
        if (!sched) append(buf, n, "lr=%g%s", t->lr, t->momentum > 0 || t->weight_decay > 0 ? ", " : "");
        if (t->momentum > 0) append(buf, n, "momentum=%g%s", t->momentum, t->nesterov ? ", nesterov=true" : "");
        if (t->weight_decay > 0) append(buf, n, "%sweight_decay=%g", t->momentum > 0 ? ", " : "", t->weight_decay);
        append(buf, n, ")");
        break;
    case OPTIM_ADAM: case OPTIM_ADAMW:
        append(buf, n, "%s(", t->optim == OPTIM_ADAM ? "adam" : "adamw");
        if (!sched) append(buf, n, "lr=%g, ", t->lr);
        append(buf, n, "beta1=%g, beta2=%g, eps=%g", t->beta1, t->beta2, t->eps);
        if (t->weight_decay > 0 || t->optim == OPTIM_ADAMW) append(buf, n, ", weight_decay=%g", t->weight_decay);
        append(buf, n, ")");
        break;
    default:
        append(buf, n, "rmsprop(");
        if (!sched) append(buf, n, "lr=%g, ", t->lr);
        append(buf, n, "rho=%g, eps=%g", t->rho, t->eps);
        if (t->momentum > 0) append(buf, n, ", momentum=%g", t->momentum);
        if (t->centered) append(buf, n, ", centered=true");
        if (t->weight_decay > 0) append(buf, n, ", weight_decay=%g", t->weight_decay);
        append(buf, n, ")");
        break;
    }
    if (t->sched.kind == SCHED_STEP)
        append(buf, n, ", lr = step_decay(%g, every=%lld, factor=%g)", t->lr, (long long)t->sched.every, t->sched.factor);
    else if (t->sched.kind == SCHED_COSINE)
        append(buf, n, ", lr = cosine(%g, steps=%lld, min=%g)", t->lr, (long long)t->sched.steps, t->sched.min);
    if (t->sched.warmup > 0) append(buf, n, ", warmup = %lld", (long long)t->sched.warmup);
    if (t->clip_norm > 0) append(buf, n, ", clip_norm = %g", t->clip_norm);
    return buf;
}
