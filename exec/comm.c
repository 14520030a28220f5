/* Data-parallel communication over MPI.  See comm.h and docs/distributed.md.
 *
 * Threads: MPI is initialised at MPI_THREAD_SERIALIZED.  After comm_open only the
 * communication thread calls MPI (the main thread hands it jobs under a mutex and
 * waits on a condition variable), until comm_close joins it and finalises.  When the
 * library cannot give SERIALIZED, the collectives run on the caller's thread inside
 * comm_wait (correct, without overlap).
 *
 * A job is one in-place MPI_Iallreduce, driven to completion by mpi_poll (MPI_Test,
 * yielding, then sleeping between tests: no core is kept spinning against the compute
 * threads) with a deadline: past it, the job is stopped with MPI_Abort and a message. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/comm.h"

bool comm_launched(void)
{
    /* Open MPI's mpirun, and PMI/PMIx launchers (srun, hydra) */
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("PMI_SIZE");
}

#ifndef HAVE_MPI

struct Comm { int unused; };

bool comm_available(void) { return false; }
int comm_open(Comm **out, double timeout_s, DiagSink *d)
{
    (void)timeout_s;
    (void)d;
    *out = NULL;
    return 0;
}
void comm_close(Comm *c) { (void)c; }
int comm_rank(const Comm *c) { (void)c; return 0; }
int comm_size(const Comm *c) { (void)c; return 1; }
int comm_local_size(const Comm *c) { (void)c; return 1; }
const char *comm_describe(const Comm *c, char *buf, size_t n)
{
    (void)c;
    snprintf(buf, n, "one process (built without MPI)");
    return buf;
}
void comm_start(Comm *c, int tag, float *buf, size_t n, int64_t step) { (void)c; (void)tag; (void)buf; (void)n; (void)step; }
void comm_wait(Comm *c, int tag) { (void)c; (void)tag; }
void comm_sum_f64(Comm *c, double *buf, size_t n, const char *what, int64_t step)
{
    (void)c; (void)buf; (void)n; (void)what; (void)step;
}
void comm_min_f64(Comm *c, double *buf, size_t n, const char *what, int64_t step)
{
    (void)c; (void)buf; (void)n; (void)what; (void)step;
}
int comm_agree(Comm *c, bool ok) { (void)c; return ok ? 1 : 0; }
void comm_stats(const Comm *c, double *wait_s, double *busy_s)
{
    (void)c;
    *wait_s = *busy_s = 0;
}
void comm_abort(Comm *c, int code) { (void)c; (void)code; }
void comm_on_fatal(Comm *c, CommFatalFn fn, void *ctx) { (void)c; (void)fn; (void)ctx; }

#else /* HAVE_MPI */

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include "exec/mpi_poll.h"
#include <time.h>
#include "util/mem.h"

bool comm_available(void) { return true; }

typedef enum JobState { JOB_IDLE, JOB_QUEUED, JOB_DONE } JobState;

typedef struct Job {
    void *buf;
    size_t n;
    MPI_Datatype type;
    MPI_Op op;
    int tag;             /* the caller's tag: a bucket, or -1 for a blocking collective */
    const char *what;    /* for messages: NULL means "the allreduce of gradient bucket <tag>" */
    int64_t step;
    JobState state;
    double t_start;      /* when it was handed over */
} Job;

