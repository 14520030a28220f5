#!/bin/sh
# The kernel suite (tests/test_kernels) once more under each variant below this CPU's
# best, GRAPHC_ISA capping the variants it tests: what a CPU whose best that is would
# run, including the tests of kernels without variants on top of it (docs/kernels.md).
# Each run must say which variants it tested and which it skipped, and pass.
set -u
. "${top_srcdir:-.}/tests/harness.sh"
T="$top_builddir/tests/test_kernels"
out="$t/out"
unset GRAPHC_ISA
ran=0

# The variants this CPU runs, best first: those graphc lets GRAPHC_ISA name.  The best
# is tests/test_kernels' own run.
have=""
for isa in avx512 avx2 portable; do
    GRAPHC_ISA=$isa "$top_builddir/graphc" --version > /dev/null 2>&1 && have="$have $isa"
done
have=${have# }
best=${have%% *}
echo "variants this CPU runs: $have"

for isa in avx512 avx2 portable; do
    case " $have " in
    *" $isa "*) ;;
    *) echo "SKIP: $isa: this CPU cannot run it"; continue ;;
    esac
    [ "$isa" = "$best" ] && continue   # the unrestricted run above
    # Under the sanitizers, portable only where it is the next below the best: the
    # suite's own run already tests every variant's kernels there, and a CPU without
    # AVX2 is the normal build's to stand in for (CI's sanitizer phase, 2 min a run).
    case "${SAN_CFLAGS:-}" in
    *sanitize*) if [ "$isa" = portable ] && [ "$best" = avx512 ]; then
            echo "SKIP: portable under the sanitizers (the normal build runs it)"; continue
        fi ;;
    esac
    ran=$((ran + 1))
    GRAPHC_ISA=$isa "$T" > "$out" 2>&1
    rc=$?
    head -1 "$out"
    # the variants at and below $isa tested, those above it skipped and said so
    want=$(echo "$have" | sed "s/^.*\($isa\)/\1/")
    if [ $rc -eq 0 ] && grep -q "^test_kernels: kernels' variants tested: $want; skipped:.* $best (above GRAPHC_ISA)" "$out"; then
        ok "GRAPHC_ISA=$isa: the kernel suite passes on $want"
    else
        bad "GRAPHC_ISA=$isa: exit $rc"
        grep -v "^100%\|^Running" "$out" | head -80
    fi
done

# A name that is no variant: the suite says so and is not run.
GRAPHC_ISA=avx1024 "$T" > "$out" 2>&1
rc=$?
[ $rc -eq 77 ] && grep -q "GRAPHC_ISA=avx1024: no such variant" "$out" && ok "GRAPHC_ISA=avx1024 refused" ||
    bad "GRAPHC_ISA=avx1024: exit $rc, $(head -1 "$out")"

finish "$ran lower variants run"
