/* The thread registry of the whole-process profile (preload_process.c):
 * threads that register themselves (made through our pthread_create) or
 * are found in /proc/self/task, added to and removed from the profiler,
 * and renamed. This file alone holds the registry. Everything here is
 * under the preload lock unless it says otherwise. */
#include "preload/preload_process.h"

#include "common/proc_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One registered thread. The entry owns one reference on the token. */
typedef struct reg_entry {
    pid_t tid;
    pthread_t pth;
    int has_pth;   /* pth is known (the thread registered itself) */
    int from_scan; /* found in /proc/self/task, registered by tid */
    snapprof_thread_t *token;
} reg_entry_t;

/* The registry; under the preload lock. */
static struct {
    snapprof_profiler_t *profiler; /* the running profile's, else NULL */
    int signo;                     /* its sampling signal */
    reg_entry_t *reg;
    size_t n_reg, cap_reg;
    uint64_t threads_seen, threads_failed;
} g_reg;
static atomic_uint g_threads_skipped; /* threads that block the sampling signal */

/* The key whose destructor removes an exiting self-registered thread. */
static pthread_key_t g_exit_key;
/* A thread's tid, noted as it registers itself: its start and its exit
 * each make one system call less (they are most of what profiling costs a
 * short thread). 0 in a forked child's thread until it registers again. */
static __thread pid_t tls_tid;
static pthread_once_t g_exit_key_once = PTHREAD_ONCE_INIT;

static ssize_t reg_find(pid_t tid)
{
    for (size_t i = 0; i < g_reg.n_reg; i++)
        if (g_reg.reg[i].tid == tid)
            return (ssize_t)i;
    return -1;
}

/* Removes registry entry i from the profile and releases its token. */
static void reg_drop(size_t i)
{
    snapprof_profiler_remove_thread(g_reg.profiler, g_reg.reg[i].token);
    snapprof_thread_release(g_reg.reg[i].token);
    g_reg.reg[i] = g_reg.reg[--g_reg.n_reg];
}

/* Adds a registered thread to the profile; takes over the token's
 * reference in every case. A thread registering itself replaces an entry
 * for its tid (a recycled tid, or the scan at start that saw it first). */
static void reg_add(const reg_entry_t *e)
{
    ssize_t old = reg_find(e->tid);
    if (old >= 0 && e->from_scan) {
        snapprof_thread_release(e->token);
        return;
    }
    int counted = 1;
    if (old >= 0) {
        counted = !g_reg.reg[old].from_scan; /* else the same thread, seen twice */
        reg_drop((size_t)old);
    }
    if (g_reg.n_reg == g_reg.cap_reg) {
        size_t cap = g_reg.cap_reg ? g_reg.cap_reg * 2 : 16;
        reg_entry_t *n = realloc(g_reg.reg, cap * sizeof *n);
        if (!n) {
            g_reg.threads_failed++;
            snapprof_thread_release(e->token);
            return;
        }
        g_reg.reg = n;
        g_reg.cap_reg = cap;
    }
    if (snapprof_profiler_add_thread(g_reg.profiler, e->token) != 0) {
        g_reg.threads_failed++;
        snapprof_thread_release(e->token);
        return;
    }
    g_reg.reg[g_reg.n_reg++] = *e;
    if (counted)
        g_reg.threads_seen++;
}

/* Runs when a thread that registered itself exits: it leaves the profile
 * now instead of being found gone (and counted a failure) at the next tick. */
static void on_thread_exit(void *unused)
{
    (void)unused;
    pid_t tid = tls_tid ? tls_tid : gettid_();
    snapprof__preload_lock_as(tid);
    ssize_t i = g_reg.profiler ? reg_find(tid) : -1;
    if (i >= 0)
        reg_drop((size_t)i);
    snapprof__preload_unlock();
}

void snapprof__preload_threads_fork_child(void)
{
    tls_tid = 0; /* the forking thread's, which has a new tid here */
}

static void make_exit_key(void)
{
    /* Made after the library's own exit key, which registering a thread
     * makes (start registers this thread anyway, just after): glibc runs
     * key destructors in the order the keys were made, so an exiting
     * thread's token has read its CPU clock before on_thread_exit() takes
     * it out of the profile, which then reads no clock itself (one system
     * call less per thread). An order for speed only: either way is right. */
    snapprof_thread_t *t;
    if (snapprof_thread_register(&t) == 0)
        snapprof_thread_release(t);
    pthread_key_create(&g_exit_key, on_thread_exit);
}

