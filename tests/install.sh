#!/bin/sh
# The installed library, as a C programmer uses it: `make install` into a temporary
# prefix (binary, library, header, pkg-config file, man page), then examples/classify.c
# built with pkg-config against it classifies an image with weights trained by the
# installed graphc.
# And the installed program as the README's quick start uses it: the models, the MNIST
# data and the docs installed too, `graphc check mnist` and a short `graphc run mnist`
# from a folder other than the checkout find the installed model and its data (into a
# prefix, and with DESTDIR), a local mnist.net first, and the man page names where
# they are.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }

if ${MAKE:-make} -C "$top_builddir" install prefix="$t/usr" >"$t/install.log" 2>&1; then ok "make install"
else bad "make install"; tail -20 "$t/install.log"; fi
for f in bin/graphc lib/libgraphc.a include/graphc.h lib/pkgconfig/graphc.pc share/man/man1/graphc.1 \
        share/graphc/models/mnist.net share/graphc/models/charlm.net share/graphc/data/mnist/README.md \
        share/graphc/data/mnist/train-images-idx3-ubyte.gz share/graphc/data/mnist/t10k-labels-idx1-ubyte.gz \
        share/doc/graphc/language.md share/doc/graphc/README.md share/doc/graphc/LICENSE; do
    [ -f "$t/usr/$f" ] && ok "installed $f" || bad "missing $f"
done
n=$(ls "$t/usr/share/graphc/models/"*.net 2>/dev/null | wc -l)
want=$(ls "$top_srcdir/models/"*.net | wc -l)
[ "$n" -eq "$want" ] && ok "all $n models installed" || bad "$n of $want models installed"
# the man page names the installed models, data and docs (configure's prefix: the
# Makefile's, whatever prefix= says at install time)
if grep -q 'share/graphc/models' "$t/usr/share/man/man1/graphc.1" && grep -q 'share/graphc/data/mnist' "$t/usr/share/man/man1/graphc.1" \
    && grep -q 'share/doc/graphc' "$t/usr/share/man/man1/graphc.1" && ! grep -q '@pkgdatadir@\|@docdir@' "$t/usr/share/man/man1/graphc.1"; then
    ok "the man page names where the models, data and docs are"
else
    bad "the man page's FILES"; grep -n 'share\|@' "$t/usr/share/man/man1/graphc.1" | head -5
fi

# The quick start from another folder than the checkout: the installed model by name,
# its mnist("../data/mnist") the installed data
mkdir "$t/elsewhere"
(cd "$t/elsewhere" && "$t/usr/bin/graphc" check mnist) >"$t/out" 2>"$t/err"
grep -q "^$t/usr/share/graphc/models/mnist.net: ok" "$t/out" && ok "graphc check mnist finds the installed model" \
    || { bad "graphc check mnist"; cat "$t/out" "$t/err"; }
grep -Fq "mnist(\"$t/usr/share/graphc/models/../data/mnist\")" "$t/out" && ok "its data: the installed MNIST" \
    || { bad "check mnist's data path"; grep train "$t/out"; }
(cd "$t/elsewhere" && "$t/usr/bin/graphc" run mnist --epochs 1 --steps 2 --batch 16 --test-limit 100 --log quiet) \
    >"$t/out" 2>"$t/err"
grep -Eq "^test_loss [0-9.]+ test_acc [0-9.]+" "$t/out" && ok "graphc run mnist trains the installed model from another folder" \
    || { bad "graphc run mnist from another folder"; cat "$t/out" "$t/err"; }
"$t/usr/bin/graphc" --help >"$t/out" 2>&1
grep -q "$t/usr/share/graphc/models/NAME.net" "$t/out" && grep -q "$t/usr/share/doc/graphc/language.md" "$t/out" \
    && ok "graphc --help names the installed models and docs" || { bad "--help's paths"; tail -3 "$t/out"; }
# a folder of that name here is no model: the installed one is found
mkdir "$t/elsewhere/mnist"
(cd "$t/elsewhere" && "$t/usr/bin/graphc" check mnist) >"$t/out" 2>"$t/err"
grep -q "^$t/usr/share/graphc/models/mnist.net: ok" "$t/out" && ok "a folder named mnist here is no model" \
    || { bad "check mnist beside a folder mnist"; cat "$t/out" "$t/err"; }
rmdir "$t/elsewhere/mnist"
# a model of that name here comes first, then NAME.net here
printf 'input x: f32[B, 4]\noutput y = relu(x)\n' > "$t/elsewhere/mnist.net"
(cd "$t/elsewhere" && "$t/usr/bin/graphc" check mnist) >"$t/out" 2>"$t/err"
grep -q "^mnist.net: ok" "$t/out" && ok "a local mnist.net comes before the installed model" || { bad "local first"; cat "$t/out" "$t/err"; }
(cd "$t/elsewhere" && "$t/usr/bin/graphc" check mnsit) >"$t/out" 2>"$t/err"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot open 'mnsit'.*did you mean 'mnist'" "$t/err" && ok "a mistyped model name: did you mean" \
    || { bad "mnsit: exit $rc"; cat "$t/err"; }
(cd "$t/elsewhere" && "$t/usr/bin/graphc" check nosuchmodel) >"$t/out" 2>"$t/err"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot open 'nosuchmodel'.*in $t/usr/share/graphc/models: .*lenet5, .*mnist" "$t/err" \
    && ok "an unknown model name: where it looked and what is installed" || { bad "nosuchmodel: exit $rc"; cat "$t/err"; }
