#include "run/plot.h"
#include "util/mem.h"
#include "util/outfile.h"
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a growing text buffer ------------------------------------------------------ */

typedef struct Buf {
    char *p;
    size_t len, cap;
    bool oom;
} Buf;

static void buf_put(Buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    size_t need;
    if (!gc_add_size(b->len, n + 1, &need)) { b->oom = true; return; }
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < need) {
            if (!gc_mul_size(cap, 2, &cap)) { b->oom = true; return; }
        }
        char *np = gc_realloc(b->p, cap);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(Buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = true; return; }
    buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Text for XML character data and attributes: the five specials escaped, control
 * characters (not allowed in XML 1.0) as spaces, invalid UTF-8 bytes as '?'. */
static void buf_xml(Buf *b, const char *s)
{
    size_t n = strlen(s), i = 0;
    while (i < n) {
        size_t ok = utf8_valid_prefix(s + i, n - i);
        for (size_t k = i; k < i + ok; k++) {
            unsigned char c = (unsigned char)s[k];
            switch (c) {
            case '&': buf_str(b, "&amp;"); break;
            case '<': buf_str(b, "&lt;"); break;
            case '>': buf_str(b, "&gt;"); break;
            case '"': buf_str(b, "&quot;"); break;
            case '\'': buf_str(b, "&apos;"); break;
            default:
                if (c < 0x20) buf_put(b, " ", 1);
                else buf_put(b, s + k, 1);
            }
        }
        i += ok;
        if (i < n) { buf_put(b, "?", 1); i++; }
    }
}

/* ---- numbers, without printf's %f (its decimal point follows the locale) ------- */

static void fmt_num(char *out, size_t cap, double v, int dec)
{
    if (!isfinite(v) || v == 0) { snprintf(out, cap, "0"); return; }
    if (dec < 0) dec = 0;
    long long scale = 1;
    for (int i = 0; i < dec && i < 12; i++) scale *= 10;
    if (dec > 12 || fabs(v) * (double)scale >= 9e15) {
        /* scientific: m.mme+X */
        int e = (int)floor(log10(fabs(v)));
        double m = v / pow(10.0, e);
        if (fabs(m) >= 9.995) { m /= 10; e++; }
        char ms[32];
        fmt_num(ms, sizeof ms, m, 2);
        snprintf(out, cap, "%se%d", ms, e);
        return;
    }
    long long r = llround(v * (double)scale);
    unsigned long long a = r < 0 ? 0ull - (unsigned long long)r : (unsigned long long)r;
    const char *sign = r < 0 ? "-" : "";
    unsigned long long ip = a / (unsigned long long)scale, f = a % (unsigned long long)scale;
    char frac[16];
    frac[dec] = 0;
    for (int i = dec - 1; i >= 0; i--) {
        frac[i] = (char)('0' + f % 10);
        f /= 10;
    }
    snprintf(out, cap, "%s%llu%s%s", sign, ip, dec ? "." : "", frac);
}

/* A coordinate, one decimal. */
static void buf_num(Buf *b, double v, int dec)
{
    char s[64];
    fmt_num(s, sizeof s, v, dec);
    buf_str(b, s);
}

/* ---- geometry ------------------------------------------------------------------- */

#define SVG_W 960
#define SVG_H 720
#define PLOT_L 80.0
#define PLOT_R 40.0
#define PLOT_W (SVG_W - PLOT_L - PLOT_R)
#define PANEL_H 250.0
#define BUCKETS 1000          /* a long series is drawn as min and max per bucket */
#define MAX_EPOCH_LINES 100

#define COLOR_TRAIN "#1f77b4"
#define COLOR_TEST "#d62728"

typedef struct Panel {
    int id;
    double top;               /* pixel y of the plot area's top */
    double lo, hi;            /* data range of the y axis */
    double ystep;             /* tick step */
    double xmax;              /* data range of the x axis is [0, xmax] */
} Panel;

static double px_x(const Panel *p, double x) { return PLOT_L + x / p->xmax * PLOT_W; }

static double px_y(const Panel *p, double y)
{
    double t = (y - p->lo) / (p->hi - p->lo);
    if (t < -1) t = -1;       /* far outside: kept near so the clip path cuts it */
    if (t > 2) t = 2;
    return p->top + PANEL_H - t * PANEL_H;
}

