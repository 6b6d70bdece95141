/* fork() and the whole-process profile: the lock held across it, and in
 * the child the parent's profile left alone and, when the profile follows
 * forks, a new one started with the child's own files. Above the control
 * code (preload_control.c), which never calls back here: the child's start
 * runs on the forking thread before fork() returns, so it is a call, not a
 * request to carry out later. */
#include "preload/file_names.h"
#include "preload/preload_process.h"

#include <link.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_fork_locked;
static int g_fork_tracking; /* a profile ran when fork() was called */

/* Profilers and registries inherited over fork() that the child must not
 * write or free: kept reachable so leak checkers do not report them. */
static void *g_orphans[16];
static unsigned g_n_orphans;

/* Every output of a process other than the first one profiled is named
 * with its pid (file_names.h: BASE.PID EXT, or FILE_PID under CPUPROFILE,
 * as gperftools names them). Returns 0, or -1 (with a warning) when a
 * path gets too long. */
int snapprof__preload_child_paths(snapprof__preload_config_t *cfg, int pid)
{
    for (unsigned i = 0; i < cfg->n_outputs; i++) {
        snapprof__output_spec_t *o = &cfg->outputs[i];
        int rc = cfg->gperftools_names
                     ? snapprof__name_gperftools_child(o->family, pid, o->path, sizeof o->path)
                     : snapprof__name_file(o->family, NULL, NULL, pid, o->path, sizeof o->path);
        if (rc != 0) {
            snapprof__preload_warn("not profiling process %d: the name of its file after %s is "
                                   "too long a path",
                                   pid, o->family);
            return -1;
        }
    }
    cfg->child = 1;
    return 0;
}

/* Whether the dynamic loader can be entered in this child. glibc (2.36)
 * resets its dl_load_lock in a fork child but not dl_load_write_lock,
 * which dl_iterate_phdr() takes and dlopen()/dlclose() take around their
 * changes: a child forked while another thread held it inherits it held,
 * by a thread that does not exist here, for good. The profiler's module
 * cache enters the loader at every tick; there it would block, holding
 * the sampler lock, and the child's exit would wait for its profile in
 * vain. Nothing can ask the lock without waiting on it, so a thread asks:
 * it answers in microseconds once it runs, or is left blocked (it holds
 * nothing of ours, and all signals are blocked in it).
 *
 * The 0.2 s are counted from when the probe runs, not from its creation:
 * a new thread of a process at nice 19 on a loaded machine can wait
 * longer than that for its first CPU. Counted from its creation, 1 child
 * in 40 runs of the heap soak's fork half was not profiled "for the
 * loader's lock" while its probe answered moments later (a diagnostic
 * build held the child on to watch: the lock was free). */
#if !defined(SNAPPROF_SANITIZER_BUILD)
static atomic_uint g_loader_answer;
static _Atomic uint64_t g_loader_probe_ran; /* when the probe ran, 0 before */

static int loader_probe_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)info;
    (void)size;
    (void)data;
    return 1;
}

static void *loader_probe(void *arg)
{
    (void)arg;
    /* No wake-up here: the forking thread would take the CPU back before
     * the question was asked. */
    atomic_store(&g_loader_probe_ran, snapprof__monotonic_ns());
    dl_iterate_phdr(loader_probe_cb, NULL);
    atomic_store(&g_loader_answer, 1);
    snapprof__preload_futex_wake(&g_loader_answer);
    return NULL;
}

#define LOADER_PROBE_NS 200000000u   /* 0.2 s: it answers in microseconds when it can */
#define LOADER_START_NS 10000000000u /* 10 s for the probe to get a CPU at all */
#define LOADER_POLL_NS 20000000u     /* looks at whether it ran every 20 ms */

