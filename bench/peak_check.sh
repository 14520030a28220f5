#!/bin/sh
# bench/peak's output, not its numbers (a timed assertion is noise on a shared machine):
# it runs, prints one line of valid JSON whose figures are positive and whose fields say
# what was asked (threads, sizes, repeats, instruction sets, bandwidth arrays), prints its
# summary with --text, and refuses bad arguments with exit status 2 and a message that
# names them.
set -u
top_builddir=${top_builddir:-.}
P="$top_builddir/bench/peak"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT

have_python=
command -v python3 >/dev/null 2>&1 && python3 -c 'import json' >/dev/null 2>&1 && have_python=1
[ -n "$have_python" ] || echo "SKIP: python3 is not installed: the JSON is checked for its braces only"

# json NAME EXPECT ARGS...: run bench/peak ARGS, check its one line of JSON; EXPECT is a
# Python expression over o (the object) that must hold as well
json() {
    name=$1 expect=$2
    shift 2
    if ! "$P" "$@" >"$t/out" 2>"$t/err"; then
        bad "$name: exit status $? ($(tail -n 1 "$t/err"))"
        return
    fi
    if [ "$(wc -l <"$t/out")" -ne 1 ]; then
        bad "$name: expected one line, got $(wc -l <"$t/out")"
        return
    fi
    if [ -z "$have_python" ]; then
        case $(cat "$t/out") in "{"*"}") ok "$name (braces only)" ;; *) bad "$name: not a JSON object" ;; esac
        return
    fi
    if python3 - "$t/out" "$expect" >"$t/why" 2>&1 <<'EOF'; then ok "$name"; else bad "$name: $(tail -n 1 "$t/why")"; fi
import json, sys
o = json.load(open(sys.argv[1]))
def stat(name):
    v, r = o[name], o[name + "_range"]
    assert isinstance(v, (int, float)) and v > 0, f"{name} = {v!r}, expected a positive number"
    assert len(r) == 2 and 0 < r[0] <= v <= r[1], f"{name}_range = {r!r} does not hold the median {v}"
assert o["program"] == "bench/peak" and o["statistic"] == "median", "not bench/peak's medians"
assert isinstance(o["threads"], int) and o["threads"] >= 1, f"threads = {o['threads']!r}"
assert o["isa"] in ("avx512f", "avx2+fma", "sse", "none"), f"isa = {o['isa']!r}"
if o["isa"] != "none":
    assert o["vector_bits"] in (128, 256, 512) and o["accumulators"] >= 8, "vector_bits or accumulators"
    stat("fma_gflops_1t")
    stat("fma_gflops_all")
    # one entry per loop measured, widest first; the headline figures are the first's
    fma = o["fma"]
    assert fma and fma[0]["isa"] == o["isa"] and fma[0]["gflops_1t"] == o["fma_gflops_1t"] \
        and fma[0]["gflops_all"] == o["fma_gflops_all"], "fma[0] is not the headline loop"
    assert [f["vector_bits"] for f in fma] == sorted((f["vector_bits"] for f in fma), reverse=True), "fma not widest first"
    assert len({f["isa"] for f in fma}) == len(fma), "a loop measured twice"
    for f in fma:
        assert f["isa"] in ("avx512f", "avx2+fma", "sse") and f["iterations"] > 0, f"fma entry {f!r}"
        for k in ("gflops_1t", "gflops_all"):
            assert f[k] > 0 and f[k + "_range"][0] <= f[k] <= f[k + "_range"][1], f"fma {f['isa']} {k}"
else:
    assert o["fma_gflops_1t"] is None and o["fma_gflops_all"] is None and o["fma"] == [], "no vector path, yet FMA figures"
for k in ("copy", "triad"):
    stat(k + "_gbs_1t")
    stat(k + "_gbs_all")
assert o["bandwidth_gbs"] == o["triad_gbs_all"], "bandwidth_gbs is not the all-threads triad"
assert o["stream_element_bytes"] == 4 and o["stream_array_bytes"] > 0 and o["llc_bytes"] >= 0, "bandwidth arrays"
stat("sgemm_gflops_1t")
stat("sgemm_gflops_all")
for g in o["sgemm"]:
    for k in ("gflops_1t", "gflops_all"):
        assert g[k] > 0 and g[k + "_range"][0] <= g[k] <= g[k + "_range"][1], f"sgemm n={g['n']} {k}"
