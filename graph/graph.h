/* The dataflow graph: nodes are ops over tensors, in topological order.
 *
 * Ownership: a Graph owns one arena holding its nodes, names and input lists; it is
 * freed at once by graph_free.  Node ids are indices into g->nodes and every input
 * id of a node is smaller than its own, so the node array is a valid execution
 * order.  Tensor data never lives here: parameters are Vars (name, shape, how to
 * initialise), whose storage belongs to the executor's session. */
#ifndef GRAPHC_GRAPH_H
#define GRAPHC_GRAPH_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "graph/ops.h"
#include "util/diag.h"
#include "util/mem.h"

#define MAX_RANK 6
#define MAX_SYMS 8
/* The most optimizer state vars one parameter has (RMSprop centered with momentum). */
#define OPTIM_MAX_STATE 3

typedef enum DType { DT_F32, DT_I32, DT_COUNT } DType;
const char *dtype_name(DType t);

/* A dimension: v alone when sym < 0; v * symbol[sym] (v >= 1) when sym >= 0.
 * Symbols are sizes bound when the model runs, such as the batch B. */
typedef struct Dim {
    int64_t v;
    int16_t sym;
} Dim;

typedef struct Shape {
    int rank;
    Dim d[MAX_RANK];
} Shape;

typedef enum Padding { PAD_VALID, PAD_SAME, PAD_COUNT } Padding;

typedef enum InitKind {
    INIT_ZEROS, INIT_ONES, INIT_CONSTANT,      /* a: the constant */
    INIT_UNIFORM,                              /* a, b: bounds */
    INIT_NORMAL,                               /* a: mean, b: stddev */
    INIT_GLOROT_UNIFORM,                       /* Keras' default kernel initializer */
    INIT_HE_NORMAL,
    INIT_COUNT
} InitKind;
const char *init_name(InitKind k);

/* The order is stored in checkpoints (docs/checkpoint.md): append only. */
typedef enum VarRole {
    VAR_PARAM,            /* trained */
    VAR_STATE,            /* optimizer state of a parameter (a moment) */
    VAR_BUFFER,           /* not trained, not optimizer state, but kept with the model: batch
                           * norm's running mean and variance, updated by the training step */
    VAR_ROLE_COUNT
} VarRole;

/* A persistent tensor: a parameter, optimizer state, or a buffer (see VarRole). */
typedef struct Var {
    const char *name;     /* stable and readable: "conv2d/kernel", "dense_1/bias:m" */
    Shape shape;          /* always concrete */
    InitKind init;
    float init_a, init_b;
    int64_t fan_in, fan_out; /* for Glorot/He */
    VarRole role;
    int of;               /* VAR_STATE: the parameter var it belongs to; else -1 */
    Loc loc;              /* where it was declared or created */
} Var;

/* One step of a fused elementwise program (FUSED_ELEMWISE): op applied to operands,
 * each the node's input k (k >= 0) or the result of step s (-1 - s). */
#define EW_MAX_STEPS 8
typedef struct EwStep {
    int16_t op;           /* an OpKind: an elementwise function, UNARY_GRAD, DROPOUT, DROPOUT_GRAD */
    int16_t arg[2];
    int16_t of;           /* UNARY_GRAD: the forward op (an OpKind) */
    float p;              /* a unary function's parameter; DROPOUT(_GRAD): the rate */
    int stream;           /* DROPOUT(_GRAD) */
} EwStep;

/* A window op's attributes: convolutions (and their gradients) and pools. */
typedef struct WinAttr {
    int kh, kw;                               /* window (pools; conv takes it from w) */
    int sh, sw;                               /* strides */
    Padding padding;
    int pt, pb, pl, pr;                       /* resolved padding, set by shape inference */
    int act;                                  /* CONV2D_BIAS_ACT: the unary op applied last (an OpKind), or -1 */
    float act_p;                              /* its parameter */
} WinAttr;

/* The most pieces one slice_grad places (a split into more: several, added). */
#define SLICE_GRAD_MAX 8

