#!/bin/sh
# graphc run and eval as a user sees them:
#  - every command that prints fails (status 1, "graphc: write error: ...") when its
#    output cannot be written (/dev/full), and succeeds to /dev/null;
#  - the progress bar on a terminal (a pty of 80 and 50 columns, and one that does not
#    know its width with $COLUMNS=60) never wraps, shows an ETA, ends each epoch with one
#    final line; through a pipe there is no carriage return, one line per epoch;
#  - every --log json line parses with python3's json module, a NaN test loss is null
#    with "test_loss_nonfinite": "nan" (it used to be dropped), and an interruption is a
#    JSON line too;
#  - a loss that becomes NaN stops the run (status 1) naming the step and the epoch; the
#    last --save-every checkpoint stays and loads; a checkpoint that was there before a
#    run without --save-every is left byte for byte; mnist's MLP at --lr 1e6 does the
#    same, and the checkpoint it keeps is byte for byte an N-step run's; --log quiet
#    writes a NaN test loss as "nan";
#  - graphc eval says how many examples it evaluated.
# The pty and JSON checks need python3 (they are skipped, saying so, without it).
set -u
. "${top_srcdir:-.}/tests/harness.sh"
G="$top_builddir/graphc"
DATA="$top_srcdir/data/mnist"
MLP="$top_srcdir/models/mlp.net"
PY=""
if command -v python3 >/dev/null 2>&1; then PY=python3; fi

# Loss finite for 4 steps, NaN at step 4 (global batch 8); with --steps 4 --validate the
# first epoch's test loss is NaN (the weights after step 3 overflow the forward pass).
cat >"$t/div.net" <<'NET'
input x: f32[B, 4]
input y: i32[B]
logits = dense(dense(dense(x, units=16), units=16), units=3)
loss = cross_entropy(logits, y)
train { data = synthetic(count=64); batch = 8; epochs = 5; optimizer = sgd(lr=100); minimize = loss; seed = 3 }
NET
SHORT="--data $DATA --epochs 2 --steps 20 --test-limit 300 --threads 1"

# ---- output that cannot be written ----------------------------------------------------------
"$G" run "$MLP" $SHORT --log quiet --save "$t/mlp.ckpt" >/dev/null 2>&1 || bad "a short run of mlp.net"
printf 'P5\n28 28\n255\n' >"$t/digit.pgm"
head -c 784 /dev/zero >>"$t/digit.pgm"
full() {
    what=$1
    shift
    "$@" >/dev/null 2>"$t/err0"
    rc0=$?
    "$@" >/dev/full 2>"$t/err"
    rc=$?
    if [ $rc0 -eq 0 ] && [ $rc -eq 1 ] && grep -q "^graphc: write error" "$t/err"; then
        ok "$what > /dev/full: status 1, $(grep "^graphc: write error" "$t/err")"
    else bad "$what > /dev/full: status $rc (to /dev/null: $rc0)"; cat "$t/err0" "$t/err"; fi
}
full "graphc --help" "$G" --help
full "graphc --version" "$G" --version
full "graphc run --help" "$G" run --help
full "graphc check" "$G" check "$MLP"
full "graphc check --help" "$G" check --help
full "graphc dump --stage fused" "$G" dump "$MLP" --stage fused
full "graphc dump --stage train --format json" "$G" dump "$MLP" --stage train --format json
full "graphc dump --stage planned --format svg" "$G" dump "$MLP" --stage planned --format svg
full "graphc run (bar)" "$G" run "$MLP" $SHORT
full "graphc run --log json" "$G" run "$MLP" $SHORT --log json
full "graphc run --log quiet" "$G" run "$MLP" $SHORT --log quiet
full "graphc eval" "$G" eval "$MLP" --data "$DATA" --test-limit 300 --weights "$t/mlp.ckpt"
full "graphc predict" "$G" predict "$MLP" --weights "$t/mlp.ckpt" "$t/digit.pgm"
full "graphc bench" "$G" bench "$MLP" --batch 2 --steps 1 --warmup 0 --threads 1
if "$G" --version | grep -q "with ONNX"; then
    full "graphc export" "$G" export "$MLP" --weights "$t/mlp.ckpt" -o "$t/mlp.onnx"
    full "graphc import" "$G" import "$t/mlp.onnx" -o "$t/back.net"
