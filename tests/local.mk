# Every test program and script of `make check`, declared here.  Check suites, one
# binary per area, each linking the library:
#   test_frontend  lexer/parser, lowering, shape inference, every diagnostic, robustness
#                  (with fuzz/'s model generator and pipeline)
#   test_kernels   the compute kernels against reference loops
#   test_autodiff  every parameter's gradient against finite differences
#   test_exec      the executors against each other, passes, fusions, memory plans
#   test_training  training runs: tiny models to low loss, same seed same curve
#   test_runloop   the training loop's events (run/train.h): order, figures, NaN, saves
#   test_progress  graphc run's progress bar and JSON lines (cli/progress.c, built in)
#   test_bench     what the benchmark report stands on: bytes per step, small-batch paths
#   test_data      data sets and batches;  test_sources  the data sources of issue 14
#   test_image  image files;  test_plot  SVG plots
#   test_api       the public C API alone: io, training, weights, errors, threads (and
#                  test_api_shared: the same program linked with libgraphc.so)
#   test_optim     the train block's optimizers, schedules and clipping (issue 14)
#   test_bf16      --dtype bf16: its GEMM against a bf16-rounding reference, the executors
#   test_amx       --dtype bf16 on AMX's tiles: both GEMM engines against the reference
#   test_bf16_conv --dtype bf16's direct convolutions against a bf16-rounding reference
#   test_onnx      ONNX export and import: round trips, damaged files (when built with ONNX)
#   test_checkpoint  checkpoints (crafted fields, streams, resuming) and output files
#   test_ablate    graphc bench --ablate: every configuration against the interpreter, its output
# Scripts: deep.sh (the deepest expressions the parser accepts under a 1 MB stack, and
# one level more refused), regress.sh (models that once crashed past `graphc check`,
# tests/regress/), golden.sh (dumps of every model against tests/golden/, the stderr of
# `graphc check` on each tests/errors/*.net against its .err, exit codes; regenerate
# with GOLDEN_UPDATE=1 top_srcdir=. top_builddir=. tests/golden.sh), resume.sh
# (checkpoints and resume through the CLI), cli_run.sh (graphc run and eval as a user
# sees them: write errors, the bar on a pty and a pipe, JSON lines, a NaN loss),
# valgrind.sh, install.sh, mpi.sh, layers.sh (no file includes a folder of a layer
# above its own), predict.sh (graphc predict's reports and exit status, and
# examples/classify beside it), isa.sh (the kernels' variants through GRAPHC_ISA and
# --isa), isa_kernels.sh (the kernel suite under each lower variant), ablate_cli.sh
# (graphc bench --ablate's refusals and plot), bf16.sh (--dtype bf16's refusals and
# headers), sample.sh (a text() model, graphc eval's
# baselines, graphc sample), tabular.sh (the csv() and npy() models, NumPy's files),
# python.sh (the Python module).  Most scripts source tests/harness.sh: the paths, a
# temporary folder, ok/bad and the last line "N passed, M failed".
# Run the tests that expose known bugs with: GRAPHC_KNOWN_BUGS=1 tests/test_frontend
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LIBS = $(GRAPHC_LIBS) $(CHECK_LIBS)
AM_TESTS_ENVIRONMENT = top_srcdir='$(top_srcdir)'; top_builddir='$(top_builddir)'; SAN_CFLAGS='$(SAN_CFLAGS)'; export top_srcdir top_builddir SAN_CFLAGS; CK_DEFAULT_TIMEOUT=600; export CK_DEFAULT_TIMEOUT;

CHECK_SUITES = tests/test_frontend tests/test_kernels tests/test_autodiff tests/test_exec tests/test_training \
	tests/test_runloop tests/test_progress tests/test_bench \
	tests/test_data tests/test_sources tests/test_image tests/test_plot tests/test_api tests/test_ablate tests/test_optim \
	tests/test_bf16 tests/test_bf16_conv tests/test_amx
