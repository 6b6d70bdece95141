/* What the files of the whole-process profile share: preload_process.c
 * (the preload lock, the flags read without it, the real pthread_create),
 * preload_main.c (loading: the constructor and the exit handler, which
 * nothing calls), preload_control.c (start/stop/flush; it alone holds the
 * profile's state), preload_helper.c (requests to the helper thread),
 * preload_fork.c (fork), preload_threads.c (the thread registry; it alone
 * holds the registry), preload_summary.c (the summary for `snapprof
 * record`) and the files below.
 *
 * Calls run one way, down these layers; no file calls one of a layer
 * above its own, and no files call each other in a circle
 * (tests/check_layers.py, SUBLAYERS, checks both):
 *   1. the entry points: preload_main.c, preload_interpose.c (the
 *      interposed calls), gperftools_compat.c; nothing of ours calls them;
 *   2. preload_fork.c (a child's profile starts through the control code);
 *   3. preload_control.c;
 *   4. preload_signals.c;
 *   5. preload_crash.c, preload_loop.c, preload_serve.c, preload_summary.c;
 *   6. preload_config.c, preload_helper.c, preload_held.c,
 *      preload_threads.c, preload_unnamed.c;
 *   7. preload_process.c and file_names.c, which call nothing of ours.
 * What a lower file needs of a higher one is handed down: the control
 * code tells the held files which config runs and the crash handler where
 * the summary directory is kept, and passes the helper thread its loop;
 * the helper thread posts nothing back, its requests are carried out by
 * that loop of preload_control.c's. Private to the library: every name
 * with external linkage is snapprof__preload_*, and all stay hidden
 * (C_VISIBILITY_PRESET hidden). */
#ifndef SNAPPROF_PRELOAD_PROCESS_H
#define SNAPPROF_PRELOAD_PROCESS_H

#include "common/clock.h"
#include "preload/preload.h"

#include <snapprof/snapprof.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The preload lock and the flags read without it (preload_process.c)       */
/* ------------------------------------------------------------------------ */

/* Take and leave the preload lock, noting its holder (for signal context,
 * snapprof__preload_lock_holder()). */
void snapprof__preload_lock(void);
void snapprof__preload_unlock(void);
/* snapprof__preload_lock(), for a caller that knows its tid (one system
 * call less). */
void snapprof__preload_lock_as(pid_t self);
/* One try at the lock; on success notes self as its holder. Returns 1 when
 * taken, else 0. */
int snapprof__preload_trylock_as(pid_t self);
/* The tid holding the preload lock, else 0. Async-signal-safe. */
pid_t snapprof__preload_lock_holder(void);
/* The lock held across fork() (preload_fork.c): taken with a bound on the
 * wait and no holder noted (returns 1 when taken), left in the parent, and
 * made anew, free, in the child. */
int snapprof__preload_fork_lock(const struct timespec *abstime);
void snapprof__preload_fork_unlock(void);
void snapprof__preload_fork_lock_reset(void);

/* Set while this process's profile runs: new threads register themselves.
 * Written under the preload lock (and in a fork child); read anywhere,
 * signal handlers included. */
extern atomic_int snapprof__preload_tracking_on;
/* The process whose profile runs, else 0 (a fork child or a vfork child
 * sees its parent's until it looks at getpid()). */
extern atomic_int snapprof__preload_owner_pid;

/* Calls from this thread to sigaction() and signal() see and change the
 * real dispositions (preload_signals.c) while the count is nonzero: on
 * adds 1, else takes 1 away, around snapprof calls that install its
 * handler. A per-thread count, kept here, at the bottom, so that the
 * thread registry and the control code need not call the signal code. */
void snapprof__preload_signals_passthrough(int on);
/* 1 while this thread's count is nonzero. Async-signal-safe. */
int snapprof__preload_signals_passing_through(void);

