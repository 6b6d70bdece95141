/* The frame-pointer rescue for stack copies that come without rbp (wall
 * mode's blocked threads, read from /proc): guesses where the frame
 * records lie and walks the chain again from each guess. */
#include "unwinder/unwinder_fp_guess.h"

#include "module_cache/module_cache.h"

#include <stdlib.h>
#include <string.h>

/* How many frame records above the stopped walk are tried. */
#define GUESSES 8

/* Wall mode, blocked threads: whether the copy's word at a is a plausible frame record: a saved
 * frame pointer that is 0 or points higher up the copy, then a return address in a loaded module's
 * code. */
static int frame_record_at(const snapprof_stack_copy_t *stack, uintptr_t a)
{
    if (a < stack->bottom || a + 16 > stack->top)
        return 0;
    uintptr_t saved, ra;
    memcpy(&saved, (const void *)a, sizeof saved);
    memcpy(&ra, (const void *)(a + 8), sizeof ra);
    if (saved != 0 && (saved <= a || saved + 16 > stack->top || saved % 8 != 0))
        return 0;
    const snapprof_module_t *m = snapprof__module_find_at(ra, 0);
    return m && m->kind == SNAPPROF_MODULE_NATIVE && m->is_loaded;
}

/* The address of the first frame record in the copy at or above from, or
 * above the word that holds return_address when that is not 0: the frame
 * pointer of the frame that return_address returns into, most likely. At
 * most max_scan bytes are searched (0: up to the top). */
static uintptr_t guess_fp(const snapprof_stack_copy_t *stack, uintptr_t from,
                          uintptr_t return_address, size_t max_scan)
{
    from = (from + 7) & ~(uintptr_t)7;
    uintptr_t end = stack->top - 16;
    if (max_scan && from + max_scan < end)
        end = from + max_scan;
    uintptr_t a = from;
    if (return_address != 0) {
        /* The frame whose caller is return_address starts just above the
         * word that holds it. */
        for (; a + 8 <= stack->top; a += 8) {
            uintptr_t w;
            memcpy(&w, (const void *)a, sizeof w);
            if (w == return_address)
                break;
        }
        if (a + 8 > stack->top)
            return 0;
        a += 8;
    }
    for (; a <= end; a += 8)
        if (frame_record_at(stack, a))
            return a;
    return 0;
}

/* Whether walk a (n_a frames) is better than walk b: it reached the
 * outermost frame and b did not, or it found more frames. */
static int walk_better(size_t n_a, const snapprof__unwind_outcome_t *a, size_t n_b,
                       const snapprof__unwind_outcome_t *b)
{
    if (a->completed != b->completed)
        return a->completed;
    return n_a > n_b;
}

/* A blocked thread's copy comes with pc and sp only: the kernel does not
 * say what rbp held, and code with frame records finds its CFA from rbp.
 * frames holds the walk made without it (count frames). Where a frame
 * record lies above the frame that walk stopped at, rbp most likely held
 * its address (the first frame record above a frame is its own, as
 * Breakpad's stack scan assumes): unwind again from there, trying up to
 * GUESSES such records, and keep the best walk. Returns its frame count.
 * Stale records lie there too: a frame's uninitialised locals keep the
 * records of calls made earlier at that depth (an ASan interceptor's
 * frame under read() held three, from the loop that ran before it), and
 * walks from them stop early: three guesses were too few for that.
 * A walk the CFI tables completed needed no rbp it did not find saved on
 * the stack: no guess can better it, and the second walk would cost as
 * much as the first. A walk another unwinder completed may have stopped
 * at the rbp of 0 the copy holds (the frame-pointer unwinder takes it for
 * the outermost frame), so it is tried again. */
size_t snapprof__unwind_guessing_fp(snapprof_unwinder_t *const *unwinders, size_t unwinder_count,
                                    snapprof_regs_t *regs, const snapprof_stack_copy_t *stack,
                                    snapprof_frame_t *frames, size_t count, size_t max_frames,
                                    snapprof_frame_t **scratch, snapprof__unwind_outcome_t *outcome)
{
    if (outcome->completed && snapprof__unwinder_is_cfi_table(outcome->completed_by))
        return count;
    size_t last = count;
    if (last > 0 && frames[last - 1].kind == SNAPPROF_FRAME_MARKER)
        last--;
    if (last == 0)
        return count;
    if (!*scratch && !(*scratch = calloc(max_frames, sizeof **scratch)))
        return count;
    uintptr_t ra = last > 1 ? frames[last - 1].pc + 1 : 0;
    uintptr_t from = regs->r[SNAPPROF_REG_SP];
    for (int attempt = 0; attempt < GUESSES; attempt++) {
        uintptr_t fp = guess_fp(stack, from, attempt == 0 ? ra : 0, 64u << 10);
        if (fp == 0)
            break;
        regs->r[SNAPPROF_REG_FP] = fp;
        snapprof__unwind_outcome_t o;
        size_t n = snapprof__unwind_chain(unwinders, unwinder_count, regs, stack, *scratch,
                                          max_frames, &o);
        if (walk_better(n, &o, count, outcome)) {
            memcpy(frames, *scratch, n * sizeof *frames);
            count = n;
            *outcome = o;
        }
        if (outcome->completed)
            break;
        from = fp + 16;
    }
    return count;
}
