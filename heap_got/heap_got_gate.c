/* The loader across fork() for the GOT patcher, as module_cache/module_scan.c
 * does it for the module cache.
 *
 * glibc 2.36 does not reset its dl_load_write_lock in a fork child: a child
 * forked while one of our scans was inside dl_iterate_phdr() would hang in
 * its own next one. Our calls into the loader go through hg_gate, which
 * fork() holds from its prepare handler to the parent's: it waits for the
 * scan in progress (which needs only the loader's lock, never held by a
 * forking thread in its handlers), and keeps the next one out until the
 * fork is done; the tick only tries the gate and does without the loader
 * this once if a fork is on its way. The wait is bounded, at 10 s (a scan
 * is milliseconds, but a thread of nice 19 on a loaded machine can wait
 * that long for a CPU: 1 s was seen to run out), and at 1 s in sanitizer
 * builds, whose fork() holds runtime locks that a scan in their
 * dl_iterate_phdr() wrapper needs (a wait there cannot end well); not at
 * all in a fork() from a signal handler that interrupted this thread's own
 * scan (hg_gate_owner).
 *
 * Compiled as heap_got.c is (heap_got/CMakeLists.txt): not instrumented. */

#include "heap_got/heap_got_gate.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t hg_gate = PTHREAD_MUTEX_INITIALIZER;
static _Atomic pid_t hg_gate_owner; /* the thread holding it for a scan, 0 */
static int hg_gate_held;
/* Forks waiting for the gate: a scan about to start yields to them first.
 * glibc's mutex is not fair: a thread that scans over and over (install
 * in a loop) took the gate back each time before the forking thread woke,
 * and fork() waited seconds (test heap_got_fork_while_scanning: 200 forks
 * took 25-76 s on a loaded machine). */
static atomic_int hg_forks_waiting;

static pid_t hg_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

void snapprof__heap_got_gate_lock(void)
{
    for (int i = 0; i < 1000 && atomic_load_explicit(&hg_forks_waiting, memory_order_relaxed); i++)
        sched_yield(); /* bounded: a fork's wait is itself bounded */
    pthread_mutex_lock(&hg_gate);
    atomic_store_explicit(&hg_gate_owner, hg_tid(), memory_order_relaxed);
}

int snapprof__heap_got_gate_trylock(void)
{
    if (pthread_mutex_trylock(&hg_gate) != 0)
        return -1;
    atomic_store_explicit(&hg_gate_owner, hg_tid(), memory_order_relaxed);
    return 0;
}

void snapprof__heap_got_gate_unlock(void)
{
    atomic_store_explicit(&hg_gate_owner, 0, memory_order_relaxed);
    pthread_mutex_unlock(&hg_gate);
}

void snapprof__heap_got_gate_fork_prepare(void)
{
    hg_gate_held = 0;
    if (atomic_load_explicit(&hg_gate_owner, memory_order_relaxed) == hg_tid())
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
#if defined(SNAPPROF_SANITIZER_BUILD)
    ts.tv_sec += 1;
#else
    ts.tv_sec += 10;
#endif
    atomic_fetch_add_explicit(&hg_forks_waiting, 1, memory_order_relaxed);
    hg_gate_held = pthread_mutex_timedlock(&hg_gate, &ts) == 0;
    atomic_fetch_sub_explicit(&hg_forks_waiting, 1, memory_order_relaxed);
}

void snapprof__heap_got_gate_fork_parent(void)
{
    if (hg_gate_held)
        pthread_mutex_unlock(&hg_gate);
}

void snapprof__heap_got_gate_fork_child(void)
{
    pthread_mutex_init(&hg_gate, NULL);
    atomic_store_explicit(&hg_gate_owner, 0, memory_order_relaxed);
    atomic_store_explicit(&hg_forks_waiting, 0, memory_order_relaxed);
}