typedef union NodeAttr {
    struct { int index; } input;              /* INPUT: position in g->inputs */
    struct { int var; } param;                /* PARAM: index into g->vars */
    struct { float value; } cnst;             /* CONST: a scalar */
    struct {                                  /* MATMUL, MATMUL_BIAS_ACT */
        bool ta, tb;                          /* transpose a / b */
        int act;                              /* MATMUL_BIAS_ACT: the unary op applied last (an OpKind), or -1 */
        float act_p;                          /* its parameter */
    } matmul;
    WinAttr win;                              /* CONV2D and its gradients; pools */
    struct {                                  /* CONV2D_MAXPOOL */
        WinAttr conv;                         /* the convolution; act: its epilogue, or -1 */
        WinAttr pool;                         /* the max pooling of its output */
    } convpool;
    struct { int axis; } concat;              /* CONCAT */
    struct {                                  /* SLICE: [off, off+len) along axis */
        int axis;
        int64_t off, len;
        Dim soff, slen;                       /* slen.v > 0: off and len are these with the
                                               * symbols bound, set by shape inference (the
                                               * gradient of a concat along the batch) */
    } slice;
    struct { float rate; int stream; } dropout;   /* DROPOUT, DROPOUT_GRAD */
    struct {                                  /* elementwise unary ops and UNARY_GRAD */
        int op;                               /* UNARY_GRAD: the forward op (an OpKind) */
        float p;                              /* the function's parameter (util/elemwise.def) */
    } unary;
    struct { int bucket; } allreduce;         /* ALLREDUCE, ALLREDUCE_WAIT: the bucket's tag */
    struct { const EwStep *step; int nstep; } ew; /* FUSED_ELEMWISE: the program (graph arena) */
    struct { float max_norm; } clip;          /* CLIP_SCALE: the gradients' global L2 norm is clipped to it */
    struct {                                  /* *_UPDATE, UPDATE_ALL, MATMUL_(GRAD_)UPDATE */
        int var;                              /* the parameter (UPDATE_ALL: -1) */
        int state[OPTIM_MAX_STATE];           /* its optimizer state vars (graph_state_vars' order), or -1 */
        int kind;                             /* the fused ops: the update they replace (an optimizer's *_UPDATE) */
        bool ta, tb;                          /* MATMUL_UPDATE: the gradient matmul's transpose flags */
        float momentum;                       /* BATCH_NORM_UPDATE: the layer's momentum (var: the running mean, state[0]: the variance) */
        int64_t count;                        /* BATCH_NORM_UPDATE: values per channel in the batch (Bessel's correction), set by shape inference */
    } update;
    /* ---- the transformer ops (issue 14) ---- */
    struct { int8_t perm[MAX_RANK]; } transpose;  /* TRANSPOSE: output axis i is input axis perm[i] */
    struct {                                  /* ops along a run of axes: SOFTMAX, LOG_SOFTMAX (one
                                               * axis), the reductions, EXPAND, LAYER_NORM and the
                                               * gradients of each; zeroed: the last axis alone */
        int after;                            /* the axes after the run (0: it ends at the last) */
        int n;                                /* the run's length; 0 means 1 */
        bool keepdims;                        /* REDUCE_*: the run stays, each axis of size 1 */
        bool mean;                            /* EXPAND: divided by the run's size (mean's gradient) */
        float eps;                            /* LAYER_NORM(_GRAD*): added to the variance */
    } axes;
    struct {                                  /* SLICE_GRAD: input k is placed at off[k] along axis */
        int axis;
        int n;                                /* pieces: nin */
        int64_t off[SLICE_GRAD_MAX];
    } pieces;
    struct { float value; } mask;             /* CAUSAL_MASK: what replaces the masked scores */
    struct {                                  /* ATTENTION(_GRAD) */
        float scale;                          /* q's factor */
        bool causal;                          /* a later key masked */
        float value;                          /* what the mask puts in its scores */
    } attn;
    struct {                                  /* CROSS_ENTROPY(_GRAD), ACCURACY, BCE_LOGITS(_GRAD) */
        float smoothing;                      /* CROSS_ENTROPY: label smoothing, in [0, 1) */
        bool wrt_target;                      /* BCE_LOGITS_GRAD: the targets' gradient (not the logits') */
    } loss;
    struct {                                  /* BATCH_NORM and its forms (graph/bnorm.c) */
        float eps;                            /* added to the variance */
        float momentum;                       /* the running statistics': new = momentum * old + (1 - momentum) * batch (Keras') */
        int act;                              /* fused: the unary op applied last (an OpKind), or -1 */
        float act_p;                          /* its parameter */
    } bn;
} NodeAttr;