/* 1, 2 or 5 times a power of ten, near range/target. */
static double nice_step(double range, int target)
{
    double raw = range / target;
    if (!(raw > 0) || !isfinite(raw)) return 1;
    double p = pow(10.0, floor(log10(raw)));
    double f = raw / p;
    double m = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return m * p;
}

static int step_decimals(double step)
{
    int dec = (int)-floor(log10(step) + 1e-9);
    return dec < 0 ? 0 : dec;
}

/* Rounds [lo, hi] out to tick multiples. */
static void nice_range(Panel *p, double lo, double hi)
{
    if (!(hi - lo > 1e-12 * fmax(1.0, fabs(hi)))) {
        double pad = fabs(hi) > 0 ? fabs(hi) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    double step = nice_step(hi - lo, 5);
    p->lo = floor(lo / step) * step;
    p->hi = ceil(hi / step) * step;
    if (!(p->hi > p->lo)) p->hi = p->lo + step;
    p->ystep = step;
}

/* ---- drawing ------------------------------------------------------------------- */

static void draw_frame(Buf *b, const Panel *p, const char *ylabel, const char *xlabel)
{
    double bottom = p->top + PANEL_H;
    int dec = step_decimals(p->ystep);
    /* horizontal grid and y tick labels */
    double q = (p->hi - p->lo) / p->ystep;
    long nt = q >= 0 && q <= 20 ? lround(q) : 20;
    for (long i = 0; i <= nt; i++) {
        double v = p->lo + (double)i * p->ystep;
        double y = px_y(p, v);
        buf_str(b, "<line x1=\""); buf_num(b, PLOT_L, 1);
        buf_str(b, "\" x2=\""); buf_num(b, PLOT_L + PLOT_W, 1);
        buf_str(b, "\" y1=\""); buf_num(b, y, 1);
        buf_str(b, "\" y2=\""); buf_num(b, y, 1);
        buf_str(b, "\" stroke=\"#e6e6e6\"/>\n<text x=\""); buf_num(b, PLOT_L - 8, 1);
        buf_str(b, "\" y=\""); buf_num(b, y + 4, 1);
        buf_str(b, "\" text-anchor=\"end\">"); buf_num(b, v, dec);
        buf_str(b, "</text>\n");
    }
    /* x ticks: whole steps */
    double xs = nice_step(p->xmax, 8);
    if (xs < 1) xs = 1;
    bool kilo = xs >= 1000;
    int xdec = kilo ? step_decimals(xs / 1000) : 0;
    for (long i = 0; (double)i * xs <= p->xmax * (1 + 1e-9) && i <= 50; i++) {
        double v = (double)i * xs, x = px_x(p, v);
        buf_str(b, "<line x1=\""); buf_num(b, x, 1);
        buf_str(b, "\" x2=\""); buf_num(b, x, 1);
        buf_str(b, "\" y1=\""); buf_num(b, bottom, 1);
        buf_str(b, "\" y2=\""); buf_num(b, bottom + 5, 1);
        buf_str(b, "\" stroke=\"#888\"/>\n<text x=\""); buf_num(b, x, 1);
        buf_str(b, "\" y=\""); buf_num(b, bottom + 19, 1);
        buf_str(b, "\" text-anchor=\"middle\">");
        buf_num(b, kilo ? v / 1000 : v, xdec);
        buf_str(b, kilo && i > 0 ? "k</text>\n" : "</text>\n");
    }
    buf_str(b, "<rect x=\""); buf_num(b, PLOT_L, 1);
    buf_str(b, "\" y=\""); buf_num(b, p->top, 1);
    buf_str(b, "\" width=\""); buf_num(b, PLOT_W, 1);
    buf_str(b, "\" height=\""); buf_num(b, PANEL_H, 1);
    buf_str(b, "\" fill=\"none\" stroke=\"#888\"/>\n");
    buf_str(b, "<text x=\""); buf_num(b, PLOT_L + PLOT_W / 2, 1);
    buf_str(b, "\" y=\""); buf_num(b, bottom + 38, 1);
    buf_printf(b, "\" text-anchor=\"middle\">%s</text>\n", xlabel);
    buf_printf(b, "<text transform=\"translate(22 ");
    buf_num(b, p->top + PANEL_H / 2, 1);
    buf_printf(b, ") rotate(-90)\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n", ylabel);
    /* the clip path for the series of this panel */
    buf_printf(b, "<clipPath id=\"plot%d\"><rect x=\"", p->id);
    buf_num(b, PLOT_L - 3, 1);
    buf_str(b, "\" y=\""); buf_num(b, p->top - 1, 1);
    buf_str(b, "\" width=\""); buf_num(b, PLOT_W + 6, 1);
    buf_str(b, "\" height=\""); buf_num(b, PANEL_H + 2, 1);
    buf_str(b, "\"/></clipPath>\n");
}

typedef struct Series {
    Buf *b;
    const Panel *p;
    const char *style;        /* attributes of a polyline */
    const char *color;        /* fill of a lone point */
    double lone_r;
    size_t npts;              /* points in the open polyline */
    double first_x, first_y;
} Series;

static void series_point(Series *s, double x, double y)
{
    double px = px_x(s->p, x), py = px_y(s->p, y);
    if (s->npts == 0) {
        s->first_x = px;
        s->first_y = py;
    } else {
        if (s->npts == 1) {
            buf_printf(s->b, "<polyline %s points=\"", s->style);
            buf_num(s->b, s->first_x, 1); buf_put(s->b, ",", 1); buf_num(s->b, s->first_y, 1);
        }
        buf_put(s->b, " ", 1);
        buf_num(s->b, px, 1); buf_put(s->b, ",", 1); buf_num(s->b, py, 1);
    }
    s->npts++;
}

static void series_break(Series *s)
{
    if (s->npts == 1 && s->lone_r > 0) {
        buf_str(s->b, "<circle cx=\""); buf_num(s->b, s->first_x, 1);
        buf_str(s->b, "\" cy=\""); buf_num(s->b, s->first_y, 1);
        buf_str(s->b, "\" r=\""); buf_num(s->b, s->lone_r, 1);
        buf_printf(s->b, "\" fill=\"%s\"/>\n", s->color);
    } else if (s->npts > 1) {
        buf_str(s->b, "\"/>\n");
    }
    s->npts = 0;
}

/* v[i] is drawn at x = xs[i], or i + 1 without xs; non-finite values break the line.
 * More than 2*BUCKETS values are drawn as the minimum and maximum of each bucket, in
 * order.  A lone point is a dot of radius lone_r (none when 0). */
static void draw_series(Buf *b, const Panel *p, const double *xs, const double *v, size_t n,
                        const char *style, const char *color, double lone_r)
{
    Series s = { .b = b, .p = p, .style = style, .color = color, .lone_r = lone_r };
#define X_AT(i) (xs ? xs[i] : (double)(i) + 1)
    if (n <= 2 * BUCKETS) {
        for (size_t i = 0; i < n; i++) {
            if (isfinite(v[i])) series_point(&s, X_AT(i), v[i]);
            else series_break(&s);
        }
    } else {
        for (size_t k = 0; k < BUCKETS; k++) {
            size_t a = (size_t)((double)n * k / BUCKETS), e = (size_t)((double)n * (k + 1) / BUCKETS);
            if (e > n) e = n;
            size_t imin = SIZE_MAX, imax = SIZE_MAX;
            for (size_t i = a; i < e; i++) {
                if (!isfinite(v[i])) continue;
                if (imin == SIZE_MAX || v[i] < v[imin]) imin = i;
                if (imax == SIZE_MAX || v[i] > v[imax]) imax = i;
            }
            if (imin == SIZE_MAX) { series_break(&s); continue; }
            size_t i1 = imin < imax ? imin : imax, i2 = imin < imax ? imax : imin;
            series_point(&s, X_AT(i1), v[i1]);
            if (i2 != i1) series_point(&s, X_AT(i2), v[i2]);
        }
    }
#undef X_AT
    series_break(&s);
}

/* Exponential moving average with bias correction (as TensorBoard's smoothing):
 * s = w*s + (1-w)*v over the finite values, reported as s / (1 - w^k) after k of
 * them; NaN where the input is not finite, so gaps stay gaps. */
static void ema(const float *v, size_t n, double w, double *out)
{
    double s = 0, wk = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) { out[i] = NAN; continue; }
        s = w * s + (1 - w) * v[i];
        wk *= w;
        out[i] = wk < 1 ? s / (1 - wk) : v[i];
    }
}

