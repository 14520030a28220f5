#!/bin/sh
# Data-parallel training under mpirun (docs/distributed.md), loopback only:
#  - N ranks with batch B end with the same weights, within float tolerance, as one
#    process with batch N*B and the same seed (N = 2 and 4; dense layers with momentum,
#    and the MNIST CNN with dropout); and a run with the wrong global batch does not;
#  - only rank 0 prints; evaluation split over the ranks gives the single-process result;
#  - a rank killed or stalled stops the job with a message, no hang; a setup error that
#    every rank hits is reported once; ranks started with different settings are one
#    message naming them; a rank that fails alone inside the step stops the job.
# In a build without MPI: mpirun of graphc is refused with a message.  Skipped (77)
# without mpirun.
set -u
. "${top_srcdir:-.}/tests/harness.sh"
G="$top_builddir/graphc"
C="$top_builddir/tests/ckpt_compare"
DATA="$top_srcdir/data/mnist"
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: mpirun not found (openmpi-bin)"; exit 77; fi
# CI runs as root; two cores host up to four ranks
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN="mpirun --oversubscribe"

if ! "$G" --version | grep -q "with MPI"; then
    # a plain build must not let every process train alone
    $MPIRUN -np 2 "$G" run "$top_srcdir/models/mlp.net" --data "$DATA" --steps 1 --epochs 1 >"$t/out" 2>"$t/err"
    rc=$?
    if [ $rc -ne 0 ] && grep -q "built without MPI" "$t/err"; then ok "a build without MPI refuses to run under mpirun (status $rc)"
    else bad "a build without MPI under mpirun: status $rc"; cat "$t/err"; fi
    finish
fi

# train FILE RANKS BATCH STEPS OUT [options]: rank-count x batch, saved to OUT
train() {
    f=$1 np=$2 b=$3 steps=$4 out=$5
    shift 5
    if [ "$np" -eq 0 ]; then
        "$G" run "$f" --data "$DATA" --epochs 1 --steps "$steps" --batch "$b" --threads 1 --test-limit 500 \
            --log quiet --save "$out" "$@"
    else
        $MPIRUN -np "$np" "$G" run "$f" --data "$DATA" --epochs 1 --steps "$steps" --batch "$b" --threads 1 \
            --test-limit 500 --log quiet --save "$out" "$@"
    fi
}

# compare NAME FILE A B: weights within |a-b| <= 1e-6 + 1e-4 |b|
compare() {
    if "$C" "$2" "$3" "$4" 1e-4 1e-6 >"$t/cmp" 2>&1; then ok "$1"
    else bad "$1"; cat "$t/cmp"; fi
}

MLP="$top_srcdir/models/mlp.net"
train "$MLP" 0 64 20 "$t/one64.ckpt" --lr 0.05 >"$t/one.out" 2>&1 || { bad "mlp: one process"; cat "$t/one.out"; }
train "$MLP" 2 32 20 "$t/two32.ckpt" --lr 0.05 >"$t/two.out" 2>"$t/two.err" || { bad "mlp: 2 ranks"; cat "$t/two.err"; }
compare "mlp (dense, momentum), 20 steps: 2 ranks x 32 = 1 process x 64" "$MLP" "$t/two32.ckpt" "$t/one64.ckpt"
train "$MLP" 4 16 20 "$t/four16.ckpt" --lr 0.05 >/dev/null 2>"$t/four.err" || { bad "mlp: 4 ranks"; cat "$t/four.err"; }
compare "mlp, 20 steps: 4 ranks x 16 = 1 process x 64" "$MLP" "$t/four16.ckpt" "$t/one64.ckpt"
train "$MLP" 2 32 20 "$t/two32i.ckpt" --lr 0.05 --mode interp >/dev/null 2>"$t/twoi.err" || { bad "mlp: 2 ranks, interpreter"; cat "$t/twoi.err"; }
compare "mlp, 20 steps, the interpreter on 2 ranks x 32 = 1 process x 64" "$MLP" "$t/two32i.ckpt" "$t/one64.ckpt"
# the control: the same comparison fails for a run whose global batch differs
train "$MLP" 0 32 20 "$t/one32.ckpt" --lr 0.05 >/dev/null 2>&1
if "$C" "$MLP" "$t/two32.ckpt" "$t/one32.ckpt" 1e-4 1e-6 >/dev/null 2>&1; then bad "the comparison cannot tell 2 x 32 from 1 x 32"
else ok "control: 2 ranks x 32 differ from 1 process x 32"; fi

