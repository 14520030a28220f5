/* Checkpoints and output files.
 *
 * Fields: checkpoints crafted with valid CRCs and one hostile field each (a table of
 * cases: steps, counts, name lengths, names, roles, ranks, dims, shapes, duplicate,
 * missing and unknown tensors, optimizer state, non-finite values, end marker), read
 * by the three readers graphc has (the forward graph, as eval and predict do; the
 * training graph resuming; the training graph resuming with --reset-optimizer): each
 * is accepted or refused as the case says, a refusal names the file and the field and
 * leaves the weights as they were.
 * Streams: /dev/zero, a folder, FIFOs (a good checkpoint, endless bytes, a record
 * declaring 2^44 bytes): each ends, after reading no more than the model can need.
 * Runs: train_run resuming from a step of 2^64-1 or past the run, or without the
 * optimizer's state, and outputs that cannot be written are refused before the first
 * step.
 * Output files (util/outfile.h): through symlinks (relative, chained, dangling), never
 * over a FIFO, a device or a folder, the old file kept when a write fails. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include "graph/lower.h"
#include "graph/passes.h"
#include "run/plot.h"
#include "run/train.h"
#include "util/outfile.h"

/* Adam: two state tensors per parameter; a convolution: a rank-4 kernel. */
static const char model_text[] =
    "input x: f32[B, 3, 3, 1]\ninput y: i32[B]\n"
    "h = relu(conv2d(x, filters=2, kernel=2))\n"
    "loss = cross_entropy(dense(flatten(h), units=3), y)\n"
    "train { data = synthetic(count=8); optimizer = adam(); batch = 4; epochs = 2; steps = 2; minimize = loss }\n";
enum { RUN_STEPS = 4 };

static char dir[64];
static Source src;
static DiagSink cd;
static Graph *fwd, *tg;
static Weights good;   /* of tg: what the crafted files hold */

static void setup(void)
{
    strcpy(dir, "/tmp/graphc-test-ckpt-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(source_from_string(&src, "ckpt.net", model_text), 0);
    diag_init(&cd, &src);
    ck_assert_msg(compile_source(&src, &cd, NULL, &fwd) == 0, "%s", cd.buf ? cd.buf : "");
    tg = pass_autodiff(fwd, &cd);
    ck_assert_ptr_nonnull(tg);
    ck_assert_int_eq(weights_init(&good, tg, 5, &cd), 0);
    /* optimizer state that is not zero, so that loading it (or not) shows */
    for (int v = 0; v < good.n; v++)
        if (tg->vars[v].role == VAR_STATE)
            for (int64_t i = 0; i < shape_numel(&good.shapes[v]); i++) good.data[v][i] = 0.25f + (float)i;
    good.step = 3;
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    weights_free(&good);
    graph_free(tg);
    graph_free(fwd);
    diag_free(&cd);
    source_free(&src);
}

static char *in_dir(const char *name)
{
    static char p[4][256];
    static int k;
    char *s = p[k++ % 4];
    snprintf(s, 256, "%s/%s", dir, name);
    return s;
}

/* ---- crafted checkpoints: every field settable, CRCs computed unless told ---------------- */

typedef struct CRec {
    char name[600];
    uint32_t name_len;     /* bytes of name written */
    uint32_t role, rank;
    uint64_t dims[8];
    const void *data;
    uint64_t data_bytes;
    bool bad_crc;
} CRec;

typedef struct CFile {
    char magic[8];
    uint32_t version, nvars;
    uint64_t step, seed;
    int n;
    CRec rec[64];
    const char *tail;
    size_t tail_len;
} CFile;

static void set_name(CRec *r, const char *name)
{
    snprintf(r->name, sizeof r->name, "%s", name);
    r->name_len = (uint32_t)strlen(name);
}

static void cfile_init(CFile *f)
{
    memset(f, 0, sizeof *f);
    memcpy(f->magic, "GRAPHCKP", 8);
    f->version = 1;
    f->nvars = (uint32_t)tg->nvars;
    f->step = (uint64_t)good.step;
    f->seed = 42;
    f->n = tg->nvars;
    for (int v = 0; v < tg->nvars; v++) {
        CRec *r = &f->rec[v];
        set_name(r, tg->vars[v].name);
        r->role = tg->vars[v].role;
        r->rank = (uint32_t)tg->vars[v].shape.rank;
        for (int k = 0; k < tg->vars[v].shape.rank; k++) r->dims[k] = (uint64_t)tg->vars[v].shape.d[k].v;
        r->data = good.data[v];
        r->data_bytes = (uint64_t)shape_numel(&tg->vars[v].shape) * 4;
    }
    f->tail = "END.";
    f->tail_len = 4;
}

static uLong put(FILE *out, uLong crc, const void *p, size_t n)
{
    ck_assert_uint_eq(fwrite(p, 1, n, out), n);
    return crc32(crc, p, (uInt)n);
}

static void cfile_write_to(const CFile *f, FILE *out)
{
    uLong crc = put(out, 0, f->magic, 8);
    crc = put(out, crc, &f->version, 4);
    crc = put(out, crc, &f->nvars, 4);
    crc = put(out, crc, &f->step, 8);
    crc = put(out, crc, &f->seed, 8);
    uint32_t c32 = (uint32_t)crc;
    put(out, 0, &c32, 4);
    for (int i = 0; i < f->n; i++) {
        const CRec *r = &f->rec[i];
        crc = put(out, 0, &r->name_len, 4);
        crc = put(out, crc, r->name, r->name_len < sizeof r->name ? r->name_len : sizeof r->name);
        crc = put(out, crc, &r->role, 4);
        crc = put(out, crc, &r->rank, 4);
        crc = put(out, crc, r->dims, 8 * (r->rank < 8 ? r->rank : 8));
        crc = put(out, crc, r->data, (size_t)r->data_bytes);
        c32 = (uint32_t)crc ^ (r->bad_crc ? 1u : 0u);
        put(out, 0, &c32, 4);
    }
    put(out, 0, f->tail, f->tail_len);
}

static void cfile_write(const CFile *f, const char *path)
{
    FILE *out = fopen(path, "wb");
    ck_assert_ptr_nonnull(out);
    cfile_write_to(f, out);
    ck_assert_int_eq(fclose(out), 0);
}

static int find_rec(const CFile *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->rec[i].name, name) == 0) return i;
    ck_abort_msg("no record '%s'", name);
    return -1;
}

