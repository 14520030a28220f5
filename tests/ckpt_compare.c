/* ckpt_compare MODEL.net A.ckpt B.ckpt RTOL ATOL: loads two checkpoints of a model's
 * training graph and compares every variable, element by element:
 * |a - b| <= ATOL + RTOL * |b|.  Prints the largest differences; exit 0 if every
 * element passes, 1 if one does not, 2 on a usage or load error.  Used by the
 * data-parallel equivalence test (tests/mpi.sh). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "run/train.h"
#include "graph/lower.h"
#include "graph/passes.h"

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: ckpt_compare MODEL.net A.ckpt B.ckpt RTOL ATOL\n");
        return 2;
    }
    double rtol = atof(argv[4]), atol = atof(argv[5]);
    Source src;
    DiagSink d;
    diag_init(&d, NULL);
    Program *prog = NULL;
    Graph *g = NULL, *t = NULL;
    Weights a = { 0 }, b = { 0 };
    int rc = 2;
    if (source_load(&src, argv[1], &d) != 0) {
        diag_flush(&d, stderr);
        diag_free(&d);
        return 2;
    }
    d.src = &src;
    if (compile_source(&src, &d, &prog, &g) != 0 || !(t = pass_autodiff(g, &d))) goto out;
    if (weights_init(&a, t, 0, &d) || weights_init(&b, t, 0, &d)) goto out;
    if (checkpoint_load(argv[2], t, &a, &d) || checkpoint_load(argv[3], t, &b, &d)) goto out;
    rc = a.step == b.step ? 0 : 1;
    printf("steps: %lld and %lld\n", (long long)a.step, (long long)b.step);
    for (int v = 0; v < a.n; v++) {
        int64_t n = shape_numel(&a.shapes[v]), bad = 0;
        double worst = 0, worst_rel = 0, scale = 0;
        for (int64_t i = 0; i < n; i++) {
            double x = a.data[v][i], y = b.data[v][i], diff = fabs(x - y);
            if (!(diff <= atol + rtol * fabs(y))) bad++;
            if (diff > worst) worst = diff;
            if (fabs(y) > 0 && diff / fabs(y) > worst_rel) worst_rel = diff / fabs(y);
            if (fabs(y) > scale) scale = fabs(y);
        }
        printf("%-24s %9lld values  max |a-b| %.3g  (max |b| %.3g, max rel %.3g)  %lld outside tolerance\n", a.names[v],
               (long long)n, worst, scale, worst_rel, (long long)bad);
        if (bad) rc = 1;
    }
out:
    diag_flush(&d, stderr);
    weights_free(&a);
    weights_free(&b);
    graph_free(t);
    graph_free(g);
    ast_free(prog);
    source_free(&src);
    diag_free(&d);
    return rc;
}
