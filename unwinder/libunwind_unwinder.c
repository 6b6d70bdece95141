/* libunwind unwinder: walks the stack copy with the CFI engine
 * (cfi_engine.c), libunwind's remote API over the copy and the loaded
 * objects' .eh_frame tables, for the code those tables cover. */
#include "unwinder/cfi_engine.h"

#include <errno.h>

static int lu_can_unwind_from(void *user_data, const snapprof_frame_t *frame)
{
    if (frame->kind != SNAPPROF_FRAME_NATIVE ||
        (frame->module && frame->module->kind != SNAPPROF_MODULE_NATIVE))
        return 0;
    return snapprof__cfi_covers(user_data, frame->pc);
}

static snapprof_unwind_result_t lu_try_unwind(void *user_data, snapprof_unwind_ctx_t *ctx)
{
    return snapprof__cfi_walk(user_data, ctx);
}

static void lu_update_modules(void *user_data)
{
    snapprof__cfi_update_modules(user_data);
}

static void lu_destroy(void *user_data)
{
    snapprof__cfi_destroy(user_data);
}

static const snapprof_unwinder_ops_t lu_ops = {
    .version = SNAPPROF_UNWINDER_OPS_VERSION,
    .name = "libunwind",
    .xCanUnwindFrom = lu_can_unwind_from,
    .xTryUnwind = lu_try_unwind,
    .xUpdateModules = lu_update_modules,
    .xDestroy = lu_destroy,
};

int snapprof_libunwind_unwinder_create(snapprof_unwinder_t **out)
{
    if (!out)
        return -EINVAL;
    snapprof__cfi_t *c;
    int rc = snapprof__cfi_create(&c);
    if (rc != 0)
        return rc;
    rc = snapprof_unwinder_create(&lu_ops, c, out);
    if (rc != 0)
        snapprof__cfi_destroy(c);
    else
        (*out)->cfi = c;
    return rc;
}
