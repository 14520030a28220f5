#!/usr/bin/env python3
"""bench/mpi_scaling.sh's bookkeeping and its model of the data-parallel step: the
standard library only, any python3.

  mpi_model.py record KEY=VALUE...          print one JSON object (digits -> ints)
  mpi_model.py tag KEY=VALUE... < out       the JSON lines of out, each with the keys added
  mpi_model.py profile KEY=VALUE... < out   graphc bench --profile --json's output as records
  mpi_model.py buckets FUSED.json           the gradient buckets of a graphc dump
                                            --stage fused --ranks N --format json, and
                                            which ops of the step follow the first one
  mpi_model.py bucket-sizes RESULTS.jsonl   the buckets' sizes in bytes, comma-separated
  mpi_model.py write --jsonl F --out F.md   fit, model, check, predict; the Markdown report

The model (docs/distributed-scaling.md says it in full): one step of N ranks is

  T(N) = T_compute + T_exposed
  T_ring(S, N) = 2 (N - 1) alpha + 2 (N - 1) / N * S / beta

with the gradient buckets summed one after the other by the communication thread;
bucket 0 starts when the dense layers' gradients are made and can hide behind the
backward compute that follows it (T_after, from the profile), the last bucket cannot.
"""
import argparse
import json
import math
import re
import statistics
import sys

import report   # bench/report.py, beside this file (kv, table)

NETWORKS = [  # name, bandwidth bit/s, latency per message s
    ("10 Gbit/s", 10e9, 20e-6),
    ("100 Gbit/s", 100e9, 5e-6),
]
SCALE_RANKS = [1, 2, 4, 8, 16, 32, 64]
LOSS_BYTES = 24   # the step's loss, accuracy and stop flag: 3 doubles summed every step
SMALL = 64        # the two-regime fit: latency from messages up to SMALL bytes,
LARGE = 256 << 10  # bandwidth from messages of LARGE bytes and more


def kv(pairs):
    return report.kv(pairs, "mpi_model.py")


def cmd_record(args):
    print(json.dumps(kv(args.pairs)))


def cmd_tag(args):
    tags = kv(args.pairs)
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            o = json.loads(line)
        except json.JSONDecodeError:
            continue
        print(json.dumps({**tags, **o}))


ROW = re.compile(r"^\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)%")
OUTSIDE = re.compile(r"^\s+outside kernels\s+([-\d.]+)")
HEAD = re.compile(r"profile, (\w+) mode \(per step; (\d+) steps\)")


def cmd_profile(args):
    tags = kv(args.pairs)
    prof = None
    for line in sys.stdin:
        if line.startswith("{"):
            print(json.dumps({"kind": "bench", **tags, **json.loads(line)}))
            continue
        m = HEAD.search(line)
        if m:
            if prof:
                print(json.dumps(prof))
            prof = {"kind": "profile", **tags, "mode": m.group(1), "steps": int(m.group(2)), "rows": []}
            continue
        m = OUTSIDE.match(line)
        if m and prof:
            prof["outside_ms"] = float(m.group(1))
            continue
        m = ROW.match(line)
        if m and prof:
            prof["rows"].append({"op": m.group(1), "line": int(m.group(2)), "calls": int(m.group(3)),
                                 "ms": float(m.group(4))})
    if prof:
        print(json.dumps(prof))


def cmd_buckets(args):
    with open(args.fused) as f:
        g = json.load(f)
    nodes = g["nodes"]
    buckets, first_ar, first_wait = [], None, None
    for i, n in enumerate(nodes):
        if n["op"] == "allreduce":
            b = int(re.search(r"bucket=(\d+)", n["attrs"]).group(1))
            buckets.append({"bucket": b, "bytes": 4 * math.prod(n["shape"]), "node": n["id"], "line": n["line"]})
            if first_ar is None:
                first_ar = i
        if n["op"] == "allreduce_wait" and first_wait is None:
            first_wait = i
    if first_ar is None or first_wait is None:
        sys.exit("mpi_model.py buckets: no allreduce in the dump (was it made with --ranks 2?)")
    free = {"input", "param", "const", "reshape", "allreduce", "allreduce_wait", "slice"}
    keys = lambda ns: {(n["op"], n["line"]) for n in ns if n["op"] not in free}
    after = keys(nodes[first_ar + 1:first_wait])
    before = keys(nodes[:first_ar]) | keys(nodes[first_wait:])
    print(json.dumps({"kind": "buckets", "buckets": buckets,
                      "after_first_bucket": sorted([list(k) for k in after - before]),
                      "ambiguous": sorted([list(k) for k in after & before])}))


def load(path):
    recs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if line:
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{n}: not JSON: {e}")
    return recs


def cmd_bucket_sizes(args):
    b = [r for r in load(args.jsonl) if r.get("kind") == "buckets"]
    if not b:
        sys.exit("mpi_model.py: no buckets record")
    sizes = [x["bytes"] for x in b[0]["buckets"]]
    print(",".join(str(s) for s in sizes + ([sum(sizes)] if len(sizes) > 1 else [])))


# ---------------------------------------------------------------- the model

