#!/bin/sh
# The train block's optimizers, clipping and schedules against PyTorch 1.13 on the same
# weights and batches (tests/optim_torch.py, with Debian's python3-torch; skipped with a
# message when it or NumPy is missing).
set -u
. "${top_srcdir:-.}/tests/torch_env.sh"
"$PY" -B "$top_srcdir/tests/optim_torch.py" "$top_builddir/tests/optim_run" "$t"
