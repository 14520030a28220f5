#include "util/pool.h"
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>
#include "util/mem.h"

struct Pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t tid[POOL_MAX_THREADS];
    int nthreads;          /* including the caller */
    int nworkers;          /* started pthreads */
    unsigned long gen;     /* job generation: workers wait for it to change */
    int pending;           /* workers still running the current job */
    bool stop;
    PoolFn fn;
    void *arg;
    int ntasks;
};

typedef struct Worker {
    Pool *pool;
    int id;
} Worker;

/* Set while a thread runs a share of a job: a pool_run from inside a job (a kernel that
 * splits its work, called by a kernel that already did) runs serially in place. */
static __thread int in_job;

static void run_share(Pool *p, int worker)
{
    in_job = 1;
    for (int t = worker; t < p->ntasks; t += p->nthreads) p->fn(p->arg, t, worker);
    in_job = 0;
}

static void *worker_main(void *arg)
{
    Pool *p = ((Worker *)arg)->pool;
    int id = ((Worker *)arg)->id;
    gc_free(arg);
    pthread_mutex_lock(&p->mu);
    /* every job counts, even one issued before this thread first took the lock: the
     * pool's first job is generation 1 */
    unsigned long seen = 0;
    for (;;) {
        while (p->gen == seen && !p->stop) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_share(p, id);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int pool_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

Pool *pool_new(int n)
{
    if (n == 0) n = pool_cores();
    if (n < 1) n = 1;
    if (n > POOL_MAX_THREADS) n = POOL_MAX_THREADS;
    Pool *p = gc_calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 1; i < n; i++) {
        Worker *w = gc_malloc(sizeof *w);
        if (!w) break;
        *w = (Worker){ p, i };
        if (pthread_create(&p->tid[p->nworkers], NULL, worker_main, w) != 0) {
            gc_free(w);
            break;
        }
        p->nworkers++;
    }
    p->nthreads = p->nworkers + 1;   /* fewer if a thread could not be started */
    return p;
}

void pool_free(Pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    gc_free(p);
}

int pool_threads(const Pool *p) { return p ? p->nthreads : 1; }

void pool_run(Pool *p, int ntasks, PoolFn fn, void *arg)
{
    if (ntasks <= 0) return;
    if (!p || p->nthreads == 1 || ntasks == 1 || in_job) {
        for (int t = 0; t < ntasks; t++) fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    p->pending = p->nworkers;
    p->gen++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    run_share(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