struct Comm {
    MPI_Comm world;      /* our own duplicate of MPI_COMM_WORLD, errors returned */
    int rank, size, local_size;
    double timeout;
    bool threaded;
    char version[96];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    Job *jobs;           /* slot 0: blocking collectives; slot t + 1: tag t */
    int njobs;
    int *queue;          /* slots in the order they were started (njobs capacity) */
    int qlen;
    bool quit;
    double wait_s, busy_s;   /* comm_stats */
    CommFatalFn on_fatal;    /* comm_on_fatal */
    void *fatal_ctx;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "the allreduce of gradient bucket 2 at step 17" */
static void job_name(const Job *j, char *buf, size_t n)
{
    char step[48] = "";
    if (j->step >= 0) snprintf(step, sizeof step, " at step %lld", (long long)j->step);
    if (j->what) snprintf(buf, n, "%s%s", j->what, step);
    else snprintf(buf, n, "the allreduce of gradient bucket %d%s", j->tag, step);
}

/* The job cannot go on (a collective failed or never completed, so other ranks may be
 * blocked inside MPI): the program's handler hears why, and every rank is stopped. */
static _Noreturn void fatal(Comm *c, const char *msg)
{
    if (c->on_fatal) {
        char line[640];
        snprintf(line, sizeof line, "rank %d of %d: %s", c->rank, c->size, msg);
        c->on_fatal(c->fatal_ctx, line);
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort();   /* MPI_Abort does not return; should it, nothing here can continue */
}

static _Noreturn void mpi_failed(Comm *c, const Job *j, int rc)
{
    char err[MPI_MAX_ERROR_STRING], name[128], msg[512];
    int len = 0;
    if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS) snprintf(err, sizeof err, "MPI error %d", rc);
    job_name(j, name, sizeof name);
    snprintf(msg, sizeof msg, "%s failed: %s; stopping all ranks", name, err);
    fatal(c, msg);
}

/* Runs one job to completion, or stops the job at the deadline. */
static void run_job(Comm *c, const Job *j)
{
    const size_t chunk = (size_t)1 << 30;   /* MPI counts are ints */
    int esize = j->type == MPI_DOUBLE ? 8 : 4;
    for (size_t off = 0; off < j->n || (off == 0 && j->n == 0); off += chunk) {
        size_t len = j->n - off < chunk ? j->n - off : chunk;
        MPI_Request rq;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)j->buf + off * (size_t)esize, (int)len, j->type, j->op, c->world, &rq);
        if (rc != MPI_SUCCESS) mpi_failed(c, j, rc);
        rc = mpi_poll(&rq, now_s() + c->timeout);
        if (rc > 0) mpi_failed(c, j, rc);
        if (rc < 0) {
            char name[128], msg[512];
            job_name(j, name, sizeof name);
            snprintf(msg, sizeof msg,
                     "%s did not complete within %g s: another rank has died, stalled or left the job; "
                     "stopping all ranks (--comm-timeout sets the bound)",
                     name, c->timeout);
            fatal(c, msg);
        }
        if (j->n == 0) break;
    }
}

static void *comm_thread(void *arg)
{
    Comm *c = arg;
    mpi_poll_thread_setup();
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->quit && c->qlen == 0) pthread_cond_wait(&c->wake, &c->mu);
        if (c->qlen == 0) break;   /* quit, and nothing left to do */
        int slot = c->queue[0];
        memmove(c->queue, c->queue + 1, (size_t)(c->qlen - 1) * sizeof *c->queue);
        c->qlen--;
        Job j = c->jobs[slot];
        pthread_mutex_unlock(&c->mu);
        run_job(c, &j);
        pthread_mutex_lock(&c->mu);
        if (j.tag >= 0) c->busy_s += now_s() - j.t_start;
        c->jobs[slot].state = JOB_DONE;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The job slot of a tag, growing the tables (under the mutex). */
static Job *slot_of(Comm *c, int tag, int *slot)
{
    int s = tag + 1;
    if (s < 0) fatal(c, "internal error: a negative collective tag");
    if (s >= c->njobs) {
        int n = c->njobs ? c->njobs : 16;
        while (n <= s) n *= 2;
        Job *jobs = gc_realloc(c->jobs, (size_t)n * sizeof *jobs);
        int *queue = jobs ? gc_realloc(c->queue, (size_t)n * sizeof *queue) : NULL;
        if (jobs) c->jobs = jobs;
        if (!jobs || !queue) fatal(c, "out of memory for the collectives' table");
        c->queue = queue;
        memset(c->jobs + c->njobs, 0, (size_t)(n - c->njobs) * sizeof *c->jobs);
        c->njobs = n;
    }
    *slot = s;
    return &c->jobs[s];
}

static void submit(Comm *c, const Job *j)
{
    pthread_mutex_lock(&c->mu);
    int slot;
    Job *dst = slot_of(c, j->tag, &slot);
    if (dst->state == JOB_QUEUED) fatal(c, "internal error: a collective started twice before its wait");
    *dst = *j;
    dst->state = JOB_QUEUED;
    dst->t_start = now_s();
    if (c->threaded) {   /* else the job runs in await, on this thread */
        c->queue[c->qlen++] = slot;
        pthread_cond_signal(&c->wake);
    }
    pthread_mutex_unlock(&c->mu);
}

static void await(Comm *c, int tag)
{
    double t0 = now_s();
    pthread_mutex_lock(&c->mu);
    int slot;
    Job *j = slot_of(c, tag, &slot);
    if (j->state == JOB_IDLE) {
        pthread_mutex_unlock(&c->mu);
        return;   /* never started: nothing to wait for */
    }
    if (!c->threaded) {
        /* no communication thread: run it here */
        Job copy = *j;
        pthread_mutex_unlock(&c->mu);
        run_job(c, &copy);
        pthread_mutex_lock(&c->mu);
        c->jobs[slot].state = JOB_IDLE;
        if (tag >= 0) {   /* all of it was waited for */
            c->busy_s += now_s() - t0;
            c->wait_s += now_s() - t0;
        }
        pthread_mutex_unlock(&c->mu);
        return;
    }
    /* The communication thread enforces the deadline; this one is a second guard in
     * case that thread itself is stuck inside MPI. */
    double deadline = now_s() + c->timeout + 10;
    while (c->jobs[slot].state != JOB_DONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&c->done, &c->mu, &ts);
        if (c->jobs[slot].state != JOB_DONE && now_s() > deadline) {
            pthread_mutex_unlock(&c->mu);
            fatal(c, "the communication thread did not finish a collective in time; stopping all ranks");
        }
    }
    c->jobs[slot].state = JOB_IDLE;
    if (tag >= 0) c->wait_s += now_s() - t0;
    pthread_mutex_unlock(&c->mu);
}

