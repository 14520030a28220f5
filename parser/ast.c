#include "parser/ast.h"
#include <string.h>

Ast *ast_new(Program *p, AstKind kind, Loc loc)
{
    Ast *a = arena_alloc(&p->arena, sizeof *a);
    if (!a) return NULL;
    a->kind = kind;
    a->height = 1;
    a->loc = loc;
    return a;
}

int ast_height(const Ast *a) { return a ? a->height : 0; }

Stmt *ast_stmt(Program *p, StmtKind kind, Loc loc)
{
    Stmt *s = arena_alloc(&p->arena, sizeof *s);
    if (!s) return NULL;
    s->kind = kind;
    s->loc = loc;
    return s;
}

void *ast_grow(Program *p, void *array, int count, size_t elem)
{
    /* Capacity doubles at powers of two, so appending n items costs O(n) overall. */
    if (count > 0 && (count & (count - 1)) != 0) return array;
    size_t cap = count == 0 ? 4 : (size_t)count * 2;
    if (count > 0 && count < 4) return array;
    void *n = arena_alloc(&p->arena, cap * elem);
    if (!n) return NULL;
    if (count) memcpy(n, array, (size_t)count * elem);
    return n;
}

void ast_push_stmt(Program *p, Stmt *s)
{
    if (p->nstmts == p->stmt_cap) {
        int cap = p->stmt_cap ? p->stmt_cap * 2 : 16;
        Stmt **n = arena_alloc(&p->arena, (size_t)cap * sizeof *n);
        if (!n) return;
        if (p->nstmts) memcpy(n, p->stmts, (size_t)p->nstmts * sizeof *n);
        p->stmts = n;
        p->stmt_cap = cap;
    }
    p->stmts[p->nstmts++] = s;
}

void ast_free(Program *p)
{
    if (!p) return;
    arena_free(&p->arena);
    gc_free(p);
}

static const char *kind_names[AST_KIND_COUNT] = {
    "int", "float", "string", "name", "call", "binary", "neg", "kwarg", "list", "index",
};
const char *ast_kind_name(AstKind k) { return (unsigned)k < AST_KIND_COUNT ? kind_names[k] : "?"; }

static const char *stmt_names[ST_KIND_COUNT] = { "input", "param", "assign", "output", "train", "unpack" };

static void print_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

/* ---- text ------------------------------------------------------------------ */

static void expr_text(const Ast *a, FILE *out)
{
    if (!a) { fputs("<error>", out); return; }
    switch (a->kind) {
    case AST_INT: fprintf(out, "%lld", (long long)a->u.ival); break;
    case AST_FLOAT: fprintf(out, "%.9g", a->u.fval); break;
    case AST_STRING: print_json_string(out, a->u.str); break;
    case AST_NAME: fputs(a->u.str, out); break;
    case AST_CALL:
        fprintf(out, "%s(", a->u.call.fn);
        for (int i = 0; i < a->u.call.nargs; i++) {
            if (i) fputs(", ", out);
            expr_text(a->u.call.args[i], out);
        }
        fputc(')', out);
        break;
    case AST_BINARY:
        fputc('(', out);
        expr_text(a->u.bin.l, out);
        fprintf(out, " %c ", a->u.bin.op);
        expr_text(a->u.bin.r, out);
        fputc(')', out);
        break;
    case AST_NEG: fputs("-", out); expr_text(a->u.neg, out); break;
    case AST_KWARG: fprintf(out, "%s=", a->u.kw.name); expr_text(a->u.kw.value, out); break;
    case AST_LIST:
        fputc('[', out);
        for (int i = 0; i < a->u.list.n; i++) {
            if (i) fputs(", ", out);
            expr_text(a->u.list.items[i], out);
        }
        fputc(']', out);
        break;
    case AST_INDEX:
        expr_text(a->u.index.base, out);
        fputc('[', out);
        for (int i = 0; i < a->u.index.n; i++) {
            const AstSlice *it = &a->u.index.items[i];
            if (i) fputs(", ", out);
            if (it->start) expr_text(it->start, out);
            if (it->range) fputc(':', out);
            if (it->end) expr_text(it->end, out);
        }
        fputc(']', out);
        break;
    case AST_KIND_COUNT: break;
    }
}

static void type_text(const AstType *t, FILE *out)
{
    fprintf(out, "%s[", t->dtype ? t->dtype : "?");
    for (int i = 0; i < t->rank; i++) {
        if (i) fputs(", ", out);
        if (t->dims[i].is_sym) fputs(t->dims[i].sym, out);
        else fprintf(out, "%lld", (long long)t->dims[i].value);
    }
    fputc(']', out);
}

void ast_dump_text(const Program *p, const Source *src, FILE *out)
{
    fprintf(out, "ast %s\n", p->model_name ? p->model_name : "(unnamed)");
    for (int i = 0; i < p->nstmts; i++) {
        const Stmt *s = p->stmts[i];
        int line, col;
        diag_line_col(src, s->loc.start, &line, &col);
        fprintf(out, "%4d:%-3d %-6s ", line, col, stmt_names[s->kind]);
        switch (s->kind) {
        case ST_INPUT: fprintf(out, "%s: ", s->name); type_text(&s->type, out); break;
        case ST_PARAM: fprintf(out, "%s: ", s->name); type_text(&s->type, out); fputs(" = ", out); expr_text(s->expr, out); break;
        case ST_ASSIGN: fprintf(out, "%s = ", s->name); expr_text(s->expr, out); break;
        case ST_UNPACK:
            for (int k = 0; k < s->nnames; k++) fprintf(out, "%s%s", k ? ", " : "", s->names[k]);
            fputs(" = ", out);
            expr_text(s->expr, out);
            break;
        case ST_OUTPUT: fputs(s->name, out); if (s->expr) { fputs(" = ", out); expr_text(s->expr, out); } break;
        case ST_TRAIN:
            fputs("{", out);
            for (int k = 0; k < s->nentries; k++) {
                fprintf(out, "%s %s = ", k ? "," : "", s->entries[k].key);
                expr_text(s->entries[k].value, out);
            }
            fputs(" }", out);
            break;
        case ST_KIND_COUNT: break;
        }
        fputc('\n', out);
    }
}

