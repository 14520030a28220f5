# make fuzz: libFuzzer targets for the front end (model text, and the choice bytes of
# the model generator), the IDX reader, the checkpoint reader, data sets built to
# reach past their headers (fuzz_dataset), the image readers (fuzz_image) and ONNX
# import, built with clang and run for FUZZ_SECONDS each (fuzz/run.sh runs every
# fuzz/fuzz_*.c).  fuzz/campaign.sh: the models campaign through the command line
# (docs/fuzzing.md).
FUZZ_SECONDS = 60
EXTRA_DIST += %D%/run.sh %D%/fuzz_frontend.c %D%/fuzz_modelgen.c %D%/fuzz_idx.c %D%/fuzz_checkpoint.c \
	%D%/fuzz_dataset.c %D%/fuzz_image.c %D%/fuzz_onnx.c %D%/recipe.h %D%/data_campaign.py %D%/craft_checkpoints.py \
	%D%/ckpt_campaign.sh %D%/campaign.sh

# The model generator (modelgen.c, for fuzz_modelgen and campaigns) and the pipeline
# every model goes through (pipeline.c) are built with the project too: genmodels
# writes a campaign's models (fuzz/campaign.sh), and test_frontend checks a few
# hundred of them on every `make check`.
noinst_PROGRAMS = %D%/genmodels
%C%_genmodels_SOURCES = %D%/genmodels.c %D%/modelgen.c %D%/modelgen.h %D%/pipeline.c %D%/pipeline.h
%C%_genmodels_CFLAGS = $(AM_CFLAGS)
%C%_genmodels_LDADD = $(GRAPHC_LIBS)
fuzz: graphc$(EXEEXT) $(BUILT_SOURCES)
	$(SHELL) $(top_srcdir)/fuzz/run.sh '$(top_srcdir)' '$(top_builddir)' $(FUZZ_SECONDS)
.PHONY: fuzz
clean-local:
	rm -rf fuzz-out
