/* The .net grammar.  A pure parser with byte-offset locations; every syntax error is
 * reported to the diagnostic sink and parsing resumes at the next statement, so one
 * run reports every error in the file. */
%require "3.6"
%define api.pure full
%define api.prefix {netyy}
%define api.location.type {Loc}
%define parse.error custom
%define parse.lac full
%locations
%expect 0
%param {void *scanner}
%parse-param {struct LexState *ls}

%code requires {
#include "parser/ast.h"
struct LexState;
}

%code provides {
int netyylex(NETYYSTYPE *lval, Loc *lloc, void *scanner);
}

%code {
#include <string.h>
#include "parser/lexstate.h"

/* The few flex entry points we call (flex's own header is not generated). */
typedef void *yyscan_t;
typedef struct yy_buffer_state *YY_BUFFER_STATE;
int netyylex_init_extra(struct LexState *extra, yyscan_t *scanner);
int netyylex_destroy(yyscan_t scanner);
YY_BUFFER_STATE netyy_scan_bytes(const char *bytes, int len, yyscan_t scanner);
void netyy_delete_buffer(YY_BUFFER_STATE b, yyscan_t scanner);

#define YYLLOC_DEFAULT(Cur, Rhs, N)                      \
    do {                                                 \
        if (N) {                                         \
            (Cur).start = YYRHSLOC(Rhs, 1).start;        \
            (Cur).end = YYRHSLOC(Rhs, N).end;            \
        } else {                                         \
            (Cur).start = (Cur).end = YYRHSLOC(Rhs, 0).end; \
        }                                                \
    } while (0)

/* The parser's own stack (states, values and locations; on the heap) holds at most
 * this many symbols.  Each open level of an expression holds at most 6: an indexing
 * within its items, `x[i, a:` (the base, '[', the items so far, ',', a start, ':');
 * a call with its arguments so far 4, a list 3, an operator and its left operand 2.
 * A statement holds a few more, so every expression within AST_MAX_DEPTH levels fits,
 * and one that fills the stack is deeper than that: netyyerror says so. */
#define YYMAXDEPTH (6 * AST_MAX_DEPTH + 100)
#define YYMALLOC gc_malloc
#define YYFREE gc_free

static void netyyerror(Loc *loc, void *scanner, struct LexState *ls, const char *msg);
static Ast *deepen(struct LexState *ls, Ast *a, int height);
static Ast *mk_call(struct LexState *ls, Loc loc, char *fn, Loc fn_loc, Ast **args, int nargs);
static Ast *mk_bin(struct LexState *ls, Loc loc, char op, Ast *l, Ast *r);
static Ast *mk_list(struct LexState *ls, Loc loc, Ast **items, int n);
static Ast *mk_index(struct LexState *ls, Loc loc, Ast *base, AstSlice *items, int n);
static void add_name(struct LexState *ls, char ***names, Loc **locs, int *n, char *name, Loc loc);
static Stmt *mk_unpack(struct LexState *ls, Loc loc, char *first, Loc first_loc, char **rest, Loc *rest_locs, int nrest, Ast *expr);
}

%union {
    int64_t ival;
    double fval;
    char *str;
    Ast *ast;
    Stmt *stmt;
    struct { Ast **v; int n; } list;
    struct { AstDim *v; int n; } dims;
    AstDim dim;
    AstType type;
    struct { TrainEntry *v; int n; } entries;
    TrainEntry entry;
    struct { AstSlice *v; int n; } slices;
    AstSlice slice;
    struct { char **v; Loc *locs; int n; } names;
}

/* Everything is allocated in the Program's arena and freed with it at once, so no
 * semantic value needs a destructor when the parser discards it. */

%token NEWLINE "end of line"
%token <str> IDENT "name"
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token <str> STRING "string"
%token KW_MODEL "'model'" KW_INPUT "'input'" KW_OUTPUT "'output'" KW_PARAM "'param'" KW_TRAIN "'train'"

%left '+' '-'
%left '*' '/'
%precedence NEG

