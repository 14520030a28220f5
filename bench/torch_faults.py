#!/usr/bin/python3
"""Minor page faults and CPU time per step of bench/torch_bench.py's PyTorch steps.

`graphc bench --ablate` counts the page faults that allocating every op's result
costs graphc's interpreter (docs/why-graph-mode.md); this counts them for PyTorch's
step on the same network, with getrusage around the measured steps (the whole
process: every thread, user and system time; OpenMP's spinning workers count too).
Run it with Debian's /usr/bin/python3 (python3-torch), and once more under
GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184 (glibc
then keeps the memory it frees) to see what those faults cost.

  torch_faults.py --model mnist --step training --batch 256 --steps 10 --warmup 2
      [--threads 2] [--configs eager,channels_last,script]

One JSON object per configuration on stdout.
"""
import argparse
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch_bench  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=torch_bench.MODELS, required=True)
    p.add_argument("--step", choices=("training", "inference"), required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--configs", default="eager,channels_last,script")
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.threads < 1 or args.batch < 1:
        p.error("--steps, --threads and --batch must be at least 1, --warmup at least 0")
    torch.set_num_threads(args.threads)
    for config in args.configs.split(","):
        step = torch_bench.make_step(args, config)
        for _ in range(args.warmup):
            step()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(args.steps):
            step()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        print(json.dumps({"framework": "pytorch", "torch": torch.__version__, "model": args.model, "step": args.step,
                          "batch": args.batch, "config": config, "steps": args.steps,
                          "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
                          "minor_faults_per_step": round((r1.ru_minflt - r0.ru_minflt) / args.steps, 1),
                          "cpu_ms_per_step": round(1e3 * cpu / args.steps, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
