/* What the programs that the preload and gperftools tests run under a
 * profiler share (test_preload_prog.c, test_preload_crash_prog.c,
 * test_preload_gperftools_prog.c). They link none of the tests' helpers,
 * so that the profiler sees only the program: everything here is static
 * inline and plain libc. */
#ifndef SNAPPROF_TESTS_TEST_PROG_H
#define SNAPPROF_TESTS_TEST_PROG_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* HOT(name) defines `void name(uint64_t ms)`, a fixed amount of work:
 * about ms milliseconds on an idle machine. Work, not time: the thread CPU
 * clock on these VMs jumps by hundreds of milliseconds now and then, and a
 * loop that ran until the clock said so would sometimes do almost nothing. */
#define ITERS_PER_MS 300000u
#define HOT(name)                                                                                  \
    __attribute__((noinline)) void name(uint64_t ms)                                               \
    {                                                                                              \
        volatile uint64_t x = 1;                                                                   \
        for (uint64_t i = 0; i < ms * ITERS_PER_MS; i++)                                           \
            x = x * 6364136223846793005u + 1442695040888963407u;                                   \
    }

/* gperftools' ProfilerGetCurrentState, when a profiler that has it is
 * loaded (snapprof's preload library does). */
struct gperf_state {
    int enabled;
    time_t start_time;
    char profile_name[1024];
    int samples_gathered;
};

/* The samples the loaded profiler has taken so far, or -1 when none is
 * loaded or it is not running (as in a child under --fork stop). */
static inline int tp_profiler_samples(void)
{
    void (*get_state)(struct gperf_state *) =
        (void (*)(struct gperf_state *))dlsym(RTLD_DEFAULT, "ProfilerGetCurrentState");
    if (!get_state)
        return -1;
    struct gperf_state st;
    get_state(&st);
    return st.enabled ? st.samples_gathered : -1;
}

/* hot(ms), and then, while the profiler has taken fewer than `want`
 * samples since it began (a stalled VM can leave the sampler unscheduled
 * for a second while this thread runs), some more of it: at most 60 s.
 * Only for a thread that runs alone, so that the samples are its own. */
static inline void tp_burn_sampled(void (*hot)(uint64_t), uint64_t ms, int want)
{
    int before = tp_profiler_samples();
    hot(ms);
    for (int i = 0; before >= 0 && i < 6000; i++) {
        int now = tp_profiler_samples();
        if (now < 0 || now - before >= want)
            break;
        hot(10);
    }
}

/* Thread tid's one-letter state (R, S, D...) from /proc/self/task/tid/stat;
 * '?' when it cannot be read. */
static inline char tp_thread_state(int tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "tid (comm) S ...": comm may hold spaces and parentheses. */
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' ? paren[2] : '?';
}

#endif