void snapprof__preload_threads_init(void)
{
    pthread_once(&g_exit_key_once, make_exit_key);
}

void snapprof__preload_threads_begin(snapprof_profiler_t *p, int signo)
{
    g_reg.profiler = p;
    g_reg.signo = signo;
    g_reg.threads_seen = g_reg.threads_failed = 0;
    atomic_store(&g_threads_skipped, 0);
}

int snapprof__preload_threads_signo(void)
{
    snapprof__preload_lock();
    int signo = g_reg.profiler ? g_reg.signo : 0;
    snapprof__preload_unlock();
    return signo;
}

void snapprof__preload_threads_end(int free_entries)
{
    while (g_reg.n_reg > 0)
        reg_drop(g_reg.n_reg - 1);
    if (free_entries) {
        free(g_reg.reg);
        g_reg.reg = NULL;
        g_reg.cap_reg = 0;
    }
    g_reg.profiler = NULL;
}

void *snapprof__preload_threads_forget(void)
{
    void *entries = g_reg.reg;
    memset(&g_reg, 0, sizeof g_reg);
    return entries;
}

void snapprof__preload_threads_counts(uint64_t *seen, uint64_t *failed, unsigned *skipped)
{
    *seen = g_reg.threads_seen;
    *failed = g_reg.threads_failed;
    *skipped = atomic_load(&g_threads_skipped);
}

/* 1 when the "SigBlk:" (or "SigPnd:") line of thread tid's status has
 * signo set. A thread that blocks the sampling signal cannot be sampled:
 * snapprof's own threads block everything. */
static int thread_sigset_has(pid_t tid, const char *line_name, int signo)
{
    return snapprof__proc_task_sigset_has(tid, line_name, signo);
}

#define SIG_BIT(signo) (1ull << ((signo)-1))

/* 1 when thread tid blocks every signal of want (SIG_BIT()s), read once;
 * 0 when it does not or its status cannot be read. */
static int thread_blocks_all(pid_t tid, uint64_t want)
{
    uint64_t blocked;
    return snapprof__proc_task_sigset(tid, "SigBlk", &blocked) == 0 && (blocked & want) == want;
}

/* 1 when thread tid has not run yet: the first field of its schedstat (its
 * time on a CPU, in ns) is 0. glibc starts a thread with every signal
 * blocked and unblocks them when it first runs, so a thread created just
 * before a profile starts looks, until then, like one that blocks our
 * signal. 0 when the file cannot be read (no CONFIG_SCHED_INFO). */
static int thread_never_ran(pid_t tid)
{
    char buf[128];
    if (snapprof__proc_task_read(tid, "schedstat", buf, sizeof buf) < 0)
        return 0;
    return buf[0] == '0' && (buf[1] == ' ' || buf[1] == '\n');
}

/* The token the calling thread registered itself with. snapprof keeps a
 * reference on it for the thread itself, so it lives as long as the thread:
 * the thread renames itself through it without taking the preload lock. */
static __thread snapprof_thread_t *tls_token;

void snapprof__preload_register_self(void)
{
    snapprof_thread_t *t;
    if (snapprof_thread_register(&t) != 0) {
        g_reg.threads_failed++;
        return;
    }
    tls_token = t;
    tls_tid = snapprof_thread_tid(t);
    reg_entry_t e = {.tid = tls_tid, .pth = pthread_self(), .has_pth = 1, .token = t};
    reg_add(&e);
    pthread_setspecific(g_exit_key, (void *)1);
}

/* Set when a thread found by a scan did not answer the handshake that
 * finds its stack (a stalled host; a thread waiting in vfork()): the helper
 * scans again, every RETRY_NS, until it answers or is gone. */
static atomic_int g_rescan_due;

int snapprof__preload_rescan_due(void)
{
    return atomic_load(&g_rescan_due);
}

/* Whether the program has ended but for its exit: its first thread is gone
 * (a zombie: it called pthread_exit(), or it was a forked child's only
 * thread and its start routine returned) and every thread left is one of
 * snapprof's own (named "snapprof...", blocking every signal). Without us
 * the process would have exited then, with status 0 (glibc calls exit(0)
 * as the last thread ends); our threads would keep it alive for good, and
 * its parent waiting. Errs towards 0: a thread whose files cannot be read
 * for any reason but its end counts as the program's. Not under the lock:
 * reads /proc only. */
