libgraphc_core_la_SOURCES += %D%/lexer.l %D%/parser.y %D%/ast.h %D%/ast.c %D%/lexstate.h
BUILT_SOURCES += %D%/parser.h
