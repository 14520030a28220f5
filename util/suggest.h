#ifndef GRAPHC_SUGGEST_H
#define GRAPHC_SUGGEST_H
/* The candidate closest to `word` by edit distance, if close enough to be a likely
 * typo (distance at most a third of the word's length, and at least 1); else NULL. */
const char *suggest_nearest(const char *word, const char *const *cands, int n);
int edit_distance(const char *a, const char *b);
#endif
