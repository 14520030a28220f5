/* The syntax tree of a .net file, as the parser builds it.
 *
 * Ownership: every node, string and array lives in the Program's arena and is freed
 * with it at once (ast_free); nothing in the tree is freed on its own.  That is why the
 * grammar's %destructor has nothing to release. */
#ifndef GRAPHC_AST_H
#define GRAPHC_AST_H
#include <stdbool.h>
#include <stdint.h>
#include "util/diag.h"
#include "util/mem.h"

typedef enum AstKind {
    AST_INT,      /* integer literal: ival */
    AST_FLOAT,    /* floating literal: fval */
    AST_STRING,   /* "text": str */
    AST_NAME,     /* a value or keyword-constant name: str */
    AST_CALL,     /* fn(args...): call */
    AST_BINARY,   /* l op r: bin */
    AST_NEG,      /* -e: neg */
    AST_KWARG,    /* name=value, only directly inside a call: kw */
    AST_LIST,     /* [e1, e2, ...]: list (axes, a permutation) */
    AST_INDEX,    /* base[i, a:b, :]: index (slicing) */
    AST_KIND_COUNT
} AstKind;

/* Expressions nest at most this deep: each call, operator, keyword argument and pair
 * of brackets is a level, so a chain a + b + c ... is as deep as it is long.  The
 * parser refuses deeper ones (file:line:col of the level that goes past it).  That
 * bound is what keeps every recursive walk over a tree (lowering's eval, the dumps)
 * within the C stack: tests/deep.sh runs the deepest trees under a 1 MB stack. */
#define AST_MAX_DEPTH 1000

typedef struct Ast Ast;

/* One item of base[...]: a range start:end (either may be missing, NULL) or a single
 * index (start). */
typedef struct AstSlice {
    bool range;
    Ast *start, *end;
    Loc loc;
} AstSlice;

struct Ast {
    AstKind kind;
    int height;           /* levels from here down (1: a literal or a name), <= AST_MAX_DEPTH */
    Loc loc;              /* the whole expression */
    union {
        int64_t ival;     /* AST_INT */
        double fval;      /* AST_FLOAT */
        char *str;        /* AST_STRING (unescaped), AST_NAME */
        struct {
            char *fn;     /* callee name */
            Loc fn_loc;   /* just the callee name */
            Ast **args;   /* positional and keyword arguments, in source order */
            int nargs;
        } call;
        struct {
            char op;      /* one of + - * / */
            Ast *l, *r;
        } bin;
        Ast *neg;         /* AST_NEG: the negated operand */
        struct {
            char *name;   /* keyword */
            Loc name_loc;
            Ast *value;
        } kw;
        struct {
            Ast **items;  /* AST_LIST */
            int n;
        } list;
        struct {
            Ast *base;    /* AST_INDEX: the tensor */
            AstSlice *items;  /* one per leading axis */
            int n;
        } index;
    } u;
};

/* A dimension in a type: a number, or a symbol such as B bound when the model runs. */
typedef struct AstDim {
    bool is_sym;
    int64_t value;        /* when !is_sym */
    char *sym;            /* when is_sym */
    Loc loc;
} AstDim;

typedef struct AstType {
    char *dtype;          /* as written: f32, i32 (checked when lowering) */
    Loc dtype_loc;
    AstDim *dims;
    int rank;
    Loc loc;              /* dtype through ']' */
} AstType;

typedef enum StmtKind {
    ST_INPUT,   /* input NAME: TYPE */
    ST_PARAM,   /* param NAME: TYPE = INIT */
    ST_ASSIGN,  /* NAME = EXPR */
    ST_OUTPUT,  /* output NAME [= EXPR] */
    ST_TRAIN,   /* train { key = EXPR ... } */
    ST_UNPACK,  /* NAME, NAME, ... = EXPR (a function of several results, split) */
    ST_KIND_COUNT
} StmtKind;

typedef struct TrainEntry {
    char *key;
    Loc key_loc;
    Ast *value;
} TrainEntry;

typedef struct Stmt {
    StmtKind kind;
    Loc loc;              /* the whole statement */
    char *name;           /* defined name (not for ST_TRAIN; ST_UNPACK: the first) */
    Loc name_loc;
    char **names;         /* ST_UNPACK: every name, nnames >= 2 of them */
    Loc *name_locs;
    int nnames;
    AstType type;         /* ST_INPUT, ST_PARAM */
    Ast *expr;            /* ST_ASSIGN, ST_PARAM (initializer), ST_OUTPUT (may be NULL) */
    TrainEntry *entries;  /* ST_TRAIN */
    int nentries;
} Stmt;

typedef struct Program {
    Arena arena;          /* owns everything below */
    char *model_name;     /* from `model NAME`, or NULL */
    Loc model_loc;
    Stmt **stmts;
    int nstmts;
    int stmt_cap;
} Program;

/* Parses `src`, reporting every error to `d`.  Returns a Program (possibly partial)
 * or NULL when out of memory; check d->nerrors for failure. */
Program *parse_program(const Source *src, DiagSink *d);
void ast_free(Program *p);

/* Builders used by the grammar. */
Ast *ast_new(Program *p, AstKind kind, Loc loc);   /* height 1 */
int ast_height(const Ast *a);                      /* 0 for an error (NULL) */
Stmt *ast_stmt(Program *p, StmtKind kind, Loc loc);
void ast_push_stmt(Program *p, Stmt *s);
/* Appends to a growable array in the arena: returns the new array (old one abandoned). */
void *ast_grow(Program *p, void *array, int count, size_t elem);

/* Text dump of the tree (graphc dump --stage ast --format text). */
void ast_dump_text(const Program *p, const Source *src, FILE *out);
void ast_dump_json(const Program *p, const Source *src, FILE *out);
const char *ast_kind_name(AstKind k);

#endif