static double epoch_end_x(const TrainLog *log, double xmax, size_t e)
{
    if (log->steps_per_epoch > 0) return (double)(e + 1) * (double)log->steps_per_epoch;
    return xmax * (double)(e + 1) / (double)log->nepochs;
}

static void draw_epoch_lines(Buf *b, const Panel *p, const TrainLog *log)
{
    size_t nb;   /* boundaries strictly inside the axis */
    if (log->steps_per_epoch > 0) {
        double q = p->xmax / (double)log->steps_per_epoch;
        nb = q > 1e9 ? (size_t)1e9 : (size_t)q;
        if (nb > 0 && (double)nb * (double)log->steps_per_epoch >= p->xmax) nb--;
    } else {
        nb = log->nepochs > 0 ? log->nepochs - 1 : 0;
    }
    size_t stride = nb > MAX_EPOCH_LINES ? (nb + MAX_EPOCH_LINES - 1) / MAX_EPOCH_LINES : 1;
    for (size_t e = stride - 1; e < nb; e += stride) {
        double x = px_x(p, epoch_end_x(log, p->xmax, e));
        buf_str(b, "<line x1=\""); buf_num(b, x, 1);
        buf_str(b, "\" x2=\""); buf_num(b, x, 1);
        buf_str(b, "\" y1=\""); buf_num(b, p->top, 1);
        buf_str(b, "\" y2=\""); buf_num(b, p->top + PANEL_H, 1);
        buf_str(b, "\" stroke=\"#bbbbbb\" stroke-dasharray=\"3,3\"/>\n");
    }
    /* epoch numbers along the top of the first panel, when there is room */
    if (p->id == 0 && (log->steps_per_epoch > 0 || log->nepochs > 0) && nb + 1 <= 12) {
        for (size_t e = 0; e <= nb; e++) {
            double a = e ? epoch_end_x(log, p->xmax, e - 1) : 0;
            double z = e < nb ? epoch_end_x(log, p->xmax, e) : p->xmax;
            buf_str(b, "<text x=\""); buf_num(b, px_x(p, (a + z) / 2), 1);
            buf_str(b, "\" y=\""); buf_num(b, p->top - 6, 1);
            buf_printf(b, "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#888\">epoch %zu</text>\n", e + 1);
        }
    }
}

