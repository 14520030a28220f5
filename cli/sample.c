/* graphc sample: generate text with a byte-level language model (models/charlm.net),
 * and the baselines that `graphc eval` prints beside such a model's loss. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "exec/pipeline.h"
#include "run/sources.h"
#include "run/text.h"
#include "run/train.h"
#include "util/rng.h"

static const char sample_usage[] =
    "usage: graphc sample FILE.net --weights PATH --prompt TEXT [--length N] [--temperature T]\n"
    "                     [--seed S] [--mode MODE]\n"
    "\n"
    "Continues TEXT byte by byte with a language model whose input is i32[B, T] byte ids\n"
    "and whose first output is the probabilities of the byte after them, [B, 256]\n"
    "(models/charlm.net).  Each step feeds the last T bytes (a shorter text is padded on\n"
    "the left with spaces) and draws the next byte from the output raised to 1/T and\n"
    "renormalized (--temperature 0: the most likely byte).  Prints TEXT and the N bytes\n"
    "(default 200) after it.  The same seed (default 1) gives the same text.\n";

/* The model's byte-id input: an i32 input [B, T] that is not the labels.  Its index
 * and T, or -1 reported. */
static int ids_input(const Graph *g, const char *file, int64_t *T, DiagSink *d)
{
    for (int i = 0; i < g->ninputs; i++) {
        const Node *n = &g->nodes[g->inputs[i]];
        if (g->inputs[i] == g->label_input || n->dtype != DT_I32) continue;
        if (n->shape.rank == 2 && n->shape.d[0].sym >= 0 && n->shape.d[1].sym < 0 && n->shape.d[1].v >= 1) {
            *T = n->shape.d[1].v;
            return i;
        }
    }
    diag_plain(d, "%s: sample needs an input of byte ids i32[B, T] (besides the labels)", file);
    return -1;
}

/* Runs `n` steps, printing each byte drawn. */
static int generate(const Step *st, Weights *w, int xi, int64_t T, const char *prompt, int64_t n, double temp, uint64_t seed,
                    DiagSink *d)
{
    const Graph *g = st->graph;
    const Node *on = &g->nodes[g->outputs[0].node];
    int64_t V = shape_numel(&on->shape);
    if (V < 1 || V > 256) {
        diag_plain(d, "sample: the first output '%s' has %lld values per example; a byte model's has at most 256",
                   g->outputs[0].name, (long long)V);
        return -1;
    }
    size_t plen = strlen(prompt), cap = plen + (size_t)n;
    char *text = gc_malloc(cap + 1);
    int32_t *ids = gc_calloc((size_t)T, sizeof *ids);
    float *probs = gc_calloc((size_t)V, sizeof *probs);
    const void **feeds = gc_calloc((size_t)g->ninputs, sizeof *feeds);
    void *zeros = NULL;
    size_t most = 0;
    for (int i = 0; i < g->ninputs; i++)
        if (node_bytes(&g->nodes[g->inputs[i]]) > most) most = node_bytes(&g->nodes[g->inputs[i]]);
    zeros = gc_calloc(most ? most : 1, 1);
    int rc = -1;
    if (!text || !ids || !probs || !feeds || !zeros) {
        diag_plain(d, "out of memory");
        goto out;
    }
    memcpy(text, prompt, plen);
    size_t len = plen;
    for (int i = 0; i < g->ninputs; i++) feeds[i] = i == xi ? (const void *)ids : zeros;
    fputs(prompt, stdout);
    for (int64_t s = 0; s < n; s++) {
        for (int64_t k = 0; k < T; k++) {   /* the last T bytes, spaces before a short text */
            int64_t at = (int64_t)len - T + k;
            ids[k] = at >= 0 ? (unsigned char)text[at] : ' ';
        }
        float *outs[16] = { probs };
        StepEnv env = { .d = d, .w = w };
        if (g->noutputs > 16 || executor_run(st->ex, feeds, outs, &env) != 0) goto out;
        int b = text_pick(probs, (int)V, temp, rng_unit(rng_at(seed, 0x73616d70ull, (uint64_t)s)));
        text[len++] = (char)b;
        putchar(b);
    }
    putchar('\n');
    rc = 0;
out:
    gc_free(text);
    gc_free(ids);
    gc_free(probs);
    gc_free(feeds);
    gc_free(zeros);
    return rc;
}

