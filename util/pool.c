#include "util/pool.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "util/mem.h"

/* Spinning.  A sleeping worker's wake-up (a futex wake, and on a virtual machine an
 * interrupt to a halted virtual CPU) took 9-50 us on the 2-core Zen 5 VM against 0.7 us
 * for a spinning one, while a whole batch-1 inference of the MNIST CNN, two hand-offs,
 * is 150-250 us.  So a worker that finishes a job watches for the next one for up to
 * the pool's spin time (POOL_SPIN_NS, about the price of a wake-up) before it sleeps,
 * and the caller watches for the workers' end the same way.  But a spin on a machine
 * busier than its cores takes a core from some other thread, maybe the one it waits
 * for: with 200 us spins and nothing to stop them, batch 1 took 4x as long at load 7 on
 * 2 cores, and an empty job's hand-off 170 us instead of 9.  So spinning stops, for the
 * pool, for SPIN_BACKOFF_NS, when a spinning thread finds itself descheduled (a gap of
 * more than SPIN_GAP_NS between two looks at the clock), or when the caller, done with
 * its own share, finds a share not yet picked up, SPIN_PICKUP_NS after the job's start,
 * by workers that were spinning for it.
 *
 * Taking over.  On a loaded machine a woken worker may land on the caller's own CPU (or
 * not get one at all) and start its share only when the caller stops: the two halves of
 * a product then run one after the other, with a context switch or two between them
 * (the MNIST CNN's batch-1 inference on the 2-vCPU Xeon: 0.46 ms instead of 0.24, in
 * about half the runs).  So each share is claimed by whoever reaches it first: its
 * worker, or the caller, done with its own share, which runs the shares no worker has
 * started.  A share is the same tasks with the same worker index whichever thread runs
 * it, so the bits and the per-worker scratch are those of the static schedule. */
enum { SPIN_GAP_NS = 20000, SPIN_PICKUP_NS = 5000, SPIN_BACKOFF_NS = 20000000 };

struct Pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t tid[POOL_MAX_THREADS];
    int nthreads;          /* including the caller */
    int nworkers;          /* started pthreads */
    _Atomic unsigned long gen;      /* job generation: workers wait for it to change */
    _Atomic int pending;            /* workers' shares of the current job not yet done */
    /* claim[w]: the last job generation whose share w a thread has taken (w >= 1) */
    _Atomic unsigned long claim[POOL_MAX_THREADS];
    int sleepers;                   /* workers asleep on `work` (under mu) */
    _Atomic bool stop;
    _Atomic int64_t spin_ns;        /* how long a thread spins before it sleeps (0: never) */
    _Atomic int64_t spin_after;     /* no spinning before this time (CLOCK_MONOTONIC, ns) */
    PoolFn fn;
    void *arg;
    int ntasks;
    _Atomic bool stats;             /* pool_set_stats */
    _Atomic int64_t busy[POOL_MAX_THREADS];   /* per thread: ns running shares (0: callers) */
    _Atomic int64_t wait;           /* ns callers of pool_run spent not running shares */
    clockid_t clock[POOL_MAX_THREADS];   /* each worker's CPU clock (pool_cpu_ns) */
    bool has_clock[POOL_MAX_THREADS];
};

typedef struct Worker {
    Pool *pool;
    int id;
} Worker;

/* Set while a thread runs a share of a job: a pool_run from inside a job (a kernel that
 * splits its work, called by a kernel that already did) runs serially in place. */
static __thread int in_job;

static int64_t now_ns(void);

/* Runs worker `worker`'s share on thread `thread` (0: the caller). */
static void run_share(Pool *p, int worker, int thread)
{
    bool stats = atomic_load_explicit(&p->stats, memory_order_relaxed);
    int64_t t0 = stats ? now_ns() : 0;
    in_job = 1;
    for (int t = worker; t < p->ntasks; t += p->nthreads) p->fn(p->arg, t, worker);
    in_job = 0;
    if (stats) atomic_fetch_add_explicit(&p->busy[thread], now_ns() - t0, memory_order_relaxed);
}

/* Takes share w of job generation g, unless another thread has: every job's shares are
 * all taken before the next job starts, so an untaken share of job g says g - 1. */
