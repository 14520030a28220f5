/* State shared by the lexer and the parser for one parse. */
#ifndef GRAPHC_LEXSTATE_H
#define GRAPHC_LEXSTATE_H
#include "parser/ast.h"

struct LexState {
    Program *prog;       /* where tokens' strings are allocated */
    DiagSink *diag;      /* where errors go */
    const Source *src;
    uint32_t offset;     /* byte offset of the next token */
    int depth;           /* open ( and [: newlines inside are blanks */
    Loc open[64];        /* where the innermost 64 of them were opened */
    int last_newline;    /* the last token returned was NEWLINE (or nothing yet) */
    bool too_deep;       /* the parser's stack filled up (reported) */
};

char *lex_unescape(struct LexState *ls, const char *s, size_t n, Loc loc);
#endif