static void drop_rec(CFile *f, int i)
{
    memmove(&f->rec[i], &f->rec[i + 1], (size_t)(f->n - i - 1) * sizeof *f->rec);
    f->n--;
    f->nvars--;
}

static void add_rec(CFile *f, const CRec *r)
{
    f->rec[f->n++] = *r;
    f->nvars++;
}

/* ---- the cases ------------------------------------------------------------------------------ */

static float bad_values[64];

static void m_none(CFile *f) { (void)f; }
static void m_step_max(CFile *f) { f->step = UINT64_MAX; }
static void m_step_past(CFile *f) { f->step = (1ull << 53) + 1; }
static void m_step_edge(CFile *f) { f->step = 1ull << 53; }
static void m_nvars_huge(CFile *f) { f->nvars = UINT32_MAX; }
static void m_nvars_short(CFile *f) { f->nvars--; }
static void m_nvars_long(CFile *f)
{
    drop_rec(f, f->n - 1);
    f->nvars++;
    f->tail_len = 0;
}
static void m_name_len_0(CFile *f) { f->rec[1].name_len = 0; }
static void m_name_len_huge(CFile *f) { f->rec[1].name_len = UINT32_MAX; }
static void m_name_len_512(CFile *f) { f->rec[1].name_len = 512; }
static void m_name_nul(CFile *f) { memcpy(f->rec[0].name + f->rec[0].name_len, "\0x", 2); f->rec[0].name_len += 2; }
static void m_name_utf8(CFile *f) { f->rec[0].name[2] = (char)0xff; }
static void m_role_3(CFile *f) { f->rec[0].role = 3; }
static void m_role_buffer(CFile *f) { f->rec[0].role = VAR_BUFFER; }
static void m_role_swapped(CFile *f) { f->rec[0].role = VAR_STATE; }
static void m_rank_7(CFile *f) { f->rec[0].rank = 7; }
static void m_rank_huge(CFile *f) { f->rec[0].rank = UINT32_MAX; }
static void m_dim_0(CFile *f) { f->rec[0].dims[1] = 0; }
static void m_dim_huge(CFile *f) { f->rec[0].dims[0] = (1ull << 40) + 1; }
static void m_dims_overflow(CFile *f) { f->rec[0].dims[0] = f->rec[0].dims[1] = 1ull << 40; }
static void m_dim_past_file(CFile *f) { f->rec[0].dims[0] = 1ull << 40; }

static void m_other_shape(CFile *f)
{
    CRec *r = &f->rec[find_rec(f, "dense/kernel")];
    r->dims[0] *= 2;
    r->data_bytes *= 2;
    static float twice[4096];
    ck_assert_uint_le(r->data_bytes, sizeof twice);
    r->data = twice;
}

