/* The whole-process profile of libsnapprof-preload.so: started from the
 * environment when the library loads (or by ProfilerStart), it samples
 * every thread, is written at exit or when a terminating signal arrives,
 * and continues in children of fork() with their own files. A helper thread
 * does the work that signal handlers and timers cannot do themselves.
 *
 * This file: the state, the helper thread, start/stop/flush, fork, and
 * loading from the environment. The thread registry is preload_threads.c,
 * the summary for `snapprof record` preload_summary.c. */
#include "preload/preload_process.h"

#include <snapprof/snapprof.h>

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* State                                                                    */
/* ------------------------------------------------------------------------ */

/* Shared with preload_threads.c and preload_summary.c (preload_process.h). */
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
preload_state_t g;
atomic_int g_tracking;
atomic_int g_signo;
atomic_uint g_threads_skipped;
atomic_int g_lock_owner;

static atomic_int g_owner_pid; /* the process whose profile runs, else 0 */
static int g_fork_locked;
static int g_fork_tracking; /* a profile ran when fork() was called */

/* Profilers and registries inherited over fork() that the child must not
 * write or free: kept reachable so leak checkers do not report them. */
static void *g_orphans[16];
static unsigned g_n_orphans;

/* The helper thread and its commands. */
enum { CMD_FINISH = 1u, CMD_WAKE = 2u };
static atomic_uint g_cmd;
static atomic_uint g_finish_done;
static atomic_int g_finish_signal;
static atomic_int g_helper_running;
static atomic_ullong g_deadline; /* CLOCK_MONOTONIC ns; 0: none */

void lock(void)
{
    lock_as(gettid_());
}

void lock_as(pid_t self)
{
    pthread_mutex_lock(&g_lock);
    atomic_store(&g_lock_owner, (int)self);
}

void unlock(void)
{
    atomic_store(&g_lock_owner, 0);
    pthread_mutex_unlock(&g_lock);
}

int path_fmt(char *out, size_t size, const char *fmt, ...)
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

/* ------------------------------------------------------------------------ */
/* The helper thread                                                        */
/* ------------------------------------------------------------------------ */

static void futex_wake(atomic_uint *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits while *word == expected, at most timeout_ns (0: no limit). */
static void futex_wait(atomic_uint *word, unsigned expected, uint64_t timeout_ns)
{
    struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, timeout_ns ? &ts : NULL, NULL, 0);
}

static void stop_at_deadline(void)
{
    lock();
    int due = g.profiler && g.owner == getpid();
    unlock();
    if (due)
        snapprof__preload_stop("duration");
}

/* Under TSan our pthread_create cannot register threads: TSan starts each
 * thread with its own routine, which must run before any instrumented code,
 * so the trampoline would come too early (preload_interpose.c does not wrap
 * there). The helper finds new threads in /proc/self/task instead. */
#if defined(SNAPPROF_PRELOAD_TSAN)
#define RESCAN_NS 20000000u
#else
#define RESCAN_NS 0u
#endif

static void *helper_main(void *arg)
{
    (void)arg;
    /* prctl, not pthread_setname_np, which is ours and takes our lock. */
    prctl(PR_SET_NAME, "snapprof-helper");
    uint64_t next_rescan = 0;
    for (;;) {
        unsigned cmd = atomic_exchange(&g_cmd, 0);
        if (cmd & CMD_FINISH) {
            char name[32];
            int signo = atomic_load(&g_finish_signal);
            snapprof__preload_stop(signo > 0 ? snapprof__signal_name(signo, name, sizeof name)
                                             : "_exit");
            atomic_store(&g_finish_done, 1);
            futex_wake(&g_finish_done);
            continue;
        }
        uint64_t deadline = atomic_load(&g_deadline), now = snapprof__monotonic_ns();
        if (deadline && now >= deadline) {
            atomic_store(&g_deadline, 0);
            stop_at_deadline();
            continue;
        }
        uint64_t wake = deadline;
        uint64_t every = RESCAN_NS ? RESCAN_NS : atomic_load(&g_rescan_due) ? RETRY_NS : 0;
        if (every && atomic_load(&g_tracking)) {
            if (now >= next_rescan) {
                rescan_threads();
                next_rescan = snapprof__monotonic_ns() + every;
            }
            if (!wake || next_rescan < wake)
                wake = next_rescan;
        }
        futex_wait(&g_cmd, 0, wake ? (wake > now ? wake - now : 1) : 0);
    }
    return NULL;
}

