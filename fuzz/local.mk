# make fuzz: libFuzzer targets for the front end, the IDX reader, the checkpoint
# reader and ONNX import, built with clang and run for FUZZ_SECONDS each (fuzz/run.sh).
FUZZ_SECONDS = 60
EXTRA_DIST += %D%/run.sh %D%/fuzz_frontend.c %D%/fuzz_idx.c %D%/fuzz_checkpoint.c %D%/fuzz_onnx.c
fuzz: graphc$(EXEEXT) $(BUILT_SOURCES)
	$(SHELL) $(top_srcdir)/fuzz/run.sh '$(top_srcdir)' '$(top_builddir)' $(FUZZ_SECONDS)
.PHONY: fuzz
clean-local:
	rm -rf fuzz-out