# with DESTDIR: the binary under DESTDIR finds the models under DESTDIR
if ${MAKE:-make} -C "$top_builddir" install DESTDIR="$t/dest" >"$t/install.log" 2>&1; then
    bin=$(find "$t/dest" -path '*/bin/graphc' | head -n 1)
    (cd "$t/elsewhere" && rm -f mnist.net && "$bin" check mnist) >"$t/out" 2>"$t/err"
    grep -q "^$t/dest/.*/models/mnist.net: ok" "$t/out" && ok "make install DESTDIR: graphc check mnist finds the model under DESTDIR" \
        || { bad "DESTDIR: check mnist"; cat "$t/out" "$t/err"; }
else
    bad "make install DESTDIR"; tail -20 "$t/install.log"
fi
# the installed library exports the C API and nothing else: every other name is local
others=$(nm -g --defined-only "$t/usr/lib/libgraphc.a" 2>/dev/null | awk 'NF == 3 && $3 !~ /^graphc_/ { print $3 }')
napi=$(nm -g --defined-only "$t/usr/lib/libgraphc.a" 2>/dev/null | awk 'NF == 3 && $3 ~ /^graphc_/' | wc -l)
[ -z "$others" ] && [ "$napi" -ge 10 ] && ok "the installed library's global symbols are the $napi graphc_* of the API" \
    || bad "the installed library exports $(printf '%s\n' "$others" | wc -l) other names: $(printf '%s ' $others | cut -c1-200)"
export PKG_CONFIG_PATH="$t/usr/lib/pkgconfig"
# a sanitizer build's library needs the sanitizers' runtimes at link time too
if ${CC:-cc} ${SAN_CFLAGS:-} "$top_srcdir/examples/classify.c" $(pkg-config --cflags --libs graphc) -o "$t/classify" 2>"$t/cc.log"; then
    ok "examples/classify.c builds against the installed library"
else
    bad "examples/classify.c does not build"; cat "$t/cc.log"
fi

# a small model: a dense classifier of 8x8 grey images, trained by the installed graphc
cat > "$t/m.net" <<'NET'
input image: f32[B, 8, 8, 1]
input label: i32[B]
logits = dense(relu(dense(flatten(image), units=16)), units=3)
output probs = softmax(logits)
loss = cross_entropy(logits, label)
train { data = synthetic(count=96); optimizer = adam(lr=0.01); batch = 16; epochs = 20; minimize = loss }
NET
"$t/usr/bin/graphc" run "$t/m.net" --log quiet --save "$t/w.ckpt" >/dev/null 2>"$t/err" && ok "installed graphc trains" \
    || { bad "installed graphc run"; cat "$t/err"; }
{ printf 'P5\n8 8\n255\n'; head -c 64 /dev/zero | tr '\0' '\100'; } > "$t/img.pgm"
if [ -x "$t/classify" ] && "$t/classify" "$t/m.net" "$t/w.ckpt" "$t/img.pgm" >"$t/out" 2>"$t/err" \
    && grep -Eq "img.pgm: class [0-2] \(probability [01]\.[0-9]{4}\)" "$t/out"; then
    ok "classify: $(cat "$t/out")"
else
    bad "classify"; cat "$t/out" "$t/err" 2>/dev/null
fi
# the same image through graphc predict gives the same class
want=$(sed -n 's/.*class \([0-9]\).*/\1/p' "$t/out")
got=$("$t/usr/bin/graphc" predict "$t/m.net" --weights "$t/w.ckpt" --top 1 "$t/img.pgm" 2>/dev/null | sed -n 's/.*:  \([0-9]\) .*/\1/p')
[ -n "$want" ] && [ "$want" = "$got" ] && ok "the library and graphc predict agree (class $got)" || bad "library class '$want', predict '$got'"
# errors come back as statuses with diagnostics, never an exit from inside the library
"$t/classify" "$t/m.net" "$t/missing.ckpt" "$t/img.pgm" >/dev/null 2>"$t/err"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot open checkpoint" "$t/err" && ok "a missing checkpoint: status and message" || { bad "missing checkpoint: $rc"; cat "$t/err"; }
printf 'input x: f32[B, 4]\noutput y = relux(x)\n' > "$t/bad.net"
"$t/classify" "$t/bad.net" "$t/w.ckpt" "$t/img.pgm" >/dev/null 2>"$t/err"; rc=$?
[ $rc -eq 1 ] && grep -q "bad.net:2:12: error: unknown function 'relux'" "$t/err" && ok "a bad model: its diagnostics" || { bad "bad model: $rc"; cat "$t/err"; }

# models/mnist.net itself, as examples/README.md shows: weights from two training steps
# (the pipeline, not the accuracy, is under test here), a real test digit as PGM
"$t/usr/bin/graphc" run "$top_srcdir/models/mnist.net" --data "$top_srcdir/data/mnist" --epochs 1 --steps 2 \
    --test-limit 100 --log quiet --save "$t/mnist.ckpt" >/dev/null 2>"$t/err" || { bad "mnist.net weights"; cat "$t/err"; }
{ printf 'P5\n28 28\n255\n'; gzip -dc "$top_srcdir/data/mnist/t10k-images-idx3-ubyte.gz" | dd bs=16 skip=1 count=49 2>/dev/null; } > "$t/digit.pgm"
if [ -x "$t/classify" ] && "$t/classify" "$top_srcdir/models/mnist.net" "$t/mnist.ckpt" "$t/digit.pgm" >"$t/out" 2>"$t/err" \
    && grep -Eq "digit.pgm: class [0-9] \(probability [01]\.[0-9]{4}\)" "$t/out"; then
    ok "classify with models/mnist.net: $(cat "$t/out")"
else
    bad "classify with models/mnist.net"; cat "$t/out" "$t/err" 2>/dev/null
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
