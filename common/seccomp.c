/* Which system calls this process's seccomp filter would kill it for
 * (seccomp.h says why and how). */
#include "common/seccomp.h"

#include "common/proc_files.h"

#include <snapprof/snapprof.h>

#include <errno.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* 1: a filter would kill the process for the call; never made. Sticky: a
 * thread under a stricter filter than the last one checked keeps it. */
static _Atomic unsigned char g_killed[SNAPPROF__SECCOMP_CALL_COUNT];

/* snapprof_seccomp_changing() calls not yet ended by
 * snapprof_seccomp_changed(): while nonzero, neither call is made (a
 * filter is being installed and nothing has looked at it yet). */
static atomic_uint g_changing;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set once the first check has read its status (snapprof__seccomp_checked()). */
static atomic_int g_checked;
static long g_seen_mode = -1, g_seen_filters = -1; /* what the last check saw */

/* How long a child may take before its call counts as one that never
 * returns (a filter that hands it to a supervisor, SECCOMP_RET_USER_NOTIF). */
#define PROBE_WAIT_NS 1000000000ull

/* The number after "name" at the start of a line of the status text, or
 * -1 when there is no such line. */
static long status_field(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, name, len) == 0)
            return strtol(line + len, NULL, 10);
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return -1;
}

/* In the child: the call, with arguments like its callers' (a filter may
 * look at them). Raw system calls only. */
static void child_call(snapprof__seccomp_call_t call)
{
    switch (call) {
    case SNAPPROF__SECCOMP_PERF_EVENT_OPEN: {
        struct perf_event_attr attr = {.size = sizeof attr,
                                       .type = PERF_TYPE_SOFTWARE,
                                       .config = PERF_COUNT_SW_TASK_CLOCK,
                                       .sample_period = 10000000,
                                       .disabled = 1,
                                       .exclude_kernel = 1,
                                       .exclude_hv = 1};
        syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
        break;
    }
    case SNAPPROF__SECCOMP_PROCESS_VM_READV: {
        uint64_t from = 1, to = 0;
        struct iovec local = {&to, sizeof to}, remote = {&from, sizeof from};
        syscall(SYS_process_vm_readv, syscall(SYS_getpid), &local, 1UL, &remote, 1UL, 0UL);
        break;
    }
    case SNAPPROF__SECCOMP_CLOSE_RANGE:
        syscall(SYS_close_range, 0U, ~0U, 2U /* CLOSE_RANGE_UNSHARE */);
        break;
    default:
        break;
    }
}

/* Makes the call in a child process. Returns 1 when the child ended by
 * itself (the call returned, whatever it returned), 0 when it was killed,
 * took too long, or could not be made or waited for. */
static int survives(snapprof__seccomp_call_t call)
{
    /* No CLONE_* flag and no exit signal: a copy of this thread alone, as
     * fork() makes, but without the program's atfork handlers and without
     * a SIGCHLD to the program. */
    long pid = syscall(SYS_clone, 0UL, 0UL, NULL, NULL, 0UL);
    if (pid == 0) {
        struct {
            void *handler;
            unsigned long flags;
            void *restorer;
            unsigned long mask;
        } dfl = {0}; /* SIG_DFL: a trapping filter kills the child, runs no handler */
        syscall(SYS_rt_sigaction, SIGSYS, &dfl, NULL, sizeof dfl.mask);
        child_call(call);
        syscall(SYS_exit_group, 0);
    }
    if (pid < 0)
        return 0;
    int status = 0;
    uint64_t waited = 0;
    for (uint64_t step = 50000; waited < PROBE_WAIT_NS; waited += step, step *= 2) {
        pid_t got = waitpid((pid_t)pid, &status, __WALL | WNOHANG);
        if (got == (pid_t)pid)
            return WIFEXITED(status);
        if (got < 0 && errno != EINTR)
            return 0; /* reaped by someone else: not known */
        struct timespec ts = {0, (long)step};
        nanosleep(&ts, NULL);
    }
    kill((pid_t)pid, SIGKILL);
    while (waitpid((pid_t)pid, &status, __WALL) < 0 && errno == EINTR)
        ;
    return 0;
}