# only rank 0 prints; the loss it prints is the global batch's (one process x 64's)
n=$(grep -c "^test_loss" "$t/two.out")
[ "$n" -eq 1 ] && ok "one result line from 2 ranks" || { bad "2 ranks printed $n result lines"; cat "$t/two.out"; }
[ "$(cat "$t/two.out")" = "$(cat "$t/one.out")" ] && ok "2 ranks report the single process's test loss and accuracy: $(cat "$t/one.out")" \
    || { bad "results differ: $(cat "$t/two.out") / $(cat "$t/one.out")"; }

# the CNN with dropout (each rank's masks are its rows' of the global batch's)
CNN="$top_srcdir/models/mnist.net"
train "$CNN" 0 64 5 "$t/cnn1.ckpt" >/dev/null 2>&1 || bad "cnn: one process"
train "$CNN" 2 32 5 "$t/cnn2.ckpt" >/dev/null 2>"$t/cnn.err" || { bad "cnn: 2 ranks"; cat "$t/cnn.err"; }
compare "mnist.net (conv, dropout), 5 steps: 2 ranks x 32 = 1 process x 64" "$CNN" "$t/cnn2.ckpt" "$t/cnn1.ckpt"
"$G" run "$CNN" --data "$DATA" --epochs 1 --steps 5 --batch 64 --threads 1 --test-limit 500 --log quiet --save "$t/cnn1n.ckpt" \
    --seed 2 >/dev/null 2>&1
if "$C" "$CNN" "$t/cnn2.ckpt" "$t/cnn1n.ckpt" 1e-4 1e-6 >/dev/null 2>&1; then bad "the CNN comparison cannot tell another seed"
else ok "control: another seed's CNN differs"; fi

# evaluation split over the ranks: the same figures as one process
one=$("$G" eval "$MLP" --weights "$t/one64.ckpt" --data "$DATA" 2>&1)
two=$($MPIRUN -np 2 "$G" eval "$MLP" --weights "$t/one64.ckpt" --data "$DATA" 2>&1)
three=$($MPIRUN -np 3 "$G" eval "$MLP" --weights "$t/one64.ckpt" --data "$DATA" 2>&1)
[ "$one" = "$two" ] && [ "$one" = "$three" ] && ok "eval on 2 and 3 ranks = one process: $one" \
    || bad "eval: '$one' / '$two' / '$three'"

