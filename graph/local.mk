libgraphc_core_la_SOURCES += %D%/ops.def %D%/ops.h %D%/ops.c %D%/graph.h %D%/graph.c %D%/shape.c \
	%D%/lower.h %D%/lower.c %D%/dump.c %D%/verify.c %D%/passes.h %D%/passes.c %D%/autodiff.c %D%/fuse.c %D%/simplify.c %D%/allreduce.c \
	%D%/bnorm.c %D%/optim.c %D%/attention.c
