#!/bin/sh
# The README says what the program does:
#   - its command synopsis is `graphc --help`, line for line (the block after "## The
#     command line"), and every option of `graphc run --help` is in its paragraph of
#     run options;
#   - its sample run (the block after "A run prints") has the lines `graphc run`
#     prints: a short run of models/mnist.net must have a line of the same form for
#     each (numbers, and the "..." the README puts for times, stand for any value).
set -u
LC_ALL=C
export LC_ALL
. "${top_srcdir:-.}/tests/harness.sh"
readme="$top_srcdir/README.md"
g="$top_builddir/graphc"
built "$g"

# block AFTER: the first indented block (4 spaces) after the line starting with AFTER,
# unindented, its blank lines kept, up to the first line that is neither
block() {
    awk -v after="$1" 'index($0, after) == 1 { on = 1; next }
        on && /^    / { started = 1; for (; blank > 0; blank--) print ""; print substr($0, 5); next }
        on && started && /^$/ { blank++; next }
        on && started { exit }' "$readme"
}
block "## The command line" >"$t/readme.help"
"$g" --help | sed '/^FILE may be/,$d' | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >"$t/help"
if [ -s "$t/help" ] && cmp -s "$t/help" "$t/readme.help"; then ok "the README's synopsis is graphc --help"
else bad "the README's synopsis differs from graphc --help:"; diff "$t/readme.help" "$t/help" | head -20; fi

"$g" run --help | grep -o -- '^  --[a-z][a-z-]*' | sed 's/^  //' | sort -u >"$t/run.opts"
missing=
for o in $(cat "$t/run.opts"); do
    [ "$o" = "--help" ] && continue
    sed -n '/^`graphc run` options:/,/^$/p' "$readme" | grep -q -- "\`$o" || missing="$missing $o"
done
[ "$(wc -l <"$t/run.opts")" -ge 15 ] && [ -z "$missing" ] && ok "every graphc run option is in the README" \
    || bad "graphc run options missing from the README:$missing"

# the sample run: each README line as a pattern (numbers and "..." stand for any value,
# the BLAS and core names for any)
block "A run prints" | grep -v '^\.\.\.$' >"$t/sample"
[ "$(wc -l <"$t/sample")" -ge 3 ] && ok "the README has a sample run" || bad "no sample run in the README"
"$g" run "$top_srcdir/models/mnist.net" --epochs 20 --steps 1 --batch 8 --test-limit 20 --threads 2 >"$t/out" 2>&1 \
    || bad "graphc run for the sample"
tr '\r' '\n' <"$t/out" | grep -v '^$' >"$t/lines"
while IFS= read -r line; do
    re=$(printf '%s\n' "$line" | sed -e 's/[][\.*^$()+?{}|/]/\\&/g' -e 's/\\\.\\\.\\\./[^ ]+/g' \
        -e 's/[0-9][0-9]*\(\\\.[0-9][0-9]*\)\{0,1\}/[0-9.]+/g' -e 's/OpenBLAS [^,]*, core [^,]*,/OpenBLAS [^,]+, core [^,]+,/')
    if grep -Eq "^$re\$" "$t/lines"; then ok "graphc run prints a line as: $line"
    else bad "no line of graphc run as: $line"; echo "  pattern: ^$re\$"; sed 's/^/  printed: /' "$t/lines" | head -5; fi
done <"$t/sample"

finish
