EXTRA_DIST += %D%/api.md %D%/onnx.md %D%/language.md %D%/architecture.md %D%/checkpoint.md %D%/dump-formats.md %D%/training.md %D%/benchmarks.md %D%/why-graph-mode.md \
	%D%/distributed.md %D%/distributed-scaling.md %D%/fuzzing.md %D%/layout.md
