# exec/: compute kernels (kern.h).  BLAS calls live in kern_blas.c only.
libgraphc_a_SOURCES += %D%/kern_elem.c %D%/kern_blas.c %D%/kern_conv.c %D%/kern_conv_direct.h %D%/kern_conv_direct.c

check_PROGRAMS += tests/test_kernels
TESTS += tests/test_kernels
tests_test_kernels_SOURCES = tests/test_kernels.c tests/testutil.h
tests_test_kernels_CFLAGS = $(TEST_CFLAGS)
tests_test_kernels_LDADD = $(TEST_LIBS)
