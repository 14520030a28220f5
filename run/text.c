/* Byte-level language models: baselines and sampling.  See text.h. */
#include <math.h>
#include <string.h>
#include "run/text.h"
#include "util/mem.h"

int text_baselines(const Dataset *train, const Dataset *valid, double *unigram, double *bigram)
{
    if (!train->text || !valid->text || train->text_len < 1) return -1;
    double *uni = gc_calloc(256, sizeof *uni), *pair = gc_calloc(256 * 256, sizeof *pair);
    double *from = gc_calloc(256, sizeof *from);
    if (!uni || !pair || !from) {
        gc_free(uni);
        gc_free(pair);
        gc_free(from);
        return -1;
    }
    const uint8_t *t = train->text;
    for (int64_t i = 0; i < train->text_len; i++) uni[t[i]]++;
    for (int64_t i = 0; i + 1 < train->text_len; i++) {
        pair[t[i] * 256 + t[i + 1]]++;
        from[t[i]]++;
    }
    double N = (double)train->text_len, lu = 0, lb = 0;
    int64_t n = 0, c = valid->sample_size;
    for (int64_t w = 0; w < valid->count; w++) {
        const uint8_t *v = valid->text + w * valid->stride;
        for (int64_t k = 0; k < c; k++, n++) {
            int a = v[k], b = v[k + 1];
            double pu = (uni[b] + 1) / (N + 256);
            lu -= log(pu);
            lb -= log((pair[a * 256 + b] + pu) / (from[a] + 1));
        }
    }
    gc_free(uni);
    gc_free(pair);
    gc_free(from);
    if (n == 0) return -1;
    *unigram = lu / (double)n;
    *bigram = lb / (double)n;
    return 0;
}

static double weight(float p, double inv_t)
{
    return isfinite(p) && p > 0 ? pow((double)p, inv_t) : 0;
}

int text_pick(const float *p, int n, double temperature, double u)
{
    if (temperature <= 0) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (weight(p[i], 1) > weight(p[best], 1)) best = i;
        return best;
    }
    double inv_t = 1 / temperature, sum = 0;
    for (int i = 0; i < n; i++) sum += weight(p[i], inv_t);
    if (!(sum > 0) || !isfinite(sum)) return 0;
    double at = u * sum, run = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        double wi = weight(p[i], inv_t);
        if (wi <= 0) continue;
        run += wi;
        last = i;
        if (at < run) return i;
    }
    return last;   /* u * sum rounded past the running sum */
}