fi

# ---- the bar through a pipe -------------------------------------------------------------------
"$G" run "$MLP" $SHORT --validate | cat >"$t/pipe.out"
if ! grep -q "$(printf '\r')" "$t/pipe.out" && [ "$(grep -c '^Epoch [12]/2 ' "$t/pipe.out")" -eq 2 ] &&
    [ "$(wc -l <"$t/pipe.out")" -eq 5 ] && grep -q "^Optimizer sgd(lr=0.1, momentum=0.9)$" "$t/pipe.out" && grep -q "^Test loss: .* (300 examples) - total time" "$t/pipe.out"; then
    ok "through a pipe: no carriage return, one line per epoch: $(sed -n 3p "$t/pipe.out")"
else bad "the bar through a pipe"; cat -A "$t/pipe.out"; fi

# ---- the bar on a terminal --------------------------------------------------------------------
# pty COLS COLUMNS-or-"" COMMAND...: runs COMMAND on a pty of COLS columns (0: a pty that
# does not know its width) and checks its output: every line redrawn in place fits in
# COLS-1 columns (or WANT-1, from $COLUMNS), some show an ETA, each epoch ends in one line.
pty() {
    $PY - "$@" <<'PY'
import fcntl, os, pty, struct, sys, termios
cols, columns, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
env = dict(os.environ)
env.pop("COLUMNS", None)
if columns:
    env["COLUMNS"] = columns
m, s = pty.openpty()
fcntl.ioctl(m, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
pid = os.fork()
if pid == 0:
    os.setsid()
    for fd in (0, 1, 2):
        os.dup2(s, fd)
    os.execvpe(args[0], args, env)
os.close(s)
out = b""
while True:
    try:
        b = os.read(m, 65536)
    except OSError:
        break
    if not b:
        break
    out += b
status = os.waitpid(pid, 0)[1]
text = out.decode()
limit = (cols if cols else int(columns)) - 1
running, finals, longest, eta = 0, 0, 0, 0
# A segment ends at \r or \n; a running line is an "Epoch" segment followed by \r.
i = 0
while i < len(text):
    j = i
    while j < len(text) and text[j] not in "\r\n":
        j += 1
    seg, end = text[i:j], text[j] if j < len(text) else ""
    if seg.startswith("Epoch"):
        if end == "\r" and not text[j:j + 2] == "\r\n":
            running += 1
            longest = max(longest, len(seg))
            eta += "ETA: " in seg
        else:
            finals += 1
    i = j + 1
problems = []
if os.WEXITSTATUS(status) != 0:
    problems.append("status %d" % os.WEXITSTATUS(status))
if longest > limit:
    problems.append("a running line of %d columns" % longest)
if eta == 0:
    problems.append("no ETA")
if finals != 2:
    problems.append("%d final epoch lines" % finals)
print("%d redraws, the longest %d columns (limit %d), %d with an ETA, %d final lines" % (running, longest, limit, eta, finals))
if problems:
    print("; ".join(problems))
    print(repr(text))
    sys.exit(1)
PY
}
if [ -n "$PY" ]; then
    for cols in 80 50; do
        if pty $cols "" "$G" run "$MLP" $SHORT --validate >"$t/pty.out" 2>&1; then ok "a terminal of $cols columns: $(head -1 "$t/pty.out")"
        else bad "a terminal of $cols columns"; cat "$t/pty.out"; fi
    done
    if pty 0 60 "$G" run "$MLP" $SHORT >"$t/pty.out" 2>&1; then ok "a terminal that does not know its width, COLUMNS=60: $(head -1 "$t/pty.out")"
    else bad "a terminal of unknown width"; cat "$t/pty.out"; fi
else
    echo "SKIP: the terminal checks (no python3)"
fi

# ---- JSON lines ------------------------------------------------------------------------------
# json FILE CHECK: every line of FILE is a JSON object, and the Python expression CHECK
# (over `lines`, the parsed objects) holds
json() {
    $PY - "$1" "$2" <<'PY'
import json, sys
lines = []
for n, raw in enumerate(open(sys.argv[1]), 1):
    try:
        obj = json.loads(raw)
    except ValueError as e:
        sys.exit("line %d is not JSON (%s): %r" % (n, e, raw))
    if not isinstance(obj, dict):
        sys.exit("line %d is not an object: %r" % (n, raw))
    lines.append(obj)
if not lines or not eval(sys.argv[2]):
    sys.exit("%d lines; this does not hold: %s\n%s" % (len(lines), sys.argv[2], open(sys.argv[1]).read()))
PY
}
if [ -n "$PY" ]; then
    "$G" run "$MLP" $SHORT --validate --log json >"$t/run.json"
    json "$t/run.json" "len(lines) == 3 and all(isinstance(l['test_loss'], float) and 'test_loss_nonfinite' not in l for l in lines) \
        and lines[2]['test_examples'] == 300" && ok "run --validate --log json: 3 lines, each with its test loss"
    "$G" run "$t/div.net" --steps 4 --validate --log json --threads 1 >"$t/nan.json" 2>"$t/err"
    rc=$?
    json "$t/nan.json" "len(lines) == 1 and lines[0]['test_loss'] is None and lines[0]['test_loss_nonfinite'] == 'nan' \
        and isinstance(lines[0]['loss'], float)" && [ $rc -eq 1 ] &&
        ok "a NaN test loss is null with test_loss_nonfinite \"nan\", then the NaN loss stops the run (status $rc)" ||
        { bad "a NaN test loss in --log json (status $rc)"; cat "$t/err"; }
    "$top_builddir/tests/test_progress" --json-sample >"$t/sample.json"
    json "$t/sample.json" "sum('loss_nonfinite' in l for l in lines) == 3 and any(l.get('checkpoint') == 'dir \"a\"\\\\b\\t.ckpt' for l in lines)" &&
        ok "the crafted lines (NaN, Inf, -Inf, 1e30, no accuracy, an escaped path) parse: $(wc -l <"$t/sample.json") lines"
    # an interruption in --log json is a JSON line of its own
    "$G" run "$MLP" --data "$DATA" --epochs 50 --test-limit 300 --threads 1 --log json --save "$t/int.ckpt" >"$t/int.json" 2>&1 &
    pid=$!
    sleep 1
    kill -INT $pid
    wait $pid
    rc=$?
    json "$t/int.json" "lines[-1].get('interrupted') is True or 'test_loss' in lines[-1]" &&
        ok "Ctrl-C under --log json (status $rc): every line parses: $(tail -1 "$t/int.json")"
else
    echo "SKIP: the JSON checks (no python3)"
fi

# ---- a loss that becomes NaN --------------------------------------------------------------------
"$G" run "$t/div.net" --threads 1 --save "$t/div.ckpt" --save-every 1 >"$t/out" 2>"$t/err"
rc=$?
step=$(od -An -t u8 -j 16 -N 8 "$t/div.ckpt" 2>/dev/null | tr -d ' ')
if [ $rc -eq 1 ] && grep -q "the loss is NaN at step 4 (epoch 1/5, step 5/8): stopping" "$t/err" &&
    grep -q "\-\-check-numerics names the op" "$t/err" && [ "$step" = 4 ]; then
    ok "a NaN loss: status 1, $(grep -o "the loss is NaN at step 4 ([^)]*)" "$t/err"), the step-4 checkpoint kept"