assert isinstance(o["openblas_core"], str) and o["openblas_core"], "no OpenBLAS core name"
assert o["openblas_config"].startswith("OpenBLAS"), f"openblas_config = {o['openblas_config']!r}"
assert o["optimized"] in (True, False) and o["seconds"] > 0, "optimized or seconds"
assert eval(sys.argv[2]), f"expected {sys.argv[2]}"
EOF
}

# small bandwidth arrays (--stream-mb) keep the checks quick; one run takes the default
json "JSON, --quick" 'o["quick"] and o["repeats"] == 3 and [g["n"] for g in o["sgemm"]] == [64, 96] and o["sgemm_n"] == 96' \
    --quick --sizes 64,96 --stream-mb 4
json "JSON, --threads 3 --repeats 2 --stream-mb 6" \
    'o["threads"] == 3 and o["repeats"] == 2 and not o["quick"] and o["stream_array_bytes"] == 6 << 20' \
    --threads 3 --repeats 2 --seconds 0.01 --sizes 64 --stream-mb 6
json "JSON, default bandwidth arrays: 4 times the last-level cache, at least 64 MiB" \
    'o["stream_array_bytes"] >= max(4 * o["llc_bytes"], 64 << 20)' --quick --sizes 64
case $(uname -m) in
x86_64 | amd64)
    json "JSON, --isa sse: that loop only" 'o["isa"] == "sse" and o["vector_bits"] == 128 and len(o["fma"]) == 1' \
        --quick --isa sse --sizes 64 --stream-mb 4
    # auto measures every loop the CPU has: here the ones its flags list
    want=$(awk '/^flags/ { f = " " $0 " "; s = ""; if (f ~ / avx512f /) s = s "avx512f,";
        if (f ~ / avx2 / && f ~ / fma /) s = s "avx2+fma,"; if (f ~ / sse2 /) s = s "sse,"; print s; exit }' /proc/cpuinfo)
    json "JSON, auto measures every loop this CPU has (${want%,})" \
        "o['isa'] != 'none' and ','.join(f['isa'] for f in o['fma']) + ',' == '$want'" --quick --sizes 64 --stream-mb 4 ;;
esac

if "$P" --quick --sizes 64 --stream-mb 4 --text >"$t/out" 2>"$t/err" && grep -q '^FMA peak' "$t/out" &&
    grep -q '^bandwidth (triad, 3 arrays of 4 MiB, last-level cache [0-9]* MiB): [0-9.]* GB/s on 1 thread' "$t/out" &&
    grep -q '^sgemm n=64: [0-9.]* GFLOP/s on 1 thread' "$t/out" && grep -q '^medians of 3 measurements' "$t/out"; then
    ok "--text"
else
    bad "--text: $(head -n 3 "$t/out" "$t/err" | tr '\n' ' ')"
fi

# refused ARGS... EXPECT: exit status 2, nothing on stdout, stderr says EXPECT
refused() {
    expect=$1
    shift
    "$P" "$@" >"$t/out" 2>"$t/err"
    rc=$?
    if [ $rc -eq 2 ] && [ ! -s "$t/out" ] && grep -q -F -- "$expect" "$t/err"; then
        ok "refuses $*"
    else
        bad "$*: exit status $rc (expected 2), stderr '$(head -n 1 "$t/err")', expected it to say '$expect'"
    fi
}
refused "peak: unknown option '--bogus'" --bogus
refused "peak: --repeats: expected an integer from 1 to 101, got '0'" --repeats 0
refused "peak: --repeats: expected an integer from 1 to 101, got ''" --repeats
refused "peak: --threads: expected an integer from 1 to 1024, got '-1'" --threads -1
refused "peak: --seconds: expected seconds from 0.001 to 60, got 'x'" --seconds x
refused "peak: --sizes: expected an integer from 1 to 16384, got 'abc'" --sizes 64,abc
refused "peak: --sizes: expected a list like 2048,4096, got '64,'" --sizes 64,
refused "peak: --isa: expected auto, avx512f, avx2+fma or sse, got 'neon'" --isa neon
refused "peak: --stream-mb: expected an integer from 1 to 65536, got '0'" --stream-mb 0

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