typedef struct Node {
    OpKind op;
    DType dtype;
    Shape shape;          /* set by shape inference */
    int32_t *in;          /* input node ids (all smaller than this node's id) */
    int nin;
    Loc loc;              /* the .net source span this node came from */
    const char *name;     /* the value's name in the .net file, or NULL */
    Shape tshape;         /* target shape: RESHAPE, SUM_TO, the *_GRAD ops' dx shape */
    NodeAttr a;
    int32_t fwd;          /* gradient nodes: the forward node they belong to; else -1 */
} Node;

typedef struct NamedNode {
    const char *name;
    int32_t node;
} NamedNode;

typedef enum DataKind {
    DATA_NONE, DATA_MNIST, DATA_SYNTHETIC,
    /* the data sources of issue 14 (run/sources.h) */
    DATA_IDX, DATA_NPY, DATA_CSV, DATA_CIFAR10, DATA_IMAGES, DATA_TEXT,
    DATA_KIND_COUNT
} DataKind;

/* A data source's files beyond its first (TrainSpec.data_path), by role. */
typedef enum DataFile { DFILE_LABELS, DFILE_TEST, DFILE_TEST_LABELS, DFILE_COUNT } DataFile;

/* What a data source was given besides its first file (docs/language.md, "Data"). */
typedef struct DataArgs {
    const char *file[DFILE_COUNT];   /* idx: labels, test_images, test_labels; npy: y, test_x,
                                      * test_y; csv, images: test (the test set's file or folder) */
    const char *label;               /* csv: the label column's name */
    int64_t context;                 /* text: bytes per example */
    float valid;                     /* the fraction held out as the test set when none is given */
} DataArgs;
typedef enum OptimKind { OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW, OPTIM_RMSPROP, OPTIM_KIND_COUNT } OptimKind;

/* The learning rate over the steps (graph/optim.c: optim_lr): TrainSpec.lr is its base. */
typedef enum SchedKind {
    SCHED_CONSTANT,
    SCHED_STEP,                /* step_decay(): the base times factor^(k / every) */
    SCHED_COSINE,              /* cosine(): from the base down to min over `steps`, then min */
    SCHED_KIND_COUNT
} SchedKind;

typedef struct LrSchedule {
    SchedKind kind;
    int64_t every;             /* SCHED_STEP: steps between two decays */
    float factor;              /* SCHED_STEP: the multiplier at each */
    int64_t steps;             /* SCHED_COSINE: steps from the base to min */
    float min;                 /* SCHED_COSINE: the last value */
    int64_t warmup;            /* steps of linear warmup before it (0: none); the schedule's
                                * own step k is the global step minus these */
} LrSchedule;

