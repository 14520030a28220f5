graphc_SOURCES = %D%/main.c %D%/cli.h %D%/check.c %D%/run.c %D%/progress.h %D%/progress.c %D%/bench.c %D%/predict.c \
	%D%/onnx.c
graphc_CFLAGS = $(AM_CFLAGS)
graphc_LDADD = $(GRAPHC_LIBS)
