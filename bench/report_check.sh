#!/bin/sh
# bench/report.py's choice of the file a run is kept in (bench/results/cpu-KIND.jsonl):
# compare.sh keeps one run per kind and drops the older, so a run held to AVX2 with
# --isa on an AVX-512 CPU must get a kind of its own, never an AVX2 machine's; and
# compare.sh refuses an --isa it cannot hold the peers to, naming the option.
set -u
top_srcdir=${top_srcdir:-.}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed"; exit 77; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT

# kind NAME EXPECTED META_JSON PEAK_JSON: the kind file of a run with these two lines
kind() {
    printf '%s\n%s\n' "$3" "$4" >"$t/run.jsonl"
    got=$(python3 "$top_srcdir/bench/report.py" kind-file --jsonl "$t/run.jsonl" 2>&1)
    if [ "$got" = "$2" ]; then ok "$1: $got"; else bad "$1: expected $2, got $got"; fi
}
avx512='{"kind":"peak","isa":"avx512f","fma":[{"isa":"avx512f","gflops_1t":230},{"isa":"avx2+fma","gflops_1t":118}]}'
avx2='{"kind":"peak","isa":"avx2+fma","fma":[{"isa":"avx2+fma","gflops_1t":118}]}'
kind "AVX2 machine" cpu-avx2.jsonl '{"kind":"meta","cpu":"AMD EPYC","label":""}' "$avx2"
kind "held to AVX2 on an Intel AVX-512 CPU" cpu-forced-avx2.jsonl \
    '{"kind":"meta","cpu":"Intel(R) Xeon(R) Processor","label":"","isa_forced":"avx2"}' "$avx2"
kind "held to AVX2, issue 14's models" cpu-forced-avx2-issue14.jsonl \
    '{"kind":"meta","cpu":"AMD EPYC","label":"issue14","isa_forced":"avx2"}' "$avx2"
kind "Intel AVX-512, not held" cpu-avx512-intel.jsonl \
    '{"kind":"meta","cpu":"Intel(R) Xeon(R) Processor","label":"","isa_forced":""}' "$avx512"

# an --isa compare.sh cannot hold the peers to: refused before anything runs
if bash "$top_srcdir/bench/compare.sh" --isa avx512 >"$t/out" 2>&1; then
    bad "compare.sh --isa avx512: accepted"
elif grep -q -- '--isa' "$t/out"; then ok "compare.sh --isa avx512: refused ($(tail -n 1 "$t/out"))"
else bad "compare.sh --isa avx512: refused without naming --isa: $(tail -n 1 "$t/out")"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
