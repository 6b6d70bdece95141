/* libc functions interposed by the preload library: pthread_create (every
 * thread the program creates registers itself before its start routine
 * runs, where its stack bounds are known), pthread_setname_np (samples
 * carry the new name), fork (the child gets a profile of its own, or none)
 * and _exit/_Exit (programs such as dash end that way, past exit handlers:
 * the profile is written first), pthread_exit (the helper learns that the
 * program's first thread ends, after which the program can end with its
 * last other thread), prctl(PR_SET_SECCOMP) and syscall(SYS_seccomp) (a
 * seccomp filter the program installs while it is profiled is checked
 * before the profiler makes a call it could kill the process for).
 * sigaction and signal are in preload_signals.c,
 * pipe2 (libunwind's pipe goes to our fd numbers) and the credential calls
 * in preload_held.c. */
#include "preload/preload.h"
#include "preload/preload_process.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
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

/* ------------------------------------------------------------------------ */
/* Seccomp filters                                                          */
/* ------------------------------------------------------------------------ */

/* Around the program's install of a seccomp filter, as a host that links
 * snapprof makes the calls (snapprof.h, "Seccomp filters the program
 * installs"): nothing of ours made meanwhile, then the calling thread's
 * filter checked in a child before anything is made again. prctl() and
 * syscall() are called from the program's ordinary code, where the check
 * may run (it takes only its own lock, allocates nothing, and its child
 * makes raw system calls only); the program's locks are not ours.
 *
 * Strict mode (SECCOMP_MODE_STRICT) leaves the calling thread read, write,
 * exit and sigreturn: it could not read /proc to be checked, and a
 * sample's signal handler on it (futex, gettid) would kill the process.
 * So the sampling signal is blocked on it first (the profiler then finds
 * it blocking, and its handshake times out and backs off) and the calls
 * are held back for good: strict mode is the calling thread's alone, but
 * its heap captures and any thread it made would read from it. Should
 * the install fail, both are undone.
 *
 * install() runs the real call in between; mode is SECCOMP_MODE_FILTER or
 * SECCOMP_MODE_STRICT. errno is the real call's. */
static long seccomp_install(long mode, long (*install)(const long *), const long *args)
{
    int signo = 0;
    sigset_t set, old;
    snapprof_seccomp_changing();
    if (mode == SECCOMP_MODE_STRICT && (signo = snapprof__preload_threads_signo()) > 0) {
        sigemptyset(&set);
        sigaddset(&set, signo);
        pthread_sigmask(SIG_BLOCK, &set, &old);
    }
    long rc = install(args);
    if (mode == SECCOMP_MODE_STRICT && rc == 0)
        return rc; /* nothing but read and write from here: held back for good */
    int saved = errno;
    if (signo > 0)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    snapprof_seccomp_changed();
    errno = saved;
    return rc;
}

static long install_by_prctl(const long *a)
{
    snapprof__preload_prctl_fn fn = snapprof__preload_real_prctl();
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    return fn(PR_SET_SECCOMP, a[0], a[1], a[2], a[3]);
}

static long install_by_syscall(const long *a)
{
    snapprof__preload_syscall_fn fn = snapprof__preload_real_syscall();
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    return fn(SYS_seccomp, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* Every other option passes straight through: one compare. The arguments
 * are read as the four unsigned longs the kernel takes (glibc's own
 * prctl() reads them the same way, whatever the caller passed). */
SNAPPROF_PRELOAD_EXPORT int prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    long a[4];
    for (int i = 0; i < 4; i++)
        a[i] = (long)va_arg(ap, unsigned long);
    va_end(ap);
    if (option == PR_SET_SECCOMP)
        return (int)seccomp_install(a[0], install_by_prctl, a);
    snapprof__preload_prctl_fn fn = snapprof__preload_real_prctl();
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    return fn(option, a[0], a[1], a[2], a[3]);
}

/* libseccomp's seccomp_load() installs its filter through this. Every
 * other call passes straight through, after one compare: the library's own
 * system calls come this way too, signal handlers' included, so nothing
 * here may do more (the real syscall() was resolved by the constructor).
 * The arguments are read as six longs, as glibc's syscall() passes them
 * to the kernel. The seccomp() operations that install nothing
 * (SECCOMP_GET_ACTION_AVAIL, _GET_NOTIF_SIZES) pass through too. */
SNAPPROF_PRELOAD_EXPORT long syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_seccomp && (a[0] == SECCOMP_SET_MODE_STRICT || a[0] == SECCOMP_SET_MODE_FILTER))
        return seccomp_install(a[0] == SECCOMP_SET_MODE_STRICT ? SECCOMP_MODE_STRICT
                                                               : SECCOMP_MODE_FILTER,
                               install_by_syscall, a);
    snapprof__preload_syscall_fn fn = snapprof__preload_real_syscall();
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    return fn(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
