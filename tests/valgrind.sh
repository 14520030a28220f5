#!/bin/sh
# A short training run, in both modes, under valgrind's memcheck: no invalid read or
# write, no use of uninitialised memory, no definite leak.  Skipped (77) without
# valgrind, or in a sanitizer build (ASan and valgrind do not mix).
. "${top_srcdir:-.}/tests/harness.sh"
command -v valgrind >/dev/null 2>&1 || { echo "SKIP: valgrind is not installed"; exit 77; }
case "${SAN_CFLAGS:-}" in *sanitize*) echo "SKIP: sanitizer build"; exit 77 ;; esac
for mode in compiled interp; do
    if valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        "$top_builddir/graphc" run "$top_srcdir/tests/valgrind.net" --mode $mode --threads 2 --log quiet \
        --save "$t/w.ckpt" >"$t/out" 2>"$t/err"; then
        ok "memcheck, $mode mode"
    else
        bad "memcheck, $mode mode"; cat "$t/err"
    fi
done
if valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    "$top_builddir/graphc" eval "$top_srcdir/tests/valgrind.net" --weights "$t/w.ckpt" >"$t/out" 2>"$t/err"; then
    ok "memcheck, eval of the checkpoint"
else
    bad "memcheck, eval"; cat "$t/err"
fi
finish
