#!/bin/sh
# Batch norm against PyTorch 1.13 on the same weights and batch (tests/bnorm_torch.py,
# with Debian's python3-torch; skipped with a message when it or NumPy is missing).
set -u
. "${top_srcdir:-.}/tests/torch_env.sh"
"$PY" -B "$top_srcdir/tests/bnorm_torch.py" "$top_srcdir" "$top_builddir/graphc" "$top_builddir/tests/torch_step" "$t"
