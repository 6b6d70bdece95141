/* gperftools' CPU profiler API (<gperftools/profiler.h>) on top of the
 * whole-process profile: ProfilerStart/Stop/Flush and friends, with the
 * signatures and return values gperftools documents, writing gperftools'
 * own file format unless SNAPPROF_FORMAT names another. */
#define UNW_LOCAL_ONLY
#include "preload/preload.h"

#include "preload/gperftools/profiler.h"

#include <errno.h>
#include <libunwind.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The format of a file named in code: gperftools' own, or the one
 * SNAPPROF_FORMAT names (one format: ProfilerStart writes one file). */
static snapprof__format_t format_from_env(void)
{
    const char *v = getenv(SNAPPROF_ENV_FORMAT);
    snapprof__format_t f[SNAPPROF_OUTPUTS_MAX];
    unsigned n = 0;
    char why[256];
    if (!v || !*v)
        return SNAPPROF__FORMAT_GPERFTOOLS;
    if (snapprof__parse_formats(v, f, SNAPPROF_OUTPUTS_MAX, &n, why, sizeof why) != 0 || n != 1) {
        snapprof__preload_warn("ignoring %s for ProfilerStart: %s; writing gperftools' format",
                               SNAPPROF_ENV_FORMAT, n != 1 && !why[0] ? "not one format" : why);
        return SNAPPROF__FORMAT_GPERFTOOLS;
    }
    return f[0];
}

/* Settings for a profile started from code: the file given, everything
 * else from the environment gperftools users know (CPUPROFILE_FREQUENCY,
 * CPUPROFILE_REALTIME) or ours, defaults otherwise. */
static int config_for(const char *fname, snapprof__preload_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    if (!fname || !*fname ||
        snapprof__absolute_path(fname, cfg->outputs[0].path, sizeof cfg->outputs[0].path) != 0)
        return -1;
    cfg->outputs[0].format = format_from_env();
    cfg->gperftools_names = 1;
    cfg->n_outputs = 1;
    snapprof__sampling_from_env(cfg, getenv, snapprof__preload_warn);
    cfg->follow_fork = 0; /* a profile started from code stays in its process */
    return 0;
}

SNAPPROF_PRELOAD_EXPORT int ProfilerStartWithOptions(const char *fname,
                                                     const struct ProfilerOptions *options)
{
    /* A few pages of paths: on the heap, not on the caller's stack. */
    snapprof__preload_config_t *cfg = malloc(sizeof *cfg);
    if (!cfg || config_for(fname, cfg) != 0) {
        free(cfg);
        return 0;
    }
    (void)options; /* filter_in_thread would have to run in the signal handler */
    char why[512];
    int rc = snapprof__preload_start(cfg, 0, why, sizeof why);
    free(cfg);
    if (rc != 0 && rc != -EALREADY)
        snapprof__preload_warn("ProfilerStart(\"%s\"): %s", fname, why);
    return rc == 0;
}

SNAPPROF_PRELOAD_EXPORT int ProfilerStart(const char *fname)
{
    return ProfilerStartWithOptions(fname, NULL);
}

SNAPPROF_PRELOAD_EXPORT void ProfilerStop(void)
{
    snapprof__preload_stop("ProfilerStop");
}

SNAPPROF_PRELOAD_EXPORT void ProfilerFlush(void)
{
    snapprof__preload_flush();
}

SNAPPROF_PRELOAD_EXPORT void ProfilerEnable(void) {}

SNAPPROF_PRELOAD_EXPORT void ProfilerDisable(void) {}

SNAPPROF_PRELOAD_EXPORT int ProfilingIsEnabledForAllThreads(void)
{
    snapprof__preload_state_t st;
    snapprof__preload_get_state(&st);
    return st.running;
}

SNAPPROF_PRELOAD_EXPORT void ProfilerRegisterThread(void) {}

SNAPPROF_PRELOAD_EXPORT void ProfilerGetCurrentState(struct ProfilerState *state)
{
    if (!state)
        return;
    snapprof__preload_state_t st;
    snapprof__preload_get_state(&st);
    state->enabled = st.running;
    state->start_time = st.start_time;
    state->samples_gathered = st.samples > 0x7fffffff ? 0x7fffffff : (int)st.samples;
    /* gperftools cuts a long name the same way. */
    size_t n = strnlen(st.path, sizeof state->profile_name - 1);
    memcpy(state->profile_name, st.path, n);
    state->profile_name[n] = '\0';
    /* As gperftools (2.16 and later) does for its own profiler_unittest:
     * where the name leaves room, the address of the sample counter
     * follows its terminating NUL, an int the test reads as a clock (it
     * takes it before any profile runs: the counter lives as long as the
     * process, and starts from 0 with each profile). Not an API, in
     * gperftools either. */
    const volatile int *counter = st.sample_counter;
    if (counter && n + 1 + sizeof counter <= sizeof state->profile_name)
        memcpy(state->profile_name + n + 1, &counter, sizeof counter);
}

SNAPPROF_PRELOAD_EXPORT int ProfilerGetStackTrace(void **result, int max_depth, int skip_count,
                                                  const void *uc)
{
    /* libunwind's local unwinder, as gperftools' own builds use: from the
     * signal's context when there is one (skip_count then counts nothing,
     * as gperftools does with it), else from here, skipping this frame and
     * skip_count more. A thread unwinding already (a signal inside this
     * call) gets 0 frames rather than a second walk. */
    static __thread int busy;
    if (!result || max_depth <= 0 || busy)
        return 0;
    busy = 1;
    unw_context_t ctx;
    unw_cursor_t cursor;
    int n = 0, skip;
    int rc;
#if defined(__x86_64__)
    if (uc) {
        ctx = *(const unw_context_t *)uc; /* libunwind's context is the ucontext_t here */
        rc = unw_init_local2(&cursor, &ctx, UNW_INIT_SIGNAL_FRAME);
        skip = 0;
    } else
#endif
    {
        unw_getcontext(&ctx);
        rc = unw_init_local(&cursor, &ctx);
        skip = 1 + (skip_count > 0 ? skip_count : 0);
    }
    if (rc < 0)
        goto out;
    while (skip-- > 0)
        if (unw_step(&cursor) <= 0)
            goto out;
    while (n < max_depth) {
        unw_word_t ip;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0)
            break;
        result[n++] = (void *)(uintptr_t)ip;
        if (unw_step(&cursor) <= 0)
            break;
    }
out:
    busy = 0;
    return n;
}
