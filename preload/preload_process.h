/* What the files of the whole-process profile share: preload_process.c
 * (the state, loading), preload_control.c (start/stop/flush),
 * preload_helper.c (the helper thread), preload_fork.c (fork),
 * preload_threads.c (the thread registry) and preload_summary.c (the
 * summary for `snapprof record`). Private to those files; the g_ and
 * unprefixed names are those the code had when it was one file, the
 * functions shared since it was split are snapprof__preload_*, and all stay
 * hidden in the library (C_VISIBILITY_PRESET hidden). */
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
/* State (preload_process.c)                                                */
/* ------------------------------------------------------------------------ */

/* One registered thread. The entry owns one reference on the token. */
typedef struct reg_entry {
    pid_t tid;
    pthread_t pth;
    int has_pth;   /* pth is known (the thread registered itself) */
    int from_scan; /* found in /proc/self/task, registered by tid */
    snapprof_thread_t *token;
} reg_entry_t;

/* Everything below is guarded by g_lock. */
extern pthread_mutex_t g_lock;
typedef struct preload_state {
    snapprof__preload_config_t cfg; /* as started (output: the path in use) */
    snapprof_profiler_t *profiler;
    snapprof_builder_t *builders[SNAPPROF_OUTPUTS_MAX]; /* one per output, owned by the profiler */
    pid_t owner;                                        /* the process that started it */
    int signo;
    time_t start_time;
    uint64_t start_mono;
    reg_entry_t *reg;
    size_t n_reg, cap_reg;
    uint64_t threads_seen, threads_failed;
    struct snapprof__unnamed *unnamed; /* under `snapprof record`: owned by its builder */
} preload_state_t;
extern preload_state_t g;

/* What became of each output at stop. */
typedef struct output_result {
    char written[PATH_MAX]; /* where it is; "" when nowhere */
    int err;                /* why it is not where asked, else 0 */
    int no_samples;         /* not written: a process other than the first one
                               profiled that took no sample writes no file */
} output_result_t;

extern atomic_int g_tracking;         /* new threads register themselves */
extern atomic_int g_signo;            /* the sampling signal while tracking */
extern atomic_uint g_threads_skipped; /* threads that block the sampling signal */
extern atomic_int g_lock_owner;       /* tid holding g_lock, for signal context */
extern atomic_int g_owner_pid;        /* the process whose profile runs, else 0 */

/* Take and leave g_lock, noting its holder in g_lock_owner. */
void lock(void);
void unlock(void);
/* lock(), for a caller that knows its tid (one system call less). */
void lock_as(pid_t self);

static inline pid_t gettid_(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* snprintf for paths: returns 0, or -1 when the result did not fit (then
 * out holds a cut, still terminated, string that must not be used). */
int path_fmt(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------ */
/* Start (preload_control.c)                                                */
/* ------------------------------------------------------------------------ */

/* snapprof__preload_start() with g_lock held; the fork child starts its
 * own profile through it. */
int snapprof__preload_start_locked(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                                   size_t why_size);

/* ------------------------------------------------------------------------ */
/* The helper thread (preload_helper.c)                                     */
/* ------------------------------------------------------------------------ */

/* At start: starts the helper once per process, sets the deadline at which
 * it stops the profile (CLOCK_MONOTONIC ns; 0: none) and wakes it when it
 * has a deadline or threads to scan again. */
void snapprof__preload_helper_arm(uint64_t deadline);
/* snapprof__preload_flush() on this thread: symbolizes and writes here.
 * The helper calls it for the others (preload_helper.c), so that the
 * profiler's work never lands in the program's profile. */
int snapprof__preload_flush_here(void);

/* In the child of any fork(), before anything else: the parent's profile
 * is not this process's (what ProfilerGetCurrentState() reports). */
void snapprof__preload_state_fork_child(void);

/* At stop: no deadline. */
void snapprof__preload_helper_disarm(void);
/* In the child of any fork(): the helper thread did not come along. */
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
/* Thread registry (preload_threads.c)                                      */
/* ------------------------------------------------------------------------ */

/* The key whose destructor removes an exiting self-registered thread;
 * made once, by pthread_once(&g_exit_key_once, make_exit_key). */
extern pthread_key_t g_exit_key;
extern pthread_once_t g_exit_key_once;
void make_exit_key(void);
/* In a forked child, on its only thread: forgets that thread's tid. */
void threads_fork_child(void);

/* Set when a scanned thread did not answer its handshake: the helper scans
 * again every RETRY_NS. */
extern atomic_int g_rescan_due;
#define RETRY_NS 20000000u

/* Removes registry entry i from the profile and releases its token. */
void reg_drop(size_t i);

/* Registers the calling thread and adds it to the profile. */
void register_self(void);

/* At start, under g_lock: registers the threads that existed before. */
void register_existing(int signo);

/* From the helper, without g_lock: threads that did not answer before, and
 * those made without our pthread_create. */
void rescan_threads(void);

/* ------------------------------------------------------------------------ */
/* Summary (preload_summary.c)                                              */
/* ------------------------------------------------------------------------ */

/* Writes "<summary_dir>/<pid>.summary" for `snapprof record`. Under
 * g_lock. */
void write_summary(const char *note, const output_result_t *res, const snapprof_stats_t *st);

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

/* At stop (and in a fork child, for the parent's): closes the held files;
 * with remove_unused, one this process created and nothing was written to
 * is removed. */
void snapprof__preload_release_files(int remove_unused);
/* Output i went to a fallback file (res->written) instead of its path:
 * copies it into the held file at the path, removes the fallback and makes
 * res say the path. Returns 0, or a negative errno (res unchanged). */
int snapprof__preload_held_output(unsigned i, output_result_t *res);
/* The held summary file to write, or NULL. */
FILE *snapprof__preload_held_summary(void);

#endif
