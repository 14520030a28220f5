#!/bin/sh
# The installed libraries, as a C programmer uses them: `make install` into a temporary
# prefix (binary, shared and static library, header, pkg-config file, man page), then
# examples/classify.c built with pkg-config against each library classifies an image
# with weights trained by the installed graphc.
# And the installed program as the README's quick start uses it: the models, the MNIST
# data and the docs installed too, `graphc check mnist` and a short `graphc run mnist`
# from a folder other than the checkout find the installed model and its data (into a
# prefix, and with DESTDIR), a local mnist.net first, and the man page names where
# they are.
set -u
. "${top_srcdir:-.}/tests/harness.sh"

if ${MAKE:-make} -C "$top_builddir" install prefix="$t/usr" >"$t/install.log" 2>&1; then ok "make install"
else bad "make install"; tail -20 "$t/install.log"; fi
for f in bin/graphc lib/libgraphc.a lib/libgraphc.so lib/libgraphc.so.0 share/graphc/python/graphc.py include/graphc.h lib/pkgconfig/graphc.pc share/man/man1/graphc.1 \
        share/graphc/models/mnist.net share/graphc/models/charlm.net share/graphc/data/mnist/README.md \
        share/graphc/data/mnist/train-images-idx3-ubyte.gz share/graphc/data/mnist/t10k-labels-idx1-ubyte.gz \
        share/doc/graphc/language.md share/doc/graphc/README.md share/doc/graphc/LICENSE; do
    [ -f "$t/usr/$f" ] && ok "installed $f" || bad "missing $f"
done
# every doc in docs/ (a new one left out of docs/local.mk's list would be missing
# from the tarball and the installation alike)
missing=
for d in "$top_srcdir/docs/"*.md; do
    [ -f "$t/usr/share/doc/graphc/$(basename "$d")" ] || missing="$missing $(basename "$d")"