else bad "a NaN loss: status $rc, checkpoint step '$step'"; cat "$t/out" "$t/err"; fi
"$G" eval "$t/div.net" --weights "$t/div.ckpt" >"$t/out" 2>&1 && ok "that checkpoint loads: $(cat "$t/out")" ||
    { bad "the kept checkpoint does not load"; cat "$t/out"; }
cp "$t/div.ckpt" "$t/before.ckpt"
"$G" run "$t/div.net" --threads 1 --save "$t/div.ckpt" >/dev/null 2>&1
rc=$?
[ $rc -eq 1 ] && cmp -s "$t/div.ckpt" "$t/before.ckpt" && ok "a NaN loss without --save-every: status 1, the earlier checkpoint untouched" ||
    bad "a NaN loss without --save-every: status $rc, the checkpoint changed"

# mnist's MLP at the highest learning rate graphc takes: the loss is NaN at a step N, and
# the --save-every checkpoint left is byte for byte the one an N-step run saves
"$G" run "$MLP" --lr 1e30 --data "$DATA" --steps 2 >/dev/null 2>"$t/err"
rc=$?
[ $rc -eq 2 ] && grep -q "\-\-lr: expected a number from 0 to 1e+06, got '1e30'" "$t/err" && ok "--lr 1e30 is refused (status 2)" ||
    { bad "--lr 1e30: status $rc"; cat "$t/err"; }
