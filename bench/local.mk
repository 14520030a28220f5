# bench/: graphc against PyTorch and ONNX Runtime, and data-parallel scaling under MPI
# (see bench/README.md)
EXTRA_DIST += %D%/compare.sh %D%/torch_bench.py %D%/ort_bench.js %D%/report.py %D%/README.md \
	%D%/package.json %D%/package-lock.json \
	%D%/mpi_scaling.sh %D%/mpi_model.py %D%/allreduce.c
