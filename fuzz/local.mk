# make fuzz: libFuzzer targets for the front end, the IDX reader, the checkpoint reader,
# data sets built to reach past their headers (fuzz_dataset), the image readers
# (fuzz_image) and ONNX import, built with clang and run for FUZZ_SECONDS each
# (fuzz/run.sh runs every fuzz/fuzz_*.c).
FUZZ_SECONDS = 60
EXTRA_DIST += %D%/run.sh %D%/fuzz_frontend.c %D%/fuzz_idx.c %D%/fuzz_checkpoint.c %D%/fuzz_dataset.c %D%/fuzz_image.c \
	%D%/fuzz_onnx.c %D%/recipe.h %D%/data_campaign.py %D%/craft_checkpoints.py %D%/ckpt_campaign.sh
fuzz: graphc$(EXEEXT) $(BUILT_SOURCES)
	$(SHELL) $(top_srcdir)/fuzz/run.sh '$(top_srcdir)' '$(top_builddir)' $(FUZZ_SECONDS)
.PHONY: fuzz
clean-local:
	rm -rf fuzz-out