/* Starts the helper once per process; it blocks every signal, so it is
 * never a sampling target and never runs the program's handlers. */
static void ensure_helper(void)
{
    if (atomic_load(&g_helper_running))
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256u << 10);
    pthread_t th;
#if defined(SNAPPROF_SANITIZER_BUILD)
    /* Through the sanitizer's interceptor, which must know every thread
     * that runs instrumented code. */
    int rc = pthread_create(&th, &attr, helper_main, NULL);
#else
    int rc = snapprof__real_pthread_create(&th, &attr, helper_main, NULL);
#endif
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        atomic_store(&g_helper_running, 1);
    } else {
        snapprof__preload_warn("cannot start the helper thread (%s): no profile on SIGINT/SIGTERM, "
                               "no --duration",
                               strerror(rc));
    }
}

void snapprof__preload_finish_on_signal(int signo)
{
    /* getpid() is a system call: right in vfork() children too, which
     * share our memory and must leave it alone. */
    if (!atomic_load(&g_tracking) || !atomic_load(&g_helper_running) ||
        atomic_load(&g_owner_pid) != getpid())
        return;
    /* The writer needs the preload lock: if this very thread holds it,
     * waiting would never end. */
    if (atomic_load(&g_lock_owner) == gettid_())
        return;
    int expected = 0;
    atomic_compare_exchange_strong(&g_finish_signal, &expected, signo > 0 ? signo : -1);
    atomic_fetch_or(&g_cmd, CMD_FINISH);
    futex_wake(&g_cmd);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!atomic_load(&g_finish_done)) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= 10)
            break; /* a thread this signal stopped holds what the writer needs */
        futex_wait(&g_finish_done, 0, 100000000u);
    }
}

/* ------------------------------------------------------------------------ */
/* Start, stop, flush                                                       */
/* ------------------------------------------------------------------------ */

/* Where output i goes when its own path cannot be written: $TMPDIR when it
 * is a writable directory, else /tmp; "snapprof.<pid>.pb.gz" for a single
 * output, "snapprof.<pid>.<i>.<ext>" among several (two of one format must
 * not meet there). */
static void fallback_path(const char *dir, const snapprof__preload_config_t *cfg, unsigned i,
                          char *out, size_t size)
{
    const char *t = dir ? dir : getenv("TMPDIR");
    struct stat st;
    if (!t || t[0] != '/' || stat(t, &st) != 0 || !S_ISDIR(st.st_mode) ||
        access(t, W_OK | X_OK) != 0)
        t = "/tmp";
    const char *ext = snapprof__format_ext(cfg->outputs[i].format);
    if (cfg->n_outputs > 1)
        snprintf(out, size, "%s/snapprof.%d.%u%s", t, (int)getpid(), i, ext);
    else
        snprintf(out, size, "%s/snapprof.%d%s", t, (int)getpid(), ext);
}

/* Makes the builder of one output. */
static int create_builder(const snapprof__output_spec_t *o, snapprof_builder_t **out)
{
    switch (o->format) {
    case SNAPPROF__FORMAT_FOLDED:
        return snapprof_folded_builder_create(o->path, out);
    case SNAPPROF__FORMAT_TRACE:
        return snapprof_trace_builder_create(o->path, out);
    default:
        return snapprof_pprof_builder_create(o->path, out);
    }
}

/* A signal for sampling that the program does not use: real-time signals
 * from the top, where libraries rarely look; one we already share (from an
 * earlier profile) and the program left alone comes first. */