%type <ast> expr primary postfix arg
%type <list> args exprs
%type <slices> slices
%type <slice> slice
%type <names> names
%type <dims> dims
%type <dim> dim
%type <type> type
%type <stmt> stmt
%type <entries> entries
%type <entry> entry

%%

program
    : model_decl stmts
    ;

model_decl
    : %empty
    | KW_MODEL IDENT NEWLINE      { ls->prog->model_name = $2; ls->prog->model_loc = @2; }
    | KW_MODEL error NEWLINE      { yyerrok; }
    ;

stmts
    : %empty
    | stmts NEWLINE
    | stmts stmt NEWLINE          { if ($2) ast_push_stmt(ls->prog, $2); }
    | stmts error NEWLINE         { yyerrok; }
    ;

stmt
    : KW_INPUT IDENT ':' type
        { $$ = ast_stmt(ls->prog, ST_INPUT, @$); if ($$) { $$->name = $2; $$->name_loc = @2; $$->type = $4; } }
    | KW_PARAM IDENT ':' type '=' expr
        { $$ = ast_stmt(ls->prog, ST_PARAM, @$); if ($$) { $$->name = $2; $$->name_loc = @2; $$->type = $4; $$->expr = $6; } }
    | IDENT '=' expr
        { $$ = ast_stmt(ls->prog, ST_ASSIGN, @$); if ($$) { $$->name = $1; $$->name_loc = @1; $$->expr = $3; } }
    | IDENT ',' names '=' expr
        { $$ = mk_unpack(ls, @$, $1, @1, $3.v, $3.locs, $3.n, $5); }
    | KW_OUTPUT IDENT
        { $$ = ast_stmt(ls->prog, ST_OUTPUT, @$); if ($$) { $$->name = $2; $$->name_loc = @2; } }
    | KW_OUTPUT IDENT '=' expr
        { $$ = ast_stmt(ls->prog, ST_OUTPUT, @$); if ($$) { $$->name = $2; $$->name_loc = @2; $$->expr = $4; } }
    | KW_TRAIN '{' entries '}'
        { $$ = ast_stmt(ls->prog, ST_TRAIN, @$); if ($$) { $$->entries = $3.v; $$->nentries = $3.n; } }
    | KW_TRAIN '{' entries entry '}'
        {
            $$ = ast_stmt(ls->prog, ST_TRAIN, @$);
            TrainEntry *v = ast_grow(ls->prog, $3.v, $3.n, sizeof *v);
            if ($$ && v) { v[$3.n] = $4; $$->entries = v; $$->nentries = $3.n + 1; }
        }
    ;

names
    : IDENT                       { $$.v = NULL; $$.locs = NULL; $$.n = 0; add_name(ls, &$$.v, &$$.locs, &$$.n, $1, @1); }
    | names ',' IDENT             { $$ = $1; add_name(ls, &$$.v, &$$.locs, &$$.n, $3, @3); }
    ;

entries
    : %empty                      { $$.v = NULL; $$.n = 0; }
    | entries NEWLINE             { $$ = $1; }
    | entries entry NEWLINE
        {
            $$ = $1;
            TrainEntry *v = ast_grow(ls->prog, $1.v, $1.n, sizeof *v);
            if (v) { v[$1.n] = $2; $$.v = v; $$.n = $1.n + 1; }
        }
    | entries error NEWLINE       { $$ = $1; yyerrok; }
    ;

entry
    : IDENT '=' expr              { $$.key = $1; $$.key_loc = @1; $$.value = $3; }
    ;

type
    : IDENT '[' dims ']'          { $$.dtype = $1; $$.dtype_loc = @1; $$.dims = $3.v; $$.rank = $3.n; $$.loc = @$; }
    | IDENT '[' ']'               { $$.dtype = $1; $$.dtype_loc = @1; $$.dims = NULL; $$.rank = 0; $$.loc = @$; }
    ;

