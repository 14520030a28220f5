#!/bin/sh
# python/graphc.py over this build's libgraphc.so: tests/test_python.py under Debian's
# python3 (not a pyenv shim) with its NumPy.  Skipped (77) without NumPy or without a
# shared library (configure --disable-shared).  In a sanitizer build the library needs
# the sanitizers' runtimes loaded first: they are preloaded, leak checks off (Python
# itself keeps memory to the end).
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
py=${GRAPHC_PYTHON:-/usr/bin/python3}
lib="$top_builddir/.libs/libgraphc.so.0"
if ! [ -x "$py" ]; then echo "SKIP: no $py (apt-get install python3)"; exit 77; fi
if ! "$py" -c 'import numpy' 2>/dev/null; then echo "SKIP: $py has no numpy (apt-get install python3-numpy)"; exit 77; fi
if ! [ -f "$lib" ]; then echo "SKIP: no $lib (configured with --disable-shared?)"; exit 77; fi
GRAPHC_LIBRARY=$lib
PYTHONDONTWRITEBYTECODE=1   # no __pycache__ in the source tree (read-only under distcheck)
export GRAPHC_LIBRARY PYTHONDONTWRITEBYTECODE top_srcdir top_builddir
case "${SAN_CFLAGS:-}" in
*sanitize=*)
    LD_PRELOAD=
    for rt in libasan.so libubsan.so; do
        f=$(${CC:-cc} -print-file-name=$rt)
        [ -f "$f" ] && LD_PRELOAD="$LD_PRELOAD $f"
    done
    ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
    export LD_PRELOAD ASAN_OPTIONS
    ;;
esac
exec "$py" "$top_srcdir/tests/test_python.py"