/* Test values per epoch: a dashed line through the finite ones (across the epochs
 * without evaluation), and markers. */
static void draw_epoch_markers(Buf *b, const Panel *p, const TrainLog *log, const float *v)
{
    if (!v) return;
    size_t nf = 0;
    for (size_t e = 0; e < log->nepochs; e++) nf += isfinite(v[e]) != 0;
    if (nf == 0) return;
    if (nf > 1) {
        double *xs = gc_calloc(nf, sizeof(double)), *vs = gc_calloc(nf, sizeof(double));
        if (!xs || !vs) {
            b->oom = true;
        } else {
            size_t k = 0;
            for (size_t e = 0; e < log->nepochs; e++) {
                if (!isfinite(v[e])) continue;
                xs[k] = epoch_end_x(log, p->xmax, e);
                vs[k++] = v[e];
            }
            draw_series(b, p, xs, vs, nf, "fill=\"none\" stroke=\"" COLOR_TEST "\" stroke-width=\"1.2\" "
                        "stroke-dasharray=\"5,3\"", COLOR_TEST, 0);
        }
        gc_free(xs);
        gc_free(vs);
    }
    /* at most a few hundred markers: beyond that the line carries the shape */
    size_t stride = nf > 300 ? (nf + 299) / 300 : 1, k = 0;
    const char *r = nf > 60 ? "2.5" : "4";
    for (size_t e = 0; e < log->nepochs; e++) {
        if (!isfinite(v[e])) continue;
        if (k++ % stride) continue;
        double y = px_y(p, v[e]);
        if (y < p->top || y > p->top + PANEL_H) continue;
        buf_str(b, "<circle cx=\""); buf_num(b, px_x(p, epoch_end_x(log, p->xmax, e)), 1);
        buf_str(b, "\" cy=\""); buf_num(b, y, 1);
        buf_printf(b, "\" r=\"%s\" fill=\"white\" stroke=\"%s\" stroke-width=\"2\"/>\n", r, COLOR_TEST);
    }
}

typedef struct LegendItem {
    int kind;                 /* 0 faint line, 1 bold line, 2 marker */
    char text[128];
} LegendItem;

