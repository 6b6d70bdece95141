/* JIT unwinder: walks frames of JIT code by the frame layout its region was
 * registered with, and hands the first caller outside JIT code back to the
 * native unwinders (the way Chromium's V8 unwinder sits in its chain). */
#include "unwinder/unwinder_internal.h"

#include "module_cache/jit_regions.h"

#include <stdint.h>

/* Frames of JIT code, whoever found them. push_frame() marks a frame in a
 * JIT module as SNAPPROF_FRAME_JIT, so the kind alone would do; the module
 * check keeps hand-made frames of other kinds out. */
static int jit_can_unwind_from(void *user_data, const snapprof_frame_t *frame)
{
    (void)user_data;
    return frame->kind != SNAPPROF_FRAME_MARKER && snapprof__jit_region_of(frame->module) != NULL;
}

/* Whether [addr, addr + len) lies in the copy; overflow-safe. */
static int in_copy(const snapprof_stack_copy_t *stack, uintptr_t addr, uintptr_t len)
{
    return addr >= stack->bottom && stack->top - stack->bottom >= len && addr <= stack->top - len;
}

static uintptr_t word_at(uintptr_t addr)
{
    return *(const uintptr_t *)addr;
}

/* The frame of a CPython perf trampoline at pc, as a fixed frame in *out.
 * exact: pc is where the thread was stopped (else a return address). Every
 * instruction has its own frame: before the body (the entry, and push rbp
 * or sub rsp) only the return address is on the stack, in the body the
 * whole frame, at the ret the return address again. A caller frame can
 * only be at the return site of the call; a pc anywhere else means the
 * stack is not what the layout says, and the walk stops there. */
static snapprof__reason_t trampoline_frame(const snapprof__jit_region_t *region, uintptr_t pc,
                                           int exact, snapprof_jit_layout_t *out)
{
    const snapprof__jit_trampoline_t *t =
        snapprof__jit_trampoline_shape(region->module.limit - region->module.start);
    if (t == NULL || pc < region->module.start)
        return SNAPPROF__REASON_JIT_PC;
    uintptr_t off = pc - region->module.start;
    if (off >= t->size || (exact ? !(t->starts >> off & 1) : off != t->call_return))
        return SNAPPROF__REASON_JIT_PC;
    if (off < t->body || off == t->size - 1u) {
        snapprof_jit_layout_init_fixed(out, 8, 0);
    } else {
        snapprof_jit_layout_init_fixed(out, 16, 8);
        if (t->saves_fp)
            out->saved_fp_offset = 0;
    }
    return SNAPPROF__REASON_NONE;
}

/* Computes the caller of the JIT frame described by ctx->regs: its return
 * address and the stack pointer and rbp it had. SNAPPROF__REASON_NONE on
 * success, else why not. The reasons are the frame-pointer unwinder's
 * where they mean the same. */
