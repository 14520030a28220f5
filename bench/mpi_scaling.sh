#!/usr/bin/env bash
# bench/mpi_scaling.sh: data-parallel training of models/mnist.net under mpirun at 1, 2
# and 4 ranks on this machine, the allreduce's latency and bandwidth here
# (bench/allreduce.c), the single-rank profile, and a model of the step time checked
# against the runs and extrapolated to 64 ranks (bench/mpi_model.py).
# Writes docs/distributed-scaling.md and the raw JSON lines to
# bench/results/mpi-latest.jsonl.  See bench/README.md.
set -u -o pipefail

usage() {
    cat <<'EOF'
usage: bench/mpi_scaling.sh [options]

Runs, in one run and interleaved repetition by repetition: graphc run of
models/mnist.net with batch 64 per rank at 1 rank (2 threads and 1 thread), 2 ranks,
2 ranks with one gradient bucket (--bucket-size 1G: no overlap) and 4 ranks; graphc
bench --profile at 1 and 2 threads; 2 and 4 copies of graphc bench at once (the
compute a rank gets when 2 or 4 share the machine).  Then bench/allreduce at 2 and 4
ranks.  Then bench/mpi_model.py writes the report.

  --reps N        repetitions of every configuration (default 3)
  --steps N       steps per epoch; 2 epochs, the second is the one measured (default 25)
  --quick         1 repetition, 5 steps, a short allreduce sweep: a smoke test, the
                  report says it is not a result
  --out FILE      the report (default docs/distributed-scaling.md)
  --jsonl FILE    the raw results (default bench/results/mpi-latest.jsonl)
  --timeout S     kill any one measuring process after S seconds (default 300)
  -h, --help      this text

Environment: GRAPHC (default ./graphc, a build configured --with-mpi), MPIRUN
(default mpirun), MPICC (default mpicc), PYTHON (default python3).
EOF
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

CMDLINE="bench/mpi_scaling.sh"
[ -n "${GRAPHC:-}" ] && [ "$GRAPHC" != ./graphc ] && CMDLINE="GRAPHC=$GRAPHC $CMDLINE"
for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./,=:+-]+$ ]]; then CMDLINE+=" $a"; else CMDLINE+=" '${a//\'/\'\\\'\'}'"; fi
done

REPS=3
STEPS=25
QUICK=0
OUT=docs/distributed-scaling.md
JSONL=bench/results/mpi-latest.jsonl
TIMEOUT=300
GRAPHC=${GRAPHC:-./graphc}
MPIRUN=${MPIRUN:-mpirun}
MPICC=${MPICC:-mpicc}
PY=${PYTHON:-python3}
BATCH=64
MODEL=models/mnist.net
DATA=data/mnist

die() { echo "mpi_scaling.sh: $*" >&2; exit 1; }
need() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "option $1 needs a value (see --help)"; fi; }
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: expected a positive integer, got '$2'"; }

while [ $# -gt 0 ]; do
    case $1 in
    --reps) need "$@"; posint "$1" "$2"; REPS=$2; shift 2 ;;
    --steps) need "$@"; posint "$1" "$2"; STEPS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --out) need "$@"; OUT=$2; shift 2 ;;
    --jsonl) need "$@"; JSONL=$2; shift 2 ;;
    --timeout) need "$@"; posint "$1" "$2"; TIMEOUT=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option '$1'" ;;
    esac
done
AR_ARGS=(--budget 0.5 --max-reps 200)
PROF_STEPS=10
if [ "$QUICK" = 1 ]; then
    REPS=1 STEPS=5 PROF_STEPS=3
    AR_ARGS=(--budget 0.05 --max-reps 20)
fi

command -v "$PY" >/dev/null || die "no $PY to write the report with"
command -v "$MPIRUN" >/dev/null || die "$MPIRUN not found (apt-get install openmpi-bin)"
command -v "$MPICC" >/dev/null || die "$MPICC not found (apt-get install libopenmpi-dev)"
command -v timeout >/dev/null || die "timeout (coreutils) is needed"
[ -x "$GRAPHC" ] || die "$GRAPHC not found or not executable: build it with ./configure --with-mpi && make graphc"
"$GRAPHC" --version 2>/dev/null | grep -q "with MPI" ||
    die "$GRAPHC is not an MPI build ('$GRAPHC --version' does not say \"with MPI\"): configure --with-mpi"
