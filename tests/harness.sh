# Sourced by the shell tests (`. "${top_srcdir:-.}/tests/harness.sh"`): what every one
# of them needs, written once.
#   top_srcdir, top_builddir        as make check passes them, "." when run by hand
#   abs_top_srcdir, abs_top_builddir  the same as absolute paths
#   t                               a temporary folder, removed on exit (and on Ctrl-C
#                                   or a TERM, which exit 130)
#   ok WHAT, bad WHAT               a check passed or failed: a "PASS: WHAT" or
#                                   "FAIL: WHAT" line, counted in $pass and $fail
#   finish [NOTE]                   the last line, "N passed, M failed[ (NOTE)]", and the
#                                   exit status: 0, or 1 if a check failed
#   built FILE                      stop with 99 (a hard error for automake) when FILE,
#                                   a program the test runs, is not built
# A test skips with `echo "SKIP: why"; exit 77`.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
abs_top_srcdir=$(cd "$top_srcdir" && pwd) || exit 99
abs_top_builddir=$(cd "$top_builddir" && pwd) || exit 99
t=$(mktemp -d "${TMPDIR:-/tmp}/graphc-$(basename "$0" .sh).XXXXXX") || exit 99
trap 'rm -rf "$t"' EXIT
trap 'exit 130' INT TERM
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
finish() {
    echo "$pass passed, $fail failed${1:+ ($1)}"
    [ "$fail" -eq 0 ]
    exit
}
built() { [ -x "$1" ] || { echo "${0##*/}: $1 is not built" >&2; exit 99; }; }
