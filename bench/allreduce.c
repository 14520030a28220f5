/* bench/allreduce.c: times an in-place float sum over the ranks (MPI_SUM, MPI_FLOAT,
 * MPI_IN_PLACE) for message sizes from 4 bytes to 16 MiB, and prints one JSON line per
 * (mode, size): the median over repetitions of the slowest rank's time.
 * bench/mpi_scaling.sh builds it (mpicc -O2) and bench/mpi_model.py fits the latency
 * and bandwidth of the transport from its output.  See bench/README.md.
 *
 * Modes (--modes, comma-separated):
 *   blocking  MPI_Allreduce
 *   wait      MPI_Iallreduce, then MPI_Wait (the non-blocking algorithm, driven
 *             without pause)
 *   polled    MPI_Iallreduce, then exec/mpi_poll.h's mpi_poll, the very function
 *             graphc's communication thread drives a gradient bucket with (MPI_Test,
 *             yielding for 200 us, then sleeps of 2 us doubling to 64 us)
 *
 * One repetition: MPI_Barrier, then the timed collective on every rank; the slowest
 * rank's time (an MPI_Reduce of the times, not timed) is the repetition's.  Two
 * untimed repetitions first.  The repetition count is chosen by rank 0 from the first
 * timed one so that a size takes about --budget seconds, between 5 and --max-reps.
 *
 * usage: mpirun -np N allreduce [--modes L] [--max-bytes B] [--also B,B...]
 *                               [--budget S] [--max-reps R] */
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "exec/mpi_poll.h"

#define MAX_SIZES 64

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { M_BLOCKING, M_WAIT, M_POLLED, M_COUNT };
static const char *const mode_name[M_COUNT] = { "blocking", "wait", "polled" };

static void one(int mode, float *buf, int n)
{
    if (mode == M_BLOCKING) {
        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return;
    }
    MPI_Request rq;
    MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
    if (mode == M_WAIT) {
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        return;
    }
    mpi_poll(&rq, 0);   /* exactly as graphc's communication thread */
}

/* The slowest rank's time of one repetition, on every rank. */
static double timed(int mode, float *buf, int n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    one(mode, buf, n);
    double dt = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

static void usage_exit(int rank)
{
    if (rank == 0)
        fprintf(stderr, "usage: mpirun -np N allreduce [--modes blocking,wait,polled] [--max-bytes B] "
                        "[--also B,B...] [--budget S] [--max-reps R]\n");
    MPI_Finalize();
    exit(2);
}

static long parse_long(const char *s, int rank)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v <= 0) usage_exit(rank);
    return v;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    mpi_poll_thread_setup();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max_bytes = 16L << 20, max_reps = 200;
    double budget = 0.4;
    int use[M_COUNT] = { 1, 1, 1 };
    long sizes[MAX_SIZES];
    int ns = 0;
    const char *also = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage_exit(rank);
        if (!strcmp(argv[i], "--max-bytes")) max_bytes = parse_long(argv[++i], rank);
        else if (!strcmp(argv[i], "--max-reps")) max_reps = parse_long(argv[++i], rank);
        else if (!strcmp(argv[i], "--budget")) {
            budget = atof(argv[++i]);
            if (budget <= 0) usage_exit(rank);
        } else if (!strcmp(argv[i], "--also")) also = argv[++i];
        else if (!strcmp(argv[i], "--modes")) {
            const char *l = argv[++i];
            memset(use, 0, sizeof use);
            for (int m = 0; m < M_COUNT; m++) {
                const char *p = strstr(l, mode_name[m]);
                size_t k = strlen(mode_name[m]);
                if (p && (p == l || p[-1] == ',') && (p[k] == ',' || p[k] == 0)) use[m] = 1;
            }
            if (!use[0] && !use[1] && !use[2]) usage_exit(rank);
        } else usage_exit(rank);
    }
    for (long b = 4; b <= max_bytes && ns < MAX_SIZES; b *= 2) sizes[ns++] = b;
    for (const char *p = also; p && *p && ns < MAX_SIZES;) {
        char *end;
        long b = strtol(p, &end, 10);
        if (end == p || b < 4 || (*end && *end != ',')) usage_exit(rank);
        sizes[ns++] = b / 4 * 4;
        p = *end ? end + 1 : end;
    }
    long most = 0;
    for (int i = 0; i < ns; i++)
        if (sizes[i] > most) most = sizes[i];
    float *buf = malloc((size_t)most);
    double *t = malloc((size_t)max_reps * sizeof *t);
    if (!buf || !t) {
        fprintf(stderr, "allreduce: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* small values so that the repeated sums stay finite */
    for (long k = 0; k < most / 4; k++) buf[k] = 1e-3f * (float)(k % 7);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    if (rank == 0) printf("{\"kind\": \"allreduce_meta\", \"ranks\": %d, \"mpi\": \"%s\"}\n", size, lib);
    for (int m = 0; m < M_COUNT; m++) {
        if (!use[m]) continue;
        for (int i = 0; i < ns; i++) {
            int n = (int)(sizes[i] / 4);
            for (int w = 0; w < 2; w++) timed(m, buf, n);
            t[0] = timed(m, buf, n);
            int reps = (int)(budget / (t[0] > 1e-7 ? t[0] : 1e-7));
            if (reps < 5) reps = 5;
            if (reps > max_reps) reps = (int)max_reps;
            MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
            for (int r = 1; r < reps; r++) t[r] = timed(m, buf, n);
            if (rank == 0) {
                double lo = t[0];
                for (int r = 1; r < reps; r++)
                    if (t[r] < lo) lo = t[r];
                printf("{\"kind\": \"allreduce\", \"mode\": \"%s\", \"ranks\": %d, \"bytes\": %ld, \"reps\": %d, "
                       "\"median_us\": %.3f, \"min_us\": %.3f}\n",
                       mode_name[m], size, sizes[i], reps, 1e6 * median(t, reps), 1e6 * lo);
                fflush(stdout);
            }
        }
    }
    free(buf);
    free(t);
    MPI_Finalize();
    return 0;
}
