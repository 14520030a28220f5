graphc_SOURCES = %D%/main.c %D%/cli.h %D%/find.c %D%/check.c %D%/summary.c %D%/run.c %D%/progress.h %D%/progress.c %D%/bench.c %D%/predict.c \
	%D%/onnx.c
graphc_CFLAGS = $(AM_CFLAGS)
graphc_LDADD = $(GRAPHC_LIBS)
# where the installed models, data and docs are (cli/find.c)
graphc_CPPFLAGS = $(AM_CPPFLAGS) -DGRAPHC_BINDIR='"$(bindir)"' -DGRAPHC_PKGDATADIR='"$(pkgdatadir)"' \
	-DGRAPHC_DOCDIR='"$(docdir)"'
