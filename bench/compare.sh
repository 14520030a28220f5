#!/usr/bin/env bash
# bench/compare.sh: graphc (interpreter and compiled plan) against PyTorch 1.13 and
# ONNX Runtime on the same networks, batch sizes and thread count, in one run.
# Writes docs/benchmarks.md and the raw JSON lines to bench/results/latest.jsonl (kept
# as bench/results/cpu-KIND.jsonl too: the report has a section per kind of CPU).
# See bench/README.md.
set -u -o pipefail

usage() {
    cat <<'EOF'
usage: bench/compare.sh [options]

Times models/mnist.net (training and inference, batches 1,16,64,256) and
models/large.net (training and inference, batches 1,4) with graphc bench, PyTorch
(eager, channels_last, TorchScript, optimize_for_inference, eager with a passive
OpenMP environment) and ONNX Runtime (inference), then writes a Markdown report.
--models fashion-resnet,charlm times issue 14's models instead (batches 128 and
16, their train blocks'; every PyTorch configuration also in the passive
environment; no ONNX Runtime for charlm, whose input is token ids). For each row,
graphc dump --stage planned gives the memory plan's naive sum, lower bound and
arena.
graphc runs with --compare-stages (its compiled plan also without parallel stages).
OpenBLAS both ways: each model's largest batch is run once more by graphc in the
other OpenBLAS environment (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset if either
is set, else OPENBLAS_CORETYPE=Haswell), and tests/test_kernels (next to GRAPHC)
checks the kernels against reference loops in both environments. First of all,
bench/peak (built with make bench/peak next to GRAPHC) measures the machine's FMA
peak (each vector FMA it has), memory bandwidth and OpenBLAS's sgemm rate, the
limits the report holds graphc's times against. The report has a section per kind
of CPU: this run's, and the kept runs bench/results/cpu-*.jsonl of other kinds.

  --threads N          threads for every framework (default 2)
  --mnist-batches L    comma-separated batch sizes for mnist (default 1,16,64,256)
  --large-batches L    batch sizes for large (default 1,4)
  --fashion-batches L  batch sizes for fashion-resnet (default 128, its train block's)
  --charlm-batches L   batch sizes for charlm (default 16, its train block's)
  --models L           which models: mnist, large, fashion-resnet, charlm
                       (default mnist,large)
  --label NAME         a run of other models on a CPU kind already kept: kept as
                       bench/results/cpu-KIND-NAME.jsonl, its own section of the
                       report, so it does not replace the kind's run of mnist,large
  --quick              3 measured steps after 1 warm-up everywhere (bench/peak
                       --quick): a smoke test, the report says it is not a real result
  --steps N            measured steps for every row (overrides the built-in table)
  --warmup N           warm-up steps for every row
  --out FILE           the report (default docs/benchmarks.md)
  --jsonl FILE         the raw results (default bench/results/latest.jsonl)
  --no-torch           skip PyTorch (and so ONNX Runtime, whose models it exports)
  --no-ort             skip ONNX Runtime
  --timeout S          kill any one measuring process after S seconds (default 900)
  --isa avx2           hold the run to AVX2 on a CPU that has AVX-512, the nearest
                       this machine comes to an AVX2 one: graphc's avx2 variant
                       (GRAPHC_ISA=avx2), PyTorch's oneDNN and ATen at AVX2
                       (ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2),
                       OpenBLAS's Haswell core (OPENBLAS_CORETYPE=Haswell), and the
                       limits from bench/peak's AVX2 FMA (--isa avx2+fma). ONNX
                       Runtime has no such setting: it runs what the CPU has, and the
                       report says so. Kept as its own section (cpu-forced-avx2*.jsonl)
  -h, --help           this text

Environment: PYTHON (default /usr/bin/python3, Debian's, which has python3-torch),
NODE (default node), GRAPHC (default ./graphc).
EOF
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

CMDLINE="bench/compare.sh"
for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./,=:+-]+$ ]]; then CMDLINE+=" $a"; else CMDLINE+=" '${a//\'/\'\\\'\'}'"; fi
done

