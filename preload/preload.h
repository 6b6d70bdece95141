/* The whole-process profiler inside libsnapprof-preload.so: one profile that
 * samples every thread of the process, started from the environment when
 * the library loads or through the gperftools API, written at exit, on
 * SIGINT/SIGTERM/SIGHUP, and by each profiled child of fork() to its own
 * file. Internal to the preload library.
 *
 * Files: preload_process.c (the preload lock, the flags read without it),
 * preload_main.c (loading and exit), preload_control.c (start, stop,
 * flush; the profile's state and the helper thread's loop),
 * preload_helper.c (requests to the helper thread), preload_fork.c (fork),
 * preload_threads.c (the thread registry), preload_summary.c (the summary
 * for `snapprof record`), preload_process.h (what those share, and which
 * calls which), preload_interpose.c (pthread_create, pthread_setname_np,
 * fork and _exit interposed), preload_signals.c (signals shared with the
 * program), preload_crash.c (the profile written when the program
 * crashes), preload_held.c (files held across setuid(), and libunwind's
 * pipe), gperftools_compat.c (the gperftools API), preload_config.c
 * (settings).
 *
 * Lock order: the preload lock (preload_process.c), then snapprof's own
 * locks. Nothing here holds the preload lock while it waits for the
 * program. */
#ifndef SNAPPROF_PRELOAD_H
#define SNAPPROF_PRELOAD_H

#include "preload/preload_config.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SNAPPROF_PRELOAD_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* The process-wide profile (preload_process.c and its neighbours)          */
/* ------------------------------------------------------------------------ */

/* Start flags. */
#define SNAPPROF_PRELOAD_FALLBACK 0x1u /* unwritable output: use a /tmp path, say so */

/* Starts the profile. Returns 0; -EALREADY when one runs; or another
 * negative error, with a one-line reason in why. Any thread. */
int snapprof__preload_start(const snapprof__preload_config_t *cfg, unsigned flags, char *why,
                            size_t why_size);

/* Stops the profile and writes it (to a fallback path when the output
 * cannot be written, saying where), then the summary for `snapprof record`.
 * Returns 0, or the error of a write that failed everywhere; 0 when nothing
 * runs. note says why it stopped ("exit", "SIGINT", ...). Any thread. */
int snapprof__preload_stop(const char *note);

/* Writes the profile so far; sampling goes on. No-op when nothing runs.
 * The helper thread does the work (it is never sampled) while the caller
 * waits, so that symbolizing and compressing never land in the profile as
 * the program's. */
int snapprof__preload_flush(void);

typedef struct snapprof__preload_state {
    int running;
    time_t start_time;
    char path[1024];                    /* cut where gperftools' ProfilerState cuts it */
    uint64_t samples;                   /* delivered so far, remainders not counted */
    const volatile int *sample_counter; /* where samples are counted (0 at each start) */
} snapprof__preload_state_t;
/* The running profile of this process, cheaply (no stats snapshot, not
 * the preload lock): for ProfilerGetCurrentState(), which programs call
 * in loops. */
void snapprof__preload_get_state(snapprof__preload_state_t *out);

/* Nonzero while threads created now must register themselves. Cheap: the
 * pthread_create wrapper asks on every call. */
int snapprof__preload_tracking(void);

/* Runs first on every thread made through pthread_create while tracking,
 * before the program's start routine: registers the thread (not one that
 * blocks the sampling signal, such as snapprof's own). */
void snapprof__preload_thread_started(void);

/* The program named a thread: later samples carry the new name. */
void snapprof__preload_thread_renamed(pthread_t thread, const char *name);

/* fork() wrapper hooks: before the real fork, and after it in the parent
 * and the child. The child continues the profile with its own file or
 * stops, per SNAPPROF_FORK. */
void snapprof__preload_fork_prepare(void);
void snapprof__preload_fork_parent(void);
void snapprof__preload_fork_child(void);

/* Called when the process is about to end without exit handlers: from the
 * dispatcher of a signal whose default action ends it (the program left it
 * at SIG_DFL; signo > 0), or from _exit (signo 0). Asks the helper thread
 * to stop and write the profile, and waits for it, at most a few seconds (a
 * thread the signal interrupted may hold what the writer needs). Does
 * nothing unless this process owns a running profile. Async-signal-safe. */
