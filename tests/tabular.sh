#!/bin/sh
# The shipped csv() and npy() models train to what docs/training.md says, and NumPy's
# own files load:
#   - models/spirals.net (data/tabular/spirals.csv, classes by name) above 90% test
#     accuracy, where the same network without its hidden layers stays below 60%;
#   - models/rings.net (data/tabular/rings.npz, deflated zip64 members) above 90%;
#   - with Debian's python3-numpy: numpy.save of each dtype, numpy.savez and
#     savez_compressed train a model, and Fortran order, an object array and a
#     big-endian array are refused or read as docs/language.md says.
set -u
. "${top_srcdir:-.}/tests/harness.sh"
g=$abs_top_builddir/graphc
# test accuracy from `graphc run --log quiet`: "test_loss L test_acc A"
acc() { awk '/^test_loss/ { print $4 }' "$1"; }
above() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

cd "$top_srcdir" || exit 1
"$g" run models/spirals.net --log quiet >"$t/out" 2>"$t/err" || { cat "$t/err"; exit 1; }
a=$(acc "$t/out")
above "$a" 0.9 && ok "spirals.net: test accuracy $a > 0.9" || bad "spirals.net: test accuracy $a"
sed -e "s|\"\.\./data/|\"$PWD/data/|" -e '/^h = dense(h, units=64/d' -e 's/^h = dense(x, units=64, activation="relu")/h = x/' models/spirals.net > "$t/linear.net"
"$g" run "$t/linear.net" --log quiet >"$t/out" 2>"$t/err" || { cat "$t/err"; exit 1; }
a=$(acc "$t/out")
above 0.6 "$a" && ok "spirals without hidden layers: $a < 0.6" || bad "spirals, linear: test accuracy $a"
"$g" run models/rings.net --log quiet >"$t/out" 2>"$t/err" || { cat "$t/err"; exit 1; }
a=$(acc "$t/out")
above "$a" 0.9 && ok "rings.net: test accuracy $a > 0.9" || bad "rings.net: test accuracy $a"

py=/usr/bin/python3
if ! "$py" -c "import numpy" 2>/dev/null; then
    echo "SKIP: NumPy's files: $py has no numpy (Debian's python3-numpy)"
else
    cd "$t" || exit 1
    "$py" - <<'PY'
import numpy as np
rng = np.random.default_rng(5)
x = rng.normal(size=(64, 3))
y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
for dt in ["float32", "float64", "uint8", "int32", "int64"]:
    np.save("x_%s.npy" % dt, (x * 4 + 8).astype(dt) if dt in ("uint8",) else x.astype(dt))
np.save("y.npy", y)
np.save("y64.npy", y.astype(np.int64))
np.savez("plain.npz", x=x.astype(np.float32), y=y)
np.savez_compressed("packed.npz", x=x.astype(np.float32), y=y, x_test=x[:16].astype(np.float32), y_test=y[:16])
np.save("fortran.npy", np.asfortranarray(x.reshape(64, 3)))
np.save("object.npy", np.array([[1, "a", None]] * 64, dtype=object), allow_pickle=True)
np.save("big.npy", x.astype(">f4"))
PY
    net() {
        cat > "$t/m.net" <<NET
input x: f32[B, 3]
input y: i32[B]
loss = cross_entropy(dense(x, units=2), y)
train { data = $1; batch = 8; epochs = 2; optimizer = adam(lr=0.05); minimize = loss }
NET
    }
    for dt in float32 float64 uint8 int32 int64; do
        net "npy(x=\"$t/x_$dt.npy\", y=\"$t/y.npy\")"
        "$g" run "$t/m.net" --log quiet >"$t/out" 2>"$t/err" && ok "numpy.save $dt" || { bad "numpy.save $dt"; cat "$t/err"; }
    done
    for f in plain packed; do
        net "npy(x=\"$t/$f.npz\")"
        "$g" run "$t/m.net" --log quiet >"$t/out" 2>"$t/err" && ok "$f.npz" || { bad "$f.npz"; cat "$t/err"; }
    done
    net "npy(x=\"$t/big.npy\", y=\"$t/y64.npy\")"
    "$g" run "$t/m.net" --log quiet >"$t/out" 2>"$t/err" && ok "a big-endian array is converted" \
        || { bad "big-endian"; cat "$t/err"; }
    net "npy(x=\"$t/fortran.npy\", y=\"$t/y.npy\")"
    "$g" run "$t/m.net" --log quiet >"$t/out" 2>"$t/err"
    [ $? -eq 1 ] && grep -q "fortran.npy: header field 'fortran_order' is True" "$t/err" \
        && ok "Fortran order refused, the field named" || { bad "Fortran order"; cat "$t/err"; }
    net "npy(x=\"$t/object.npy\", y=\"$t/y.npy\")"
    "$g" run "$t/m.net" --log quiet >"$t/out" 2>"$t/err"
    [ $? -eq 1 ] && grep -q "object.npy: header field 'descr' is '|O' (Python objects)" "$t/err" \
        && ok "an object array refused, the field named" || { bad "object array"; cat "$t/err"; }
fi

finish