dims
    : dim                         { $$.v = ast_grow(ls->prog, NULL, 0, sizeof(AstDim)); if ($$.v) $$.v[0] = $1; $$.n = 1; }
    | dims ',' dim
        {
            $$ = $1;
            AstDim *v = ast_grow(ls->prog, $1.v, $1.n, sizeof *v);
            if (v) { v[$1.n] = $3; $$.v = v; $$.n = $1.n + 1; }
        }
    ;

dim
    : INT                         { $$.is_sym = false; $$.value = $1; $$.sym = NULL; $$.loc = @$; }
    | IDENT                       { $$.is_sym = true; $$.value = 0; $$.sym = $1; $$.loc = @$; }
    | '-' INT                     { $$.is_sym = false; $$.value = -$2; $$.sym = NULL; $$.loc = @$; }
    ;

expr
    : primary
    | expr '+' expr               { $$ = mk_bin(ls, @$, '+', $1, $3); }
    | expr '-' expr               { $$ = mk_bin(ls, @$, '-', $1, $3); }
    | expr '*' expr               { $$ = mk_bin(ls, @$, '*', $1, $3); }
    | expr '/' expr               { $$ = mk_bin(ls, @$, '/', $1, $3); }
    | '-' expr %prec NEG
        {
            $$ = ast_new(ls->prog, AST_NEG, @$);
            if ($$) { $$->u.neg = $2; $$ = deepen(ls, $$, ast_height($2) + 1); }
        }
    ;

primary
    : INT                         { $$ = ast_new(ls->prog, AST_INT, @$); if ($$) $$->u.ival = $1; }
    | FLOAT                       { $$ = ast_new(ls->prog, AST_FLOAT, @$); if ($$) $$->u.fval = $1; }
    | STRING                      { $$ = ast_new(ls->prog, AST_STRING, @$); if ($$) $$->u.str = $1; }
    | '[' exprs ']'               { $$ = mk_list(ls, @$, $2.v, $2.n); }
    | postfix
    ;

/* what can be indexed: a name, a call, a bracketed expression, an indexing */
postfix
    : IDENT                       { $$ = ast_new(ls->prog, AST_NAME, @$); if ($$) $$->u.str = $1; }
    | IDENT '(' ')'               { $$ = mk_call(ls, @$, $1, @1, NULL, 0); }
    | IDENT '(' args ')'          { $$ = mk_call(ls, @$, $1, @1, $3.v, $3.n); }
    | IDENT '(' args ',' ')'      { $$ = mk_call(ls, @$, $1, @1, $3.v, $3.n); }
    | IDENT '(' error ')'         { $$ = NULL; /* reported; lowering stays quiet about it */ }
    | '(' expr ')'                { $$ = $2; if ($$) { $$->loc = @$; $$ = deepen(ls, $$, $$->height + 1); } }
    | postfix '[' slices ']'      { $$ = mk_index(ls, @$, $1, $3.v, $3.n); }
    ;

exprs
    : expr                        { $$.v = ast_grow(ls->prog, NULL, 0, sizeof(Ast *)); if ($$.v) $$.v[0] = $1; $$.n = 1; }
    | exprs ',' expr
        {
            $$ = $1;
            Ast **v = ast_grow(ls->prog, $1.v, $1.n, sizeof *v);
            if (v) { v[$1.n] = $3; $$.v = v; $$.n = $1.n + 1; }
        }
    ;

slices
    : slice                       { $$.v = ast_grow(ls->prog, NULL, 0, sizeof(AstSlice)); if ($$.v) $$.v[0] = $1; $$.n = 1; }
    | slices ',' slice
        {
            $$ = $1;
            AstSlice *v = ast_grow(ls->prog, $1.v, $1.n, sizeof *v);
            if (v) { v[$1.n] = $3; $$.v = v; $$.n = $1.n + 1; }
        }
    ;

slice
    : expr                        { $$ = (AstSlice){ false, $1, NULL, @$ }; }
    | ':'                         { $$ = (AstSlice){ true, NULL, NULL, @$ }; }
    | expr ':'                    { $$ = (AstSlice){ true, $1, NULL, @$ }; }
    | ':' expr                    { $$ = (AstSlice){ true, NULL, $2, @$ }; }
    | expr ':' expr               { $$ = (AstSlice){ true, $1, $3, @$ }; }
    ;

