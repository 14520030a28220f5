# exec/: the runtime: kernel dispatch, the interpreter, the compiled executor and its
# memory planner, weights, and MPI communication.
libgraphc_core_la_SOURCES += %D%/exec.h %D%/dispatch.c %D%/dispatch_bnorm.h %D%/dispatch_bnorm.c %D%/traffic.c %D%/weights.c %D%/interp.c %D%/executor.h %D%/executor.c \
	%D%/pipeline.h %D%/pipeline.c %D%/compiled.h %D%/compiled.c %D%/memplan.h %D%/memplan.c %D%/stages.c %D%/plandump.c %D%/comm.h %D%/comm.c %D%/mpi_poll.h
