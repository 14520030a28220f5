#!/bin/sh
# Checkpoints and resume, end to end through the CLI:
#  - a run stopped (Ctrl-C, or kill -9 at random moments, many times) and resumed ends
#    with the same weights, bit for bit, as a run that was never stopped;
#  - whenever kill -9 strikes, even mid-save, the checkpoint on disk loads;
#  - damaged or mismatched checkpoints are refused with a message, exit 1.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
G="$top_builddir/graphc"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT

# Adam (optimizer state), dropout (per-step masks), shuffling: everything resume must carry.
cat > "$t/m.net" <<'NET'
input x: f32[B, 28, 28, 1]
input y: i32[B]
h = relu(dense(flatten(x), units=1024))
h = dropout(h, rate=0.3)
logits = dense(h, units=10)
output probs = softmax(logits)
loss = cross_entropy(logits, y)
train { data = synthetic(count=512); optimizer = adam(lr=0.001); batch = 32; epochs = 40; minimize = loss; seed = 7 }
NET

"$G" run "$t/m.net" --threads 2 --log quiet --save "$t/full.ckpt" >/dev/null 2>&1 && ok "uninterrupted run" || bad "uninterrupted run"

# kill -9 at random moments of a run that saves after every step
n=0 unloadable=0
while [ $n -lt 12 ]; do
    if [ -f "$t/part.ckpt" ]; then from="--resume $t/part.ckpt"; else from=""; fi
    "$G" run "$t/m.net" --threads 2 --log quiet --save "$t/part.ckpt" --save-every 1 $from >/dev/null 2>&1 &
    pid=$!
    sleep "0.$(( (n * 37 + 11) % 9 + 1 ))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    n=$((n + 1))
    if [ -f "$t/part.ckpt" ] && ! "$G" eval "$t/m.net" --weights "$t/part.ckpt" >/dev/null 2>"$t/err"; then
        unloadable=$((unloadable + 1))
        echo "  kill $n left an unloadable checkpoint:"; cat "$t/err"
    fi
done
step=$(od -An -t u8 -j 16 -N 8 "$t/part.ckpt" | tr -d ' ')
[ -f "$t/part.ckpt" ] && [ $unloadable -eq 0 ] && ok "the checkpoint loads after each of $n kill -9 (at step $step after the last)" \
    || bad "checkpoint after kill -9"

# Ctrl-C: exit 130, a checkpoint, a message
"$G" run "$t/m.net" --threads 2 --save "$t/part.ckpt" --resume "$t/part.ckpt" >"$t/out" 2>&1 &
pid=$!
sleep 0.5
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && grep -q "Interrupted at step" "$t/out"; then ok "Ctrl-C stops with status 130 and saves"
elif [ $rc -eq 0 ]; then ok "Ctrl-C arrived after the run had finished"
else bad "Ctrl-C: status $rc"; cat "$t/out"; fi

# finish, then compare with the uninterrupted run
"$G" run "$t/m.net" --threads 2 --log quiet --save "$t/part.ckpt" --resume "$t/part.ckpt" >/dev/null 2>"$t/err" \
    || { bad "final resume"; cat "$t/err"; }
cmp -s "$t/full.ckpt" "$t/part.ckpt" && ok "interrupted and resumed = uninterrupted, bit for bit" \
    || bad "resumed weights differ from the uninterrupted run"

# refusals
cp "$t/full.ckpt" "$t/bad.ckpt"
printf 'X' | dd of="$t/bad.ckpt" bs=1 seek=200 conv=notrunc 2>/dev/null
"$G" eval "$t/m.net" --weights "$t/bad.ckpt" >/dev/null 2>"$t/err"; rc=$?
[ $rc -eq 1 ] && grep -q "checksum mismatch" "$t/err" && ok "a damaged checkpoint is refused" || { bad "damaged checkpoint: $rc"; cat "$t/err"; }
head -c 1000 "$t/full.ckpt" > "$t/short.ckpt"
"$G" run "$t/m.net" --log quiet --resume "$t/short.ckpt" >/dev/null 2>"$t/err"; rc=$?
[ $rc -eq 1 ] && grep -q "truncated" "$t/err" && ok "a truncated checkpoint is refused" || { bad "truncated checkpoint: $rc"; cat "$t/err"; }
sed 's/units=1024/units=256/' "$t/m.net" > "$t/other.net"
"$G" eval "$t/other.net" --weights "$t/full.ckpt" >/dev/null 2>"$t/err"; rc=$?
[ $rc -eq 1 ] && grep -q "tensor 'dense/kernel' has shape \[784, 1024\], the model needs \[784, 256\]" "$t/err" \
    && ok "a checkpoint of another model is refused, naming the tensor" || { bad "mismatched model: $rc"; cat "$t/err"; }

# predict with the trained weights: a 28x28 PGM gets its top classes; a wrong size is refused
{ printf 'P5\n28 28\n255\n'; head -c 784 /dev/zero | tr '\0' '\200'; } > "$t/grey.pgm"
"$G" predict "$t/m.net" --weights "$t/full.ckpt" --top 3 "$t/grey.pgm" >"$t/out" 2>"$t/err"; rc=$?
[ $rc -eq 0 ] && grep -Eq "grey.pgm:  [0-9] \([01]\.[0-9]{4}\)  [0-9] \([01]\.[0-9]{4}\)  [0-9] \([01]\.[0-9]{4}\)$" "$t/out" \
    && ok "predict prints the top 3 classes" || { bad "predict: $rc"; cat "$t/out" "$t/err"; }
{ printf 'P5\n27 28\n255\n'; head -c 756 /dev/zero; } > "$t/small.pgm"
"$G" predict "$t/m.net" --weights "$t/full.ckpt" "$t/small.pgm" >/dev/null 2>"$t/err"; rc=$?
[ $rc -eq 1 ] && grep -q "small.pgm: the image is 27x28; the model's input is 28x28" "$t/err" \
    && ok "predict refuses an image of the wrong size" || { bad "predict wrong size: $rc"; cat "$t/err"; }

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
