#!/bin/sh
# What a newcomer meets on the command line (issue 17), one check per behaviour:
#   - a mistyped command or option gets "did you mean" (the suggestion of a mistyped op);
#   - `graphc check -` reads the model from standard input, "<stdin>" in its messages;
#   - paths in a .net file are relative to its folder, wherever graphc runs from, and
#     the error of a missing data folder names where it looked;
set -u
LC_ALL=C
export LC_ALL
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
src=$(cd "$top_srcdir" && pwd) || exit 99
g=$(cd "$top_builddir" && pwd)/graphc
[ -x "$g" ] || { echo "cli.sh: $g is not built" >&2; exit 99; }
t=$(mktemp -d "${TMPDIR:-/tmp}/graphc-cli.XXXXXX") || exit 99
trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
# expect RC TEXT WHAT ARGS...: graphc ARGS (in $t) exits with RC and prints TEXT (on
# stdout or stderr, fixed string)
expect() {
    want_rc=$1 text=$2 what=$3
    shift 3
    rc=0
    (cd "$t" && exec "$g" "$@") >"$t/out" 2>"$t/err" </dev/null || rc=$?
    if [ "$rc" -eq "$want_rc" ] && cat "$t/out" "$t/err" | grep -Fq -- "$text"; then ok "$what"
    else bad "$what: exit $rc (want $want_rc), '$text' not in:"; sed -n '1,12p' "$t/out" "$t/err"; fi
}

# ---- did you mean ------------------------------------------------------------------------
expect 2 "unknown command 'chek'; did you mean 'check'?" "graphc chek" chek "$src/models/mnist.net"
expect 2 "unknown option '--epcohs'; did you mean '--epochs'?" "run --epcohs" run --epcohs 3 "$src/models/mnist.net"
expect 2 "unknown option '--epcohs=3'; did you mean '--epochs'?" "run --epcohs=3" run --epcohs=3 "$src/models/mnist.net"
expect 2 "unknown option '--stgae'; did you mean '--stage'?" "dump --stgae" dump --stgae graph "$src/models/mnist.net"
expect 2 "unknown option '--verison'; did you mean '--version'?" "graphc --verison" --verison
expect 2 "unknown option '--wieghts'; did you mean '--weights'?" "predict --wieghts" predict --wieghts w.ckpt "$src/models/mnist.net" a.pgm
# far from every name: no guess, the list of commands
expect 2 "unknown command 'frobnicate'" "graphc frobnicate" frobnicate
if grep -q "did you mean" "$t/err"; then bad "frobnicate: a guess far from every command"; else ok "frobnicate: no guess"; fi
expect 2 "unknown option '--frobnicate'" "check --frobnicate" check --frobnicate x.net
if grep -q "did you mean" "$t/err"; then bad "--frobnicate: a guess far from every option"; else ok "--frobnicate: no guess"; fi

# ---- standard input ----------------------------------------------------------------------
# expect_in FILE RC TEXT WHAT ARGS...: as expect, with FILE on standard input
expect_in() {
    in=$1
    shift
    want_rc=$1 text=$2 what=$3
    shift 3
    rc=0
    (cd "$t" && exec "$g" "$@") >"$t/out" 2>"$t/err" <"$in" || rc=$?
    if [ "$rc" -eq "$want_rc" ] && cat "$t/out" "$t/err" | grep -Fq -- "$text"; then ok "$what"
    else bad "$what: exit $rc (want $want_rc), '$text' not in:"; sed -n '1,12p' "$t/out" "$t/err"; fi
}
expect_in "$src/models/mnist.net" 0 "<stdin>: ok" "check - reads standard input" check -
(cd "$src/models" && "$g" check mnist.net) | sed 1d >"$t/want"
sed 1d "$t/out" | cmp -s - "$t/want" && ok "check - prints the summary of check FILE" || bad "check - and check FILE differ"
printf 'input x: f32[B, 4]\noutput y = relux(x)\n' >"$t/bad.net"
expect_in "$t/bad.net" 1 "<stdin>:2:12: error: unknown function 'relux'" "check -: errors name <stdin>" check -
expect_in "$t/bad.net" 1 "<stdin>: 1 error" "check -: the count names <stdin>" check -
expect_in "$src/models/mlp.net" 0 "ast mlp" "dump - --stage ast" dump - --stage ast

# ---- paths in a model are relative to its folder ----------------------------------------
# models/mlp.net's mnist("../data/mnist") from another folder than the checkout's
expect 0 "test_acc" "run models/mlp.net from another folder finds data/mnist" \
    run "$src/models/mlp.net" --epochs 1 --steps 1 --batch 8 --test-limit 16 --log quiet
# a copy of it elsewhere: the error names the folder it looked in
mkdir -p "$t/m"
cp "$src/models/mlp.net" "$t/m/mlp.net"
expect 1 "m/../data/mnist/train-images-idx3-ubyte.gz: cannot open" "a missing data folder: the error names where it looked" \
    run m/mlp.net --epochs 1 --steps 1
# the train block's checkpoint is written beside the model, not in the working folder
cat > "$t/m/ck.net" <<'NET'
input x: f32[B, 4]
input l: i32[B]
loss = cross_entropy(dense(x, units=3), l)
train { data = synthetic(count=16); batch = 8; checkpoint = "w.ckpt"; minimize = loss }
NET
expect 0 "test_acc" "run with checkpoint = \"w.ckpt\"" run m/ck.net --log quiet
[ -f "$t/m/w.ckpt" ] && [ ! -e "$t/w.ckpt" ] && ok "the checkpoint is written beside the model" \
    || bad "the checkpoint is not in m/: $(ls "$t" "$t/m" | tr '\n' ' ')"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