args
    : arg                         { $$.v = ast_grow(ls->prog, NULL, 0, sizeof(Ast *)); if ($$.v) $$.v[0] = $1; $$.n = 1; }
    | args ',' arg
        {
            $$ = $1;
            Ast **v = ast_grow(ls->prog, $1.v, $1.n, sizeof *v);
            if (v) { v[$1.n] = $3; $$.v = v; $$.n = $1.n + 1; }
        }
    ;

arg
    : expr
    | IDENT '=' expr
        {
            $$ = ast_new(ls->prog, AST_KWARG, @$);
            if ($$) {
                $$->u.kw.name = $1; $$->u.kw.name_loc = @1; $$->u.kw.value = $3;
                $$ = deepen(ls, $$, ast_height($3) + 1);
            }
        }
    ;

%%

static Ast *mk_call(struct LexState *ls, Loc loc, char *fn, Loc fn_loc, Ast **args, int nargs)
{
    Ast *a = ast_new(ls->prog, AST_CALL, loc);
    if (!a) return NULL;
    a->u.call.fn = fn;
    a->u.call.fn_loc = fn_loc;
    a->u.call.args = args;
    a->u.call.nargs = nargs;
    int h = 0;
    for (int i = 0; i < nargs; i++)
        if (ast_height(args[i]) > h) h = ast_height(args[i]);
    return deepen(ls, a, h + 1);
}

static Ast *mk_bin(struct LexState *ls, Loc loc, char op, Ast *l, Ast *r)
{
    Ast *a = ast_new(ls->prog, AST_BINARY, loc);
    if (!a) return NULL;
    a->u.bin.op = op;
    a->u.bin.l = l;
    a->u.bin.r = r;
    int hl = ast_height(l), hr = ast_height(r);
    return deepen(ls, a, (hl > hr ? hl : hr) + 1);
}

/* [e1, e2, ...]: a level above its deepest item. */
static Ast *mk_list(struct LexState *ls, Loc loc, Ast **items, int n)
{
    Ast *a = ast_new(ls->prog, AST_LIST, loc);
    if (!a) return NULL;
    a->u.list.items = items;
    a->u.list.n = n;
    int h = 0;
    for (int i = 0; i < n; i++)
        if (ast_height(items[i]) > h) h = ast_height(items[i]);
    return deepen(ls, a, h + 1);
}

/* base[i, a:b, :]: a level above the deepest of its base and its items' ends. */
static Ast *mk_index(struct LexState *ls, Loc loc, Ast *base, AstSlice *items, int n)
{
    Ast *a = ast_new(ls->prog, AST_INDEX, loc);
    if (!a) return NULL;
    a->u.index.base = base;
    a->u.index.items = items;
    a->u.index.n = n;
    int h = ast_height(base);
    for (int i = 0; i < n; i++) {
        if (ast_height(items[i].start) > h) h = ast_height(items[i].start);
        if (ast_height(items[i].end) > h) h = ast_height(items[i].end);
    }
    return deepen(ls, a, h + 1);
}

/* Sets a's height; an expression deeper than AST_MAX_DEPTH is reported at the level
 * that goes past it and dropped, so that every walk over the tree (lowering, the dumps)
 * recurses at most AST_MAX_DEPTH times.  Its enclosing levels see an error operand (NULL)
 * and add no second message. */
static Ast *deepen(struct LexState *ls, Ast *a, int height)
{
    a->height = height;
    if (height <= AST_MAX_DEPTH) return a;
    diag_error(ls->diag, a->loc, "expression nested too deeply (more than %d levels)", AST_MAX_DEPTH);
    return NULL;
}

/* Bison calls this only for "memory exhausted": its stack reached YYMAXDEPTH, which
 * only an expression deeper than AST_MAX_DEPTH does (see above), or an allocation
 * failed.  Which one: an allocation of the stack's largest size succeeds in the first
 * case and fails in the second (and after an injected failure, every one does). */
