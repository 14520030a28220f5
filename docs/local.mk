# The docs are installed in $(docdir) (with the README and the license): what --help
# and the man page send a user to.
dist_doc_DATA = %D%/api.md %D%/onnx.md %D%/language.md %D%/architecture.md %D%/checkpoint.md %D%/dump-formats.md %D%/training.md \
	%D%/benchmarks.md %D%/why-graph-mode.md %D%/distributed.md %D%/distributed-scaling.md %D%/fuzzing.md %D%/layout.md %D%/kernels.md %D%/bf16.md \
	README.md LICENSE
# The man page names where the models, data and docs are installed: made from
# graphc.1.in with this configuration's paths, as graphc.pc is.
man_MANS = %D%/graphc.1
%D%/graphc.1: $(srcdir)/%D%/graphc.1.in Makefile
	$(AM_V_GEN)$(MKDIR_P) %D% && sed -e 's|@pkgdatadir[@]|$(pkgdatadir)|g' -e 's|@docdir[@]|$(docdir)|g' \
	    $(srcdir)/%D%/graphc.1.in > $@
CLEANFILES += %D%/graphc.1
EXTRA_DIST += %D%/graphc.1.in
