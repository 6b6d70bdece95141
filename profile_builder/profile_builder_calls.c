/* A builder's callbacks, called for the profiler core (see
 * profile_builder_calls.h). */
#include "profile_builder/profile_builder_calls.h"

#include "profile_builder/profile_builder_internal.h"

int snapprof__builder_started(snapprof_builder_t *b, const snapprof_profile_info_t *info)
{
    return b->ops->xOnProfileStarted ? b->ops->xOnProfileStarted(b->user_data, info) : 0;
}

int snapprof__builder_sample(snapprof_builder_t *b, const snapprof_sample_t *s)
{
    /* A builder written for version 1 knows only time samples: it would
     * weigh an allocation as CPU time. */
    if (b->ops->version < 2 && SNAPPROF_SAMPLE_KIND(s) != SNAPPROF_SAMPLE_KIND_TIME)
        return 0;
    return b->ops->xOnSample(b->user_data, s);
}

int snapprof__builder_completed(snapprof_builder_t *b, const snapprof_profile_info_t *info)
{
    return b->ops->xOnProfileCompleted ? b->ops->xOnProfileCompleted(b->user_data, info) : 0;
}
