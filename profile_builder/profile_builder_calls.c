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
    return b->ops->xOnSample(b->user_data, s);
}

int snapprof__builder_completed(snapprof_builder_t *b, const snapprof_profile_info_t *info)
{
    return b->ops->xOnProfileCompleted ? b->ops->xOnProfileCompleted(b->user_data, info) : 0;
}
