#!/bin/sh
# Checkpoints and resume, end to end through the CLI:
#  - a run stopped (Ctrl-C, or kill -9 at random moments, many times) and resumed ends
#    with the same weights, bit for bit, as a run that was never stopped;
#  - whenever kill -9 strikes, even mid-save, the checkpoint on disk loads;
#  - damaged or mismatched checkpoints are refused with a message, exit 1;
#  - hostile checkpoints with valid CRCs (fuzz/craft_checkpoints.py, every class of
#    damage), streams that are no checkpoint, a resume without the optimizer's state,
#    outputs through symlinks or onto FIFOs and devices, outputs checked before training.
set -u
. "${top_srcdir:-.}/tests/harness.sh"
G="$top_builddir/graphc"

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
    # The first run is killed only after its first save: on a loaded machine (or under
    # the sanitizers) start-up alone can outlast every delay below, and then no run
    # would ever leave a checkpoint to resume from.
    w=0
    while [ -z "$from" ] && [ ! -f "$t/part.ckpt" ] && [ $w -lt 1200 ] && kill -0 $pid 2>/dev/null; do
        sleep 0.1; w=$((w + 1))
    done
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

# ---- hostile checkpoints and outputs (docs/fuzzing.md, "Checkpoints"), on a tiny model
cat > "$t/tiny.net" <<'NET'
input x: f32[B, 3]
input y: i32[B]
loss = cross_entropy(dense(relu(dense(x, units=4)), units=2), y)
train { data = synthetic(count=16); optimizer = adam(); batch = 4; epochs = 2; minimize = loss }
NET
"$G" run "$t/tiny.net" --log quiet --save "$t/tiny.ckpt" >/dev/null 2>"$t/err" || { bad "tiny run"; cat "$t/err"; }
# refused: exit 1, a message with $2, no sanitizer report; the command after "--"
refused() {
    what=$1 msg=$2
    shift 3
    timeout 120 "$@" >"$t/out" 2>"$t/err"; rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$msg" "$t/err" && ! grep -q "Sanitizer\|runtime error:" "$t/err"; then ok "$what"
    else bad "$what: status $rc"; cat "$t/err"; fi
}
accepted() {
    what=$1
    shift 2
    timeout 120 "$@" >"$t/out" 2>"$t/err"; rc=$?
    if [ $rc -eq 0 ] && ! grep -q "Sanitizer\|runtime error:" "$t/err"; then ok "$what"
    else bad "$what: status $rc"; cat "$t/err"; fi
}
if command -v python3 >/dev/null 2>&1; then
    # craft BASE OUT CODE: BASE parsed as c (fuzz/craft_checkpoints.py), changed by CODE, CRCs recomputed
    craft() {
        python3 -B - "$1" "$2" "$top_srcdir/fuzz" "$3" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import craft_checkpoints as cc
c = cc.parse(open(sys.argv[1], "rb").read())
exec(sys.argv[4])
open(sys.argv[2], "wb").write(c.bytes())
PY
    }
    # the issue's file: valid CRCs, step 2^64-1 (was a negative index and a write out of bounds)
    craft "$t/tiny.ckpt" "$t/step.ckpt" 'c.step = cc.U64'
    refused "resume from step 2^64-1 is refused" "step 18446744073709551615 is out of range" -- \
        "$G" run "$t/tiny.net" --log quiet --resume "$t/step.ckpt"
    craft "$t/tiny.ckpt" "$t/past.ckpt" 'c.step = 9'
    refused "resume from a step past the run is refused" "at step 9, past the 8 steps of this run" -- \
        "$G" run "$t/tiny.net" --log quiet --resume "$t/past.ckpt"
    # without the optimizer's state: refused, unless --reset-optimizer
    craft "$t/tiny.ckpt" "$t/nostate.ckpt" 'c.recs = [r for r in c.recs if r.role == cc.PARAM]; c.step = 4'
    refused "resume without Adam's moments is refused, naming them" \
        "no optimizer state for this run: 8 tensors missing ('dense/kernel:m', 'dense/kernel:v', 'dense/bias:m', ...)" -- \
        "$G" run "$t/tiny.net" --log quiet --resume "$t/nostate.ckpt"
    accepted "resume without them with --reset-optimizer" -- \
        "$G" run "$t/tiny.net" --log quiet --resume "$t/nostate.ckpt" --reset-optimizer
    accepted "eval needs no optimizer state" -- "$G" eval "$t/tiny.net" --weights "$t/nostate.ckpt"
    # every class of damage behind the CRCs, twice, through eval, resume and --reset-optimizer
    if sh "$top_srcdir/fuzz/ckpt_campaign.sh" "$G" 72 >"$t/campaign" 2>&1; then ok "$(tail -1 "$t/campaign")"
    else bad "crafted checkpoints"; grep -v "^PASS" "$t/campaign" | head -40; fi
