#!/bin/sh
# Models that once crashed or misbehaved past `graphc check` (found by the models
# campaign, docs/fuzzing.md): each tests/regress/NAME.net says what it was and, on a
# line "# expect: ok" or "# expect: error TEXT", what graphc must do now.  Each goes
# through check, every stage's dump, and a short run in both modes; "ok" means every
# command exits 0, "error TEXT" that the run exits 1 with TEXT on stderr; and never a
# crash or a sanitizer report.  Runs in a scratch folder holding a link to data/.
#
# The last line is "N passed, M failed"; the exit status is 1 if M > 0.

set -u
LC_ALL=C
export LC_ALL

. "${top_srcdir:-.}/tests/harness.sh"
GRAPHC=$abs_top_builddir/graphc
built "$GRAPHC"
ln -s "$abs_top_srcdir/data" "$t/data"

for model in "$abs_top_srcdir"/tests/regress/*.net; do
    name=$(basename "$model")
    cp "$model" "$t/$name"
    expect=$(sed -n 's/^# expect: //p' "$model" | head -n 1)
    good=1
    why=""
    cd "$t" || exit 99
    for cmd in "check" "dump --stage ast --format json" "dump --stage graph" "dump --stage train" \
               "dump --stage fused --format json" "dump --stage planned" \
               "run --log quiet --threads 1" "run --log quiet --threads 1 --mode interp"; do
        # shellcheck disable=SC2086
        "$GRAPHC" $cmd "$name" > out.txt 2> err.txt
        rc=$?
        if [ $rc -gt 1 ] || grep -q -e Sanitizer -e 'runtime error' err.txt; then
            good=0; why="$why; $cmd: exit $rc"
        elif [ "$expect" = ok ] && [ $rc -ne 0 ]; then
            good=0; why="$why; $cmd: exit $rc: $(head -n 1 err.txt)"
        elif [ "$expect" != ok ] && [ "${cmd#run}" != "$cmd" ] && { [ $rc -ne 1 ] || ! grep -q -F "${expect#error }" err.txt; }; then
            good=0; why="$why; $cmd: exit $rc, not '${expect#error }'"
        fi
    done
    cd - > /dev/null || exit 99
    if [ $good = 1 ]; then ok "$name"; else bad "$name$why"; fi
done
finish
