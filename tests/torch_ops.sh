#!/bin/sh
# The transformer ops and models/charlm.net against PyTorch 1.13 on the same weights and
# batch: the loss and every parameter's gradient within 1e-5 relative
# (tests/torch_ops.py, with tests/torch_run making graphc's side).  Skipped with a
# message when Debian's python3-torch is missing.
set -u
. "${top_srcdir:-.}/tests/torch_env.sh"
"$PY" "$top_srcdir/tests/torch_ops.py" "$top_builddir/tests/torch_run" "$top_srcdir" "$t"
