/* The frame-pointer rescue for stack copies that come without rbp (wall
 * mode's blocked threads, read from /proc): guesses where the frame
 * records lie and walks the chain again from each guess. */
#include "unwinder/unwinder_fp_guess.h"

#include "module_cache/module_cache.h"
#include "unwinder/cfi_engine.h"
#include "unwinder/unwinder_internal.h"

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

/* What is known of the function whose frame record is sought (the one the
 * walk without rbp stopped in): where it starts, and the engine that can
 * read code and find other functions' starts. */
typedef struct seeker {
    snapprof__cfi_t *cfi; /* NULL: nothing is checked */
    uintptr_t start;      /* 0: not known */
    const snapprof_stack_copy_t *stack;
} seeker_t;

/* Whether the record whose return address is ra is the sought function's
 * own: the instruction before ra is a direct call (e8 rel32) to the
 * sought function's entry. A call through a PLT stub, a register or
 * memory, or a tail call that reached it, does not say so; nor does
 * anything else prove a record someone else's, so this only finds the
 * records that are surely right. */
static int calls_sought(const seeker_t *k, uintptr_t ra)
{
    if (!k->cfi || k->start == 0 || ra < 8)
        return 0;
    uintptr_t w;
    if (snapprof__cfi_read_word(k->cfi, k->stack, ra - 8, &w) != 0)
        return 0;
    if (((w >> 24) & 0xff) != 0xe8)
        return 0;
    return ra + (uintptr_t)(intptr_t)(int32_t)(uint32_t)(w >> 32) == k->start;
}

/* How many plausible records above the first one are looked at for one
 * that calls_sought() finds right. */
#define MATCH_LOOKS 16

/* The address of the first frame record in the copy at or above from, or
 * above the word that holds return_address when that is not 0: the frame
 * pointer of the frame that return_address returns into, most likely. At
 * most max_scan bytes are searched (0: up to the top). A record among the
 * first MATCH_LOOKS that returns from a direct call to the sought
 * function (calls_sought()) is taken before the first: stale records of
 * calls made earlier at that depth lie below it, in the sought frame's
 * uninitialised locals, and a walk from one splices their functions in
 * as callers ("read waiter stale3 stale2 stale1 stale0 thread_main"). */
static uintptr_t guess_fp(const snapprof_stack_copy_t *stack, uintptr_t from,
                          uintptr_t return_address, size_t max_scan, const seeker_t *k)
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
    uintptr_t first = 0;
    int looks = 0;
    for (; a <= end; a += 8) {
        if (!frame_record_at(stack, a))
            continue;
        if (first == 0)
            first = a;
        uintptr_t ra;
        memcpy(&ra, (const void *)(a + 8), sizeof ra);
        if (calls_sought(k, ra))
            return a;
        if (++looks > MATCH_LOOKS || !k->cfi || k->start == 0)
            break;
    }
    return first;
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
 * frame under read() held three, from the loop that ran before it). A
 * record that returns from a direct call to the function is taken first
 * (guess_fp()); otherwise walks from stale records stop early or splice
 * in callers, and up to GUESSES are tried.
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
    /* The function the walk stopped in (a frame after the first holds its
     * return address less 1: inside the call, as ra above undoes). */
    seeker_t k = {.stack = stack};
    for (size_t i = 0; i < unwinder_count && !k.cfi; i++)
        k.cfi = snapprof__cfi_of(unwinders[i]);
    if (k.cfi && snapprof__cfi_function_start(k.cfi, frames[last - 1].pc, &k.start) != 0)
        k.start = 0;
    for (int attempt = 0; attempt < GUESSES; attempt++) {
        uintptr_t fp = guess_fp(stack, from, attempt == 0 ? ra : 0, 64u << 10, &k);
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