check_PROGRAMS += $(CHECK_SUITES)
TESTS += $(CHECK_SUITES)
tests_test_frontend_SOURCES = tests/test_frontend.c fuzz/modelgen.c fuzz/pipeline.c
tests_test_frontend_CFLAGS = $(TEST_CFLAGS)
tests_test_frontend_LDADD = $(TEST_LIBS)
tests_test_kernels_SOURCES = tests/test_kernels.c tests/testutil.h
tests_test_kernels_CFLAGS = $(TEST_CFLAGS)
tests_test_kernels_LDADD = $(TEST_LIBS)
tests_test_autodiff_SOURCES = tests/test_autodiff.c tests/testtrain.h tests/testutil.h tests/testgraph.h
tests_test_autodiff_CFLAGS = $(TEST_CFLAGS)
tests_test_autodiff_LDADD = $(TEST_LIBS)
tests_test_exec_SOURCES = tests/test_exec.c tests/testtrain.h tests/testutil.h tests/testgraph.h
tests_test_exec_CFLAGS = $(TEST_CFLAGS)
tests_test_exec_LDADD = $(TEST_LIBS)
tests_test_training_SOURCES = tests/test_training.c tests/testtrain.h tests/testutil.h tests/testgraph.h
tests_test_training_CFLAGS = $(TEST_CFLAGS)
tests_test_training_LDADD = $(TEST_LIBS)
tests_test_runloop_SOURCES = tests/test_runloop.c tests/testutil.h tests/testgraph.h
tests_test_runloop_CFLAGS = $(TEST_CFLAGS)
tests_test_runloop_LDADD = $(TEST_LIBS)
tests_test_progress_SOURCES = tests/test_progress.c cli/progress.c cli/progress.h
tests_test_progress_CFLAGS = $(TEST_CFLAGS)
tests_test_progress_LDADD = $(TEST_LIBS)
tests_test_bench_SOURCES = tests/test_bench.c tests/testutil.h tests/testgraph.h
tests_test_bench_CFLAGS = $(TEST_CFLAGS)
tests_test_bench_LDADD = $(TEST_LIBS)
tests_test_data_SOURCES = tests/test_data.c
tests_test_data_CFLAGS = $(TEST_CFLAGS)
tests_test_data_LDADD = $(TEST_LIBS)
tests_test_sources_SOURCES = tests/test_sources.c tests/datafiles.h
tests_test_sources_CFLAGS = $(TEST_CFLAGS)
tests_test_sources_LDADD = $(TEST_LIBS)
tests_test_image_SOURCES = tests/test_image.c tests/testutil.h
tests_test_image_CFLAGS = $(TEST_CFLAGS)
tests_test_image_LDADD = $(TEST_LIBS)
tests_test_plot_SOURCES = tests/test_plot.c
tests_test_plot_CFLAGS = $(TEST_CFLAGS)
tests_test_plot_LDADD = $(TEST_LIBS)
tests_test_api_SOURCES = tests/test_api.c
tests_test_api_CFLAGS = $(TEST_CFLAGS)
tests_test_api_LDADD = $(TEST_LIBS)
if SHARED_LIB
check_PROGRAMS += tests/test_api_shared
TESTS += tests/test_api_shared
tests_test_api_shared_SOURCES = tests/test_api.c
tests_test_api_shared_CFLAGS = $(TEST_CFLAGS)
tests_test_api_shared_LDADD = libgraphc.la $(CHECK_LIBS)
endif
tests_test_ablate_SOURCES = tests/test_ablate.c tests/testgraph.h tests/model_file.h
tests_test_ablate_CFLAGS = $(TEST_CFLAGS)
tests_test_ablate_LDADD = $(TEST_LIBS)
tests_test_optim_SOURCES = tests/test_optim.c tests/testutil.h tests/testgraph.h
tests_test_optim_CFLAGS = $(TEST_CFLAGS)
tests_test_optim_LDADD = $(TEST_LIBS)
tests_test_bf16_SOURCES = tests/test_bf16.c tests/testtrain.h tests/testutil.h tests/testgraph.h
tests_test_bf16_CFLAGS = $(TEST_CFLAGS)
tests_test_bf16_LDADD = $(TEST_LIBS)
tests_test_bf16_conv_SOURCES = tests/test_bf16_conv.c tests/testtrain.h tests/testutil.h tests/testgraph.h
tests_test_bf16_conv_CFLAGS = $(TEST_CFLAGS)
tests_test_bf16_conv_LDADD = $(TEST_LIBS)
tests_test_amx_SOURCES = tests/test_amx.c tests/testtrain.h tests/testutil.h tests/testgraph.h
tests_test_amx_CFLAGS = $(TEST_CFLAGS)
tests_test_amx_LDADD = $(TEST_LIBS)

TESTS += tests/golden.sh tests/deep.sh tests/regress.sh tests/resume.sh tests/cli_run.sh tests/valgrind.sh \
	tests/install.sh tests/mpi.sh tests/layers.sh tests/predict.sh tests/isa.sh tests/isa_kernels.sh \
	tests/ablate_cli.sh tests/sample.sh tests/tabular.sh tests/bf16.sh
EXTRA_DIST += tests/golden.sh tests/deep.sh tests/regress.sh tests/regress tests/golden tests/errors tests/resume.sh \
	tests/cli_run.sh tests/valgrind.sh tests/valgrind.net tests/install.sh tests/mpi.sh tests/layers.sh tests/predict.sh \
	tests/isa.sh tests/isa_kernels.sh tests/ablate_cli.sh tests/sample.sh tests/tabular.sh tests/harness.sh \
	tests/bf16.sh