def t_ring(S, N, alpha, beta):
    """Ring allreduce of S bytes over N ranks: 2(N-1) messages, 2(N-1)/N of S each way."""
    if N <= 1:
        return 0.0
    return 2 * (N - 1) * alpha + 2 * (N - 1) / N * S / beta


def t_small(N, alpha, beta):
    """The per-step sum of LOSS_BYTES: recursive doubling, ceil(log2 N) exchanges."""
    if N <= 1:
        return 0.0
    return math.ceil(math.log2(N)) * (alpha + LOSS_BYTES / beta)


def step(T_c, T_after, sizes, N, alpha, beta, small):
    """Step time with overlap and with everything exposed (one bucket at the end).
    sizes: bucket bytes in the order they are started; only the first can hide behind
    T_after, later ones start at the end of the backward pass (or when the one before
    finishes, one collective at a time).  Returns a dict of seconds."""
    if N <= 1:
        return {"T": T_c, "T_none": T_c, "exposed": 0.0, "exposed_none": 0.0, "rings": [0.0] * len(sizes),
                "busy": 0.0, "wait": 0.0, "small": 0.0}
    rings = [t_ring(S, N, alpha, beta) for S in sizes]
    # times from the start of the first bucket: it runs [0, r0]; the backward pass ends at T_after
    end = rings[0]
    busy = rings[0]
    for r in rings[1:]:
        start = max(T_after, end)
        busy += start + r - T_after     # from its hand-over (end of backward) to completion
        end = start + r
    wait = max(end - T_after, 0.0)
    exposed = wait + small
    exposed_none = t_ring(sum(sizes), N, alpha, beta) + small
    return {"T": T_c + exposed, "T_none": T_c + exposed_none, "exposed": exposed, "exposed_none": exposed_none,
            "rings": rings, "busy": busy, "wait": wait, "small": small}


def fit_line(points):
    """t = A + B bytes, least squares of the relative error (weights 1/t^2), so that
    4-byte and 16-MiB messages count alike.  Returns A, B (seconds, s/byte)."""
    # minimise sum (A u + B x u - 1)^2 with u = 1/t
    s_uu = sum((1 / t) ** 2 for x, t in points)
    s_xu = sum(x * (1 / t) ** 2 for x, t in points)
    s_xx = sum((x / t) ** 2 for x, t in points)
    s_u = sum(1 / t for x, t in points)
    s_x = sum(x / t for x, t in points)
    det = s_uu * s_xx - s_xu ** 2
    A = (s_u * s_xx - s_x * s_xu) / det
    B = (s_uu * s_x - s_xu * s_u) / det
    return A, B


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


# ---------------------------------------------------------------- formatting

def ms(v, nd=None):
    if v is None:
        return "—"
    v *= 1e3
    if nd is not None:
        return f"{v:.{nd}f}"
    a = abs(v)
    return f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 0.1 else f"{v:.3f}"


def us(v):
    return "—" if v is None else f"{v * 1e6:.1f}" if v < 1e-3 else f"{v * 1e6:,.0f}"


def pct(v):
    return "—" if v is None else f"{100 * v:+.0f}%"


def nbytes(b):
    if b >= 1 << 20:
        return f"{b / (1 << 20):g} MiB" if b % (1 << 20) == 0 else f"{b:,} B ({b / 1e6:.1f} MB)"
    if b >= 1024:
        return f"{b / 1024:g} KiB" if b % 1024 == 0 else f"{b:,} B"
    return f"{b} B"


CONFIGS = [  # config, what
    ("r1", "1 process, no mpirun"),
    ("r1t1", "1 process, no mpirun, 1 thread"),
    ("r2", "2 ranks, gradient buckets of 4M (default): overlap"),
    ("r2_one_bucket", "2 ranks, --bucket-size 1G: one bucket after the backward pass, no overlap"),
    ("r4", "4 ranks, buckets of 4M"),
]


