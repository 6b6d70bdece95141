/* The unwinder chain: wraps unwinder ops and walks a stack copy through the
 * chain, the way Chromium's StackSamplerImpl::WalkStack does. */
#include "unwinder/unwinder_internal.h"

#include "module_cache/jit_regions.h"
#include "module_cache/module_cache.h"

#include <errno.h>
#include <stdlib.h>

int snapprof_unwinder_create(const snapprof_unwinder_ops_t *ops, void *user_data,
                             snapprof_unwinder_t **out)
{
    if (!ops || !out)
        return -EINVAL;
    if (ops->version < 1)
        return SNAPPROF_EVERSION;
    if (!ops->xCanUnwindFrom || !ops->xTryUnwind)
        return -EINVAL;
    snapprof_unwinder_t *u = calloc(1, sizeof *u);
    if (!u)
        return -ENOMEM;
    u->ops = ops;
    u->user_data = user_data;
    *out = u;
    return 0;
}

void snapprof_unwinder_destroy(snapprof_unwinder_t *unwinder)
{
    if (!unwinder)
        return;
    if (unwinder->ops->xDestroy)
        unwinder->ops->xDestroy(unwinder->user_data);
    free(unwinder);
}

snapprof__cfi_t *snapprof__cfi_of(snapprof_unwinder_t *unwinder)
{
    return unwinder ? unwinder->cfi : NULL;
}

int snapprof_unwind_push_frame(snapprof_unwind_ctx_t *ctx, uintptr_t pc, snapprof_frame_kind_t kind,
                               const char *name)
{
    if (ctx->frame_count >= ctx->max_frames)
        return -ENOSPC;
    snapprof_frame_t *f = &ctx->frames[ctx->frame_count++];
    f->pc = pc;
    f->kind = kind;
    f->name = name;
    f->module = NULL;
    if (kind == SNAPPROF_FRAME_MARKER)
        return 0;
    f->module = snapprof__module_find_at(pc, ctx->stack ? ctx->stack->timestamp_ns : 0);
    const snapprof__jit_region_t *region = snapprof__jit_region_of(f->module);
    if (region != NULL) {
        /* Every unwinder finds JIT code through the module cache, so its
         * frames are named alike whoever walked into them. */
        f->kind = SNAPPROF_FRAME_JIT;
        if (f->name == NULL)
            f->name = region->name;
    }
    return 0;
}

int snapprof__unwind_push_frame_near(snapprof_unwind_ctx_t *ctx, uintptr_t pc,
                                     const snapprof_module_t *near)
{
    uint64_t when = ctx->stack ? ctx->stack->timestamp_ns : 0;
    /* The module cache would answer with near itself: pc lies in its
     * range, it is still loaded native code, and no JIT region (which the
     * cache asks first) holds pc. That saves the cache's lock and clock
     * read, most of a frame's cost in a tight walk. */
    if (near == NULL || near->kind != SNAPPROF_MODULE_NATIVE ||
        pc - near->start >= near->limit - near->start ||
        !__atomic_load_n(&near->is_loaded, __ATOMIC_RELAXED) ||
        snapprof__jit_find(pc, when) != NULL)
        return snapprof_unwind_push_frame(ctx, pc, SNAPPROF_FRAME_NATIVE, NULL);
    if (ctx->frame_count >= ctx->max_frames)
        return -ENOSPC;
    ctx->frames[ctx->frame_count++] =
        (snapprof_frame_t){.pc = pc, .module = near, .kind = SNAPPROF_FRAME_NATIVE, .name = NULL};
    return 0;
}

snapprof_unwind_result_t snapprof__unwind_abort(snapprof_unwind_ctx_t *ctx,
                                                snapprof__reason_t reason)
{
    /* A row per reason; SNAPPROF__REASON_NONE's is all zero: EUNSPEC, no text. */
    static const struct {
        snapprof_unwind_error_t error;
        const char *text;
    } reasons[] = {
#define SNAPPROF__REASON_ROW_(name, code, text) [SNAPPROF__REASON_##name] = {code, text},
        SNAPPROF__REASON_MAP(SNAPPROF__REASON_ROW_)
#undef SNAPPROF__REASON_ROW_
    };
    ctx->abort_error = reasons[reason].error;
    ctx->abort_reason = reasons[reason].text;
    return SNAPPROF_UNWIND_ABORTED;
}