/* The check; force: probe even when the status lines look as the last
 * check saw them, which they may for a new filter: another thread's
 * filter of the same count was the one seen, or the kernel has no
 * Seccomp_filters line. Returns 0, or the negative errno of the status
 * read. */
static int check(int force)
{
    char text[4096];
    int saved = errno;
    ssize_t got = snapprof__proc_task_read((pid_t)syscall(SYS_gettid), "status", text, sizeof text);
    atomic_store(&g_checked, 1);
    if (got <= 0) {
        errno = saved;
        return got < 0 ? (int)got : -ENODATA; /* no /proc: the calls are made, as before */
    }
    long mode = status_field(text, "Seccomp:");
    long filters = status_field(text, "Seccomp_filters:");
    if (mode <= 0) {
        errno = saved;
        return 0; /* no filter (or a kernel without seccomp) */
    }
    pthread_mutex_lock(&g_lock);
    if (force || mode != g_seen_mode || filters != g_seen_filters) {
        for (int c = 0; c < SNAPPROF__SECCOMP_CALL_COUNT; c++)
            if (!atomic_load_explicit(&g_killed[c], memory_order_relaxed) &&
                (mode != 2 || !survives((snapprof__seccomp_call_t)c)))
                atomic_store_explicit(&g_killed[c], 1, memory_order_release);
        g_seen_mode = mode;
        g_seen_filters = filters;
    }
    pthread_mutex_unlock(&g_lock);
    errno = saved;
    return 0;
}

int snapprof__seccomp_checked(void)
{
    return atomic_load(&g_checked);
}

void snapprof__seccomp_check(void)
{
    check(0);
}

SNAPPROF_API int snapprof_seccomp_changing(void)
{
    atomic_fetch_add_explicit(&g_changing, 1, memory_order_seq_cst);
    return 0;
}

/* Ends one snapprof_seccomp_changing(), if any: takes one off g_changing
 * unless it is 0 (a changed() with no changing() before it ends nothing:
 * seccomp_api_no_filter). A compare-and-swap loop because the test and
 * the decrement must be one atomic step. atomic_fetch_sub() after a load
 * that saw a nonzero count is not: two threads that both saw 1 would both
 * subtract, and the count would wrap to UINT_MAX, holding both calls back
 * for the life of the process. Nor is atomic_fetch_sub() undone by an
 * atomic_fetch_add() when it found 0: in between the count is UINT_MAX,
 * and a changing() on another thread then takes it to 0, letting the
 * calls through, until the undo, while that thread installs its filter. A
 * failed exchange reloads n, so the loop ends at 0 or after one
 * decrement. */
static void end_one_changing(void)
{
    unsigned n = atomic_load_explicit(&g_changing, memory_order_relaxed);
    while (n > 0 && !atomic_compare_exchange_weak_explicit(
                        &g_changing, &n, n - 1, memory_order_seq_cst, memory_order_relaxed))
        ;
}

SNAPPROF_API int snapprof_seccomp_changed(void)
{
    /* Probed while the calls are still held back: the marks are set
     * before they are allowed again. Forced: at most one child per call
     * not yet marked, a millisecond or so, and programs install filters
     * once or twice. */
    int rc = check(1);
    end_one_changing();
    if (rc < 0)
        return rc;
    int never = 0;
    for (int c = 0; c < SNAPPROF__SECCOMP_CALL_COUNT; c++)
        never += atomic_load_explicit(&g_killed[c], memory_order_acquire);
    return never;
}

/* Async-signal-safe. */
int snapprof__seccomp_allowed(snapprof__seccomp_call_t call)
{
    return (unsigned)call >= SNAPPROF__SECCOMP_CALL_COUNT ||
           (!atomic_load_explicit(&g_killed[call], memory_order_acquire) &&
            atomic_load_explicit(&g_changing, memory_order_seq_cst) == 0);
}

/* Async-signal-safe. */
ssize_t snapprof__process_vm_readv(pid_t pid, const struct iovec *local, unsigned long nlocal,
                                   const struct iovec *remote, unsigned long nremote)
{
    if (!snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PROCESS_VM_READV)) {
        errno = EPERM;
        return -1;
    }
    return (ssize_t)syscall(SYS_process_vm_readv, (long)pid, local, nlocal, remote, nremote, 0UL);
}
