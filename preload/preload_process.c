/* The whole-process profile of libsnapprof-preload.so: started from the
 * environment when the library loads (or by ProfilerStart), it samples
 * every thread, is written at exit or when a terminating signal arrives,
 * and continues in children of fork() with their own files. A helper thread
 * does the work that signal handlers and timers cannot do themselves.
 *
 * This file: the preload lock and the flags read without it, the real
 * pthread_create (our wrapper's and the library's threads are made with
 * it) and the real sigaction. Loading from the environment is preload_main.c; start, stop and
 * flush (and the profile's state) are preload_control.c, requests to the
 * helper thread preload_helper.c, fork preload_fork.c, the thread registry
 * preload_threads.c, the summary for `snapprof record` preload_summary.c. */
#include "preload/preload_process.h"

#include <snapprof/snapprof.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The lock and the flags                                                   */
/* ------------------------------------------------------------------------ */

/* The preload lock guards the profile (preload_control.c) and the thread
 * registry (preload_threads.c); its holder is noted for signal context. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_lock_owner;
atomic_int snapprof__preload_tracking_on;
atomic_int snapprof__preload_owner_pid;
/* snapprof__preload_signals_passthrough()'s count. */
static __thread int tls_passthrough __attribute__((tls_model("initial-exec")));

void snapprof__preload_lock(void)
{
    snapprof__preload_lock_as(gettid_());
}

void snapprof__preload_lock_as(pid_t self)
{
    pthread_mutex_lock(&g_lock);
    atomic_store(&g_lock_owner, (int)self);
}

void snapprof__preload_unlock(void)
{
    atomic_store(&g_lock_owner, 0);
    pthread_mutex_unlock(&g_lock);
}

int snapprof__preload_trylock_as(pid_t self)
{
    if (pthread_mutex_trylock(&g_lock) != 0)
        return 0;
    atomic_store(&g_lock_owner, (int)self);
    return 1;
}

pid_t snapprof__preload_lock_holder(void)
{
    return (pid_t)atomic_load(&g_lock_owner);
}

void snapprof__preload_signals_passthrough(int on)
{
    tls_passthrough += on ? 1 : -1;
}

int snapprof__preload_signals_passing_through(void)
{
    return tls_passthrough > 0;
}

int snapprof__preload_fork_lock(const struct timespec *abstime)
{
    return pthread_mutex_timedlock(&g_lock, abstime) == 0;
}

void snapprof__preload_fork_unlock(void)
{
    pthread_mutex_unlock(&g_lock);
}

void snapprof__preload_fork_lock_reset(void)
{
    pthread_mutex_init(&g_lock, NULL);
    atomic_store(&g_lock_owner, 0);
}

typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

int snapprof__preload_real_pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                                          void *(*start)(void *), void *arg)
{
    static pthread_create_fn real;
    pthread_create_fn fn = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
        __atomic_store_n(&real, fn, __ATOMIC_RELEASE);
    }
    return fn ? fn(thread, attr, start, arg) : ENOSYS;
}

int snapprof__preload_path_fmt(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

void snapprof__preload_warn(const char *fmt, ...)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "snapprof: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}