static int pick_free_signal(void)
{
    for (int s = SIGRTMAX - 1; s >= SIGRTMIN + 2; s--)
        if (snapprof__preload_signals_is_managed(s) &&
            !snapprof__preload_signals_has_program_handler(s))
            return s;
    for (int s = SIGRTMAX - 1; s >= SIGRTMIN + 2; s--) {
        struct sigaction cur;
        snapprof__preload_signals_passthrough(1);
        int rc = sigaction(s, NULL, &cur);
        snapprof__preload_signals_passthrough(0);
        if (rc == 0 && !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL)
            return s;
    }
    return 0;
}

#define WHY(...) snprintf(why, why_size, __VA_ARGS__)

static int start_locked(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                        size_t why_size)
{
    if (g.profiler) {
        WHY("a profile is already running (writing %s)", g.cfg.outputs[0].path);
        return -EALREADY;
    }
    if (cfg->n_outputs < 1 || cfg->n_outputs > SNAPPROF_OUTPUTS_MAX) {
        WHY("no output to write");
        return -EINVAL;
    }
    pthread_once(&g_exit_key_once, make_exit_key);
    /* Static, not on the stack: the config holds a few pages of paths, and
     * this may run on a small thread stack (in the child of a fork() made
     * there). Always under g_lock. */
    static snapprof__preload_config_t c;
    c = *cfg;
    for (unsigned i = 0; i < c.n_outputs; i++) {
        snapprof__output_spec_t *o = &c.outputs[i];
        if (!o->family[0])
            memcpy(o->family, o->path, sizeof o->family);
        int err = snapprof__check_output(o->path);
        if (err == 0)
            continue;
        if (!(flags & SNAPPROF_PRELOAD_FALLBACK)) {
            WHY("cannot write %s: %s", o->path, strerror(err));
            return -err;
        }
        char alt[PATH_MAX];
        fallback_path(NULL, &c, i, alt, sizeof alt);
        snapprof__preload_warn("cannot write the profile to %s (%s); writing %s instead", o->path,
                               strerror(err), alt);
        snprintf(o->path, sizeof o->path, "%s", alt);
    }

    char name[32], alt_name[32];
    if (snapprof__preload_signals_has_program_handler(c.signo)) {
        if (c.signal_explicit) {
            WHY("%s already has a handler in this program; not profiling (choose another "
                "signal with SNAPPROF_SIGNAL or --signal)",
                snapprof__signal_name(c.signo, name, sizeof name));
            return -EBUSY;
        }
        int alt = pick_free_signal();
        if (!alt) {
            WHY("%s already has a handler in this program and no free signal is left; not "
                "profiling",
                snapprof__signal_name(c.signo, name, sizeof name));
            return -EBUSY;
        }
        snapprof__preload_warn(
            "%s already has a handler in this program; sampling with %s instead (set "
            "SNAPPROF_SIGNAL to choose)",
            snapprof__signal_name(c.signo, name, sizeof name),
            snapprof__signal_name(alt, alt_name, sizeof alt_name));
        c.signo = alt;
    }
    int rc = snapprof__preload_signals_manage(c.signo, 0);
    if (rc != 0) {
        WHY("cannot share %s with the program: %s",
            snapprof__signal_name(c.signo, name, sizeof name), strerror(-rc));
        return rc;
    }
    snapprof__preload_signals_manage(SIGINT, 1);
    snapprof__preload_signals_manage(SIGTERM, 1);
    snapprof__preload_signals_manage(SIGHUP, 1);

    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000000u / c.hz;
    params.mode = c.wall ? SNAPPROF_MODE_WALL : SNAPPROF_MODE_CPU;
    params.signal = c.signo;
    params.trigger = (snapprof_trigger_t)c.trigger;
    params.wall_blocked = (snapprof_wall_blocked_t)c.wall_blocked;
    snapprof_profiler_t *p;
    rc = snapprof_profiler_create(&params, NULL, 0, &p);
    if (rc != 0) {
        WHY("cannot create the profiler: %s", snapprof_strerror(rc));
        return rc;
    }
    snapprof_builder_t *builders[SNAPPROF_OUTPUTS_MAX] = {NULL};
    for (unsigned i = 0; i < c.n_outputs; i++) {
        rc = create_builder(&c.outputs[i], &builders[i]);
        if (rc == 0)
            rc = snapprof_profiler_add_builder(p, builders[i]);
        if (rc != 0) {
            snapprof_profiler_destroy(p);
            WHY("cannot write %s: %s", c.outputs[i].path, snapprof_strerror(rc));
            return rc;
        }
    }

    g.profiler = p;
    memcpy(g.builders, builders, sizeof g.builders);
    g.cfg = c;
    g.signo = c.signo;
    g.owner = getpid();
    g.threads_seen = g.threads_failed = 0;
    atomic_store(&g_threads_skipped, 0);
    atomic_store(&g_signo, c.signo);
    /* From here on new threads register themselves; they wait on the lock
     * until the scan below is done, then find themselves or are added. */
    atomic_store(&g_tracking, 1);
    register_self();
    if (c.signo != SIGURG)
        snapprof__preload_signals_manage(SIGURG, 1); /* the scan stops threads with it */
    atomic_store(&g_rescan_due, 0);
    register_existing(c.signo);

    snapprof__preload_signals_passthrough(1);
    rc = snapprof_profiler_start(p);
    snapprof__preload_signals_passthrough(0);
    if (rc != 0) {
        atomic_store(&g_tracking, 0);
        while (g.n_reg > 0)
            reg_drop(g.n_reg - 1);
        snapprof_profiler_destroy(p);
        g.profiler = NULL;
        WHY("cannot start sampling: %s", snapprof_strerror(rc));
        return rc;
    }
    g.start_time = time(NULL);
    g.start_mono = snapprof__monotonic_ns();
    atomic_store(&g_owner_pid, (int)getpid());
    ensure_helper();
    atomic_store(&g_deadline, c.duration_ns ? g.start_mono + c.duration_ns : 0);
    if (c.duration_ns || atomic_load(&g_rescan_due)) {
        atomic_fetch_or(&g_cmd, CMD_WAKE);
        futex_wake(&g_cmd);
    }
    return 0;
}

