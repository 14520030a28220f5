/* graphc bench. */
#include <getopt.h>
#include <string.h>
#include "cli/cli.h"
#include "run/bench.h"

static const char bench_usage[] =
    "usage: graphc bench FILE.net [--batch N[,N...]] [--infer] [--threads N] [--steps N]\n"
    "                    [--warmup N] [--profile] [--compare-stages] [--json] [--isa NAME]\n"
    "                    [--dtype TYPE]\n"
    "                    [--ablate [--plot FILE.svg]]\n"
    "\n"
    "Runs the interpreter and the compiled plan side by side in one process, alternating\n"
    "step by step after a warm-up, on random inputs, and prints the median time per step,\n"
    "images per second, activation memory of each, and their ratio, with the step's\n"
    "GFLOP and the bytes the compiled plan's kernels read and write.\n"
    "  --batch LIST   batch sizes (default: the train block's)\n"
    "  --infer        time inference instead of a training step\n"
    "  --steps N      measured steps per mode (default 10)\n"
    "  --warmup N     unmeasured steps per mode first (default 2)\n"
    "  --profile      a per-op table for each mode (time, share, the threads' idle\n"
    "                 time and CPU time, FLOPs, bytes, .net line)\n"
    "  --compare-stages  also the compiled plan with every op alone (no parallel\n"
    "                 stages), alternating with the other two: what the stages buy\n"
    "  --json         one JSON object per batch size\n"
    "  --isa NAME     the kernels' variant: avx512, avx2 or portable (default: the\n"
    "                 best this CPU runs, or GRAPHC_ISA)\n"
    "  --dtype TYPE   fp32 (default) or bf16: the matrix products with bfloat16\n"
    "                 operands (rounded as they are packed), summed in fp32, both\n"
    "                 modes (docs/bf16.md).  Needs avx512_bf16; on AMX where\n"
    "                 the CPU has it (GRAPHC_AMX=0: not)\n"
    "  --ablate       where the compiled plan's speed comes from: the optimizations\n"
    "                 added to the interpreter one at a time, and removed from the full\n"
    "                 plan one at a time, every configuration alternating step by step:\n"
    "                 time, share of the gap, page faults, bytes allocated, peak memory,\n"
    "                 outputs against the interpreter's (docs/why-graph-mode.md)\n"
    "  --plot FILE    with --ablate and one batch size: the waterfall as an SVG\n"
    "                 (FILE must end in .svg)\n";

int cmd_bench(int argc, char **argv)
{
    static const struct option opts[] = {
        { "help", no_argument, 0, 'h' }, { "batch", required_argument, 0, 'b' }, { "infer", no_argument, 0, 'i' },
        { "threads", required_argument, 0, 't' }, { "steps", required_argument, 0, 's' },
        { "warmup", required_argument, 0, 'w' }, { "profile", no_argument, 0, 'p' }, { "json", no_argument, 0, 'j' },
        { "compare-stages", no_argument, 0, 'c' }, { "isa", required_argument, 0, 'I' }, { "dtype", required_argument, 0, 'D' },
        { "ablate", no_argument, 0, 'a' }, { "plot", required_argument, 0, 'P' }, { 0, 0, 0, 0 },
    };
    BenchOptions o = { .steps = 10, .warmup = 2, .out = stdout, .isa = cli_isa() };
    int64_t batches[16], v;
    bool bf16 = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(bench_usage, stdout); return EXIT_OK;
        case 'b': {
            char *list = optarg, *save = NULL;
            o.nbatches = 0;
            for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (o.nbatches == 16) return cli_usage_error("bench", "--batch: at most 16 sizes");
                if (!cli_parse_i64("bench", "--batch", tok, 1, 1 << 20, &batches[o.nbatches++])) return EXIT_USAGE;
            }
            break;
        }
        case 'i': o.infer = true; break;
        case 't': if (!cli_parse_i64("bench", "--threads", optarg, 1, 256, &v)) return EXIT_USAGE; o.threads = (int)v; break;
        case 's': if (!cli_parse_i64("bench", "--steps", optarg, 1, 100000, &v)) return EXIT_USAGE; o.steps = (int)v; break;
        case 'w': if (!cli_parse_i64("bench", "--warmup", optarg, 0, 100000, &v)) return EXIT_USAGE; o.warmup = (int)v; break;
        case 'p': o.profile = true; break;
        case 'j': o.json = true; break;
        case 'c': o.compare_stages = true; break;
        case 'I': if (!cli_parse_isa("bench", optarg, &o.isa)) return EXIT_USAGE; break;
        case 'D': if (!cli_parse_dtype("bench", optarg, &bf16)) return EXIT_USAGE; break;
        case 'a': o.ablate = true; break;
        case 'P':
            if (!cli_plot_path("bench", optarg)) return EXIT_USAGE;
            o.plot = optarg;
            break;
        case ':': return cli_usage_error("bench", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_unknown_option("bench", opts, argv[optind - 1]);
        }
    }
    if (optind != argc - 1) return cli_usage_error("bench", optind == argc ? "missing FILE" : "expected one FILE");
    if (o.ablate && (o.profile || o.compare_stages))
        return cli_usage_error("bench", "--ablate measures every configuration itself: not with %s",
                               o.profile ? "--profile" : "--compare-stages");
    if (o.plot && !o.ablate) return cli_usage_error("bench", "--plot draws the ablation: it needs --ablate");
    if (o.plot && o.nbatches > 1) return cli_usage_error("bench", "--plot draws one batch size: give one --batch");
    if (!cli_apply_dtype("bench", bf16, &o.isa)) return EXIT_USAGE;
    Model m;
    if (cli_load_model(&m, argv[optind]) != 0) { cli_free_model(&m); return EXIT_BAD_INPUT; }
    if (o.nbatches == 0) { batches[0] = m.graph->train.batch; o.nbatches = 1; }
    o.batches = batches;
    DiagSink d;
    diag_init(&d, NULL);
    int rc = EXIT_OK;
    if (!o.infer && m.graph->train.minimize < 0) {
        diag_plain(&d, "%s: no loss to train (use --infer, or add a train block)", m.src.name);
        rc = EXIT_BAD_INPUT;
    } else if (bench_run(m.graph, &o, &d) != 0) {
        rc = EXIT_BAD_INPUT;
    }
    diag_flush(&d, stderr);
    diag_free(&d);
    cli_free_model(&m);
    return rc;
}
