/* graphc: compile and run neural networks written in the .net language, from C.
 *
 *     graphc_model *m;
 *     if (graphc_compile_file("mnist.net", &m) != GRAPHC_OK) {
 *         fputs(graphc_diagnostics(m), stderr);     // every error, file:line:col
 *         graphc_free(m);
 *         return 1;
 *     }
 *     graphc_load_weights(m, "mnist.ckpt");
 *     graphc_predict(m, 1, pixels, probs, 10);
 *     graphc_free(m);
 *
 * Every function returns a status; none prints, exits or aborts on a user's error.
 * After a failure, graphc_diagnostics() says why.  A model is not thread-safe: use one
 * per thread.  Link with `pkg-config --cflags --libs graphc`. */
#ifndef GRAPHC_H
#define GRAPHC_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum graphc_status {
    GRAPHC_OK = 0,
    GRAPHC_ERR_MODEL = 1,    /* the .net source has errors */
    GRAPHC_ERR_ARG = 2,      /* a bad argument: size, index, NULL */
    GRAPHC_ERR_FILE = 3,     /* a file could not be read or written, or is damaged */
    GRAPHC_ERR_RUN = 4,      /* the computation failed (a label out of range, NaN...) */
    GRAPHC_ERR_MEMORY = 5,   /* out of memory */
} graphc_status;

typedef struct graphc_model graphc_model;

const char *graphc_version(void);

/* Compiles a model.  *out is set even on failure (then only graphc_diagnostics and
 * graphc_free may be called on it), unless memory ran out first (*out NULL).  The
 * weights are initialised as the model's train block says (Keras' initializers). */
graphc_status graphc_compile_file(const char *path, graphc_model **out);
graphc_status graphc_compile_string(const char *name, const char *source, graphc_model **out);
void graphc_free(graphc_model *m);

/* Every message since the model was made, one per line, "" when none. */
const char *graphc_diagnostics(const graphc_model *m);

/* Weights: a checkpoint of graphc run --save (parameters; optimizer state if there). */
graphc_status graphc_load_weights(graphc_model *m, const char *path);
graphc_status graphc_save_weights(graphc_model *m, const char *path);

/* The example input (the model's first f32 input) without its batch dimension, and
 * the size of one example of the first output. */
graphc_status graphc_input_shape(const graphc_model *m, int64_t dims[6], int *rank);
int64_t graphc_output_size(const graphc_model *m);

/* Inference: `batch` examples, input[batch * prod(input shape)] -> the first output,
 * output[batch * graphc_output_size(m)]; output_len is output's length, checked. */
graphc_status graphc_predict(graphc_model *m, int64_t batch, const float *input, float *output, size_t output_len);

/* One training step as the train block says (optimizer, learning rate): examples and
 * their class labels; loss and accuracy of the batch (either may be NULL). */
graphc_status graphc_train_step(graphc_model *m, int64_t batch, const float *input, const int32_t *labels,
                                float *loss, float *accuracy);

#ifdef __cplusplus
}
#endif
#endif
