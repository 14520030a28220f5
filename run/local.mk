# run/: running a model: the training loop and evaluation, data sources, images,
# checkpoints, plots and the benchmark.
libgraphc_core_la_SOURCES += %D%/train.h %D%/train.c %D%/checkpoint.c %D%/data.h %D%/data.c %D%/sources.h %D%/sources.c %D%/npy.c %D%/text.h %D%/text.c %D%/image.h %D%/image.c \
	%D%/plot.h %D%/plot.c %D%/bench.h %D%/bench.c %D%/ablate.h %D%/ablate.c
