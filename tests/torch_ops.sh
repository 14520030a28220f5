#!/bin/sh
# The transformer ops and models/charlm.net against PyTorch 1.13 on the same weights and
# batch: the loss and every parameter's gradient within 1e-5 relative
# (tests/torch_ops.py, with tests/torch_run making graphc's side).  Skipped with a
# message when Debian's python3-torch is missing.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
PY=${TORCH_PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch, numpy" >/dev/null 2>&1; then
    echo "SKIP: $PY has no torch or numpy (apt-get install python3-torch python3-numpy)"
    exit 77
fi
t=$(mktemp -d "${TMPDIR:-/tmp}/graphc-torch.XXXXXX") || exit 99
trap 'rm -rf "$t"' EXIT
"$PY" "$top_srcdir/tests/torch_ops.py" "$top_builddir/tests/torch_run" "$top_srcdir" "$t"
