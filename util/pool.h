/* One thread pool for the whole process.  Workers sleep on a condition variable
 * between jobs (no spinning).  It is the only source of threads: BLAS runs
 * single-threaded and large products are split across the pool by kern_gemm, so no
 * two thread pools ever compete for the cores.  A pool_run from inside a job runs its
 * tasks serially on the calling thread (no nesting).
 * Scheduling is static: with T threads, task i always runs on worker i % T, so a
 * reduction over tasks sums in the same order every time (bit-for-bit results for a
 * given thread count). */
#ifndef GRAPHC_POOL_H
#define GRAPHC_POOL_H

/* The most threads a pool has. */
#define POOL_MAX_THREADS 64

/* fn(arg, task, worker): task in [0, ntasks), worker in [0, pool_threads()). */
typedef void (*PoolFn)(void *arg, int task, int worker);

/* Sets the number of threads, the caller included (n >= 1).  Not while a job runs. */
void pool_set_threads(int n);
int pool_threads(void);
/* Runs every task and returns when all are done.  Worker w runs tasks w, w+T, ... */
void pool_run(int ntasks, PoolFn fn, void *arg);

#endif