static void netyyerror(Loc *loc, void *scanner, struct LexState *ls, const char *msg)
{
    (void)scanner;
    if (strcmp(msg, "memory exhausted") != 0) {
        diag_error(ls->diag, *loc, "%s", msg);
        return;
    }
    void *probe = gc_malloc(YYSTACK_BYTES(YYMAXDEPTH));
    ls->too_deep = probe != NULL;   /* else parse_program reports the lack of memory */
    gc_free(probe);
    if (ls->too_deep) diag_error(ls->diag, *loc, "expression nested too deeply (more than %d levels)", AST_MAX_DEPTH);
}

static void add_name(struct LexState *ls, char ***names, Loc **locs, int *n, char *name, Loc loc)
{
    char **v = ast_grow(ls->prog, *names, *n, sizeof *v);
    Loc *l = ast_grow(ls->prog, *locs, *n, sizeof *l);
    if (!v || !l) return;
    v[*n] = name;
    l[*n] = loc;
    *names = v;
    *locs = l;
    (*n)++;
}

/* a, b, c = EXPR: the names in order (the first one also as the statement's name). */
static Stmt *mk_unpack(struct LexState *ls, Loc loc, char *first, Loc first_loc, char **rest, Loc *rest_locs, int nrest, Ast *expr)
{
    Stmt *s = ast_stmt(ls->prog, ST_UNPACK, loc);
    if (!s) return NULL;
    s->name = first;
    s->name_loc = first_loc;
    s->expr = expr;
    add_name(ls, &s->names, &s->name_locs, &s->nnames, first, first_loc);
    for (int i = 0; i < nrest; i++) add_name(ls, &s->names, &s->name_locs, &s->nnames, rest[i], rest_locs[i]);
    return s->nnames == nrest + 1 ? s : NULL;
}

/* "unexpected X; expected A, B or C": the expected set is exact thanks to LAC, and said
 * as a reader thinks of it.  The tokens that can start an expression are "an
 * expression"; after a complete expression, what could continue its last operand (an
 * operator, '[' of an index, and after a name '(' of a call or '=' of a keyword
 * argument) is left out: possible at every such place, listing it hid what the
 * statement itself needed (`conv2d(x filters=8)`: ',' or ')').  Where a statement can
 * start, that is "a statement".  A list longer than MAXSAY is left out: it would read
 * as "anything". */
