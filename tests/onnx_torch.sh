#!/bin/sh
# PyTorch's exports of the shipped networks imported by graphc and run with PyTorch's
# outputs (tests/onnx_torch.py, with Debian's python3-torch; skipped with a message
# when it, NumPy or ONNX support is missing).
set -u
if ! "${top_builddir:-.}/graphc" --version | grep -q "with ONNX"; then
    echo "SKIP: this graphc is built without ONNX"
    exit 77
fi
. "${top_srcdir:-.}/tests/torch_env.sh"
# torch's exporter warns about its own internals on stderr: kept out of the log
"$PY" "$top_srcdir/tests/onnx_torch.py" "$top_builddir/graphc" "$top_builddir/tests/onnx_run" "$t" 2>"$t/stderr"
rc=$?
[ $rc -eq 0 ] || cat "$t/stderr"
exit $rc
