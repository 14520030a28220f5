# kernels/: the compute kernels (kern.h), plain functions over buffers that know no
# graph.  BLAS calls live in blas.c only.
libgraphc_a_SOURCES += %D%/kern.h %D%/elem.c %D%/blas.c %D%/conv.c %D%/conv_direct.h %D%/conv_direct.c %D%/split.h %D%/update.c %D%/seq.c %D%/bnorm.c %D%/optim.c
