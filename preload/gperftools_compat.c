/* gperftools' CPU profiler API (<gperftools/profiler.h>) on top of the
 * whole-process profile: ProfilerStart/Stop/Flush and friends, with the
 * signatures and return values gperftools documents. */
#include "preload/preload.h"

#include "preload/gperftools/profiler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Settings for a profile started from code: the file given, everything
 * else from the environment gperftools users know (CPUPROFILE_FREQUENCY,
 * CPUPROFILE_REALTIME) or ours, defaults otherwise. */
static int config_for(const char *fname, snapprof__preload_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    if (!fname || !*fname ||
        snapprof__absolute_path(fname, cfg->outputs[0].path, sizeof cfg->outputs[0].path) != 0)
        return -1;
    cfg->outputs[0].format = SNAPPROF__FORMAT_PPROF; /* gperftools' callers read pprof */
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
    memset(state, 0, sizeof *state);
    state->enabled = st.running;
    if (st.running) {
        state->start_time = st.start_time;
        /* gperftools cuts a long name the same way. */
        size_t n = strnlen(st.path, sizeof state->profile_name - 1);
        memcpy(state->profile_name, st.path, n);
        state->profile_name[n] = '\0';
        state->samples_gathered = st.samples > 0x7fffffff ? 0x7fffffff : (int)st.samples;
    }
}