void snapprof__preload_finish_on_signal(int signo);

/* snapprof__preload_finish_on_signal() with a bound of timeout_ns of wall
 * time on the wait, for a crashing thread (preload_crash.c). Returns what
 * became of the request. Async-signal-safe. */
enum {
    SNAPPROF__FINISH_NOTHING = -1,  /* no profile of this process to write, or this
                                       thread is the writer */
    SNAPPROF__FINISH_DONE = 0,      /* the writer is done (the summary says how it went) */
    SNAPPROF__FINISH_TIMED_OUT = 1, /* not done within timeout_ns */
    SNAPPROF__FINISH_OWN_LOCK = 2,  /* this thread holds the preload lock the writer needs */
};
int snapprof__preload_finish_within(int signo, uint64_t timeout_ns);

/* Moves fd, one of ours, to the library's own range at the top of the fd
 * numbers (common/fds.h). Returns its new number (fd closed), or fd itself
 * when there is no room up there (preload_held.c). */
int snapprof__preload_fd_high(int fd);

/* Makes libunwind's first call (the CFI engine's, unw_create_addr_space)
 * now, with the pipe it makes and keeps moved up by our pipe2()
 * (preload_held.c): the program's fds then get the numbers they get
 * without us. Before the profiler is created. */
void snapprof__preload_libunwind_init(void);

/* Writes one line "snapprof: ...\n" to stderr with write(2).
 * Async-signal-safe when the format has no floating point. */
void snapprof__preload_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------------------ */
/* Signals shared with the program (preload_signals.c)                      */
/* ------------------------------------------------------------------------ */

/* Resolves the real sigaction and the address range of libsnapprof itself.
 * Called once from the constructor, before any signal is managed. */
void snapprof__preload_signals_init(void);

/* Makes signo ours to share: installs the dispatcher that runs the
 * program's disposition for it, and from now on shows the program its own
 * view in sigaction()/signal(). For the sampling signal this is done before
 * snapprof installs its handler, which then passes every signal that is not
 * a sample request on to the dispatcher. A handler the program already has
 * becomes its disposition when adopt_handler is set; otherwise the call
 * returns -EBUSY and changes nothing. Managing a signal twice is a no-op.
 * Returns 0 or a negative errno. */
int snapprof__preload_signals_manage(int signo, int adopt_handler);

/* 1 when signo is managed (snapprof__preload_signals_manage() took it). */
int snapprof__preload_signals_is_managed(int signo);

/* 1 when the program (not snapprof) has a handler for signo right now. */
int snapprof__preload_signals_has_program_handler(int signo);

/* 1 when addr lies in libsnapprof's code (its calls into what we interpose
 * are not the program's). Async-signal-safe. */
int snapprof__preload_is_snapprof_code(uintptr_t addr);

/* ------------------------------------------------------------------------ */
/* Crashes (preload_crash.c)                                                */
/* ------------------------------------------------------------------------ */

/* Takes SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT into the program's view
 * (sigaction() and signal() show and set the program's own disposition of
 * them) and, for each one the program leaves at SIG_DFL, installs the crash
 * handler: on a crash it has the profile written by the helper thread,
 * waits for that at most SNAPPROF__CRASH_WAIT_NS (preload_config.h) of wall time, then lets
 * the default action end the process as if it had never run. A handler of
 * the program's, or SIG_IGN, is installed for real instead, and the crash
 * handler steps aside until the program sets SIG_DFL again. Called at
 * every start; once per process is enough, later calls do nothing but
 * note summary_dir. Does nothing else in a sanitizer build (the sanitizer
 * owns the fault signals).
 *
 * summary_dir: where the running profile's summary directory for
 * `snapprof record` is kept ("" when none), read (not copied) when a crash
 * comes, to leave "<pid>.crash" there when the profile could not be
 * written; the caller keeps it for the life of the process, its contents
 * fixed while a profile runs. */
void snapprof__preload_crash_arm(const char *summary_dir);

/* 1 when signo is one of the crash signals taken by the call above.
 * Async-signal-safe. */
int snapprof__preload_crash_owns(int signo);

/* The program's sigaction() of a crash signal that
 * snapprof__preload_crash_owns(). Async-signal-safe. */
int snapprof__preload_crash_sigaction(int signo, const struct sigaction *act,
                                      struct sigaction *old);

#endif
