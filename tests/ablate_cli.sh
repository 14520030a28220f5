#!/bin/sh
# graphc bench --ablate through the command line: the options it refuses (exit 2, the
# reason named), a plot that cannot be written (exit 1, the path named, the tables
# printed all the same), and a plot that can (an SVG).  tests/test_ablate checks the
# tables and the numbers; this checks the command around them.  A small model, one
# step: nothing is timed.
set -u
LC_ALL=C
export LC_ALL
. "${top_srcdir:-.}/tests/harness.sh"
G="$top_builddir/graphc"
M="$top_srcdir/models/mlp.net"
built "$G"

# refused: status 2 and the reason on stderr
refused() {   # WHAT REASON ARGS...
    what=$1 reason=$2
    shift 2
    "$G" bench "$M" "$@" >"$t/out" 2>"$t/err"
    rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$reason" "$t/err" && [ ! -s "$t/out" ]; then ok "$what"
    else bad "$what (status $rc, stderr: $(cat "$t/err"))"; fi
}
refused "--plot without --ablate" "it needs --ablate" --plot "$t/w.svg"
refused "--ablate with --profile" "not with --profile" --ablate --profile
refused "--ablate with --compare-stages" "not with --compare-stages" --ablate --compare-stages
refused "--plot with two batch sizes" "give one --batch" --ablate --batch 2,4 --plot "$t/w.svg"
refused "--plot without a file" "needs a value" --ablate --plot

quick="--batch 2 --steps 1 --warmup 0"
# shellcheck disable=SC2086
"$G" bench "$M" --ablate $quick --plot "$t/no/such/dir/w.svg" >"$t/out" 2>"$t/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot write plot '$t/no/such/dir/w.svg'" "$t/err" && grep -q "^  sum of the costs" "$t/out"
then ok "a plot that cannot be written: status 1, the path named, the tables printed"
else bad "unwritable plot (status $rc, stderr: $(cat "$t/err"))"; fi

# shellcheck disable=SC2086
"$G" bench "$M" --ablate $quick --json --plot "$t/w.svg" >"$t/out" 2>"$t/err"
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$t/err" ] && head -c 5 "$t/w.svg" | grep -q "<?xml" && tail -n 1 "$t/w.svg" | grep -q "</svg>" &&
    [ "$(wc -l < "$t/out")" -eq 1 ]
then ok "--ablate --json --plot: one JSON line and an SVG"
else bad "--ablate --json --plot (status $rc, stderr: $(cat "$t/err"))"; fi

finish
