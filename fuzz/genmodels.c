/* genmodels: models for a fuzz campaign (fuzz/campaign.sh), or a campaign in-process.
 *
 *   genmodels [-s SEED] [-n COUNT] [-m MUTANTS] [--check] [--quiet] DIR [FILE.net ...]
 *
 * Writes DIR/gen-SEED-I.net for I < COUNT, each the model that 4 KiB of random choice
 * bytes describe (fuzz/modelgen.h; the bytes are util/rng.h's from SEED and I, so the
 * same arguments give the same files), and for each of those and each FILE.net given,
 * MUTANTS mutated copies DIR/mut-SEED-I-K.net.  With --check every model also goes
 * through fuzz_pipeline (every stage, verified, and a step on both executors), which
 * aborts at the first violation; the last line counts the models that compiled. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fuzz/modelgen.h"
#include "fuzz/pipeline.h"
#include "util/rng.h"

enum { CHOICES = 4096 };

static int usage(void)
{
    fputs("usage: genmodels [-s SEED] [-n COUNT] [-m MUTANTS] [--check] [--quiet] DIR [FILE.net ...]\n", stderr);
    return 2;
}

static void choices(uint8_t *b, uint64_t seed, uint64_t stream, uint64_t index)
{
    for (size_t k = 0; k < CHOICES; k += 8) {
        uint64_t r = rng_at(seed ^ stream, index, k / 8);
        memcpy(b + k, &r, 8);
    }
}

typedef struct Run {
    const char *dir;
    uint64_t seed;
    bool check, quiet;
    long written, outcome[FUZZ_OUTCOME_COUNT];
} Run;

static int put(Run *r, const char *name, const char *text, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "genmodels: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    r->written++;
    if (r->check) {
        if (!r->quiet) fprintf(stderr, "%s\n", path);
        r->outcome[fuzz_pipeline(text, len, true)]++;
    }
    return 0;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t k;
    while (b && (k = fread(b + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

/* MUTANTS mutated copies of text, named after `tag`. */
static int mutants(Run *r, const char *tag, long mutants_each, const char *text, size_t len)
{
    uint8_t b[CHOICES];
    for (long k = 0; k < mutants_each; k++) {
        choices(b, r->seed, 0x307A7E, (uint64_t)r->written);
        size_t ml;
        char *m = modelgen_mutate(text, len, b, sizeof b, &ml);
        char name[256];
        snprintf(name, sizeof name, "mut-%s-%ld.net", tag, k);
        if (!m || put(r, name, m, ml) != 0) { free(m); return -1; }
        free(m);
    }
    return 0;
}

int main(int argc, char **argv)
{
    Run r = { 0 };
    long count = 100, mutants_each = 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--check")) r.check = true;
        else if (!strcmp(argv[i], "--quiet")) r.quiet = true;
        else if (i + 1 < argc && !strcmp(argv[i], "-s")) r.seed = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(argv[i], "-n")) count = strtol(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(argv[i], "-m")) mutants_each = strtol(argv[++i], NULL, 10);
        else return usage();
    }
    if (i >= argc || count < 0 || mutants_each < 0) return usage();
    r.dir = argv[i++];
    if (mkdir(r.dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "genmodels: cannot make %s: %s\n", r.dir, strerror(errno));
        return 1;
    }
    uint8_t b[CHOICES];
    for (long k = 0; k < count; k++) {
        choices(b, r.seed, 0x6E40DE, (uint64_t)k);
        size_t len;
        char *text = modelgen(b, sizeof b, &len);
        char name[256], tag[128];
        snprintf(tag, sizeof tag, "%llu-%ld", (unsigned long long)r.seed, k);
        snprintf(name, sizeof name, "gen-%s.net", tag);
        int rc = !text || put(&r, name, text, len) != 0 || mutants(&r, tag, mutants_each, text, len) != 0;
        free(text);
        if (rc) return 1;
    }
    for (; i < argc; i++) {
        size_t len;
        char *text = read_all(argv[i], &len);
        if (!text) {
            fprintf(stderr, "genmodels: cannot read %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
        char tag[200];
        snprintf(tag, sizeof tag, "%llu-%.*s", (unsigned long long)r.seed, (int)strcspn(base, "."), base);
        int rc = mutants(&r, tag, mutants_each, text, len);
        free(text);
        if (rc) return 1;
    }
    printf("%ld models written to %s", r.written, r.dir);
    if (r.check)
        printf(", %ld compiled (every stage checked), %ld of them ran a step on both executors",
               r.outcome[FUZZ_COMPILED] + r.outcome[FUZZ_RAN], r.outcome[FUZZ_RAN]);
    printf("\n");
    return 0;
}
