"""The threads CPU kernels share their parallel loops over: a pool where the calling thread runs
every block no worker has claimed, so a worker the system has taken off its core never stalls a
kernel (onnxruntime's pool works the same way).

A parallel loop of n blocks is cut into one contiguous range per thread of its team, as OpenMP's
static schedule cuts it (the kernels' blocking assumes each thread walks its own run of blocks).
Each range is claimed a chunk at a time through one atomic cursor; a thread that has finished
its range takes chunks of the others'. The caller waits only for chunks that another thread
claimed and is still running; a worker that wakes late finds nothing left and goes back to
waiting. So on a quiet machine every thread works its range, and on a busy one the caller does
the work of the threads that are not running, with no decision made from past timings (a
per-process choice of the team from a few samples kept one thread in some processes and two in
others).

Workers spin for a while after a loop (the next kernel of a model comes within microseconds),
then sleep on a futex. The pool is one shared library per cache folder; every kernel library
links it by path, so a process has one pool however many kernels it loads. A loop entered while
another thread of the process runs one of its own runs on the calling thread alone.
"""
from __future__ import annotations

POOL_SOURCE = r"""
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#define TS_MAX_THREADS 256
#define TS_CHUNKS 8   /* chunks per thread's range: the grain another thread can take over */

typedef void (*ts_body)(void* ctx, long begin, long end);

struct ts_range {             /* one thread's run of blocks; a cache line of its own */
  _Atomic uint64_t cursor;    /* the loop's epoch << 32 | the next unclaimed block */
  _Atomic long end, chunk, grain;
  char pad[32];
};

static struct {
  _Atomic uint32_t epoch;     /* the loop being run; the futex idle workers sleep on */
  _Atomic int sleepers;
  _Atomic long remaining;     /* blocks not yet finished */
  ts_body body;
  void* ctx;
  int team;
  int threads, spins, started;
  pid_t pid;
  pthread_mutex_t lock;
  struct ts_range ranges[TS_MAX_THREADS];
} pool = {.threads = 1, .spins = 10000, .lock = PTHREAD_MUTEX_INITIALIZER};

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static void sleep_while(_Atomic uint32_t* word, uint32_t seen) {
#ifdef __linux__
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
#else
  while (atomic_load(word) == seen) sched_yield();
#endif
}

static void wake_all(_Atomic uint32_t* word) {
#ifdef __linux__
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#endif
}

/* a chunk [lo, hi) of range r in loop e; 0 once the range is done or the loop is another */
static int claim(struct ts_range* r, uint32_t e, long* lo, long* hi) {
  uint64_t v = atomic_load_explicit(&r->cursor, memory_order_acquire);
  for (;;) {
    if ((uint32_t)(v >> 32) != e) return 0;
    long pos = (long)(uint32_t)v;
    long end = atomic_load_explicit(&r->end, memory_order_relaxed);
    long chunk = atomic_load_explicit(&r->chunk, memory_order_relaxed);
    long grain = atomic_load_explicit(&r->grain, memory_order_relaxed);
    /* an end or chunk of the next loop read here means the cursor was already reset for it
       (ts_parallel resets cursors first): the exchange below then fails */
    atomic_thread_fence(memory_order_acquire);
    if (pos >= end) return 0;
    long next = pos + chunk < end ? pos + chunk : end;
    /* a chunk ends on a multiple of the grain where one lies inside it: a thread's run
       that starts inside an outer block finishes that block, then takes whole ones */
    if (grain > 1 && next < end && next / grain * grain > pos) next = next / grain * grain;
    if (atomic_compare_exchange_weak_explicit(&r->cursor, &v, ((uint64_t)e << 32) | next,
                                              memory_order_acq_rel, memory_order_acquire)) {
      *lo = pos;
      *hi = next;
      return 1;
    }
  }
}

/* run loop e's chunks: this thread's own range first, then what is left of the others' */
static void work(uint32_t e, int home) {
  ts_body body = pool.body;
  void* ctx = pool.ctx;
  int team = pool.team;
  long lo, hi;
  for (int k = 0; k < team; k++) {
    struct ts_range* r = &pool.ranges[(home + k) % team];
    while (claim(r, e, &lo, &hi)) {
      body(ctx, lo, hi);
      atomic_fetch_sub_explicit(&pool.remaining, hi - lo, memory_order_release);
    }
  }
}

static void* worker(void* arg) {
  int home = (int)(intptr_t)arg;
  uint32_t seen = atomic_load(&pool.epoch);
  for (;;) {
    uint32_t e;
    int spun = 0;
    while ((e = atomic_load_explicit(&pool.epoch, memory_order_acquire)) == seen) {
      if (spun++ < pool.spins) {
        relax();
        continue;
      }
      atomic_fetch_add(&pool.sleepers, 1);
      if (atomic_load(&pool.epoch) == seen) sleep_while(&pool.epoch, seen);
      atomic_fetch_sub(&pool.sleepers, 1);
      spun = 0;
    }
    seen = e;
    work(e, home);
  }
  return NULL;
}

/* Called with the lock held: the workers of this process (after a fork the parent's are gone);
   `started` counts the threads that share loops, the caller included */
static void start_workers(void) {
  if (pool.started && pool.pid == getpid()) return;
  pool.pid = getpid();
  atomic_store(&pool.sleepers, 0);
  int running = 1;
  for (int w = 1; w < pool.threads; w++) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, worker, (void*)(intptr_t)w) == 0) running++;
    pthread_attr_destroy(&attr);
  }
  pool.started = running;
}

/* the pool's size (threads, the caller included) and how long an idle worker spins */
void ts_pool_configure(int threads, int spins) {
  pthread_mutex_lock(&pool.lock);
  if (!pool.started || pool.pid != getpid()) {
    pool.threads = threads < 1 ? 1 : (threads > TS_MAX_THREADS ? TS_MAX_THREADS : threads);
  }
  pool.spins = spins < 0 ? 0 : spins;
  pthread_mutex_unlock(&pool.lock);
}

int ts_pool_threads(void) { return pool.started ? pool.started : pool.threads; }


/* body(ctx, lo, hi) over [0, n) shared by up to `threads` threads, the caller one of them;
   each call of body gets at least `grain` iterations of a thread's range (or the rest of it,
   or up to the next multiple of `grain`), its end on a multiple of `grain` where one lies
   inside it: a body that walks its range tile by tile of the reduce reuses each tile across
   the iterations of one outer block */
void ts_parallel_grain(long n, int threads, long grain, ts_body body, void* ctx) {
  if (n <= 0) return;
  if (threads <= 1 || n == 1 || pool.threads <= 1 || pthread_mutex_trylock(&pool.lock) != 0) {
    body(ctx, 0, n);
    return;
  }
  start_workers();
  int team = threads < pool.started ? threads : pool.started;
  if (team > n) team = (int)n;
  uint32_t e = atomic_load_explicit(&pool.epoch, memory_order_relaxed) + 1;
  if (e == 0) e = 1;
  pool.body = body;
  pool.ctx = ctx;
  pool.team = team;
  atomic_store_explicit(&pool.remaining, n, memory_order_relaxed);
  long q = n / team, extra = n % team;
  /* OpenMP's static split: the first n % team threads get one block more. The cursors are
     reset before the ends change, so a worker still claiming in the last loop can never read
     this loop's end with that loop's cursor */
  for (int t = 0; t < team; t++) {
    long start = t * q + (t < extra ? t : extra);
    atomic_store_explicit(&pool.ranges[t].cursor, ((uint64_t)e << 32) | (uint64_t)start,
                          memory_order_relaxed);
  }
  atomic_thread_fence(memory_order_release);
  for (int t = 0; t < team; t++) {
    long start = t * q + (t < extra ? t : extra), len = q + (t < extra);
    atomic_store_explicit(&pool.ranges[t].end, start + len, memory_order_relaxed);
    long chunk = len / TS_CHUNKS > grain ? len / TS_CHUNKS : grain;
    atomic_store_explicit(&pool.ranges[t].chunk, chunk > 1 ? chunk : 1, memory_order_relaxed);
    atomic_store_explicit(&pool.ranges[t].grain, grain, memory_order_relaxed);
  }
  atomic_store(&pool.epoch, e);                 /* publishes the loop (sequentially consistent) */
  if (atomic_load(&pool.sleepers) > 0) wake_all(&pool.epoch);
  work(e, 0);
  /* the chunks other threads still run: spin, then yield the core to them */
  for (long spun = 0; atomic_load_explicit(&pool.remaining, memory_order_acquire) > 0; spun++) {
    if (spun < 4096) relax();
    else sched_yield();
  }
  pthread_mutex_unlock(&pool.lock);
}

void ts_parallel(long n, int threads, ts_body body, void* ctx) {
  ts_parallel_grain(n, threads, 1, body, ctx);
}

/* the mean cost of a parallel loop of nothing over `threads`, each after 20 us of serial work
   on the caller (the gap between two kernels of a model) */
static void nothing(void* ctx, long lo, long hi) { (void)ctx; (void)lo; (void)hi; }
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
double ts_fork_join(int threads, int rounds) {
  volatile double sink = 0;
  double total = 0;
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    while (now() - t0 < 20e-6) sink += 1;
    double start = now();
    ts_parallel(threads, threads, nothing, NULL);
    total += now() - start;
  }
  return total / rounds;
}
"""
