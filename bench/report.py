#!/usr/bin/env python3
"""bench/compare.sh's bookkeeping: the standard library only, any python3.

  report.py record KEY=VALUE...                 print one JSON object (digits -> ints)
  report.py tag KEY=VALUE... <IN >OUT           add the fields to each JSON line of stdin
  report.py write --jsonl FILE --out FILE.md [--keep OLD.jsonl ...]
                                                the Markdown report of a run's results, and a
                                                section for each kept run of another CPU kind
  report.py kind-file --jsonl FILE              the bench/results/cpu-*.jsonl name for its kind

A run's section ends with its notes, written by hand, if there are any:
bench/results/cpu-KIND[-LABEL].notes.md next to its results (Markdown; its headings
nested under the section's: write "# Title" for a heading of its own).

The results file holds one JSON object a line: graphc bench's own lines verbatim
(they have "interp_ms"; the runs in the other OpenBLAS environment are tagged
"openblas_env": "other"), PyTorch and ONNX Runtime lines ("framework", "config", "ms"),
bench/peak's line (tagged "kind": "peak") and the script's records ("kind": meta,
graphc_params, verify, kernel_check, job, openblas_job, onnx_export, error, end).
"""
import argparse
import json
import os
import re
import sys

CONFIGS = {  # config -> (column title, what it is)
    "eager": ("PyTorch eager", "eager mode, NCHW tensors (PyTorch's default layout)"),
    "channels_last": ("PyTorch channels_last",
                      "eager mode, model and input in torch.channels_last memory format (NHWC in memory, as graphc)"),
    "script": ("PyTorch TorchScript",
               "torch.jit.script of the same module (training: the optimizer stays in Python; "
               "inference: the scripted eval-mode module under no_grad)"),
    "optimized": ("PyTorch optimize_for_inference",
                  "torch.jit.optimize_for_inference(torch.jit.script(eval model)): frozen, "
                  "convolutions folded and run by oneDNN (inference only)"),
    "passive_eager": ("PyTorch eager, passive env",
                      "eager NCHW again, in a process started with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE "
                      "unset and OMP_WAIT_POLICY=passive (OpenMP workers sleep instead of spinning between "
                      "parallel regions)"),
    "passive_channels_last": ("PyTorch channels_last, passive env",
                              "channels_last again, in the passive environment of `PyTorch eager, passive env`"),
    "passive_script": ("PyTorch TorchScript, passive env",
                       "TorchScript again, in the passive environment of `PyTorch eager, passive env`"),
    "passive_optimized": ("PyTorch optimize_for_inference, passive env",
                          "optimize_for_inference again, in the passive environment of `PyTorch eager, passive env` "
                          "(inference only)"),
    "ort": ("ONNX Runtime",
            "onnxruntime-node, CPU execution provider, the PyTorch inference module exported to ONNX "
            "(opset 13, NCHW), graphOptimizationLevel all, intraOpNumThreads = threads, inference only"),
}
# The project's issue: mnist's training step at batch 256 and the FMA peak of the two cores of
# the machine it was measured on (AVX-512); its limit, "near 40 ms", is the one over the other.
ISSUE_GFLOP, ISSUE_PEAK = 21.07, 528.0
ORDER = {"training": ["eager", "channels_last", "script", "passive_eager", "passive_channels_last", "passive_script"],
         "inference": ["eager", "channels_last", "script", "optimized", "passive_eager", "passive_channels_last",
                       "passive_script", "passive_optimized", "ort"]}
# What each model's training step does (torch_bench.py's twin does the same), and what
# one example of it is.
TRAINING = {
    "mnist": ("forward, cross-entropy loss, backward, SGD update (dropout 0.4 active)", "images"),
    "large": ("forward, cross-entropy loss, backward, SGD update", "images"),
    "fashion-resnet": ("forward (batch norm on the batch's statistics, dropout 0.3 active), cross-entropy loss, "
                       "backward, AdamW update (the train block's optimizer)", "images"),
    "charlm": ("forward, cross-entropy loss over all 64 positions, backward, Adam update (the train block's "
               "optimizer)", "sequences of 64 bytes"),
}
# Issue 14's models: its goal is graphc ahead of PyTorch's best, within 2x of the FMA limit.
ISSUE14 = ("fashion-resnet", "charlm")


def kv(pairs, who="report.py record"):
    """KEY=VALUE words as a dict, integers as ints (also used by mpi_model.py)."""
    o = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep:
            sys.exit(f"{who}: expected KEY=VALUE, got {p!r}")
        o[k] = int(v) if re.fullmatch(r"-?\d{1,15}", v) else v
    return o


def record(pairs):
    print(json.dumps(kv(pairs)))


def tag(pairs):
    """Copy JSON lines from stdin to stdout with the KEY=VALUE fields added first."""
    extra = kv(pairs, "report.py tag")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            o = json.loads(line)
        except json.JSONDecodeError:
            print(line)  # kept as it was: write() reports and skips it
            continue
        print(json.dumps({**extra, **o} if isinstance(o, dict) else o))


# ---------------------------------------------------------------- the report

def fmt_ms(v):
    if v is None:
        return "—"
    return f"{v:.1f}" if v >= 100 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def fmt_ips(v):
    if v is None:
        return "—"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def fmt_gflops(s, name):
    """A bench/peak figure: 'median (lowest-highest)' GFLOP/s, or '—'."""
    v, r = s.get(name), s.get(name + "_range")
    if v is None:
        return "—"
    return f"{v:.1f} ({r[0]:.1f}-{r[1]:.1f})" if r else f"{v:.1f}"


def mb(v):
    return "—" if v is None else f"{v / 1e6:.1f}"


