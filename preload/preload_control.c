/* Start, stop and flush of the whole-process profile: the profiler and
 * its builders from a config, and at stop every output written somewhere
 * (a fallback directory when its own path fails) and the summary. This
 * file alone holds the profile's state (g); it runs the helper thread's
 * loop, which carries out the requests posted to it (preload_helper.c). */
#include "preload/file_names.h"
#include "preload/preload_process.h"

#include <snapprof/heap.h>
#include <snapprof/heap_profile.h>
#include <snapprof/jit.h>
#include <snapprof/profile_builder.h>
#include <snapprof/snapprof.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* snapprof_params_t.short_threads unless SNAPPROF_SHORT_THREADS says: 0,
 * none, for now. With 1 (every thread armed as it starts), bench_churn.sh
 * met issue 25's targets (91-95 % of the profile on the threads' function
 * at 1 kHz, 0.92-0.95 of the threads a second), but record_fds_budget_cpu
 * and _5000_cpu each failed once in about seven full runs with it (the
 * program's last open() got one number higher under record). The cause is
 * found: the sampling thread's files opened for a moment (a handshake
 * thread's /proc stat at each tick, a module's ELF file for its CFI). The
 * thread that opens them with an fd table of its own (common/fd_private.h)
 * fixes it (50 of 50 runs of the two), but it is off by default for its
 * stalls under load; so is this, until both are on together. */
#define SHORT_THREADS_DEFAULT 0u

/* The running profile of this process: under the preload lock. */
static snapprof__preload_profile_t g;
/* g.cfg.arm_demand, for the helper thread's loop without the lock. */

/* The helper thread's loop (below). */
static void *helper_main(void *arg);

/* Where output i goes when its own path cannot be written: $TMPDIR when it
 * is a writable directory, else /tmp; named as file_names.h says,
 * "snapprof.<pid>.pb.gz" for a single output, "snapprof-<i>.<pid>.<ext>"
 * among several (two of one format must not meet there). */
static void fallback_path(const char *dir, const snapprof__preload_config_t *cfg, unsigned i,
                          char *out, size_t size)
{
    const char *t = dir ? dir : getenv("TMPDIR");
    struct stat st;
    if (!t || t[0] != '/' || stat(t, &st) != 0 || !S_ISDIR(st.st_mode) ||
        access(t, W_OK | X_OK) != 0)
        t = "/tmp";
    if (snapprof__name_fallback(t, i, cfg->n_outputs, snapprof__format_ext(cfg->outputs[i].format),
                                (int)getpid(), out, size) != 0)
        snapprof__name_fallback("/tmp", i, cfg->n_outputs,
                                snapprof__format_ext(cfg->outputs[i].format), (int)getpid(), out,
                                size);
}