THREADS=2
MNIST_BATCHES=1,16,64,256
LARGE_BATCHES=1,4
FASHION_BATCHES=128
CHARLM_BATCHES=16
MODELS=mnist,large
LABEL=
QUICK=0
STEPS_OVERRIDE=
WARMUP_OVERRIDE=
OUT=docs/benchmarks.md
JSONL=bench/results/latest.jsonl
DO_TORCH=1
DO_ORT=1
TIMEOUT=900
FORCED_ISA=
PY=${PYTHON:-/usr/bin/python3}
NODE=${NODE:-node}
GRAPHC=${GRAPHC:-./graphc}

die() { echo "compare.sh: $*" >&2; exit 1; }
need() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "option $1 needs a value (see --help)"; fi; }
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: expected a positive integer, got '$2'"; }
list() { [[ $2 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "$1: expected a list like 1,16,64, got '$2'"; }

while [ $# -gt 0 ]; do
    case $1 in
    --threads) need "$@"; posint "$1" "$2"; THREADS=$2; shift 2 ;;
    --mnist-batches) need "$@"; list "$1" "$2"; MNIST_BATCHES=$2; shift 2 ;;
    --large-batches) need "$@"; list "$1" "$2"; LARGE_BATCHES=$2; shift 2 ;;
    --fashion-batches) need "$@"; list "$1" "$2"; FASHION_BATCHES=$2; shift 2 ;;
    --charlm-batches) need "$@"; list "$1" "$2"; CHARLM_BATCHES=$2; shift 2 ;;
    --models) need "$@"; [[ $2 =~ ^(mnist|large|fashion-resnet|charlm)(,(mnist|large|fashion-resnet|charlm))*$ ]] ||
        die "--models: a comma-separated list of mnist, large, fashion-resnet, charlm"; MODELS=$2; shift 2 ;;
    --label) need "$@"; [[ $2 =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "--label: lower-case letters, digits and '-'"; LABEL=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --steps) need "$@"; posint "$1" "$2"; STEPS_OVERRIDE=$2; shift 2 ;;
    --warmup) need "$@"; [[ $2 =~ ^[0-9]+$ ]] || die "--warmup: expected a number"; WARMUP_OVERRIDE=$2; shift 2 ;;
    --out) need "$@"; OUT=$2; shift 2 ;;
    --jsonl) need "$@"; JSONL=$2; shift 2 ;;
    --no-torch) DO_TORCH=0; shift ;;
    --no-ort) DO_ORT=0; shift ;;
    --timeout) need "$@"; posint "$1" "$2"; TIMEOUT=$2; shift 2 ;;
    --isa) need "$@"; [ "$2" = avx2 ] || die "--isa: only avx2 (the variant below AVX-512 that peers can be held to)"
        FORCED_ISA=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option '$1'" ;;
    esac
done
# Every process of the run inherits these: the peers' own switches to AVX2, and graphc's.
if [ -n "$FORCED_ISA" ]; then
    grep -qw avx512f /proc/cpuinfo 2>/dev/null || die "--isa avx2: this CPU has no AVX-512; run without --isa"
    export GRAPHC_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell
fi
if [ "$QUICK" = 1 ]; then
    STEPS_OVERRIDE=${STEPS_OVERRIDE:-3}
    WARMUP_OVERRIDE=${WARMUP_OVERRIDE:-1}
fi

# The report is written by a stdlib-only script: any python3 will do for it.
REPORT_PY=$PY
[ -x "$REPORT_PY" ] || REPORT_PY=$(command -v python3) || die "no python3 to write the report with"

[ -x "$GRAPHC" ] || die "$GRAPHC not found or not executable: build it first (make -j2)"
command -v timeout >/dev/null || die "timeout (coreutils) is needed"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/graphc-compare.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$TMP"' EXIT
trap 'echo "compare.sh: interrupted" >&2; exit 130' INT TERM

