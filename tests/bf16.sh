#!/bin/sh
# --dtype bf16 through the CLI (docs/bf16.md):
#  - a name other than fp32 or bf16 is refused, and bf16 with a variant below avx512
#    on any CPU (exit 2, a message naming what is missing);
#  - where the CPU has avx512_bf16 (--version says which), run and bench (training and
#    --infer) run with it and their headers say avx512+bf16 (+amx on AMX, and not with
#    GRAPHC_AMX=0); elsewhere --dtype bf16 is
#    refused with a message naming avx512_bf16.
set -u
. "${top_srcdir:-.}/tests/harness.sh"
G="$top_builddir/graphc"
unset GRAPHC_ISA

cat > "$t/m.net" <<'NET'
model bf
input x: f32[B, 8, 8, 1]
input y: i32[B]
h = relu(conv2d(x, filters=8, kernel=3, padding="same"))
h = relu(dense(flatten(h), units=32))
logits = dense(h, units=10)
loss = cross_entropy(logits, y)
train { data = synthetic(count=64); optimizer = sgd(lr=0.01); batch = 16; epochs = 1; minimize = loss; seed = 3 }
NET

refused() {   # what, expected message, command...
    what=$1 msg=$2
    shift 2
    "$@" > "$t/out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$msg" "$t/out" && ok "$what: exit 2, $(head -1 "$t/out")" ||
        bad "$what: status $rc: $(head -2 "$t/out")"
}
refused "run --dtype fp16" "expected fp32 or bf16, got 'fp16'" "$G" run "$t/m.net" --dtype fp16
refused "bench --dtype fp16" "expected fp32 or bf16, got 'fp16'" "$G" bench "$t/m.net" --dtype fp16
refused "run --dtype bf16 --isa avx2" "dtype bf16 .*avx512" "$G" run "$t/m.net" --dtype bf16 --isa avx2 --log quiet
refused "bench --isa portable --dtype bf16" "dtype bf16 .*avx512" "$G" bench "$t/m.net" --isa portable --dtype bf16
"$G" run "$t/m.net" --dtype fp32 --log quiet --threads 1 > "$t/out" 2>&1 && ok "--dtype fp32 runs" ||
    bad "--dtype fp32: $(head -2 "$t/out")"

if "$G" --version | grep -q -- "; --dtype bf16: avx512_bf16"; then
    label=avx512+bf16   # what the headers say: +amx where the products run on AMX's tiles
    "$G" --version | grep -q -- "avx512_bf16 and amx_bf16;" && label=avx512+bf16+amx
    "$G" run "$t/m.net" --dtype bf16 --threads 2 > "$t/out" 2>&1 && grep -q "$label kernels, 2 threads" "$t/out" &&
        ok "run --dtype bf16: the header says $label" || bad "run --dtype bf16: $(head -3 "$t/out")"
    grep -q "^Test loss: .* - test acc: " "$t/out" && ok "run --dtype bf16 evaluates" || bad "run --dtype bf16 printed no test accuracy"
    for mode in "" --infer; do
        "$G" bench "$t/m.net" --dtype bf16 --steps 2 --warmup 1 --threads 2 $mode --json > "$t/out" 2>&1 &&
            grep -q "\"isa\": \"$label\"" "$t/out" && ok "bench $mode --dtype bf16: the JSON says $label" ||
            bad "bench $mode --dtype bf16: $(head -3 "$t/out")"
    done
    if [ "$label" = avx512+bf16+amx ]; then
        GRAPHC_AMX=0 "$G" bench "$t/m.net" --dtype bf16 --steps 2 --warmup 1 --threads 2 --json > "$t/out" 2>&1 &&
            grep -q '"isa": "avx512+bf16"' "$t/out" && ok "GRAPHC_AMX=0: bench says avx512+bf16, off AMX" ||
            bad "GRAPHC_AMX=0 bench: $(head -3 "$t/out")"
        GRAPHC_AMX=0 "$G" --version | grep -q -- "; --dtype bf16: avx512_bf16;" &&
            ok "GRAPHC_AMX=0: --version names no AMX" || bad "GRAPHC_AMX=0 --version: $("$G" --version)"
    fi
else
    echo "SKIP: this CPU lacks avx512_bf16: --dtype bf16 must be refused"
    refused "run --dtype bf16 without avx512_bf16" "avx512_bf16" "$G" run "$t/m.net" --dtype bf16
    refused "bench --dtype bf16 without avx512_bf16" "avx512_bf16" "$G" bench "$t/m.net" --dtype bf16
fi
finish
