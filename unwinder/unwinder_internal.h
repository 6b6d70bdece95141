/* Unwinders as the profiler core sees them, and the chaining loop. Internal. */
#ifndef SNAPPROF_UNWINDER_INTERNAL_H
#define SNAPPROF_UNWINDER_INTERNAL_H

#include <snapprof/unwinder.h>

struct snapprof_unwinder {
    const snapprof_unwinder_ops_t *ops;
    void *user_data;
};

/* Result of unwinding one sample through the chain. */
typedef struct snapprof__unwind_outcome {
    int completed;       /* an unwinder reported COMPLETED */
    int aborted;         /* an unwinder reported ABORTED */
    int truncated_depth; /* the frame cap was reached */
    int unrecognized;    /* no unwinder claimed the last frame */
    const char *abort_reason;
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
