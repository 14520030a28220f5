#!/bin/sh
# The layers of graphc's code: a folder may include its own headers and those of the
# folders below it, never one above (docs/architecture.md, "Layers"):
#
#   cli, api, onnx      the command, the C API, ONNX import and export
#   run                 running a model: training loop, evaluation, data, checkpoints
#   exec                the runtime: pipeline, dispatch, executors, memory planner
#   graph   kernels     the IR and its passes | the compute kernels (no graph)
#   parser              the front end
#   util                memory, diagnostics, threads, the elementwise functions' math
#
# Fails, naming the file, the line and the include, for each include across a
# forbidden layer (graph -> exec, kernels -> graph, ...), and for each line of the
# library (every folder but cli/) that prints or exits.
set -u
src=${top_srcdir:-.}
allowed() {   # the folders a file in folder $1 may include
    case $1 in
    util) echo "util" ;;
    parser) echo "util parser" ;;
    graph) echo "util parser graph" ;;
    kernels) echo "util kernels" ;;
    exec) echo "util parser graph kernels exec" ;;
    run) echo "util parser graph kernels exec run" ;;
    onnx) echo "util parser graph kernels exec run onnx" ;;
    api) echo "util parser graph kernels exec run onnx api include" ;;
    cli) echo "util parser graph kernels exec run onnx api include cli" ;;
    esac
}
bad=0 checked=0
for dir in util parser graph kernels exec run onnx api cli; do
    [ -d "$src/$dir" ] || continue
    ok=$(allowed $dir)
    for f in "$src/$dir"/*.c "$src/$dir"/*.h "$src/$dir"/*.y "$src/$dir"/*.l "$src/$dir"/*.def; do
        [ -f "$f" ] || continue
        checked=$((checked + 1))
        # '#include "folder/file"' lines: the folder of each
        grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"/]*/' "$f" | while IFS= read -r line; do
            inc=$(printf '%s\n' "$line" | sed 's/.*include[[:space:]]*"\([^"/]*\)\/.*/\1/')
            case " $ok " in
            *" $inc "*) ;;
            *) echo "FAIL: ${f#$src/}:${line%%:*}: $dir may not include $inc ($(printf '%s' "$line" | sed 's/^[0-9]*://'))" ;;
            esac
        done
    done
done > layers.out
# Library code never prints or exits (errors go to the DiagSink; only cli/ prints):
# no exit(), printf(), puts(), perror(), stdout or stderr outside cli/, but for two
# internal errors that have no sink (the lexer's, the verifier's without one).
for dir in util parser graph kernels exec run onnx api; do
    for f in "$src/$dir"/*.c "$src/$dir"/*.h "$src/$dir"/*.y "$src/$dir"/*.l; do
        [ -f "$f" ] || continue
        case ${f#$src/} in parser/lexer.c | parser/parser.[ch] | onnx/onnx.pb-c.*) continue ;; esac
        sed 's://.*$::' "$f" |
            grep -nE '(^|[^_a-zA-Z0-9.>])(exit|_Exit|printf|vprintf|puts|perror)[[:space:]]*\(|(^|[^_a-zA-Z0-9])(stdout|stderr)([^_a-zA-Z0-9]|$)' |
            grep -v '^[0-9]*:[[:space:]]*\(/\*\|\*\)' | grep -v '"graphc: internal lexer error\|"graphc: verifier: ' |
            while IFS= read -r line; do echo "FAIL: ${f#$src/}:${line%%:*}: library code prints or exits ($(printf '%s' "$line" | sed 's/^[0-9]*:[[:space:]]*//'))"; done
    done
done >> layers.out
bad=$(grep -c '^FAIL' layers.out)
cat layers.out
rm -f layers.out
if [ "$checked" -lt 50 ]; then
    echo "FAIL: only $checked files checked: is top_srcdir ($src) right?"
    exit 1
fi
echo "$checked files checked, $bad includes across a forbidden layer or library lines that print or exit"
[ "$bad" -eq 0 ]
