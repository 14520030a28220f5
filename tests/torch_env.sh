# Sourced by the tests that compare graphc with PyTorch 1.13 (tests/*_torch.sh,
# tests/torch_ops.sh): tests/harness.sh (the paths make check passes, a temporary
# folder $t removed on exit), the Python that has Debian's python3-torch, and a skip
# (exit 77, with the reason) when it or NumPy is missing.
#   PYTHON   the interpreter (default /usr/bin/python3: Debian's own, not a pyenv
#            shim that lacks the package)
. "${top_srcdir:-.}/tests/harness.sh"
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch, numpy" >/dev/null 2>&1; then
    echo "SKIP: $PY has no torch or numpy (apt-get install python3-torch python3-numpy)"
    exit 77
fi
