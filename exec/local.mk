# exec/: kernels (kern.mk), data and plots (data.mk), executors.
include %D%/kern.mk
include %D%/data.mk
libgraphc_a_SOURCES += %D%/kern.h
