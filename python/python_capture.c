/* The walk of a thread's interpreter frames, in its signal handler.
 *
 * RUNS IN THE SIGNAL HANDLER: no allocation, no locks, no calls into
 * libpython. The thread state comes from the table the sampling side
 * refreshes, or from the GIL holder (snapprof__py_tstate_find(),
 * python_runtime.c), read with process_vm_readv, which fails instead of
 * faulting; it must name this thread (native_thread_id).
 * A frame is read with plain loads only when it lies inside one of the
 * thread's data-stack chunks (the used part, found from the thread state
 * and each chunk's header, read checked), aligned; any other frame (a
 * generator's, inside its object) is read checked. The chain is walked
 * through previous with Brent's cycle check and a cap; a frame whose code
 * object is not a code object, or that cannot be read, ends the walk
 * (SNAPPROF__PY_BROKEN: frames are linked without barriers, and a signal
 * can land between two stores). The code objects' fields that the drain
 * checks against (type, size, first line, name pointers) are read checked
 * in batches, one system call per batch. */
#include "python/python_internal.h"

#include "stack_copier/stack_copier.h"

#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define CHUNKS_MAX 64
#define BATCH 32

typedef struct chunk_range {
    uintptr_t lo, hi; /* the used part of one chunk: frames lie in [lo, hi) */
} chunk_range_t;

typedef struct walk {
    const snapprof__py_layout_t *l;
    chunk_range_t chunks[CHUNKS_MAX];
    size_t nchunks;
    uintptr_t next_chunk; /* the next older chunk to read, 0 when none */
} walk_t;

/* Reads the header of the next older chunk into w. Returns 0, -1 when
 * there is none or it cannot be read. Async-signal-safe. */
static int more_chunks(walk_t *w)
{
    if (w->next_chunk == 0 || w->nchunks == CHUNKS_MAX)
        return -1;
    uintptr_t hdr[3]; /* previous, size, top (words from data) */
    if ((w->next_chunk & 7) || snapprof__py_read(w->next_chunk, hdr, sizeof hdr) < 0)
        return -1;
    uintptr_t lo = w->next_chunk + w->l->chunk_data;
    if (hdr[1] > (1u << 30) || hdr[2] > hdr[1] / sizeof(uintptr_t))
        return -1;
    w->chunks[w->nchunks++] = (chunk_range_t){lo, lo + hdr[2] * sizeof(uintptr_t)};
    w->next_chunk = hdr[0];
    return 0;
}

/* Whether the frame at f lies inside a known chunk, reading older chunk
 * headers as needed (a caller's frame is in the same chunk or an older
 * one). Async-signal-safe. */
static int in_chunks(walk_t *w, uintptr_t f)
{
    size_t need = w->l->frame_size;
    for (;;) {
        for (size_t i = 0; i < w->nchunks; i++)
            if (f >= w->chunks[i].lo && f < w->chunks[i].hi && w->chunks[i].hi - f >= need)
                return 1;
        if (more_chunks(w) < 0)
            return 0;
    }
}

/* What a batch reads of one code object: the span of its fields from
 * code_type to the end of code_qualname, in one piece (one iovec, so the
 * kernel pins its page once rather than once per field: at 50 frames deep
 * three iovecs per code object made the handler's pause 110 us at p50). */
#define CODE_SPAN_MAX 128

/* Fills the code fields of cap->frames[from, to) with one checked read of
 * the distinct code objects among them. A frame whose code object cannot
 * be read or is not a code object ends the walk there: returns the new
 * count. Async-signal-safe. */