[ -f "$MODEL" ] || die "$MODEL not found"
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || die "$DATA: the MNIST files are missing"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/graphc-mpi.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$TMP"' EXIT
trap 'echo "mpi_scaling.sh: interrupted" >&2; exit 130' INT TERM
mkdir -p "$(dirname "$JSONL")" "$(dirname "$OUT")" || die "cannot create the output folders"

# one binary for the whole run, even if the tree is rebuilt meanwhile
GRAPHC_RUN=$TMP/graphc
cp "$GRAPHC" "$GRAPHC_RUN" || die "cannot copy $GRAPHC"
"$GRAPHC_RUN" --version >/dev/null 2>&1 || die "$GRAPHC does not run (being rebuilt? try again after make)"
"$MPICC" -O2 -std=c11 -D_GNU_SOURCE -I. -Wall -o "$TMP/allreduce" bench/allreduce.c 2>"$TMP/cc.err" ||
    { cat "$TMP/cc.err" >&2; die "$MPICC -O2 bench/allreduce.c failed"; }

# CI-like machines run as root; 2 cores host up to 4 ranks
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
RAW=$TMP/results.jsonl
: >"$RAW"
T0=$(date +%s)
log() { printf '[%4ds] %s\n' $(($(date +%s) - T0)) "$*" >&2; }
emit() { "$PY" bench/mpi_model.py record "$@" >>"$RAW"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null; }

# run_json LABEL -- COMMAND...: COMMAND's JSON lines, each tagged with LABEL's fields
# (KEY=VALUE... before --), appended to the results; an error record if it fails.
run_json() {
    local tags=()
    while [ "$1" != -- ]; do tags+=("$1"); shift; done
    shift
    local out=$TMP/out err=$TMP/err rc
    timeout --kill-after=20 "$TIMEOUT" "$@" >"$out" 2>"$err"
    rc=$?
    cat "$err" >>"$TMP/stderr.txt"
    "$PY" bench/mpi_model.py tag "${tags[@]}" <"$out" >>"$RAW" || die "cannot write the results"
    if [ $rc -ne 0 ] || ! grep -q '^{' "$out"; then
        local why
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out after ${TIMEOUT}s"
        else why="exit status $rc: $(grep -v '^\s*$' "$err" | tail -n 1 | cut -c1-240)"; fi
        log "  FAILED: $why"
        emit kind=error "${tags[@]}" error="$why"
        return 1
    fi
    return 0
}

# ---------------------------------------------------------------- what is measured

NPROC=$(nproc)
params=$("$GRAPHC_RUN" check "$MODEL" | awk '$1 == "params" { gsub(",", "", $2); print $2 }')
[[ $params =~ ^[0-9]+$ ]] || die "cannot read the parameter count from 'graphc check $MODEL'"
# the buckets and the order of the step's ops (which ops follow the first bucket)
"$GRAPHC_RUN" dump "$MODEL" --stage fused --ranks 2 --format json >"$TMP/fused.json" ||
    die "graphc dump $MODEL --stage fused --ranks 2 failed"
"$PY" bench/mpi_model.py buckets "$TMP/fused.json" >>"$RAW" || die "cannot read the buckets from the dump"

emit kind=meta command="$CMDLINE" date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)" \
    nproc="$NPROC" \
    hypervisor="$(lscpu 2>/dev/null | sed -n 's/^Hypervisor vendor:[[:space:]]*//p' | head -n 1)" \
    mem_gib="$(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo 2>/dev/null)" \
    kernel="$(uname -r)" \
    graphc_version="$("$GRAPHC_RUN" --version 2>/dev/null | head -n 1)" \
    mpirun_version="$("$MPIRUN" --version 2>/dev/null | head -n 1)" \
    model="$MODEL" params="$params" batch="$BATCH" reps="$REPS" steps="$STEPS" quick="$QUICK" \
    prof_steps="$PROF_STEPS" \
    env_OMP_NUM_THREADS="${OMP_NUM_THREADS-(unset)}" env_OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS-(unset)}" \
    loadavg_start="$(loadavg)" || die "cannot write the results"
log "$MODEL, $params parameters; $NPROC CPUs; $REPS repetitions of $STEPS steps x 2 epochs; load $(loadavg)"

# threads per rank: as graphc's default (the cores shared among the machine's ranks,
# at least 1), given explicitly so that the record says it
threads_for() { local t=$((NPROC / $1)); [ $t -ge 1 ] || t=1; echo $t; }