/* The cases that add a record drop one first: the count stays one a checkpoint of
 * the model can have, so that the record itself is what is refused. */
static void add_instead(CFile *f, const char *name)
{
    CRec r = f->rec[find_rec(f, name)];
    drop_rec(f, find_rec(f, "conv2d/bias:v"));
    add_rec(f, &r);
}

static void m_param_twice(CFile *f) { add_instead(f, "dense/bias"); }
static void m_state_twice(CFile *f) { add_instead(f, "dense/bias:m"); }
static void m_unknown_param(CFile *f) { set_name(&f->rec[find_rec(f, "dense/bias")], "dense_9/bias"); }

static void m_state_of_nothing(CFile *f) { set_name(&f->rec[find_rec(f, "dense/bias:m")], "nothing:m"); }

/* Adam's m and v, and two more: more than any optimizer keeps (3, RMSprop's) */
static void m_fourth_state(CFile *f)
{
    add_instead(f, "dense/bias:m");
    set_name(&f->rec[f->n - 1], "dense/bias:w");
    CRec r = f->rec[find_rec(f, "dense/bias:m")];
    drop_rec(f, find_rec(f, "conv2d/bias:m"));
    set_name(&r, "dense/bias:u");
    add_rec(f, &r);
}

static void m_state_shape(CFile *f)
{
    CRec *r = &f->rec[find_rec(f, "dense/kernel:v")];
    r->dims[r->rank++] = 1;
}

static void m_param_missing(CFile *f) { drop_rec(f, find_rec(f, "dense/bias")); }

static void m_no_state(CFile *f)
{
    for (int i = f->n - 1; i >= 0; i--)
        if (f->rec[i].role == VAR_STATE) drop_rec(f, i);
}

static void m_part_state(CFile *f) { drop_rec(f, find_rec(f, "dense/kernel:v")); }

static void m_other_optimizer(CFile *f)
{
    for (int i = f->n - 1; i >= 0; i--) {
        CRec *r = &f->rec[i];
        size_t n = strlen(r->name);
        if (r->role == VAR_STATE && strcmp(r->name + n - 2, ":v") == 0) drop_rec(f, i);
        else if (r->role == VAR_STATE) {
            char name[600];
            snprintf(name, sizeof name, "%.*s:velocity", (int)(n - 2), r->name);
            set_name(r, name);
        }
    }
}

static void m_nan_param(CFile *f)
{
    CRec *r = &f->rec[find_rec(f, "dense/bias")];
    memcpy(bad_values, r->data, (size_t)r->data_bytes);
    bad_values[2] = NAN;
    r->data = bad_values;
}

static void m_inf_state(CFile *f)
{
    CRec *r = &f->rec[find_rec(f, "dense/bias:v")];
    memcpy(bad_values, r->data, (size_t)r->data_bytes);
    bad_values[1] = -INFINITY;
    r->data = bad_values;
}

static void m_bad_crc(CFile *f) { f->rec[2].bad_crc = true; }
static void m_trailing(CFile *f) { f->tail = "END.\0"; f->tail_len = 5; }
static void m_no_end(CFile *f) { f->tail_len = 0; }
static void m_version(CFile *f) { f->version = 2; }
static void m_magic(CFile *f) { f->magic[3] = 'X'; }

typedef struct Case {
    const char *what;
    void (*mutate)(CFile *f);
    bool eval_ok, resume_ok, reset_ok;
    const char *msg;   /* in every refusal */
} Case;

