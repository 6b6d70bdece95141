/* Unwinders as the profiler core sees them, and the chaining loop. Internal. */
#ifndef SNAPPROF_UNWINDER_INTERNAL_H
#define SNAPPROF_UNWINDER_INTERNAL_H

#include <snapprof/unwinder.h>

typedef struct snapprof__cfi snapprof__cfi_t; /* unwinder/cfi_engine.h */

struct snapprof_unwinder {
    const snapprof_unwinder_ops_t *ops;
    void *user_data;
    /* The CFI engine the unwinder owns, set by the create function of the
     * libunwind, hybrid, CFI table and .debug_frame unwinders (the last two
     * use it for its object table and its reads; the CFI table unwinder
     * also for the frames its tables cannot step); NULL for others. */
    snapprof__cfi_t *cfi;
};

/* unwinder->cfi, or NULL when unwinder is NULL: the seam tests, the fuzzer
 * and the benchmark use to reach an unwinder's engine. */
snapprof__cfi_t *snapprof__cfi_of(snapprof_unwinder_t *unwinder);

/* snapprof_unwind_push_frame(ctx, pc, SNAPPROF_FRAME_NATIVE, NULL) for a
 * caller that is likely in module near (the callee's): when it is, the
 * frame gets near without a trip through the module cache's lock, with the
 * same answer the cache would give. Sampler thread. */
int snapprof__unwind_push_frame_near(snapprof_unwind_ctx_t *ctx, uintptr_t pc,
                                     const snapprof_module_t *near);

/* Why a walk was aborted, as the profiler counts it: the unwinder's
 * snapprof_unwind_error_t, or TRUNCATED_COPY when the copy was truncated. */
typedef enum {
    SNAPPROF__ABORT_OTHER = 0,
    SNAPPROF__ABORT_BAD_FRAME,      /* a frame failed the unwinder's checks */
    SNAPPROF__ABORT_NO_INFO,        /* no unwind information for a pc */
    SNAPPROF__ABORT_MEMORY,         /* it needed memory outside the copy and the modules */
    SNAPPROF__ABORT_TRUNCATED_COPY, /* it ran off the end of a truncated copy */
} snapprof__abort_kind_t;

/* The built-in unwinders' abort reasons, one table:
 * XX(name, code, text). Each is a snapprof_unwind_error_t code, which the
 * profiler counts, and a text, which the outcome carries for logs and
 * tests. snapprof__reason_t is SNAPPROF__REASON_<name>. */
#define SNAPPROF__REASON_MAP(XX)                                                                   \
    /* The frame-pointer unwinder's (the hybrid and JIT unwinders share them). */                  \
    XX(FP_OUTSIDE, SNAPPROF_UNWIND_EBADFRAME, "frame pointer outside the stack")                   \
    XX(FP_MISALIGNED, SNAPPROF_UNWIND_EBADFRAME, "misaligned frame pointer")                       \
    XX(FP_BELOW_SP, SNAPPROF_UNWIND_EBADFRAME, "frame pointer below the stack pointer")            \
    XX(FP_ORDER, SNAPPROF_UNWIND_EBADFRAME, "frame pointers do not increase")                      \
    /* The JIT unwinder's fixed frames. */                                                         \
    XX(SP_OUTSIDE, SNAPPROF_UNWIND_EBADFRAME, "stack pointer outside the stack")                   \
    XX(SP_MISALIGNED, SNAPPROF_UNWIND_EBADFRAME, "misaligned stack pointer")                       \
    XX(JIT_PC, SNAPPROF_UNWIND_EBADFRAME, "JIT frame at a pc its layout does not allow")           \
    /* The CFI unwinders' (and the JIT unwinder's SP_ORDER). */                                    \
    XX(SP_ORDER, SNAPPROF_UNWIND_EBADFRAME, "stack pointer does not increase")                     \
    XX(CFI_BAD_FRAME, SNAPPROF_UNWIND_EBADFRAME, "CFI gives an impossible frame")                  \
    XX(NO_INFO, SNAPPROF_UNWIND_ENOINFO, "no unwind info for the pc")                              \
    XX(MEMORY, SNAPPROF_UNWIND_EMEMORY,                                                            \
       "unwind info needs memory outside the copy and the modules")                                \
    XX(LIBUNWIND, SNAPPROF_UNWIND_EUNSPEC, "libunwind failed")                                     \
    /* The .debug_frame unwinder's: a CFI rule in a form it does not evaluate. */                  \
    XX(CFI_UNSUPPORTED, SNAPPROF_UNWIND_ENOINFO,                                                   \
       "CFI rule in a form the unwinder does not evaluate")

typedef enum {
    SNAPPROF__REASON_NONE = 0, /* no abort */
#define SNAPPROF__REASON_ENUM_(name, code, text) SNAPPROF__REASON_##name,
    SNAPPROF__REASON_MAP(SNAPPROF__REASON_ENUM_)
#undef SNAPPROF__REASON_ENUM_
} snapprof__reason_t;

/* Records reason in ctx (abort_error and abort_reason) and returns
 * SNAPPROF_UNWIND_ABORTED. */
snapprof_unwind_result_t snapprof__unwind_abort(snapprof_unwind_ctx_t *ctx,
                                                snapprof__reason_t reason);

/* Result of unwinding one sample through the chain. */
typedef struct snapprof__unwind_outcome {
    int completed;                           /* an unwinder reported COMPLETED */
    const snapprof_unwinder_t *completed_by; /* which one, when completed */
    int aborted;                             /* an unwinder reported ABORTED */
    int truncated_depth;                     /* the frame cap was reached */
    int unrecognized;                        /* no unwinder claimed the last frame */
    const char *abort_reason;                /* the unwinder's text, if it gave one */
    snapprof__abort_kind_t abort_kind;       /* when aborted: from its code and the copy */
} snapprof__unwind_outcome_t;

/* Whether u is a CFI tables unwinder (snapprof_cfi_table_unwinder_create()):
 * a walk it completed found every caller from CFI, and took rbp only from
 * where a frame had saved it, so it is right even from a copy whose rbp
 * the kernel did not say. Sampler thread only. */
int snapprof__unwinder_is_cfi_table(const snapprof_unwinder_t *u);

/* The CFI tables unwinders' tables, together (cfi_table_unwinder.c): how
 * many, their bytes and the CPU time spent compiling them, for the stats.
 * Any thread. */
void snapprof__cfi_table_store_totals(uint64_t *tables, uint64_t *bytes, uint64_t *build_ns);

/* Unwinds one stack copy: frame 0 from regs' pc, then the chain, highest
 * priority (index 0) first. frames must hold max_frames entries; returns the
 * number of frames found. A marker frame ("[truncated]", "[unknown]",
 * "[unwind error]") is appended when the walk ended early, space allowing.
 * Sampler thread only. */
size_t snapprof__unwind_chain(snapprof_unwinder_t *const *unwinders, size_t unwinder_count,
                              const snapprof_regs_t *regs, const snapprof_stack_copy_t *stack,
                              snapprof_frame_t *frames, size_t max_frames,
                              snapprof__unwind_outcome_t *outcome);

#endif
