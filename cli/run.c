/* graphc run and graphc eval (training and evaluation). */
#include "cli/cli.h"

Graph *stage_train(const Graph *g, DiagSink *d)
{
    (void)g;
    diag_plain(d, "the train stage is not built yet");
    return NULL;
}

int cmd_run(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "graphc run: not built yet\n");
    return EXIT_BAD_INPUT;
}

int cmd_eval(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "graphc eval: not built yet\n");
    return EXIT_BAD_INPUT;
}
