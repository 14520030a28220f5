# bench/: graphc against PyTorch and ONNX Runtime (see bench/README.md)
EXTRA_DIST += %D%/compare.sh %D%/torch_bench.py %D%/ort_bench.js %D%/report.py %D%/README.md \
	%D%/package.json %D%/package-lock.json