done
[ -z "$missing" ] && ok "every docs/*.md installed" || bad "docs not installed:$missing"
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
soname=$(readelf -d "$t/usr/lib/libgraphc.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libgraphc.so.0 ] && ok "the shared library's soname is $soname" || bad "soname '$soname', not libgraphc.so.0"
# each installed library exports the C API and nothing else: every other name is local
exports() { nm "$@" --defined-only 2>/dev/null | awk 'NF == 3 && $2 ~ /^[A-TV-Z]$/ { print $3 }'; }
for lib in "-g $t/usr/lib/libgraphc.a" "-D $t/usr/lib/libgraphc.so"; do
    others=$(exports $lib | grep -v '^graphc_')
    napi=$(exports $lib | grep -c '^graphc_')
    [ -z "$others" ] && [ "$napi" -ge 10 ] && ok "${lib##*/}: its global symbols are the $napi graphc_* of the API" \
        || bad "${lib##*/} exports $(printf '%s\n' "$others" | wc -l) other names: $(printf '%s ' $others | cut -c1-200)"
done
export PKG_CONFIG_PATH="$t/usr/lib/pkgconfig"
# the dependencies are pkg-config modules (Requires.private), not paths of this machine
grep -q '^Requires.private: openblas zlib libpng' "$t/usr/lib/pkgconfig/graphc.pc" && ! grep -q '/usr/lib' "$t/usr/lib/pkgconfig/graphc.pc" \
    && ok "graphc.pc: $(grep '^Requires.private' "$t/usr/lib/pkgconfig/graphc.pc")" || { bad "graphc.pc"; cat "$t/usr/lib/pkgconfig/graphc.pc"; }
# examples/classify.c against each library: the shared one as pkg-config gives it (the
# program then needs it at run time), the static one with --static (it does not); a
# sanitizer build's libraries need the sanitizers' runtimes at link time too
src="$top_srcdir/examples/classify.c"
if ${CC:-cc} ${SAN_CFLAGS:-} "$src" $(pkg-config --cflags --libs graphc) -o "$t/classify-shared" 2>"$t/cc.log" \
    && readelf -d "$t/classify-shared" | grep -q 'NEEDED.*\[libgraphc\.so\.0\]'; then
    ok "examples/classify.c builds against the installed shared library"
else
    bad "examples/classify.c does not build against libgraphc.so"; cat "$t/cc.log"
fi
static_libs=$(pkg-config --static --libs graphc | sed 's/-lgraphc\b/-l:libgraphc.a/')
if ${CC:-cc} ${SAN_CFLAGS:-} "$src" $(pkg-config --cflags graphc) $static_libs -o "$t/classify-static" 2>"$t/cc.log" \
    && ! readelf -d "$t/classify-static" | grep -q 'NEEDED.*libgraphc'; then
    ok "examples/classify.c builds against the installed static library"
else
    bad "examples/classify.c does not build against libgraphc.a"; cat "$t/cc.log"
fi
export LD_LIBRARY_PATH="$t/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

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
"$t/usr/bin/graphc" run "$top_srcdir/models/mnist.net" --data "$top_srcdir/data/mnist" --epochs 1 --steps 2 \
    --test-limit 100 --log quiet --save "$t/mnist.ckpt" >/dev/null 2>"$t/err" || { bad "mnist.net weights"; cat "$t/err"; }
{ printf 'P5\n28 28\n255\n'; gzip -dc "$top_srcdir/data/mnist/t10k-images-idx3-ubyte.gz" | dd bs=16 skip=1 count=49 2>/dev/null; } > "$t/digit.pgm"
printf 'input x: f32[B, 4]\noutput y = relux(x)\n' > "$t/bad.net"
# the same image through graphc predict gives the same class
want=$("$t/usr/bin/graphc" predict "$t/m.net" --weights "$t/w.ckpt" --top 1 "$t/img.pgm" 2>/dev/null | sed -n 's/.*:  \([0-9]\) .*/\1/p')
for kind in shared static; do
    c="$t/classify-$kind"
    if [ -x "$c" ] && "$c" "$t/m.net" "$t/w.ckpt" "$t/img.pgm" >"$t/out" 2>"$t/err" \
        && grep -Eq "img.pgm: class [0-2] \(probability [01]\.[0-9]{4}\)" "$t/out"; then
        ok "classify ($kind): $(cat "$t/out")"
    else
        bad "classify ($kind)"; cat "$t/out" "$t/err" 2>/dev/null
    fi
    got=$(sed -n 's/.*class \([0-9]\).*/\1/p' "$t/out")
    [ -n "$want" ] && [ "$want" = "$got" ] && ok "the $kind library and graphc predict agree (class $got)" \
        || bad "$kind library class '$got', predict '$want'"
    # errors come back as statuses with messages, never an exit from inside the library
    "$c" "$t/m.net" "$t/missing.ckpt" "$t/img.pgm" >/dev/null 2>"$t/err"; rc=$?
    [ $rc -eq 1 ] && grep -q "cannot open checkpoint" "$t/err" && ok "$kind: a missing checkpoint: status and message" \
        || { bad "$kind: missing checkpoint: $rc"; cat "$t/err"; }
    "$c" "$t/bad.net" "$t/w.ckpt" "$t/img.pgm" >/dev/null 2>"$t/err"; rc=$?
    [ $rc -eq 1 ] && grep -q "bad.net:2:12: error: unknown function 'relux'" "$t/err" && ok "$kind: a bad model: its diagnostics" \
        || { bad "$kind: bad model: $rc"; cat "$t/err"; }
    # models/mnist.net itself, as examples/README.md shows: weights from two training
    # steps (the pipeline, not the accuracy, is under test here), a real test digit
    if [ -x "$c" ] && "$c" "$top_srcdir/models/mnist.net" "$t/mnist.ckpt" "$t/digit.pgm" >"$t/out-$kind" 2>"$t/err" \
        && grep -Eq "digit.pgm: class [0-9] \(probability [01]\.[0-9]{4}\)" "$t/out-$kind"; then
        ok "classify ($kind) with models/mnist.net: $(cat "$t/out-$kind")"
    else
        bad "classify ($kind) with models/mnist.net"; cat "$t/out-$kind" "$t/err" 2>/dev/null
    fi
done
cmp -s "$t/out-shared" "$t/out-static" && ok "both libraries give the same probability" || bad "the libraries disagree"

# the installed Python module over the installed library, as the README sets it up (not
# in a sanitizer build: tests/python.sh runs the module there, with the runtimes preloaded)
py=/usr/bin/python3
if [ -z "${SAN_CFLAGS:-}" ] && [ -x $py ] && $py -c 'import numpy' 2>/dev/null; then
    if (unset GRAPHC_LIBRARY; PYTHONPATH="$t/usr/share/graphc/python" $py -c '
import sys, numpy as np, graphc
with graphc.Model(sys.argv[1]) as m:
    m.load_weights(sys.argv[2])
    img = np.frombuffer(open(sys.argv[3], "rb").read()[-784:], np.uint8)
    p = m.predict((img.astype(np.float32) / np.float32(255)).reshape(1, 28, 28, 1))[0]
    print("%s: class %d (probability %.4f)" % (sys.argv[3], p.argmax(), p.max()))
' "$top_srcdir/models/mnist.net" "$t/mnist.ckpt" "$t/digit.pgm" >"$t/out-py" 2>"$t/err") && cmp -s "$t/out-py" "$t/out-shared"; then
        ok "the installed Python module agrees: $(cat "$t/out-py")"
    else
        bad "the installed Python module"; cat "$t/out-py" "$t/err"
    fi
else
    echo "SKIP: the installed Python module (a sanitizer build, or no $py with numpy)"
fi

finish