/* ---- json ------------------------------------------------------------------ */

static void loc_json(const Source *src, Loc l, FILE *out)
{
    int line, col;
    diag_line_col(src, l.start, &line, &col);
    fprintf(out, "\"line\": %d, \"col\": %d", line, col);
}

static void expr_json(const Ast *a, const Source *src, FILE *out)
{
    if (!a) { fputs("null", out); return; }
    fprintf(out, "{\"kind\": \"%s\", ", ast_kind_name(a->kind));
    loc_json(src, a->loc, out);
    switch (a->kind) {
    case AST_INT: fprintf(out, ", \"value\": %lld", (long long)a->u.ival); break;
    case AST_FLOAT: fprintf(out, ", \"value\": %.9g", a->u.fval); break;
    case AST_STRING: case AST_NAME: fputs(", \"value\": ", out); print_json_string(out, a->u.str); break;
    case AST_CALL:
        fputs(", \"fn\": ", out);
        print_json_string(out, a->u.call.fn);
        fputs(", \"args\": [", out);
        for (int i = 0; i < a->u.call.nargs; i++) {
            if (i) fputs(", ", out);
            expr_json(a->u.call.args[i], src, out);
        }
        fputc(']', out);
        break;
    case AST_BINARY:
        fprintf(out, ", \"op\": \"%c\", \"left\": ", a->u.bin.op);
        expr_json(a->u.bin.l, src, out);
        fputs(", \"right\": ", out);
        expr_json(a->u.bin.r, src, out);
        break;
    case AST_NEG: fputs(", \"operand\": ", out); expr_json(a->u.neg, src, out); break;
    case AST_KWARG:
        fputs(", \"name\": ", out);
        print_json_string(out, a->u.kw.name);
        fputs(", \"value\": ", out);
        expr_json(a->u.kw.value, src, out);
        break;
    case AST_LIST:
        fputs(", \"items\": [", out);
        for (int i = 0; i < a->u.list.n; i++) {
            if (i) fputs(", ", out);
            expr_json(a->u.list.items[i], src, out);
        }
        fputc(']', out);
        break;
    case AST_INDEX:
        fputs(", \"base\": ", out);
        expr_json(a->u.index.base, src, out);
        fputs(", \"items\": [", out);
        for (int i = 0; i < a->u.index.n; i++) {
            const AstSlice *it = &a->u.index.items[i];
            fprintf(out, "%s{\"range\": %s, \"start\": ", i ? ", " : "", it->range ? "true" : "false");
            expr_json(it->start, src, out);
            fputs(", \"end\": ", out);
            expr_json(it->end, src, out);
            fputc('}', out);
        }
        fputc(']', out);
        break;
    case AST_KIND_COUNT: break;
    }
    fputc('}', out);
}

void ast_dump_json(const Program *p, const Source *src, FILE *out)
{
    fputs("{\"format\": \"graphc-ast\", \"version\": 1, \"stage\": \"ast\", \"model\": ", out);
    if (p->model_name) print_json_string(out, p->model_name); else fputs("null", out);
    fputs(", \"statements\": [\n", out);
    for (int i = 0; i < p->nstmts; i++) {
        const Stmt *s = p->stmts[i];
        fprintf(out, "  {\"kind\": \"%s\", ", stmt_names[s->kind]);
        loc_json(src, s->loc, out);
        if (s->name) { fputs(", \"name\": ", out); print_json_string(out, s->name); }
        if (s->kind == ST_UNPACK) {
            fputs(", \"names\": [", out);
            for (int k = 0; k < s->nnames; k++) {
                if (k) fputs(", ", out);
                print_json_string(out, s->names[k]);
            }
            fputc(']', out);
        }
        if (s->kind == ST_INPUT || s->kind == ST_PARAM) {
            fputs(", \"dtype\": ", out);
            print_json_string(out, s->type.dtype ? s->type.dtype : "?");
            fputs(", \"shape\": [", out);
            for (int k = 0; k < s->type.rank; k++) {
                if (k) fputs(", ", out);
                if (s->type.dims[k].is_sym) print_json_string(out, s->type.dims[k].sym);
                else fprintf(out, "%lld", (long long)s->type.dims[k].value);
            }
            fputc(']', out);
        }
        if (s->expr) { fputs(", \"expr\": ", out); expr_json(s->expr, src, out); }
        if (s->kind == ST_TRAIN) {
            fputs(", \"entries\": [", out);
            for (int k = 0; k < s->nentries; k++) {
                if (k) fputs(", ", out);
                fputs("{\"key\": ", out);
                print_json_string(out, s->entries[k].key);
                fputs(", \"value\": ", out);
                expr_json(s->entries[k].value, src, out);
                fputc('}', out);
            }
            fputc(']', out);
        }
        fprintf(out, "}%s\n", i + 1 < p->nstmts ? "," : "");
    }
    fputs("]}\n", out);
}