static inline pid_t gettid_(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* A thread made with the real pthread_create (the next definition after
 * ours, found once), not our wrapper: our pthread_create's own call, and
 * the library's threads (not registered). Returns 0 or an errno value
 * (ENOSYS: there is no next pthread_create). */
int snapprof__preload_real_pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                                          void *(*start)(void *), void *arg);

/* The next definition of name after ours (dlsym(RTLD_NEXT, name)), looked
 * up on the first call and kept in *slot, a static void * of the caller's,
 * one per name; later calls are one atomic load. NULL when there is none
 * (looked up again at the next call). The lookup takes the loader's lock
 * and may allocate: a first call must not be made in a signal handler.
 * Defined in preload_real.c, which the sanitizers do not instrument, as
 * the real_* lookups below that use it must not be. */
void *snapprof__preload_next_fn(void **slot, const char *name);

/* The real sigaction() (the next definition after ours: libc's), for the
 * signal code (preload_signals.c) and the crash handler (preload_crash.c),
 * which both keep the program's view apart from the real dispositions.
 * Found with dlsym() on the first call, which must not be made in a signal
 * handler (snapprof__preload_signals_init() makes it when the library
 * loads); later calls are one atomic load, async-signal-safe. NULL when
 * there is no next sigaction. Defined in preload_real.c, which the
 * sanitizers do not instrument (the TSan runtime calls sigaction() before
 * instrumented code may run). */
typedef int (*snapprof__preload_sigaction_fn)(int, const struct sigaction *, struct sigaction *);
snapprof__preload_sigaction_fn snapprof__preload_real_sigaction(void);

/* The real syscall() and prctl() (libc's), behind our interposed ones
 * (preload_interpose.c), which every system call the library makes
 * through syscall() passes, signal handlers' and the seccomp probe's
 * child's included. Found with dlsym() on the first call, as sigaction()
 * is; the constructor makes it (preload_main.c), so that no later call
 * resolves; then one atomic load, async-signal-safe. NULL when there is
 * no next definition. */
typedef long (*snapprof__preload_syscall_fn)(long, ...);
snapprof__preload_syscall_fn snapprof__preload_real_syscall(void);
typedef int (*snapprof__preload_prctl_fn)(int, ...);
snapprof__preload_prctl_fn snapprof__preload_real_prctl(void);

/* snprintf for paths: returns 0, or -1 when the result did not fit (then
 * out holds a cut, still terminated, string that must not be used). */
