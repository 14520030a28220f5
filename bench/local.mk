# bench/: graphc against PyTorch and ONNX Runtime, and data-parallel scaling under MPI
# (see bench/README.md)
EXTRA_DIST += %D%/compare.sh %D%/torch_bench.py %D%/ort_bench.js %D%/report.py %D%/README.md \
	%D%/package.json %D%/package-lock.json \
	%D%/mpi_scaling.sh %D%/mpi_model.py %D%/allreduce.c %D%/ablate_sweep.sh %D%/torch_faults.py

# bench/peak: the machine's FMA peak and OpenBLAS's sgemm rate, which bench/compare.sh
# builds (make bench/peak) and runs first.  A check program: built by make check, which
# tests its output (peak_check.sh), and on demand, never by make all nor installed.
check_PROGRAMS += %D%/peak
%C%_peak_SOURCES = %D%/peak.c
%C%_peak_CFLAGS = $(AM_CFLAGS)
%C%_peak_LDADD = $(OPENBLAS_LIBS) $(LIBS)
TESTS += %D%/peak_check.sh %D%/report_check.sh
EXTRA_DIST += %D%/peak_check.sh %D%/report_check.sh

# bench/convbench: each convolution of the benchmark networks alone, in one variant (the
# figures of docs/kernels.md "Measured").  Built on demand only: make bench/convbench.
EXTRA_PROGRAMS += %D%/convbench
%C%_convbench_SOURCES = %D%/convbench.c
%C%_convbench_CFLAGS = $(AM_CFLAGS)
%C%_convbench_LDADD = $(GRAPHC_LIBS)
# bench/gemm: graphc's own GEMM against OpenBLAS's sgemm on chosen shapes (CPU time,
# medians; docs/kernels.md "GEMM").  Built on demand only: make bench/gemm.
EXTRA_PROGRAMS += %D%/gemm
%C%_gemm_SOURCES = %D%/gemm.c
%C%_gemm_CFLAGS = $(AM_CFLAGS)
%C%_gemm_LDADD = $(GRAPHC_LIBS)