static uint32_t check_codes(const snapprof__py_layout_t *l, snapprof__py_capture_t *cap,
                            uint32_t from, uint32_t to, uintptr_t *prev_instr)
{
    size_t span = l->code_qualname + sizeof(uintptr_t) - l->code_type;
    if (span > CODE_SPAN_MAX || l->code_size < l->code_type || l->code_firstlineno < l->code_type ||
        l->code_filename < l->code_type ||
        l->code_filename + 3 * sizeof(uintptr_t) > l->code_type + span)
        return from; /* not a layout this reader knows how to batch */
    uint8_t f[BATCH][CODE_SPAN_MAX];
    struct iovec local[BATCH], remote[BATCH];
    uintptr_t codes[BATCH];
    size_t ncodes = 0;
    uint8_t which[BATCH];
    for (uint32_t i = from; i < to; i++) {
        uintptr_t code = cap->frames[i].code & ~(uintptr_t)SNAPPROF__PY_REC_FLAGS;
        size_t k = 0;
        while (k < ncodes && codes[k] != code)
            k++;
        if (k == ncodes) {
            codes[ncodes] = code;
            local[k] = (struct iovec){f[k], span};
            remote[k] = (struct iovec){(void *)(code + l->code_type), span};
            ncodes++;
        }
        which[i - from] = (uint8_t)k;
    }
    ssize_t got =
        syscall(SYS_process_vm_readv, atomic_load_explicit(&snapprof__py.pid, memory_order_relaxed),
                local, (unsigned long)ncodes, remote, (unsigned long)ncodes, 0UL);
    /* A partial read stops at the first iovec that failed: the code
     * objects read whole are those before it. */
    size_t whole = got <= 0 ? 0 : (size_t)got / span;
    for (uint32_t i = from; i < to; i++) {
        size_t k = which[i - from];
        uintptr_t type, names[3];
        intptr_t size;
        int32_t firstlineno;
        if (k >= whole)
            return i;
        memcpy(&type, f[k], sizeof type);
        memcpy(&size, f[k] + (l->code_size - l->code_type), sizeof size);
        memcpy(&firstlineno, f[k] + (l->code_firstlineno - l->code_type), sizeof firstlineno);
        memcpy(names, f[k] + (l->code_filename - l->code_type), sizeof names);
        if (type != snapprof__py.code_type || size < 0 || size > (1 << 28))
            return i;
        snapprof__py_frame_rec_t *r = &cap->frames[i];
        uintptr_t code = r->code & ~(uintptr_t)SNAPPROF__PY_REC_FLAGS;
        uintptr_t first = code + l->code_code;
        uintptr_t pi = prev_instr[i - from];
        /* prev_instr: one code unit before the first instruction in a
         * frame that has not started; anything outside the code is taken
         * as that too (shown at the first line). */
        intptr_t off = ((intptr_t)pi - (intptr_t)first) / 2;
        r->instr = (pi >= first - 2 && off < size) ? (int32_t)off : -1;
        r->firstlineno = firstlineno;
        r->names = snapprof__py_names_check(names[0], names[2], size);
    }
    return to;
}

/* The walk of thread tid's frames into cap. stopped: tid is the calling
 * thread, stopped in its handler, so frames inside its data-stack chunks
 * can be read with plain loads; else (a blocked thread read from the
 * sampling thread, which may wake and pop a chunk meanwhile) every read is
 * checked. Async-signal-safe. */