int cmd_sample(int argc, char **argv)
{
    static const struct option opts[] = {
        { "help", no_argument, 0, 'h' },          { "weights", required_argument, 0, 'w' },
        { "prompt", required_argument, 0, 'p' },  { "length", required_argument, 0, 'n' },
        { "temperature", required_argument, 0, 't' }, { "seed", required_argument, 0, 's' },
        { "mode", required_argument, 0, 'm' },    { 0, 0, 0, 0 },
    };
    const char *weights = NULL, *prompt = NULL;
    int64_t length = 200, seed = 1;
    double temp = 1;
    ExecMode mode = MODE_COMPILED;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(sample_usage, stdout); return EXIT_OK;
        case 'w': weights = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': if (!cli_parse_i64("sample", "--length", optarg, 0, 1 << 24, &length)) return EXIT_USAGE; break;
        case 't': if (!cli_parse_f64("sample", "--temperature", optarg, 0, 100, &temp)) return EXIT_USAGE; break;
        case 's': if (!cli_parse_i64("sample", "--seed", optarg, 0, INT64_MAX, &seed)) return EXIT_USAGE; break;
        case 'm': if (cli_parse_mode("sample", optarg, &mode) != EXIT_OK) return EXIT_USAGE; break;
        case ':': return cli_usage_error("sample", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("sample", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) return cli_usage_error("sample", "missing FILE");
    if (optind + 1 < argc) return cli_usage_error("sample", "unexpected argument '%s'", argv[optind + 1]);
    if (!weights) return cli_usage_error("sample", "missing --weights PATH");
    if (!prompt) return cli_usage_error("sample", "missing --prompt TEXT");
    const char *file = argv[optind];
    Model m;
    if (cli_load_model(&m, file) != 0) {
        cli_free_model(&m);
        return EXIT_BAD_INPUT;
    }
    DiagSink d;
    diag_init(&d, NULL);
    Weights w = { 0 };
    Step st = { 0 };
    int rc = EXIT_BAD_INPUT;
    int64_t T = 0;
    int xi = ids_input(m.graph, file, &T, &d);
    Pool *pool = pool_new(0);
    CompileOptions co = { .mode = mode, .pool = pool };
    if (xi >= 0 && m.graph->noutputs == 0) diag_plain(&d, "%s: the model has no output", file);
    else if (xi >= 0 && pool && weights_init(&w, m.graph, 0, &d) == 0 && checkpoint_load(weights, m.graph, &w, &d) == 0 &&
             prepare(m.graph, FOR_INFERENCE, 1, &co, &w, &st, &d) == 0 &&
             generate(&st, &w, xi, T, prompt, length, temp, (uint64_t)seed, &d) == 0)
        rc = EXIT_OK;
    if (!pool) diag_plain(&d, "out of memory");
    diag_flush(&d, stderr);
    diag_free(&d);
    step_free(&st);
    weights_free(&w);
    pool_free(pool);
    cli_free_model(&m);
    return rc;
}

int cli_text_baselines(const Graph *g, const char *data_dir, DiagSink *d)
{
    TrainSpec t = g->train;
    if (t.data != DATA_TEXT) return 0;
    if (data_dir) t.data_path = data_dir;
    DataWant want = { 0 };
    Dataset tr, va;
    double uni, bi;
    if (data_source_open(&t, &want, true, &tr, &va, d) != 0) return -1;
    int rc = text_baselines(&tr, &va, &uni, &bi);
    if (rc == 0)
        printf("Baselines on the same %lld bytes: unigram %.4f, bigram %.4f (loss per byte, nats)\n",
               (long long)(va.count * va.sample_size), uni, bi);
    dataset_free(&tr);
    dataset_free(&va);
    return rc;
}