static int loader_usable(void)
{
    atomic_store(&g_loader_answer, 0);
    atomic_store(&g_loader_probe_ran, 0);
    pthread_t th;
    uint64_t created = snapprof__monotonic_ns();
    if (snapprof__preload_start_quiet_thread(&th, NULL, loader_probe) != 0)
        return 1; /* cannot tell: as before */
    while (!atomic_load(&g_loader_answer)) {
        uint64_t now = snapprof__monotonic_ns();
        uint64_t ran = atomic_load(&g_loader_probe_ran);
        uint64_t deadline = ran ? ran + LOADER_PROBE_NS : created + LOADER_START_NS;
        if (now >= deadline) {
            /* Blocked in the loader, or (10 s without a CPU) as good as
             * stuck: either way not a child to profile. */
            pthread_detach(th);
            return 0;
        }
        uint64_t wait = deadline - now < LOADER_POLL_NS ? deadline - now : LOADER_POLL_NS;
        snapprof__preload_futex_wait(&g_loader_answer, 0, wait);
    }
    pthread_join(th, NULL);
    return 1;
}
#endif

void snapprof__preload_fork_prepare(void)
{
    /* Holding the lock across fork() means the child never inherits a
     * registry or profile half-way through a change. Bounded, in case fork()
     * is called from a signal handler that interrupted the holder. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 2;
    g_fork_locked = snapprof__preload_fork_lock(&ts);
    g_fork_tracking =
        atomic_load(&snapprof__preload_tracking_on) && snapprof__preload_config_here() != NULL;
}

void snapprof__preload_fork_parent(void)
{
    if (g_fork_locked)
        snapprof__preload_fork_unlock();
}

/* For every fork() that runs atfork handlers, also one that bypasses our
 * wrapper: the helper thread did not come along. */
void snapprof__preload_atfork_child(void)
{
    snapprof__preload_state_fork_child();
    snapprof__preload_helper_gone();
    atomic_store(&snapprof__preload_tracking_on, 0);
}

void snapprof__preload_fork_child(void)
{
    snapprof__preload_threads_fork_child();
    snapprof__preload_fork_lock_reset();
    snapprof__preload_helper_fork_child();
    int was_running = g_fork_tracking;
    atomic_store(&snapprof__preload_tracking_on, 0);
    /* Static rather than on the stack of whatever thread forked; only
     * this thread runs in the child now. */
    static snapprof__preload_config_t cfg;
    void *profiler;
    if (!snapprof__preload_profile_fork_child(&cfg, &profiler))
        return;
    /* The parent's profile belongs to the parent. Its memory stays as it
     * is (this process may well exec() soon); the child starts afresh. */
    void *reg = snapprof__preload_threads_forget();
    if (g_n_orphans + 2 <= sizeof g_orphans / sizeof g_orphans[0]) {
        g_orphans[g_n_orphans++] = profiler;
        g_orphans[g_n_orphans++] = reg;
    }
    if (!was_running || !cfg.follow_fork)
        return;
    if (snapprof__preload_child_paths(&cfg, (int)getpid()) != 0)
        return;
#if defined(SNAPPROF_SANITIZER_BUILD)
    /* Not in a sanitizer build. Debian 12's sanitizer runtimes cannot start
     * a profiler in the child of a multi-threaded fork(): TSan cannot start
     * threads there (the child hangs in its fork interceptor), and ASan does
     * not hold its allocator's locks across fork(), so the child's first
     * malloc() of a size class whose lock a parent thread held blocks for
     * good (gdb on a soak child: the sampling and helper threads in
     * SizeClassAllocator64::GetFromAllocator, and _exit() waiting 10 s for
     * a profile). A plain build profiles the child; an exec() from it is
     * profiled in both. */
    snapprof__preload_warn("not profiling child %d: a sanitizer build cannot start a profiler "
                           "in the child of a multi-threaded fork()",
                           (int)getpid());
#else
    if (!loader_usable()) {
        snapprof__preload_warn("not profiling child %d: it was forked while another thread held "
                               "the dynamic loader's lock, which stays held in the child",
                               (int)getpid());
        return;
    }
    char why[256];
    snapprof__preload_lock();
    int rc = snapprof__preload_start_locked(&cfg, SNAPPROF_PRELOAD_FALLBACK, why, sizeof why);
    snapprof__preload_unlock();
    if (rc != 0)
        snapprof__preload_warn("not profiling child %d: %s", (int)getpid(), why);
#endif
}
