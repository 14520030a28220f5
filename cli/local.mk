graphc_SOURCES = %D%/main.c
graphc_CFLAGS = $(AM_CFLAGS)
graphc_LDADD = $(GRAPHC_LIBS)