def cmd_write(args):
    recs = load(args.jsonl)
    meta = next((r for r in recs if r.get("kind") == "meta"), None)
    if not meta:
        sys.exit("mpi_model.py: no meta record in " + args.jsonl)
    end = next((r for r in recs if r.get("kind") == "end"), {})
    bk = next(r for r in recs if r.get("kind") == "buckets")
    sizes = [b["bytes"] for b in sorted(bk["buckets"], key=lambda b: b["bucket"])]
    S = sum(sizes)
    nproc = int(meta["nproc"])
    batch = int(meta["batch"])
    errors = [r for r in recs if r.get("kind") == "error"]

    # ---- the runs: the last epoch of each, medians over the repetitions
    runs = {}
    for r in recs:
        if r.get("kind") == "run" and "epoch" in r and r["epoch"] == r["epochs"]:
            runs.setdefault(r["config"], []).append(r)
    meas = {}
    for c, rs in runs.items():
        N = rs[0]["ranks"]
        step_s = [r["ms_per_step"] / 1e3 for r in rs]
        meas[c] = {
            "ranks": N, "threads": rs[0]["threads"], "n": len(rs),
            "T": med(step_s), "T_min": min(step_s), "T_max": max(step_s),
            "ips": med([N * batch / t for t in step_s]),
            "busy": med([r.get("allreduce_ms_per_step", 0) / 1e3 for r in rs]) if N > 1 else None,
            "wait": med([r.get("comm_wait_ms_per_step", 0) / 1e3 for r in rs]) if N > 1 else None,
            "loads": [r.get("loadavg", "").split(" ")[0] for r in rs],
            "command": rs[0].get("command", ""),
        }

    # ---- compute: graphc bench (compiled plan) and its profile, by thread count
    bench = {}
    for r in recs:
        if r.get("kind") == "bench":
            bench.setdefault(r["threads"], []).append(r)
    T_c = {t: med([r["compiled_ms"] / 1e3 for r in rs]) for t, rs in bench.items()}
    T_c_interp = {t: med([r["interp_ms"] / 1e3 for r in rs]) for t, rs in bench.items()}
    # the same, N copies at once: per repetition the slowest copy (the slowest rank
    # sets the step), then the median over the repetitions
    conc = {}
    for r in recs:
        if r.get("kind") == "concurrent" and "compiled_ms" in r:
            conc.setdefault((r["procs"], r["threads"]), {}).setdefault(r["rep"], []).append(r["compiled_ms"] / 1e3)
    T_conc = {k: med([max(v) for v in reps.values()]) for k, reps in conc.items()}
    T_conc_med = {k: med([x for v in reps.values() for x in v]) for k, reps in conc.items()}
    after_keys = {(op, line) for op, line in bk["after_first_bucket"]}
    prof = {}
    for r in recs:
        if r.get("kind") == "profile" and r["mode"] == "compiled":
            prof.setdefault(r["threads"], []).append(r)
    frac, prof_rows = {}, {}
    for t, ps in prof.items():
        fs = []
        rows = {}
        for p in ps:
            step_ms = sum(x["ms"] for x in p["rows"]) + p.get("outside_ms", 0)
            a = sum(x["ms"] for x in p["rows"] if (x["op"], x["line"]) in after_keys)
            fs.append(a / step_ms)
            for x in p["rows"]:
                rows.setdefault((x["op"], x["line"]), []).append(x["ms"])
            rows.setdefault(("(profiled step)", 0), []).append(step_ms)
        frac[t] = med(fs)
        prof_rows[t] = {k: med(v) for k, v in rows.items()}

    # ---- the allreduce sweep: fits per (ranks, mode)
    ar = {}
    for r in recs:
        if r.get("kind") == "allreduce":
            ar.setdefault((r["ranks"], r["mode"]), []).append(r)
    fits = {}
    for (N, mode), rs in ar.items():
        pts = [(r["bytes"], r["median_us"] * 1e-6) for r in rs if r["bytes"] & (r["bytes"] - 1) == 0]
        if len(pts) < 2:
            continue
        A, B = fit_line(pts)
        alpha = A / (2 * (N - 1))
        beta = 2 * (N - 1) / N / B if B > 0 else float("inf")
        resid = [abs(A + B * x - t) / t for x, t in pts]
        # two regimes: the latency from the small messages, the bandwidth from the
        # large ones (ordinary least squares of t = a + b bytes over >= LARGE bytes)
        small = [t for x, t in pts if x <= SMALL]
        large = [(x, t) for x, t in pts if x >= LARGE]
        A2 = statistics.median(small) if small else A
        B2 = B
        if len(large) >= 2:
            mx = statistics.fmean(x for x, t in large)
            mt = statistics.fmean(t for x, t in large)
            B2 = sum((x - mx) * (t - mt) for x, t in large) / sum((x - mx) ** 2 for x, t in large)
        fits[(N, mode)] = {"A": A, "B": B, "alpha": alpha, "beta": beta, "resid": statistics.median(resid),
                           "resid_max": max(resid), "pts": {r["bytes"]: r["median_us"] * 1e-6 for r in rs},
                           "reps": {r["bytes"]: r["reps"] for r in rs},
                           "A2": A2, "B2": B2, "alpha2": A2 / (2 * (N - 1)),
                           "beta2": 2 * (N - 1) / N / B2 if B2 > 0 else float("inf")}

    def threads_of(c):
        return meas[c]["threads"] if c in meas else None

    L = []
    w = L.append
    quick = str(meta.get("quick")) == "1"
    w("# Data-parallel scaling of mnist.net: measured on this machine, modelled to 64 ranks")
    w("")
    w(f"Written by `{meta['command']}` on {meta['date']}; do not edit by hand, run it again "
      f"(see `bench/README.md`). The raw results are in `{args.raw_name or args.jsonl}`. "
      "How data-parallel training works is in `docs/distributed.md`.")
    w("")
    if quick:
        w("> **Smoke test** (`--quick`: 1 repetition of 5 steps, a short allreduce sweep): "
          "these numbers are not a result.")
        w("")
    loads = [r.get("loadavg") for r in recs if r.get("kind") == "run"]
    w(f"> **A shared, noisy machine.** {nproc} CPUs. The load average was {meta.get('loadavg_start')} "
      f"when the run started and {end.get('loadavg_end', '?')} at its end; the 1-minute load before the runs "
      f"ranged from {min(float(l.split()[0]) for l in loads if l):.2f} to "
      f"{max(float(l.split()[0]) for l in loads if l):.2f}. Another engineer's benchmark may have been running "
      "at the same time. Every configuration was run in each repetition, one after the other, so load that "
      "comes and goes touches all of them; the tables give medians over the repetitions and the range.")
    w("")
    if errors:
        w("**Failures**: " + "; ".join(f"{e.get('config', e.get('kind'))} ({e.get('error')})" for e in errors))
        w("")

    # ---------------------------------------------------------------- setup
    w("## Setup")
    w("")
    th = ", ".join(f"{c}: {m['ranks']} rank{'s' if m['ranks'] > 1 else ''} x {m['threads']} thread"
                   f"{'s' if m['threads'] > 1 else ''}" for c, m in meas.items())
    w(report.table(["", ""], [
        ["machine", f"{meta.get('cpu')}, {nproc} CPUs, {meta.get('hypervisor') or 'no'} hypervisor, "
                    f"{meta.get('mem_gib')} GiB, Linux {meta.get('kernel')}"],
        ["MPI", f"{meta.get('mpirun_version')}; shared-memory transport (vader) between the ranks, all on this machine"],
        ["graphc", meta.get("graphc_version")],
        ["model", f"`{meta['model']}`: {int(meta['params']):,} parameters = {4 * int(meta['params']):,} bytes "
                  "of f32 gradients per step"],
        ["buckets (4M)", "; ".join(f"bucket {i}: {b:,} B" for i, b in enumerate(sizes)) +
         f" (sum {S:,} B; `graphc dump --stage fused --ranks 2`)"],
        ["batch", f"{batch} per rank (global batch = ranks x {batch})"],
        ["threads per rank", f"{th}: graphc's default (the CPUs divided among this machine's ranks, at least 1), "
                             "given explicitly with `--threads`"],
        ["steps", f"2 epochs of {meta['steps']} steps per run, the second epoch measured (its `ms_per_step`); "
                  f"{meta['reps']} repetitions"],
        ["run time", f"{int(end.get('seconds', 0)) / 60:.1f} min"],
    ], ["l", "l"]))
    w("")

    # ---------------------------------------------------------------- measured
    w("## Measured: training steps")
    w("")
    w("`ms/step` is graphc's `ms_per_step` of the second epoch (the epoch's wall time / its steps, "
      "so data loading and the per-step sum of the loss are in it); `allreduce` and `wait` are rank 0's "
      "`allreduce_ms_per_step` (gradient buckets from hand-over to completion, summed) and "
      "`comm_wait_ms_per_step` (the part the step waited for). Medians over the repetitions; the range is "
      "min–max.")
    w("")
    rows = []
    for c, what in CONFIGS:
        if c not in meas:
            continue
        m = meas[c]
        rows.append([f"`{c}`", what, m["ranks"], m["threads"], m["ranks"] * batch, m["n"], ms(m["T"]),
                     f"{ms(m['T_min'])}–{ms(m['T_max'])}", f"{m['ips']:.0f}", ms(m["busy"]), ms(m["wait"]),
                     " ".join(m["loads"])])
    w(report.table(["config", "what", "ranks", "threads / rank", "global batch", "reps", "ms/step", "range",
             "images/s", "allreduce ms", "wait ms", "load (1 min) before each rep"],
            rows, ["l", "l"] + ["r"] * 10))
    w("")
    w("The commands (graphc copied to a temporary folder for the run):")
    w("")
    for c, _ in CONFIGS:
        if c in meas:
            w(f"    {meas[c]['command']}")
    w("")
    w("Single-process compute, `graphc bench models/mnist.net --batch 64 --threads T --profile` "
      f"(random inputs, {meta.get('prof_steps')} measured steps after 2 warm-up, median; the model uses the "
      "compiled plan, which `graphc run` uses):")
    w("")
    w(report.table(["threads", "compiled ms/step", "interp ms/step", "reps"],
            [[t, ms(T_c[t]), ms(T_c_interp[t]), len(bench[t])] for t in sorted(T_c)]))
    w("")
    if T_conc:
        w("The same, P copies started together (no MPI): the compute each of P ranks gets on this machine, "
          "with whatever else was running. Compiled-plan medians; \"slowest\" is the slowest copy of each "
          "repetition (the slowest rank sets the pace of a data-parallel step), median over the repetitions:")
        w("")
        w(report.table(["copies", "threads each", "median of all copies ms/step", "slowest copy ms/step", "reps"],
                [[P, t, ms(T_conc_med[(P, t)]), ms(T_conc[(P, t)]), len(conc[(P, t)])] for P, t in sorted(T_conc)]))
        w("")

    # ---------------------------------------------------------------- allreduce
    w("## Measured: the allreduce on this machine")
    w("")
    w("`bench/allreduce.c` (built with `mpicc -O2`) sums a float buffer in place over the ranks "
      "(MPI_SUM, MPI_IN_PLACE) for 4 B to 16 MiB and the step's bucket sizes; one repetition is a barrier, "
      "then the collective, timed on every rank, the slowest rank's time kept; the median over the "
      "repetitions (5 to 200, about half a second per size). Three ways: `blocking` MPI_Allreduce; `wait` "
      "MPI_Iallreduce then MPI_Wait; `polled` MPI_Iallreduce then `mpi_poll` (`exec/mpi_poll.h`: MPI_Test, "
      "yielding for 200 us, then sleeps of 2 us doubling to 64 us), the function graphc's communication "
      "thread drives a bucket with. The 4 ranks share "
      f"{nproc} CPUs.")
    w("")
    w("The fit: t = A + B bytes over the powers of two, least squares of the relative error (each size "
      "counts alike), read as the ring form t = 2(N-1) alpha + 2(N-1)/N bytes / beta: "
      "alpha = A / (2(N-1)), beta = 2(N-1) / (N B). Open MPI picks its own algorithm per size (not "
      "necessarily a ring), so alpha and beta are this machine's effective values under that reading, "
      "not properties of a wire.")
    w("")
    w(f"A single line does not describe 4 B and 16 MiB at once here (the fit error column: the transport "
      "changes protocol with the size), and it misses the bucket sizes, so the model is checked with a "
      f"two-regime fit: A = the median time of the messages of at most {SMALL} B, B = the slope of an "
      f"ordinary least-squares line through the sizes of {LARGE >> 10} KiB and more (the bandwidth "
      "regime, where the buckets are), read as alpha and beta the same way.")
    w("")
    rows = []
    for (N, mode) in sorted(fits):
        f = fits[(N, mode)]
        at = [f"{ms(f['pts'].get(b))} / {ms(f['A'] + f['B'] * b)} / {ms(f['A2'] + f['B2'] * b)}" for b in sizes]
        rows.append([N, mode, us(f["alpha"]), f"{f['beta'] / 1e9:.2f}",
                     f"{100 * f['resid']:.0f}% / {100 * f['resid_max']:.0f}%", us(f["alpha2"]),
                     f"{f['beta2'] / 1e9:.2f}"] + at)
    w(report.table(["ranks", "mode", "one line: alpha (us)", "beta (GB/s)", "its error, median / max",
             "two regimes: alpha (us)", "beta (GB/s)"] +
            [f"bucket {i} ({b / 1e6:.2f} MB) ms: measured / one line / two regimes" for i, b in enumerate(sizes)],
            rows))
    w("")
    show = [4, 4096, 65536, 1 << 20, 4 << 20, 16 << 20]
    rows = []
    for (N, mode) in sorted(fits):
        f = fits[(N, mode)]
        rows.append([N, mode] + [us(f["pts"].get(b)) for b in show])
    w("Measured medians at some sizes, in microseconds:")
    w("")
    w(report.table(["ranks", "mode"] + [nbytes(b) for b in show], rows))
    w("")

    # ---------------------------------------------------------------- the model
    w("## The model")
    w("")
    w("One training step of N ranks, each with batch B = 64:")
    w("")
    w("    T(N)         = T_compute + T_exposed")
    w("    T_ring(S, N) = 2 (N-1) alpha + 2 (N-1)/N * S / beta")
    w("    with overlap:    T_exposed = max(T_after, T_ring(S0, N)) + T_ring(S1, N) - T_after + T_loss(N)")
    w("    without overlap: T_exposed = T_ring(S0 + S1, N) + T_loss(N)")
    w("")
    w(f"- S0 = {sizes[0]:,} B (bucket 0: the dense layers' gradients, complete after the first dense "
      f"layer's backward matmuls) and S1 = {sizes[1] if len(sizes) > 1 else 0:,} B (bucket 1: the "
      "convolutions' gradients, complete at the end of the backward pass), from the dump. graphc's "
      "communication thread sums the buckets one at a time in the order they were started, so bucket 1 "
      "starts at the end of the backward pass or when bucket 0 finishes, whichever is later; every wait "
      "comes after the backward pass and before the updates. \"Without overlap\" is `--bucket-size 1G`: one "
      "bucket, started after the last gradient.")
    w("- T_compute: the single-process step, `graphc bench`'s compiled-plan median at the threads a rank "
      "gets (it does not include building the batch from the data set, which `graphc run` does).")
    after = sorted(after_keys, key=lambda k: (-k[1], k[0]))
    w("- T_after = f x T_compute, the backward compute that follows bucket 0's hand-over, where f is the "
      "share of the profiled compiled step taken by exactly these profile rows (op, .net line): " +
      ", ".join(f"`{op}` line {line}" for op, line in after) +
      " — the ops between bucket 0's `allreduce` and the first `allreduce_wait` in "
      "`graphc dump --stage fused --ranks 2` (the second convolution's input and filter gradients, the "
      "first convolution's filter gradient, both fused maxpool+relu gradients, the two conv bias sums, "
      "and the batch accuracy), divided by the profiled step (all rows plus \"outside kernels\"). Median "
      "over the repetitions.")
    if bk.get("ambiguous"):
        w(f"  Rows also found outside that window, left out of f: {bk['ambiguous']}.")
    rows = []
    for t in sorted(prof_rows):
        pr = prof_rows[t]
        for k in after:
            pass
        rows.append([t] + [ms(pr.get(k, 0) / 1e3, 2) for k in after] +
                    [ms(pr[("(profiled step)", 0)] / 1e3, 1), f"{100 * frac[t]:.0f}%", ms(frac[t] * T_c[t])])
    w("")
    w(report.table(["threads"] + [f"{op} {line}" for op, line in after] + ["profiled step", "f", "T_after ms"], rows))
    w("")
    w(f"- T_loss(N): the per-step sum of the loss, accuracy and stop flag ({LOSS_BYTES} bytes) that every "
      "step waits for. On this machine: the two-regime fit at 24 B (about the median time of the "
      f"messages of at most {SMALL} B, the measured cost of a tiny collective here). At scale: recursive doubling, ceil(log2 N) (alpha + 24 B / beta).")
    w("- The ring formula is used for both buckets at every N, also for bucket 1 (0.2 MB), for which an "
      "MPI library would likely pick a tree or recursive halving at large N: that term is pessimistic there.")
    w("")

    # ---------------------------------------------------------------- check
    w("## Predicted against measured, on this machine")
    w("")
    w(f"Here the ranks share {nproc} CPUs, so the compute a rank gets changes with the rank count. "
      "T_compute is the single-process `graphc bench` median at the threads each rank gets, times the "
      f"time-sharing factor k = max(1, ranks x threads / {nproc}): 1 for one rank with {nproc} threads and "
      f"for 2 ranks x 1 thread; 2 for 4 ranks x 1 thread on {nproc} CPUs (each rank gets half a CPU). "
      "alpha and beta are the two-regime fit of the `polled` mode at the same rank count (the way graphc "
      "drives its collectives), "
      "T_after = f(threads) x T_compute. \"No hiding\" is the step if nothing of the gradients' allreduce "
      "were hidden: T_compute + T_ring(S0 + S1) + T_loss.")
    w("")
    rows, rows2 = [], []
    check, check2 = {}, {}
    for c, _ in CONFIGS:
        if c not in meas:
            continue
        m = meas[c]
        N, t = m["ranks"], m["threads"]
        if t not in T_c or (N > 1 and (N, "polled") not in fits):
            continue
        k = max(1.0, N * t / nproc)
        Tc = T_c[t] * k
        Ta = frac.get(t, 0) * Tc
        if N > 1:
            f = fits[(N, "polled")]
            small = f["A2"] + f["B2"] * LOSS_BYTES
            bsizes = [S] if c == "r2_one_bucket" else sizes
            p = step(Tc, 0.0 if c == "r2_one_bucket" else Ta, bsizes, N, f["alpha2"], f["beta2"], small)
        else:
            p = step(Tc, Ta, sizes, 1, 1, 1, 0)
        check[c] = (p, Tc, Ta)
        err = (p["T"] - m["T"]) / m["T"]
        # the same with the compute measured concurrently (the slowest of N copies)
        if N > 1 and (N, t) in T_conc:
            Tc2 = T_conc[(N, t)]
            f = fits[(N, "polled")]
            p2 = step(Tc2, 0.0 if c == "r2_one_bucket" else frac.get(t, 0) * Tc2, [S] if c == "r2_one_bucket"
                      else sizes, N, f["alpha2"], f["beta2"], f["A2"] + f["B2"] * LOSS_BYTES)
            rows2.append([f"`{c}`", N, t, ms(Tc2), ms(p2["T"]), ms(m["T"]), pct((p2["T"] - m["T"]) / m["T"]),
                          ms(m["T"] - Tc2)])
            check2[c] = (p2, Tc2)
        rows.append([f"`{c}`", N, t, f"{k:g}", ms(Tc), ms(Ta) if N > 1 else "—",
                     " + ".join(ms(r) for r in p["rings"]) if N > 1 else "—",
                     ms(p["small"]) if N > 1 else "—",
                     ms(p["T"]), ms(p["T_none"]) if N > 1 and c != "r2_one_bucket" else "—",
                     ms(m["T"]), pct(err),
                     f"{ms(p['busy'])} / {ms(m['busy'])}" if N > 1 else "—",
                     f"{ms(p['wait'])} / {ms(m['wait'])}" if N > 1 else "—"])
    w(report.table(["config", "ranks", "threads", "k", "T_compute", "T_after", "T_ring per bucket", "T_loss",
             "predicted ms/step", "predicted, no hiding", "measured ms/step", "error",
             "allreduce ms: predicted / measured", "wait ms: predicted / measured"], rows,
            ["l"] + ["r"] * 13))
    w("")
    w("Error = (predicted - measured) / measured. The predicted allreduce time counts bucket 0's ring and "
      "bucket 1 from its hand-over (it can queue behind bucket 0) to completion, as graphc measures it; "
      "the predicted wait is the exposed part without T_loss (graphc's wait counts the buckets only).")
    w("")
    if rows2:
        w("The same model with T_compute measured rather than derived: the slowest of N concurrent "
          "single-process `graphc bench` copies at the rank's thread count (table above), which includes "
          "the other load on the machine and the ranks' contention for cores and memory, but not MPI:")
        w("")
        w(report.table(["config", "ranks", "threads", "T_compute (concurrent)", "predicted ms/step",
                 "measured ms/step", "error", "measured - T_compute"], rows2, ["l"] + ["r"] * 7))
        w("")
    w(interpret_check(meas, check, check2, T_c, T_conc, nproc))
    w("")

    # ---------------------------------------------------------------- scale
    t_scale = 2 if 2 in T_c else max(T_c)
    Tc = T_c[t_scale]
    Ta = frac[t_scale] * Tc
    w("## Predicted scaling to 64 ranks")
    w("")
    w(f"Each rank is one machine like this one computing as one rank here does with {t_scale} threads: "
      f"T_compute = {ms(Tc)} ms (`graphc bench` compiled median, batch 64, {t_scale} threads), "
      f"T_after = {100 * frac[t_scale]:.0f}% of it = {ms(Ta)} ms. The machines are joined by one network "
      "link each, every message of the ring costs the latency alpha, and the link's full bandwidth is "
      "reached (no protocol overhead, no congestion). Scaling efficiency = images/s at N / (N x images/s "
      "at 1) = T(1) / T(N); at 1 rank there is no communication.")
    w("")
    for name, bits, lat in NETWORKS:
        beta = bits / 8
        w(f"### {name}: beta = {beta / 1e9:.2f} GB/s, alpha = {lat * 1e6:g} us per message")
        w("")
        rows = []
        for N in SCALE_RANKS:
            p = step(Tc, Ta, sizes, N, lat, beta, t_small(N, lat, beta))
            rows.append([N, N * batch, " + ".join(ms(r) for r in p["rings"]) if N > 1 else "—",
                         ms(p["exposed"]), ms(p["T"]), f"{N * batch / p['T']:,.0f}", f"{100 * Tc / p['T']:.0f}%",
                         ms(p["exposed_none"]), ms(p["T_none"]), f"{N * batch / p['T_none']:,.0f}",
                         f"{100 * Tc / p['T_none']:.0f}%"])
        w(report.table(["ranks", "global batch", "T_ring buckets 0 + 1 ms", "exposed ms (overlap)",
                 "step ms (overlap)", "images/s (overlap)", "efficiency (overlap)",
                 "exposed ms (no overlap)", "step ms (no overlap)", "images/s (no overlap)",
                 "efficiency (no overlap)"], rows))
        w("")
    w(interpret_scale(Tc, Ta, sizes))
    w("")
    w("T_compute above is this run's, on a loaded machine; a faster step (a quiet machine, a faster CPU) "
      "leaves less compute to hide bucket 0 behind and makes the same communication a larger share. The "
      "64-rank efficiency for other values of T_compute (T_after kept at the same share f):")
    w("")
    rows = []
    for factor in (1.0, 0.5, 0.25):
        row = [f"{ms(Tc * factor)} ({factor:g} x)"]
        for name, bits, lat in NETWORKS:
            beta = bits / 8
            p = step(Tc * factor, Ta * factor, sizes, 64, lat, beta, t_small(64, lat, beta))
            row += [f"{100 * Tc * factor / p['T']:.0f}%", f"{100 * Tc * factor / p['T_none']:.0f}%"]
        rows.append(row)
    w(report.table(["T_compute ms"] + [f"{n}, {o}" for n, _, _ in NETWORKS for o in ("overlap", "no overlap")], rows,
            ["l", "r", "r", "r", "r"]))
    w("")

    # ---------------------------------------------------------------- caveats
    w("## What the model leaves out")
    w("")
    w("- **CPU taken by the communication.** Over shared memory the allreduce is memory copies and "
      "additions done by the ranks' own CPUs (the communication thread and MPI's progress), which here "
      "compete with the compute threads for the same cores; the model counts the allreduce as time, not "
      "as CPU taken from compute. Over a network with its own NIC much less of it is CPU work, but the "
      "reduction (additions) and the copies still are.")
    w("- **Progress.** graphc drives a bucket with MPI_Test, yielding for the first 200 us and then "
      "sleeping up to 64 us between tests (the `polled` mode); Open MPI's non-blocking allreduce advances "
      "only inside those calls. Over a network, each of the ring's 2(N-1) steps that arrives after the "
      "first 200 us may wait up to a sleep before the next begins: up to 2 x 63 x 64 us = 8 ms per large "
      "bucket at 64 ranks, more than alpha assumes. Not modelled at scale.")
    w("- **Skew between ranks.** A collective ends when the slowest rank has joined it; differences in "
      "the ranks' compute (noise, another job, data loading) add to the wait. The model has identical "
      "ranks.")
    r1 = meas.get("r1")
    w("- **The work after the waits and the data.** Dividing the summed buckets by N and unpacking them "
      "for the updates (a pass over 13 MB), and building each batch from the data set, which `graphc run` "
      "does and `graphc bench` does not" +
      (f" (here `r1`, {ms(r1['T'])} ms, against T_compute {ms(T_c[r1['threads']])} ms: the noise is larger "
       "than that difference can resolve)." if r1 and r1["threads"] in T_c else ")."))
    w("- **Algorithms.** A real MPI picks among ring, recursive doubling, Rabenseifner and trees by size "
      "and rank count, and may pipeline; the ring is an assumption of the model, not a measurement at scale.")
    w("- **The network.** One link per machine, full bandwidth, no switch congestion, no other traffic; "
      "alpha is a chosen value (20 us on 10 Gbit/s, 5 us on 100 Gbit/s Ethernet-class links), not measured.")
    w("- **Larger global batches** change the convergence (steps to a given accuracy), not the time per "
      "step: images/s here is throughput, not time to accuracy.")
    w("")
    with open(args.out, "w") as f:
        f.write("\n".join(L).rstrip() + "\n")


