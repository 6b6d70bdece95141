/* The frame-pointer rescue (unwinder_fp_guess.c): for the sampler, which
 * unwinds stack copies that come without rbp. Internal. */
#ifndef SNAPPROF_UNWINDER_FP_GUESS_H
#define SNAPPROF_UNWINDER_FP_GUESS_H

#include "unwinder/unwinder_internal.h"

/* Walks a copy whose rbp is not known (wall mode's blocked threads, read
 * from /proc) again from the frame records found above the frame where the
 * first walk stopped, keeping the best walk. frames (max_frames entries)
 * holds the first walk's count frames and *outcome its outcome; both are
 * replaced by a better walk. regs' rbp is overwritten with the guesses.
 * *scratch is a second array of max_frames frames, NULL until the first
 * call that needs it allocates it (calloc); the caller frees it. Returns
 * the frame count of the walk kept. Sampler thread only, as
 * snapprof__unwind_chain(). */
size_t snapprof__unwind_guessing_fp(snapprof_unwinder_t *const *unwinders, size_t unwinder_count,
                                    snapprof_regs_t *regs, const snapprof_stack_copy_t *stack,
                                    snapprof_frame_t *frames, size_t count, size_t max_frames,
                                    snapprof_frame_t **scratch,
                                    snapprof__unwind_outcome_t *outcome);

#endif
