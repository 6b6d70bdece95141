/* Helpers shared by snapprof's tests: clocks, running commands, and reading
 * profiles back through the real client, `go tool pprof`. */
#ifndef SNAPPROF_TESTS_TEST_UTIL_H
#define SNAPPROF_TESTS_TEST_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include <snapprof/snapprof.h>

#include "common/fault.h"

uint64_t tu_mono_ns(void);
uint64_t tu_thread_cpu_ns(void);
/* Thread tid's one-letter state (R, S, D...) from /proc/self/task/tid/stat;
 * '?' when it cannot be read. */
char tu_thread_state(int tid);

/* 1 when built with a sanitizer (SNAPPROF_SANITIZER_BUILD). */
int tu_sanitizer_build(void);

/* 1 when built with ThreadSanitizer. TSan runs a signal handler only when
 * the thread next enters its runtime, with the registers of when the signal
 * came and the stack of when it is handled: stack shapes and attribution
 * cannot be judged there. */
int tu_tsan_build(void);

/* Skips the test (77) in a build without the CMake option
 * SNAPPROF_TEST_SEAMS, whose library does not read SNAPPROF_TEST_FAULTS
 * (tests/README.md, "Test seams"). */
void tu_need_test_seams(void);

/* Fault sites (common/fault.h) through their seams: about one call in
 * one_in[s] at each site s fails, which ones chosen by seed;
 * tu_fault_set() sets one site and clears the others; tu_fault_clear()
 * removes them. From one thread at a time; the profiler may run.
 * tu_fault_injected(site) counts the failures injected
 * at site since the process started. */
void tu_faults(const uint32_t one_in[SNAPPROF__FAULT_SITE_COUNT], uint64_t seed);
void tu_fault_set(snapprof__fault_site_t site, uint32_t one_in, uint64_t seed);
void tu_fault_clear(void);
uint64_t tu_fault_injected(snapprof__fault_site_t site);

/* Under TSan, prints "skipped: WHY" and exits with the skip status. */
void tu_skip_under_tsan(const char *why);
/* 1 in an AddressSanitizer build; tu_skip_under_asan() exits with
 * TEST_SKIP there, printing why. */
int tu_asan_build(void);
void tu_skip_under_asan(const char *why);

/* Runs a shell command; returns its combined stdout and stderr (malloc'd,
 * never NULL) and stores the exit status (or -1) in *status if given. */
char *tu_run(const char *cmd, int *status);

/* Runs `go tool pprof ARGS` with a private HOME and temp dir. Exits the
 * test (failure) when go is missing: pprof is the client we must satisfy. */
char *tu_pprof(const char *args, int *status);

/* Runs `go tool pprof ARGS 'PROFILE'` (tu_pprof) and fails the test unless
 * it exits 0; returns its output (malloc'd). */
char *tu_pprof_ok(const char *args, const char *profile);

/* One row of `go tool pprof -top` output. */
typedef struct tu_top_row {
    char name[512];
    double flat, flat_pct, cum, cum_pct; /* flat and cum in the report's unit */
} tu_top_row_t;

/* Runs `go tool pprof -top -nodecount=1000 EXTRA PROFILE` and parses the
 * rows; returns the row count (exits on failure). *out is malloc'd. The
 * raw text is stored in *raw when raw is not NULL (malloc'd). */
int tu_pprof_top(const char *profile, const char *extra, tu_top_row_t **out, char **raw);
/* tu_pprof_top, and the report (*raw) printed. */
int tu_pprof_top_print(const char *profile, const char *extra, tu_top_row_t **out, char **raw);

/* The row named name (exact match), or NULL. */
const tu_top_row_t *tu_top_find(const tu_top_row_t *rows, int n, const char *name);
/* A column of tu_top_row_t. */
typedef enum { TU_TOP_FLAT, TU_TOP_FLAT_PCT, TU_TOP_CUM, TU_TOP_CUM_PCT } tu_top_col_t;
/* Column col of name's row in `go tool pprof -top EXTRA` of profile,
 * absent when it has none; with print, prints the command and its report
 * first. */
double tu_top_value(const char *profile, const char *extra, const char *name, tu_top_col_t col,
                    double absent, int print);
/* The cum% of name in `go tool pprof -top EXTRA` of profile, 0 when absent;
 * with print, prints the command and its report first. */
double tu_top_cum_pct(const char *profile, const char *extra, const char *name, int print);

/* Makes a fresh directory under $TMPDIR (or /tmp) and returns its path
 * (malloc'd). */
char *tu_make_tmpdir(const char *tag);
/* "dir/name" (malloc'd): a file in such a directory. */
char *tu_path(const char *dir, const char *name);
/* How many entries directory dir holds, "." and ".." aside. */
int tu_count_entries(const char *dir);

/* n steps of a 64-bit LCG on *sink (add tells callers apart): the body
 * of the tests' small hot functions. Always inlined, so that the calling
 * function stays the leaf a sample sees. */
__attribute__((always_inline)) static inline void tu_spin_lcg(uint64_t *sink, int n, uint64_t add)
{
    volatile uint64_t x = *sink;
    for (int i = 0; i < n; i++)
        x = x * 6364136223846793005u + add;
    *sink = x;
}

/* Marsaglia's xorshift64 (13, 7, 17): the next number of the sequence in
 * *state (never 0). Tests that draw from it are deterministic. */
