#!/bin/sh
# The models campaign: generated and mutated .net files through the command line of a
# build (meant for the ASan + UBSan one): graphc check, graphc dump of every stage in
# every format, and a short graphc run in each mode.  docs/fuzzing.md ("Models") has
# the runs made with it and what they found.
#
#   fuzz/campaign.sh BUILDDIR OUTDIR SEED COUNT MUTANTS [JOBS]
#
# BUILDDIR/fuzz/genmodels writes COUNT generated models for SEED and MUTANTS mutated
# copies of each, and of every models/*.net and tests/errors/*.net, into
# OUTDIR/models; each then runs in a scratch folder (with data/ linked, for
# mnist("data/mnist")), JOBS at a time (default 1), niced, each command under a time
# limit (a model check refuses goes through the commands that do not stop at loading
# it: the tree's dumps; and the graph's dump and a run, which must refuse it too).  OUTDIR/results has a line per model (its exit statuses and verdict);
# OUTDIR/findings.txt the models that broke the contract, and why:
#   crash     an exit status above 2 (a signal, a timeout) or a sanitizer's report;
#   usage     exit status 2 (the commands here are well formed);
#   silent    exit 1 without "error" on stderr;
#   accepted  check said ok, but the graph or its dump failed.
# The last line counts them; the exit status is 1 if there is any finding.
set -u

# One model (the script runs itself this way, JOBS at a time): its line in results.
one() {
    m=$1
    dir=$(mktemp -d "${TMPDIR:-/tmp}/graphc-campaign.XXXXXX") || exit 99
    ln -s "$src/data" "$dir/data"
    mkdir "$dir/ckpt"
    cp "$m" "$dir/m.net"
    cd "$dir" || exit 99
    verdict=ok
    codes=""
    check=-1
    set -- "check" \
        "dump --stage ast" "dump --stage ast --format json" \
        "dump --stage graph" "dump --stage graph --format dot" "dump --stage graph --format json" \
        "dump --stage train" "dump --stage train --format json" "dump --stage train --infer" \
        "dump --stage cse" "dump --stage folded" "dump --stage fused --format dot" \
        "dump --stage planned --batch 3" "dump --stage planned --format svg --batch 1" "dump --stage train --ranks 2" \
        "run --log quiet --threads 1 --steps 2 --epochs 1 --train-limit 64 --test-limit 16" \
        "run --log quiet --threads 1 --steps 1 --epochs 1 --train-limit 64 --test-limit 16 --mode interp"
    for cmd in "$@"; do
        # a model check refuses: the tree's dumps, the graph's, and a run (every other
        # command stops where these do, at loading the model)
        case $check:$cmd in
        -1:* | 0:* | *:"dump --stage ast"* | *:"dump --stage graph" | *:"run --log quiet --threads 1 --steps 2"*) ;;
        *) continue ;;
        esac
        # shellcheck disable=SC2086
        timeout 120 "$build/graphc" $cmd m.net > out.txt 2> err.txt
        rc=$?
        codes="$codes $rc"
        [ "$cmd" = check ] && check=$rc
        what=""
        # (a sanitizer's report exits with its own status, above 2; its warning that
        # an allocation failed, which graphc then reports, is no finding)
        if [ $rc -gt 2 ] || grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'runtime error' err.txt; then
            what=crash
        elif [ $rc -eq 2 ]; then what=usage
        elif [ $rc -eq 1 ] && ! grep -q 'error' err.txt; then what=silent
        elif [ $rc -ne 0 ] && [ "$check" -eq 0 ] && [ "${cmd#dump --stage graph}" != "$cmd" ]; then what=accepted
        fi
        if [ -n "$what" ] && [ "$verdict" = ok ]; then
            verdict=$what
            { echo "== $m: $what: graphc $cmd: exit $rc"; head -c 3000 err.txt; echo; } >> "$out/findings.txt"
        fi
    done
    echo "$(basename "$m" .net) check=$check$codes $verdict" >> "$out/results"
    cd / && rm -rf "$dir"
}

if [ "${1:-}" = --one ]; then
    one "$2"
    exit 0
fi

build=${1:?BUILDDIR} out=${2:?OUTDIR} seed=${3:?SEED} count=${4:?COUNT} mutants=${5:?MUTANTS} jobs=${6:-1}
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
start=$(date +%s)
"$build/fuzz/genmodels" -s "$seed" -n "$count" -m "$mutants" "$out/models" "$src"/models/*.net "$src"/tests/errors/*.net ||
    exit 99

# Sanitizer settings: a report ends the process with a status of its own; a huge
# allocation returns NULL (graphc must say so) rather than aborting, or exhausting a
# shared machine's memory.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:max_allocation_size_mb=2048:soft_rss_limit_mb=4096:exitcode=86}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=87}
export LSAN_OPTIONS=${LSAN_OPTIONS:-exitcode=88}
export src build out

: > "$out/results"
: > "$out/findings.txt"
ls "$out"/models/*.net | nice -n 10 xargs -P "$jobs" -n 1 sh "$0" --one
end=$(date +%s)
total=$(wc -l < "$out/results")
accepted=$(grep -c ' check=0 ' "$out/results")
for v in ok crash usage silent accepted; do
    printf '%s %s\n' "$v" "$(grep -c " $v\$" "$out/results")"
done > "$out/summary"
bad=$(grep -v -c ' ok$' "$out/results")
echo "$total models (seed $seed: $count generated, $mutants mutants each), $accepted accepted by check," \
     "$bad findings, $((end - start)) s; see $out/findings.txt"
[ "$bad" -eq 0 ]
