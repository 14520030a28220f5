#!/bin/sh
# Batch norm against PyTorch 1.13 on the same weights and batch (tests/bnorm_torch.py,
# with Debian's python3-torch; skipped with a message when it or NumPy is missing).
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch, numpy" >/dev/null 2>&1; then
    echo "SKIP: $PY has no torch or numpy (apt-get install python3-torch python3-numpy)"
    exit 77
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
exec "$PY" -B "$top_srcdir/tests/bnorm_torch.py" "$top_srcdir" "$top_builddir/graphc" "$top_builddir/tests/torch_step" "$t"