mkdir -p "$(dirname "$JSONL")" "$(dirname "$OUT")" || die "cannot create the output folders"

# Run a copy of graphc: the whole run then times one binary, even if the tree is rebuilt
# meanwhile (the report shows the commands with the original name).
GRAPHC_RUN=$TMP/graphc
cp "$GRAPHC" "$GRAPHC_RUN" || die "cannot copy $GRAPHC"
"$GRAPHC_RUN" --version >/dev/null 2>&1 || die "$GRAPHC does not run (being rebuilt? try again after make)"
RAW=$TMP/results.jsonl
: >"$RAW"

T0=$(date +%s)
log() { printf '[%4ds] %s\n' $(($(date +%s) - T0)) "$*" >&2; }

# emit KEY=VALUE... : append a JSON object of strings/numbers to the results
emit() { "$REPORT_PY" "$ROOT/bench/report.py" record "$@" >>"$RAW"; }

# run_json LABEL FRAMEWORK CONFIG MODEL STEP BATCH -- COMMAND...: run COMMAND with a time
# limit, append the JSON lines it prints (with the KEY=VALUE fields of the array TAG added,
# if any); if it fails, append an error record that says why.
TAG=()
run_json() {
    local label=$1 fw=$2 cfg=$3 model=$4 step=$5 batch=$6
    shift 7
    local out=$TMP/out.$$ err=$TMP/err.$$ rc
    timeout --kill-after=30 "$TIMEOUT" "$@" >"$out" 2>"$err"
    rc=$?
    if [ ${#TAG[@]} -gt 0 ]; then
        grep '^{' "$out" | "$REPORT_PY" "$ROOT/bench/report.py" tag "${TAG[@]}" >>"$RAW"
    else
        grep '^{' "$out" >>"$RAW"
    fi
    cat "$err" >>"$TMP/stderr.txt"
    if [ $rc -ne 0 ] || ! grep -q '^{' "$out"; then
        local why
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out after ${TIMEOUT}s"
        else why="exit status $rc: $(grep -v '^\s*$' "$err" | tail -n 1 | cut -c1-240)"; fi
        log "  $label FAILED ($why)"
        emit kind=error framework="$fw" config="$cfg" model="$model" step="$step" batch="$batch" error="$why"
        return 1
    fi
    return 0
}

# steps_for MODEL STEP BATCH -> "STEPS WARMUP": fewer steps where one step is long, so
# that a full run stays near 11 minutes on 2 cores (under 20 on a busy machine).
steps_for() {
    local model=$1 step=$2 b=$3 s w
    case $model/$step in
    mnist/training)
        if [ "$b" -le 1 ]; then s=50 w=5; elif [ "$b" -le 16 ]; then s=30 w=3
        elif [ "$b" -le 64 ]; then s=24 w=2; else s=16 w=2; fi ;;
    mnist/inference)
        if [ "$b" -le 1 ]; then s=100 w=10; elif [ "$b" -le 16 ]; then s=50 w=5
        elif [ "$b" -le 64 ]; then s=30 w=3; else s=20 w=2; fi ;;
    large/training)
        if [ "$b" -le 1 ]; then s=16 w=2; else s=10 w=2; fi ;;
    large/inference)
        if [ "$b" -le 1 ]; then s=20 w=3; else s=14 w=2; fi ;;
    fashion-resnet/training)
        if [ "$b" -le 32 ]; then s=12 w=2; else s=8 w=2; fi ;;
    fashion-resnet/inference)
        if [ "$b" -le 32 ]; then s=20 w=3; else s=12 w=2; fi ;;
    charlm/training)
        if [ "$b" -le 16 ]; then s=20 w=3; else s=12 w=2; fi ;;
    charlm/inference)
        if [ "$b" -le 16 ]; then s=30 w=3; else s=20 w=3; fi ;;
    *)  # another model or batch list: a middle ground
        s=10 w=2 ;;
    esac
    echo "${STEPS_OVERRIDE:-$s} ${WARMUP_OVERRIDE:-$w}"
}