int snapprof__preload_only_ours_left(void)
{
    char buf[512];
    pid_t pid = getpid();
    if (snapprof__proc_task_read(pid, "stat", buf, sizeof buf) < 0)
        return 0;
    const char *rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ' || rp[2] != 'Z')
        return 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int ours_only = 1;
    struct dirent *de;
    while (ours_only && (de = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(de->d_name);
        if (tid <= 0 || tid == pid)
            continue;
        char comm[32];
        ssize_t n = snapprof__proc_task_read(tid, "comm", comm, sizeof comm);
        if (n == -ENOENT || n == -ESRCH)
            continue; /* ended since the listing */
        ours_only = n > 0 && strncmp(comm, "snapprof", 8) == 0 &&
                    thread_blocks_all(tid, SIG_BIT(SIGTERM) | SIG_BIT(SIGPROF) | SIG_BIT(SIGINT));
    }
    closedir(d);
    return ours_only;
}

/* The tids in /proc/self/task that are neither registered nor the caller,
 * and that do not block the signals we stop them with; when retrying, not
 * those that have yet to take the last one we sent. Under the lock. Returns
 * how many (*out is malloc'd, NULL when none). */
static size_t scan_unregistered(int signo, int retrying, pid_t **out)
{
    *out = NULL;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    pid_t self = gettid_(), *tids = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(de->d_name);
        if (tid <= 0 || tid == self || reg_find(tid) >= 0)
            continue;
        /* snapprof finds a foreign thread's stack by stopping it with
         * SIGURG, whatever the sampling signal. */
        uint64_t blocked;
        if (snapprof__proc_task_sigset(tid, "SigBlk", &blocked) != 0)
            blocked = 0; /* unreadable: taken as blocking nothing, as before */
        if (blocked & (SIG_BIT(signo) | SIG_BIT(SIGURG))) {
            if (thread_never_ran(tid)) {
                /* Not run yet, so its signals are glibc's, not its own:
                 * looked at again every RETRY_NS until it has run (a
                 * thread created just before ProfilerStart() was
                 * otherwise never sampled; test
                 * preload_whole_process_example). */
                atomic_store(&g_rescan_due, 1);
                continue;
            }
            if (!retrying)
                atomic_fetch_add(&g_threads_skipped, 1);
            continue;
        }
        if (retrying && thread_sigset_has(tid, "SigPnd", SIGURG)) {
            /* The last handshake's signal still waits: the thread has not
             * run since. Try again later rather than wait for it now. */
            atomic_store(&g_rescan_due, 1);
            continue;
        }
        if (n == cap) {
            size_t c = cap ? cap * 2 : 16;
            pid_t *t = realloc(tids, c * sizeof *t);
            if (!t) {
                g_reg.threads_failed++;
                continue;
            }
            tids = t;
            cap = c;
        }
        tids[n++] = tid;
    }
    closedir(d);
    *out = tids;
    return n;
}

/* Registers tid by its stack pointer (a handshake: may wait up to its
 * timeout). Returns the token, or NULL: gone, late (the helper retries) or
 * failed (*failed set, for the caller to count under the lock). */
static snapprof_thread_t *register_tid(pid_t tid, int *failed)
{
    snapprof_thread_t *t;
    *failed = 0;
    snapprof__preload_signals_passthrough(1);
    int rc = snapprof_thread_register_tid(tid, &t);
    snapprof__preload_signals_passthrough(0);
    if (rc == 0)
        return t;
    if (rc == -ETIMEDOUT)
        atomic_store(&g_rescan_due, 1);
    else if (rc != -ESRCH)
        *failed = 1;
    return NULL;
}

/* Threads that are there but not registered, at start: those that existed
 * before. Under the lock, which the caller already holds: threads that
 * register themselves wait until the scan is done. */
void snapprof__preload_register_existing(int signo)
{
    atomic_store(&g_rescan_due, 0);
    pid_t *tids;
    size_t n = scan_unregistered(signo, 0, &tids);
    for (size_t i = 0; i < n; i++) {
        int failed;
        snapprof_thread_t *t = register_tid(tids[i], &failed);
        g_reg.threads_failed += (uint64_t)failed;
        if (t) {
            reg_entry_t e = {.tid = tids[i], .from_scan = 1, .token = t};
            reg_add(&e);
        }
    }
    free(tids);
}