int snapprof__preload_start(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                            size_t why_size)
{
    lock();
    int rc = start_locked(cfg, flags, why, why_size);
    unlock();
    return rc;
}

/* Tells a fresh write from a file that was there before: a builder
 * replaces its file by renaming a new one over it, so a written output has
 * a new inode. */
typedef struct file_id {
    dev_t dev;
    ino_t ino;
    int exists;
} file_id_t;

static file_id_t file_id(const char *path)
{
    struct stat st;
    file_id_t id = {0, 0, 0};
    if (stat(path, &st) == 0)
        id = (file_id_t){st.st_dev, st.st_ino, 1};
    return id;
}

static int rewritten(const char *path, const file_id_t *before)
{
    file_id_t now = file_id(path);
    return now.exists && (!before->exists || now.dev != before->dev || now.ino != before->ino);
}

/* After a failed write: moves each output that was not written to a
 * fallback directory ($TMPDIR or /tmp, then /tmp, then /var/tmp) and
 * writes again, until every output is somewhere. Nothing collected is
 * lost: the builders keep their data after a failed write. Returns how
 * many outputs are still nowhere. */
static unsigned write_fallbacks(snapprof_profiler_t *p, output_result_t *res, unsigned failed)
{
    const char *dirs[] = {NULL, "/tmp", "/var/tmp"};
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0] && failed > 0; d++) {
        static char alt[SNAPPROF_OUTPUTS_MAX][PATH_MAX];
        file_id_t before[SNAPPROF_OUTPUTS_MAX];
        int moved[SNAPPROF_OUTPUTS_MAX] = {0}, any = 0;
        for (unsigned i = 0; i < g.cfg.n_outputs; i++) {
            if (res[i].written[0])
                continue;
            fallback_path(dirs[d], &g.cfg, i, alt[i], sizeof alt[i]);
            before[i] = file_id(alt[i]);
            moved[i] = snapprof_builder_set_path(g.builders[i], alt[i]) == 0;
            any |= moved[i];
        }
        if (!any)
            continue;
        /* Every builder writes again; those already written, where they
         * are. */
        snapprof_profiler_flush(p);
        for (unsigned i = 0; i < g.cfg.n_outputs; i++) {
            if (moved[i] && rewritten(alt[i], &before[i])) {
                snprintf(res[i].written, sizeof res[i].written, "%s", alt[i]);
                failed--;
            }
        }
    }
    return failed;
}