static const Case cases[] = {
    { "unchanged", m_none, true, true, true, NULL },
    { "step 2^64-1", m_step_max, false, false, false, "header: step 18446744073709551615 is out of range" },
    { "step 2^53+1", m_step_past, false, false, false, "is out of range" },
    { "step 2^53 (the run checks it)", m_step_edge, true, true, true, NULL },
    { "tensor count 2^32-1", m_nvars_huge, false, false, false, "4294967295 tensors, more than a checkpoint of this model holds" },
    { "tensor count one short", m_nvars_short, false, false, false, "unexpected bytes after the last tensor" },
    { "tensor count one more", m_nvars_long, false, false, false, "truncated" },
    { "name length 0", m_name_len_0, false, false, false, "tensor 1: name length 0 (from 1 to 511)" },
    { "name length 2^32-1", m_name_len_huge, false, false, false, "tensor 1: name length 4294967295" },
    { "name length 512", m_name_len_512, false, false, false, "tensor 1: name length 512" },
    { "a NUL in a name", m_name_nul, false, false, false, "tensor 0: the name holds a NUL" },
    { "invalid UTF-8 in a name", m_name_utf8, false, false, false, "invalid UTF-8" },
    { "role 3", m_role_3, false, false, false, "role 3 (0 parameter, 1 optimizer state, 2 buffer)" },
    { "a parameter stored as state", m_role_swapped, false, false, false, "is stored as optimizer state; the model has it as a parameter" },
    { "a parameter stored as a buffer", m_role_buffer, false, false, false, "is stored as a buffer; the model has it as a parameter" },
    { "rank 7", m_rank_7, false, false, false, "rank 7 (at most 6)" },
    { "rank 2^32-1", m_rank_huge, false, false, false, "rank 4294967295 (at most 6)" },
    { "dimension 0", m_dim_0, false, false, false, "dimension 1 is 0 (each from 1 to 2^40" },
    { "dimension 2^40+1", m_dim_huge, false, false, false, "dimension 0 is 1099511627777" },
    { "dimensions whose product overflows", m_dims_overflow, false, false, false, "dimension 1 is 1099511627776" },
    { "a dimension of 2^40, the data past the file", m_dim_past_file, false, false, false, "truncated: needs" },
    { "another shape, with its data", m_other_shape, false, false, false, "'dense/kernel' has shape [" },
    { "a parameter twice", m_param_twice, false, false, false, "'dense/bias' appears twice" },
    { "a state tensor twice", m_state_twice, false, false, false, "'dense/bias:m' appears twice" },
    { "an unknown parameter", m_unknown_param, false, false, false, "'dense_9/bias' is not a parameter of this model" },
    { "state of no parameter", m_state_of_nothing, false, false, false, "'nothing:m' is optimizer state of no parameter" },
    { "a fourth state tensor", m_fourth_state, false, false, false, "more optimizer state tensors than an optimizer keeps" },
    { "state of another shape", m_state_shape, false, false, false, "'dense/kernel:v' has shape [" },
    { "a parameter missing", m_param_missing, false, false, false, "has no tensor 'dense/bias' that the model needs" },
    { "no optimizer state", m_no_state, true, false, true, "has no optimizer state for this run" },
    { "part of the optimizer state", m_part_state, true, false, true, "only part of the optimizer state" },
    { "another optimizer's state", m_other_optimizer, true, false, true, "it holds another optimizer's state" },
    { "NaN in a parameter", m_nan_param, false, false, false, "'dense/bias': element 2 is NaN" },
    { "an infinity in optimizer state", m_inf_state, true, false, true, "'dense/bias:v': element 1 is infinite" },
    { "a record's CRC", m_bad_crc, false, false, false, "checksum mismatch" },
    { "bytes after the end marker", m_trailing, false, false, false, "unexpected bytes after the last tensor" },
    { "no end marker", m_no_end, false, false, false, "missing end marker" },
    { "version 2", m_version, false, false, false, "checkpoint version 2" },
    { "bad magic", m_magic, false, false, false, "bad magic" },
};

/* A reader: the forward graph (eval, predict), or the training graph resuming. */
typedef enum Reader { R_EVAL, R_RESUME, R_RESET, R_COUNT } Reader;

static int read_with(Reader k, const char *path, Weights *w, DiagSink *d)
{
    if (k == R_EVAL) return checkpoint_load(path, fwd, w, d);
    return checkpoint_resume(path, tg, w, k == R_RESET, d);
}

static bool same_data(const Weights *a, int va, const Weights *b, int vb)
{
    return memcmp(a->data[va], b->data[vb], (size_t)shape_numel(&a->shapes[va]) * 4) == 0;
}

