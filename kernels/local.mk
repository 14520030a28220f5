# kernels/: the compute kernels (kern.h), plain functions over buffers that know no
# graph.  BLAS calls live in blas.c only.  The micro-kernels (micro.h) are compiled once
# per instruction set by isa_*.c; cpu.c picks the variant that runs (variant.h).
libgraphc_core_la_SOURCES += %D%/kern.h %D%/elem.c %D%/blas.c %D%/conv.c %D%/pool.h %D%/pool.c %D%/pool_body.h %D%/conv_direct.h %D%/conv_direct.c %D%/split.h \
	%D%/update.c %D%/seq.c %D%/attention.c %D%/bnorm.c %D%/optim.c %D%/variant.h %D%/cpu.c %D%/micro.h %D%/gemm_micro.h %D%/isa_avx512.c %D%/isa_avx2.c %D%/isa_portable.c \
	%D%/gemm_bf16.c %D%/conv_bf16.h %D%/conv_bf16.c
# the vector math's loops, one instance per instruction set (isa_*.c)
libgraphc_core_la_SOURCES += %D%/vmath.h
