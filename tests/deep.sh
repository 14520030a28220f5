#!/bin/sh
# Deeply nested expressions through the command line, under small stacks.
#
# The parser refuses an expression nested more than AST_MAX_DEPTH = 1000 levels (each
# call, operator, keyword argument, list, indexing and pair of brackets a level;
# parser/ast.h), naming the file, line and column of the level that goes past.  That
# bound is what keeps every recursive walk over a tree within the C stack: lowering's
# eval (and its check for cycles) and the ast dumps are the only ones (the graph's walks
# are loops over its nodes; the ONNX emitter's and reader's recursions have bounds of
# their own).  What the deepest tree takes, measured with `ulimit -s` on this script's
# models after the merge of lists and indexings (December 2026, gcc 12, -O2):
#     graphc check at 1000 levels     170-178 KB (release)   238-246 KB (ASan + UBSan)
#     graphc check at  500 levels      91 KB                 131 KB
#     a 3-line model                   23 KB                  23 KB
# (brackets alone add no frame: 27 and 31 KB), so about 155 bytes a level (220 with the
# sanitizers) above the base, and the 1000 levels the code accepts need at most 256 KB
# of stack in either build.  Checked here: every model at the limit goes through check,
# the dumps and a short run (lists, and tensors as slice bounds, through check and the
# dumps: lowering refuses them), and every model just past it gives the error, with no
# crash, under the default 8 MB stack and under 1 MB (a quarter of that used: room for
# frames that grow).
#
# Works from a separate build dir and under make distcheck; the last line is "N passed,
# M failed", and the exit status is 1 if M > 0.

set -u
LC_ALL=C
export LC_ALL

. "${top_srcdir:-.}/tests/harness.sh"
GRAPHC=$abs_top_builddir/graphc
built "$GRAPHC"
cd "$t" || exit 99

LIMIT=1000

# model SHAPE LEVELS FILE: `y = EXPR` with EXPR exactly LEVELS levels deep
model() {
    awk -v shape="$1" -v n="$2" 'BEGIN {
        printf "input x: f32[B, 4]\ny = "
        if (shape == "chain") {                  # x + x + ... : n terms, n levels
            printf "x"; for (i = 1; i < n; i++) printf " + x"
        } else if (shape == "index") {           # x[:, 0:4][:, 0:4]... : n - 1 indexings
            printf "x"; for (i = 1; i < n; i++) printf "[:, 0:4]"
        } else {
            open["call"] = "relu("; close_["call"] = ")"
            open["add"] = "add(x, "; close_["add"] = ")"
            open["neg"] = "-"; close_["neg"] = ""
            open["paren"] = "("; close_["paren"] = ")"
            open["mixed"] = "x * -("; close_["mixed"] = ")"   # operator, minus, bracket: 3 levels
            open["slice"] = "x[:, 0:"; close_["slice"] = "]"  # the parser'"'"'s most symbols a level
            open["list"] = "[0, "; close_["list"] = ", 1]"
            step = shape == "mixed" ? 3 : 1
            k = int((n - 1) / step)
            for (i = 0; i < k; i++) printf "%s", open[shape]
            for (i = k * step; i < n - 1; i++) printf "relu("
            printf "x"
            for (i = k * step; i < n - 1; i++) printf ")"
            for (i = 0; i < k; i++) printf "%s", close_[shape]
        }
        printf "\noutput y\n"
    }' > "$3"
}

# A training model whose loss is LIMIT levels deep (cross_entropy, LIMIT - 4 unary
# calls, then dense(x, units=3): the call, its keyword and the 3), for the stages
# after the graph.
train_model() {
    awk -v n="$LIMIT" 'BEGIN {
        printf "input x: f32[B, 4]\ninput y: i32[B]\nloss = cross_entropy("
        for (i = 0; i < n - 4; i++) printf "%s", i % 2 ? "tanh(" : "relu("
        printf "dense(x, units=3)"
        for (i = 0; i < n - 4; i++) printf ")"
        printf ", y)\ntrain { data = synthetic(count=32); batch = 4; steps = 2; minimize = loss }\n"
    }' > "$1"
}