# ---------------------------------------------------------------- what is there

TORCH_STATUS=ok
TORCH_VERSION=
if [ "$DO_TORCH" = 0 ]; then
    TORCH_STATUS="skipped (--no-torch)"
elif [ ! -x "$PY" ]; then
    TORCH_STATUS="not measured: $PY not found (apt-get install -y python3-torch)"
elif ! TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)' 2>"$TMP/torch.err"); then
    TORCH_STATUS="not measured: $PY cannot import torch ($(tail -n 1 "$TMP/torch.err" | cut -c1-160)); install it with apt-get install -y python3-torch"
    TORCH_VERSION=
fi

ORT_STATUS=ok
ORT_VERSION=
NODE_VERSION=
if [ "$DO_ORT" = 0 ]; then
    ORT_STATUS="skipped (--no-ort)"
elif [ "$TORCH_STATUS" != ok ]; then
    ORT_STATUS="not measured: its ONNX models are exported by PyTorch, which is not measured"
elif ! command -v "$NODE" >/dev/null; then
    ORT_STATUS="not measured: node not found"
elif ! probe=$("$NODE" bench/ort_bench.js --probe 2>"$TMP/ort.err"); then
    ORT_STATUS="not measured: onnxruntime-node not installed (cd bench && ONNXRUNTIME_NODE_INSTALL=skip npm install)"
else
    ORT_VERSION=$(printf '%s' "$probe" | sed -n 's/.*"ort":"\([^"]*\)".*/\1/p')
    NODE_VERSION=$(printf '%s' "$probe" | sed -n 's/.*"node":"\([^"]*\)".*/\1/p')
fi

env_or_unset() { if [ -n "${!1+x}" ]; then printf '%s' "${!1}"; else printf '(unset)'; fi; }

# graphc's compiled plan without parallel stages too, if this graphc can (older ones cannot)
STAGES=()
bench_help=$("$GRAPHC_RUN" bench --help 2>&1)
[[ $bench_help == *--compare-stages* ]] && STAGES=(--compare-stages)

# OpenBLAS both ways (issue 4): tests and CI keep OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE as
# they are; the benchmark also runs graphc in the other environment. If either is set, the
# other way is both unset; if both are unset, it is the setting of the machine the issue
# came from: OPENBLAS_CORETYPE=Haswell. OPENBLAS_L2_SIZE stays unset: OpenBLAS reads it only
# from 0.3.27 on (a fallback for machines whose CPUID gives no L2 size), so the report says
# whether the library graphc loads knows the name at all.
if [ -n "${OPENBLAS_CORETYPE+x}" ] || [ -n "${OPENBLAS_L2_SIZE+x}" ]; then
    OTHER_ENV=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
    OTHER_DESC="OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset"
else
    OTHER_ENV=(env OPENBLAS_CORETYPE=Haswell)
    OTHER_DESC="OPENBLAS_CORETYPE=Haswell, OPENBLAS_L2_SIZE left unset"
fi
OPENBLAS_LIB=$(ldd "$GRAPHC_RUN" 2>/dev/null | awk '$1 ~ /^libopenblas/ { print $3; exit }')
OPENBLAS_LIB=$(readlink -f "$OPENBLAS_LIB" 2>/dev/null)
if [ -z "$OPENBLAS_LIB" ] || [ ! -r "$OPENBLAS_LIB" ]; then L2_READ=unknown
elif grep -q -a OPENBLAS_L2_SIZE "$OPENBLAS_LIB"; then L2_READ=yes
else L2_READ=no; fi