def interpret_check(meas, check, check2, T_c, T_conc, nproc):
    out = []
    # how far the compute the ranks got was from the single process times k
    got = []
    for (P, t), v in sorted(T_conc.items()):
        if t in T_c:
            k = max(1.0, P * t / nproc)
            got.append(f"{P} copies x {t} thread: {ms(v)} ms, {v / (T_c[t] * k):.2f} x the single process "
                       f"times k = {k:g}")
    if got:
        out.append("How the compute was accounted for matters most here. The concurrent copies measured: " +
                   "; ".join(got) + ". A ratio above 1 is compute the ranks did not get (other processes on "
                   "the cores, memory bandwidth shared), which the time-sharing factor alone does not see.")
    if "r2" in meas and "r2_one_bucket" in meas:
        a, b = meas["r2"], meas["r2_one_bucket"]
        overlap = a["T_max"] >= b["T_min"] and b["T_max"] >= a["T_min"]
        out.append(f"Overlap here: with buckets (`r2`) the step waited {ms(a['wait'])} ms for the gradients, with "
                   f"one bucket (`r2_one_bucket`) {ms(b['wait'])} ms; the step medians are {ms(a['T'])} and "
                   f"{ms(b['T'])} ms, " + ("whose ranges over the repetitions overlap: the difference in step "
                                          "time is not resolved by this run." if overlap else
                                          "with ranges that do not overlap."))
    if "r2" in check and meas.get("r2", {}).get("busy"):
        p = check["r2"][0]
        out.append(f"The allreduce inside the training run took {ms(meas['r2']['busy'])} ms per step at 2 ranks "
                   f"against {ms(p['busy'])} ms predicted from the standalone sweep: in the run it competes "
                   "with the compute threads for the cores, and it includes waiting for the other rank to "
                   "reach the same bucket.")
    lines = []
    for c in ("r1", "r1t1", "r2", "r2_one_bucket", "r4"):
        if c in meas and c in check:
            p, Tc, Ta = check[c]
            s = (f"`{c}` predicted {ms(p['T'])} ms, measured {ms(meas[c]['T'])} ms "
                 f"({pct((p['T'] - meas[c]['T']) / meas[c]['T'])}")
            if c in check2:
                p2 = check2[c][0]
                s += f"; {ms(p2['T'])} ms, {pct((p2['T'] - meas[c]['T']) / meas[c]['T'])} with the concurrent compute"
            lines.append(s + ")")
    if lines:
        out.append("Summary: " + "; ".join(lines) + ". One run on a shared machine; the \"range\" column "
                   "above shows how much each configuration moved between repetitions.")
    return "\n\n".join(out)