START_TEST(crafted_fields)
{
    const Case *c = &cases[_i / R_COUNT];
    Reader k = (Reader)(_i % R_COUNT);
    bool ok = k == R_EVAL ? c->eval_ok : k == R_RESUME ? c->resume_ok : c->reset_ok;
    CFile *f = calloc(1, sizeof *f);
    cfile_init(f);
    c->mutate(f);
    const char *path = in_dir("c.ckpt");
    cfile_write(f, path);
    Weights w, before;
    const Graph *g = k == R_EVAL ? fwd : tg;
    ck_assert_int_eq(weights_init(&w, g, 99, &cd), 0);
    ck_assert_int_eq(weights_init(&before, g, 99, &cd), 0);
    DiagSink d;
    diag_init(&d, NULL);
    int rc = read_with(k, path, &w, &d);
    const char *reader = k == R_EVAL ? "eval" : k == R_RESUME ? "resume" : "resume --reset-optimizer";
    if (ok) {
        ck_assert_msg(rc == 0, "%s, %s: refused: %s", c->what, reader, d.buf ? d.buf : "");
        for (int v = 0; v < w.n; v++) {
            /* the forward graph's vars are tg's first ones (forward_vars_first) */
            if (g->vars[v].role == VAR_PARAM || k == R_RESUME) ck_assert(same_data(&w, v, &good, v));
            else
                for (int64_t i = 0; i < shape_numel(&w.shapes[v]); i++) ck_assert(w.data[v][i] == 0.0f);
        }
        ck_assert_int_eq(w.step, (int64_t)f->step);
    } else {
        ck_assert_msg(rc != 0, "%s, %s: accepted", c->what, reader);
        ck_assert_int_ge(d.nerrors, 1);
        ck_assert_msg(strstr(d.buf, path) && strstr(d.buf, c->msg), "%s, %s: expected '%s' naming %s, got: %s", c->what,
                      reader, c->msg, path, d.buf);
        for (int v = 0; v < w.n; v++) ck_assert(same_data(&w, v, &before, v));
        ck_assert_int_eq(w.step, before.step);
    }
    diag_free(&d);
    weights_free(&w);
    weights_free(&before);
    free(f);
}
END_TEST

/* The forward graph's vars are tg's first ones, in the same order: crafted_fields
 * compares them by index. */
START_TEST(forward_vars_first)
{
    ck_assert_int_lt(fwd->nvars, tg->nvars);
    for (int v = 0; v < fwd->nvars; v++) ck_assert_str_eq(fwd->vars[v].name, tg->vars[v].name);
}
END_TEST

/* Loading the training graph without asking to resume: its optimizer state is loaded
 * if there, all of it or none. */
START_TEST(state_all_or_none)
{
    CFile *f = calloc(1, sizeof *f);
    const char *path = in_dir("s.ckpt");
    Weights w;
    ck_assert_int_eq(weights_init(&w, tg, 99, &cd), 0);
    DiagSink d;
    diag_init(&d, NULL);
    cfile_init(f);
    m_part_state(f);
    cfile_write(f, path);
    ck_assert_int_eq(checkpoint_load(path, tg, &w, &d), -1);
    ck_assert_msg(strstr(d.buf, "only part of the optimizer state: 1 of 8 tensors missing ('dense/kernel:v')"), "%s",
                  d.buf);
    cfile_init(f);
    m_no_state(f);
    cfile_write(f, path);
    diag_free(&d);
    diag_init(&d, NULL);
    ck_assert_msg(checkpoint_load(path, tg, &w, &d) == 0, "%s", d.buf);
    diag_free(&d);
    weights_free(&w);
    free(f);
}
END_TEST

/* ---- streams -------------------------------------------------------------------------------- */

static void expect_refused(const char *path, const Graph *g, const char *msg)
{
    Weights w;
    ck_assert_int_eq(weights_init(&w, g, 99, &cd), 0);
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(checkpoint_load(path, g, &w, &d), -1);
    ck_assert_msg(strstr(d.buf, path) && strstr(d.buf, msg), "expected '%s' naming %s: %s", msg, path, d.buf);
    diag_free(&d);
    weights_free(&w);
}

START_TEST(stream_dev_zero)
{
    expect_refused("/dev/zero", fwd, "not a graphc checkpoint (bad magic)");
    expect_refused("/dev/urandom", tg, "bad magic");
}
END_TEST

START_TEST(stream_folder)
{
    expect_refused(dir, fwd, "Is a directory");
}
END_TEST

/* A child writes `head` to the FIFO, then (endless) zeros until the reader goes away;
 * it reports how many bytes it wrote through `counted`. */
static pid_t feed_fifo(const char *fifo, const CFile *head, bool endless, int counted[2])
{
    ck_assert_int_eq(pipe(counted), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_IGN);
        close(counted[0]);
        FILE *out = fopen(fifo, "wb");
        if (!out) _exit(2);
        if (head) cfile_write_to(head, out);
        long long total = ftell(out);
        static char zeros[65536];
        while (endless && fwrite(zeros, 1, sizeof zeros, out) == sizeof zeros) total += (long long)sizeof zeros;
        fclose(out);
        if (write(counted[1], &total, sizeof total) != (ssize_t)sizeof total) _exit(3);
        _exit(0);
    }
    close(counted[1]);
    return pid;
}