emit kind=meta command="$CMDLINE" date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)" \
    cpu_family="$(lscpu 2>/dev/null | sed -n 's/^CPU family:[[:space:]]*//p' | head -n 1)" \
    cpu_model_id="$(lscpu 2>/dev/null | sed -n 's/^Model:[[:space:]]*//p' | head -n 1)" \
    cpus="$(nproc 2>/dev/null)" \
    cores_per_socket="$(lscpu 2>/dev/null | sed -n 's/^Core(s) per socket:[[:space:]]*//p' | head -n 1)" \
    sockets="$(lscpu 2>/dev/null | sed -n 's/^Socket(s):[[:space:]]*//p' | head -n 1)" \
    threads_per_core="$(lscpu 2>/dev/null | sed -n 's/^Thread(s) per core:[[:space:]]*//p' | head -n 1)" \
    hypervisor="$(lscpu 2>/dev/null | sed -n 's/^Hypervisor vendor:[[:space:]]*//p' | head -n 1)" \
    mem_gib="$(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo 2>/dev/null)" \
    kernel="$(uname -r)" \
    threads="$THREADS" quick="$QUICK" label="$LABEL" \
    graphc_version="$("$GRAPHC_RUN" --version 2>/dev/null | head -n 1)" \
    torch_status="$TORCH_STATUS" torch_version="$TORCH_VERSION" python="$PY" \
    ort_status="$ORT_STATUS" ort_version="$ORT_VERSION" node_version="$NODE_VERSION" \
    env_OPENBLAS_CORETYPE="$(env_or_unset OPENBLAS_CORETYPE)" env_OPENBLAS_L2_SIZE="$(env_or_unset OPENBLAS_L2_SIZE)" \
    env_OMP_WAIT_POLICY="$(env_or_unset OMP_WAIT_POLICY)" env_OPENBLAS_NUM_THREADS="$(env_or_unset OPENBLAS_NUM_THREADS)" \
    env_OMP_NUM_THREADS="$(env_or_unset OMP_NUM_THREADS)" env_GRAPHC_ISA="$(env_or_unset GRAPHC_ISA)" \
    env_ONEDNN_MAX_CPU_ISA="$(env_or_unset ONEDNN_MAX_CPU_ISA)" env_ATEN_CPU_CAPABILITY="$(env_or_unset ATEN_CPU_CAPABILITY)" \
    isa_forced="$FORCED_ISA" \
    compare_stages="${STAGES[*]:-no (this graphc has no --compare-stages)}" \
    openblas_other_env="$OTHER_DESC" openblas_other_prefix="${OTHER_ENV[*]}" \
    openblas_lib="$OPENBLAS_LIB" openblas_reads_l2_size="$L2_READ" \
    loadavg_start="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" \
    || die "cannot write the results"
log "threads $THREADS; PyTorch: $TORCH_STATUS${TORCH_VERSION:+ $TORCH_VERSION}; ONNX Runtime: $ORT_STATUS${ORT_VERSION:+ $ORT_VERSION}"

# ---------------------------------------------------------------- the machine's limit

# bench/peak, built in GRAPHC's build folder (a check program: make all does not build
# it), measures the FMA peak and OpenBLAS's sgemm rate before anything else runs.
PEAK_DIR=$(dirname "$GRAPHC")
PEAK=$PEAK_DIR/bench/peak
peak_why=
if [ -f "$PEAK_DIR/Makefile" ]; then
    log "building bench/peak (make -C $PEAK_DIR bench/peak)"
    make -C "$PEAK_DIR" bench/peak >"$TMP/peak.make" 2>&1 ||
        peak_why="make -C $PEAK_DIR bench/peak failed: $(grep -v '^\s*$' "$TMP/peak.make" | tail -n 1 | cut -c1-200)"
elif [ ! -x "$PEAK" ]; then
    peak_why="$PEAK not built and no Makefile next to $GRAPHC to build it with"
fi
if [ -z "$peak_why" ]; then
    peak_args=()
    [ "$QUICK" = 1 ] && peak_args=(--quick)
    [ -n "$FORCED_ISA" ] && peak_args+=(--isa avx2+fma)
    log "the machine's limit: $PEAK ${peak_args[*]} (FMA peak, OpenBLAS sgemm)"
    TAG=(kind=peak command="$PEAK${peak_args[*]:+ ${peak_args[*]}}" loadavg="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)")
    run_json bench/peak peak peak "" "" "" -- "$PEAK" "${peak_args[@]}"
    TAG=()
