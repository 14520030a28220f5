libgraphc_a_SOURCES += %D%/mem.h %D%/mem.c %D%/diag.h %D%/diag.c