/* The train block, after checking.  Command-line flags override these fields. */
typedef struct TrainSpec {
    bool present;
    Loc loc;
    DataKind data;
    const char *data_path;     /* mnist, cifar10, images: a folder; idx, npy, csv, text: the
                                * (examples') file */
    DataArgs data_args;        /* the other data sources' files and settings */
    int64_t synth_count;       /* synthetic: samples in the set */
    OptimKind optim;
    float lr, momentum, beta1, beta2, eps;
    bool nesterov;
    int64_t batch, epochs, steps; /* steps per epoch; 0: one pass over the data */
    uint64_t seed;
    bool shuffle;
    int32_t minimize;          /* node id of the loss, -1 if none */
    const char *checkpoint;    /* path or NULL */
    /* optimizers and schedules (issue 14; graph/optim.c) */
    float weight_decay;        /* sgd, adam, rmsprop: L2 added to the gradient; adamw: decoupled */
    float rho;                 /* rmsprop: the squares' average's decay (PyTorch's alpha) */
    bool centered;             /* rmsprop: divide by the gradient's estimated variance */
    float clip_norm;           /* > 0: every gradient scaled so their global L2 norm is at most this */
    LrSchedule sched;          /* the learning rate over the steps, from lr */
} TrainSpec;

/* The learning rate of global step `step` (0-based): t->lr through the schedule. */
double optim_lr(const TrainSpec *t, int64_t step);
/* "adamw(lr=0.001, ..., weight_decay=0.01)" and, when set, the schedule, warmup and
 * clipping, as the train block writes them, into buf (always NUL-terminated). */
const char *optim_describe(const TrainSpec *t, char *buf, size_t n);

typedef struct Graph {
    Arena arena;               /* owns everything below */
    const Source *src;         /* the .net file (not owned); may be NULL */
    const char *model_name;
    Node *nodes;
    int nnodes, node_cap;
    Var *vars;
    int nvars, var_cap;
    int32_t *inputs;           /* INPUT node ids, in declaration order */
    int ninputs;
    NamedNode *outputs;        /* outputs in declaration order */
    int noutputs, output_cap;
    const char *syms[MAX_SYMS];
    int nsyms;
    int64_t sym_value[MAX_SYMS]; /* bound value, or -1 */
    TrainSpec train;
    int32_t label_input;       /* INPUT node holding class labels, or -1 */
    int32_t logits;            /* node whose argmax is the prediction, or -1 */
    const char *stage;         /* "graph", "train", ... for dumps */
} Graph;

Graph *graph_new(const Source *src);
void graph_free(Graph *g);
/* Appends a node; returns its id or -1 (out of memory). `in` is copied. */
int32_t graph_add(Graph *g, OpKind op, const int32_t *in, int nin, Loc loc);
int graph_add_var(Graph *g, const char *name, Shape shape, InitKind init, Loc loc);
/* The optimizer state vars of parameter var, in creation order (momentum's velocity;
 * Adam's m, then v; RMSprop's square_avg, then momentum_buffer with momentum, then
 * grad_avg when centered) into st[0..OPTIM_MAX_STATE-1], -1 past the last; returns how
 * many. */
int graph_state_vars(const Graph *g, int var, int st[OPTIM_MAX_STATE]);
int graph_add_output(Graph *g, const char *name, int32_t node);
int graph_sym(Graph *g, const char *name);   /* index of a symbol, adding it; -1 if full */
/* The batch symbol: the leading dimension (coefficient 1) of the model's first input
 * that has a symbolic one; -1 if every input's batch is a number. */
int graph_batch_sym(const Graph *g);
/* Does g write persistent state (an op with OPT_UPDATE: a training step)? */
bool graph_has_updates(const Graph *g);
int32_t graph_const(Graph *g, float v, Loc loc);
/* A deep copy (same source, same vars) for passes that rebuild the graph. */
Graph *graph_clone(const Graph *g);

/* ---- shapes ---------------------------------------------------------------------- */
Shape shape_make(int rank, const int64_t *dims);
bool shape_eq(const Shape *a, const Shape *b);
bool dim_eq(Dim a, Dim b);
bool shape_concrete(const Shape *s);
int64_t shape_numel(const Shape *s);        /* concrete shapes only; -1 on overflow */
/* The largest tensor graphc describes: 2^40 elements (4.4 TB of f32), per example when
 * its shape has unbound symbols.  Shape inference refuses a larger one (graph_size_ok),
 * so every tensor of a bound graph has at most this many elements: its size in bytes,
 * and a product of it with a few more such sizes (a kernel's scratch, a plan's sum),
 * fit in 64 bits. */
