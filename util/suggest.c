#include "util/suggest.h"
#include <string.h>

int edit_distance(const char *a, const char *b)
{
    /* Damerau-Levenshtein (optimal string alignment) over short names. */
    enum { MAXL = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= MAXL || lb >= MAXL) return 1000;
    int d[MAXL + 1][MAXL + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

const char *suggest_nearest(const char *word, const char *const *cands, int n)
{
    int limit = (int)strlen(word) / 3;
    if (limit < 1) limit = 1;
    const char *best = NULL;
    int bestd = limit + 1;
    for (int i = 0; i < n; i++) {
        if (!cands[i]) continue;
        int dd = edit_distance(word, cands[i]);
        if (dd < bestd) { bestd = dd; best = cands[i]; }
    }
    return best;
}