/* In the top right corner, or the bottom right one when the data end high. */
static void draw_legend(Buf *b, const Panel *p, const LegendItem *it, int n, const char *note, bool bottom)
{
    if (n == 0 && !note) return;
    size_t chars = note ? strlen(note) : 0;
    for (int i = 0; i < n; i++) {
        size_t c = strlen(it[i].text) + 5;
        if (c > chars) chars = c;
    }
    double w = 20 + 6.8 * (double)chars, h = 10 + 18.0 * n + (note ? 18 : 0);
    if (w < 160) w = 160;
    double x = PLOT_L + PLOT_W - w - 8, y = bottom ? p->top + PANEL_H - 8 - h : p->top + 8;
    buf_str(b, "<rect x=\""); buf_num(b, x, 1);
    buf_str(b, "\" y=\""); buf_num(b, y, 1);
    buf_str(b, "\" width=\""); buf_num(b, w, 1);
    buf_str(b, "\" height=\""); buf_num(b, h, 1);
    buf_str(b, "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n");
    for (int i = 0; i < n; i++) {
        double cy = y + 14 + 18.0 * i;
        if (it[i].kind == 2) {
            buf_str(b, "<circle cx=\""); buf_num(b, x + 22, 1);
            buf_str(b, "\" cy=\""); buf_num(b, cy, 1);
            buf_printf(b, "\" r=\"4\" fill=\"white\" stroke=\"%s\" stroke-width=\"2\"/>\n", COLOR_TEST);
        } else {
            buf_str(b, "<line x1=\""); buf_num(b, x + 10, 1);
            buf_str(b, "\" x2=\""); buf_num(b, x + 34, 1);
            buf_str(b, "\" y1=\""); buf_num(b, cy, 1);
            buf_str(b, "\" y2=\""); buf_num(b, cy, 1);
            buf_printf(b, "\" stroke=\"%s\" %s/>\n", COLOR_TRAIN,
                       it[i].kind == 0 ? "stroke-opacity=\"0.3\" stroke-width=\"1\"" : "stroke-width=\"2.2\"");
        }
        buf_str(b, "<text x=\""); buf_num(b, x + 42, 1);
        buf_str(b, "\" y=\""); buf_num(b, cy + 4, 1);
        buf_str(b, "\">");
        buf_xml(b, it[i].text);
        buf_str(b, "</text>\n");
    }
    if (note) {
        buf_str(b, "<text x=\""); buf_num(b, x + 10, 1);
        buf_str(b, "\" y=\""); buf_num(b, y + 18.0 * n + 18, 1);
        buf_str(b, "\" fill=\"#b00000\">");
        buf_xml(b, note);
        buf_str(b, "</text>\n");
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One panel: per-step values (raw and smoothed) and per-epoch test values. */
static void draw_panel(Buf *b, Panel *p, const TrainLog *log, const float *steps, const float *tests,
                      double w, bool accuracy, double *work)
{
    size_t n = steps ? log->nsteps : 0, ne = tests ? log->nepochs : 0;
    const char *what = accuracy ? "accuracy" : "loss";
    /* the y range: finite values, with a far outlier cut off so the rest stays visible */
    size_t nf = 0, nbad = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(steps[i])) work[nf++] = steps[i];
        else nbad++;
    }
    size_t nclip = 0;
    double cut = INFINITY;
    if (nf > 0) {
        qsort(work, nf, sizeof *work, cmp_double);
        lo = work[0];
        hi = work[nf - 1];
        if (!accuracy && nf >= 20) {
            double p99 = work[(size_t)(0.99 * (double)(nf - 1))];
            if (p99 > lo && hi - lo > 10 * (p99 - lo)) {
                cut = lo + 1.5 * (p99 - lo);
                for (size_t i = 0; i < nf; i++) nclip += work[i] > cut;
                hi = cut;
            }
        }
    }
    size_t ntest = 0;
    for (size_t e = 0; e < ne; e++) {
        if (!isfinite(tests[e])) continue;
        ntest++;
        if (tests[e] < lo) lo = tests[e];
        if (tests[e] > hi && tests[e] <= cut) hi = tests[e];
    }
    if (accuracy) {
        lo = fmin(lo, 0.0);
        hi = fmax(hi, 1.0);
    } else if (nf + ntest == 0) {
        lo = 0;
        hi = 1;
    } else if (lo >= 0 && lo <= 0.25 * hi) {
        lo = 0;
    }
    nice_range(p, lo, hi);

    draw_frame(b, p, what, "step");
    draw_epoch_lines(b, p, log);
    buf_printf(b, "<g clip-path=\"url(#plot%d)\">\n", p->id);
    if (nf > 0) {
        for (size_t i = 0; i < n; i++) work[i] = steps[i];
        draw_series(b, p, NULL, work, n, "fill=\"none\" stroke=\"" COLOR_TRAIN "\" stroke-opacity=\"0.3\" "
                    "stroke-width=\"1\" stroke-linejoin=\"round\"", COLOR_TRAIN, 3.5);
        if (n > 1) {
            ema(steps, n, w, work);
            draw_series(b, p, NULL, work, n, "fill=\"none\" stroke=\"" COLOR_TRAIN "\" stroke-width=\"2.2\" "
                        "stroke-linejoin=\"round\"", COLOR_TRAIN, 3.5);
        }
    }
    buf_str(b, "</g>\n");
    draw_epoch_markers(b, p, log, tests);

    LegendItem it[3];
    int ni = 0;
    char num[32];
    if (nf > 0) {
        snprintf(it[ni].text, sizeof it[ni].text, "training %s per step", what);
        it[ni++].kind = 0;
        if (n > 1) {
            fmt_num(num, sizeof num, w, 3);
            snprintf(it[ni].text, sizeof it[ni].text, "smoothed (EMA, weight %s)", num);
            it[ni++].kind = 1;
        }
    }
    if (ntest > 0) {
        size_t last = ne;
        while (last > 0 && !isfinite(tests[last - 1])) last--;
        fmt_num(num, sizeof num, tests[last - 1], 4);
        snprintf(it[ni].text, sizeof it[ni].text, "test %s per epoch (last %s)", what, num);
        it[ni++].kind = 2;
    }
    char note[160], cutstr[32];
    const char *notep = NULL;
    if (nf + ntest == 0) {
        snprintf(note, sizeof note, "no %s recorded", what);
        notep = note;
    } else if (nbad > 0 || nclip > 0) {
        int len = 0;
        note[0] = 0;
        if (nbad > 0)
            len = snprintf(note, sizeof note, "%zu non-finite value%s not drawn", nbad, nbad == 1 ? "" : "s");
        if (nclip > 0 && len >= 0 && (size_t)len < sizeof note) {
            fmt_num(cutstr, sizeof cutstr, cut, step_decimals(p->ystep) + 1);
            snprintf(note + len, sizeof note - (size_t)len, "%s%zu above %s cut off", len ? "; " : "",
                     nclip, cutstr);
        }
        notep = note;
    }
    /* where the data end: in the upper half, the legend goes to the bottom */
    size_t up = 0, down = 0;
    for (size_t i = n - (n + 2) / 3; i < n; i++) {
        if (!isfinite(steps[i])) continue;
        if (steps[i] > (p->lo + p->hi) / 2) up++;
        else down++;
    }
    for (size_t e = ne - (ne + 2) / 3; e < ne; e++) {
        if (!isfinite(tests[e])) continue;
        if (tests[e] > (p->lo + p->hi) / 2) up++;
        else down++;
    }
    draw_legend(b, p, it, ni, notep, up > down);
}

