# The front end: Check suites for the lexer/parser, lowering, shape inference, every
# diagnostic and robustness (tests/test_frontend.c), and golden tests of the command
# line (tests/golden.sh: dumps of every model against tests/golden/, the stderr of
# `graphc check` on each tests/errors/*.net against its .err, exit codes).
# Regenerate the golden files with: GOLDEN_UPDATE=1 top_srcdir=. top_builddir=. tests/golden.sh
# Run the tests that expose known bugs with: GRAPHC_KNOWN_BUGS=1 tests/test_frontend
check_PROGRAMS += tests/test_frontend
TESTS += tests/test_frontend tests/golden.sh
tests_test_frontend_SOURCES = tests/test_frontend.c
tests_test_frontend_CFLAGS = $(TEST_CFLAGS)
tests_test_frontend_LDADD = $(TEST_LIBS)
EXTRA_DIST += tests/golden.sh tests/golden tests/errors
