#!/bin/sh
# Builds the libFuzzer targets with clang (ASan + UBSan + coverage on all of graphc's
# library code) and runs each for a bounded time (fuzz_frontend on model text, and
# fuzz_modelgen on the choice bytes fuzz/modelgen.c turns into valid-looking models,
# both through fuzz/pipeline.c; docs/fuzzing.md).  `make fuzz` calls this; FUZZ_SECONDS
# sets the time per target, FUZZ_JOBS how many run at once
# (default: the cores).  Crashes are written to fuzz-out/TARGET/ and fail the run;
# each one found becomes a regression test (tests/test_frontend.c, tests/test_data.c,
# tests/test_onnx.c, tests/test_checkpoint.c).  The checkpoint campaign is
# fuzz/ckpt_campaign.sh.
set -eu
src=${1:?top_srcdir} build=${2:?top_builddir} seconds=${3:-60}
# absolute: the paths made from them below are used from other folders
src=$(cd "$src" && pwd) build=$(cd "$build" && pwd)
CC=${FUZZ_CC:-clang}
out="$build/fuzz-out"
mkdir -p "$out"
# GRAPHC_NO_DIRECT_CONV: the targets parse files and never run a convolution, and the
# direct kernels' AVX2 code takes clang minutes to instrument (kernels/conv_direct.c)
flags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c11 -D_GNU_SOURCE -DGRAPHC_NO_DIRECT_CONV"
incs="-I$src -I$build -I$src/parser -I$build/parser $(pkg-config --cflags openblas zlib libpng)"
libs="$(pkg-config --libs openblas zlib libpng) -lm -lpthread"
# every target fuzz/fuzz_NAME.c; ONNX import's (onnx/) only when the build has it: its
# generated protobuf code is in the build
targets=$(cd "$src/fuzz" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//')
if [ -f "$build/onnx/onnx.pb-c.c" ]; then
    incs="$incs $(pkg-config --cflags libprotobuf-c)"
    libs="$libs $(pkg-config --libs libprotobuf-c)"
else
    targets=$(for t in $targets; do [ "$t" = onnx ] || echo "$t"; done)
fi
# the library's sources, as the build knows them (the parser and lexer are generated)
lib=""
for f in $(cd "$src" && ls util/*.c graph/*.c kernels/*.c exec/*.c run/*.c parser/ast.c); do lib="$lib $src/$f"; done
for f in parser/parser.c parser/lexer.c; do
    if [ -f "$build/$f" ]; then lib="$lib $build/$f"; else lib="$lib $src/$f"; fi
done
case $targets in *onnx*) for f in $(cd "$src" && ls onnx/*.c | grep -v pb-c) "$build/onnx/onnx.pb-c.c"; do
    case $f in /*) lib="$lib $f" ;; *) lib="$lib $src/$f" ;; esac
done ;; esac
# seeds
for t in $targets; do mkdir -p "$out/seed-$t"; done
cp "$src"/models/*.net "$src"/tests/errors/*.net "$out/seed-frontend/"
# choice bytes: all zeros (the simplest model), and a few patterns
head -c 64 /dev/zero > "$out/seed-modelgen/zeros"
for k in 1 2 3 5 7 11; do
    awk -v k=$k 'BEGIN { for (i = 0; i < 2048; i++) printf "%c", (i * k * 37 + k) % 251 + 1 }' > "$out/seed-modelgen/pattern$k"
done
printf '\0\0\10\1\0\0\0\3\1\2\3' > "$out/seed-idx/labels.idx"
printf '\0\0\10\3\0\0\0\1\0\0\0\2\0\0\0\2\1\2\3\4' > "$out/seed-idx/images.idx"
gzip -c "$out/seed-idx/images.idx" > "$out/seed-idx/images.idx.gz"
cat > "$out/tiny.net" <<'NET'
input x: f32[B, 3]
input y: i32[B]
loss = cross_entropy(dense(relu(dense(x, units=4)), units=2), y)
train { data = synthetic(count=8)
optimizer = adam()
batch = 4
epochs = 1
minimize = loss }
NET
# recipes (fuzz_dataset.c, fuzz_image.c): sets that load and fit; a PGM, a PNG
printf '\200\3\3\5\0\0\7\6\5\0\0\0\0\0\7\6\5\0\0\0\0\1\2\3\4' > "$out/seed-dataset/fit"
printf '\1\1\0\0\0\0\0\0\0\1\2\3\4\5\6' > "$out/seed-dataset/gzip"
# recipes (fuzz_sources.c): one built file of each format, checked against its own shape
for f in 0 1 2 3 4 5; do
    printf "\\$(printf %o $((f + 64)))\3\2\5\0\1\2\3\4\5\6\7\10\11\12\13\14\15\16\17" > "$out/seed-sources/built$f"
done
printf '\0\4\5\7\0\0\0\0\0\0\0\0\0\0\1\2\3' > "$out/seed-image/pgm"
printf '\1\4\5\7\0\0\0\0\0\0\0\0\0\0\1\2\3' > "$out/seed-image/text"
printf '\2\4\5\7\0\0\3\3\0\0\0\0\0\0\1\2\3' > "$out/seed-image/png"
"$build/graphc" run "$out/tiny.net" --log quiet --save "$out/seed-checkpoint/tiny.ckpt" >/dev/null
# and crafted ones, one or two of each kind of damage (fuzz/craft_checkpoints.py)
if command -v python3 >/dev/null 2>&1; then
    python3 "$src/fuzz/craft_checkpoints.py" "$out/seed-checkpoint/tiny.ckpt" "$out/seed-checkpoint" \
        --total-steps 1000 --count 72 && rm -f "$out/seed-checkpoint/manifest.tsv"
fi
case $targets in *onnx*)
    # the small shipped models exported (with their initial weights), and the tiny one
    for m in mlp lenet5 resnet siamese; do
        "$build/tests/onnx_run" init "$src/models/$m.net" "$out/$m.ckpt" 1 2>/dev/null &&
            "$build/graphc" export "$src/models/$m.net" --weights "$out/$m.ckpt" -o "$out/seed-onnx/$m.onnx" >/dev/null || true
    done
    # tiny.net with an output: its layers are the same, so tiny.ckpt serves
    sed 's/^loss = cross_entropy(\(.*\), y)$/output p = softmax(\1)/; /^train/,$d' "$out/tiny.net" > "$out/tiny_out.net"
    "$build/graphc" export "$out/tiny_out.net" --weights "$out/seed-checkpoint/tiny.ckpt" -o "$out/seed-onnx/tiny.onnx" >/dev/null
    ;;
esac
# the library once, two files at a time, instrumented but without libFuzzer's main;
# then each target links it
echo "fuzz: building the library"
objdir="$out/obj"
rm -rf "$objdir" && mkdir -p "$objdir"
objflags=$(echo "$flags" | sed 's/-fsanitize=fuzzer,/-fsanitize=fuzzer-no-link,/')
# The kernels without coverage (still under ASan and UBSan): their compares are loop
# bounds, which lead the fuzzer nowhere, and their trace calls were half the time of a
# model's gradient check (charlm's seed: 8.5 s of CPU against libFuzzer's 10 s timeout).
kernflags=$(echo "$flags" | sed 's/-fsanitize=fuzzer,/-fsanitize=/')
export CC objflags kernflags incs objdir
# shellcheck disable=SC2086,SC2016
printf '%s\n' $lib | xargs -P 2 -n 1 sh -c 'case $1 in */kernels/*) f=$kernflags ;; *) f=$objflags ;; esac
    $CC $f $incs -c "$1" -o "$objdir/$(echo "$1" | tr "/." "__").o"' sh
objs=$(ls "$objdir"/*.o)
for t in $targets; do
    echo "fuzz: building $t"
    extra=""
    case $t in frontend | modelgen) extra="$src/fuzz/modelgen.c $src/fuzz/pipeline.c" ;; esac
    $CC $flags $incs "$src/fuzz/fuzz_$t.c" $extra $objs $libs -o "$out/fuzz_$t"
    mkdir -p "$out/corpus-$t" "$out/$t"
done
# Each target is one process on one core: run as many at once as there are cores
# (FUZZ_JOBS), so that a bounded run costs its time per target over the cores, not the
# sum; each writes its own log, read back in order below.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
echo "fuzz: running $(echo $targets | wc -w) targets for ${seconds}s each, $jobs at a time"
export out seconds
rm -f "$out"/*.status
printf '%s\n' $targets | xargs -P "$jobs" -n 1 sh -c '
    t=$1
    if "$out/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
            -artifact_prefix="$out/$t/" "$out/corpus-$t" "$out/seed-$t" > "$out/$t.log" 2>&1
    then echo ok > "$out/$t.status"; else echo crash > "$out/$t.status"; fi' sh
status=0
for t in $targets; do
    if [ "$(cat "$out/$t.status" 2>/dev/null)" = ok ]; then
        echo "fuzz: $t: $(tail -1 "$out/$t.log")"
    else
        echo "fuzz: $t FOUND A CRASH: see $out/$t.log and $out/$t/"
        tail -30 "$out/$t.log"
        status=1
    fi
done
exit $status
