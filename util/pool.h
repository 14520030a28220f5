/* Thread pools.  Each model (its executors and the kernels they call) runs on a pool of
 * its own, handed down explicitly; nothing here is global, so two models run on two
 * threads at once without sharing anything.  A pool is the only source of threads: BLAS
 * runs single-threaded and large products are split across the pool by kern_gemm, so
 * no two thread pools of one model compete for the cores.  Workers sleep on a
 * condition variable between jobs, after watching for the next one for a while
 * (POOL_SPIN_NS; pool.c says why, and when they stop spinning).  A pool_run from inside a job (of any
 * pool) runs its tasks serially on the calling thread (no nesting).
 * Scheduling is static: with T threads, task i always runs as worker i % T, so a
 * reduction over tasks sums in the same order every time (bit-for-bit results for a
 * given thread count).  Which thread runs a worker's share is not fixed: the caller
 * runs those no worker has started by the time its own is done. */
#ifndef GRAPHC_POOL_H
#define GRAPHC_POOL_H

/* The most threads a pool has. */
#define POOL_MAX_THREADS 64
/* How long, by default, a thread that waits on the pool spins before it sleeps (ns). */
#define POOL_SPIN_NS 50000

#include <stdbool.h>
#include <stdint.h>

typedef struct Pool Pool;

/* fn(arg, task, worker): task in [0, ntasks), worker in [0, pool_threads(pool)). */
typedef void (*PoolFn)(void *arg, int task, int worker);

/* A pool of n threads, the caller of pool_run included (n is clamped to
 * [1, POOL_MAX_THREADS]; 0 means one per online core).  Fewer threads than asked when
 * the system refuses to start more (pool_threads says how many).  NULL when out of
 * memory. */
Pool *pool_new(int n);
void pool_free(Pool *p);
/* Threads of p; a NULL pool is one thread (the caller's). */
int pool_threads(const Pool *p);
/* How long p's threads spin before they sleep: ns <= 0 never (the tests' switch). */
void pool_set_spin(Pool *p, int64_t ns);
/* Runs every task and returns when all are done.  Worker w runs tasks w, w+T, ...
 * A NULL pool, or a call from inside a job, runs them in order on this thread.  One
 * job at a time per pool: a pool serves the one thread that runs its model. */
void pool_run(Pool *p, int ntasks, PoolFn fn, void *arg);
/* Profiling (graphc bench --profile): while on, each of p's threads adds up the time it
 * spends running shares of jobs, and the caller of pool_run the time it spends there
 * not running one (waiting for the workers).  Off by default: it reads the clock twice
 * a share. */
void pool_set_stats(Pool *p, bool on);
/* busy[t] for t < pool_threads(p): ns thread t ran shares (t = 0: the callers of
 * pool_run, worker threads after); *wait: ns the callers waited in pool_run. */
void pool_stats(const Pool *p, int64_t *busy, int64_t *wait);
/* The CPU time (ns) of the calling thread and p's worker threads: exact at any moment,
 * where the process's clock lags for threads running on other CPUs. */
int64_t pool_cpu_ns(const Pool *p);
/* Whether this thread runs a share of a job now (a pool_run here would run serially). */
bool pool_in_job(void);
/* The number of online cores (at least 1). */
int pool_cores(void);

#endif