BIG="--data $DATA --epochs 2 --steps 5 --test-limit 100 --threads 1 --lr 1e6"
"$G" run "$MLP" $BIG --save "$t/big.ckpt" --save-every 1 >"$t/out" 2>"$t/err"
rc=$?
n=$(sed -n 's/.*the loss is NaN at step \([0-9]*\) (epoch .*/\1/p' "$t/err")
if [ $rc -eq 1 ] && [ -n "$n" ] && [ "$n" -gt 0 ]; then
    "$G" run "$MLP" $BIG --epochs 1 --steps "$n" --save "$t/good.ckpt" --log quiet >"$t/good.out" 2>&1
    if cmp -s "$t/big.ckpt" "$t/good.ckpt"; then
        ok "mlp.net at --lr 1e6: status 1, the loss is NaN at step $n, the checkpoint kept = a $n-step run's, byte for byte"
    else bad "mlp.net at --lr 1e6: the checkpoint kept differs from a $n-step run's"; cat "$t/good.out"; fi
else bad "mlp.net at --lr 1e6: status $rc, NaN step '$n'"; cat "$t/err"; fi
cp "$t/good.ckpt" "$t/before.ckpt"
"$G" run "$MLP" $BIG --save "$t/good.ckpt" >"$t/out" 2>"$t/err"
rc=$?
[ $rc -eq 1 ] && cmp -s "$t/good.ckpt" "$t/before.ckpt" && ok "mlp.net at --lr 1e6 over an earlier --save: status 1, that file untouched" ||
    { bad "mlp.net at --lr 1e6 over an earlier --save: status $rc"; cat "$t/err"; }
# that N-step run's weights are finite but overflow the test set's forward pass: its
# result is "nan", not printf's "-nan"
grep -q "^test_loss nan test_acc [0-9.]*$" "$t/good.out" && ok "--log quiet with a NaN test loss: $(cat "$t/good.out")" ||
    { bad "--log quiet with a NaN test loss"; cat "$t/good.out"; }

# ---- eval's count ----------------------------------------------------------------------------
"$G" eval "$MLP" --data "$DATA" --test-limit 300 --weights "$t/mlp.ckpt" >"$t/out" 2>&1
grep -q "^Test loss: [0-9.]* - test acc: [0-9.]* (300 examples)$" "$t/out" && ok "eval: $(cat "$t/out")" ||
    { bad "eval's line"; cat "$t/out"; }

finish
