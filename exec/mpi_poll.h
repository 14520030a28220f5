/* Driving one MPI request to completion without holding a core, shared by the
 * communication thread (exec/comm.c) and the allreduce benchmark (bench/allreduce.c)
 * so that the benchmark measures exactly what graphc does.  Include after <mpi.h>.
 *
 * Open MPI's blocking calls poll at full speed; on a machine whose cores all compute,
 * that takes a core from the compute threads.  Here: MPI_Test in a loop, yielding the
 * core between tests for the first MPI_POLL_SPIN_NS (a short collective finishes in a
 * few microseconds), then sleeping between tests, 2 us doubling to 64 us.  The thread's
 * timer slack is set to 1 us (Linux otherwise rounds each sleep up by about 50 us). */
#ifndef GRAPHC_MPI_POLL_H
#define GRAPHC_MPI_POLL_H
#include <sched.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define MPI_POLL_SPIN_NS 200000L

/* Call once on the thread that polls. */
static inline void mpi_poll_thread_setup(void)
{
#ifdef __linux__
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
}

static inline double mpi_poll_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* MPI_SUCCESS, an MPI error code, or -1 when CLOCK_MONOTONIC passed `deadline`
 * (seconds; <= 0: no deadline). */
static inline int mpi_poll(MPI_Request *rq, double deadline)
{
    double t0 = mpi_poll_now();
    long sleep_ns = 2000;
    for (;;) {
        int flag = 0, rc = MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        if (flag) return MPI_SUCCESS;
        double now = mpi_poll_now();
        if (deadline > 0 && now > deadline) return -1;
        if ((now - t0) * 1e9 < (double)MPI_POLL_SPIN_NS) {
            sched_yield();
            continue;
        }
        struct timespec ts = { 0, sleep_ns };
        nanosleep(&ts, NULL);
        if (sleep_ns < 64000) sleep_ns *= 2;
    }
}

#endif
