/* libc functions interposed by the preload library: pthread_create (every
 * thread the program creates registers itself before its start routine
 * runs, where its stack bounds are known), pthread_setname_np (samples
 * carry the new name), fork (the child gets a profile of its own, or none)
 * and _exit/_Exit (programs such as dash end that way, past exit handlers:
 * the profile is written first), pthread_exit (the helper learns that the
 * program's first thread ends, after which the program can end with its
 * last other thread). sigaction and signal are in preload_signals.c,
 * pipe2 (libunwind's pipe goes to our fd numbers) and the credential calls
 * in preload_held.c. */
#include "preload/preload.h"
#include "preload/preload_process.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int (*setname_fn)(pthread_t, const char *);
typedef pid_t (*fork_fn)(void);
typedef void (*exit_fn)(int);
typedef void (*pthread_exit_fn)(void *);

/* Resolves the next definition of a symbol once; NULL when there is none. */
#define REAL(type, name)                                                                           \
    static type real_##name(void)                                                                  \
    {                                                                                              \
        static type fn;                                                                            \
        type f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);                                           \
        if (!f) {                                                                                  \
            f = (type)dlsym(RTLD_NEXT, #name);                                                     \
            __atomic_store_n(&fn, f, __ATOMIC_RELEASE);                                            \
        }                                                                                          \
        return f;                                                                                  \
    }
REAL(setname_fn, pthread_setname_np)
REAL(fork_fn, fork)
REAL(exit_fn, _exit)
REAL(exit_fn, _Exit)
REAL(pthread_exit_fn, pthread_exit)

typedef struct start_arg {
    void *(*start)(void *);
    void *arg;
} start_arg_t;

static void *snapprof_thread_trampoline(void *p)
{
    start_arg_t a = *(start_arg_t *)p;
    free(p);
    snapprof__preload_thread_started();
    return a.start(a.arg);
}

SNAPPROF_PRELOAD_EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                                           void *(*start)(void *), void *arg)
{
#if defined(SNAPPROF_PRELOAD_TSAN)
    /* TSan's own start routine must run first on the new thread; the
     * helper thread finds the thread later (preload_helper.c). */
    return snapprof__preload_real_pthread_create(thread, attr, start, arg);
#endif
    /* Nothing to do when no profile runs (no wrapper, no allocation), nor
     * for snapprof's own sampling thread. */
    if (!snapprof__preload_tracking() ||
        snapprof__preload_is_snapprof_code((uintptr_t)__builtin_return_address(0)))
        return snapprof__preload_real_pthread_create(thread, attr, start, arg);
    start_arg_t *a = malloc(sizeof *a);
    if (!a)
        return snapprof__preload_real_pthread_create(thread, attr, start, arg);
    a->start = start;
    a->arg = arg;
    int rc = snapprof__preload_real_pthread_create(thread, attr, snapprof_thread_trampoline, a);
    if (rc != 0)
        free(a);
    return rc;
}

SNAPPROF_PRELOAD_EXPORT int pthread_setname_np(pthread_t thread, const char *name)
{
    setname_fn fn = real_pthread_setname_np();
    if (!fn)
        return ENOSYS;
    int rc = fn(thread, name);
    if (rc == 0)
        snapprof__preload_thread_renamed(thread, name);
    return rc;
}

SNAPPROF_PRELOAD_EXPORT pid_t fork(void)
{
    fork_fn fn = real_fork();
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    snapprof__preload_fork_prepare();
    pid_t pid = fn();
    if (pid == 0) {
        snapprof__preload_fork_child();
    } else {
        int saved = errno;
        snapprof__preload_fork_parent();
        errno = saved;
    }
    return pid;
}

/* The profile is written on the helper thread while this one waits, which
 * is safe from a signal handler too (bounded, like the terminating-signal
 * path); in a vfork() child, which shares the parent's memory, nothing is
 * touched at all. */
SNAPPROF_PRELOAD_EXPORT void _exit(int status)
{
    snapprof__preload_finish_on_signal(0);
    exit_fn fn = real__exit();
    if (fn)
        fn(status);
    syscall(SYS_exit_group, status);
    for (;;)
        ;
}

SNAPPROF_PRELOAD_EXPORT void _Exit(int status)
{
    snapprof__preload_finish_on_signal(0);
    exit_fn fn = real__Exit();
    if (fn)
        fn(status);
    syscall(SYS_exit_group, status);
    for (;;)
        ;
}

/* The first thread's end is the one the helper waits for (preload_control.c,
 * END_CHECK_NS); the others' pass straight through. getpid() and the
 * gettid system call: no lock, nothing allocated. */
SNAPPROF_PRELOAD_EXPORT void pthread_exit(void *retval)
{
    if (gettid_() == getpid())
        snapprof__preload_main_exiting();
    pthread_exit_fn fn = real_pthread_exit();
    if (fn)
        fn(retval);
    syscall(SYS_exit, 0);
    for (;;)
        ;
}
