#include "util/pool.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>


static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t tid[POOL_MAX_THREADS];
    int nthreads;          /* including the caller */
    int nworkers;          /* started pthreads */
    unsigned long gen;     /* job generation: workers wait for it to change */
    unsigned long base;    /* the generation when the workers were started */
    int pending;           /* workers still running the current job */
    bool stop;
    PoolFn fn;
    void *arg;
    int ntasks;
} P = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, .nthreads = 1 };

/* Set while a thread runs a share of a job: a pool_run from inside a job (a kernel that
 * splits its work, called by a kernel that already did) runs serially in place. */
static __thread int in_job;

static void run_share(int worker)
{
    in_job = 1;
    for (int t = worker; t < P.ntasks; t += P.nthreads) P.fn(P.arg, t, worker);
    in_job = 0;
}

static void *worker_main(void *arg)
{
    int id = (int)(long)arg;
    pthread_mutex_lock(&P.mu);
    /* jobs issued before this worker existed are not its to run */
    unsigned long seen = P.base;
    for (;;) {
        while (P.gen == seen && !P.stop) pthread_cond_wait(&P.work, &P.mu);
        if (P.stop) break;
        seen = P.gen;
        pthread_mutex_unlock(&P.mu);
        run_share(id);
        pthread_mutex_lock(&P.mu);
        if (--P.pending == 0) pthread_cond_signal(&P.done);
    }
    pthread_mutex_unlock(&P.mu);
    return NULL;
}

static void stop_workers(void)
{
    pthread_mutex_lock(&P.mu);
    P.stop = true;
    pthread_cond_broadcast(&P.work);
    pthread_mutex_unlock(&P.mu);
    for (int i = 0; i < P.nworkers; i++) pthread_join(P.tid[i], NULL);
    P.nworkers = 0;
    P.stop = false;
}

static void at_exit_stop(void) { stop_workers(); }

void pool_set_threads(int n)
{
    static bool registered;
    if (n < 1) n = 1;
    if (n > POOL_MAX_THREADS) n = POOL_MAX_THREADS;
    if (n == P.nthreads && P.nworkers == n - 1) return;
    stop_workers();
    P.nthreads = 1;
    P.base = P.gen;
    for (int i = 1; i < n; i++) {
        if (pthread_create(&P.tid[P.nworkers], NULL, worker_main, (void *)(long)i) != 0) break;
        P.nworkers++;
    }
    P.nthreads = P.nworkers + 1;   /* fewer if a thread could not be started */
    if (!registered) { atexit(at_exit_stop); registered = true; }
}

int pool_threads(void) { return P.nthreads; }

void pool_run(int ntasks, PoolFn fn, void *arg)
{
    if (ntasks <= 0) return;
    if (P.nthreads == 1 || ntasks == 1 || in_job) {
        for (int t = 0; t < ntasks; t++) fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&P.mu);
    P.fn = fn;
    P.arg = arg;
    P.ntasks = ntasks;
    P.pending = P.nworkers;
    P.gen++;
    pthread_cond_broadcast(&P.work);
    pthread_mutex_unlock(&P.mu);
    run_share(0);
    pthread_mutex_lock(&P.mu);
    while (P.pending > 0) pthread_cond_wait(&P.done, &P.mu);
    pthread_mutex_unlock(&P.mu);
}