static int yyreport_syntax_error(const yypcontext_t *ctx, void *scanner, struct LexState *ls)
{
    (void)scanner;
    enum { MAXSAY = 6 };
    yysymbol_kind_t expected[YYNTOKENS];
    int n = yypcontext_expected_tokens(ctx, expected, YYNTOKENS);
    yysymbol_kind_t got = yypcontext_token(ctx);
    const int starts[] = { YYSYMBOL_IDENT, YYSYMBOL_INT, YYSYMBOL_FLOAT, YYSYMBOL_STRING, YYTRANSLATE('('),
                                  YYTRANSLATE('['), YYTRANSLATE('-') };
    const int operators[] = { YYTRANSLATE('+'), YYTRANSLATE('-'), YYTRANSLATE('*'), YYTRANSLATE('/'),
                                     YYTRANSLATE('['), YYTRANSLATE('('), YYTRANSLATE('=') };
    bool want[YYNTOKENS] = { false };
    for (int i = 0; i < n; i++) want[expected[i]] = true;
    bool expression = true, after_expression = want[YYTRANSLATE('+')] && want[YYTRANSLATE('*')];
    for (size_t i = 0; i < sizeof starts / sizeof *starts; i++) expression &= want[starts[i]];
    static const int statements[] = { YYSYMBOL_IDENT, YYSYMBOL_KW_INPUT, YYSYMBOL_KW_OUTPUT, YYSYMBOL_KW_PARAM,
                                      YYSYMBOL_KW_TRAIN, YYSYMBOL_NEWLINE, YYSYMBOL_YYEOF, YYSYMBOL_KW_MODEL };
    bool statement = true;
    for (size_t i = 0; i < 5; i++) statement &= want[statements[i]];   /* the five that begin one */
    if (statement)
        for (size_t i = 0; i < sizeof statements / sizeof *statements; i++) want[statements[i]] = false;
    else if (expression)
        for (size_t i = 0; i < sizeof starts / sizeof *starts; i++) want[starts[i]] = false;
    else if (after_expression)
        for (size_t i = 0; i < sizeof operators / sizeof *operators; i++) want[operators[i]] = false;
    const char *say[YYNTOKENS + 1];
    int nsay = 0;
    for (int i = 0; i < n; i++)
        if (want[expected[i]]) say[nsay++] = yysymbol_name(expected[i]);
    if (statement) say[nsay++] = "a statement";
    else if (expression) say[nsay++] = "an expression";
    char msg[512];
    size_t len = (size_t)snprintf(msg, sizeof msg, "unexpected %s", yysymbol_name(got));
    if (n > 0 && nsay > 0 && nsay <= MAXSAY) {
        len += (size_t)snprintf(msg + len, sizeof msg - len, "; expected ");
        for (int i = 0; i < nsay && len < sizeof msg; i++)
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s", i == 0 ? "" : i == nsay - 1 ? " or " : ", ",
                                    say[i]);
    }
    Loc at = *yypcontext_location(ctx);
    diag_error(ls->diag, at, "%s", msg);
    /* An error at the end of a line, or on a later line than an open bracket: almost
     * always a missing ')'.  (Not an error on the bracket's own line, mid-expression.) */
    if (ls->depth > 0 && ls->depth <= 64) {
        Loc open = ls->open[ls->depth - 1];
        bool later = at.start > open.start && memchr(ls->src->text + open.start, '\n', at.start - open.start);
        if (later || got == YYSYMBOL_NEWLINE || got == YYSYMBOL_YYEOF)
            diag_note(ls->diag, open, "this '%c' is not closed", ls->src->text[open.start]);
    }
    /* Newlines end statements again, so recovery resumes at the next line rather than
     * swallowing the rest of the file into the open bracket. */
    ls->depth = 0;
    return 0;
}

Program *parse_program(const Source *src, DiagSink *d)
{
    Program *p = gc_calloc(1, sizeof *p);
    if (!p) {
        diag_plain(d, "out of memory while parsing '%s'", src->name);
        return NULL;
    }
    arena_init(&p->arena);
    if (src->len > UINT32_MAX - 1) {
        diag_plain(d, "'%s': file too large", src->name);
        return p;
    }
    if (memchr(src->text, 0, src->len)) {
        uint32_t at = (uint32_t)((const char *)memchr(src->text, 0, src->len) - src->text);
        diag_error(d, ((Loc){at, at + 1}), "NUL byte in source: this is not a text file");
        return p;
    }
    size_t valid = utf8_valid_prefix(src->text, src->len);
    if (valid != src->len) {
        diag_error(d, ((Loc){(uint32_t)valid, (uint32_t)valid + 1}),
                   "invalid UTF-8 byte 0x%02x: a .net file is UTF-8 text", (unsigned char)src->text[valid]);
        return p;
    }
    struct LexState st = { .prog = p, .diag = d, .src = src, .offset = 0, .depth = 0, .last_newline = 1 };
    yyscan_t scanner;
    if (netyylex_init_extra(&st, &scanner)) {
        diag_plain(d, "out of memory");
        return p;
    }
    YY_BUFFER_STATE buf = netyy_scan_bytes(src->text, (int)src->len, scanner);
    int rc = netyyparse(scanner, &st);
    netyy_delete_buffer(buf, scanner);
    netyylex_destroy(scanner);
    if ((rc == 2 && !st.too_deep) || p->arena.failed) diag_plain(d, "out of memory while parsing '%s'", src->name);
    if (d->nerrors == 0 && p->nstmts == 0)
        diag_error(d, ((Loc){0, 0}), "empty model: expected statements such as 'input x: f32[B, 4]'");
    return p;
}
