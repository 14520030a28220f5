#!/bin/sh
# The kernels' variants through the CLI (docs/kernels.md):
#  - GRAPHC_ISA and --isa force each variant this CPU runs, and the run header, the
#    benchmark's JSON and --version name the one that ran;
#  - an unknown name, or one this CPU cannot run, is refused (exit 2, a message);
#  - the avx2 and avx512 variants train to the same weights, bit for bit (every output
#    is the same chain of FMAs in both), and the portable one to nearly the same loss.
set -u
. "${top_srcdir:-.}/tests/harness.sh"
G="$top_builddir/graphc"
unset GRAPHC_ISA

# Few channels (the first convolution), many (the second: C 8, 16 filters, so its input
# gradient too), max pooling, Adam's vector loop.
cat > "$t/m.net" <<'NET'
model isa
input x: f32[B, 12, 12, 1]
input y: i32[B]
h = relu(conv2d(x, filters=8, kernel=3, padding="same"))
h = relu(conv2d(h, filters=16, kernel=3, padding="same"))
h = maxpool(h, size=2, stride=2)
logits = dense(flatten(h), units=10)
loss = cross_entropy(logits, y)
train { data = synthetic(count=96); optimizer = adam(lr=0.001); batch = 16; epochs = 2; minimize = loss; seed = 3 }
NET

# The variants this CPU runs: those GRAPHC_ISA is allowed to name.
have=""
for isa in avx512 avx2 portable; do
    if GRAPHC_ISA=$isa "$G" --version > "$t/v" 2>&1; then
        have="$have $isa"
        grep -q "; $isa kernels)" "$t/v" && ok "GRAPHC_ISA=$isa: --version names it" || bad "GRAPHC_ISA=$isa --version: $(cat "$t/v")"
    else
        echo "SKIP: $isa: this CPU cannot run it ($(head -1 "$t/v"))"
        grep -q "needs instructions this CPU does not have" "$t/v" && [ "$isa" != portable ] &&
            ok "GRAPHC_ISA=$isa refused on a CPU without it" || bad "GRAPHC_ISA=$isa: $(cat "$t/v")"
    fi
done
echo "variants this CPU runs:$have"

for isa in $have; do
    if GRAPHC_ISA=$isa "$G" run "$t/m.net" --threads 2 --log bar --save "$t/$isa.ckpt" > "$t/out" 2>&1 &&
        grep -q "Training isa: .*, $isa kernels, 2 threads" "$t/out"; then
        ok "GRAPHC_ISA=$isa: the run header says $isa"
    else
        bad "GRAPHC_ISA=$isa run: $(head -3 "$t/out")"
    fi
    "$G" run "$t/m.net" --threads 1 --isa $isa --log bar --epochs 1 --steps 1 > "$t/out" 2>&1 &&
        grep -q ", $isa kernels, 1 thread$" "$t/out" && ok "--isa $isa: the run header says $isa" ||
        bad "--isa $isa run: $(head -3 "$t/out")"
    "$G" bench "$t/m.net" --isa $isa --batch 4 --steps 1 --warmup 0 --json > "$t/out" 2>&1 &&
        grep -q "\"isa\": \"$isa\"" "$t/out" && ok "bench --isa $isa: the JSON says $isa" ||
        bad "bench --isa $isa: $(head -3 "$t/out")"
done

case "$have" in
*avx512*)
    cmp -s "$t/avx512.ckpt" "$t/avx2.ckpt" && ok "avx512 and avx2 train to the same bits" ||
        bad "avx512 and avx2 trained to different weights"
    ;;
*) echo "SKIP: avx512 against avx2 (this CPU has no avx512)" ;;
esac

# The option beats the environment, both are checked.
GRAPHC_ISA=portable "$G" run "$t/m.net" --isa avx2 --epochs 1 --steps 1 --log bar > "$t/out" 2>&1
case "$have" in
*avx2*) grep -q ", avx2 kernels," "$t/out" && ok "--isa over GRAPHC_ISA" || bad "--isa over GRAPHC_ISA: $(head -2 "$t/out")" ;;
esac

for bad_name in avx1024 AVX2 ""; do
    GRAPHC_ISA=$bad_name "$G" run "$t/m.net" > "$t/out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q "GRAPHC_ISA: expected avx512, avx2 or portable, got '$bad_name'" "$t/out" &&
        ok "GRAPHC_ISA='$bad_name' refused" || bad "GRAPHC_ISA='$bad_name': exit $rc, $(head -2 "$t/out")"
    "$G" bench "$t/m.net" --isa "$bad_name" > "$t/out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q "graphc bench: --isa: expected avx512, avx2 or portable, got '$bad_name'" "$t/out" &&
        ok "bench --isa '$bad_name' refused" || bad "bench --isa '$bad_name': exit $rc, $(head -2 "$t/out")"
done
case "$have" in
*avx512*) echo "SKIP: refusing a variant this CPU lacks (it runs them all; test_kernels checks the rule)" ;;
*)
    "$G" run "$t/m.net" --isa avx512 > "$t/out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q "graphc run: --isa: 'avx512' needs instructions this CPU does not have" "$t/out" &&
        ok "--isa avx512 refused on a CPU without it" || bad "--isa avx512: exit $rc, $(head -2 "$t/out")"
    ;;
esac

finish