static inline uint64_t tu_xorshift64(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* Runs fn(arg) on a new thread (*th) and waits, a millisecond at a time,
 * until it has set *ready. */
void tu_start_thread(pthread_t *th, void *(*fn)(void *), void *arg, atomic_int *ready);

/* A registered worker thread, the first member of a test's own worker
 * struct. Its function calls tu_worker_enter() first, sets ready once it
 * is set up and runs until stop. */
typedef struct tu_worker {
    pthread_t th;
    snapprof_thread_t *token;
    pid_t tid;
    atomic_int ready, stop;
} tu_worker_t;

/* Registers the calling thread as w's (token and tid); fails the test on
 * an error. */
void tu_worker_enter(tu_worker_t *w);
/* Runs fn(arg) on w's thread (tu_start_thread: returns once ready). */
void tu_worker_start(tu_worker_t *w, void *(*fn)(void *), void *arg);
/* Sets stop, joins w's thread and releases its token. */
void tu_worker_stop(tu_worker_t *w);

/* Spins on the CPU for about ns of thread CPU time. */
void tu_burn_cpu_ns(uint64_t ns);

/* snapprof_params_init's defaults with the sampling interval set. */
snapprof_params_t tu_params(uint64_t interval_ns);

/* Registers the calling thread (*self) and creates a profiler of it alone
 * at 1 kHz, default params otherwise; fails the test on an error. */
snapprof_profiler_t *tu_profile_self(snapprof_thread_t **self);

/* Waits until the profiler has delivered n samples, checking every 5 ms,
 * and fails the test after 120 s. Tests wait for samples, not for time: a
 * busy thread that this VM's host barely runs is idle for many ticks. */
void tu_wait_samples(snapprof_profiler_t *p, uint64_t n);

/* Reads p's stats into *st every 5 ms until done(st, arg) says 1, or for
 * 120 s at most (a starved machine); asserts nothing: the caller judges
 * the last stats, which *st holds. */
void tu_wait_stats(snapprof_profiler_t *p, snapprof_stats_t *st,
                   int (*done)(const snapprof_stats_t *st, void *arg), void *arg);
/* A done for tu_wait_stats: at least *(const uint64_t *)arg samples. */
int tu_stats_has_samples(const snapprof_stats_t *st, void *arg);

/* Heap samples the profiler has dealt with: delivered, or dropped for
 * any reason. */
uint64_t tu_heap_handled(const snapprof_stats_t *st);
/* Waits until the profiler has dealt with recorded heap samples
 * (tu_heap_handled()), so that a fast allocating loop never finds every
 * capture slot taken; fails the test after 60 s. */
void tu_heap_wait_drained(snapprof_profiler_t *p, uint64_t recorded);

/* Burns CPU in 1 ms steps until get(stats of p) is at least n, and fails
 * the test after 120 s: for a thread that must be sampled (or armed,
 * or moved) while it runs. */
void tu_burn_until(snapprof_profiler_t *p, uint64_t (*get)(const snapprof_stats_t *), uint64_t n);

/* Whether this kernel allows a per-thread perf event (stock Debian's
 * perf_event_paranoid 3 and container seccomp profiles refuse it): what the
 * default trigger (auto) then uses. */
int tu_perf_event_allowed(void);
/* Skips the test (77) when it does not. */
void tu_need_perf_event(void);

/* Installs a seccomp filter on every thread of the process (TSYNC, after
 * PR_SET_NO_NEW_PRIVS) that answers system calls nr1 and nr2 (-1: none)
 * with action (SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO | EPERM, ...)
 * and allows the rest; fails the test if it cannot. For as long as the
 * process lives: a test case runs in a process of its own. */
void tu_seccomp_install(int nr1, int nr2, uint32_t action);

/* A builder that records every sample it gets (up to 64 frames each, leaf
 * first, plus the outermost frame), for tests that check what the profiler
 * delivered. The collector must outlive the builder; read it after stop. */
#include <snapprof/profile_builder.h>

#define TU_MAX_FRAMES 64
typedef struct tu_sample {
    pid_t tid;
    unsigned flags;
    size_t frame_count;
    uint64_t cpu_ns, wall_ns, timestamp_ns;
    snapprof_frame_t frames[TU_MAX_FRAMES]; /* leaf first */
    snapprof_frame_t outermost;
    char state[16], syscall[24]; /* its "state" and "syscall" labels, "" if none */
} tu_sample_t;

typedef struct tu_collector {
    tu_sample_t *samples;
    size_t count, cap;
    atomic_int started, completed; /* written on the sampling thread */
    snapprof_profile_info_t info;  /* as completed */
    snapprof_stats_t stats;        /* as completed */
    int fail_samples;              /* make xOnSample return an error */
    uint64_t sample_sleep_ns;      /* make xOnSample this slow */
    uint64_t complete_sleep_ns;    /* and xOnProfileCompleted */
    size_t offered, remainders;    /* xOnSample calls; of those, REMAINDER samples */
} tu_collector_t;

/* Wraps ops and user_data into a builder (snapprof_builder_create); fails
 * the test on error. ops must outlive the builder: the test utilities pass
 * a static const one. */
snapprof_builder_t *tu_builder(const snapprof_builder_ops_t *ops, void *user_data);

/* Makes a builder feeding c (exits the test on failure). */
snapprof_builder_t *tu_collector_builder(tu_collector_t *c);
size_t tu_collector_count_tid(const tu_collector_t *c, pid_t tid);
/* A profiler of tokens[0..n) made with params, delivering to c, run until
 * it has delivered samples samples, then stopped (not destroyed). */
snapprof_profiler_t *tu_profile_collect(const snapprof_params_t *params,
                                        snapprof_thread_t *const *tokens, size_t n,
                                        tu_collector_t *c, uint64_t samples);
void tu_collector_free(tu_collector_t *c);

/* The name of the function that holds frame's pc (via snapprof_symbolize:
 * the outermost symbol, not a function inlined into it), or "?" when
 * unknown. */
const char *tu_frame_name(const snapprof_frame_t *frame);

#endif