else
    log "the machine's limit: not measured ($peak_why)"
    emit kind=error framework=peak config=peak error="$peak_why"
fi

# ---------------------------------------------------------------- same networks?

IFS=, read -r -a MODEL_LIST <<<"$MODELS"
for m in "${MODEL_LIST[@]}"; do
    [ -f "models/$m.net" ] || die "models/$m.net not found"
    "$GRAPHC_RUN" dump "models/$m.net" --stage graph --format json >"$TMP/$m.graph.json" ||
        die "graphc dump models/$m.net failed"
    params=$("$GRAPHC_RUN" check "models/$m.net" | awk '$1 == "params" { gsub(",", "", $2); print $2 }')
    [[ $params =~ ^[0-9]+$ ]] || die "cannot read the parameter count from 'graphc check models/$m.net'"
    emit kind=graphc_params model="$m" params="$params"
    if [ "$TORCH_STATUS" = ok ]; then
        log "checking that PyTorch's $m is graphc's models/$m.net ($params parameters)"
        if ! "$PY" bench/torch_bench.py verify --model "$m" --graph-json "$TMP/$m.graph.json" \
            --expect-params "$params" >>"$RAW" 2>"$TMP/verify.txt"; then
            cat "$TMP/verify.txt" >&2
            die "PyTorch's $m is NOT the network of models/$m.net (see above): fix bench/torch_bench.py; no report written"
        fi
    fi
done

# ---------------------------------------------------------------- kernels, both ways

# kernel_check NAME [PREFIX...]: tests/test_kernels (every kernel against reference loops,
# the GEMM-based ones included) under PREFIX, e.g. env OPENBLAS_CORETYPE=Haswell
TEST_KERNELS=$(dirname "$GRAPHC")/tests/test_kernels
kernel_check() {
    local name=$1 out=$TMP/kernels.$1.txt rc summary checks failures errors status detail
    shift
    if [ ! -x "$TEST_KERNELS" ]; then
        log "kernel check ($name): $TEST_KERNELS not built"
        emit kind=kernel_check env="$name" status=not_built binary="$TEST_KERNELS"
        return
    fi
    timeout --kill-after=30 "$TIMEOUT" "$@" env top_srcdir="$ROOT" CK_DEFAULT_TIMEOUT=600 "$TEST_KERNELS" >"$out" 2>&1
    rc=$?
    summary=$(grep -E 'Checks: [0-9]+' "$out" | tail -n 1)
    checks=$(sed -n 's/.*Checks: \([0-9]*\).*/\1/p' <<<"$summary")
    failures=$(sed -n 's/.*Failures: \([0-9]*\).*/\1/p' <<<"$summary")
    errors=$(sed -n 's/.*Errors: \([0-9]*\).*/\1/p' <<<"$summary")
    if [ $rc -eq 0 ] && [ -n "$checks" ] && [ "${failures:-1}" = 0 ] && [ "${errors:-1}" = 0 ]; then
        status=pass detail=
    else
        status=fail
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then detail="timed out after ${TIMEOUT}s"
        else detail="exit status $rc: $(grep -E ':[FE]:' "$out" | head -n 1 | cut -c1-240)"; fi
        [ -n "$summary" ] || detail+=" (no summary line)"
    fi
    log "kernel check ($name): $status${summary:+, $summary}"
    emit kind=kernel_check env="$name" status="$status" checks="$checks" failures="$failures" errors="$errors" \
        detail="$detail" binary="$TEST_KERNELS" stale="$([ "$TEST_KERNELS" -ot "$GRAPHC" ] && echo 1 || echo 0)" \
        command="${*:+$* }$TEST_KERNELS"
}
kernel_check as_found
kernel_check other "${OTHER_ENV[@]}"

# ---------------------------------------------------------------- measure

