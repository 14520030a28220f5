#!/bin/sh
# What a newcomer meets on the command line (issue 17), one check per behaviour:
#   - a mistyped command or option gets "did you mean" (the suggestion of a mistyped op);
#   - `graphc check -` reads the model from standard input, "<stdin>" in its messages;
#   - paths in a .net file are relative to its folder, wherever graphc runs from, and
#     the error of a missing data folder names where it looked;
#   - graphc summary (and check --summary): its parameters add up to check's, its FLOP
#     shares to 100%, its activation memory is the memory plans' (graphc dump --stage
#     planned), a parameter the loss does not reach is not trainable (golden.sh pins
#     each model's table);
#   - --plot takes a name ending in .svg (what it draws) and refuses another, .png
#     included, before anything runs;
set -u
LC_ALL=C
export LC_ALL
. "${top_srcdir:-.}/tests/harness.sh"
src=$abs_top_srcdir
g=$abs_top_builddir/graphc
built "$g"
# expect RC TEXT WHAT ARGS...: graphc ARGS (in $t) exits with RC and prints TEXT (on
# stdout or stderr, fixed string)
expect() {
    want_rc=$1 text=$2 what=$3
    shift 3
    rc=0
    (cd "$t" && exec "$g" "$@") >"$t/out" 2>"$t/err" <"${stdin:-/dev/null}" || rc=$?
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
    stdin=$1
    shift
    expect "$@"
    stdin=
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

# ---- graphc summary ------------------------------------------------------------------------
m="$src/models/mnist.net"
"$g" summary "$m" --batch 64 --threads 1 >"$t/sum" 2>"$t/err" && ok "summary mnist.net" || { bad "summary mnist.net"; cat "$t/err"; }
total=$("$g" check "$m" | sed -n 's/^params *\([0-9,]*\) in.*/\1/p' | tr -d ,)
rows=$(awk '/^====/ { n++; next } n == 1 { gsub(",", "", $(NF - 2)); s += $(NF - 2) } END { print s }' "$t/sum")
[ -n "$total" ] && [ "$rows" = "$total" ] && grep -Eq "^Total params: +[0-9,]+ " "$t/sum" \
    && [ "$(sed -n 's/^Total params: *\([0-9,]*\) .*/\1/p' "$t/sum" | tr -d ,)" = "$total" ] \
    && ok "the layers' parameters add up to check's total ($total)" || bad "parameters: rows $rows, check $total"
shares=$(awk '/^====/ { n++; next } n == 1 && $(NF - 1) ~ /%$/ { sub("%", "", $(NF - 1)); s += $(NF - 1) } END { print s }' "$t/sum")
awk -v s="$shares" 'BEGIN { exit !(s > 99.5 && s < 100.5) }' && ok "the FLOP shares add up to 100% ($shares)" || bad "FLOP shares add up to $shares"
# the activation memory is the memory plans' arena, training and inference
arena() { "$g" dump "$m" --stage planned --batch 64 --threads 1 "$@" | sed -n 's/.* arena \([0-9]*\) .*/\1/p'; }
want_train=$(awk -v b="$(arena)" 'BEGIN { printf "%.2f MB a training step at batch 64", b / 1e6 }')
want_infer=$(awk -v b="$(arena --infer)" 'BEGIN { printf "%.2f MB inference at batch 64", b / 1e6 }')
grep -Fq "Activation memory:    $want_train" "$t/sum" && ok "training memory: the plan's arena ($want_train)" \
    || { bad "training memory, want '$want_train'"; grep -A1 "^Activation" "$t/sum"; }
grep -Fq "$want_infer" "$t/sum" && ok "inference memory: the plan's arena ($want_infer)" \
    || { bad "inference memory, want '$want_infer'"; grep -A1 "^Activation" "$t/sum"; }
grep -q "^conv2d_1 (conv2d) *\[B, 14, 14, 64\] *51,264 " "$t/sum" && ok "a layer's row: name, op, shape with B, parameters" \
    || { bad "conv2d_1's row"; cat "$t/sum"; }
# a parameter the loss does not reach is counted, but not trainable
cat > "$t/side.net" <<'NET'
input x: f32[B, 4]
input l: i32[B]
param W: f32[4, 3] = glorot_uniform()
param V: f32[4, 5] = glorot_uniform()
output side = matmul(x, V)
loss = cross_entropy(matmul(x, W), l)
train { data = synthetic(count=16); batch = 8; minimize = loss }
NET
expect 0 "Trainable params:     12 (48 bytes)" "summary: only what the loss reaches is trainable" summary side.net
expect 0 "Non-trainable params: 20" "summary: the rest is not" summary side.net
expect 0 "mnist.net: ok" "check --summary: check's summary first" check --summary "$m"
expect 0 "conv2d_1 (conv2d)" "check --summary: then the table" check --summary "$m"
expect 1 "unknown function 'relux'" "summary of a bad model: its errors" summary bad.net
expect 2 "missing FILE" "summary without a file" summary
expect 2 "unknown command 'sumary'; did you mean 'summary'?" "graphc sumary" sumary x.net

# ---- --plot: SVG, by name -------------------------------------------------------------------
expect 2 "--plot $t/p.png: the plots are SVG, not png: give a name ending in .svg" "run --plot FILE.png is refused" \
    run "$src/models/mlp.net" --epochs 1 --steps 1 --plot "$t/p.png"
grep -q Training "$t/out" && bad "run --plot FILE.png: training ran" || ok "run --plot FILE.png: nothing ran"
[ ! -e "$t/p.png" ] && ok "run --plot FILE.png: no file written" || bad "run --plot FILE.png wrote $t/p.png"
expect 2 "give a name ending in .svg" "run --plot without an extension is refused" run "$src/models/mlp.net" --plot "$t/plot"
expect 2 "the plots are SVG, not PNG" "bench --ablate --plot FILE.PNG is refused" bench "$src/models/mlp.net" --ablate --plot "$t/w.PNG"
expect 0 "" "run --plot FILE.svg draws the plot" \
    run "$src/models/mlp.net" --epochs 1 --steps 2 --batch 8 --test-limit 16 --plot "$t/p.svg"
head -c 200 "$t/p.svg" | grep -q "<svg" && ok "the .svg is an SVG" || bad "$t/p.svg is no SVG"
expect 0 "" "--plot FILE.SVG: the extension in capitals" \
    run "$src/models/mlp.net" --epochs 1 --steps 1 --batch 8 --test-limit 8 --plot "$t/Q.SVG"
[ -s "$t/Q.SVG" ] && ok "FILE.SVG written" || bad "no $t/Q.SVG"

finish
