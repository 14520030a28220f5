# exec/: kernels (kern.mk), data and plots (data.mk), executors.
include %D%/kern.mk
include %D%/data.mk
libgraphc_a_SOURCES += %D%/kern.h
libgraphc_a_SOURCES += %D%/exec.h %D%/dispatch.c %D%/weights.c %D%/interp.c %D%/executor.h %D%/executor.c %D%/compiled.h %D%/compiled.c %D%/stages.c %D%/train.h %D%/train.c %D%/checkpoint.c %D%/bench.h %D%/bench.c %D%/plandump.c %D%/image.h %D%/image.c %D%/comm.h %D%/comm.c %D%/mpi_poll.h