# config NAME RANKS THREADS [graphc options]: one graphc run
config() {
    local name=$1 np=$2 th=$3
    shift 3
    local args=(run "$MODEL" --data "$DATA" --epochs 2 --steps "$STEPS" --batch "$BATCH" --threads "$th"
        --test-limit 200 --log json "$@")
    local cmd=("$GRAPHC_RUN" "${args[@]}")
    [ "$np" -gt 1 ] && cmd=("$MPIRUN" --oversubscribe -np "$np" "${cmd[@]}")
    log "rep $rep: $name: $np rank(s) x $th thread(s) $*"
    run_json kind=run config="$name" ranks="$np" threads="$th" rep="$rep" loadavg="$(loadavg)" \
        command="$([ "$np" -gt 1 ] && echo "mpirun --oversubscribe -np $np ")graphc ${args[*]}" -- "${cmd[@]}"
}

# profile THREADS: graphc bench --profile (one process), its JSON line and its per-op rows
profile() {
    local th=$1 out=$TMP/prof.txt
    log "rep $rep: graphc bench --threads $th --profile"
    if timeout --kill-after=20 "$TIMEOUT" "$GRAPHC_RUN" bench "$MODEL" --batch "$BATCH" --threads "$th" \
        --steps "$PROF_STEPS" --warmup 2 --profile --json >"$out" 2>>"$TMP/stderr.txt"; then
        "$PY" bench/mpi_model.py profile rep="$rep" threads="$th" loadavg="$(loadavg)" <"$out" >>"$RAW" ||
            die "cannot read graphc bench --profile's output"
    else
        log "  FAILED: graphc bench --profile --threads $th"
        emit kind=error config="profile" threads="$th" rep="$rep" error="graphc bench failed"
    fi
}

# concurrent PROCS THREADS: PROCS copies of graphc bench (no MPI) started together, so
# that each computes as one of PROCS ranks would here: the compute a rank actually gets
concurrent() {
    local np=$1 th=$2 pids=() i
    log "rep $rep: $np x graphc bench --threads $th at the same time"
    local load
    load=$(loadavg)
    for i in $(seq 1 "$np"); do
        timeout --kill-after=20 "$TIMEOUT" "$GRAPHC_RUN" bench "$MODEL" --batch "$BATCH" --threads "$th" \
            --steps "$PROF_STEPS" --warmup 2 --json >"$TMP/conc.$i" 2>>"$TMP/stderr.txt" &
        pids+=($!)
    done
    for i in $(seq 1 "$np"); do
        if wait "${pids[$((i - 1))]}"; then
            "$PY" bench/mpi_model.py tag kind=concurrent procs="$np" proc="$i" threads="$th" rep="$rep" \
                loadavg="$load" <"$TMP/conc.$i" >>"$RAW" || die "cannot write the results"
        else
            log "  FAILED: concurrent graphc bench $i of $np"
            emit kind=error config="concurrent" procs="$np" proc="$i" rep="$rep" error="graphc bench failed"
        fi
    done
}

for rep in $(seq 1 "$REPS"); do
    profile "$(threads_for 1)"
    [ "$(threads_for 1)" -ne 1 ] && profile 1
    concurrent 2 "$(threads_for 2)"
    concurrent 4 "$(threads_for 4)"
    config r1 1 "$(threads_for 1)"
    [ "$(threads_for 1)" -ne 1 ] && config r1t1 1 1
    config r2 2 "$(threads_for 2)"
    config r2_one_bucket 2 "$(threads_for 2)" --bucket-size 1G
    config r4 4 "$(threads_for 4)"
done

# the exact bucket sizes of the step, besides the powers of two
also=$("$PY" bench/mpi_model.py bucket-sizes "$RAW") || die "no bucket sizes"
for np in 2 4; do
    log "bench/allreduce at $np ranks (sizes 4 B .. 16 MiB and $also B)"
    rep=0
    run_json kind=allreduce_run ranks="$np" loadavg="$(loadavg)" -- \
        "$MPIRUN" --oversubscribe -np "$np" "$TMP/allreduce" --also "$also" "${AR_ARGS[@]}"
done

emit kind=end seconds=$(($(date +%s) - T0)) loadavg_end="$(loadavg)"
cp "$RAW" "$JSONL" || die "cannot write $JSONL"
if [ -s "$TMP/stderr.txt" ]; then cp "$TMP/stderr.txt" "${JSONL%.jsonl}.stderr.txt" 2>/dev/null || true; fi
"$PY" bench/mpi_model.py write --jsonl "$JSONL" --out "$OUT" || die "writing $OUT failed"
log "wrote $OUT and $JSONL"
