#!/usr/bin/env bash
# bench/ablate_sweep.sh: the question's "1.5x on MNIST, 2.5x on 1080x1920 images" as a
# curve.  The same CNN (the question's: conv 5x5x32, max pool 2, conv 5x5x64, max pool
# 2, dense 1024, dropout, dense 10) on square images from 28x28 up and on 540x960 and
# 1080x1920, at fixed memory (the batch shrinks as the image grows); graphc bench's
# interpreter against its compiled plan at every size, and graphc bench --ablate at a
# few sizes: which optimizations grow with the image.  See docs/why-graph-mode.md.
set -u -o pipefail

usage() {
    cat <<'EOF'
usage: bench/ablate_sweep.sh [options]

Writes, in the output folder: models/sweep-HxW.net (one per size), ratio.jsonl
(graphc bench --json at each size), ablate.jsonl (graphc bench --ablate --json at
the ablation sizes), waterfall-HxW.svg (their waterfalls), sweep.md (the tables)
and sweep.svg (interpreter / compiled against the image size, and what each
optimization saves at the ablation sizes).

  --sizes L         HxW:BATCH,... (default 28x28:256,56x56:64,112x112:16,224x224:4,
                    448x448:1,540x960:1,1080x1920:1: batch x pixels fixed up to
                    448x448, batch 1 beyond)
  --ablate L        HxW,... the sizes to take apart (default 28x28,224x224,1080x1920)
  --steps N         measured steps of graphc bench (default 10)
  --ablate-steps N  measured steps of each ablation (default 10)
  --warmup N        warm-up steps (default 2)
  --threads N       threads (default 2)
  --out DIR         output folder (default bench/results/sweep)
  --report-only     only sweep.md and sweep.svg again, from DIR's JSON
  -h, --help        this text

Environment: GRAPHC (default ./graphc), PYTHON (default python3).
EOF
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

SIZES=28x28:256,56x56:64,112x112:16,224x224:4,448x448:1,540x960:1,1080x1920:1
ABLATE=28x28,224x224,1080x1920
STEPS=10
ABLATE_STEPS=10
WARMUP=2
THREADS=2
OUT=bench/results/sweep
REPORT_ONLY=0
GRAPHC=${GRAPHC:-./graphc}
PYTHON=${PYTHON:-python3}

die() { echo "bench/ablate_sweep.sh: $*" >&2; exit 2; }
need_int() { [[ $2 =~ ^[0-9]+$ && $2 -ge $3 ]] || die "$1 needs a whole number >= $3, not '$2'"; }

while [ $# -gt 0 ]; do
    case $1 in
    --sizes) [ $# -ge 2 ] || die "--sizes needs a value"; SIZES=$2; shift 2 ;;
    --ablate) [ $# -ge 2 ] || die "--ablate needs a value"; ABLATE=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; need_int --steps "$2" 1; STEPS=$2; shift 2 ;;
    --ablate-steps) [ $# -ge 2 ] || die "--ablate-steps needs a value"; need_int --ablate-steps "$2" 1; ABLATE_STEPS=$2; shift 2 ;;
    --warmup) [ $# -ge 2 ] || die "--warmup needs a value"; need_int --warmup "$2" 0; WARMUP=$2; shift 2 ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; need_int --threads "$2" 1; THREADS=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --report-only) REPORT_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done

# HxW:B items, checked
declare -a SZ_H SZ_W SZ_B
IFS=, read -r -a items <<< "$SIZES"
for it in "${items[@]}"; do
    [[ $it =~ ^([0-9]+)x([0-9]+):([0-9]+)$ ]] || die "--sizes: '$it' is not HxW:BATCH"
    h=${BASH_REMATCH[1]} w=${BASH_REMATCH[2]} b=${BASH_REMATCH[3]}
    { [ "$h" -ge 28 ] && [ "$w" -ge 28 ] && [ "$b" -ge 1 ]; } || die "--sizes: '$it': at least 28x28 and batch 1"
    SZ_H+=("$h") SZ_W+=("$w") SZ_B+=("$b")
done
batch_of() {   # HxW -> its batch in --sizes, or nothing
    for i in "${!SZ_H[@]}"; do [ "${SZ_H[$i]}x${SZ_W[$i]}" = "$1" ] && echo "${SZ_B[$i]}"; done
}
IFS=, read -r -a ABL <<< "$ABLATE"
for s in "${ABL[@]}"; do [ -n "$(batch_of "$s")" ] || die "--ablate: '$s' is not one of --sizes"; done

mkdir -p "$OUT/models" || die "cannot make $OUT"

# The question's CNN at HxW.  After the two pools the image is H/4 x W/4; a max pool
# of k = (H/4)/7 (none at 28x28) brings it to about 7 rows, so that the dense layer
# stays about MNIST's (7x7x64 inputs; 7x12x64 at 16:9) and the weights fit at every
# size.  The layers' work per pixel is the question's.
model() {
    local h=$1 w=$2 k=$(( $1 / 4 / 7 ))
    local pool=""
    [ "$k" -gt 1 ] && pool="h = maxpool(h, size=$k)                     # to about 7 rows"
    cat <<EOF
# bench/ablate_sweep.sh: the question's CNN on ${h}x${w} images (generated)
model sweep_${h}x${w}

input image: f32[B, $h, $w, 1]
input label: i32[B]

h = relu(conv2d(image, filters=32, kernel=5, padding="same"))
h = maxpool(h, size=2, stride=2)
h = relu(conv2d(h, filters=64, kernel=5, padding="same"))
h = maxpool(h, size=2, stride=2)
$pool
h = relu(dense(flatten(h), units=1024))
h = dropout(h, rate=0.4)
logits = dense(h, units=10)

output probs = softmax(logits)
loss = cross_entropy(logits, label)

train {
  data      = synthetic(count=64)
  optimizer = sgd(lr=0.001)
  batch     = 1
  epochs    = 1
  steps     = 10
  minimize  = loss
}
EOF
}

if [ "$REPORT_ONLY" = 0 ]; then
    [ -x "$GRAPHC" ] || die "no graphc at $GRAPHC (make first, or set GRAPHC)"
    : > "$OUT/ratio.jsonl"
    : > "$OUT/ratio-load.jsonl"
    : > "$OUT/ablate.jsonl"
    start=$(date +%s)
    for i in "${!SZ_H[@]}"; do
        h=${SZ_H[$i]} w=${SZ_W[$i]} b=${SZ_B[$i]} m="$OUT/models/sweep-${h}x${w}.net"
        model "$h" "$w" > "$m"
        l0=$(cut -d' ' -f1 /proc/loadavg)
        echo "== ${h}x${w}, batch $b: graphc bench (load $l0)" >&2
        "$GRAPHC" bench "$m" --batch "$b" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" --json \
            >> "$OUT/ratio.jsonl" || die "graphc bench failed on $m"
        echo "{\"size\": \"${h}x${w}\", \"load_before\": $l0, \"load_after\": $(cut -d' ' -f1 /proc/loadavg)}" \
            >> "$OUT/ratio-load.jsonl"
    done
    for s in "${ABL[@]}"; do
        b=$(batch_of "$s") m="$OUT/models/sweep-$s.net"
        echo "== $s, batch $b: graphc bench --ablate ($(cut -d' ' -f1-3 /proc/loadavg) load)" >&2
        "$GRAPHC" bench "$m" --batch "$b" --steps "$ABLATE_STEPS" --warmup "$WARMUP" --threads "$THREADS" --ablate \
            --json --plot "$OUT/waterfall-$s.svg" >> "$OUT/ablate.jsonl" || die "graphc bench --ablate failed on $m"
    done
    echo "== done in $(( $(date +%s) - start )) s" >&2
fi

"$PYTHON" - "$OUT" <<'EOF' || die "the report failed"
import json, math, sys, os

out = sys.argv[1]
def rows(name):
    with open(os.path.join(out, name)) as f:
        return [json.loads(l) for l in f if l.strip()]
ratio, abl = rows("ratio.jsonl"), rows("ablate.jsonl")
load = {l["size"]: l for l in rows("ratio-load.jsonl")} if os.path.exists(os.path.join(out, "ratio-load.jsonl")) else {}
size = lambda r: r["model"].split("_", 1)[1]
pixels = lambda r: int(size(r).split("x")[0]) * int(size(r).split("x")[1])

md = ["# The question's CNN from 28x28 to 1080x1920 (bench/ablate_sweep.sh)", ""]
md += ["Training step, SGD; the batch shrinks as the image grows (batch x pixels fixed up to "
       "448x448, batch 1 beyond). Median per step, the two executors alternating step by step: wall time, and the "
       "process's CPU time (every thread, user and system), the steadier of the two on a loaded machine.", ""]
md += ["| image | batch | interpreter ms | compiled ms | interpreter / compiled | CPU ms, interpreter | CPU ms, compiled "
       "| interpreter / compiled, CPU | activations MB, interpreter, compiled | load before, after |",
       "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
for r in ratio:
    l = load.get(size(r))
    md.append("| %s | %d | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx | %.1f, %.1f | %s |" % (size(r), r["batch"],
              r["interp_ms"], r["compiled_ms"], r["ratio"], r["interp_cpu_ms"], r["compiled_cpu_ms"], r["cpu_ratio"],
              r["interp_peak_bytes"] / 1e6, r["compiled_arena_bytes"] / 1e6,
              "%.1f, %.1f" % (l["load_before"], l["load_after"]) if l else "?"))
if abl:
    steps = [s["step"] for s in abl[0]["add"][1:]]
    what = {s["step"]: s["what"] for s in abl[0]["add"][1:]}
    md += ["", "What each optimization saves, added in this order to the interpreter (`graphc bench --ablate`): "
           "its gain as a share of the interpreter's step, in wall time and in CPU time (every thread; the steadier "
           "measure on a loaded machine); negative where it costs.", ""]
    md.append("| optimization | " + " | ".join("%s (batch %d): wall, CPU" % (size(a), a["batch"]) for a in abl) + " |")
    md.append("| --- |" + " ---: |" * len(abl))
    for k, st in enumerate(steps):
        cells = ["%+.1f%%, %+.1f%%" % (100 * a["add"][k + 1]["delta_ms"] / a["interp_ms"],
                 100 * a["add"][k + 1]["cpu_delta_ms"] / a["interp_cpu_ms"]) for a in abl]
        md.append("| %s | %s |" % (what[st], " | ".join(cells)))
    md.append("| interpreter / compiled | " + " | ".join("%.2fx, %.2fx" % (a["ratio"], a["interp_cpu_ms"] /
              a["compiled_cpu_ms"]) for a in abl) + " |")
    md.append("| interpreter, compiled ms | " + " | ".join("%.1f, %.1f (CPU %.1f, %.1f)" % (a["interp_ms"],
              a["compiled_ms"], a["interp_cpu_ms"], a["compiled_cpu_ms"]) for a in abl) + " |")
    md.append("| minor page faults per step, interpreter | " + " | ".join("%.0f" % a["add"][0]["minor_faults_per_step"]
              for a in abl) + " |")
    md.append("| sum of the removals / gap | " + " | ".join("%.0f%%, %.0f%%" % (100 * a["remove_sum_ms"] / a["gap_ms"],
              100 * a["remove_sum_cpu_ms"] / a["cpu_gap_ms"]) if a["gap_ms"] and a["cpu_gap_ms"] else "-"
              for a in abl) + " |")
    md.append("| load before, after | " + " | ".join("%.1f, %.1f" % (a["load_before"], a["load_after"]) for a in abl)
              + " |")
open(os.path.join(out, "sweep.md"), "w").write("\n".join(md) + "\n")

# the curve: ratio against pixels per image (log scale), and the ablation sizes' gains
W, H, L, R, T, B = 1000, 420, 80, 270, 50, 60
pw, ph = W - L - R, H - T - B
xs = [math.log10(pixels(r)) for r in ratio]
x0, x1 = math.floor(min(xs) * 2) / 2, math.ceil(max(xs) * 2) / 2
if x1 <= x0: x1 = x0 + 1
y1 = max(2.0, math.ceil(max(max(r["ratio"], r["cpu_ratio"]) for r in ratio) * 2) / 2)
y0 = min(1.0, math.floor(min(min(r["ratio"], r["cpu_ratio"]) for r in ratio) * 2) / 2)
px = lambda v: L + (v - x0) / (x1 - x0) * pw
py = lambda v: T + ph - (v - y0) / (y1 - y0) * ph
svg = ['<?xml version="1.0" encoding="UTF-8"?>',
       '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="DejaVu Sans, sans-serif" '
       'font-size="12" fill="#333">' % (W, H), '<rect width="%d" height="%d" fill="white"/>' % (W, H),
       '<text x="%d" y="26" text-anchor="middle" font-size="15" font-weight="bold">interpreter / compiled plan, '
       'training step of the question\'s CNN, by image size</text>' % (L + pw / 2)]
v = y0
while v <= y1 + 1e-9:
    svg.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e6e6e6"/><text x="%d" y="%.1f" '
               'text-anchor="end">%.1fx</text>' % (L, L + pw, py(v), py(v), L - 6, py(v) + 4, v))
    v += 0.5
for r, x in zip(ratio, xs):
    svg.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#f0f0f0"/><text x="%.1f" y="%d" '
               'text-anchor="middle" font-size="11">%s</text><text x="%.1f" y="%d" text-anchor="middle" '
               'font-size="10" fill="#777">batch %d</text>' % (px(x), px(x), T, T + ph, px(x), T + ph + 16, size(r),
               px(x), T + ph + 30, r["batch"]))
for key, color, dash, label in (("ratio", "#9ecae1", ' stroke-dasharray="5,3"', "wall time"),
                                ("cpu_ratio", "#1f77b4", "", "CPU time")):
    pts = " ".join("%.1f,%.1f" % (px(x), py(r[key])) for r, x in zip(ratio, xs))
    svg.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2.2"%s/>' % (pts, color, dash))
    for r, x in zip(ratio, xs):
        svg.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>' % (px(x), py(r[key]), color))
        if key == "cpu_ratio":
            svg.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11">%.2fx</text>' % (px(x),
                       py(r[key]) - 9, r[key]))
    ly0 = T + 14 + (18 if key == "cpu_ratio" else 0)
    svg.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2.2"%s/><text x="%d" y="%d">%s'
               '</text>' % (L + 10, L + 34, ly0, ly0, color, dash, L + 40, ly0 + 4, label))
svg.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (L, T, pw, ph))
svg.append('<text x="%d" y="%d" text-anchor="middle">pixels per image (log scale)</text>' % (L + pw / 2, H - 8))
ly = T + 10
for a in abl:
    svg.append('<text x="%d" y="%d" font-weight="bold">%s, batch %d: %.2fx (CPU)</text>' % (L + pw + 14, ly,
               size(a), a["batch"], a["interp_cpu_ms"] / a["compiled_cpu_ms"]))
    ly += 15
    svg.append('<text x="%d" y="%d" font-size="10" fill="#777">CPU time saved, of the step:</text>' % (L + pw + 20, ly))
    ly += 13
    top = sorted(a["add"][1:], key=lambda s: -s["cpu_delta_ms"])[:3]
    for s in top:
        svg.append('<text x="%d" y="%d" font-size="10">%s %.0f%%</text>' % (L + pw + 20, ly, s["what"][:30],
                   100 * s["cpu_delta_ms"] / a["interp_cpu_ms"]))
        ly += 13
    ly += 6
svg.append("</svg>")
open(os.path.join(out, "sweep.svg"), "w").write("\n".join(svg) + "\n")
print(open(os.path.join(out, "sweep.md")).read(), end="")
EOF
