/* The splice: each native frame of the evaluation loop in an unwound
 * stack is replaced by the run of Python frames it was running, innermost
 * first, up to and including the run's entry frame (is_entry: the first
 * frame of one _PyEval_EvalFrameDefault call). Sampling side. */
#include "python/python_internal.h"

size_t snapprof__python_splice(const snapprof__py_capture_t *cap, const snapprof_frame_t *in,
                               size_t n, snapprof_frame_t *out, size_t max,
                               snapprof__py_splice_stats_t *st)
{
    const snapprof_module_t *m = snapprof__py_module();
    size_t o = 0, next = 0, count = cap->count, spliced = 0;
    st->learned_full += snapprof__py_learned_full_take();
    if (cap->status & SNAPPROF__PY_TRUNCATED)
        st->truncated++;
    if (cap->status & SNAPPROF__PY_BROKEN)
        st->broken++;
    if (m != NULL && count > 0)
        snapprof__py_names_lock();
    for (size_t i = 0; i < n && o < max; i++) {
        if (m == NULL || next >= count || in[i].kind != SNAPPROF_FRAME_NATIVE ||
            !snapprof__python_is_eval_pc(in[i].pc)) {
            out[o++] = in[i];
            continue;
        }
        /* One run: frames up to and including the next entry frame. */
        for (; next < count && o < max; next++) {
            int reused;
            uintptr_t pc = snapprof__py_frame_pc(&cap->frames[next], &reused);
            st->code_reused += reused != 0;
            if (pc != 0) {
                out[o++] = (snapprof_frame_t){.pc = pc, .module = m, .kind = SNAPPROF_FRAME_NATIVE};
                spliced++;
            }
            if (cap->frames[next].code & SNAPPROF__PY_REC_ENTRY) {
                next++;
                break;
            }
        }
    }
    if (m != NULL && count > 0)
        snapprof__py_names_unlock();
    /* Runs left over: the native walk ended first (or missed an evaluation
     * loop frame). They are not placed: a Python frame under the wrong C
     * caller would be a made-up stack. */
    if (next < count)
        st->unmatched++;
    if (spliced) {
        st->samples++;
        st->frames += spliced;
    }
    return o;
}