# runs "$@" under a stack of $stack KB; sets rc, out (stdout) and err (stderr)
run() {
    (ulimit -s "$stack" && exec "$@") > out.txt 2> err.txt
    rc=$?
    out=$(cat out.txt)
    err=$(cat err.txt)
}

sane() {   # no crash and no sanitizer report in the last run
    [ "$rc" -le 1 ] && ! grep -q -e Sanitizer -e 'runtime error' err.txt
}

for stack in 8192 1024; do
    for shape in call add chain neg paren mixed index slice list; do
        model "$shape" "$LIMIT" at.net
        good=1
        case $shape in
        slice | list)   # parsed and dumped; lowering refuses a tensor as an index or a list item
            for cmd in "dump --stage ast" "dump --stage ast --format json" "check"; do
                # shellcheck disable=SC2086
                run "$GRAPHC" $cmd at.net
                want=0; [ "$cmd" = check ] && want=1
                if [ "$rc" -ne $want ] || ! sane || grep -q "nested too deeply" err.txt ||
                    { [ $want = 1 ] && ! grep -q "^at.net:2:[0-9]*: error: " err.txt; }; then
                    good=0
                    echo "  $cmd: exit $rc"; head -c 400 err.txt
                fi
            done ;;
        *)
            for cmd in "check" "dump --stage ast" "dump --stage ast --format json" "dump --stage graph --format json"; do
                # shellcheck disable=SC2086
                run "$GRAPHC" $cmd at.net
                if [ "$rc" -ne 0 ] || ! sane || [ -z "$out" ]; then
                    good=0
                    echo "  $cmd: exit $rc"; head -c 400 err.txt
                fi
            done ;;
        esac
        [ $good = 1 ] && ok "$shape, $LIMIT levels, ${stack} KB stack: check and dumps" || bad "$shape, $LIMIT levels, ${stack} KB stack"

        model "$shape" $((LIMIT + 1)) past.net
        run "$GRAPHC" check past.net
        want="past.net:2:5: error: expression nested too deeply (more than $LIMIT levels)"
        first=$(head -n 1 err.txt)
        if [ "$rc" -eq 1 ] && sane && [ "$first" = "$want" ] && [ -z "$out" ]; then
            ok "$shape, $((LIMIT + 1)) levels, ${stack} KB stack: refused"
        else
            bad "$shape, $((LIMIT + 1)) levels, ${stack} KB stack: exit $rc, '$first'"
        fi
    done

    # far past: the parser's own stack fills before any tree is built (20,000 brackets)
    model paren 20000 far.net
    run "$GRAPHC" check far.net
    if [ "$rc" -eq 1 ] && sane && grep -q "^far.net:2:[0-9]*: error: expression nested too deeply (more than $LIMIT levels)$" err.txt &&
        [ "$(grep -c ': error: ' err.txt)" -eq 1 ]; then
        ok "20000 brackets, ${stack} KB stack: one error"
    else
        bad "20000 brackets, ${stack} KB stack: exit $rc"; head -c 400 err.txt
    fi

    train_model train.net
    good=1
    for cmd in "check" "dump --stage train" "dump --stage fused --format json" "dump --stage planned" \
               "run --log quiet" "run --log quiet --mode interp"; do
        # shellcheck disable=SC2086
        run "$GRAPHC" $cmd train.net
        if [ "$rc" -ne 0 ] || ! sane; then
            good=0
            echo "  $cmd: exit $rc"; head -c 400 err.txt
        fi
    done
    [ $good = 1 ] && ok "a loss $LIMIT levels deep, ${stack} KB stack: every stage and a run" ||
        bad "a loss $LIMIT levels deep, ${stack} KB stack"
done

finish
