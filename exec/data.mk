# exec/: datasets (IDX/MNIST, synthetic, batch stream) and the SVG training plot.
libgraphc_a_SOURCES += %D%/data.h %D%/data.c %D%/plot.h %D%/plot.c

check_PROGRAMS += tests/test_data tests/test_plot
TESTS += tests/test_data tests/test_plot
tests_test_data_SOURCES = tests/test_data.c
tests_test_data_CFLAGS = $(TEST_CFLAGS)
tests_test_data_LDADD = $(TEST_LIBS)
tests_test_plot_SOURCES = tests/test_plot.c
tests_test_plot_CFLAGS = $(TEST_CFLAGS)
tests_test_plot_LDADD = $(TEST_LIBS)