static void build_svg(Buf *b, const TrainLog *log, double *work)
{
    double xmax = (double)log->nsteps;
    if (log->steps_per_epoch > 0 && log->nepochs > 0)
        xmax = fmax(xmax, (double)log->nepochs * (double)log->steps_per_epoch);
    if (xmax < 1) xmax = 1;
    /* smoothing: a window of about 1% of the run, at most 200 steps */
    double span = (double)log->nsteps / 100;
    if (span < 1) span = 1;
    if (span > 200) span = 200;
    double w = 1 - 1 / span;

    buf_str(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    buf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
               "font-size=\"12\" fill=\"#333\">\n", SVG_W, SVG_H, SVG_W, SVG_H);
    buf_str(b, "<title>");
    buf_xml(b, log->title ? log->title : "training run");
    buf_str(b, "</title>\n");
    buf_printf(b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", SVG_W, SVG_H);
    buf_printf(b, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\">",
               SVG_W / 2);
    buf_xml(b, log->title ? log->title : "training run");
    buf_str(b, "</text>\n");
    buf_printf(b, "<text x=\"%d\" y=\"48\" text-anchor=\"middle\" fill=\"#777\">%zu step%s",
               SVG_W / 2, log->nsteps, log->nsteps == 1 ? "" : "s");
    if (log->steps_per_epoch > 0)
        buf_printf(b, ", %lld per epoch", (long long)log->steps_per_epoch);
    if (log->nepochs > 0)
        buf_printf(b, ", %zu epoch%s", log->nepochs, log->nepochs == 1 ? "" : "s");
    buf_str(b, "</text>\n");

    Panel loss = { .id = 0, .top = 80, .xmax = xmax };
    Panel acc = { .id = 1, .top = 80 + PANEL_H + 80, .xmax = xmax };
    draw_panel(b, &loss, log, log->step_loss, log->epoch_test_loss, w, false, work);
    draw_panel(b, &acc, log, log->step_acc, log->epoch_test_acc, w, true, work);
    buf_str(b, "</svg>\n");
}

/* Writes b's text to path as util/outfile.h writes every file (see plot.h) and frees
 * it; the messages name the plot. */
static int write_svg(const char *path, Buf *b, DiagSink *d)
{
    if (b->oom) {
        gc_free(b->p);
        diag_plain(d, "cannot write plot '%s': out of memory", path);
        return -1;
    }
    OutFile of;
    FILE *f = outfile_open(&of, path, "plot", d);
    int rc = -1;
    if (f) {
        /* a failed fwrite leaves the stream's error set: outfile_commit reports it */
        (void)fwrite(b->p, 1, b->len, f);
        rc = outfile_commit(&of, d);
    }
    gc_free(b->p);
    return rc;
}

int plot_svg(const char *path, const TrainLog *log, DiagSink *d)
{
    Buf b = {0};
    size_t nwork = log->nsteps > log->nepochs ? log->nsteps : log->nepochs;
    double *work = gc_calloc(nwork ? nwork : 1, sizeof(double));
    if (work) build_svg(&b, log, work);
    else b.oom = true;
    gc_free(work);
    return write_svg(path, &b, d);
}

/* ---- a waterfall ----------------------------------------------------------------- */

#define WF_LABEL_W 260.0      /* the bars' labels, left of the axis */
#define WF_NOTE_W 250.0       /* their notes, right of it */
#define WF_ROW_H 30.0
#define WF_TOP 84.0

static double wf_x(double v, double xmax) { return WF_LABEL_W + v / xmax * (SVG_W - WF_LABEL_W - WF_NOTE_W); }

/* The axis: vertical grid lines and their values under the bars. */
static void wf_axis(Buf *b, double xmax, double step, double bottom, const char *axis)
{
    int dec = step_decimals(step);
    for (long i = 0; (double)i * step <= xmax * (1 + 1e-9) && i <= 50; i++) {
        double x = wf_x((double)i * step, xmax);
        buf_str(b, "<line x1=\""); buf_num(b, x, 1);
        buf_str(b, "\" x2=\""); buf_num(b, x, 1);
        buf_str(b, "\" y1=\""); buf_num(b, WF_TOP - 6, 1);
        buf_str(b, "\" y2=\""); buf_num(b, bottom, 1);
        buf_str(b, "\" stroke=\"#e6e6e6\"/>\n<text x=\""); buf_num(b, x, 1);
        buf_str(b, "\" y=\""); buf_num(b, bottom + 16, 1);
        buf_str(b, "\" text-anchor=\"middle\">"); buf_num(b, (double)i * step, dec);
        buf_str(b, "</text>\n");
    }
    buf_str(b, "<text x=\""); buf_num(b, wf_x(xmax / 2, xmax), 1);
    buf_str(b, "\" y=\""); buf_num(b, bottom + 36, 1);
    buf_str(b, "\" text-anchor=\"middle\">");
    buf_xml(b, axis);
    buf_str(b, "</text>\n");
}

/* A bar from value a to b (either order) at pixel row y, h high. */
static void wf_rect(Buf *b, double from, double to, double y, double h, double xmax, const char *fill)
{
    double lo = wf_x(fmin(from, to), xmax), hi = wf_x(fmax(from, to), xmax);
    buf_str(b, "<rect x=\""); buf_num(b, lo, 1);
    buf_str(b, "\" y=\""); buf_num(b, y, 1);
    buf_str(b, "\" width=\""); buf_num(b, fmax(hi - lo, 1), 1);
    buf_str(b, "\" height=\""); buf_num(b, h, 1);
    buf_printf(b, "\" fill=\"%s\"/>\n", fill);
}

/* Bar i: its label, the bar from `from` to `to` (a total from 0), its note, and a
 * dashed line on to the next bar's start. */
static void wf_bar(Buf *b, const Waterfall *w, int i, double xmax)
{
    const WaterfallBar *r = &w->bars[i];
    double y = WF_TOP + WF_ROW_H * i;
    bool down = r->to <= r->from, down2 = r->to2 <= r->from2;
    buf_str(b, "<text x=\""); buf_num(b, WF_LABEL_W - 8, 1);
    buf_str(b, "\" y=\""); buf_num(b, y + WF_ROW_H / 2 + 4, 1);
    buf_str(b, r->total ? "\" text-anchor=\"end\" font-weight=\"bold\">" : "\" text-anchor=\"end\">");
    buf_xml(b, r->label ? r->label : "");
    buf_str(b, "</text>\n");
    wf_rect(b, r->from, r->to, y + 5, WF_ROW_H - 10, xmax, r->total ? "#9db4d8" : down ? "#98d598" : "#eb9393");
    if (r->from2 != 0 || r->to2 != 0)
        wf_rect(b, r->from2, r->to2, y + WF_ROW_H / 2 - 3, 6, xmax, r->total ? "#2a4a80" : down2 ? "#176317" : "#8b1a1a");
    if (r->note) {
        buf_str(b, "<text x=\""); buf_num(b, SVG_W - WF_NOTE_W + 10, 1);
        buf_str(b, "\" y=\""); buf_num(b, y + WF_ROW_H / 2 + 4, 1);
        buf_str(b, "\">");
        buf_xml(b, r->note);
        buf_str(b, "</text>\n");
    }
    if (i + 1 < w->nbars) {
        double x = wf_x(r->to, xmax);
        buf_str(b, "<line x1=\""); buf_num(b, x, 1);
        buf_str(b, "\" x2=\""); buf_num(b, x, 1);
        buf_str(b, "\" y1=\""); buf_num(b, y + WF_ROW_H - 5, 1);
        buf_str(b, "\" y2=\""); buf_num(b, y + WF_ROW_H + 5, 1);
        buf_str(b, "\" stroke=\"#666\" stroke-dasharray=\"2,2\"/>\n");
    }
}

int plot_waterfall(const char *path, const Waterfall *w, DiagSink *d)
{
    Buf b = {0};
    double top = 0;
    for (int i = 0; i < w->nbars; i++)
        for (int k = 0; k < 4; k++) {
            double v = k == 0 ? w->bars[i].from : k == 1 ? w->bars[i].to : k == 2 ? w->bars[i].from2 : w->bars[i].to2;
            if (isfinite(v)) top = fmax(top, v);
        }
    double step = nice_step(top > 0 ? top : 1, 6), xmax = ceil((top > 0 ? top : 1) / step) * step;
    double bottom = WF_TOP + WF_ROW_H * w->nbars + 4;
    int h = (int)bottom + 60;
    buf_str(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    buf_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\" fill=\"#333\">\n",
               SVG_W, h, SVG_W, h);
    buf_str(&b, "<title>");
    buf_xml(&b, w->title ? w->title : "waterfall");
    buf_printf(&b, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", SVG_W, h);
    buf_printf(&b, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">", SVG_W / 2);
    buf_xml(&b, w->title ? w->title : "waterfall");
    buf_printf(&b, "</text>\n<text x=\"%d\" y=\"50\" text-anchor=\"middle\" fill=\"#777\">", SVG_W / 2);
    buf_xml(&b, w->subtitle ? w->subtitle : "");
    buf_str(&b, "</text>\n");
    wf_axis(&b, xmax, step, bottom, w->axis ? w->axis : "");
    for (int i = 0; i < w->nbars; i++)
        if (isfinite(w->bars[i].from) && isfinite(w->bars[i].to) && isfinite(w->bars[i].from2) &&
            isfinite(w->bars[i].to2))
            wf_bar(&b, w, i, xmax);
    buf_str(&b, "</svg>\n");
    return write_svg(path, &b, d);
}
