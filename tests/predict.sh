#!/bin/sh
# graphc predict on the command line, and examples/classify.c beside it:
#   - every bad image is reported (naming the file and what it is), the good ones are
#     classified as they are alone, and the exit status is 1 when any was bad;
#   - the image readers' error paths leak nothing (valgrind in a plain build; in a
#     sanitizer build, ASan's leak check fails the command itself);
#   - examples/classify reads examples/digit.pgm (a header with a comment line) and
#     agrees with graphc predict on it, class and probability.
set -u
. "${top_srcdir:-.}/tests/harness.sh"
g="$top_builddir/graphc"
# no sanitizer report in a file of stderr
clean() { ! grep -Eq "Sanitizer|runtime error" "$1"; }

cat > "$t/m.net" <<'NET'
input image: f32[B, 28, 28, 1]
input label: i32[B]
logits = dense(flatten(image), units=10)
output probs = softmax(logits)
loss = cross_entropy(logits, label)
train { data = synthetic(count=64); optimizer = adam(lr=0.01); batch = 16; epochs = 2; minimize = loss }
NET
"$g" run "$t/m.net" --log quiet --save "$t/w.ckpt" >/dev/null 2>"$t/err" || { cat "$t/err"; exit 1; }

# images: two good PGMs, and a PPM, a "P9", a PNG cut after its signature, a folder,
# a missing file
cp "$top_srcdir/examples/digit.pgm" "$t/a.pgm"
{ printf 'P2\n28 28\n255\n'; i=0; while [ $i -lt 784 ]; do echo $((i % 256)); i=$((i + 1)); done; } > "$t/b.pgm"
{ printf 'P6\n28 28\n255\n'; head -c 2352 /dev/zero; } > "$t/c.ppm"
{ printf 'P9\n28 28\n255\n'; head -c 784 /dev/zero; } > "$t/d.pgm"
printf '\211PNG\r\n\032\n' > "$t/e.png"
mkdir "$t/f.pgm"

"$g" predict "$t/m.net" --weights "$t/w.ckpt" "$t/a.pgm" >"$t/a.out" 2>"$t/err" && clean "$t/err" || bad "a.pgm alone"
"$g" predict "$t/m.net" --weights "$t/w.ckpt" "$t/b.pgm" >"$t/b.out" 2>"$t/err" && clean "$t/err" || bad "b.pgm alone"
"$g" predict "$t/m.net" --weights "$t/w.ckpt" "$t/c.ppm" "$t/a.pgm" "$t/d.pgm" "$t/e.png" "$t/b.pgm" "$t/f.pgm" \
    "$t/missing.pgm" >"$t/out" 2>"$t/err"
rc=$?
[ $rc -eq 1 ] && ok "a mix of good and bad images: exit 1" || bad "a mix: exit $rc"
cat "$t/a.out" "$t/b.out" > "$t/want"
cmp -s "$t/out" "$t/want" && ok "the good ones classified as they are alone, in order" \
    || { bad "the good ones' predictions"; cat "$t/out" "$t/want"; }
for want in "c.ppm: a PPM image (P6, binary colour), which graphc does not read" \
        "d.pgm: unknown Netpbm format 'P9'" "e.png: bad PNG: the file ends early" \
        "f.pgm: cannot read: Is a directory" "missing.pgm: cannot open: No such file"; do
    grep -Fq "$want" "$t/err" && ok "reported: $want" || { bad "not reported: $want"; cat "$t/err"; }
done
n=$(grep -c "error:" "$t/err")
[ "$n" -eq 5 ] && clean "$t/err" && ok "five errors, nothing else" || { bad "$n errors"; cat "$t/err"; }
# more bad images than a diagnostic sink shows by default (20): each one named
i=0; set --; while [ $i -lt 25 ]; do cp "$t/c.ppm" "$t/many$i.ppm"; set -- "$@" "$t/many$i.ppm"; i=$((i + 1)); done
"$g" predict "$t/m.net" --weights "$t/w.ckpt" "$@" "$t/a.pgm" >"$t/out" 2>"$t/err"
n=$(grep -c "many[0-9]*.ppm: a PPM image" "$t/err")
[ "$n" -eq 25 ] && [ "$(wc -l < "$t/out")" -eq 1 ] && ok "25 bad images: 25 errors, the good one classified" \
    || { bad "25 bad images: $n named"; tail -3 "$t/err"; }
"$g" predict "$t/m.net" --weights "$t/w.ckpt" "$t/c.ppm" "$t/e.png" >"$t/out" 2>"$t/err"
rc=$?
[ $rc -eq 1 ] && [ ! -s "$t/out" ] && clean "$t/err" && ok "only bad images: exit 1, no prediction" \
    || { bad "only bad images: exit $rc"; cat "$t/out" "$t/err"; }

# the readers' error paths under valgrind (a sanitizer build checked them above)
case "${SAN_CFLAGS:-}" in
*sanitize*) ;;
*)
    if command -v valgrind >/dev/null 2>&1; then
        # a 28x28 PNG with valid CRCs and one row of pixels: libpng fails in the pixels,
        # after the reader has allocated its rows
        printf '\211\120\116\107\015\012\032\012\000\000\000\015\111\110\104\122\000\000\000\034\000\000\000\034\010\000\000\000\000\127\146\200\110\000\000\000\013\111\104\101\124\170\332\143\140\300\003\000\000\035\000\001\374\216\142\076\000\000\000\000\111\105\116\104\256\102\140\202' > "$t/g.png"
        valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite "$g" predict "$t/m.net" \
            --weights "$t/w.ckpt" "$t/a.pgm" "$t/c.ppm" "$t/d.pgm" "$t/e.png" "$t/g.png" >/dev/null 2>"$t/err"
        rc=$?
        if [ $rc -eq 1 ] && grep -q "g.png: bad PNG" "$t/err" && [ "$(grep -c "error:" "$t/err")" -eq 4 ]; then
            ok "memcheck: the image readers' error paths"
        else
            bad "memcheck: exit $rc"; cat "$t/err"
        fi
    fi
    ;;
esac

# examples/classify.c on the shipped digit, beside graphc predict
c="$top_builddir/examples/classify"
if "$c" "$t/m.net" "$t/w.ckpt" "$top_srcdir/examples/digit.pgm" >"$t/out" 2>"$t/err" && clean "$t/err"; then
    ok "classify reads examples/digit.pgm: $(cat "$t/out")"
else
    bad "classify on examples/digit.pgm"; cat "$t/out" "$t/err"
fi
cls=$(sed -n 's/.*: class \([0-9]\) (probability \([0-9.]*\))/\1 \2/p' "$t/out")
top=$(sed -n 's/^[^:]*:  \([0-9]\) (\([0-9.]*\)).*/\1 \2/p' "$t/a.out")
[ -n "$cls" ] && [ "$cls" = "$top" ] && ok "classify and graphc predict agree: $cls" || bad "classify '$cls', predict '$top'"
"$c" "$t/m.net" "$t/w.ckpt" "$t/c.ppm" >/dev/null 2>"$t/err"
rc=$?
[ $rc -eq 1 ] && grep -q "c.ppm: not a 28x28 binary PGM" "$t/err" && ok "classify refuses a PPM" \
    || { bad "classify on a PPM: exit $rc"; cat "$t/err"; }

finish
