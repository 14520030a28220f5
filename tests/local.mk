# Check suites, one binary per area.  Each links the library.
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LIBS = $(GRAPHC_LIBS) $(CHECK_LIBS)
AM_TESTS_ENVIRONMENT = top_srcdir='$(top_srcdir)'; top_builddir='$(top_builddir)'; SAN_CFLAGS='$(SAN_CFLAGS)'; export top_srcdir top_builddir SAN_CFLAGS; CK_DEFAULT_TIMEOUT=600; export CK_DEFAULT_TIMEOUT;

check_PROGRAMS += tests/test_train
TESTS += tests/test_train
tests_test_train_SOURCES = tests/test_train.c tests/testutil.h
tests_test_train_CFLAGS = $(TEST_CFLAGS)
tests_test_train_LDADD = $(TEST_LIBS)
include tests/frontend.mk

# checkpoints and resume through the CLI (kill -9, Ctrl-C, bit-exact resume, refusals)
TESTS += tests/resume.sh
EXTRA_DIST += tests/resume.sh

check_PROGRAMS += tests/test_image
TESTS += tests/test_image
tests_test_image_SOURCES = tests/test_image.c tests/testutil.h
tests_test_image_CFLAGS = $(TEST_CFLAGS)
tests_test_image_LDADD = $(TEST_LIBS)

# a short training run under valgrind's memcheck (skipped without valgrind)
TESTS += tests/valgrind.sh
EXTRA_DIST += tests/valgrind.sh tests/valgrind.net

# the installed library, pkg-config file and man page, and examples/ built against them
TESTS += tests/install.sh
EXTRA_DIST += tests/install.sh
AM_TESTS_ENVIRONMENT += MAKE='$(MAKE)'; CC='$(CC)'; export MAKE CC;

# data-parallel training under mpirun (skipped in a build without MPI): N ranks x batch
# B against one process x N*B, compared weight by weight with ckpt_compare
check_PROGRAMS += tests/ckpt_compare
tests_ckpt_compare_SOURCES = tests/ckpt_compare.c
tests_ckpt_compare_CFLAGS = $(AM_CFLAGS)
tests_ckpt_compare_LDADD = $(GRAPHC_LIBS)
TESTS += tests/mpi.sh
EXTRA_DIST += tests/mpi.sh
