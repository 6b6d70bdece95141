/* The generic profile builder: wraps an implementation's ops and user data. */
#include "profile_builder_internal.h"

#include <errno.h>
#include <stdlib.h>

int snapprof_builder_create(const snapprof_builder_ops_t *ops, void *user_data,
                            snapprof_builder_t **out)
{
    if (out == NULL || ops == NULL)
        return -EINVAL;
    *out = NULL;
    /* Version 1 is the oldest layout there is; anything below it is not an
     * ops struct this library knows how to read. */
    if (ops->version < 1)
        return SNAPPROF_EVERSION;
    /* xOnSample is the only required member of version 1. */
    if (ops->xOnSample == NULL)
        return -EINVAL;
    snapprof_builder_t *builder = malloc(sizeof *builder);
    if (builder == NULL)
        return -ENOMEM;
    builder->ops = ops;
    builder->user_data = user_data;
    builder->output = NULL;
    *out = builder;
    return 0;
}

int snapprof_builder_set_path(snapprof_builder_t *builder, const char *path)
{
    if (builder == NULL || builder->output == NULL)
        return -EINVAL;
    snapprof__output_t out;
    int err = snapprof__output_resolve(path, &out);
    if (err != 0)
        return err;
    snapprof__output_free(builder->output);
    *builder->output = out;
    return 0;
}

void snapprof_builder_destroy(snapprof_builder_t *builder)
{
    if (builder == NULL)
        return;
    if (builder->ops->xDestroy != NULL)
        builder->ops->xDestroy(builder->user_data);
    free(builder);
}