# Peers get the same thread count: torch.set_num_threads(N) sets OpenMP and oneDNN;
# OpenBLAS (Debian's torch calls libblas.so.3, i.e. OpenBLAS) reads OPENBLAS_NUM_THREADS.
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

# plan_record MODEL STEP BATCH: the memory plan's figures (graphc dump --stage planned's
# summary line: naive sum, lower bound, arena) for the row
plan_record() {
    local m=$1 step=$2 b=$3 infer=() line
    [ "$step" = inference ] && infer=(--infer)
    line=$("$GRAPHC_RUN" dump "models/$m.net" --stage planned --batch "$b" --threads "$THREADS" "${infer[@]}" |
        sed -n 's/^naive sum \([0-9]*\) bytes, lower bound \([0-9]*\), arena \([0-9]*\) .*/\1 \2 \3/p')
    if [ -z "$line" ]; then
        emit kind=error framework=graphc config=memplan model="$m" step="$step" batch="$b" \
            error="graphc dump --stage planned printed no plan summary"
        return
    fi
    read -r naive lower arena <<<"$line"
    emit kind=memplan model="$m" step="$step" batch="$b" naive_bytes="$naive" lower_bound_bytes="$lower" \
        arena_bytes="$arena" command="$GRAPHC dump models/$m.net --stage planned --batch $b --threads $THREADS${infer[*]:+ ${infer[*]}}"
}

for m in "${MODEL_LIST[@]}"; do
    # the image shape ONNX Runtime is fed (none: no ONNX Runtime for the model), and whether
    # PyTorch runs every configuration in the passive environment too (issue 14's models)
    allpassive=1
    case $m in
    mnist) batches=$MNIST_BATCHES shape=1,28,28 allpassive=0 ;;
    large) batches=$LARGE_BATCHES shape=3,1080,1920 allpassive=0 ;;
    fashion-resnet) batches=$FASHION_BATCHES shape=1,28,28 ;;
    charlm) batches=$CHARLM_BATCHES shape= ;;
    esac
    ort_ok=$ORT_STATUS
    [ -z "$shape" ] && ort_ok="not for $m"
    IFS=, read -r -a BATCH_LIST <<<"$batches"
    maxb=0  # graphc runs its largest batch in the other OpenBLAS environment too
    for b in "${BATCH_LIST[@]}"; do [ "$b" -gt "$maxb" ] && maxb=$b; done
    onnx=
    for step in training inference; do
        if [ "$step" = inference ] && [ "$ort_ok" = ok ]; then
            log "$m: exporting the inference network to ONNX"
            if run_json "onnx export" onnxruntime onnx_export "$m" inference 0 -- \
                "$PY" bench/torch_bench.py export --model "$m" --out "$TMP/$m.onnx"; then onnx=$TMP/$m.onnx; fi
        fi
        for b in "${BATCH_LIST[@]}"; do
            read -r s w <<<"$(steps_for "$m" "$step" "$b")"
            infer=()
            [ "$step" = inference ] && infer=(--infer)
            gargs=(bench "models/$m.net" --batch "$b" --threads "$THREADS" --steps "$s" --warmup "$w" "${STAGES[@]}"
                --json "${infer[@]}")
            emit kind=job model="$m" step="$step" batch="$b" steps="$s" warmup="$w" \
                graphc_command="$GRAPHC ${gargs[*]}" loadavg="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
            log "$m $step batch $b: $s steps after $w warm-up: graphc"
            # graphc names the model by its `model` line (fashion_resnet): the report goes by the file's
            TAG=(model_file="$m")
            run_json graphc graphc interp "$m" "$step" "$b" -- "$GRAPHC_RUN" "${gargs[@]}"
            TAG=()
            plan_record "$m" "$step" "$b"
            if [ "$b" = "$maxb" ]; then
                # right after the row's own run, so that both see about the same load
                emit kind=openblas_job model="$m" step="$step" batch="$b" \
                    graphc_command="${OTHER_ENV[*]} $GRAPHC ${gargs[*]}" loadavg="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
                log "$m $step batch $b: graphc again, $OTHER_DESC"
                TAG=(openblas_env=other model_file="$m")
                run_json "graphc ($OTHER_DESC)" graphc openblas_other "$m" "$step" "$b" -- \
                    "${OTHER_ENV[@]}" "$GRAPHC_RUN" "${gargs[@]}"
                TAG=()
            fi
            if [ "$TORCH_STATUS" = ok ]; then
                if [ "$step" = training ]; then configs=eager,channels_last,script
                else configs=eager,channels_last,script,optimized; fi
                [ -z "$shape" ] && configs=${configs/channels_last,/}  # no image: no channels_last
                passive=eager
                [ "$allpassive" = 1 ] && passive=$configs
                log "$m $step batch $b: PyTorch $configs"
                run_json pytorch pytorch "$configs" "$m" "$step" "$b" -- \
                    "$PY" bench/torch_bench.py run --model "$m" --step "$step" --batch "$b" --steps "$s" \
                    --warmup "$w" --threads "$THREADS" --configs "$configs"
                log "$m $step batch $b: PyTorch $passive, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, OMP_WAIT_POLICY=passive"
                run_json "pytorch (passive)" pytorch "passive_${passive//,/,passive_}" "$m" "$step" "$b" -- \
                    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive \
                    "$PY" bench/torch_bench.py run --model "$m" --step "$step" --batch "$b" --steps "$s" \
                    --warmup "$w" --threads "$THREADS" --configs "$passive" --tag passive_
            fi
            if [ "$step" = inference ] && [ "$ort_ok" = ok ]; then
                if [ -n "$onnx" ]; then
                    log "$m $step batch $b: ONNX Runtime"
                    run_json onnxruntime onnxruntime ort "$m" "$step" "$b" -- \
                        "$NODE" bench/ort_bench.js --onnx "$onnx" --model "$m" --batch "$b" --shape "$shape" \
                        --steps "$s" --warmup "$w" --threads "$THREADS"
                else
                    emit kind=error framework=onnxruntime config=ort model="$m" step="$step" batch="$b" \
                        error="no ONNX model: the export failed"
                fi
            fi
        done
    done
