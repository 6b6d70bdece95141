/* What the files of the whole-process profile share: preload_process.c
 * (the state, the helper thread, start/stop/flush, fork, loading),
 * preload_threads.c (the thread registry) and preload_summary.c (the
 * summary for `snapprof record`). Private to those three files; the names
 * are those the code had when it was one file, and stay hidden in the
 * library (C_VISIBILITY_PRESET hidden). */
#ifndef SNAPPROF_PRELOAD_PROCESS_H
#define SNAPPROF_PRELOAD_PROCESS_H

#include "common/clock.h"
#include "common/clock.h"
#include "preload/preload.h"

#include <snapprof/snapprof.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
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
} preload_state_t;
extern preload_state_t g;

/* What became of each output at stop. */
typedef struct output_result {
    char written[PATH_MAX]; /* where it is; "" when nowhere */
    int err;                /* why it is not where asked, else 0 */
} output_result_t;

extern atomic_int g_tracking;         /* new threads register themselves */
extern atomic_int g_signo;            /* the sampling signal while tracking */
extern atomic_uint g_threads_skipped; /* threads that block the sampling signal */
extern atomic_int g_lock_owner;       /* tid holding g_lock, for signal context */

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

#endif