def interpret_scale(Tc, Ta, sizes):
    hidden = all(t_ring(sizes[0], 64, lat, bits / 8) <= Ta for _, bits, lat in NETWORKS)
    return (f"With overlap, bucket 0 is hidden while T_ring(S0, N) <= T_after ({ms(Ta)} ms), which " +
            ("holds in both tables up to 64 ranks" if hidden else "does not hold everywhere above") +
            "; bucket 1 and the loss sum are always exposed. Without overlap the "
            f"whole {sum(sizes) / 1e6:.1f} MB ring is exposed. T_ring tends to 2 S / beta as N grows: "
            f"{ms(2 * sum(sizes) / 1.25e9)} ms at 10 Gbit/s and {ms(2 * sum(sizes) / 12.5e9)} ms at 100 Gbit/s "
            "for all the gradients, plus 2 (N-1) alpha.")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, fn in (("record", cmd_record), ("tag", cmd_tag), ("profile", cmd_profile)):
        s = sub.add_parser(name)
        s.add_argument("pairs", nargs="*")
        s.set_defaults(fn=fn)
    s = sub.add_parser("buckets")
    s.add_argument("fused")
    s.set_defaults(fn=cmd_buckets)
    s = sub.add_parser("bucket-sizes")
    s.add_argument("jsonl")
    s.set_defaults(fn=cmd_bucket_sizes)
    s = sub.add_parser("write")
    s.add_argument("--jsonl", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--raw-name")
    s.set_defaults(fn=cmd_write)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