#define GRAPH_MAX_ELEMENTS ((int64_t)1 << 40)
/* Whether a tensor of shape s and dtype dt can exist (at most GRAPH_MAX_ELEMENTS
 * elements, per example); if not, an error at loc: "WHAT f32[...] would need 18.4 EB
 * (per example); ...".  d may be NULL. */
bool graph_size_ok(const Graph *g, const Shape *s, DType dt, const char *what, Loc loc, DiagSink *d);
/* The same for node n's result, named by its parameter, input or op. */
bool graph_node_size_ok(const Graph *g, const Node *n, DiagSink *d);
/* "18.4 EB": a byte count in decimal units, for messages. */
const char *bytes_str(double bytes, char *buf, size_t n);
/* The run of axes of an op along axes (a.axes: softmax, the reductions, layer_norm...)
 * in a tensor of rank `rank`: its first axis and its length.  false when it does not fit. */
bool node_axes(const Node *n, int rank, int *first, int *count);
/* "[B, 28, 28, 1]" into buf (always NUL-terminated). */
const char *shape_str(const Graph *g, const Shape *s, char *buf, size_t n);
/* "2*B" into buf. */
const char *dim_str(const Graph *g, Dim d, char *buf, size_t n);

/* Infers shape and dtype of every node from its inputs and attributes, with the
 * bound symbols substituted.  Reports each problem at its node's .net line.
 * Returns the number of errors. */
int graph_infer_shapes(Graph *g, DiagSink *d);
/* Whether the op table's entry `op` has a shape rule (every op must: tests check). */
bool graph_has_shape_rule(OpKind op);
/* Infers one node (its inputs already inferred); false after reporting an error. */
bool graph_infer_node(Graph *g, int32_t id, DiagSink *d);
/* The eager engine's check: the op's shape rule applied to the actual shapes of its
 * inputs at run time (the graph is not changed).  false after reporting to d. */
bool shape_check_runtime(const Graph *g, int32_t id, const Shape *const *in_shapes, Shape *out, DiagSink *d);
/* Binds a symbol (e.g. "B") to a size and infers again: afterwards every shape is
 * concrete.  Returns 0 or the number of errors. */
int graph_bind(Graph *g, const char *sym, int64_t value, DiagSink *d);

/* Checks the invariants every pass must keep (ids in range and topological, arity,
 * shapes agree with a fresh inference, vars referenced exist, outputs valid).
 * Returns 0, or the number of violations (each reported to d, or to stderr if d is NULL). */
int graph_verify(const Graph *g, DiagSink *d);

/* ---- analysis --------------------------------------------------------------------- */
int64_t graph_param_count(const Graph *g);   /* INT64_MAX when the sum overflows */
/* Multiply-adds counted as 2 FLOPs; with symbols bound to 1 this is per example. */
double node_flops(const Graph *g, const Node *n);
double graph_flops(const Graph *g);

/* ---- dumps ------------------------------------------------------------------------- */
void graph_dump_text(const Graph *g, FILE *out);
void graph_dump_dot(const Graph *g, FILE *out);
void graph_dump_json(const Graph *g, FILE *out);
/* What a later stage adds to a graph's dot and json dumps (the memory plan's:
 * exec/plandump.c), so that its forms are the graph's with more in them.  NULL members
 * add nothing. */
typedef struct DumpExtra {
    const char *stage;        /* the json's "stage" instead of g->stage */
    /* after node id's fields: json, more `, "key": value` pairs; dot, more label
     * lines, each starting with the two characters \n */
    void (*node)(const void *ctx, int id, bool json, FILE *out);
    /* json: `, "key": value` pairs after "model"; dot: statements before the closing brace */
    void (*top)(const void *ctx, bool json, FILE *out);
    const void *ctx;
} DumpExtra;
void graph_dump_dot_extra(const Graph *g, const DumpExtra *x, FILE *out);
void graph_dump_json_extra(const Graph *g, const DumpExtra *x, FILE *out);

#endif