# cli.sh: what a newcomer meets on the command line (issue 17), a check per behaviour;
# readme.sh: the README's synopsis is --help, its sample run what run prints
TESTS += tests/cli.sh tests/readme.sh
EXTRA_DIST += tests/cli.sh tests/readme.sh

# python/graphc.py over libgraphc.so (tests/python.sh runs tests/test_python.py and
# examples/mnist.py; skipped without NumPy or a shared library)
TESTS += tests/python.sh
EXTRA_DIST += tests/python.sh tests/test_python.py examples/mnist.py

# examples/classify.c as its README builds it, but against this build's library
check_PROGRAMS += examples/classify
examples_classify_SOURCES = examples/classify.c
examples_classify_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/include
examples_classify_LDADD = $(GRAPHC_LIBS)
EXTRA_DIST += examples/digit.pgm
AM_TESTS_ENVIRONMENT += MAKE='$(MAKE)'; CC='$(CC)'; export MAKE CC;

# tests/mpi.sh compares N ranks x batch B with one process x N*B, weight by weight
check_PROGRAMS += tests/ckpt_compare
tests_ckpt_compare_SOURCES = tests/ckpt_compare.c
tests_ckpt_compare_CFLAGS = $(AM_CFLAGS)
tests_ckpt_compare_LDADD = $(GRAPHC_LIBS)

# ONNX (docs/onnx.md): tests/onnx.sh exports every shipped model, runs it with ONNX
# Runtime (tests/onnx_ort.js; onnxruntime-node from bench/) against graphc's inference
# (tests/onnx_run) and imports it back; tests/onnx_torch.sh imports PyTorch's exports
# of the same networks (tests/onnx_torch.py, Debian's python3-torch).  Each skips with
# a message when its tool is missing.
check_PROGRAMS += tests/onnx_run
tests_onnx_run_SOURCES = tests/onnx_run.c tests/model_file.h
tests_onnx_run_CFLAGS = $(AM_CFLAGS)
tests_onnx_run_LDADD = $(GRAPHC_LIBS)
TESTS += tests/onnx.sh tests/onnx_torch.sh
EXTRA_DIST += tests/onnx.sh tests/onnx_ort.js tests/onnx_torch.sh tests/onnx_torch.py
if HAVE_ONNX
check_PROGRAMS += tests/test_onnx
TESTS += tests/test_onnx
tests_test_onnx_SOURCES = tests/test_onnx.c
tests_test_onnx_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_LDADD = $(TEST_LIBS)
else
EXTRA_DIST += tests/test_onnx.c
endif

# checkpoints (every field of a crafted file, streams, resuming) and output files
check_PROGRAMS += tests/test_checkpoint
TESTS += tests/test_checkpoint
tests_test_checkpoint_SOURCES = tests/test_checkpoint.c
tests_test_checkpoint_CFLAGS = $(TEST_CFLAGS)
tests_test_checkpoint_LDADD = $(TEST_LIBS)

# The transformer ops and models/charlm.net against PyTorch (tests/torch_ops.sh and
# tests/torch_ops.py; tests/torch_run makes graphc's side: weights, inputs, the loss
# and every gradient as raw files).  Skipped with a message without python3-torch.
check_PROGRAMS += tests/torch_run
tests_torch_run_SOURCES = tests/torch_run.c tests/model_file.h
tests_torch_run_CFLAGS = $(AM_CFLAGS)
tests_torch_run_LDADD = $(GRAPHC_LIBS)
TESTS += tests/torch_ops.sh
EXTRA_DIST += tests/torch_ops.sh tests/torch_ops.py tests/torch_env.sh
# batch norm against PyTorch 1.13 (tests/bnorm_torch.py, Debian's python3-torch; skipped
# with a message without it): the forms of batch_norm and models/fashion-resnet.net, the
# loss, every parameter's gradient and the running statistics after a step, and the
# inference outputs, on the same weights and batch (tests/torch_step runs graphc's side)
check_PROGRAMS += tests/torch_step
tests_torch_step_SOURCES = tests/torch_step.c
tests_torch_step_CFLAGS = $(AM_CFLAGS)
tests_torch_step_LDADD = $(GRAPHC_LIBS)
TESTS += tests/bnorm_torch.sh
EXTRA_DIST += tests/bnorm_torch.sh tests/bnorm_torch.py
# The train block's optimizers, clipping and schedules against PyTorch (tests/optim_torch.py,
# Debian's python3-torch; skipped with a message without it); tests/optim_run is graphc's side.
check_PROGRAMS += tests/optim_run
tests_optim_run_SOURCES = tests/optim_run.c
tests_optim_run_CFLAGS = $(AM_CFLAGS)
tests_optim_run_LDADD = $(GRAPHC_LIBS)
TESTS += tests/optim_torch.sh
EXTRA_DIST += tests/optim_torch.sh tests/optim_torch.py