void comm_stats(const Comm *c, double *wait_s, double *busy_s)
{
    *wait_s = *busy_s = 0;
    if (!c) return;
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    *wait_s = c->wait_s;
    *busy_s = c->busy_s;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
}

int comm_open(Comm **out, double timeout_s, DiagSink *d)
{
    *out = NULL;
    if (!comm_launched()) return 0;
    int provided = MPI_THREAD_SINGLE, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
        diag_plain(d, "MPI_Init_thread failed (error %d): cannot join the MPI job", rc);
        return -1;
    }
    Comm *c = gc_calloc(1, sizeof *c);
    if (!c) {
        diag_plain(d, "out of memory");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    c->timeout = timeout_s > 0 ? timeout_s : COMM_DEFAULT_TIMEOUT;
    MPI_Comm_dup(MPI_COMM_WORLD, &c->world);
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    MPI_Comm local;
    c->local_size = 1;
    if (MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_size(local, &c->local_size);
        MPI_Comm_free(&local);
    }
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    size_t k = strcspn(ver, ",\n");
    snprintf(c->version, sizeof c->version, "%.*s", (int)(k < 80 ? k : 80), ver);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->wake, NULL);
    pthread_cond_init(&c->done, NULL);
    c->threaded = provided >= MPI_THREAD_SERIALIZED;
    if (c->threaded && pthread_create(&c->thread, NULL, comm_thread, c) != 0) c->threaded = false;
    *out = c;
    return 0;
}

void comm_close(Comm *c)
{
    if (!c) return;
    if (c->threaded) {
        pthread_mutex_lock(&c->mu);
        c->quit = true;
        pthread_cond_signal(&c->wake);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    MPI_Comm_free(&c->world);
    MPI_Finalize();
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->wake);
    pthread_cond_destroy(&c->done);
    gc_free(c->jobs);
    gc_free(c->queue);
    gc_free(c);
}

int comm_rank(const Comm *c) { return c ? c->rank : 0; }
int comm_size(const Comm *c) { return c ? c->size : 1; }
int comm_local_size(const Comm *c) { return c ? c->local_size : 1; }

const char *comm_describe(const Comm *c, char *buf, size_t n)
{
    if (!c) snprintf(buf, n, "one process");
    else
        snprintf(buf, n, "%s, %d rank%s (%d on this machine), %s", c->version, c->size, c->size == 1 ? "" : "s",
                 c->local_size, c->threaded ? "communication thread" : "collectives on the main thread");
    return buf;
}

void comm_start(Comm *c, int tag, float *buf, size_t n, int64_t step)
{
    if (!c || c->size == 1) return;
    submit(c, &(Job){ .buf = buf, .n = n, .type = MPI_FLOAT, .op = MPI_SUM, .tag = tag, .step = step });
}

void comm_wait(Comm *c, int tag)
{
    if (!c || c->size == 1) return;
    await(c, tag);
}

static void blocking(Comm *c, double *buf, size_t n, MPI_Op op, const char *what, int64_t step)
{
    submit(c, &(Job){ .buf = buf, .n = n, .type = MPI_DOUBLE, .op = op, .tag = -1, .what = what, .step = step });
    await(c, -1);
}

void comm_sum_f64(Comm *c, double *buf, size_t n, const char *what, int64_t step)
{
    if (!c || c->size == 1) return;
    blocking(c, buf, n, MPI_SUM, what, step);
}

void comm_min_f64(Comm *c, double *buf, size_t n, const char *what, int64_t step)
{
    if (!c || c->size == 1) return;
    blocking(c, buf, n, MPI_MIN, what, step);
}

int comm_agree(Comm *c, bool ok)
{
    if (!c) return ok ? 1 : 0;
    double v = ok ? (double)c->size : (double)c->rank;
    comm_min_f64(c, &v, 1, "the agreement that every rank is ready", -1);
    return (int)v;
}

void comm_abort(Comm *c, int code)
{
    if (c) MPI_Abort(MPI_COMM_WORLD, code);
}

void comm_on_fatal(Comm *c, CommFatalFn fn, void *ctx)
{
    if (!c) return;
    c->on_fatal = fn;
    c->fatal_ctx = ctx;
}

#endif /* HAVE_MPI */