static long long fed_bytes(pid_t pid, int counted[2])
{
    long long total = -1;
    ck_assert_int_eq(read(counted[0], &total, sizeof total), (ssize_t)sizeof total);
    close(counted[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return total;
}

START_TEST(stream_fifo_good)
{
    const char *fifo = in_dir("fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    CFile *f = calloc(1, sizeof *f);
    cfile_init(f);
    int counted[2];
    pid_t pid = feed_fifo(fifo, f, false, counted);
    Weights w;
    ck_assert_int_eq(weights_init(&w, fwd, 99, &cd), 0);
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(checkpoint_load(fifo, fwd, &w, &d) == 0, "%s", d.buf);
    for (int v = 0; v < w.n; v++) ck_assert(same_data(&w, v, &good, v));
    fed_bytes(pid, counted);
    /* resuming reads the file twice (the seed first): a FIFO is refused at once */
    uint64_t seed;
    ck_assert_int_eq(checkpoint_seed(fifo, &seed, &d), -1);
    ck_assert_msg(strstr(d.buf, "not a regular file"), "%s", d.buf);
    diag_free(&d);
    weights_free(&w);
    free(f);
}
END_TEST

/* Endless bytes after a good checkpoint, after its header only, after a record that
 * declares 2^44 bytes of data: refused, having read no more than a checkpoint of the
 * model can hold (plus what the pipe buffers). */
static void endless_case(int which, const char *msg)
{
    const char *fifo = in_dir("fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    CFile *f = calloc(1, sizeof *f);
    cfile_init(f);
    if (which == 1) {
        f->n = 0;
        f->tail_len = 0;
    }
    if (which == 2) {
        f->n = 1;
        set_name(&f->rec[0], "zz");
        f->rec[0].dims[0] = 1ull << 40;
        f->rec[0].data_bytes = 0;
        f->tail_len = 0;
    }
    int counted[2];
    pid_t pid = feed_fifo(fifo, f, true, counted);
    expect_refused(fifo, tg, msg);
    long long fed = fed_bytes(pid, counted);
    ck_assert_msg(fed < (4 << 20), "the reader took %lld bytes", fed);
    free(f);
}

START_TEST(stream_fifo_endless)
{
    static const char *const msgs[] = { "unexpected bytes after the last tensor", "tensor 0: name length 0",
                                        "more than a checkpoint of this model can hold" };
    endless_case(_i, msgs[_i]);
}
END_TEST

/* A record larger than the model can need, in a file that holds it: refused by its
 * size (or its shape, when its name is the model's) before its data is read. */
START_TEST(record_too_large)
{
    CFile *f = calloc(1, sizeof *f);
    static float junk[1 << 18];
    cfile_init(f);
    CRec *r = &f->rec[find_rec(f, _i ? "dense/kernel" : "conv2d/bias")];
    if (!_i) set_name(r, "zz");
    r->rank = 1;
    r->dims[0] = sizeof junk / 4;
    r->data = junk;
    r->data_bytes = sizeof junk;
    const char *path = in_dir("big.ckpt");
    cfile_write(f, path);
    expect_refused(path, tg, _i ? "'dense/kernel' has shape [262144], the model needs [8, 3]"
                                : "'zz': 1048576 bytes of data, more than a checkpoint of this model can hold");
    free(f);
}
END_TEST

/* ---- training runs -------------------------------------------------------------------------- */

static int run(RunOptions *o, RunResult *r, DiagSink *d)
{
    o->threads = 1;
    diag_init(d, NULL);
    return train_run(fwd, o, r, NULL, d);
}

static void expect_run_refused(RunOptions *o, const char *msg)
{
    RunResult r;
    DiagSink d;
    ck_assert_int_eq(run(o, &r, &d), -1);
    ck_assert_msg(strstr(d.buf, msg), "expected '%s': %s", msg, d.buf);
    ck_assert_int_eq(r.nsteps, 0);   /* refused before the first step */
    run_result_free(&r);
    diag_free(&d);
}

/* The checkpoint: valid CRCs, step 2^64-1; and steps the run has not. */
START_TEST(resume_step_out_of_range)
{
    static const uint64_t steps[] = { UINT64_MAX, 1ull << 63, RUN_STEPS + 1 };
    static const char *const msgs[] = { "step 18446744073709551615 is out of range", "step 9223372036854775808 is out of range",
                                        "the checkpoint is at step 5, past the 4 steps of this run" };
    CFile *f = calloc(1, sizeof *f);
    cfile_init(f);
    f->step = steps[_i];
    const char *path = in_dir("r.ckpt");
    cfile_write(f, path);
    RunOptions o;
    run_options_default(&o);
    o.resume_path = path;
    expect_run_refused(&o, msgs[_i]);
    free(f);
}
END_TEST

/* Without the optimizer's state: refused, unless --reset-optimizer; then the run goes
 * on from the checkpoint's step with the state at zero. */
START_TEST(resume_without_state)
{
    CFile *f = calloc(1, sizeof *f);
    cfile_init(f);
    m_no_state(f);
    const char *path = in_dir("p.ckpt");
    cfile_write(f, path);
    RunOptions o;
    run_options_default(&o);
    o.resume_path = path;
    expect_run_refused(&o, "no optimizer state for this run: 8 tensors missing ('conv2d/kernel:m', 'conv2d/kernel:v', "
                           "'conv2d/bias:m', ...)");
    o.reset_optimizer = true;
    RunResult r;
    DiagSink d;
    ck_assert_msg(run(&o, &r, &d) == 0, "%s", d.buf);
    ck_assert_int_eq(r.first_step, 3);
    ck_assert(isnan(r.step_loss[2]) && isfinite(r.step_loss[3]));
    run_result_free(&r);
    diag_free(&d);
    free(f);
}
END_TEST

/* Outputs that cannot be written stop the run in its setup. */
START_TEST(outputs_checked_before_training)
{
    RunOptions o;
    run_options_default(&o);
    o.save_path = in_dir("missing/w.ckpt");
    expect_run_refused(&o, "cannot write checkpoint");
    run_options_default(&o);
    o.plot_path = in_dir("plot.svg");
    ck_assert_int_eq(mkfifo(o.plot_path, 0600), 0);
    expect_run_refused(&o, "it is a FIFO, not a regular file");
    ck_assert_int_eq(access(in_dir("missing"), F_OK), -1);
}
END_TEST

/* ---- output files --------------------------------------------------------------------------- */

static void write_text(const char *path, const char *text, DiagSink *d, int want)
{
    OutFile of;
    FILE *f = outfile_open(&of, path, "test output", d);
    int rc = -1;
    if (f) {
        fputs(text, f);
        rc = outfile_commit(&of, d);
    }
    ck_assert_msg(rc == want, "writing %s: %d: %s", path, rc, d->buf ? d->buf : "");
}

static char *slurp(const char *path)
{
    static char buf[256];
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Nothing in the folder but `names` (a temporary left behind would show). */
static void folder_holds(const char *folder, int n)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq %d", folder, n);
    ck_assert_msg(system(cmd) == 0, "%s does not hold %d entries", folder, n);
}

START_TEST(out_through_symlinks)
{
    DiagSink d;
    diag_init(&d, NULL);
    char sub[300], target[300];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(target, sizeof target, "%s/real", dir);
    /* relative, into another folder, then a chain; the links stay links */
    ck_assert_int_eq(symlink("../real", in_dir("sub/rel")), 0);
    ck_assert_int_eq(symlink("sub/rel", in_dir("chain")), 0);
    write_text(in_dir("chain"), "one\n", &d, 0);
    ck_assert_str_eq(slurp(target), "one\n");
    struct stat st;
    ck_assert_int_eq(lstat(in_dir("chain"), &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    ck_assert_int_eq(lstat(in_dir("sub/rel"), &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    /* the old file's mode is kept */
    ck_assert_int_eq(chmod(target, 0640), 0);
    write_text(in_dir("sub/rel"), "two\n", &d, 0);
    ck_assert_str_eq(slurp(target), "two\n");
    ck_assert_int_eq(stat(target, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0640);
    /* a dangling link: its target is created */
    ck_assert_int_eq(symlink("made", in_dir("dangling")), 0);
    write_text(in_dir("dangling"), "three\n", &d, 0);
    ck_assert_str_eq(slurp(in_dir("made")), "three\n");
    folder_holds(dir, 5);   /* sub, real, chain, dangling, made */
    folder_holds(sub, 1);
    diag_free(&d);
}
END_TEST

START_TEST(out_refuses_non_regular)
{
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(mkfifo(in_dir("fifo"), 0600), 0);
    ck_assert_int_eq(symlink("fifo", in_dir("to-fifo")), 0);
    ck_assert_int_eq(mkdir(in_dir("folder"), 0755), 0);
    ck_assert_int_eq(symlink("loop2", in_dir("loop1")), 0);
    ck_assert_int_eq(symlink("loop1", in_dir("loop2")), 0);
    static const struct { const char *path, *msg; } bad[] = {
        { "fifo", "it is a FIFO, not a regular file" },
        { "to-fifo", "(a symlink to '" },
        { "folder", "Is a directory" },
        { "loop1", "Too many levels of symbolic links" },
        { "missing/x", "folder '" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *path = in_dir(bad[i].path);
        write_text(path, "x", &d, -1);
        ck_assert_msg(strstr(d.buf, path) && strstr(d.buf, bad[i].msg), "%s: %s", bad[i].path, d.buf);
        diag_clear(&d);
        ck_assert_int_eq(outfile_check(path, "test output", &d), -1);
        diag_clear(&d);
    }
    write_text("/dev/null", "x", &d, -1);
    ck_assert_msg(strstr(d.buf, "it is a character device"), "%s", d.buf);
    struct stat st;
    ck_assert_int_eq(lstat(in_dir("fifo"), &st), 0);
    ck_assert(S_ISFIFO(st.st_mode));
    ck_assert_int_eq(stat("/dev/null", &st), 0);
    ck_assert(S_ISCHR(st.st_mode));
    folder_holds(dir, 5);   /* fifo, to-fifo, folder, loop1, loop2 */
    ck_assert_int_eq(outfile_check(in_dir("new"), "test output", &d), 0);
    ck_assert_int_eq(outfile_check(NULL, "test output", &d), 0);
    folder_holds(dir, 5);
    diag_free(&d);
}
END_TEST

/* A write that fails midway (the file size limit): the old file is as it was, no
 * temporary is left.  Likewise for a checkpoint and a plot. */
START_TEST(out_failed_write_keeps_old)
{
    DiagSink d;
    diag_init(&d, NULL);
    const char *path = in_dir("keep");
    write_text(path, "old\n", &d, 0);
    signal(SIGXFSZ, SIG_IGN);
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    float loss[200];
    for (int i = 0; i < 200; i++) loss[i] = 1.0f / (float)(i + 1);
    TrainLog log = { .nsteps = 200, .step_loss = loss, .title = "x" };
    /* (Check's own messages go through a file: the limit is lifted before any) */
    struct rlimit old, lim = { 100, RLIM_INFINITY };
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    OutFile of;
    FILE *f = outfile_open(&of, path, "test output", &d);
    int rc[3] = { f ? 0 : -2, checkpoint_save(path, tg, &good, 1, &d), plot_svg(path, &log, &d) };
    if (f) {
        fputs(big, f);
        rc[0] = outfile_commit(&of, &d);
    }
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_msg(rc[0] == -1 && rc[1] == -1 && rc[2] == -1, "%d %d %d: %s", rc[0], rc[1], rc[2], d.buf);
    ck_assert_int_eq(d.nerrors, 3);
    ck_assert_msg(strstr(d.buf, "File too large"), "%s", d.buf);
    ck_assert_str_eq(slurp(path), "old\n");
    folder_holds(dir, 1);
    diag_free(&d);
}
END_TEST

/* A checkpoint written through a symlink loads, and the link stays. */
START_TEST(save_through_symlink)
{
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(symlink("target.ckpt", in_dir("link.ckpt")), 0);
    ck_assert_int_eq(checkpoint_save(in_dir("link.ckpt"), tg, &good, 1, &d), 0);
    Weights w;
    ck_assert_int_eq(weights_init(&w, tg, 99, &cd), 0);
    ck_assert_msg(checkpoint_resume(in_dir("target.ckpt"), tg, &w, false, &d) == 0, "%s", d.buf);
    for (int v = 0; v < w.n; v++) ck_assert(same_data(&w, v, &good, v));
    struct stat st;
    ck_assert_int_eq(lstat(in_dir("link.ckpt"), &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    folder_holds(dir, 2);
    weights_free(&w);
    diag_free(&d);
}
END_TEST

static Suite *make_checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("fields");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, forward_vars_first);
    tcase_add_loop_test(tc, crafted_fields, 0, (int)(sizeof cases / sizeof *cases) * R_COUNT);
    tcase_add_test(tc, state_all_or_none);
    suite_add_tcase(s, tc);
    tc = tcase_create("streams");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, stream_dev_zero);
    tcase_add_test(tc, stream_folder);
    tcase_add_test(tc, stream_fifo_good);
    tcase_add_loop_test(tc, stream_fifo_endless, 0, 3);
    tcase_add_loop_test(tc, record_too_large, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("runs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, resume_step_out_of_range, 0, 3);
    tcase_add_test(tc, resume_without_state);
    tcase_add_test(tc, outputs_checked_before_training);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *make_outfile_suite(void)
{
    Suite *s = suite_create("outfile");
    TCase *tc = tcase_create("outfile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, out_through_symlinks);
    tcase_add_test(tc, out_refuses_non_regular);
    tcase_add_test(tc, out_failed_write_keeps_old);
    tcase_add_test(tc, save_through_symlink);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(make_checkpoint_suite());
    srunner_add_suite(sr, make_outfile_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