/* Later, from the helper: threads that did not answer before, and (see
 * RESCAN_NS) those made without our pthread_create. The handshakes run
 * without the lock, so a thread that is slow to answer does not hold up the
 * program's pthread_create() or ProfilerStop(). */
void snapprof__preload_rescan_threads(void)
{
    atomic_store(&g_rescan_due, 0);
    snapprof__preload_lock();
    pid_t *tids = NULL;
    size_t n = g_reg.profiler && atomic_load(&snapprof__preload_tracking_on)
                   ? scan_unregistered(g_reg.signo, 1, &tids)
                   : 0;
    snapprof__preload_unlock();
    for (size_t i = 0; i < n; i++) {
        int failed;
        snapprof_thread_t *t = register_tid(tids[i], &failed);
        if (!t && !failed)
            continue;
        snapprof__preload_lock();
        g_reg.threads_failed += (uint64_t)failed;
        if (t && g_reg.profiler && atomic_load(&snapprof__preload_tracking_on)) {
            reg_entry_t e = {.tid = tids[i], .from_scan = 1, .token = t};
            reg_add(&e); /* a no-op if the thread registered itself meanwhile */
        } else if (t) {
            snapprof_thread_release(t);
        }
        snapprof__preload_unlock();
    }
    free(tids);
}

int snapprof__preload_tracking(void)
{
    return atomic_load_explicit(&snapprof__preload_tracking_on, memory_order_relaxed);
}

void snapprof__preload_thread_started(void)
{
    if (!atomic_load(&snapprof__preload_tracking_on))
        return;
    /* A thread that starts with the sampling signal blocked is registered
     * all the same: Go's runtime (cgo) starts every thread with all signals
     * blocked and unblocks them in its own start-up, and skipping those
     * left a Go program's goroutines unsampled. One that goes on blocking
     * it is found by the profiler (its trigger fires and nothing comes)
     * and sampled by the handshake, which backs off while it times out. */
    snapprof_thread_t *t;
    int rc = snapprof_thread_register_ex(SNAPPROF_REGISTER_AT_START, &t);
    pid_t tid = rc == 0 ? snapprof_thread_tid(t) : gettid_();
    snapprof__preload_lock_as(tid);
    if (rc == 0) {
        tls_token = t;
        tls_tid = tid;
    }
    if (rc == 0 && g_reg.profiler && atomic_load(&snapprof__preload_tracking_on)) {
        reg_entry_t e = {.tid = tid, .pth = pthread_self(), .has_pth = 1, .token = t};
        reg_add(&e);
        pthread_setspecific(g_exit_key, (void *)1);
    } else if (rc == 0) {
        snapprof_thread_release(t);
    } else if (g_reg.profiler) {
        g_reg.threads_failed++;
    }
    snapprof__preload_unlock();
}

void snapprof__preload_thread_renamed(pthread_t thread, const char *name)
{
    if (!atomic_load(&snapprof__preload_tracking_on) || !name)
        return;
    /* A thread naming itself, as most do: straight to its token. (Only
     * threads that registered themselves have one; snapprof's own threads,
     * which may hold the sampler lock here, never do.) */
    snapprof_thread_t *self = tls_token;
    if (self && pthread_equal(thread, pthread_self()) && snapprof_thread_tid(self) == gettid_()) {
        snapprof_thread_update_name(self, name);
        return;
    }
    /* snapprof names its own threads while it holds its sampler lock, which
     * ranks below ours: waiting for our lock there could deadlock with a
     * thread that holds ours and waits for the sampler's. So never wait for
     * long: a rename lost to a busy lock only costs a label. */
    pid_t self_tid = gettid_();
    if (snapprof__preload_lock_holder() == self_tid)
        return;
    int locked = 0;
    for (int i = 0; i < 2000 && !(locked = snapprof__preload_trylock_as(self_tid)); i++)
        sched_yield();
    if (!locked)
        return;
    for (size_t i = 0; g_reg.profiler && i < g_reg.n_reg; i++) {
        if (g_reg.reg[i].has_pth && pthread_equal(g_reg.reg[i].pth, thread)) {
            snapprof_thread_update_name(g_reg.reg[i].token, name);
            break;
        }
    }
    snapprof__preload_unlock();
}