static snapprof__reason_t caller_of(const snapprof_unwind_ctx_t *ctx,
                                    const snapprof__jit_region_t *region, uintptr_t *ret,
                                    uintptr_t *sp_out, uintptr_t *fp_out)
{
    const snapprof_stack_copy_t *stack = ctx->stack;
    uintptr_t sp = ctx->regs.r[SNAPPROF_REG_SP], fp = ctx->regs.r[SNAPPROF_REG_FP];
    const snapprof_jit_layout_t *lay = &region->layout;
    snapprof_jit_layout_t at_pc;
    if (lay->kind == SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE) {
        /* The innermost frame, and one a signal frame interrupted, is at
         * the pc itself; a caller's frame is at its return address - 1. */
        uintptr_t pc = ctx->regs.r[SNAPPROF_REG_PC];
        int exact = ctx->frames[ctx->frame_count - 1].pc == pc;
        snapprof__reason_t why = trampoline_frame(region, pc, exact, &at_pc);
        if (why != SNAPPROF__REASON_NONE)
            return why;
        lay = &at_pc;
    }
    if (lay->kind == SNAPPROF_JIT_LAYOUT_FIXED_FRAME) {
        /* The frame is [sp, sp + frame_size): it must lie in the copy. */
        if (!in_copy(stack, sp, lay->frame_size))
            return SNAPPROF__REASON_SP_OUTSIDE;
        if (sp % 8 != 0)
            return SNAPPROF__REASON_SP_MISALIGNED;
        *ret = word_at(sp + lay->return_address_offset);
        *sp_out = sp + lay->frame_size;
        *fp_out = lay->saved_fp_offset == SNAPPROF_JIT_FP_UNCHANGED
                      ? fp
                      : word_at(sp + (uintptr_t)lay->saved_fp_offset);
        return SNAPPROF__REASON_NONE;
    }
    /* Frame pointer: the record [saved rbp][return address] at rbp. JIT
     * frames need only be word-aligned (V8's are not 16-byte aligned). */
    if (fp == 0 || !in_copy(stack, fp, 2 * sizeof(uintptr_t)))
        return SNAPPROF__REASON_FP_OUTSIDE;
    if (fp % 8 != 0)
        return SNAPPROF__REASON_FP_MISALIGNED;
    if (fp < sp)
        return SNAPPROF__REASON_FP_BELOW_SP;
    uintptr_t next_fp = word_at(fp);
    if (next_fp != 0 && next_fp <= fp)
        return SNAPPROF__REASON_FP_ORDER;
    *ret = word_at(fp + sizeof(uintptr_t));
    *sp_out = fp + 2 * sizeof(uintptr_t);
    *fp_out = next_fp;
    return SNAPPROF__REASON_NONE;
}

static snapprof_unwind_result_t jit_try_unwind(void *user_data, snapprof_unwind_ctx_t *ctx)
{
    (void)user_data;
    for (;;) {
        const snapprof_frame_t *last = &ctx->frames[ctx->frame_count - 1];
        const snapprof__jit_region_t *region = snapprof__jit_region_of(last->module);
        if (region == NULL)
            return SNAPPROF_UNWIND_UNRECOGNIZED_FRAME; /* not ours after all */
        uintptr_t ret, sp, fp;
        snapprof__reason_t why = caller_of(ctx, region, &ret, &sp, &fp);
        if (why != SNAPPROF__REASON_NONE)
            return snapprof__unwind_abort(ctx, why);
        /* The caller's stack pointer lies above this frame's, or the walk
         * could go round in circles. */
        if (sp <= ctx->regs.r[SNAPPROF_REG_SP] || sp > ctx->stack->top)
            return snapprof__unwind_abort(ctx, SNAPPROF__REASON_SP_ORDER);
        if (ret == 0)
            return SNAPPROF_UNWIND_COMPLETED;
        if (snapprof_unwind_push_frame(ctx, ret - 1, SNAPPROF_FRAME_NATIVE, NULL) != 0)
            return SNAPPROF_UNWIND_ABORTED; /* depth cap; the chain notices */
        ctx->regs.r[SNAPPROF_REG_PC] = ret;
        ctx->regs.r[SNAPPROF_REG_SP] = sp;
        ctx->regs.r[SNAPPROF_REG_FP] = fp;
        /* Other callee-saved registers: JIT code saves them where only it
         * knows, so they keep the values they had. */
        if (!jit_can_unwind_from(NULL, &ctx->frames[ctx->frame_count - 1]))
            return SNAPPROF_UNWIND_UNRECOGNIZED_FRAME; /* native code: hand back */
    }
}

static const snapprof_unwinder_ops_t jit_ops = {
    .version = SNAPPROF_UNWINDER_OPS_VERSION,
    .name = "jit",
    .xCanUnwindFrom = jit_can_unwind_from,
    .xTryUnwind = jit_try_unwind,
};

int snapprof_jit_unwinder_create(snapprof_unwinder_t **out)
{
    return snapprof_unwinder_create(&jit_ops, NULL, out);
}
