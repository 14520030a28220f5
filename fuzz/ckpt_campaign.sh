#!/bin/sh
# The checkpoint campaign (docs/fuzzing.md, "Checkpoints"): COUNT checkpoints crafted by
# fuzz/craft_checkpoints.py from a good one, each loaded by
#   graphc eval --weights F, graphc run --resume F, graphc run --resume F --reset-optimizer,
# plus streams that are no checkpoint (/dev/zero, /dev/urandom, FIFOs, a folder).
# Every run must end as its manifest says (0, or 1 with a message naming the file),
# within TIMEOUT seconds, with no sanitizer report.  Meant for the ASan+UBSan build:
#   fuzz/ckpt_campaign.sh _san/graphc 1200
# usage: ckpt_campaign.sh GRAPHC [COUNT] [SEED]; exits 1 if any run went wrong.
set -u
G=${1:?usage: ckpt_campaign.sh GRAPHC [COUNT] [SEED]}
count=${2:-1200} seed=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
TIMEOUT=${TIMEOUT:-60}
# a sanitizer's report must not pass for graphc's "bad input" exit status 1
ASAN_OPTIONS=${ASAN_OPTIONS:-exitcode=86:detect_leaks=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-exitcode=87:print_stacktrace=1}
export ASAN_OPTIONS UBSAN_OPTIONS
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
runs=0 bad=0 refused=0 accepted=0

# Adam (two state tensors per parameter), a convolution (rank-4 kernel), dense layers.
cat > "$t/m.net" <<'NET'
input x: f32[B, 6, 6, 1]
input y: i32[B]
h = relu(conv2d(x, filters=3, kernel=3))
logits = dense(relu(dense(flatten(h), units=5)), units=3)
loss = cross_entropy(logits, y)
train { data = synthetic(count=16); optimizer = adam(); batch = 4; epochs = 2; steps = 3; minimize = loss }
NET
total=6
"$G" run "$t/m.net" --log quiet --save "$t/base.ckpt" >/dev/null 2>"$t/err" || { cat "$t/err"; exit 1; }
python3 "$here/craft_checkpoints.py" "$t/base.ckpt" "$t/c" --total-steps $total --count "$count" --seed "$seed" || exit 1

# check NAME EXPECT(ok|refuse) FILE-IN-MESSAGE -- command...: runs it and judges it
check() {
    name=$1 expect=$2 file=$3
    shift 3
    runs=$((runs + 1))
    timeout "$TIMEOUT" "$@" >/dev/null 2>"$t/err"
    rc=$?
    why=""
    if grep -q "Sanitizer\|runtime error:" "$t/err"; then why="sanitizer report"
    elif [ $rc -eq 124 ]; then why="no answer within ${TIMEOUT}s"
    elif [ "$expect" = ok ] && [ $rc -ne 0 ]; then why="refused (status $rc) a good file"
    elif [ "$expect" = refuse ] && [ $rc -eq 0 ]; then why="accepted a damaged file"
    elif [ "$expect" = refuse ] && [ $rc -ne 1 ]; then why="status $rc"
    elif [ "$expect" = refuse ] && ! grep -qF "$file" "$t/err"; then why="message does not name $file"
    fi
    if [ -n "$why" ]; then
        bad=$((bad + 1))
        printf 'FAIL: %s: %s\n' "$name" "$why"
        head -c 2000 "$t/err"
    elif [ $rc -eq 0 ]; then accepted=$((accepted + 1))
    else refused=$((refused + 1)); fi
}

start=$(date +%s)
while IFS="$(printf '\t')" read -r f e r x what; do
    p="$t/c/$f"
    check "$f ($what): eval" "$e" "$p" "$G" eval "$t/m.net" --weights "$p"
    check "$f ($what): resume" "$r" "$p" "$G" run "$t/m.net" --log quiet --resume "$p"
    check "$f ($what): resume --reset-optimizer" "$x" "$p" "$G" run "$t/m.net" --log quiet --resume "$p" --reset-optimizer
done < "$t/c/manifest.tsv"

# streams that are no checkpoint, or a checkpoint through a pipe
check "/dev/zero" refuse /dev/zero "$G" eval "$t/m.net" --weights /dev/zero
check "/dev/urandom" refuse /dev/urandom "$G" eval "$t/m.net" --weights /dev/urandom
check "/dev/zero, resume" refuse /dev/zero "$G" run "$t/m.net" --log quiet --resume /dev/zero
check "a folder" refuse "$t/c" "$G" eval "$t/m.net" --weights "$t/c"
mkfifo "$t/fifo"
feed() { ( "$@" > "$t/fifo" 2>/dev/null & echo $! > "$t/feeder" ); }
stop_feed() { kill "$(cat "$t/feeder")" 2>/dev/null; wait 2>/dev/null; }
feed cat "$t/base.ckpt"
check "a good checkpoint through a FIFO" ok "$t/fifo" "$G" eval "$t/m.net" --weights "$t/fifo"
stop_feed
feed cat /dev/zero
check "zeros through a FIFO" refuse "$t/fifo" "$G" eval "$t/m.net" --weights "$t/fifo"
stop_feed
feed sh -c "cat '$t/base.ckpt' /dev/zero"
check "a checkpoint then zeros through a FIFO" refuse "$t/fifo" "$G" eval "$t/m.net" --weights "$t/fifo"
stop_feed
# a header and a record that declares the most data the loader allows, then endless bytes
python3 - "$t/huge.head" <<'PY'
import struct, sys, zlib
h = b"GRAPHCKP" + struct.pack("<IIQQ", 1, 12, 0, 0)
h += struct.pack("<I", zlib.crc32(h))
name = b"conv2d/kernel"
r = struct.pack("<I", len(name)) + name + struct.pack("<II", 0, 4) + struct.pack("<4Q", 1 << 20, 1 << 20, 1, 3)
open(sys.argv[1], "wb").write(h + r)
PY
feed sh -c "cat '$t/huge.head' /dev/urandom"
check "a record of 2^40 floats, then endless bytes, through a FIFO" refuse "$t/fifo" "$G" eval "$t/m.net" --weights "$t/fifo"
stop_feed
secs=$(($(date +%s) - start))
echo "checkpoint campaign: $count crafted files (seed $seed), $runs runs in ${secs}s: $accepted accepted as expected," \
    "$refused refused as expected, $bad wrong"
[ $bad -eq 0 ]
