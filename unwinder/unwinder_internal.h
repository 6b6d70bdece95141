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

/* Why a walk was aborted, as the profiler counts it. */
typedef enum {
    SNAPPROF__ABORT_OTHER = 0,
    SNAPPROF__ABORT_BAD_FRAME,      /* a frame failed the unwinder's checks */
    SNAPPROF__ABORT_NO_INFO,        /* no unwind information for a pc */
    SNAPPROF__ABORT_MEMORY,         /* it needed memory outside the copy and the modules */
    SNAPPROF__ABORT_TRUNCATED_COPY, /* it ran off the end of a truncated copy */
} snapprof__abort_kind_t;

/* Abort reasons of the CFI unwinders; snapprof__abort_kind() maps these
 * (and the frame-pointer unwinder's) to kinds. */
#define SNAPPROF__REASON_NO_INFO "no unwind info for the pc"
#define SNAPPROF__REASON_MEMORY "unwind info needs memory outside the copy and the modules"
#define SNAPPROF__REASON_SP_ORDER "stack pointer does not increase"
#define SNAPPROF__REASON_CFI_BAD_FRAME "CFI gives an impossible frame"
#define SNAPPROF__REASON_LIBUNWIND "libunwind failed"
/* The .debug_frame unwinder's, besides the ones above: a CFI rule in a
 * form it does not evaluate (counted as no unwind info). */
#define SNAPPROF__REASON_CFI_UNSUPPORTED "CFI rule in a form the unwinder does not evaluate"

/* The kind of an abort reason string; OTHER for unknown or NULL ones. */
snapprof__abort_kind_t snapprof__abort_kind(const char *reason);

/* Result of unwinding one sample through the chain. */
typedef struct snapprof__unwind_outcome {
    int completed;       /* an unwinder reported COMPLETED */
    int aborted;         /* an unwinder reported ABORTED */
    int truncated_depth; /* the frame cap was reached */
    int unrecognized;    /* no unwinder claimed the last frame */
    const char *abort_reason;
    snapprof__abort_kind_t abort_kind; /* when aborted */
} snapprof__unwind_outcome_t;

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