# a long run to disturb, in the training loop: 20 steps an epoch, and the first
# epoch's bar drawn after its first step (rank 0 draws it after the step's allreduce, so
# both ranks are past their start; the ranks' stdout is mpirun's pty, so the bar's lines
# start with a carriage return).  Its ranks are mpirun's children (Open MPI starts them itself on
# one node), found by pid: other jobs on the machine may run graphc too.
long() {
    # emptied here, not by the background job's redirection: the loop below must not
    # read the last run's "Epoch 1/" before the new job has truncated the file (it then
    # signalled mpirun during its start, before graphc's handler, and no checkpoint)
    : >"$t/long.out"
    : >"$t/long.err"
    $MPIRUN -np 2 "$G" run "$MLP" --data "$DATA" --epochs 10000 --steps 20 --batch 32 --threads 1 --test-limit 100 \
        "$@" >"$t/long.out" 2>"$t/long.err" &
    mp=$!
    r1="" ranks=""
    i=0
    while { [ -z "$r1" ] || ! grep -q "Epoch 1/" "$t/long.out"; } && [ $i -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
        ranks=$(pgrep -P $mp 2>/dev/null)
        for p in $ranks; do
            tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && r1=$p
        done
    done
}
# waits for mpirun at most $1 seconds; sets rc and secs
bounded_wait() {
    s=0
    while kill -0 $mp 2>/dev/null && [ $s -lt "$1" ]; do sleep 1; s=$((s + 1)); done
    if kill -0 $mp 2>/dev/null; then
        rc=hung
        kill -9 $mp $ranks 2>/dev/null
    else
        wait $mp
        rc=$?
    fi
    secs=$s
}

long
kill -9 "$r1" 2>/dev/null
bounded_wait 30
if [ "$rc" != hung ] && [ "$rc" -ne 0 ]; then ok "rank 1 killed: the job stops (status $rc, ${secs}s): $(grep -m1 -i "signal\|killed\|exited" "$t/long.err")"
else bad "rank 1 killed: status $rc"; cat "$t/long.err"; fi

long --comm-timeout 2
kill -STOP "$r1" 2>/dev/null
bounded_wait 30
if [ "$rc" != hung ] && [ "$rc" -ne 0 ] && grep -q "at step [0-9]* did not complete within 2 s" "$t/long.err"; then
    ok "rank 1 stalled: the watchdog stops the job (status $rc, ${secs}s): $(grep -m1 "did not complete" "$t/long.err")"
else bad "rank 1 stalled: status $rc"; cat "$t/long.err"; fi
kill -9 "$r1" 2>/dev/null

# Ctrl-C (mpirun passes it on as SIGTERM a second later, and SIGKILL a second after
# that, and stops reading the ranks' output): the ranks agree on the step to stop after,
# rank 0 saves, and the job resumes from that checkpoint.  With 2-step epochs the bar
# is drawn a thousand times a second, so rank 0 would block on the unread pty before
# the SIGTERM if graphc let it (it did: no checkpoint, killed).
long --save "$t/int.ckpt" --steps 2 --epochs 1000000
kill -INT $mp
bounded_wait 30
step=$(od -An -t u8 -j 16 -N 8 "$t/int.ckpt" 2>/dev/null | tr -d ' ')
if [ "$rc" != hung ] && [ -n "$step" ] && [ "$step" -gt 0 ]; then
    ok "Ctrl-C: the job stops (status $rc, ${secs}s), rank 0 saved the step-$step checkpoint"
else bad "Ctrl-C under mpirun: status $rc, checkpoint step '$step'"; cat "$t/long.err"; fi
# SIGTERM to one rank alone (a batch system's, or a user's kill): every rank stops
# after the same step, rank 0 saves it and says so, and graphc's status 130 is the job's
long --save "$t/term.ckpt"
kill -TERM "$r1"
bounded_wait 30
tstep=$(od -An -t u8 -j 16 -N 8 "$t/term.ckpt" 2>/dev/null | tr -d ' ')
if [ "$rc" = 130 ] && [ -n "$tstep" ] && [ "$tstep" -gt 0 ] && grep -q "Interrupted at step $tstep; saved $t/term.ckpt" "$t/long.out"; then
    ok "SIGTERM to rank 1: all stop (status $rc, ${secs}s), rank 0 saved the step-$tstep checkpoint"
else bad "SIGTERM to rank 1: status $rc, checkpoint step '$tstep'"; tail -c 300 "$t/long.out"; cat "$t/long.err"; fi
if $MPIRUN -np 2 "$G" run "$MLP" --data "$DATA" --epochs 1 --steps $((${step:-0} + 50)) --batch 32 --threads 1 --test-limit 500 --log quiet \
        --resume "$t/int.ckpt" >"$t/out" 2>"$t/err" && grep -q "^test_loss" "$t/out"; then ok "2 ranks resume from it: $(cat "$t/out")"
else bad "resume under mpirun"; cat "$t/err"; fi

# a mistake every rank makes is reported once
$MPIRUN -np 2 "$G" run "$MLP" --data "$t/nowhere" --steps 1 >"$t/out" 2>"$t/err"
rc=$?
n=$(grep -c "nowhere" "$t/err")
[ $rc -ne 0 ] && [ "$n" -eq 1 ] && ok "missing data on every rank: status $rc, one message" \
    || { bad "missing data: status $rc, $n messages"; cat "$t/err"; }
# ranks started with different settings are stopped before the first step, with one
# message from rank 0 naming each setting and the ranks' values (different --steps
# used to end in a raw MPI error, different --batch to train silently)
mismatch() {
    what=$1 want=$2
    shift 2
    $MPIRUN -np 1 "$G" run "$MLP" --data "$DATA" --steps 2 --epochs 1 --test-limit 100 --log quiet --threads 1 : \
        -np 1 "$G" run "$MLP" --data "$DATA" --steps 2 --epochs 1 --test-limit 100 --log quiet --threads 1 "$@" >"$t/out" 2>"$t/err"
    rc=$?
    n=$(grep -c "different settings" "$t/err")
    if [ $rc -ne 0 ] && [ "$n" -eq 1 ] && grep -q -- "$want" "$t/err" && [ ! -s "$t/out" ]; then
        ok "ranks with $what: status $rc, one message: $(grep -o -- "$want" "$t/err")"
    else bad "ranks with $what: status $rc, $n messages"; cat "$t/err"; fi
}
mismatch "different --batch" "--batch is 128 on rank 0 but 64 on rank 1" --batch 64
mismatch "different --steps" "steps per epoch (--steps) is 2 on rank 0 but 3 on rank 1" --steps 3
mismatch "different --lr and --seed" "--lr is 0.1 on rank 0 but 0.05 on rank 1; --seed is 42 on rank 0 but 7 on rank 1" --lr 0.05 --seed 7
mismatch "different buckets" "--bucket-size is 4194304 on rank 0 but 1 on rank 1" --bucket-size 1
mismatch "different test sets" "test examples (--test-limit) is 100 on rank 0 but 50 on rank 1" --test-limit 50
$MPIRUN -np 1 "$G" eval "$MLP" --data "$DATA" --weights "$t/one64.ckpt" : -np 1 "$G" eval "$MLP" --data "$DATA" \
    --weights "$t/two32.ckpt" >"$t/out" 2>"$t/err"
rc=$?
[ $rc -ne 0 ] && [ "$(grep -c "the weights (--weights) is hash" "$t/err")" -eq 1 ] && ok "eval with different weights on 2 ranks: status $rc, one message" \
    || { bad "eval with different weights: status $rc"; cat "$t/err"; }

# a rank that fails alone after the start leaves the others in the next step's
# allreduce (rank 0 cannot write its --save-every checkpoint: the folder was moved away
# under it): train_run says so, and graphc stops the whole job at once, long before
# the 60 s watchdog would
mkdir "$t/ck"
$MPIRUN -np 2 "$G" run "$MLP" --data "$DATA" --epochs 50 --batch 32 --threads 1 --log quiet --save "$t/ck/x.ckpt" \
    --save-every 20 --comm-timeout 60 >"$t/out" 2>"$t/err" &
mp=$!
r1=""
i=0
while [ ! -f "$t/ck/x.ckpt" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
mv "$t/ck" "$t/ck.gone"
bounded_wait 30
if [ "$rc" != hung ] && [ "$rc" -ne 0 ] && [ "$secs" -lt 30 ] && grep -q "cannot write checkpoint '$t/ck/x.ckpt" "$t/err" &&
    grep -q "rank 0 of 2: stopping all ranks after the error above" "$t/err"; then
    ok "a rank failing alone stops the job (status $rc, ${secs}s, before the 60 s watchdog)"
else bad "a rank failing alone: status $rc"; cat "$t/err"; fi

# a loss that becomes NaN is the global batch's on every rank: all stop together at
# the same step, one message, no job abort, the last --save-every checkpoint kept
cat >"$t/div.net" <<'NET'
input x: f32[B, 4]
input y: i32[B]
logits = dense(dense(dense(x, units=16), units=16), units=3)
loss = cross_entropy(logits, y)
train { data = synthetic(count=64); batch = 4; epochs = 5; optimizer = sgd(lr=100); minimize = loss; seed = 3 }
NET
$MPIRUN -np 2 "$G" run "$t/div.net" --threads 1 --log quiet --save "$t/div.ckpt" --save-every 1 >"$t/out" 2>"$t/err"
rc=$?
step=$(od -An -t u8 -j 16 -N 8 "$t/div.ckpt" 2>/dev/null | tr -d ' ')
if [ $rc -eq 1 ] && [ "$(grep -c "the loss is NaN at step 4" "$t/err")" -eq 1 ] && ! grep -q "stopping all ranks" "$t/err" &&
    [ "$step" = 4 ]; then ok "a NaN loss on 2 ranks: status 1, one message, the step-4 checkpoint kept"
else bad "a NaN loss on 2 ranks: status $rc, checkpoint step '$step'"; cat "$t/err"; fi
printf 'model m\ninput x: f32[B, 4]\nh = dense(x, units=3, activaton="relu")\n' >"$t/bad.net"
$MPIRUN -np 2 "$G" run "$t/bad.net" >"$t/out" 2>"$t/err"
rc=$?
n=$(grep -c "activaton" "$t/err")
[ $rc -eq 1 ] && [ "$n" -ge 1 ] && [ "$(grep -c "1 error" "$t/err")" -eq 1 ] && ok "a model error under 2 ranks: status 1, reported once" \
    || { bad "a model error under 2 ranks: status $rc"; cat "$t/err"; }
finish