else
    echo "SKIP: python3 is not installed: no crafted checkpoints"
fi
"$G" run "$t/tiny.net" --reset-optimizer >/dev/null 2>"$t/err"; rc=$?
[ $rc -eq 2 ] && grep -q "reset-optimizer goes with --resume" "$t/err" && ok "--reset-optimizer without --resume is a usage error" \
    || { bad "--reset-optimizer alone: status $rc"; cat "$t/err"; }
refused "eval --weights /dev/zero ends at once" "/dev/zero: not a graphc checkpoint (bad magic)" -- \
    "$G" eval "$t/tiny.net" --weights /dev/zero
mkfifo "$t/fifo"
refused "resume from a FIFO is refused at once (the file is read twice)" "not a regular file" -- \
    "$G" run "$t/tiny.net" --log quiet --resume "$t/fifo"
cat "$t/tiny.ckpt" > "$t/fifo" &
accepted "eval reads a checkpoint through a FIFO" -- "$G" eval "$t/tiny.net" --weights "$t/fifo"
wait
(cat /dev/zero > "$t/fifo") 2>/dev/null &
refused "eval refuses endless zeros through a FIFO" "bad magic" -- "$G" eval "$t/tiny.net" --weights "$t/fifo"
wait

# outputs: through symlinks, never over a FIFO or a device, checked before the first step
cp "$t/tiny.ckpt" "$t/target.ckpt"
ln -s target.ckpt "$t/link.ckpt"
accepted "--save through a symlink" -- "$G" run "$t/tiny.net" --log quiet --seed 3 --save "$t/link.ckpt"
[ -L "$t/link.ckpt" ] && ! cmp -s "$t/tiny.ckpt" "$t/target.ckpt" && "$G" eval "$t/tiny.net" --weights "$t/target.ckpt" >/dev/null \
    && ok "the symlink stays, its target holds the new checkpoint" || bad "--save through a symlink"
refused "--save onto a FIFO is refused before training" "cannot write checkpoint '$t/fifo': it is a FIFO" -- \
    "$G" run "$t/tiny.net" --save "$t/fifo"
[ -p "$t/fifo" ] && ! grep -q "Training" "$t/out" || bad "--save onto a FIFO: the FIFO was replaced or training ran"
refused "--save onto /dev/null is refused" "it is a character device, not a regular file" -- \
    "$G" run "$t/tiny.net" --save /dev/null
refused "--save into a missing folder is refused before training" "folder '$t/none': No such file or directory" -- \
    "$G" run "$t/tiny.net" --save "$t/none/w.ckpt"
grep -q "Training" "$t/out" && bad "--save into a missing folder: training ran"
refused "--plot into a missing folder is refused before training" "cannot write plot '$t/none/p.svg'" -- \
    "$G" run "$t/tiny.net" --plot "$t/none/p.svg"
grep -q "Training" "$t/out" && bad "--plot into a missing folder: training ran"
ln -s target.txt "$t/dump-link"
accepted "dump -o through a symlink" -- "$G" dump "$t/tiny.net" -o "$t/dump-link"
[ -L "$t/dump-link" ] && grep -q "^var dense/kernel" "$t/target.txt" && ok "dump -o wrote the symlink's target" \
    || bad "dump -o through a symlink"
refused "dump -o onto a FIFO is refused" "cannot write dump '$t/fifo': it is a FIFO" -- \
    "$G" dump "$t/tiny.net" -o "$t/fifo"
if "$G" export --help >/dev/null 2>&1; then   # a build with ONNX: its files go the same way
    printf 'input x: f32[B, 3]\noutput p = softmax(dense(relu(dense(x, units=4)), units=2))\n' > "$t/infer.net"
    refused "export -o onto a FIFO is refused" "cannot write file '$t/fifo': it is a FIFO" -- \
        "$G" export "$t/infer.net" --weights "$t/tiny.ckpt" -o "$t/fifo"
fi
# (part.ckpt.tmp.PID: left by the kill -9 above, as docs/checkpoint.md says)
ls "$t" | grep "\.tmp\." | grep -qv "^part\.ckpt\.tmp\." && { bad "a temporary was left behind"; ls "$t"; }

finish