int snapprof__preload_stop(const char *note)
{
    lock();
    if (!g.profiler) {
        unlock();
        return 0;
    }
    if (g.owner != getpid()) {
        /* Inherited through a fork() that bypassed our wrapper, or in a
         * vfork() child sharing the parent's memory: the parent writes
         * this profile, and nothing here may change. */
        unlock();
        return 0;
    }
    atomic_store(&g_tracking, 0);
    atomic_store(&g_deadline, 0);
    snapprof_profiler_t *p = g.profiler;
    static output_result_t res[SNAPPROF_OUTPUTS_MAX]; /* under g_lock */
    file_id_t before[SNAPPROF_OUTPUTS_MAX];
    for (unsigned i = 0; i < g.cfg.n_outputs; i++)
        before[i] = file_id(g.cfg.outputs[i].path);
    int rc = snapprof_profiler_stop(p);
    unsigned failed = 0;
    for (unsigned i = 0; i < g.cfg.n_outputs; i++) {
        /* The profiler reports the first error of all its builders: which
         * ones failed, their files say. */
        const char *want = g.cfg.outputs[i].path;
        int ok = rc == 0 || rewritten(want, &before[i]);
        snprintf(res[i].written, sizeof res[i].written, "%s", ok ? want : "");
        res[i].err = ok ? 0 : rc;
        failed += !ok;
    }
    if (failed > 0) {
        unsigned left = write_fallbacks(p, res, failed);
        rc = left > 0 ? rc : 0;
        for (unsigned i = 0; i < g.cfg.n_outputs; i++) {
            if (res[i].err == 0)
                continue;
            /* Under `snapprof record` the summary says it; alone, we do. */
            if (res[i].written[0] && !g.cfg.summary_dir[0])
                snapprof__preload_warn("could not write the profile to %s (%s); it is in %s "
                                       "instead",
                                       g.cfg.outputs[i].path, snapprof_strerror(res[i].err),
                                       res[i].written);
            else if (!res[i].written[0])
                snapprof__preload_warn("could not write the profile to %s (%s), nor to a "
                                       "temporary directory",
                                       g.cfg.outputs[i].path, snapprof_strerror(res[i].err));
        }
    }
    snapprof_stats_t st;
    memset(&st, 0, sizeof st);
    snapprof_profiler_get_stats(p, &st);
    write_summary(note, res, &st);
    while (g.n_reg > 0)
        reg_drop(g.n_reg - 1);
    free(g.reg);
    g.reg = NULL;
    g.cap_reg = 0;
    snapprof_profiler_destroy(p);
    g.profiler = NULL;
    memset(g.builders, 0, sizeof g.builders);
    atomic_store(&g_owner_pid, 0);
    unlock();
    return rc;
}

int snapprof__preload_flush(void)
{
    lock();
    int rc = g.profiler && g.owner == getpid() ? snapprof_profiler_flush(g.profiler) : 0;
    unlock();
    return rc;
}

void snapprof__preload_get_state(snapprof__preload_state_t *out)
{
    memset(out, 0, sizeof *out);
    lock();
    if (g.profiler && g.owner == getpid()) {
        snapprof_stats_t st;
        out->running = atomic_load(&g_tracking);
        out->start_time = g.start_time;
        snprintf(out->path, sizeof out->path, "%s", g.cfg.outputs[0].path);
        if (snapprof_profiler_get_stats(g.profiler, &st) == 0)
            out->samples = st.samples;
    }
    unlock();
}

/* ------------------------------------------------------------------------ */
/* fork                                                                     */
/* ------------------------------------------------------------------------ */

/* Every output of a child of the first profiled process is FILE.<pid>.
 * Returns 0, or -1 (with a warning) when a path gets too long. */