/* How the profiler counts an unwinder's abort code; an unknown code (from
 * an unwinder built against a newer header) counts as other. */
static snapprof__abort_kind_t abort_kind(snapprof_unwind_error_t error)
{
    switch (error) {
    case SNAPPROF_UNWIND_EBADFRAME:
        return SNAPPROF__ABORT_BAD_FRAME;
    case SNAPPROF_UNWIND_ENOINFO:
        return SNAPPROF__ABORT_NO_INFO;
    case SNAPPROF_UNWIND_EMEMORY:
        return SNAPPROF__ABORT_MEMORY;
    default:
        return SNAPPROF__ABORT_OTHER;
    }
}

static snapprof_unwinder_t *pick(snapprof_unwinder_t *const *unwinders, size_t n,
                                 const snapprof_frame_t *frame)
{
    for (size_t i = 0; i < n; i++)
        if (unwinders[i]->ops->xCanUnwindFrom(unwinders[i]->user_data, frame))
            return unwinders[i];
    return NULL;
}

size_t snapprof__unwind_chain(snapprof_unwinder_t *const *unwinders, size_t unwinder_count,
                              const snapprof_regs_t *regs, const snapprof_stack_copy_t *stack,
                              snapprof_frame_t *frames, size_t max_frames,
                              snapprof__unwind_outcome_t *outcome)
{
    *outcome = (snapprof__unwind_outcome_t){0};
    if (max_frames < 2)
        return 0;
    /* One slot stays free for the marker that says why a walk ended early. */
    snapprof_unwind_ctx_t ctx = {.regs = *regs,
                                 .stack = stack,
                                 .frames = frames,
                                 .frame_count = 0,
                                 .max_frames = max_frames - 1};
    snapprof_unwind_push_frame(&ctx, regs->r[SNAPPROF_REG_PC], SNAPPROF_FRAME_NATIVE, NULL);
    const char *marker = NULL;
    for (;;) {
        const snapprof_frame_t *last = &frames[ctx.frame_count - 1];
        snapprof_unwinder_t *u = pick(unwinders, unwinder_count, last);
        if (!u) {
            outcome->unrecognized = 1;
            marker = "[unknown]";
            break;
        }
        size_t before = ctx.frame_count;
        snapprof_unwind_result_t r = u->ops->xTryUnwind(u->user_data, &ctx);
        if (ctx.frame_count >= ctx.max_frames) {
            outcome->truncated_depth = 1;
            marker = "[truncated]";
            break;
        }
        if (r == SNAPPROF_UNWIND_COMPLETED) {
            outcome->completed = 1;
            outcome->completed_by = u;
            break;
        }
        if (r == SNAPPROF_UNWIND_ABORTED) {
            outcome->aborted = 1;
            outcome->abort_reason = ctx.abort_reason;
            /* On a truncated copy the walk most likely failed because the
             * stack goes on beyond what was copied. */
            outcome->abort_kind =
                stack->truncated ? SNAPPROF__ABORT_TRUNCATED_COPY : abort_kind(ctx.abort_error);
            marker = stack->truncated ? "[truncated]" : "[unwind error]";
            break;
        }
        if (ctx.frame_count == before) {
            /* UNRECOGNIZED_FRAME without progress: nobody can go on. */
            outcome->unrecognized = 1;
            marker = "[unknown]";
            break;
        }
    }
    if (marker) {
        ctx.max_frames = max_frames;
        snapprof_unwind_push_frame(&ctx, 0, SNAPPROF_FRAME_MARKER, marker);
    }
    return ctx.frame_count;
}
