/* A builder's callbacks, called for the profiler core (see
 * profile_builder_calls.h). */
#include "profile_builder/profile_builder_calls.h"

#include "profile_builder/profile_builder_internal.h"

#include <errno.h>

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

int snapprof__builder_completed_to(snapprof_builder_t *b, const snapprof_profile_info_t *info,
                                   const char *path)
{
    if (b->output == NULL)
        return -EINVAL;
    snapprof__output_t other;
    int rc = snapprof__output_resolve(path, &other);
    if (rc != 0)
        return rc;
    snapprof__output_t own = *b->output;
    *b->output = other;
    rc = snapprof__builder_completed(b, info);
    *b->output = own;
    snapprof__output_free(&other);
    return rc;
}
