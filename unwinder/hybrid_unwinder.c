/* Hybrid unwinder: frame pointers where the code has a frame record, CFI
 * (libunwind) where it does not, decided per pc from the CFI itself.
 *
 * Frame-pointer walking alone loses a frame wherever the current function
 * has not set up (or has already torn down) its frame record: every leaf
 * that GCC 12 compiles without a frame even under
 * -mno-omit-leaf-frame-pointer, prologues and epilogues, and code built
 * without frame pointers such as libc. The first time a pc is seen it is
 * stepped with CFI, which also tells whether the frame at that pc is a
 * standard frame record (CFA = rbp + 16, rbp saved at CFA - 16); that
 * answer belongs to the code, not to the sample, so it is cached per pc and
 * later samples take the cheap frame-pointer step there. */
#include "unwinder/cfi_engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Per-pc answers kept: 4096 slots, direct-mapped. */
#define CLASS_SLOTS 4096u

enum { CLASS_UNKNOWN = 0, CLASS_RECORD = 1, CLASS_OTHER = 2 };

typedef struct hybrid {
    snapprof__cfi_t *cfi;
    uintptr_t class_pc[CLASS_SLOTS];
    uint8_t class_of[CLASS_SLOTS];
} hybrid_t;

static size_t slot_of(uintptr_t pc)
{
    return (size_t)((pc * 0x9e3779b97f4a7c15ull) >> 52) % CLASS_SLOTS;
}

static int class_get(const hybrid_t *h, uintptr_t pc)
{
    size_t s = slot_of(pc);
    return h->class_pc[s] == pc ? h->class_of[s] : CLASS_UNKNOWN;
}

static void class_put(hybrid_t *h, uintptr_t pc, int cls)
{
    size_t s = slot_of(pc);
    h->class_pc[s] = pc;
    h->class_of[s] = (uint8_t)cls;
}

static int hy_can_unwind_from(void *user_data, const snapprof_frame_t *frame)
{
    hybrid_t *h = user_data;
    if (frame->kind != SNAPPROF_FRAME_NATIVE ||
        (frame->module && frame->module->kind != SNAPPROF_MODULE_NATIVE))
        return 0;
    return snapprof__cfi_in_code(h->cfi, frame->pc);
}

/* One frame-pointer step, with the frame-pointer unwinder's checks except
 * that the caller's saved rbp need not be a frame pointer (the caller may
 * be code without frame records). Returns 1, 0 at the end, -1 on error. */
static int fp_step(snapprof_unwind_ctx_t *ctx, uintptr_t *ret_out)
{
    const snapprof_stack_copy_t *s = ctx->stack;
    uintptr_t fp = ctx->regs.r[SNAPPROF_REG_FP], sp = ctx->regs.r[SNAPPROF_REG_SP];
    if (fp == 0)
        return 0;
    if (fp < s->bottom || s->top - s->bottom < 16 || fp > s->top - 16) {
        snapprof__unwind_abort(ctx, SNAPPROF__REASON_FP_OUTSIDE);
        return -1;
    }
    if (fp % 16 != 0) {
        snapprof__unwind_abort(ctx, SNAPPROF__REASON_FP_MISALIGNED);
        return -1;
    }
    if (fp < sp) {
        snapprof__unwind_abort(ctx, SNAPPROF__REASON_FP_BELOW_SP);
        return -1;
    }
    const uintptr_t *record = (const uintptr_t *)fp;
    if (record[1] == 0)
        return 0;
    ctx->regs.r[SNAPPROF_REG_FP] = record[0];
    ctx->regs.r[SNAPPROF_REG_SP] = fp + 16;
    ctx->regs.r[SNAPPROF_REG_PC] = record[1];
    *ret_out = record[1];
    return 1;
}

static snapprof_unwind_result_t hy_try_unwind(void *user_data, snapprof_unwind_ctx_t *ctx)
{
    hybrid_t *h = user_data;
    int last_adjusted = ctx->frame_count > 1;
    for (;;) {
        snapprof_frame_t *f = &ctx->frames[ctx->frame_count - 1];
        uintptr_t pc = f->pc, next = 0;
        int sig = 0, rc;
        int cls = snapprof__cfi_covers(h->cfi, pc) ? class_get(h, pc) : CLASS_RECORD;
        if (cls == CLASS_RECORD) {
            /* Known frame record here, or code without CFI where a frame
             * pointer is all there is. */
            rc = fp_step(ctx, &next);
        } else {
            snapprof__cfi_step_t step;
            snapprof__reason_t why = SNAPPROF__REASON_NONE;
            rc = snapprof__cfi_step(h->cfi, ctx->stack, &ctx->regs, pc, &step, &why);
            if (rc < 0)
                snapprof__unwind_abort(ctx, why);
            if (rc == 1) {
                class_put(h, pc, step.frame_record ? CLASS_RECORD : CLASS_OTHER);
                next = step.ip;
                sig = step.signal;
            }
        }
        if (rc == 0)
            return SNAPPROF_UNWIND_COMPLETED;
        if (rc < 0)
            return SNAPPROF_UNWIND_ABORTED;
        if (sig && last_adjusted)
            f->pc += 1; /* the trampoline's own exact address, as in the CFI walk */
        uintptr_t caller = sig ? next : next - 1;
        if (snapprof_unwind_push_frame(ctx, caller, SNAPPROF_FRAME_NATIVE, NULL) != 0)
            return SNAPPROF_UNWIND_ABORTED; /* depth cap; the chain notices */
        last_adjusted = !sig;
        if (!hy_can_unwind_from(h, &ctx->frames[ctx->frame_count - 1]))
            return SNAPPROF_UNWIND_UNRECOGNIZED_FRAME;
    }
}

static void hy_update_modules(void *user_data)
{
    hybrid_t *h = user_data;
    if (snapprof__cfi_update_modules(h->cfi)) {
        /* Code may have moved: forget what we learned about pcs. */
        memset(h->class_pc, 0, sizeof h->class_pc);
    }
}

static void hy_destroy(void *user_data)
{
    hybrid_t *h = user_data;
    snapprof__cfi_destroy(h->cfi);
    free(h);
}

static const snapprof_unwinder_ops_t hybrid_ops = {
    .version = SNAPPROF_UNWINDER_OPS_VERSION,
    .name = "hybrid",
    .xCanUnwindFrom = hy_can_unwind_from,
    .xTryUnwind = hy_try_unwind,
    .xUpdateModules = hy_update_modules,
    .xDestroy = hy_destroy,
};

int snapprof_hybrid_unwinder_create(snapprof_unwinder_t **out)
{
    if (!out)
        return -EINVAL;
    hybrid_t *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    int rc = snapprof__cfi_create(&h->cfi);
    if (rc == 0) {
        rc = snapprof_unwinder_create(&hybrid_ops, h, out);
        if (rc != 0)
            snapprof__cfi_destroy(h->cfi);
        else
            (*out)->cfi = h->cfi;
    }
    if (rc != 0)
        free(h);
    return rc;
}