static int child_paths(snapprof__preload_config_t *cfg, int pid)
{
    for (unsigned i = 0; i < cfg->n_outputs; i++) {
        snapprof__output_spec_t *o = &cfg->outputs[i];
        if (path_fmt(o->path, sizeof o->path, "%s.%d", o->family, pid) != 0) {
            snapprof__preload_warn("not profiling process %d: %s.%d is too long a path", pid,
                                   o->family, pid);
            return -1;
        }
    }
    return 0;
}

void snapprof__preload_fork_prepare(void)
{
    /* Holding the lock across fork() means the child never inherits a
     * registry or profile half-way through a change. Bounded, in case fork()
     * is called from a signal handler that interrupted the holder. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 2;
    g_fork_locked = pthread_mutex_timedlock(&g_lock, &ts) == 0;
    g_fork_tracking = atomic_load(&g_tracking) && g.profiler && g.owner == getpid();
}

void snapprof__preload_fork_parent(void)
{
    if (g_fork_locked)
        pthread_mutex_unlock(&g_lock);
}

/* For every fork() that runs atfork handlers, also one that bypasses our
 * wrapper: the helper thread did not come along. */
static void atfork_child(void)
{
    atomic_store(&g_helper_running, 0);
    atomic_store(&g_tracking, 0);
}

void snapprof__preload_fork_child(void)
{
    threads_fork_child();
    pthread_mutex_init(&g_lock, NULL);
    atomic_store(&g_lock_owner, 0);
    atomic_store(&g_helper_running, 0);
    atomic_store(&g_cmd, 0);
    atomic_store(&g_deadline, 0);
    int was_running = g_fork_tracking;
    atomic_store(&g_tracking, 0);
    if (!g.profiler)
        return;
    /* The parent's profile belongs to the parent. Its memory stays as it
     * is (this process may well exec() soon); the child starts afresh. */
    if (g_n_orphans + 2 <= sizeof g_orphans / sizeof g_orphans[0]) {
        g_orphans[g_n_orphans++] = g.profiler;
        g_orphans[g_n_orphans++] = g.reg;
    }
    /* Static rather than on the stack of whatever thread forked; only
     * this thread runs in the child now. */
    static snapprof__preload_config_t cfg;
    cfg = g.cfg;
    memset(&g, 0, sizeof g);
    if (!was_running || !cfg.follow_fork)
        return;
    char why[256];
    if (child_paths(&cfg, (int)getpid()) != 0)
        return;
    lock();
    int rc = start_locked(&cfg, SNAPPROF_PRELOAD_FALLBACK, why, sizeof why);
    unlock();
    if (rc != 0)
        snapprof__preload_warn("not profiling child %d: %s", (int)getpid(), why);
}

/* ------------------------------------------------------------------------ */
/* Loading and exit                                                         */
/* ------------------------------------------------------------------------ */

static void on_exit_(void)
{
    snapprof__preload_stop("exit");
}

/* Reads the environment into cfg (preload_config.c). Returns 1 when it
 * asks for a profile. */
static int config_from_env(snapprof__preload_config_t *cfg)
{
    return snapprof__config_from_env(cfg, getenv, snapprof__preload_warn);
}

__attribute__((constructor)) static void preload_init(void)
{
    snapprof__preload_signals_init();
    atexit(on_exit_);
    pthread_atfork(NULL, NULL, atfork_child);
    static snapprof__preload_config_t cfg; /* a few pages: not on the stack */
    if (!config_from_env(&cfg))
        return;
    if (getuid() != geteuid())
        return; /* as gperftools: never for set-user-ID programs */
    /* The first profiled process writes FILE; processes it starts, and
     * what they exec, write FILE.<pid>. */
    char me[32];
    snprintf(me, sizeof me, "%d", (int)getpid());
    const char *root = getenv(SNAPPROF_ENV_ROOT_PID);
    if (!root || !*root) {
        setenv(SNAPPROF_ENV_ROOT_PID, me, 1);
    } else if (strcmp(root, me) != 0) {
        if (!cfg.follow_fork || child_paths(&cfg, (int)getpid()) != 0)
            return;
    }
    char why[512];
    if (snapprof__preload_start(&cfg, SNAPPROF_PRELOAD_FALLBACK, why, sizeof why) != 0)
        snapprof__preload_warn("not profiling: %s", why);
}
