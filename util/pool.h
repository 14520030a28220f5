/* One thread pool for the whole process.  Workers sleep on a condition variable
 * between jobs (no spinning), so they never compete for cores with BLAS's threads:
 * a kernel that splits work across the pool runs BLAS single-threaded inside it
 * (pool_run does that switch), and BLAS uses all threads only outside the pool.
 * Scheduling is static: with T threads, task i always runs on worker i % T, so a
 * reduction over tasks sums in the same order every time (bit-for-bit results for a
 * given thread count). */
#ifndef GRAPHC_POOL_H
#define GRAPHC_POOL_H

/* fn(arg, task, worker): task in [0, ntasks), worker in [0, pool_threads()). */
typedef void (*PoolFn)(void *arg, int task, int worker);

/* Sets the number of threads, the caller included (n >= 1).  Not while a job runs. */
void pool_set_threads(int n);
int pool_threads(void);
/* Runs every task and returns when all are done.  Worker w runs tasks w, w+T, ... */
void pool_run(int ntasks, PoolFn fn, void *arg);
/* Hooks called around a parallel region (set by the BLAS module: single-threaded BLAS
 * inside the region, all threads outside). */
void pool_set_region_hooks(void (*enter)(void), void (*leave)(void));

#endif