static bool claim_share(Pool *p, int w, unsigned long g)
{
    unsigned long prev = g - 1;
    return atomic_compare_exchange_strong_explicit(&p->claim[w], &prev, g, memory_order_acq_rel, memory_order_relaxed);
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Whether what a thread waits for has come: a job after generation `seen` (a worker),
 * or the end of the workers' shares (seen unused: the caller). */
static bool arrived(Pool *p, bool job, unsigned long seen)
{
    if (job) return atomic_load_explicit(&p->gen, memory_order_acquire) != seen;
    return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}

static void spin_off(Pool *p, int64_t t)
{
    atomic_store_explicit(&p->spin_after, t + SPIN_BACKOFF_NS, memory_order_relaxed);
}

/* Spins until arrived() or p's spin time passes; false: sleep on it. */
static bool spin(Pool *p, bool job, unsigned long seen)
{
    int64_t limit = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
    if (limit <= 0) return false;
    int64_t t0 = now_ns(), last = t0;
    if (t0 < atomic_load_explicit(&p->spin_after, memory_order_relaxed)) return false;
    for (;;) {
        for (int i = 0; i < 16; i++) {
            if (arrived(p, job, seen)) return true;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        int64_t t = now_ns();
        if (t - last > SPIN_GAP_NS) {   /* descheduled: the cores are wanted elsewhere */
            spin_off(p, t);
            return false;
        }
        if (t - t0 > limit) return false;
        last = t;
    }
}

static void *worker_main(void *arg)
{
    Pool *p = ((Worker *)arg)->pool;
    int id = ((Worker *)arg)->id;
    gc_free(arg);
    /* every job counts, even one issued before this thread started: the pool's first
     * job is generation 1 */
    unsigned long seen = 0;
    for (;;) {
        if (!spin(p, true, seen)) {
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while (!arrived(p, true, seen) && !atomic_load(&p->stop)) pthread_cond_wait(&p->work, &p->mu);
            p->sleepers--;
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        /* the job's fn, arg and ntasks were written before its generation */
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (!claim_share(p, id, seen)) continue;   /* the caller took it (or a later job's is due) */
        run_share(p, id, id);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            /* the caller may be asleep on `done` (or about to be: it checks under mu) */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
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
    atomic_store(&p->spin_ns, POOL_SPIN_NS);
    for (int i = 1; i < n; i++) {
        Worker *w = gc_malloc(sizeof *w);
        if (!w) break;
        *w = (Worker){ p, i };
        if (pthread_create(&p->tid[p->nworkers], NULL, worker_main, w) != 0) {
            gc_free(w);
            break;
        }
        p->has_clock[p->nworkers] = pthread_getcpuclockid(p->tid[p->nworkers], &p->clock[p->nworkers]) == 0;
        p->nworkers++;
    }
    p->nthreads = p->nworkers + 1;   /* fewer if a thread could not be started */
    return p;
}

void pool_free(Pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->gen, 1);   /* a spinning worker looks, and sees stop */
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    gc_free(p);
}

int pool_threads(const Pool *p) { return p ? p->nthreads : 1; }

void pool_set_spin(Pool *p, int64_t ns)
{
    if (p) atomic_store(&p->spin_ns, ns > 0 ? ns : 0);
}

static void finish(Pool *p, int64_t t0, bool woken, int taken);

void pool_set_stats(Pool *p, bool on)
{
    if (p) atomic_store(&p->stats, on);
}

void pool_stats(const Pool *p, int64_t *busy, int64_t *wait)
{
    int n = pool_threads(p);
    for (int t = 0; t < n; t++) busy[t] = p ? atomic_load(&((Pool *)p)->busy[t]) : 0;
    *wait = p ? atomic_load(&((Pool *)p)->wait) : 0;
}

static int64_t cpu_clock(clockid_t c)
{
    struct timespec t;
    if (clock_gettime(c, &t) != 0) return 0;
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int64_t pool_cpu_ns(const Pool *p)
{
    int64_t ns = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; p && i < p->nworkers; i++)
        if (p->has_clock[i]) ns += cpu_clock(p->clock[i]);
    return ns;
}

bool pool_in_job(void) { return in_job; }

void pool_run(Pool *p, int ntasks, PoolFn fn, void *arg)
{
    if (ntasks <= 0) return;
    if (!p || p->nthreads == 1 || ntasks == 1 || in_job) {
        for (int t = 0; t < ntasks; t++) fn(arg, t, 0);
        return;
    }
    int64_t t0 = now_ns();
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->pending, p->nworkers, memory_order_relaxed);
    unsigned long g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->gen, g, memory_order_release);
    bool woken = p->sleepers > 0;
    if (woken) pthread_cond_broadcast(&p->work);   /* else they are all spinning */
    pthread_mutex_unlock(&p->mu);
    run_share(p, 0, 0);
    /* the shares no worker has started: here, rather than wait for a worker to get a CPU */
    int taken = 0;
    for (int w = 1; w <= p->nworkers; w++)
        if (claim_share(p, w, g)) {
            run_share(p, w, 0);
            taken++;
        }
    int64_t tw = atomic_load_explicit(&p->stats, memory_order_relaxed) ? now_ns() : 0;
    finish(p, t0, woken, taken);
    if (tw) atomic_fetch_add_explicit(&p->wait, now_ns() - tw, memory_order_relaxed);
}

/* The end of pool_run: waits for the workers' shares (those the caller took, `taken`,
 * done). */
static void finish(Pool *p, int64_t t0, bool woken, int taken)
{
    if (taken) {
        /* workers spinning for the job that did not take it in SPIN_PICKUP_NS have been
         * descheduled */
        int64_t t = now_ns();
        if (!woken && t - t0 > SPIN_PICKUP_NS) spin_off(p, t);
        if (atomic_fetch_sub_explicit(&p->pending, taken, memory_order_acq_rel) == taken) return;
    }
    if (spin(p, false, 0)) return;
    pthread_mutex_lock(&p->mu);
    while (!arrived(p, false, 0)) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
