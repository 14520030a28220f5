#!/bin/sh
# graphc sample and a text() model on the command line:
#   - a small byte-level model trains from text(), and `graphc eval` prints its loss
#     with the unigram and bigram baselines on the same validation bytes;
#   - the same seed gives the same text, another seed (at temperature 1) other text,
#     every byte drawn is one the model saw, and --length counts them;
#   - refusals: a model without byte ids, usage errors, a missing checkpoint.
set -u
. "${top_srcdir:-.}/tests/harness.sh"
g="$top_builddir/graphc"

i=0
while [ $i -lt 60 ]; do printf 'hello world. '; i=$((i + 1)); done > "$t/text.txt"
cat > "$t/lm.net" <<NET
model tinylm
input ids:  i32[B, 8]
input next: i32[B, 8]
logits = dense(embedding(ids, vocab=256, dim=16), units=256)
loss = cross_entropy(logits, next)
output next_byte = softmax(logits[:, -1])
train { data = text("$t/text.txt", context=8); optimizer = adam(lr=0.02); batch = 8; minimize = loss }
NET
"$g" run "$t/lm.net" --log quiet --save "$t/w.ckpt" >"$t/run.out" 2>"$t/err" || { cat "$t/err"; exit 1; }
ok "a text() model trains"

"$g" eval "$t/lm.net" --weights "$t/w.ckpt" >"$t/eval.out" 2>"$t/err" || { bad "eval"; cat "$t/err"; }
# the model here is a bigram model (each position sees only its own byte): its loss
# is close to the bigram baseline's, far below the unigram's
awk '/^Test loss/ { loss = $3 } /^Baselines/ { uni = $8; sub(",", "", uni); bi = $10 }
     END { exit !(loss > 0 && uni > bi && loss < 0.5 * uni && loss < bi + 0.5) }' "$t/eval.out" \
    && ok "eval prints the loss below the unigram baseline, near the bigram one" \
    || { bad "eval's loss and baselines"; cat "$t/eval.out"; }

"$g" sample "$t/lm.net" --weights "$t/w.ckpt" --prompt "hello" --length 40 --seed 3 >"$t/s1" 2>"$t/err" \
    || { bad "sample"; cat "$t/err"; }
"$g" sample "$t/lm.net" --weights "$t/w.ckpt" --prompt "hello" --length 40 --seed 3 >"$t/s2" 2>&1
"$g" sample "$t/lm.net" --weights "$t/w.ckpt" --prompt "hello" --length 40 --seed 4 >"$t/s3" 2>&1
cmp -s "$t/s1" "$t/s2" && ok "the same seed, the same text" || bad "the same seed gave other text"
cmp -s "$t/s1" "$t/s3" && bad "another seed gave the same text" || ok "another seed, other text"
[ "$(head -c 5 "$t/s1")" = "hello" ] && ok "the prompt comes first" || bad "the prompt is not first: $(cat "$t/s1")"
# prompt + 40 bytes + a newline
[ "$(wc -c < "$t/s1")" -eq 46 ] && ok "--length 40: 40 bytes" || bad "--length 40 gave $(wc -c < "$t/s1") bytes"
tr -d 'helo wrd.\n' < "$t/s1" | grep -q . && bad "a byte the model never saw: $(cat "$t/s1")" \
    || ok "every byte drawn is one of the text's"

# refusals
cat > "$t/img.net" <<'NET'
input x: f32[B, 4]
input y: i32[B]
logits = dense(x, units=3)
output p = softmax(logits)
loss = cross_entropy(logits, y)
NET
"$g" sample "$t/img.net" --weights "$t/w.ckpt" --prompt "a" >/dev/null 2>"$t/err"
rc=$?
[ $rc -eq 1 ] && grep -q "img.net: sample needs an input of byte ids i32\[B, T\]" "$t/err" \
    && ok "a model without byte ids: exit 1, named" || { bad "no byte ids: exit $rc"; cat "$t/err"; }
"$g" sample "$t/lm.net" --weights "$t/w.ckpt" >/dev/null 2>"$t/err"
rc=$?
[ $rc -eq 2 ] && grep -q "missing --prompt" "$t/err" && ok "no --prompt: usage, exit 2" || bad "no --prompt: exit $rc"
"$g" sample "$t/lm.net" --weights "$t/w.ckpt" --prompt a --temperature -1 >/dev/null 2>"$t/err"
[ $? -eq 2 ] && ok "--temperature -1: exit 2" || bad "--temperature -1 accepted"
"$g" sample "$t/lm.net" --weights "$t/none.ckpt" --prompt a >/dev/null 2>"$t/err"
rc=$?
[ $rc -eq 1 ] && grep -q "none.ckpt" "$t/err" && ok "a missing checkpoint: exit 1, named" || bad "missing checkpoint: exit $rc"

finish
