libgraphc_core_la_SOURCES += %D%/mem.h %D%/mem.c %D%/diag.h %D%/diag.c
libgraphc_core_la_SOURCES += %D%/suggest.h %D%/suggest.c %D%/rng.h %D%/elemwise.def %D%/elemwise.h
libgraphc_core_la_SOURCES += %D%/pool.h %D%/pool.c %D%/file.h %D%/file.c %D%/outfile.h %D%/outfile.c
libgraphc_core_la_SOURCES += %D%/path.h %D%/path.c
# exp, tanh ... written once over a vector (vmath.h), and for one float (vmath_scalar.h)
libgraphc_core_la_SOURCES += %D%/vmath.h %D%/vmath_scalar.h
