/* snapprof flight recorder: the last minutes of a running profile, kept in
 * memory, as a profile on demand.
 *
 * A flight builder is a profile builder (<snapprof/profile_builder.h>)
 * that keeps the time samples it receives, frames, weights, thread and
 * labels, in pieces of piece_ns each, drops pieces older than span_ns and,
 * past max_bytes, the oldest pieces first. At any time
 * snapprof_flight_builder_replay() gives the samples of the last since_ns
 * to another builder as a profile of its own (xOnProfileStarted, every
 * sample, xOnProfileCompleted), and snapprof_flight_builder_collect()
 * does that into an in-memory pprof builder and hands over the bytes:
 * after an incident, what just happened, at once, instead of waiting for
 * it to happen again (`/debug/pprof/profile?since=60s`).
 *
 * What a replayed profile holds: the samples whose timestamps fall in the
 * window, weighed as they were delivered, so its CPU totals are the
 * running profile's over the same stretch. A thread's "[kernel and
 * unsampled]" remainder reaches builders when the profile completes or is
 * flushed, so a window holds it only when a flush fell inside it. The
 * replayed profile carries no statistics, app frames or events. Heap
 * samples are not kept (the builder's ops are version 1).
 *
 * Memory: a sample costs about 40 bytes plus 24 per frame and its
 * strings' lengths (thread name, JIT and marker frame names, labels); at
 * 19 Hz a thread busy 5 minutes with 30-frame stacks keeps ~4.3 MiB.
 *
 * Added in 0.7.0. */
#ifndef SNAPPROF_FLIGHT_H
#define SNAPPROF_FLIGHT_H

#include <snapprof/profile_builder.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults of snapprof_flight_params_t's members left 0. */
#define SNAPPROF_FLIGHT_SPAN_NS_DEFAULT (300ull * 1000000000ull) /* 5 minutes */
#define SNAPPROF_FLIGHT_PIECE_NS_DEFAULT (10ull * 1000000000ull) /* 10 s */
#define SNAPPROF_FLIGHT_MAX_BYTES_DEFAULT ((size_t)16 << 20)     /* 16 MiB */

/* What a flight builder keeps. Grows only at its end: set size to
 * sizeof(snapprof_flight_params_t) (members past size are taken as 0). */
typedef struct snapprof_flight_params {
    size_t size;
    uint64_t span_ns;  /* keep at least the last span_ns (0: 5 minutes) */
    uint64_t piece_ns; /* kept and dropped in pieces this long (0: 10 s) */
    size_t max_bytes;  /* at most this much memory for samples (0: 16 MiB) */
} snapprof_flight_params_t;

/* What a flight builder holds now (snapprof_flight_builder_get_info()). */
typedef struct snapprof_flight_info {
    size_t size;              /* sizeof(snapprof_flight_info_t) as the caller knows it */
    uint64_t samples;         /* samples kept */
    uint64_t bytes;           /* memory they take (the pieces' allocations) */
    uint64_t oldest_ns;       /* CLOCK_MONOTONIC timestamp of the oldest kept, 0 if none */
    uint64_t newest_ns;       /* and of the newest */
    uint64_t samples_dropped; /* dropped for max_bytes before span_ns had passed */
    uint64_t samples_failed;  /* not kept for want of memory (malloc failed) */
} snapprof_flight_info_t;

/* Creates a flight builder (params NULL: the defaults). Add or attach it to
 * a profiler as any builder. Returns 0; -EINVAL (out NULL, params->size
 * smaller than its first member's end, piece_ns above span_ns, max_bytes
 * below 64 KiB); -ENOMEM. Any thread. */
SNAPPROF_API int snapprof_flight_builder_create(const snapprof_flight_params_t *params,
                                                snapprof_builder_t **out);

/* Gives the kept samples of the last since_ns (0: all kept) to builder
 * `into` as one profile: its xOnProfileStarted, then each sample oldest
 * first, then its xOnProfileCompleted, on the calling thread. The info
 * they get: the window (start_mono_ns, start_time_ns, duration_ns up to
 * now), and the mode and period of the profile that fed the flight
 * builder; at xOnProfileCompleted, stats points to the window's own
 * counters (samples, cpu_ns_sampled and cpu_ns_total of the samples
 * replayed; the others 0). The flight builder keeps receiving samples meanwhile (it is
 * locked only while the window's bytes are copied). Returns
 * xOnProfileCompleted's result (0 when it is NULL), or: -EINVAL (flight
 * not a flight builder, into NULL or the same builder); -ENODATA (no
 * profile has started the flight builder yet); -ENOMEM; or a nonzero
 * return of into's xOnProfileStarted (then nothing else is called). into
 * must not be attached to a running profiler. Any thread but flight's own
 * builder callbacks. */
SNAPPROF_API int snapprof_flight_builder_replay(snapprof_builder_t *flight, uint64_t since_ns,
                                                snapprof_builder_t *into);

/* snapprof_flight_builder_replay() into an in-memory pprof builder
 * (snapprof_pprof_builder_create_in_memory()): the gzipped
 * perftools.profiles.Profile of the last since_ns in *bytes (free() it)
 * and *size. Returns 0 or what replay returns; -EINVAL when bytes or size
 * is NULL. */
SNAPPROF_API int snapprof_flight_builder_collect(snapprof_builder_t *flight, uint64_t since_ns,
                                                 void **bytes, size_t *size);

/* Copies what flight holds into the first info->size bytes of info (set
 * info->size first). Returns 0; -EINVAL (not a flight builder, info NULL,
 * info->size 0). Any thread. */
SNAPPROF_API int snapprof_flight_builder_get_info(snapprof_builder_t *flight,
                                                  snapprof_flight_info_t *info);

#ifdef __cplusplus
}
#endif

#endif /* SNAPPROF_FLIGHT_H */
