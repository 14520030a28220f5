libgraphc_core_la_SOURCES += %D%/graphc.c include/graphc.h
EXTRA_DIST += examples/classify.c examples/README.md
