# onnx/: graphc export and import (docs/onnx.md), with ONNX support (configure's
# --without-onnx leaves it out).  The protobuf code is C that protoc-c generates at
# build time from the onnx.proto libonnx-dev ships (configure finds it: ONNX_PROTO).
EXTRA_DIST += %D%/local.mk
if HAVE_ONNX
AM_CPPFLAGS += $(PROTOBUF_C_CFLAGS)
libgraphc_core_la_SOURCES += %D%/onnx.h %D%/opmap.h %D%/opmap.c %D%/pb.h %D%/pb.c %D%/export.c \
	%D%/imp.h %D%/import.c %D%/import_ops.c %D%/emit.c %D%/match.c
nodist_libgraphc_core_la_SOURCES += %D%/onnx.pb-c.c %D%/onnx.pb-c.h
BUILT_SOURCES += %D%/onnx.pb-c.c %D%/onnx.pb-c.h
CLEANFILES += %D%/onnx.pb-c.c %D%/onnx.pb-c.h
# protoc-c writes both files at once; the header is made with the C file
%D%/onnx.pb-c.h: %D%/onnx.pb-c.c
%D%/onnx.pb-c.c: $(ONNX_PROTO)
	$(AM_V_GEN)$(MKDIR_P) %D% && $(PROTOC_C) --proto_path=$(ONNX_PROTO_DIR) --c_out=%D% $(ONNX_PROTO)
else
EXTRA_DIST += %D%/onnx.h %D%/opmap.h %D%/opmap.c %D%/pb.h %D%/pb.c %D%/export.c \
	%D%/imp.h %D%/import.c %D%/import_ops.c %D%/emit.c %D%/match.c
endif
