/* Data-parallel communication: the ranks of an MPI job (Open MPI), or one process.
 * See docs/distributed.md.
 *
 * A Comm exists only in a multi-process job: comm_open gives NULL to a process that
 * was not started by an MPI launcher (or to a build without --with-mpi), and every
 * function here accepts NULL as "one rank".
 *
 * Collectives run on a communication thread of their own, so that a gradient bucket's
 * allreduce proceeds while the step goes on computing (comm_start returns at once;
 * comm_wait blocks until that bucket is summed).  Every collective is bounded: a
 * watchdog stops the whole job (MPI_Abort) when one does not complete within the
 * timeout, so a rank that died or hangs cannot leave the others waiting forever.  MPI
 * errors stop the job the same way.  These are the only places where this module ends
 * the process (no error can be returned to ranks blocked inside MPI); the message
 * naming the rank, the collective and the step goes to the program's handler
 * (comm_on_fatal) first.  Nothing here prints. */
#ifndef GRAPHC_COMM_H
#define GRAPHC_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "util/diag.h"

typedef struct Comm Comm;

/* The default bound on one collective, in seconds (--comm-timeout). */
#define COMM_DEFAULT_TIMEOUT 300.0

/* Whether this build can join an MPI job. */
bool comm_available(void);
/* Whether this process was started by an MPI launcher (mpirun sets its variables). */
bool comm_launched(void);
/* Joins the job when launched by mpirun: *out is the Comm, or NULL for a single process
 * (not launched, or a build without MPI).  0, or -1 with the reason in d. */
int comm_open(Comm **out, double timeout_s, DiagSink *d);
/* Leaves the job (MPI_Finalize) and frees c; NULL is fine. */
void comm_close(Comm *c);

int comm_rank(const Comm *c);          /* 0 for NULL */
int comm_size(const Comm *c);          /* 1 for NULL */
int comm_local_size(const Comm *c);    /* ranks on this machine; 1 for NULL */
/* "Open MPI v4.1.4, 2 ranks (2 on this machine), communication thread" */
const char *comm_describe(const Comm *c, char *buf, size_t n);

/* Starts summing buf[0..n) over the ranks, in place, as collective `tag` (a gradient
 * bucket; tags are small integers, the same on every rank).  Returns at once; buf must
 * stay untouched until comm_wait(c, tag).  `step` names the step in messages. */
void comm_start(Comm *c, int tag, float *buf, size_t n, int64_t step);
/* Waits for collective `tag`; afterwards buf holds the sum over the ranks. */
void comm_wait(Comm *c, int tag);
/* Sums (or takes the minimum of) buf[0..n) over the ranks in place and waits:
 * bounded like the others.  `what` names the collective in messages. */
void comm_sum_f64(Comm *c, double *buf, size_t n, const char *what, int64_t step);
void comm_min_f64(Comm *c, double *buf, size_t n, const char *what, int64_t step);

/* Seconds so far: spent by the caller blocked in comm_wait (communication the step
 * did not hide), and spent by the collectives from their start to their completion
 * (gradient buckets only).  Zero for NULL. */
void comm_stats(const Comm *c, double *wait_s, double *busy_s);

/* Agreement after setting up: every rank says whether it is ready.  Returns the lowest
 * rank that is not (so that only it reports why), or comm_size(c) when all are. */
int comm_agree(Comm *c, bool ok);

/* Stops every rank of the job with exit status `code` (MPI_Abort): for a program whose
 * rank failed while the others wait inside a collective (train_run's RUN_STOP_JOB).
 * Returns only for NULL (one process: nothing to stop) or if MPI could not abort. */
void comm_abort(Comm *c, int code);

/* Where the watchdog's and MPI errors' last message goes before the job is stopped:
 * fn(ctx, "rank 1 of 2: the allreduce of gradient bucket 0 at step 17 did not complete
 * within 300 s: ...").  Without a handler the message is dropped (MPI still says that
 * the job was aborted).  NULL is fine. */
typedef void (*CommFatalFn)(void *ctx, const char *msg);
void comm_on_fatal(Comm *c, CommFatalFn fn, void *ctx);

#endif
