/* A builder's callbacks as the profiler core calls them: the core sees a
 * builder only through these, so the builder object's layout
 * (profile_builder_internal.h) stays inside profile_builder/. Internal. */
#ifndef SNAPPROF_PROFILE_BUILDER_CALLS_H
#define SNAPPROF_PROFILE_BUILDER_CALLS_H

#include <snapprof/profile_builder.h>

/* xOnProfileStarted(info), or 0 when the builder has none. */
int snapprof__builder_started(snapprof_builder_t *b, const snapprof_profile_info_t *info);
/* xOnSample(s): its return (a negative one is a failed sample). */
int snapprof__builder_sample(snapprof_builder_t *b, const snapprof_sample_t *s);
/* xOnProfileCompleted(info), or 0 when the builder has none. */
int snapprof__builder_completed(snapprof_builder_t *b, const snapprof_profile_info_t *info);
/* xOnProfileCompleted(info) with the builder's output pointed at path for
 * the call, then back at its own (snapprof_profiler_write_builder()): the
 * caller makes sure no other completion of b runs meanwhile. Returns the
 * completion's result; -EINVAL when b writes no file of its own; the path
 * errors of snapprof__output_resolve(). */
int snapprof__builder_completed_to(snapprof_builder_t *b, const snapprof_profile_info_t *info,
                                   const char *path);

#endif