def table(head, rows, align=None):
    align = align or ["r"] * len(head)
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join(" ---: " if a == "r" else " :--- " for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def load(path):
    recs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError as e:
                print(f"report.py: {path}:{n}: skipping a line that is not JSON ({e})", file=sys.stderr)
    return recs


def core_of(blas):
    """'OpenBLAS 0.3.21, core Zen, 2 threads' -> 'Zen'."""
    mo = re.search(r"core ([^,]+)", blas or "")
    return mo.group(1) if mo else None


def kernel_check_text(k):
    if not k:
        return "not checked (no kernel check in this run)"
    st = k.get("status")
    if st == "not_built":
        return f"not checked: build tests/test_kernels (`make tests/test_kernels` in the build folder; " \
               f"looked for `{k.get('binary', '?')}`)"
    stale = " (tests/test_kernels is older than graphc: rebuild it)" if k.get("stale") == 1 else ""
    if st == "pass":
        return f"pass: {k.get('checks', '?')} checks, 0 failures{stale}"
    def n(key):
        v = k.get(key)
        return "?" if v is None or v == "" else v
    return f"**FAIL**: {n('checks')} checks, {n('failures')} failures, {n('errors')} errors; {k.get('detail', '')}{stale}"


def openblas_section(L, meta, graphc, other, ojobs, failed, kchecks):
    """OpenBLAS both ways (issue 4): the environment as found and the other one."""
    L.append("## OpenBLAS environment, both ways")
    L.append("")
    if not meta.get("openblas_other_env"):
        L.append("Not measured in this run (its `bench/compare.sh` predates the comparison).")
        L.append("")
        return
    names = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    found = ", ".join(f"`{k}` {meta.get('env_' + k, '?')}" for k in names)
    desc = meta["openblas_other_env"]
    prefix = meta.get("openblas_other_prefix", "")
    words = prefix.split()

    def in_other(k):  # the variable in the other environment: env -u K, env K=V, or as found
        if k in words and words.index(k) > 0 and words[words.index(k) - 1] == "-u":
            return f"`{k}` (unset)"
        setting = next((w for w in words if w.startswith(k + "=")), None)
        return f"`{setting}`" if setting else f"`{k}` {meta.get('env_' + k, '?')}"
    L.append("The machine of the project's issue 4 sets `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` (older "
             "OpenBLAS builds misbehave on its processor); tests and CI keep them as they are. The benchmark "
             f"reports both ways. This run found {found}; the other environment is **{desc}**: each model's "
             f"largest batch ran a second time, right after its row above, as `{prefix} graphc bench ...` with "
             "the same arguments. `tests/test_kernels` (every kernel against plain reference loops, the "
             "GEMM-based ones included) ran once in each environment, with `top_srcdir` and "
             "`CK_DEFAULT_TIMEOUT=600` as `make check` sets them.")
    L.append("")
    if "OPENBLAS_CORETYPE=" in prefix:
        l2 = meta.get("openblas_reads_l2_size")
        lib = meta.get("openblas_lib") or "?"
        why = {"no": f"and the library graphc loads here (`{lib}`) does not contain the name, so no value would "
                     "change anything",
               "yes": f"the library graphc loads here (`{lib}`) knows the name, but no value is documented for "
                      "this processor, so the run does not guess one",
               }.get(l2, "and the run could not tell whether the library graphc loads reads it")
        L.append("`OPENBLAS_L2_SIZE` is left unset in the other environment: OpenBLAS reads it only from version "
                 "0.3.27 on (an override for virtual machines whose CPUID does not report the L2 cache size), "
                 f"{why}.")
        L.append("")
    rows = []
    for name, title, vars_, runs in (("as_found", "as found", found, graphc), ("other", "other", ", ".join(in_other(k) for k in names), other)):
        cores = sorted({c for c in (core_of(r.get("blas")) for r in runs.values()) if c})
        rows.append([title, vars_, ", ".join(cores) or "—", kernel_check_text(kchecks.get(name))])
    L.append(table(["environment", "variables", "OpenBLAS core (graphc's `blas`)", "kernel unit tests"], rows,
                   ["l", "l", "l", "l"]))
    L.append("")
    rows = []
    keys = [(j["model"], j["step"], j["batch"]) for j in ojobs]  # in the order of the run
    for key in keys + [k for k in other if k not in keys]:
        g, o = graphc.get(key), other.get(key)
        n = failed.get(key + ("openblas_other",))
        oc = o["compiled_ms"] if o else None
        gc = g["compiled_ms"] if g else None
        rows.append([key[0], key[1], key[2], core_of(g.get("blas")) if g else "—", fmt_ms(gc),
                     core_of(o.get("blas")) if o else "—", fmt_ms(oc) if o else (f"failed [{n}]" if n else "—"),
                     f"{oc / gc:.2f}x" if oc and gc else "—"])
    if rows:
        L.append(table(["model", "step", "batch", "core as found", "compiled ms as found", "core, other env",
                        "compiled ms, other env", "other / as found"], rows, ["l", "l", "r", "l", "r", "l", "r", "r"]))
        L.append("")
        L.append("Each pair is two processes a few seconds apart on a shared machine: a ratio within a few "
                 "percent of 1 is noise, not a difference between the kernels.")
    else:
        L.append("No graphc run in the other environment (no model measured).")
    L.append("")


def limit_section(L, meta, peak, jobs, graphc, peak_failed):
    """The machine's limit: bench/peak's FMA peak and sgemm rate, and graphc's compiled
    steps against the time their flops take at those rates."""
    L.append("## The machine's limit")
    L.append("")
    if not peak:
        if peak_failed:
            L.append(f"Not measured in this run: `bench/peak` did not run or failed [{peak_failed}] (see Failures), so no limit "
                     "is given.")
        else:
            L.append("Not measured in this run: its results have no `bench/peak` line (its `bench/compare.sh` "
                     "predates the program), so no limit is given.")
        L.append("")
        return
    pt = peak.get("threads", "?")
    fma, bw = limit_rates(peak)
    sgemm = peak.get("sgemm_gflops_all")
    n = peak.get("sgemm_n", "?")
    isa = peak.get("isa", "none")
    rows = []
    # every FMA loop measured (a list since bench/peak measures each the CPU has; before, the widest only)
    for f in peak.get("fma") or ([{"isa": isa, "vector_bits": peak.get("vector_bits"),
                                   "gflops_1t": peak.get("fma_gflops_1t"),
                                   "gflops_1t_range": peak.get("fma_gflops_1t_range"),
                                   "gflops_all": peak.get("fma_gflops_all"),
                                   "gflops_all_range": peak.get("fma_gflops_all_range")}] if isa != "none" else []):
        head = " (the limit below)" if f["isa"] == isa else ""
        rows.append([f"FMA peak, fp32, {f['isa']} ({f['vector_bits']}-bit vectors){head}, GFLOP/s",
                     fmt_gflops(f, "gflops_1t"), fmt_gflops(f, "gflops_all")])
    for g in peak.get("sgemm", []):
        rows.append([f"OpenBLAS sgemm, n={g['n']}, GFLOP/s", fmt_gflops(g, "gflops_1t"), fmt_gflops(g, "gflops_all")])
    for k in ("copy", "triad"):
        if peak.get(k + "_gbs_all") is not None:
            rows.append([f"memory bandwidth, STREAM {k}, GB/s" + (" (the limit below)" if k == "triad" else ""),
                         fmt_gflops(peak, k + "_gbs_1t"), fmt_gflops(peak, k + "_gbs_all")])
    L.append(table(["median (lowest-highest)", "1 thread", f"{pt} threads at once"], rows, ["l", "r", "r"]))
    L.append("")
    how = (f"`{peak.get('command', 'bench/peak')}` measured these at the start of this run, on the machine "
           f"itself, in {peak.get('seconds', '?')} s: each figure is the median of {peak.get('repeats', '?')} "
           "measurements, the lowest and highest in parentheses; the limits below take the highest of the "
           "widest FMA's and of the triad's all-threads figures (a bound on the machine: the fastest it was seen "
           "to go, not a rate slowed by the other tenants of a shared machine).")
    if isa != "none":
        lanes = peak.get("vector_bits", 0) // 32
        flops = "a multiply or an add 1 flop per lane" if isa == "sse" else "2 flops per lane"
        which = ("the one vector multiply-add loop `--isa` asked for" if "--isa" in str(peak.get("command", ""))
                 else "each vector multiply-add loop this CPU runs, the widest" if peak.get("fma")
                 else "the widest vector multiply-add this CPU has")
        chosen = "named by `--isa`" if "--isa" in str(peak.get("command", "")) else "chosen at run time"
        how += (f" FMA peak: {which} ({isa}, {chosen}) giving the limit below; for it, "
                f"{peak.get('accumulators')} independent chains a thread on {peak.get('vector_bits')}-bit registers "
                f"({lanes} floats, {flops}), about {peak.get('fma_seconds', '?')} s a measurement; the "
                f"{pt}-thread figure runs one such thread per CPU at once and divides all their flops by the "
                "time from the first start to the last end.")
    else:
        how += (" No FMA peak: `bench/peak` has no vector loop for this machine (they are x86-64's), so the "
                "limit below is the sgemm one only.")
    how += (f" sgemm: OpenBLAS's `cblas_sgemm` on n x n matrices, 2n³ flops a call, after an untimed call "
            f"({peak.get('openblas_config', '?')}; core {peak.get('openblas_core', '?')}).")
    if bw is not None:
        llc = peak.get("llc_bytes") or 0
        how += (f" Memory bandwidth: STREAM's copy (`a = b`) and triad (`a = b + s c`) on three float arrays of "
                f"{peak.get('stream_array_bytes', 0) / 2**20:.0f} MiB each (the last-level cache is "
                f"{llc / 2**20:.0f} MiB), each thread on its own slice, counted as STREAM counts them: the bytes "
                "the loop names (8 a copied element, 12 a triad's), not the line a store first reads; the "
                "all-threads triad's highest is the bandwidth the limits below use.")
    else:
        how += (" Memory bandwidth: not measured (this run's `bench/peak` predates it), so the limits below are "
                "the flops' only.")
    L.append(how)
    L.append("")
    if peak.get("optimized") is False:
        L.append("> **`bench/peak` was compiled without optimization**: its FMA loops kept their accumulators in "
                 "memory, so its FMA figures are too low and the limits below too long. Build it with `-O2`.")
        L.append("")
    if peak.get("quick"):
        L.append("> `bench/peak --quick`: short measurements, a smoke test like the rest of this run.")
        L.append("")

    def limit(gflop, rate):
        return gflop / rate * 1e3 if gflop is not None and rate else None

    def ratio(ms, lim):
        return f"{ms / lim:.2f}x" if ms and lim else "—"
    rows, impossible, cached = [], False, []
    for j in jobs:
        g = graphc.get((j["model"], j["step"], j["batch"]))
        gf = g.get("gflop_per_step") if g else None
        by = g.get("bytes_per_step") if g else None
        ms = g.get("compiled_ms") if g else None
        lf, lb, ls = limit(gf, fma), limit(by / 1e9 if by is not None else None, bw), limit(gf, sgemm)
        lim = max((x for x in (lf, lb) if x), default=None)
        impossible = impossible or bool(ms and lf and ms < lf)
        if ms and lb and ms < lb and not (lf and ms < lf):
            cached.append(f"{j['model']} {j['step']} batch {j['batch']}")
        bound = "—" if not lim else "memory" if lb and lb >= (lf or 0) else "FMA"
        rows.append([j["model"], j["step"], j["batch"], f"{gf:.3g}" if gf is not None else "—",
                     f"{by / 1e6:.1f}" if by is not None else "—", fmt_ms(lf), fmt_ms(lb), bound, fmt_ms(ms),
                     ratio(ms, lim), fmt_ms(ls), ratio(ms, ls)])
    if rows:
        L.append(table(["model", "step", "batch", "GFLOP/step", "MB/step", "FMA limit, ms", "bandwidth limit, ms",
                        "bound", "graphc compiled ms", "compiled / limit", f"sgemm n={n} limit, ms",
                        "compiled / sgemm limit"], rows, ["l", "l", "r", "r", "r", "r", "r", "l", "r", "r", "r", "r"]))
        L.append("")
    L.append("A step's limit is the larger of two times: its flops at the FMA peak (`FMA limit`) and its bytes at "
             "the measured bandwidth (`bandwidth limit`); `bound` names the larger, and `compiled / limit` is "
             "how many times it graphc's compiled step takes. `MB/step` is graphc's count of what the compiled "
             "plan's kernels must read and write at least (`exec_step_bytes`, `docs/benchmarks.md`'s caveats "
             "below): every input buffer once, weights included, every output once, an update's parameter and "
             "optimizer state written back, and the scratch a kernel fills whole and reads back, counted as "
             "STREAM counts its loops; it is the plan's traffic as it runs (a fused op moves no intermediate), "
             "not the least any plan could move. Weights that stay in the cache between steps (the 12.8 MB of "
             "mnist's dense layer fit in a 32 MiB L3) are counted as memory traffic all the same, so a step can "
             "come close to, or below, a bandwidth limit that it does not really meet.")
    L.append("")
    L.append(f"The FMA limit is the step's flops (graphc's count, the `GFLOP/step` column: 2 per multiply-add of "
             f"the convolutions and matrix products, a few per element for the other ops) at a rate measured "
             f"above on {pt} threads: at the FMA peak, every vector FMA unit busy every cycle with no memory "
             "traffic and no overhead, a bound no program reaches; at the sgemm rate, every flop of the step as "
             f"fast as OpenBLAS's n={n} square product here.")
    if impossible:
        la = f" (load average {peak['loadavg']} when it started)" if peak.get("loadavg") else ""
        L.append("")
        L.append(f"> **A step faster than its FMA limit** cannot be: the peak was measured while other processes "
                 f"took CPU time{la}, so it is too low and every limit too long. Run again on a quiet machine.")
    if cached:
        L.append("")
        L.append(f"> Below its bandwidth limit: {', '.join(cached)}. Part of its bytes came from the cache (weights "
                 "and activations that fit in the last-level cache stay there from one step to the next), or the "
                 "bandwidth was measured under load; either way that limit does not bind it.")
    threads = meta.get("threads")
    if threads is not None and threads != pt:
        L.append("")
        L.append(f"graphc ran on {threads} threads, the limits assume {pt}: its ratios are against more (or "
                 "fewer) threads than it used.")
    L.append("")
    ours = limit(ISSUE_GFLOP, fma)
    text = (f"The project's issue set its target on another machine, with AVX-512: its limit, \"near 40 ms\", "
            f"is {ISSUE_GFLOP} GFLOP (mnist's training step at batch 256) at {ISSUE_PEAK:.0f} GFLOP/s, the FMA "
            f"peak measured on its two cores ({limit(ISSUE_GFLOP, ISSUE_PEAK):.1f} ms), and the target is within "
            f"1.5x of it ({1.5 * limit(ISSUE_GFLOP, ISSUE_PEAK):.0f} ms).")
    if ours:
        text += (f" On this machine the same definition gives **{ours:.0f} ms** ({ISSUE_GFLOP} GFLOP at the "
                 f"{fma:.1f} GFLOP/s measured above), and 1.5x of it is **{1.5 * ours:.0f} ms**")
        g = graphc.get(("mnist", "training", 256))
        if g and g.get("compiled_ms"):
            text += (f"; graphc's compiled step took {fmt_ms(g['compiled_ms'])} ms in this run, "
                     f"{g['compiled_ms'] / ours:.2f}x the limit")
        text += "."
    else:
        text += " This run has no FMA peak, so it gives no such figure for this machine."
    L.append(text)
    L.append("")


def best_peer(peers, key, configs):
    """The fastest of the peer configurations measured for (model, step, batch): (config, ms)."""
    best = None
    for c in configs:
        p = peers.get(key + (c,))
        if p and (best is None or p["ms"] < best[1]):
            best = (c, p["ms"])
    return best


def limit_rates(peak):
    """The rates the limits use: the highest of bench/peak's measurements of the widest
    FMA and of the all-threads triad (its median where a run kept no range).  A limit is
    a bound on what the machine can do, so it takes the fastest the machine was seen to
    go: on a shared VM the triad swings with the other tenants' traffic (24-59 GB/s
    between runs on one Zen 5 machine), and a median taken while they were busy would
    make every memory-bound limit looser than the hardware's."""
    if not peak:
        return None, None

    def best(key):
        rng = peak.get(key + "_range")
        return rng[1] if isinstance(rng, list) and len(rng) == 2 and rng[1] else peak.get(key)
    bw = best("triad_gbs_all") if peak.get("triad_gbs_all") is not None else peak.get("bandwidth_gbs")
    return best("fma_gflops_all"), bw


def goals_section(L, peak, jobs, graphc, peers):
    """The project's issue 15 goals (mnist, large) and issue 14's (fashion-resnet,
    charlm), measured in this run: each a row, met or not."""
    issue = "14" if all(j["model"] in ISSUE14 for j in jobs) and jobs else "15"
    L.append(f"## The goals of issue {issue} in this run")
    L.append("")
    fma, bw = limit_rates(peak)
    isas = sorted({str(g.get("isa")) for g in graphc.values() if g.get("isa")})
    if isas:
        L.append(f"graphc ran its kernels' **{', '.join(isas)}** variant (`graphc bench`'s `isa` field).")
    else:
        L.append("This graphc does not report an instruction-set variant (it predates run-time ISA dispatch): its "
                 "direct convolution kernels are AVX2 + FMA where the CPU has them, its products OpenBLAS's "
                 "(the core in Setup).")
    L.append("")
    rows = []

    def row(goal, measured, target, ok):
        rows.append([goal, measured, target, "—" if ok is None else "yes" if ok else "**no**"])
    for j in jobs:
        key = (j["model"], j["step"], j["batch"])
        g = graphc.get(key)
        gc = g.get("compiled_ms") if g else None
        if key[0] == "mnist" and key[1] == "inference":
            o = peers.get(key + ("ort",))
            row(f"mnist inference, batch {key[2]}: faster than ONNX Runtime",
                f"graphc {fmt_ms(gc)} ms, ONNX Runtime {fmt_ms(o['ms']) if o else '—'} ms"
                + (f" ({o['ms'] / gc:.2f}x)" if o and gc else ""), "ONNX Runtime ms / graphc ms > 1",
                (o["ms"] > gc) if o and gc else None)
            if key[2] == 1 and g and g.get("bytes_per_step") and bw:
                lim = g["bytes_per_step"] / 1e9 / bw * 1e3
                row("mnist inference, batch 1: within 2x of its memory-traffic limit",
                    f"{fmt_ms(gc)} ms against {g['bytes_per_step'] / 1e6:.1f} MB at {bw:.1f} GB/s = {fmt_ms(lim)} ms "
                    f"({gc / lim:.2f}x)", "<= 2x", gc <= 2 * lim)
        if key[0] == "large":
            lf = g["gflop_per_step"] / fma * 1e3 if g and fma else None
            lb = g["bytes_per_step"] / 1e9 / bw * 1e3 if g and g.get("bytes_per_step") and bw else None
            lim = max((x for x in (lf, lb) if x), default=None)
            if gc and lim:
                row(f"large {key[1]}, batch {key[2]}: within 2x of the larger of its limits",
                    f"{fmt_ms(gc)} ms against {fmt_ms(lim)} ms ({'bandwidth' if lb and lb >= (lf or 0) else 'FMA'}"
                    f"{'' if lb else ', bandwidth not measured'}; {gc / lim:.2f}x)", "<= 2x", gc <= 2 * lim)
            b = best_peer(peers, key, ORDER[key[1]])
            if gc and b:
                row(f"large {key[1]}, batch {key[2]}: ahead of every peer",
                    f"graphc {fmt_ms(gc)} ms, fastest peer {CONFIGS[b[0]][0]} {fmt_ms(b[1])} ms ({b[1] / gc:.2f}x)",
                    "fastest peer ms / graphc ms > 1", b[1] > gc)
        if key[0] in ISSUE14:
            if gc and fma and g.get("gflop_per_step"):
                lim = g["gflop_per_step"] / fma * 1e3
                row(f"{key[0]} {key[1]}, batch {key[2]}: within 2x of the FMA limit",
                    f"{fmt_ms(gc)} ms against {fmt_ms(lim)} ms ({gc / lim:.2f}x)", "<= 2x", gc <= 2 * lim)
            b = best_peer(peers, key, [c for c in ORDER[key[1]] if c != "ort"])
            if gc and b:
                row(f"{key[0]} {key[1]}, batch {key[2]}: ahead of PyTorch's best",
                    f"graphc {fmt_ms(gc)} ms, {CONFIGS[b[0]][0]} {fmt_ms(b[1])} ms ({b[1] / gc:.2f}x)",
                    "PyTorch's best ms / graphc ms > 1", b[1] > gc)
        if key == ("mnist", "training", 256):
            if gc and fma:
                lim = g["gflop_per_step"] / fma * 1e3
                row("mnist training, batch 256: within 1.3x of the FMA limit",
                    f"{fmt_ms(gc)} ms against {fmt_ms(lim)} ms ({gc / lim:.2f}x)", "<= 1.3x", gc <= 1.3 * lim)
            b = best_peer(peers, key, [c for c in ORDER["training"]])
            if gc and b:
                row("mnist training, batch 256: 1.5x faster than PyTorch's best",
                    f"graphc {fmt_ms(gc)} ms, {CONFIGS[b[0]][0]} {fmt_ms(b[1])} ms ({b[1] / gc:.2f}x)", ">= 1.5x",
                    b[1] >= 1.5 * gc)
    if rows:
        L.append(table(["goal", "measured", "target", "met"], rows, ["l", "l", "l", "l"]))
    else:
        L.append("No row of this run bears on them.")
    L.append("")
    L.append("Each comparison is of two medians measured minutes apart in this one run, on the same machine, at "
             "the same thread count; the load average before each row is in the tables below. On a shared "
             "machine a ratio near 1 can go either way from run to run.")
    L.append("")


def render_run(recs, raw_name, kept=False):
    """One run's report, its headings at level 2 (write() nests them under the run's CPU
    kind); kept: a run of another CPU kind kept from an earlier day, not re-measured."""
    meta = next((r for r in recs if r.get("kind") == "meta"), {})
    end = next((r for r in recs if r.get("kind") == "end"), {})
    jobs = [r for r in recs if r.get("kind") == "job"]
    # graphc's lines name the model by its `model` line; model_file (since issue 14's models) by its file
    graphc = {(r.get("model_file", r["model"]), r["step"], r["batch"]): r for r in recs
              if "interp_ms" in r and "openblas_env" not in r}
    # the same graphc command again in the other OpenBLAS environment (largest batches)
    other = {(r.get("model_file", r["model"]), r["step"], r["batch"]): r for r in recs
             if "interp_ms" in r and r.get("openblas_env") == "other"}
    ojobs = [r for r in recs if r.get("kind") == "openblas_job"]
    kchecks = {r.get("env"): r for r in recs if r.get("kind") == "kernel_check"}
    peak = next((r for r in recs if r.get("kind") == "peak"), None)
    peers, errors = {}, []
    for r in recs:
        if r.get("framework") in ("pytorch", "onnxruntime") and "kind" not in r and "ms" in r:
            peers[(r["model"], r["step"], r["batch"], r["config"])] = r
        elif r.get("kind") == "error" or ("error" in r and r.get("framework")):
            errors.append(r)
    # an error record names the configs that a failed process should have timed
    seen, uniq = set(), []
    for e in errors:  # a process that printed its own error record and then exited non-zero
        k = (e.get("framework"), e.get("config"), e.get("model"), e.get("step"), e.get("batch"))
        if k not in seen:
            seen.add(k)
            uniq.append(e)
    errors = uniq
    failed = {}
    for i, e in enumerate(errors, 1):
        e["_n"] = i
        for c in str(e.get("config", "")).split(","):
            key = (e.get("model"), e.get("step"), e.get("batch"), "interp" if c == "interp" else c)
            failed.setdefault(key, i)
    threads = meta.get("threads", "?")
    blas = sorted({r.get("blas") for r in graphc.values() if r.get("blas")})
    quick = meta.get("quick") == 1
    L = []
    if kept:
        L.append(f"Measured by `{meta.get('command', 'bench/compare.sh')}` on {meta.get('date', '?')} on that "
                 f"machine and kept as they were (not re-measured); the raw results are in `{raw_name}`, "
                 "rendered again by today's `bench/report.py` (columns that run did not measure show `—`).")
    else:
        L.append(f"Measured by `{meta.get('command', 'bench/compare.sh')}` on {meta.get('date', '?')}; "
                 f"the raw results are in `{raw_name}`.")
    L.append("")
    if quick:
        L.append("> **SMOKE TEST (`--quick`): a few steps per row on a busy machine. "
                 "These numbers are NOT a real result; do not quote them.**")
        L.append("")
    bad = [k for k in ("as_found", "other") if kchecks.get(k, {}).get("status") == "fail"]
    if bad:
        L.append(f"> **The kernel unit tests failed** in the {' and the '.join(b.replace('_', ' ') for b in bad)} "
                 f"OpenBLAS environment: see \"OpenBLAS environment, both ways\" below.")
        L.append("")
    la = meta.get("loadavg_start", "")
    try:
        la1 = float(la.split()[0])
    except (ValueError, IndexError):
        la1 = 0.0
    rows_la = []
    for j in jobs:
        try:
            rows_la.append(float(str(j.get("loadavg", "")).split()[0]))
        except (ValueError, IndexError):
            pass
    if la1 > 0.5:
        span = (f"; before the rows it ranged from {min(rows_la):.2f} to {max(rows_la):.2f}"
                if rows_la else "")
        L.append(f"> **Noise warning**: the load average was {la} when the run started "
                 f"({end.get('loadavg_end', '?')} at the end{span}) on {meta.get('cpus', '?')} CPUs: other "
                 f"processes were running, so these times are noisier (and the multi-threaded ones slower) than on "
                 f"an idle machine, and the limits `bench/peak` measured at the start are too low. Compare the "
                 f"columns of one row, measured side by side, rather than absolute times. The `load` column gives "
                 f"the load average before each row.")
        L.append("")
    L.append("Every time is the **median** of the per-step wall times of the measured steps (the `steps` "
             "column), after the warm-up steps, which are not timed. graphc's interpreter and compiled plan "
             "alternate step by step in one process (`graphc bench`); each peer configuration runs its steps "
             "back to back, on the same batch size, the same random inputs (uniform [0, 1) images, random "
             "labels) and the same thread count. No means, no best-of.")
    L.append("")
    L.append("## Setup")
    L.append("")
    cpu = meta.get("cpu") or "?"
    cores = f"{meta.get('cpus', '?')} CPUs ({meta.get('sockets', '?')} socket x {meta.get('cores_per_socket', '?')} " \
            f"cores x {meta.get('threads_per_core', '?')} thread per core)"
    if meta.get("hypervisor"):
        cores += f", virtual machine ({meta['hypervisor']})"
    rows = [
        ["machine", f"{cpu}" + (f" (family {meta['cpu_family']}, model {meta['cpu_model_id']})"
                                if meta.get("cpu_family") else "")
                    + f", {cores}, {meta.get('mem_gib', '?')} GiB, Linux {meta.get('kernel', '?')}"],
        ["date", meta.get("date", "?")],
        ["threads", f"{threads}: `graphc bench --threads {threads}`; PyTorch `torch.set_num_threads({threads})`, "
                    f"`set_num_interop_threads(1)`, `OMP_NUM_THREADS={threads}`, `OPENBLAS_NUM_THREADS={threads}`; "
                    f"ONNX Runtime `intraOpNumThreads: {threads}`, `interOpNumThreads: 1`"],
        ["graphc", f"{meta.get('graphc_version', '?')}; BLAS: {', '.join(blas) or '?'}"
                   + ("; this graphc has no `--compare-stages`: no one-op-at-a-time column"
                      if str(meta.get("compare_stages", "")).startswith("no") else "")],
        ["PyTorch", (f"{meta.get('torch_version')} (Debian python3-torch, {meta.get('python')}; oneDNN for "
                     f"convolutions, OpenBLAS through libblas.so.3 for matrix products)")
         if meta.get("torch_status") == "ok" else meta.get("torch_status", "?")],
        ["ONNX Runtime", f"onnxruntime-node {meta.get('ort_version')} on node {meta.get('node_version')}"
         + ("; it has no setting that holds it to AVX2 (its kernels follow CPUID), so it ran with the "
            "CPU's AVX-512: against it graphc's avx2 variant is handicapped" if meta.get("isa_forced") else "")
         if meta.get("ort_status") == "ok" else meta.get("ort_status", "?")],
        ["environment", ", ".join(f"`{k[4:]}` {v}" for k, v in meta.items() if k.startswith("env_"))
         + " (as the script found them; it then sets the two thread counts above for the peers)"
         + ("; graphc's largest batches also ran in another OpenBLAS environment (below)"
            if meta.get("openblas_other_env") else "")],
        ["load average", f"{meta.get('loadavg_start', '?')} at the start, {end.get('loadavg_end', '?')} at the end"],
        ["run time", f"{end['seconds'] / 60:.1f} min" if "seconds" in end else "? (the run did not finish)"],
        ["command", f"`{meta.get('command', '?')}`"],
    ]
    L.append(table(["", ""], rows, ["l", "l"]))
    L.append("")

    goals_section(L, peak, jobs, graphc, peers)

    # the networks
    L.append("## The networks are the same")
    L.append("")
    gp = {r["model"]: r["params"] for r in recs if r.get("kind") == "graphc_params"}
    ver = {r["model"]: r for r in recs if r.get("kind") == "verify"}
    rows = []
    for m, p in gp.items():
        v = ver.get(m)
        rows.append([f"`models/{m}.net`", f"{p:,}", f"{v['torch_params']:,}" if v else "not checked",
                     f"{v['layers']} of {v['layers']} equal" if v else "not checked"])
    L.append(table(["model", "graphc parameters (`graphc check`)", "PyTorch parameters",
                    "conv / pool / dense layers: output shape, window, stride, padding"], rows,
                   ["l", "r", "r", "l"]))
    L.append("")
    L.append("`bench/torch_bench.py verify` builds each PyTorch network and compares it with "
             "`graphc dump --stage graph --format json`: parameter count, every parameter's shape, every "
             "convolution, pooling and dense layer's output shape (NHWC), window, stride and padding. The run "
             "stops before measuring anything if one differs. \"same\" padding follows TensorFlow: "
             "`padding=2` for the 5x5 convolutions of mnist; for large's 3x3 stride-2 convolution on "
             "1080x1920, 0 pixels before and 1 after on each axis, done with an explicit `F.pad` "
             "(`Conv2d(padding=1)` gives the same output size but shifted windows), which copies the input "
             "each step in PyTorch and in ONNX Runtime (a Pad node) while graphc pads inside its convolution. The flatten before the "
             "first dense layer reads NCHW in PyTorch and NHWC in graphc: the same network up to a "
             "permutation of that layer's rows.")
    if "charlm" in gp:
        L.append("")
        L.append("For charlm the layers compared are its 19 dense products (query, key, value, attention output, "
                 "the MLP's two, three blocks, then the output layer), as graphc's `[64*B, units]` matrices; "
                 "its parameters are mapped to graphc's names and layouts (`CharLM.graphc_name`). Its attention "
                 "is written out as graphc lowers `multi_head_attention` (q scaled by 1/4, masked scores -1e9, "
                 "softmax, product with v); tests/torch_ops.py checks graphc's loss and gradients against it.")
    L.append("")

    # the timings
    models = []
    for j in jobs:
        if j["model"] not in models:
            models.append(j["model"])
    for m in models:
        for step in ("training", "inference"):
            js = [j for j in jobs if j["model"] == m and j["step"] == step]
            if not js:
                continue
            # the peer columns that have something to show (none when a peer was not measured)
            cfgs = [c for c in ORDER[step] if any(k[:2] == (m, step) and k[3] == c for k in list(peers) + list(failed))]
            L.append(f"## {m}, {step} step")
            L.append("")
            what, unit = TRAINING.get(m, ("forward, cross-entropy loss, backward, update", "examples"))
            if step == "inference":
                what = ("forward to the softmax of the last position's logits, no gradients" if m == "charlm" else
                        "forward to softmax probabilities, no gradients (dropout off"
                        + ("; batch norm on its running statistics, folded into the convolutions by graphc"
                           if m == "fashion-resnet" else "") + ")")
            per = "images/s" if unit == "images" else f"{unit}/s"
            L.append(f"One step: {what}. Median ms per step, lower is better; {per} = batch / median.")
            L.append("")
            head = ["batch", "steps (warm-up)", "load", "GFLOP/step", "graphc interp", "graphc compiled",
                    "interp / compiled", "graphc compiled, one op at a time", "one op at a time / compiled"] + \
                [CONFIGS[c][0] for c in cfgs]
            if cfgs:
                head += ["fastest peer", "fastest peer ms / compiled ms"]
            rows, rows_ips = [], []
            for j in js:
                b = j["batch"]
                g = graphc.get((m, step, b))
                gi = g["interp_ms"] if g else None
                gc = g["compiled_ms"] if g else None
                row = [b, f"{j['steps']} ({j['warmup']})", str(j.get("loadavg", "")).split(" ")[0],
                       f"{g['gflop_per_step']:.3g}" if g else "—"]
                # one op at a time: absent from an older graphc's JSON (no --compare-stages)
                go = g.get("one_op_at_a_time_ms") if g else None
                if g:
                    row += [fmt_ms(gi), fmt_ms(gc), f"{g['ratio']:.2f}x", fmt_ms(go),
                            f"{go / gc:.2f}x" if go and gc else "—"]
                else:
                    n = failed.get((m, step, b, "interp"))
                    row += [f"failed [{n}]" if n else "—"] * 2 + ["—"] + [f"failed [{n}]" if n else "—"] + ["—"]
                ips = [b, fmt_ips(g["interp_images_per_s"]) if g else "—",
                       fmt_ips(g["compiled_images_per_s"]) if g else "—",
                       fmt_ips(1e3 * b / go) if go else "—"]
                best = None
                for c in cfgs:
                    p = peers.get((m, step, b, c))
                    if p:
                        row.append(fmt_ms(p["ms"]))
                        ips.append(fmt_ips(p["images_per_s"]))
                        if best is None or p["ms"] < best[1]:
                            best = (c, p["ms"])
                    else:
                        n = failed.get((m, step, b, c))
                        row.append(f"failed [{n}]" if n else "—")
                        ips.append("—")
                if best and gc:
                    row += [CONFIGS[best[0]][0], f"{best[1] / gc:.2f}x"]
                elif cfgs:
                    row += ["—", "—"]
                rows.append(row)
                rows_ips.append(ips)
            L.append(table(head, rows))
            L.append("")
            L.append(f"{unit.capitalize()} per second (higher is better):")
            L.append("")
            L.append(table(["batch", "graphc interp", "graphc compiled", "graphc compiled, one op at a time"]
                           + [CONFIGS[c][0] for c in cfgs], rows_ips))
            L.append("")
    L.append("`interp / compiled` > 1: graphc's compiled plan is faster than its own interpreter; "
             "`one op at a time / compiled` > 1: the plan's parallel stages make it faster (see Configurations); "
             "`fastest peer ms / compiled ms` > 1: graphc's compiled plan is faster than the fastest peer "
             "configuration of that row, < 1: slower.")
    L.append("")

    limit_section(L, meta, peak, jobs, graphc, next((e["_n"] for e in errors if e.get("config") == "peak"), None))
    openblas_section(L, meta, graphc, other, ojobs, failed, kchecks)

    # memory
    L.append("## Memory")
    L.append("")
    plans = {(r["model"], r["step"], r["batch"]): r for r in recs if r.get("kind") == "memplan"}
    rows = []
    for j in jobs:
        g = graphc.get((j["model"], j["step"], j["batch"]))
        if not g:
            continue
        pe = peers.get((j["model"], j["step"], j["batch"], "eager"))
        po = peers.get((j["model"], j["step"], j["batch"], "ort"))
        row = [j["model"], j["step"], j["batch"], mb(g["interp_peak_bytes"]), mb(g["compiled_arena_bytes"]),
               f"{g['compiled_arena_bytes'] / g['interp_peak_bytes']:.2f}" if g["interp_peak_bytes"] else "—"]
        if plans:
            pl = plans.get((j["model"], j["step"], j["batch"]))
            row += ([mb(pl["naive_bytes"]), mb(pl["lower_bound_bytes"]), mb(pl["arena_bytes"]),
                     f"{pl['arena_bytes'] / pl['lower_bound_bytes']:.3f}x" if pl["lower_bound_bytes"] else "—"]
                    if pl else ["—"] * 4)
        row += [f"{g['max_rss_kb'] / 1024:.0f}", f"{pe['max_rss_kb'] / 1024:.0f}" if pe else "—",
                f"{po['max_rss_kb'] / 1024:.0f}" if po else "—"]
        rows.append(row)
    plan_head = (["memory plan: naive sum MB", "lower bound MB", "arena MB", "arena / lower bound"]
                 if plans else [])
    L.append(table(["model", "step", "batch", "graphc interp: peak live MB",
                    "graphc compiled: arena + scratch MB", "arena / peak"] + plan_head +
                   ["graphc process max RSS MB", "PyTorch eager process max RSS MB",
                    "ONNX Runtime process max RSS MB"], rows, ["l", "l"] + ["r"] * (7 + len(plan_head))))
    L.append("")
    if plans:
        L.append("The memory plan's columns are the summary line of `graphc dump models/MODEL.net --stage planned "
                 "--batch B --threads N` (`--infer` for inference; `docs/dump-formats.md`), run next to each row: "
                 "the naive sum of every buffer of the step (each its own allocation, no reuse), the lower bound "
                 "(the most bytes alive at once, which no placement can go below) and the arena the planner "
                 "placed them in. An arena at 1.000x the lower bound is as small as any plan of this op order "
                 "can be.")
        L.append("")
    L.append("graphc's interpreter allocates each value when it is made and frees it after its last use: its "
             "peak is the most bytes of values (plus a kernel's scratch) alive at once. The compiled plan places "
             "every buffer in one arena at plan time; the arena (with scratch) is what it holds for the whole run. "
             "Both count every value of the step, gradients included in training, and neither counts the "
             "weights or optimizer state. The max RSS columns are whole processes: graphc's runs both "
             "modes; PyTorch's and ONNX Runtime's include the runtime itself (Python, libtorch, node), so they "
             "are for orders of magnitude, not for a per-tensor comparison.")
    L.append("")

    # configurations and caveats (a graphc without --compare-stages may predate parallel stages)
    stages = any("one_op_at_a_time_ms" in g for g in graphc.values())
    L.append("## Configurations")
    L.append("")
    rows = [["graphc interp", "`graphc bench`'s op-by-op interpreter: shape check, allocation, kernel and free "
                              "per node (the eager style)"],
            ["graphc compiled", "`graphc bench`'s compiled plan: one arena planned ahead, a flat list of kernel "
                                "calls" + (", with parallel stages" if stages else "")],
            ["graphc compiled, one op at a time", "`graphc bench --compare-stages`'s third mode: the same compiled "
                                                  "plan without parallel stages, every op alone (split over the "
                                                  "threads by its own kernel); it alternates step by step with the "
                                                  "other two"]]
    # the passive environment's other configurations only where this run measured them
    rows += [[CONFIGS[c][0], CONFIGS[c][1]] for c in ORDER["inference"]
             if not c.startswith("passive_") or c == "passive_eager" or any(k[3] == c for k in peers)]
    L.append(table(["column", "what runs"], rows, ["l", "l"]))
    L.append("")
    L.append("Parallel stages: the compiled plan groups consecutive ops that do not depend on each other (on "
             "MNIST, a dense layer's two backward products dX and dW, or a convolution's input and filter "
             "gradients) into a stage whose ops run at once, each whole on one thread, instead of one after the "
             "other, each split over all the threads; a cost model decides where a stage pays (`docs/architecture.md`, "
             "\"Parallel stages\"). The `graphc compiled, one op at a time` column is the same plan without "
             "stages, so `one op at a time / compiled` is what parallel stages buy on this machine: above 1 they "
             "help, about 1 they change little (or no stage was formed).")
    L.append("")
    L.append("PyTorch's training step is `zero_grad`, forward, `F.cross_entropy`, `backward`, the optimizer's "
             "`step()` (`torch.optim.SGD(lr=0.001)` for mnist and large, `AdamW(lr=0.002, weight_decay=0.05)` for "
             "fashion-resnet, `Adam(lr=0.003, eps=1e-7)` for charlm: each model's train block) and the accuracy "
             "of the batch (graphc's training step computes it too), ending with `.item()` of both. Its "
             "inference step runs the eval-mode module (dropout off, batch norm on running statistics) with "
             "softmax on the logits under `torch.no_grad()`.")
    L.append("")
    L.append("## Caveats")
    L.append("")
    L.append("- The machine is shared: medians tame the noise but do not remove it; compare columns of one row "
             "(measured minutes apart) rather than rows of different runs.")
    L.append("- Frameworks run one after the other, not interleaved (only graphc's two modes alternate step by "
             "step), so load that comes and goes during the run lands on some columns more than others.")
    L.append("- With OpenMP (PyTorch) a busy machine hurts more than with graphc's thread pool: a parallel "
             "region waits for its slowest thread, and spinning workers take CPU from OpenBLAS's own threads. "
             "The passive-environment column shows how much of that the environment changes. graphc's workers "
             "spin too, for at most 50 us between jobs, and stop spinning for 20 ms when they find themselves "
             "descheduled (util/pool.c); that spin counts in graphc's CPU ms, so on a quiet machine its CPU "
             "time per step can exceed its wall time's share of one core.")
    L.append("- Steps per row are fewer where a step is long (large images, batch 256), to bound the run; "
             "the `steps` column says how many each median is over.")
    L.append("")
    if errors:
        L.append("## Failures")
        L.append("")
        for e in errors:
            if e.get("config") == "onnx_export":
                what = f"the ONNX export of {e.get('model', '?')}"
            elif e.get("config") == "peak":
                what = "`bench/peak`, the machine's limit"
            elif e.get("config") == "openblas_other":
                what = (f"graphc in the other OpenBLAS environment, {e.get('model', '?')} {e.get('step', '')} "
                        f"batch {e.get('batch', '?')}")
            else:
                what = (f"{e.get('framework', '?')} {e.get('config', '')}, {e.get('model', '?')} "
                        f"{e.get('step', '')} batch {e.get('batch', '?')}")
            L.append(f"{e['_n']}. {what}: {e.get('error', '?')}")
        L.append("")
    L.append("<details><summary>The graphc commands of this run</summary>")
    L.append("")
    L.append("```")
    for j in jobs + ojobs:
        L.append(j.get("graphc_command", ""))
    L.append("```")
    L.append("")
    L.append("</details>")
    L.append("")
    return L


KINDS = {"avx512f": "AVX-512", "avx512f-half": "AVX-512 on 256-bit units",
         "avx512f-intel": "AVX-512, Intel Xeon", "avx2+fma": "AVX2",
         "sse": "SSE2 only", "none": "no x86 vector FMA",
         "forced-avx2": "AVX2 held on an AVX-512 CPU (`--isa avx2`)"}


def run_kind(recs):
    """A run's CPU kind: the widest vector FMA its bench/peak found ('avx512f', ...), or
    None for results without a peak line.  AVX-512 is two kinds: a CPU that runs a
    512-bit FMA on 256-bit units (Zen 4) gets no more flops from it than from AVX2, so
    its limits, and what is compute- or memory-bound, are another machine's than on one
    with 512-bit units (Zen 5, Intel's server cores); 'avx512f-half' when bench/peak's
    one-thread avx512f rate is under 1.5x its avx2+fma rate.  Intel's server cores with
    512-bit units are a kind of their own ('avx512f-intel'): the same flops a cycle as
    Zen 5 but another cache hierarchy (2 MB L2, a mesh L3) and memory, so a run there
    must not replace Zen 5's kept results.  A run held to AVX2 with --isa ('forced-avx2')
    is a kind of its own whatever the CPU: it must not replace an AVX2 machine's run."""
    meta = next((r for r in recs if r.get("kind") == "meta"), {})
    if meta.get("isa_forced"):
        return "forced-" + meta["isa_forced"]
    peak = next((r for r in recs if r.get("kind") == "peak"), None)
    if not peak:
        return None
    isa = peak.get("isa")
    if isa == "avx512f":
        rate = {f.get("isa"): f.get("gflops_1t") for f in peak.get("fma") or []}
        if rate.get("avx512f") and rate.get("avx2+fma") and rate["avx512f"] < 1.5 * rate["avx2+fma"]:
            return "avx512f-half"
        if "intel" in (meta.get("cpu") or "").lower():
            return "avx512f-intel"
    return isa


def run_label(recs):
    """A run's --label ('' for the run of mnist and large of its kind)."""
    return next((r.get("label") or "" for r in recs if r.get("kind") == "meta"), "")


def kind_file(recs):
    """The file a run of this kind (and label) is kept in under bench/results/
    (cpu-avx512.jsonl, cpu-avx512-issue14.jsonl ...)."""
    k = run_kind(recs) or "unknown"
    label = run_label(recs)
    return ("cpu-" + {"avx512f": "avx512", "avx512f-half": "avx512-half",
                      "avx512f-intel": "avx512-intel", "avx2+fma": "avx2"}.get(k, re.sub(r"[^a-z0-9]+", "-", k))
            + (f"-{label}" if label else "") + ".jsonl")


def notes_file(recs, raw):
    """A run's hand-written notes (where the time goes, what was profiled), next to its
    results: bench/results/cpu-KIND[-LABEL].notes.md; compare.sh removes them when a new
    run replaces the kept one, as they speak of the old run's figures."""
    return os.path.join(os.path.dirname(raw) or ".", kind_file(recs)[:-len(".jsonl")] + ".notes.md")


def run_title(recs):
    meta = next((r for r in recs if r.get("kind") == "meta"), {})
    models = []
    for r in recs:
        if r.get("kind") == "job" and r["model"] not in models:
            models.append(r["model"])
    return (f"{KINDS.get(run_kind(recs), run_kind(recs) or 'CPU kind not measured')}"
            f"{', ' + ' and '.join(models) if run_label(recs) else ''}: {meta.get('cpu') or '?'}, "
            f"{meta.get('cpus', '?')} CPUs, {meta.get('date', '?')}")


def write(args):
    runs = [(load(args.jsonl), args.raw_name, False)]
    kinds = [(run_kind(runs[0][0]), run_label(runs[0][0]))]
    skipped = []
    for path in args.keep or []:
        recs = load(path)
        k = (run_kind(recs), run_label(recs))
        if k in kinds:   # this run (or an earlier kept one) measured that kind and label: newer wins
            skipped.append(path)
            continue
        kinds.append(k)
        runs.append((recs, path, True))
    L = ["# Benchmarks: graphc against PyTorch and ONNX Runtime", ""]
    L.append("Written by `bench/compare.sh`; do not edit by hand, run it again (see `bench/README.md`). "
             "One section per kind of CPU it was run on, the newest run of each (and of each set of models "
             "run apart with `--label`, such as issue 14's); the first is this run's, the others are kept from "
             "earlier runs (`bench/results/cpu-*.jsonl`), each with its date and CPU:")
    L.append("")
    for recs, raw, kept in runs:
        title = run_title(recs)
        anchor = re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
        L.append(f"- [{title}](#{anchor}){' (kept, not re-measured)' if kept else ' (this run)'}")
    if skipped:
        L.append("")
        L.append("Superseded by a newer run of the same kind, and left out: " + ", ".join(f"`{p}`" for p in skipped) + ".")
    L.append("")
    for recs, raw, kept in runs:
        L.append(f"## {run_title(recs)}")
        L.append("")
        L += ["#" + line if line.startswith("#") else line for line in render_run(recs, raw, kept)]
        notes = notes_file(recs, raw)
        if os.path.exists(notes):
            L.append(f"### Notes on this run (written by hand: `{notes}`)")
            L.append("")
            with open(notes) as f:
                L += ["###" + line if line.startswith("#") else line for line in f.read().rstrip("\n").split("\n")]
            L.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(L))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("pairs", nargs="*")
    t = sub.add_parser("tag")
    t.add_argument("pairs", nargs="*")
    w = sub.add_parser("write")
    w.add_argument("--jsonl", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--raw-name", default=None, help="how the report names the results file")
    w.add_argument("--keep", action="append", metavar="FILE.jsonl",
                   help="an earlier run on another kind of CPU, given a section of its own (repeatable)")
    k = sub.add_parser("kind-file")
    k.add_argument("--jsonl", required=True)
    a = p.parse_args()
    if a.cmd == "kind-file":
        print(kind_file(load(a.jsonl)))
        return 0
    if a.cmd == "record":
        record(a.pairs)
        return 0
    if a.cmd == "tag":
        tag(a.pairs)
        return 0
    a.raw_name = a.raw_name or a.jsonl
    return write(a)


if __name__ == "__main__":
    sys.exit(main())
