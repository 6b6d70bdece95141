/* Profile builders as the profiler core sees them. Internal. */
#ifndef SNAPPROF_PROFILE_BUILDER_INTERNAL_H
#define SNAPPROF_PROFILE_BUILDER_INTERNAL_H

#include <snapprof/profile_builder.h>

struct snapprof_builder {
    const snapprof_builder_ops_t *ops;
    void *user_data;
};

#endif
