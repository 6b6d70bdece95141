/* snapprof's stand-in for gperftools' <gperftools/profiler.h>: the same
 * functions with the same signatures, so a program written for gperftools'
 * CPU profiler builds unchanged against libsnapprof-preload (pkg-config
 * snapprof-gperftools) and writes what gperftools writes: its legacy binary
 * CPU profile, which gperftools' pprof (Debian's google-pprof) and
 * `go tool pprof` read, counts in whole samples. SNAPPROF_FORMAT=pprof in
 * the environment writes snapprof's pprof profile instead (gzipped
 * protobuf with thread labels, CPU nanoseconds and the run's counters;
 * `go tool pprof` reads it, google-pprof does not).
 *
 * Differences from gperftools, all on the side of doing more:
 *   - every thread is sampled, so ProfilerRegisterThread() has nothing left
 *     to do;
 *   - filter_in_thread is not called (it would have to run in the signal
 *     handler): every thread's samples are kept;
 *   - ProfilerFlush() writes a complete profile of everything so far.
 * All functions are thread-safe; none may be called from a signal handler. */
#ifndef SNAPPROF_GPERFTOOLS_PROFILER_H
#define SNAPPROF_GPERFTOOLS_PROFILER_H

#include <time.h>

#ifndef PERFTOOLS_DLL_DECL
#define PERFTOOLS_DLL_DECL
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Zero it (memset) and fill in what you need. */
struct ProfilerOptions {
    int (*filter_in_thread)(void *arg); /* not called by snapprof */
    void *filter_in_thread_arg;
};

/* Starts profiling every thread into fname (replacing that file when the
 * profile is written). Returns nonzero on success; 0 when a profile already
 * runs (also one started by CPUPROFILE), fname cannot be written, or the
 * sampling signal is taken (a one-line reason goes to stderr). */
PERFTOOLS_DLL_DECL int ProfilerStart(const char *fname);
PERFTOOLS_DLL_DECL int ProfilerStartWithOptions(const char *fname,
                                                const struct ProfilerOptions *options);

/* Stops profiling and writes the profile. ProfilerStart() may start a new
 * one afterwards. */
PERFTOOLS_DLL_DECL void ProfilerStop(void);

/* Writes the profile so far to its file; profiling goes on. No effect when
 * no profile runs. */
PERFTOOLS_DLL_DECL void ProfilerFlush(void);

/* Deprecated in gperftools, where they do nothing: so here. */
PERFTOOLS_DLL_DECL void ProfilerEnable(void);
PERFTOOLS_DLL_DECL void ProfilerDisable(void);

/* Nonzero while a profile runs. */
PERFTOOLS_DLL_DECL int ProfilingIsEnabledForAllThreads(void);

/* Does nothing: snapprof samples every thread already. */
PERFTOOLS_DLL_DECL void ProfilerRegisterThread(void);

struct ProfilerState {
    int enabled;             /* a profile runs */
    time_t start_time;       /* when it started */
    char profile_name[1024]; /* the file it is written to, or "" */
    int samples_gathered;    /* samples so far */
};
/* Cheap (no lock the profiler holds while it writes): call it in loops. */
PERFTOOLS_DLL_DECL void ProfilerGetCurrentState(struct ProfilerState *state);

/* The calling thread's stack: up to max_depth return addresses into
 * result, innermost first, skipping this function and skip_count more
 * frames; from a signal handler, uc (its ucontext_t *, or NULL) starts at
 * the interrupted instruction instead and skip_count is not used. Returns
 * the number stored; 0 when called again from a signal inside a call. */
PERFTOOLS_DLL_DECL int ProfilerGetStackTrace(void **result, int max_depth, int skip_count,
                                             const void *uc);

#ifdef __cplusplus
}
#endif

#endif /* SNAPPROF_GPERFTOOLS_PROFILER_H */
