/* graphc: load, run and train neural networks written in the .net language (or
 * imported from ONNX), from C or from any language that can call C (python/graphc.py).
 *
 *     graphc_model *m;
 *     if (graphc_load("mnist.net", &m) != GRAPHC_OK || graphc_load_weights(m, "mnist.ckpt") != GRAPHC_OK) {
 *         fputs(graphc_message(m), stderr);           // file:line:col: error: ...
 *         graphc_free(m);
 *         return 1;
 *     }
 *     const void *in[2] = { pixels, NULL };           // image [1, 28, 28, 1]; the label: not read
 *     void *out[1] = { probs };                       // probs [1, 10]
 *     if (graphc_run(m, 1, in, out) != GRAPHC_OK) fputs(graphc_message(m), stderr);
 *     graphc_free(m);
 *
 * The rules (docs/api.md is the guide):
 * - Every function that can fail returns a graphc_status; graphc_message(m) then says
 *   why.  None prints, exits or aborts on a user's error.
 * - A model may be shared by threads: its calls run one at a time (each on the model's
 *   own worker threads); different models run at once.
 * - Tensors are dense and row-major (C order), of the dtype and shape that
 *   graphc_input_info and graphc_output_info give, the batch first.  The library reads
 *   and writes the caller's buffers where they are and keeps no pointer to them.
 * - Names and messages the library returns are its own: valid until the model is
 *   freed (a message: until the next call on the model).
 * Link with `pkg-config --cflags --libs graphc` (libgraphc.so); docs/api.md shows
 * how to link libgraphc.a instead. */
#ifndef GRAPHC_H
#define GRAPHC_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum graphc_status {
    GRAPHC_OK = 0,
    GRAPHC_ERR_MODEL = 1,       /* the model has errors: its .net source, or an ONNX model graphc cannot express */
    GRAPHC_ERR_ARG = 2,         /* a bad argument (an index, a batch, a missing tensor), or a call
                                 * this model cannot serve (training without a train block) */
    GRAPHC_ERR_FILE = 3,        /* a file could not be read or written, or is damaged */
    GRAPHC_ERR_RUN = 4,         /* the computation stopped: a label out of range... */
    GRAPHC_ERR_MEMORY = 5,      /* out of memory */
    GRAPHC_ERR_UNSUPPORTED = 6, /* this build lacks the feature (ONNX without protobuf-c) */
} graphc_status;

typedef enum graphc_dtype {
    GRAPHC_F32 = 0,             /* float */
    GRAPHC_I32 = 1,             /* int32_t: class labels, token ids */
} graphc_dtype;

#define GRAPHC_MAX_RANK 8

/* An input or output of a model, for a batch of `batch` examples. */
typedef struct graphc_tensor_info {
    const char *name;                /* its name in the .net file */
    graphc_dtype dtype;
    int rank;
    int64_t dims[GRAPHC_MAX_RANK];   /* dims[0..rank): -1 where the size depends on the batch
                                      * and the batch asked was 0 */
    int64_t count;                   /* elements: the product of dims; -1 when one is -1 */
    int label;                       /* inputs: 1 when no output depends on it (class labels, a
                                      * loss's targets): graphc_run does not read it */
} graphc_tensor_info;

typedef struct graphc_model graphc_model;

const char *graphc_version(void);

/* Loads a model: a .net file, or an ONNX model when the path ends in ".onnx" (its
 * weights come with it).  A .net model's weights start as its declarations say
 * (Keras' initializers, the train block's seed).  *out is set even on failure (then
 * only graphc_message and graphc_free may be called), unless memory ran out first
 * (*out NULL). */
graphc_status graphc_load(const char *path, graphc_model **out);
/* The same from the text of a .net file; `name` names it in messages. */
graphc_status graphc_load_string(const char *name, const char *source, graphc_model **out);
/* Frees the model (NULL is fine); no other call on it may be running. */
void graphc_free(graphc_model *m);

/* What the last call on m reported: after a failure, why (every error of a .net
 * source, each as file:line:col with the line and a caret); "" when it reported
 * nothing.  For m NULL: a message saying that memory ran out making it. */
const char *graphc_message(const graphc_model *m);

/* Weights as graphc run --save writes them: the parameters, and the optimizer's state
 * and step count when the model trains. */
graphc_status graphc_load_weights(graphc_model *m, const char *path);
graphc_status graphc_save_weights(graphc_model *m, const char *path);

/* The inputs and outputs in the order the .net file declares them.  `batch` >= 1 gives
 * the shapes for that many examples; 0 leaves the batch's sizes -1. */
graphc_status graphc_input_count(graphc_model *m, int *count);
graphc_status graphc_output_count(graphc_model *m, int *count);
graphc_status graphc_input_info(graphc_model *m, int i, int64_t batch, graphc_tensor_info *info);
graphc_status graphc_output_info(graphc_model *m, int i, int64_t batch, graphc_tensor_info *info);

/* Inference on `batch` examples: inputs[i] holds input i (NULL allowed where its
 * label is 1), outputs[j] receives output j (NULL: not wanted).  Dropout is off.  The
 * first call for a batch size compiles the model for it. */
graphc_status graphc_run(graphc_model *m, int64_t batch, const void *const *inputs, void *const *outputs);

/* One step of training as the model's train block says (optimizer, learning rate,
 * loss), on `batch` examples given as graphc_run takes them (every input the loss
 * reads, labels included).  *loss: the batch's loss before the update; *accuracy: the
 * share of examples classified right, NaN for a model with no classification (either
 * pointer may be NULL). */
graphc_status graphc_train_step(graphc_model *m, int64_t batch, const void *const *inputs, float *loss, float *accuracy);
/* The loss and accuracy on a batch, without training (dropout off). */
graphc_status graphc_evaluate(graphc_model *m, int64_t batch, const void *const *inputs, float *loss, float *accuracy);

#ifdef __cplusplus
}
#endif
#endif