int snapprof__preload_path_fmt(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------ */
/* The profile (preload_control.c, which alone holds its state)             */
/* ------------------------------------------------------------------------ */

/* The running profile of this process; guarded by the preload lock. */
typedef struct snapprof__preload_profile {
    snapprof__preload_config_t cfg; /* as started (output: the path in use) */
    snapprof_profiler_t *profiler;
    snapprof_builder_t *builders[SNAPPROF_OUTPUTS_MAX]; /* one per output, owned by the profiler */
    pid_t owner;                                        /* the process that started it */
    int signo;
    time_t start_time;
    uint64_t start_mono;
    struct snapprof__unnamed *unnamed; /* under `snapprof record`: owned by its builder */
} snapprof__preload_profile_t;

/* What became of each output at stop. */
typedef struct output_result {
    char written[PATH_MAX]; /* where it is; "" when nowhere */
    int err;                /* why it is not where asked, else 0 */
    int no_samples;         /* not written: a process other than the first one
                               profiled that took no sample writes no file */
} output_result_t;

/* snapprof__preload_start() with the preload lock held; the fork child
 * starts its own profile through it. */
int snapprof__preload_start_locked(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                                   size_t why_size);

/* The config of the profile this process runs (started here, not
 * inherited through fork()), else NULL. Under the preload lock. */
const snapprof__preload_config_t *snapprof__preload_config_here(void);

/* In the child of our fork() wrapper, on its only thread: when a profile
 * was inherited, copies its config to cfg and its profiler to *profiler
 * (the parent's: never written nor freed here), gives back the parent's
 * held files and forgets the profile. Returns 1 then, else 0. */
int snapprof__preload_profile_fork_child(snapprof__preload_config_t *cfg, void **profiler);

/* In the child of any fork(), before anything else: the parent's profile
 * is not this process's (what ProfilerGetCurrentState() reports). */
void snapprof__preload_state_fork_child(void);

/* ------------------------------------------------------------------------ */
/* Rolling profiles (preload_loop.c; cfg->loop_ns)                          */
/* ------------------------------------------------------------------------ */

/* Before the profiler starts, under the preload lock: attaches the first
 * interval's builders (one per output of cfg, which must stay as it is
 * while the profile runs). Returns 0 (an output whose builder cannot be
 * made has no interval files, said once). */
int snapprof__preload_loop_attach(snapprof_profiler_t *p, const snapprof__preload_config_t *cfg);
/* Once the profiler runs: starts the thread that ends an interval every
 * cfg->loop_ns. Returns 0 or a negative errno (one interval, said once). */
int snapprof__preload_loop_start(void);
/* At stop, before the profiler stops: ends the thread (waiting for an
 * interval being written). */
void snapprof__preload_loop_quit(void);
/* After the profiler stopped (which wrote the last interval), or when it
 * did not start: detaches and frees the interval builders. */
void snapprof__preload_loop_detach(void);
/* In the child of any fork(): the parent's thread and builders are not
 * this process's. */
void snapprof__preload_loop_fork_child(void);

/* ------------------------------------------------------------------------ */
/* Profiles on request (preload_serve.c; `snapprof record --http`)           */
/* ------------------------------------------------------------------------ */

/* Once the profiler runs, under the preload lock: in the process record
 * started, when record passed a control channel, starts the thread that
 * answers its requests for profiles. heap: the profile's own heap builder
 * (SNAPPROF_HEAP), whose snapshots /debug/pprof/heap serves, or NULL; a
 * flight recorder of the last flight_ns is attached to p when flight_ns is
 * not 0 (SNAPPROF_FLIGHT). Once per process; nothing happens otherwise. */
void snapprof__preload_serve_start(snapprof_profiler_t *p, snapprof_builder_t *heap,
                                   uint64_t flight_ns);
/* At stop, before the profiler stops: answers the requests in flight with
 * what they collected so far, tells record the profile ended, and lets
 * the thread end (it touches the profiler no more). */
void snapprof__preload_serve_stop(void);
/* In the child of any fork(): the parent's thread and channel are not
 * this process's. */
void snapprof__preload_serve_fork_child(void);

/* ------------------------------------------------------------------------ */
/* Requests to the helper thread (preload_helper.c)                         */
/* ------------------------------------------------------------------------ */

/* The helper thread blocks every signal and is never sampled. Signal
 * handlers, _exit and ProfilerFlush post requests to it in one word (the
 * posting from a handler is async-signal-safe); preload_control.c runs the
 * thread and carries them out. This file calls nothing of the control
 * code nor of fork. */
enum {
    SNAPPROF__HELPER_FINISH = 1u, /* stop and write the profile (a signal, _exit) */
    SNAPPROF__HELPER_WAKE = 2u,   /* look at the deadline and the rescan again */
    SNAPPROF__HELPER_FLUSH = 4u,  /* write the profile so far */
};

/* At start: starts the helper once per process, running serve, sets the
 * deadline at which it stops the profile (CLOCK_MONOTONIC ns; 0: none)
 * and wakes it when it has a deadline or threads to scan again. */
void snapprof__preload_helper_arm(uint64_t deadline, void *(*serve)(void *));
/* At stop, and on the helper when the deadline has come: no deadline. */
void snapprof__preload_helper_disarm(void);
/* snapprof__preload_flush()'s request from a program thread: when the
 * helper runs and this is not it, asks it to flush and waits; returns 1
 * with its result in *rc. Returns 0 when the caller must flush itself. */
int snapprof__preload_helper_flush(int *rc);

/* On the helper thread (serve): names it and notes its tid, once. */
void snapprof__preload_helper_began(void);
/* Takes the requests posted since the last call (SNAPPROF__HELPER_*). */
unsigned snapprof__preload_helper_take(void);
/* The generation of the flush asked last; after the flush, answers it with
 * its result. */
unsigned snapprof__preload_helper_flush_asked(void);
void snapprof__preload_helper_flush_served(unsigned gen, int rc);
/* The signal a finish was asked for (> 0), or -1 for _exit; after the stop,
 * tells the waiting threads. */
int snapprof__preload_helper_finish_signo(void);
void snapprof__preload_helper_finish_served(void);
/* The deadline set by snapprof__preload_helper_arm() (0: none). */
uint64_t snapprof__preload_helper_deadline(void);
/* From our pthread_exit() on the process's first thread: notes that the
 * program's main thread is ending and wakes the helper, which then looks
 * often for the end of the program's last thread (only then can it end
 * that way); async-signal-safe. */
void snapprof__preload_main_exiting(void);
/* Whether snapprof__preload_main_exiting() was called in this process. */
int snapprof__preload_main_exited(void);
/* Waits for a request, at most timeout_ns (0: no limit). */
void snapprof__preload_helper_wait(uint64_t timeout_ns);

/* Starts fn on a new thread with every signal blocked (so it is never a
 * sampling target and never runs the program's handlers), not through
 * our own pthread_create (it is not registered). Returns 0 or an errno
 * value. */
int snapprof__preload_start_quiet_thread(pthread_t *th, const pthread_attr_t *attr,
                                         void *(*fn)(void *));
/* Futex wake-all on word, and a wait while *word == expected, at most
 * timeout_ns (0: no limit). */
void snapprof__preload_futex_wake(atomic_uint *word);
void snapprof__preload_futex_wait(atomic_uint *word, unsigned expected, uint64_t timeout_ns);
/* In the child of any fork(): the helper thread did not come along. */
void snapprof__preload_helper_gone(void);
/* In the child of our fork() wrapper: the helper is gone and has no
 * command and no deadline. */
void snapprof__preload_helper_fork_child(void);

/* ------------------------------------------------------------------------ */
/* fork (preload_fork.c)                                                    */
/* ------------------------------------------------------------------------ */

/* Names every output of cfg, a process other than the first one profiled,
 * with pid (file_names.h; FILE_<pid> under CPUPROFILE) and marks cfg as a
 * child's. Returns 0, or -1 (with a warning) when a path gets too long. */
int snapprof__preload_child_paths(snapprof__preload_config_t *cfg, int pid);
/* pthread_atfork's child handler, for every fork() that runs atfork
 * handlers, also one that bypasses our wrapper. */
void snapprof__preload_atfork_child(void);

/* ------------------------------------------------------------------------ */
/* Thread registry (preload_threads.c, which alone holds its state)         */
/* ------------------------------------------------------------------------ */

/* Once per process, at the first start: the key whose destructor removes
 * an exiting self-registered thread. */
void snapprof__preload_threads_init(void);
/* At start, under the preload lock: the registry adds threads to p from
 * now on, scans with signo, and its counts start at 0. */
void snapprof__preload_threads_begin(snapprof_profiler_t *p, int signo);
/* The running profile's sampling signal, else 0. Takes the preload lock. */
int snapprof__preload_threads_signo(void);
/* At stop, or a start that failed, under the preload lock: every thread
 * leaves the profile (whose profiler is still alive) and the registry adds
 * none any more; with free_entries, its memory is given back. */
void snapprof__preload_threads_end(int free_entries);
/* In a forked child, on its only thread: forgets that thread's tid. */
void snapprof__preload_threads_fork_child(void);
/* In a forked child whose parent ran a profile: forgets the parent's
 * registry and returns its memory (the parent's: never freed here). */
void *snapprof__preload_threads_forget(void);
/* For the summary: threads registered, failed and skipped (they block the
 * sampling signal). Under the preload lock. */
void snapprof__preload_threads_counts(uint64_t *seen, uint64_t *failed, unsigned *skipped);

/* Set when a scanned thread did not answer its handshake: the helper scans
 * again every RETRY_NS. */
int snapprof__preload_rescan_due(void);
#define RETRY_NS 20000000u

/* Registers the calling thread and adds it to the profile. */
void snapprof__preload_register_self(void);

/* At start, under the preload lock: registers the threads that existed
 * before. */
void snapprof__preload_register_existing(int signo);

/* From the helper, without the preload lock: threads that did not answer
 * before, and those made without our pthread_create. */
void snapprof__preload_rescan_threads(void);
/* 1 when the program's first thread is gone and only snapprof's threads
 * are left (preload_threads.c): the helper then ends the process as the
 * last program thread would have. */
int snapprof__preload_only_ours_left(void);

/* ------------------------------------------------------------------------ */
/* Summary (preload_summary.c)                                              */
/* ------------------------------------------------------------------------ */

/* Writes "<summary_dir>/<pid>.summary" for `snapprof record` about the
 * profile p. Under the preload lock. */
void snapprof__preload_write_summary(const snapprof__preload_profile_t *p, const char *note,
                                     const output_result_t *res, const snapprof_stats_t *st);

/* ------------------------------------------------------------------------ */
/* Unnamed leaves (preload_unnamed.c)                                       */
/* ------------------------------------------------------------------------ */

/* A module file holding at least this share of the samples' self time in
 * frames without a name is reported, at most SNAPPROF__UNNAMED_MAX of them. */
#define SNAPPROF__UNNAMED_NOTE 0.05
#define SNAPPROF__UNNAMED_MAX 4

typedef struct snapprof__unnamed snapprof__unnamed_t;
typedef struct snapprof__unnamed_module {
    const char *path; /* the module cache's: lives as long as the process */
    double share;     /* of the weight of all samples */
} snapprof__unnamed_module_t;

/* A builder that counts the samples whose innermost frame has no name, per
 * module file; *state stays readable until the builder is destroyed. */
int snapprof__unnamed_builder_create(snapprof__unnamed_t **state, snapprof_builder_t **out);
/* The modules at or above SNAPPROF__UNNAMED_NOTE at the last completion,
 * biggest share first. */
size_t snapprof__unnamed_modules(const snapprof__unnamed_t *u,
                                 const snapprof__unnamed_module_t **out);

/* ------------------------------------------------------------------------ */
/* Files held for processes that drop privileges (preload_held.c)          */
/* ------------------------------------------------------------------------ */

/* At stop (and in a fork child, for the parent's): closes the held files
 * of the profile whose config is cfg; with remove_unused, one this process
 * created and nothing was written to is removed. */
void snapprof__preload_release_files(const snapprof__preload_config_t *cfg, int remove_unused);
/* Output i of cfg went to a fallback file (res->written) instead of its
 * path: copies it into the held file at the path, removes the fallback and
 * makes res say the path. Returns 0, or a negative errno (res unchanged). */
int snapprof__preload_held_output(const snapprof__preload_config_t *cfg, unsigned i,
                                  output_result_t *res);
/* The held summary file to write, or NULL. */
FILE *snapprof__preload_held_summary(void);
/* Under the preload lock, from the control code: cfg is the config of the
 * profile this process now runs (it stays where it is, unchanged, until
 * the next call), whose files a change of credentials holds; NULL when the
 * profile stops, or fails to start, and in a fork child that forgets its
 * parent's. */
void snapprof__preload_held_running(const snapprof__preload_config_t *cfg);

#endif