static void capture(snapprof__py_capture_t *cap, pid_t tid, int stopped)
{
    cap->count = 0;
    cap->status = 0;
    if (!atomic_load_explicit(&snapprof__py.ready, memory_order_acquire)) {
        cap->status = SNAPPROF__PY_OFF;
        return;
    }
    const snapprof__py_layout_t *l = snapprof__py.layout;
    uint8_t tsb[512];
    if (snapprof__py_tstate_find(tid, tsb, sizeof tsb) == 0) {
        cap->status = SNAPPROF__PY_NO_STATE;
        return;
    }
    uintptr_t cframe, chunk, top;
    memcpy(&cframe, tsb + l->ts_cframe, sizeof cframe);
    memcpy(&chunk, tsb + l->ts_datastack_chunk, sizeof chunk);
    memcpy(&top, tsb + l->ts_datastack_top, sizeof top);
    /* The current frame and the current chunk's header in one read. */
    uintptr_t frame = 0, hdr[3] = {0, 0, 0};
    if (cframe == 0 || (cframe & 7) || (chunk & 7)) {
        cap->status = SNAPPROF__PY_BROKEN;
        return;
    }
    struct iovec local[2] = {{&frame, sizeof frame}, {hdr, sizeof hdr}};
    struct iovec remote[2] = {{(void *)(cframe + l->cframe_current_frame), sizeof frame},
                              {(void *)chunk, sizeof hdr}};
    ssize_t got =
        syscall(SYS_process_vm_readv, atomic_load_explicit(&snapprof__py.pid, memory_order_relaxed),
                local, chunk ? 2UL : 1UL, remote, chunk ? 2UL : 1UL, 0UL);
    if (got < (ssize_t)sizeof frame) {
        cap->status = SNAPPROF__PY_BROKEN;
        return;
    }
    walk_t w = {.l = l, .nchunks = 0, .next_chunk = 0};
    /* The current chunk: used up to the thread's datastack_top. */
    if (got == (ssize_t)(sizeof frame + sizeof hdr) && top >= chunk + l->chunk_data &&
        top - chunk <= hdr[1]) {
        w.chunks[w.nchunks++] = (chunk_range_t){chunk + l->chunk_data, top};
        w.next_chunk = hdr[0];
    }

    uintptr_t prev_instr[BATCH];
    uint32_t n = 0, checked = 0;
    /* Brent's cycle check: the frame at the last power of two steps. */
    uintptr_t mark = 0;
    uint32_t power = 1, lam = 0;
    uint8_t fb[128];
    while (frame != 0) {
        if (n == SNAPPROF__PY_FRAMES_MAX) {
            cap->status |= SNAPPROF__PY_TRUNCATED;
            break;
        }
        if ((frame & 7) || l->frame_size > sizeof fb) {
            cap->status |= SNAPPROF__PY_BROKEN;
            break;
        }
        if (stopped && in_chunks(&w, frame))
            memcpy(fb, (const void *)frame, l->frame_size); /* inside a chunk: mapped */
        else if (snapprof__py_read(frame, fb, l->frame_size) < 0) {
            cap->status |= SNAPPROF__PY_BROKEN;
            break;
        }
        uintptr_t code, previous, pi;
        memcpy(&code, fb + l->frame_code, sizeof code);
        memcpy(&previous, fb + l->frame_previous, sizeof previous);
        memcpy(&pi, fb + l->frame_prev_instr, sizeof pi);
        if (code == 0 || (code & 7)) {
            cap->status |= SNAPPROF__PY_BROKEN;
            break;
        }
        cap->frames[n].code = code | (fb[l->frame_is_entry] ? SNAPPROF__PY_REC_ENTRY : 0);
        prev_instr[n - checked] = pi;
        n++;
        if (n - checked == BATCH) {
            uint32_t ok = check_codes(l, cap, checked, n, prev_instr);
            if (ok < n) {
                n = ok;
                cap->status |= SNAPPROF__PY_BROKEN;
                cap->count = n;
                return;
            }
            checked = n;
        }
        if (previous != 0 && (previous == frame || previous == mark)) {
            cap->status |= SNAPPROF__PY_BROKEN; /* a cycle */
            break;
        }
        if (++lam == power) {
            mark = frame;
            power *= 2;
            lam = 0;
        }
        frame = previous;
    }
    if (checked < n) {
        uint32_t ok = check_codes(l, cap, checked, n, prev_instr);
        if (ok < n) {
            n = ok;
            cap->status |= SNAPPROF__PY_BROKEN;
        }
    }
    cap->count = n;
}

void snapprof__python_capture(snapprof__py_capture_t *cap)
{
    capture(cap, snapprof__gettid_cached(), 1);
}

void snapprof__python_capture_blocked(snapprof__py_capture_t *cap, pid_t tid)
{
    capture(cap, tid, 0);
}