done

emit kind=end seconds=$(($(date +%s) - T0)) loadavg_end="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
cp "$RAW" "$JSONL" || die "cannot write $JSONL"
if [ -s "$TMP/stderr.txt" ]; then cp "$TMP/stderr.txt" "${JSONL%.jsonl}.stderr.txt" 2>/dev/null || true; fi
# One section per kind of CPU: a real run (not --quick, the default files) is kept as
# bench/results/cpu-KIND.jsonl (its bench/peak's widest FMA; report.py run_kind), and the report has this
# run's section first, then one for each other kind's kept run.
KIND_FILE=$("$REPORT_PY" bench/report.py kind-file --jsonl "$JSONL") || die "cannot tell this run's CPU kind"
if [ "$QUICK" = 0 ] && [ "$JSONL" = bench/results/latest.jsonl ] && [ "$OUT" = docs/benchmarks.md ]; then
    cp "$JSONL" "bench/results/$KIND_FILE" || die "cannot write bench/results/$KIND_FILE"
    # notes written by hand about the run this one replaces speak of its figures, not these
    NOTES=bench/results/${KIND_FILE%.jsonl}.notes.md
    if [ -f "$NOTES" ]; then
        rm -f "$NOTES" && log "removed $NOTES: it was about the run this one replaces (git has it)"
    fi
    log "kept this run as bench/results/$KIND_FILE (the report's section for this kind of CPU)"
fi
KEEP=()
for f in bench/results/cpu-*.jsonl; do
    [ -f "$f" ] && [ "$(basename "$f")" != "$KIND_FILE" ] && KEEP+=(--keep "$f")
done
"$REPORT_PY" bench/report.py write --jsonl "$JSONL" --out "$OUT" --raw-name "$JSONL" "${KEEP[@]}" ||
    die "writing $OUT failed"
log "wrote $OUT and $JSONL"
