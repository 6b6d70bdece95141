/* Frame-pointer unwinder: follows the saved-frame-pointer chain through the
 * stack copy, checking every step before it trusts it. */
#include "unwinder/unwinder_internal.h"

#include <errno.h>
#include <stdlib.h>

static int fp_can_unwind_from(void *user_data, const snapprof_frame_t *frame)
{
    (void)user_data;
    return frame->kind == SNAPPROF_FRAME_NATIVE && frame->module != NULL &&
           frame->module->kind == SNAPPROF_MODULE_NATIVE;
}

/* A frame record is [saved fp][return address] at fp. It must lie inside
 * the copy (overflow-safe), be aligned, and sit above the current sp; the
 * next record must be strictly higher, which also rules out cycles. */
static snapprof_unwind_result_t fp_try_unwind(void *user_data, snapprof_unwind_ctx_t *ctx)
{
    (void)user_data;
    const snapprof_stack_copy_t *stack = ctx->stack;
    for (;;) {
        uintptr_t fp = ctx->regs.r[SNAPPROF_REG_FP];
        uintptr_t sp = ctx->regs.r[SNAPPROF_REG_SP];
        if (fp == 0)
            return SNAPPROF_UNWIND_COMPLETED; /* the outermost frame */
        if (fp < stack->bottom || stack->top - stack->bottom < 2 * sizeof(uintptr_t) ||
            fp > stack->top - 2 * sizeof(uintptr_t)) {
            return snapprof__unwind_abort(ctx, SNAPPROF__REASON_FP_OUTSIDE);
        }
        if (fp % 16 != 0) {
            return snapprof__unwind_abort(ctx, SNAPPROF__REASON_FP_MISALIGNED);
        }
        if (fp < sp) {
            return snapprof__unwind_abort(ctx, SNAPPROF__REASON_FP_BELOW_SP);
        }
        const uintptr_t *record = (const uintptr_t *)fp;
        uintptr_t next_fp = record[0], ret = record[1];
        if (ret == 0)
            return SNAPPROF_UNWIND_COMPLETED;
        if (snapprof_unwind_push_frame(ctx, ret - 1, SNAPPROF_FRAME_NATIVE, NULL) != 0)
            return SNAPPROF_UNWIND_ABORTED; /* depth cap; the chain notices */
        ctx->regs.r[SNAPPROF_REG_SP] = fp + 2 * sizeof(uintptr_t);
        ctx->regs.r[SNAPPROF_REG_FP] = next_fp;
        ctx->regs.r[SNAPPROF_REG_PC] = ret;
        if (!fp_can_unwind_from(NULL, &ctx->frames[ctx->frame_count - 1])) {
            /* Another unwinder's code, e.g. JIT code without frame pointers
             * that keeps junk in rbp: it judges the saved rbp itself. */
            return SNAPPROF_UNWIND_UNRECOGNIZED_FRAME;
        }
        if (next_fp != 0 && next_fp <= fp) {
            ctx->frame_count--; /* the walk ends where the chain goes wrong */
            return snapprof__unwind_abort(ctx, SNAPPROF__REASON_FP_ORDER);
        }
    }
}

static const snapprof_unwinder_ops_t fp_ops = {
    .version = SNAPPROF_UNWINDER_OPS_VERSION,
    .name = "frame-pointer",
    .xCanUnwindFrom = fp_can_unwind_from,
    .xTryUnwind = fp_try_unwind,
};

int snapprof_frame_pointer_unwinder_create(snapprof_unwinder_t **out)
{
    return snapprof_unwinder_create(&fp_ops, NULL, out);
}