/* A heap or peak builder, told the profile's interval. */
static int create_heap_builder(const snapprof__output_spec_t *o, size_t interval,
                               snapprof_builder_t **out)
{
    int rc = o->format == SNAPPROF__FORMAT_HEAP_PEAK
                 ? snapprof_heap_peak_builder_create(o->path, out)
                 : snapprof_heap_builder_create(o->path, out);
    if (rc == 0 && (rc = snapprof_heap_builder_set_interval(*out, interval)) != 0) {
        snapprof_builder_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* Makes the builder of one output. */
static int create_builder(const snapprof__output_spec_t *o, size_t heap_interval,
                          snapprof_builder_t **out)
{
    switch (o->format) {
    case SNAPPROF__FORMAT_HEAP:
    case SNAPPROF__FORMAT_HEAP_PEAK:
        return create_heap_builder(o, heap_interval ? heap_interval : 1, out);
    case SNAPPROF__FORMAT_FOLDED:
        return snapprof_folded_builder_create(o->path, out);
    case SNAPPROF__FORMAT_TRACE:
        return snapprof_trace_builder_create(o->path, out);
    case SNAPPROF__FORMAT_GPERFTOOLS:
        return snapprof_gperftools_builder_create(o->path, out);
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

/* What ProfilerGetCurrentState() reads, kept apart from the preload lock
 * (which a stop or flush holds while it writes) and from the profiler's
 * counters (whose snapshot computes histogram quantiles): the samples as a
 * builder of ours counts them on delivery, and the name, start and owner
 * of the running profile under a lock of its own, set at start and stop. */
static atomic_int g_sample_count; /* an int: gperftools' tests read it as one */
static pthread_mutex_t g_state_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int running; /* this process's profile: cleared in every fork child */
    time_t start_time;
    char path[PATH_MAX];
} g_state;

static int count_sample(void *user_data, const snapprof_sample_t *sample)
{
    (void)user_data;
    /* A remainder is CPU time no sample placed, not a sample. */
    if (!(sample->flags & SNAPPROF_SAMPLE_REMAINDER) &&
        atomic_load_explicit(&g_sample_count, memory_order_relaxed) < INT_MAX)
        atomic_fetch_add_explicit(&g_sample_count, 1, memory_order_relaxed);
    return 0;
}

static const snapprof_builder_ops_t k_count_ops = {
    .version = 1, /* receives time samples only */
    .name = "sample-count",
    .xOnSample = count_sample,
};

static void publish_state(int running, time_t start_time, const char *path)
{
    pthread_mutex_lock(&g_state_lock);
    g_state.running = running;
    g_state.start_time = start_time;
    snprintf(g_state.path, sizeof g_state.path, "%s", path);
    pthread_mutex_unlock(&g_state_lock);
}

#define WHY(...) snprintf(why, why_size, __VA_ARGS__)

static int start_locked(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                        size_t why_size);

int snapprof__preload_start_locked(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                                   size_t why_size)
{
    /* What the start allocates (the helper thread's creation, the
     * profiler's own) is ours, never the program's, on whatever thread it
     * runs (a constructor's, ProfilerStart()'s caller's, a fork child's). */
    snapprof_heap_ignore_begin();
    int rc = start_locked(cfg, flags, why, why_size);
    snapprof_heap_ignore_end();
    return rc;
}

static int start_locked(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                        size_t why_size)
{
    if (g.profiler) {
        WHY("a profile is already running (writing %s)", g.cfg.outputs[0].path);
        return -EALREADY;
    }
    if ((cfg->n_outputs < 1 && !cfg->arm_demand) || cfg->n_outputs > SNAPPROF_OUTPUTS_MAX) {
        WHY("no output to write");
        return -EINVAL;
    }
    snapprof__preload_threads_init();
    /* Static, not on the stack: the config holds a few pages of paths, and
     * this may run on a small thread stack (in the child of a fork() made
     * there). Always under the preload lock. */
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
    /* SNAPPROF_CRASH=off: crashes are the program's alone. The crash
     * handler reads the summary directory where the running profile's is
     * kept: g.cfg (this profile's from g.cfg = c below, before it runs; g
     * lives as long as the process). */
    if (!c.crash_off)
        snapprof__preload_crash_arm(g.cfg.summary_dir);

    /* Process-wide, and harmless to set again (a profile restarted, a
     * forked child): the perf map is read afresh with them. */
    for (unsigned i = 0; i < c.n_jit_rules; i++) {
        rc = snapprof_jit_perf_map_set_layout(c.jit_rules[i].prefix, &c.jit_rules[i].layout);
        if (rc != 0)
            snapprof__preload_warn("ignoring the JIT layout for '%s': %s", c.jit_rules[i].prefix,
                                   snapprof_strerror(rc));
    }

    /* Go ends a program with a bare exit_group system call (main.main
     * returning, os.Exit), which runs no exit handler: such a run wrote no
     * profile at all. A cgo program (the only Go program the preload can
     * load into) exports crosscall2 (runtime/cgo); unless
     * SNAPPROF_CHECKPOINT says otherwise, it gets checkpoints, and loses
     * at most the last second or so (preload_control.c, checkpoint_here). */
    if (!c.checkpoint_set && dlsym(RTLD_DEFAULT, "crosscall2") != NULL)
        c.checkpoint_ns = 1000000000u;

    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000000u / c.hz;
    params.mode = c.wall ? SNAPPROF_MODE_WALL : SNAPPROF_MODE_CPU;
    params.signal = c.signo;
    params.trigger = (snapprof_trigger_t)c.trigger;
    params.wall_blocked = (snapprof_wall_blocked_t)c.wall_blocked;
    /* SNAPPROF_HEAP=1: allocations sampled too (libsnapprof-heap.so, when
     * preloaded, reports them); 0 unless asked for. */
    params.heap_interval = c.heap_interval;
    /* Kernel time on the stacks that entered the kernel (snapprof.h,
     * kernel_share); off unless asked for. */
    const char *kernel = getenv("SNAPPROF_KERNEL");
    params.kernel_share = kernel && strcmp(kernel, "1") == 0;
    /* Python frames in place of CPython's evaluation loop (snapprof.h,
     * python); off unless asked for. */
    const char *python = getenv("SNAPPROF_PYTHON");
    params.python = python && strcmp(python, "1") == 0;
    /* Threads armed as they start, one in N (snapprof.h, short_threads),
     * or sampled by a process-wide timer until armed ("timer":
     * unarmed_timer). One in SHORT_THREADS_DEFAULT unless told: a
     * thread-per-task program's threads are in its profile, at 20-50 us
     * of CPU time a thread (README, "Short-lived threads"). */
    params.short_threads = SHORT_THREADS_DEFAULT;
    const char *shorts = getenv("SNAPPROF_SHORT_THREADS");
    if (shorts && strcmp(shorts, "timer") == 0) {
        params.short_threads = 0;
        params.unarmed_timer = 1;
    } else if (shorts && *shorts) {
        char *end;
        errno = 0;
        unsigned long n = strtoul(shorts, &end, 10);
        if (errno != 0 || *end != '\0' || n > 1000000 || shorts[0] == '-')
            snapprof__preload_warn(
                "ignoring SNAPPROF_SHORT_THREADS=%s: want a count, 0 to 1000000, "
                "or timer",
                shorts);
        else
            params.short_threads = (unsigned)n;
    }
    /* SNAPPROF_ARM=demand (`snapprof record --http` without -o): armed
     * only while a request's profile is taken (snapprof.h, arm_on_demand),
     * which the process-wide timer, made for the whole run, cannot be. */
    params.arm_on_demand = c.arm_demand;
    if (c.arm_demand && params.unarmed_timer) {
        snapprof__preload_warn("ignoring SNAPPROF_SHORT_THREADS=timer with SNAPPROF_ARM=demand");
        params.unarmed_timer = 0;
    }
    snapprof__preload_libunwind_init();
    snapprof_profiler_t *p;
    /* SNAPPROF_LINES: which separate debug files give lines, not only
     * names (the default: not the system libraries'). */
    snapprof_symbols_set_lines((snapprof_lines_t)c.lines);
    rc = snapprof_profiler_create(&params, NULL, 0, &p);
    if (rc != 0) {
        WHY("cannot create the profiler: %s", snapprof_strerror(rc));
        return rc;
    }
    snapprof_builder_t *builders[SNAPPROF_OUTPUTS_MAX] = {NULL};
    for (unsigned i = 0; i < c.n_outputs; i++) {
        rc = create_builder(&c.outputs[i], c.heap_interval, &builders[i]);
        if (rc == 0)
            rc = snapprof_profiler_add_builder(p, builders[i]);
        if (rc != 0) {
            snapprof_profiler_destroy(p);
            WHY("cannot write %s: %s", c.outputs[i].path, snapprof_strerror(rc));
            return rc;
        }
    }

    /* The samples ProfilerGetCurrentState() reports; without it the
     * profile runs as well and reports none. */
    snapprof_builder_t *cb;
    atomic_store(&g_sample_count, 0);
    if (snapprof_builder_create(&k_count_ops, NULL, &cb) == 0)
        (void)snapprof_profiler_add_builder(p, cb); /* destroyed by the profiler */

    /* The summary's note on stripped modules; without it the profile
     * runs as well. */
    snapprof__unnamed_t *unnamed = NULL;
    if (c.summary_dir[0]) {
        snapprof_builder_t *ub;
        if (snapprof__unnamed_builder_create(&unnamed, &ub) != 0)
            unnamed = NULL;
        else if (snapprof_profiler_add_builder(p, ub) != 0)
            unnamed = NULL; /* destroyed by the profiler */
    }

    g.profiler = p;
    g.unnamed = unnamed;
    memcpy(g.builders, builders, sizeof g.builders);
    g.cfg = c;
    g.signo = c.signo;
    g.owner = getpid();
    snapprof__preload_held_running(&g.cfg);
    if (c.loop_ns) /* rolling profiles: the first interval from the start */
        snapprof__preload_loop_attach(p, &g.cfg);
    snapprof__preload_threads_begin(p, c.signo);
    /* From here on new threads register themselves; they wait on the lock
     * until the scan below is done, then find themselves or are added. */
    atomic_store(&snapprof__preload_tracking_on, 1);
    snapprof__preload_register_self();
    if (c.signo != SIGURG)
        snapprof__preload_signals_manage(SIGURG, 1); /* the scan stops threads with it */
    snapprof__preload_register_existing(c.signo);

    snapprof__preload_signals_passthrough(1);
    rc = snapprof_profiler_start(p);
    snapprof__preload_signals_passthrough(0);
    if (rc != 0) {
        atomic_store(&snapprof__preload_tracking_on, 0);
        snapprof__preload_threads_end(0);
        snapprof__preload_loop_detach();
        snapprof_profiler_destroy(p);
        g.profiler = NULL;
        g.unnamed = NULL;
        snapprof__preload_held_running(NULL);
        WHY("cannot start sampling: %s", snapprof_strerror(rc));
        return rc;
    }
    g.start_time = time(NULL);
    g.start_mono = snapprof__monotonic_ns();
    publish_state(1, g.start_time, c.outputs[0].path);
    if (c.loop_ns)
        snapprof__preload_loop_start();
    snapprof_builder_t *heap = NULL; /* the run's heap profile, for /debug/pprof/heap */
    for (unsigned i = 0; i < c.n_outputs && !heap; i++)
        if (c.outputs[i].format == SNAPPROF__FORMAT_HEAP)
            heap = builders[i];
    snapprof__preload_serve_start(p, heap, c.flight_ns);
    atomic_store(&snapprof__preload_owner_pid, (int)getpid());
    snapprof__preload_helper_arm(c.duration_ns ? g.start_mono + c.duration_ns : 0, helper_main);
    return 0;
}

int snapprof__preload_start(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                            size_t why_size)
{
    snapprof__preload_lock();
    int rc = snapprof__preload_start_locked(cfg, flags, why, why_size);
    snapprof__preload_unlock();
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

/* Each output's file as it is before a write (its identity, for
 * rewritten()). */
static void outputs_before(file_id_t *before)
{
    for (unsigned i = 0; i < g.cfg.n_outputs; i++)
        before[i] = file_id(g.cfg.outputs[i].path);
}

/* Each output's result after a write of them all that returned rc (the
 * stop's, a checkpoint's): written where asked, unless rc says a write
 * failed and that output's file was not rewritten since before (the
 * profiler reports the first error of all its builders: which ones
 * failed, their files say). Returns how many failed. */
static unsigned output_results(int rc, const file_id_t *before, output_result_t *res)
{
    unsigned failed = 0;
    for (unsigned i = 0; i < g.cfg.n_outputs; i++) {
        const char *want = g.cfg.outputs[i].path;
        int ok = rc == 0 || rewritten(want, &before[i]);
        snprintf(res[i].written, sizeof res[i].written, "%s", ok ? want : "");
        res[i].err = ok ? 0 : rc;
        res[i].no_samples = 0;
        failed += !ok;
    }
    return failed;
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
    snapprof__preload_lock();
    if (!g.profiler) {
        snapprof__preload_unlock();
        return 0;
    }
    if (g.owner != getpid()) {
        /* Inherited through a fork() that bypassed our wrapper, or in a
         * vfork() child sharing the parent's memory: the parent writes
         * this profile, and nothing here may change. */
        snapprof__preload_unlock();
        return 0;
    }
    atomic_store(&snapprof__preload_tracking_on, 0);
    publish_state(0, 0, "");
    snapprof__preload_helper_disarm();
    snapprof_profiler_t *p = g.profiler;
    static output_result_t res[SNAPPROF_OUTPUTS_MAX]; /* under the preload lock */
    file_id_t before[SNAPPROF_OUTPUTS_MAX];
    outputs_before(before);
    snapprof__preload_serve_stop();
    snapprof__preload_loop_quit();
    int rc = snapprof_profiler_stop(p);
    snapprof__preload_loop_detach(); /* the last interval, written by the stop */
    snapprof_stats_t st;
    memset(&st, 0, sizeof st);
    snapprof_profiler_get_stats(p, &st);
    /* A process other than the first one profiled that took no sample (a
     * shell's child that only exec'd, a short tool) leaves no file: a
     * shell script would leave dozens of empty ones. The file was written
     * by the stop (the samples are final only then); one at that path from
     * an earlier run, a recycled pid's, would pass for this run's, so it
     * goes too. The summary counts the process. The program's own files
     * are always written: what was asked for exists. A process that took
     * heap samples (SNAPPROF_HEAP) but no CPU sample keeps its files: its
     * allocations are what the heap profile is for. */
    int empty = g.cfg.child && st.samples == 0 && st.heap_samples == 0;
    if (empty) {
        for (unsigned i = 0; i < g.cfg.n_outputs; i++) {
            unlink(g.cfg.outputs[i].path);
            res[i] = (output_result_t){.written = "", .err = 0, .no_samples = 1};
        }
        rc = 0;
    }
    unsigned failed = empty ? 0 : output_results(rc, before, res);
    if (failed > 0) {
        unsigned left = write_fallbacks(p, res, failed);
        rc = left > 0 ? rc : 0;
        for (unsigned i = 0; i < g.cfg.n_outputs; i++) {
            if (res[i].err == 0)
                continue;
            /* A process that dropped its privileges: into the file it
             * opened at start, at the path asked for (preload_held.c). */
            if (snapprof__preload_held_output(&g.cfg, i, &res[i]) == 0)
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
    if (failed > 0)
        snapprof_profiler_get_stats(p, &st); /* the fallbacks' writes counted */
    snapprof__preload_write_summary(&g, note, res, &st);
    snapprof__preload_release_files(&g.cfg, 1);
    snapprof__preload_threads_end(1);
    snapprof_profiler_destroy(p);
    g.profiler = NULL;
    g.unnamed = NULL;
    snapprof__preload_held_running(NULL);
    memset(g.builders, 0, sizeof g.builders);
    atomic_store(&snapprof__preload_owner_pid, 0);
    snapprof__preload_unlock();
    return rc;
}

/* snapprof__preload_flush() on this thread: symbolizes and writes here.
 * The helper thread calls it for the others (helper_main), so that the
 * profiler's work never lands in the program's profile. */
static int flush_here(void)
{
    snapprof__preload_lock();
    int rc = g.profiler && g.owner == getpid() ? snapprof_profiler_flush(g.profiler) : 0;
    snapprof__preload_unlock();
    return rc;
}

/* A checkpoint: the profile so far, written where the end's will be, and
 * the summary `snapprof record` reads, saying "checkpoint". A program that
 * ends without running exit handlers (Go returns from main and os.Exit()s
 * with a bare exit_group system call; _exit()) leaves that profile and
 * summary behind instead of none; an end that does run them writes both
 * again. Runs on the helper thread. Each builder writes through a
 * temporary file and a rename (builder_output.c), so an end in the middle
 * of a checkpoint leaves the one before it whole. */
static void checkpoint_here(void)
{
    snapprof__preload_lock();
    if (g.profiler && g.owner == getpid()) {
        static output_result_t res[SNAPPROF_OUTPUTS_MAX]; /* under the preload lock */
        file_id_t before[SNAPPROF_OUTPUTS_MAX];
        outputs_before(before);
        output_results(snapprof_profiler_flush(g.profiler), before, res);
        snapprof_stats_t st;
        memset(&st, 0, sizeof st);
        snapprof_profiler_get_stats(g.profiler, &st);
        snapprof__preload_write_summary(&g, "checkpoint", res, &st);
    }
    snapprof__preload_unlock();
}

/* When the next checkpoint is due: 0.1 s after the start, then after
 * twice the previous gap, up to SNAPPROF_CHECKPOINT's, so that a short run
 * is caught too and a long one writes only every so often. 0: none. */
static uint64_t next_checkpoint(uint64_t last, uint64_t gap_ns)
{
    uint64_t every = g.cfg.checkpoint_ns;
    if (!every || !g.profiler)
        return 0;
    uint64_t gap = gap_ns ? gap_ns * 2 : 100000000u;
    return last + (gap < every ? gap : every);
}

const snapprof__preload_config_t *snapprof__preload_config_here(void)
{
    return g.profiler && g.owner == getpid() ? &g.cfg : NULL;
}

int snapprof__preload_profile_fork_child(snapprof__preload_config_t *cfg, void **profiler)
{
    if (!g.profiler)
        return 0;
    *profiler = g.profiler;
    *cfg = g.cfg;
    snapprof__preload_release_files(&g.cfg, 0); /* the parent's */
    snapprof__preload_held_running(NULL);
    memset(&g, 0, sizeof g);
    return 1;
}

void snapprof__preload_state_fork_child(void)
{
    pthread_mutex_init(&g_state_lock, NULL);
    g_state.running = 0;
    snapprof__preload_loop_fork_child();
    snapprof__preload_serve_fork_child();
}

void snapprof__preload_get_state(snapprof__preload_state_t *out)
{
    out->running = 0;
    out->path[0] = '\0';
    out->samples = 0;
    out->start_time = 0;
    /* Always: gperftools' test takes it before any profile starts. */
    out->sample_counter = (const volatile int *)&g_sample_count;
    pthread_mutex_lock(&g_state_lock);
    if (g_state.running) {
        out->running = 1;
        out->start_time = g_state.start_time;
        size_t n = strnlen(g_state.path, sizeof out->path - 1);
        memcpy(out->path, g_state.path, n);
        out->path[n] = '\0';
        out->samples = (uint64_t)atomic_load_explicit(&g_sample_count, memory_order_relaxed);
    }
    pthread_mutex_unlock(&g_state_lock);
}

/* ------------------------------------------------------------------------ */
/* The helper thread                                                        */
/* ------------------------------------------------------------------------ */

int snapprof__preload_flush(void)
{
    if (!atomic_load(&snapprof__preload_tracking_on) ||
        atomic_load(&snapprof__preload_owner_pid) != getpid())
        return 0;
    int rc;
    if (snapprof__preload_helper_flush(&rc))
        return rc;
    return flush_here();
}

static void stop_at_deadline(void)
{
    snapprof__preload_lock();
    int due = g.profiler && g.owner == getpid();
    snapprof__preload_unlock();
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

/* How often the helper looks whether only snapprof's threads are left
 * (snapprof__preload_only_ours_left(): an open, read and close of /proc,
 * about 90 us of the program's CPU time a look on these VMs). That can
 * happen only once the program's first thread has ended, which it does
 * through pthread_exit() (ours tells the helper): until then once a
 * second, for a first thread that ends by a raw exit system call, so that
 * a program under an always-armed profile (--flight) is not woken ten
 * times a second for nothing (issue 28: 0.9 ms of CPU time a second, 1 %
 * of a server's at 0.1 CPU); after it, every 100 ms, so that the program
 * ends soon after its last thread. */
#define END_CHECK_NS 1000000000u
#define END_CHECK_MAIN_GONE_NS 100000000u

/* The helper thread (started by snapprof__preload_helper_arm()): carries
 * out the requests posted to it (preload_helper.c), stops the profile at
 * its deadline, and scans for threads when a scan is due. */
static void *helper_main(void *arg)
{
    (void)arg;
    /* What the helper allocates (writing profiles, scanning threads) is
     * ours, never the program's: not in its heap profile. */
    snapprof_heap_ignore_begin();
    snapprof__preload_helper_began();
    uint64_t next_rescan = 0, next_end_check = 0;
    int main_gone = 0;
    /* Checkpoints of the profile that started at cp_start. */
    uint64_t cp_start = 0, last_cp = 0, gap_cp = 0, next_cp = 0;
    for (;;) {
        unsigned cmd = snapprof__preload_helper_take();
        /* A flush first: a finish in the same word ends the loop's turn. */
        if (cmd & SNAPPROF__HELPER_FLUSH) {
            unsigned gen = snapprof__preload_helper_flush_asked();
            snapprof__preload_helper_flush_served(gen, flush_here());
        }
        if (cmd & SNAPPROF__HELPER_FINISH) {
            char name[32];
            int signo = snapprof__preload_helper_finish_signo();
            snapprof__preload_stop(signo > 0 ? snapprof__signal_name(signo, name, sizeof name)
                                             : "_exit");
            snapprof__preload_helper_finish_served();
            continue;
        }
        uint64_t deadline = snapprof__preload_helper_deadline(), now = snapprof__monotonic_ns();
        if (deadline && now >= deadline) {
            snapprof__preload_helper_disarm();
            stop_at_deadline();
            continue;
        }
        uint64_t wake = deadline;
        if (!main_gone && snapprof__preload_main_exited()) {
            main_gone = 1; /* woken by it: look soon, as the thread is ending */
            next_end_check = now + END_CHECK_MAIN_GONE_NS;
        }
        if (now >= next_end_check) {
            if (snapprof__preload_only_ours_left()) {
                /* The program's last thread has ended: what glibc would
                 * have done then (exit(0) on the last thread), after the
                 * profile is written. Test: record_main_pthread_exit. */
                snapprof__preload_stop("exit");
                exit(0);
            }
            next_end_check =
                snapprof__monotonic_ns() + (main_gone ? END_CHECK_MAIN_GONE_NS : END_CHECK_NS);
        }
        if (!wake || next_end_check < wake)
            wake = next_end_check;
        if (next_cp && now >= next_cp) {
            checkpoint_here();
            gap_cp = next_cp - last_cp;
            last_cp = snapprof__monotonic_ns(); /* the next gap counts from the write's end */
        }
        snapprof__preload_lock();
        if (g.start_mono != cp_start) { /* a new profile */
            cp_start = last_cp = g.start_mono;
            gap_cp = 0;
        }
        next_cp = next_checkpoint(last_cp, gap_cp);
        snapprof__preload_unlock();
        if (next_cp && (!wake || next_cp < wake))
            wake = next_cp;
        uint64_t every = RESCAN_NS ? RESCAN_NS : snapprof__preload_rescan_due() ? RETRY_NS : 0;
        if (every && atomic_load(&snapprof__preload_tracking_on)) {
            if (now >= next_rescan) {
                snapprof__preload_rescan_threads();
                next_rescan = snapprof__monotonic_ns() + every;
            }
            if (!wake || next_rescan < wake)
                wake = next_rescan;
        }
        snapprof__preload_helper_wait(wake ? (wake > now ? wake - now : 1) : 0);
    }
    return NULL;
}
