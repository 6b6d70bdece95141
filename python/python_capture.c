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
 * in batches, one system call per batch.
 *
 * Stack: the handler may run on a small alternate signal stack (CPython's
 * faulthandler gives one of SIGSTKSZ + AT_MINSIGSTKSZ bytes), so every
 * buffer of more than a few hundred bytes lives in a scratch area
 * (snapprof__py_scratch_t: one of a few shared ones, claimed for the
 * capture, else the capture slot's own), never on the stack. */
#include "python/python_internal.h"

#include "common/seccomp.h"
#include "stack_copier/stack_copier.h"

#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define CHUNKS_MAX SNAPPROF__PY_CHUNKS_MAX
#define BATCH SNAPPROF__PY_CODE_BATCH

typedef struct walk {
    const snapprof__py_layout_t *l;
    snapprof__py_scratch_t *s; /* s->chunks[0, nchunks): the chunks known */
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
    w->s->chunks[w->nchunks].lo = lo;
    w->s->chunks[w->nchunks++].hi = lo + hdr[2] * sizeof(uintptr_t);
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
            if (f >= w->s->chunks[i].lo && f < w->s->chunks[i].hi && w->s->chunks[i].hi - f >= need)
                return 1;
        if (more_chunks(w) < 0)
            return 0;
    }
}

#define CODE_SPAN_MAX SNAPPROF__PY_CODE_SPAN_MAX

/* Code objects closer than this (the end of one span to the start of the
 * next) are read as one remote range, the bytes between them copied too.
 * process_vm_readv pins and copies each remote iovec on its own (about
 * 0.2 us an iovec on the machine measured) against about 0.06 us a KiB
 * copied. Code objects made together lie together (3.11's are 216-byte
 * pymalloc blocks, 224 apart in a pool), so a batch of 64 is a few ranges
 * instead of 64. */
#define CODE_GAP_MAX 1024

_Static_assert(SNAPPROF__PY_CODE_STAGE >= SNAPPROF__PY_CODE_BATCH * SNAPPROF__PY_CODE_SPAN_MAX,
               "a batch's spans without gaps must fit the stage");

size_t snapprof__py_read_codes(snapprof__py_scratch_t *s, size_t n, size_t off, size_t span)
{
    const uintptr_t *codes = s->codes;
    uint8_t *stage = s->stage, *ok = s->ok, *order = s->order;
    size_t *end = s->end;
    struct iovec *local = s->local, *remote = s->remote;
    /* Shell sort of the indices by address (n <= BATCH; gaps after
     * Ciura, the last 1: an insertion sort that ends it sorted). The walk
     * meets code objects innermost first, often in the reverse of the
     * order they were made in: a plain insertion sort's worst case, 14,000
     * instructions of a 50-deep capture's 29,000 (callgrind). */
    static const uint8_t gaps[] = {23, 10, 4, 1};
    for (size_t k = 0; k < n; k++)
        order[k] = (uint8_t)k;
    for (size_t g = 0; g < sizeof gaps; g++) {
        size_t gap = gaps[g];
        for (size_t i = gap; i < n; i++) {
            uint8_t v = order[i];
            size_t j = i;
            while (j >= gap && codes[order[j - gap]] > codes[v]) {
                order[j] = order[j - gap];
                j -= gap;
            }
            order[j] = v;
        }
    }
    /* The ranges land one after the other in stage, through a single
     * local iovec: the kernel copies into each local iovec on its own
     * (about 0.1 us apiece measured), so one per code object and one per
     * gap (129 for 64 code objects) cost more than the pins. A gap is
     * merged only while the spans still to come fit behind it. */
    size_t nr = 0, total = 0;
    uintptr_t cur = 0; /* the end of the last remote range */
    for (size_t j = 0; j < n; j++) {
        size_t k = order[j];
        uintptr_t a = codes[k] + off;
        if (nr > 0 && a >= cur && a - cur <= CODE_GAP_MAX &&
            total + (a - cur) + (n - j) * span <= SNAPPROF__PY_CODE_STAGE) {
            total += a - cur;
            remote[nr - 1].iov_len += a + span - cur;
        } else {
            remote[nr++] = (struct iovec){(void *)a, span};
        }
        total += span;
        end[k] = total;
        cur = a + span;
    }
    local[0] = (struct iovec){stage, total};
    pid_t pid = atomic_load_explicit(&snapprof__py.pid, memory_order_relaxed);
    ssize_t got = snapprof__process_vm_readv(pid, local, 1, remote, (unsigned long)nr);
    size_t nmiss = 0;
    for (size_t k = 0; k < n; k++) {
        ok[k] = got > 0 && end[k] <= (size_t)got;
        if (!ok[k]) {
            local[nmiss] = (struct iovec){stage + end[k] - span, span}; /* its place */
            remote[nmiss] = (struct iovec){(void *)(codes[k] + off), span};
            order[nmiss++] = (uint8_t)k;
        }
    }
    if (nmiss == 0)
        return nr;
    /* A partial read stops at the first remote byte that could not be
     * read: the code objects read whole are those before it. Each one
     * left is read again into its own place in stage. */
    got =
        snapprof__process_vm_readv(pid, local, (unsigned long)nmiss, remote, (unsigned long)nmiss);
    size_t whole = got <= 0 ? 0 : (size_t)got / span;
    for (size_t i = 0; i < whole && i < nmiss; i++)
        ok[order[i]] = 1;
    return 0;
}

/* Whether the span at s->codes[k] + off of every k < n lies inside one of
 * the ranges r[0, nr), which a read brought whole, one after the other,
 * into s->stage: then sets s->end[k] and s->ok[k] as
 * snapprof__py_read_codes() would have (the same bytes, read by a checked
 * read of the same addresses). Async-signal-safe. */
static int codes_covered(snapprof__py_scratch_t *s, size_t n, size_t off, size_t span,
                         const struct iovec *r, size_t nr)
{
    for (size_t k = 0; k < n; k++) {
        uintptr_t a = s->codes[k] + off;
        size_t at = 0, i = 0;
        for (; i < nr; i++) {
            uintptr_t lo = (uintptr_t)r[i].iov_base;
            if (a >= lo && a - lo <= r[i].iov_len && r[i].iov_len - (a - lo) >= span) {
                at += a - lo;
                break;
            }
            at += r[i].iov_len;
        }
        if (i == nr)
            return 0;
        s->end[k] = at + span;
        s->ok[k] = 1;
    }
    return 1;
}

#define GUESS_RANGES 8

/* What the calling thread's last capture read: its current frame word and
 * chunk header at (tstate->cframe, tstate->datastack_chunk), and the
 * ranges of its first batch of code objects (when they were 1 to
 * GUESS_RANGES ranges read whole; nranges 0 else). The next capture reads
 * there again in the system call that reads the thread state
 * (snapprof__py_rider_t), and uses what it read only where it is what it
 * would have read: the frame word and header when the thread state names
 * the same two addresses, the ranges when every code object of its first
 * batch lies inside them (codes_covered()). A Python thread's cframe and
 * chunk change only when it enters or leaves a C-level call of the
 * evaluation loop or a chunk fills, and a thread that runs the same code
 * meets the same code objects: most samples make one system call instead
 * of three (issue 29). Any values are safe: every read is checked, a
 * range's length is bounded by the stage, and a guess is judged by the
 * capture's own copy of it (a nested capture, a heap sample's interrupted
 * by the profiling signal, may leave a mix of two). Async-signal-safe:
 * lock-free atomics, the thread's own. */
static __thread struct {
    _Atomic uintptr_t cframe, chunk;
    _Atomic uint32_t nranges;
    _Atomic uint16_t len[GUESS_RANGES];
    _Atomic uintptr_t lo[GUESS_RANGES];
} guess __attribute__((tls_model("initial-exec")));

_Static_assert(SNAPPROF__PY_CODE_STAGE <= UINT16_MAX, "a range's length fits guess.len");
_Static_assert(SNAPPROF__PY_CODE_BATCH >= 3 + GUESS_RANGES, "the riders fit the scratch's iovecs");

/* Remembers the ranges s->remote[0, nr) of a capture's first batch
 * (nr 0: none) for the thread's next capture. Async-signal-safe. */
static void guess_ranges(const snapprof__py_scratch_t *s, size_t nr)
{
    if (nr > GUESS_RANGES)
        nr = 0;
    atomic_store_explicit(&guess.nranges, 0, memory_order_relaxed);
    for (size_t i = 0; i < nr; i++) {
        atomic_store_explicit(&guess.lo[i], (uintptr_t)s->remote[i].iov_base, memory_order_relaxed);
        atomic_store_explicit(&guess.len[i], (uint16_t)s->remote[i].iov_len, memory_order_relaxed);
    }
    atomic_store_explicit(&guess.nranges, (uint32_t)nr, memory_order_relaxed);
}

/* Fills the code fields of cap->frames[from, to) with checked reads of
 * s->codes[0, ncodes), the distinct code objects among them:
 * from the ranges g[0, ng) when they hold them all (read with the thread
 * state, codes_covered()), else by snapprof__py_read_codes(), whose
 * ranges are remembered for the thread's next capture when learn.
 * On entry each of those frames holds, until it is filled, the index of
 * its code object in codes in instr and its prev_instr in names. A frame
 * whose code object cannot be read or is not a code object ends the walk
 * there: returns the new count. Async-signal-safe. */
static uint32_t check_codes(const snapprof__py_layout_t *l, snapprof__py_capture_t *cap,
                            snapprof__py_scratch_t *s, uint32_t from, uint32_t to, size_t ncodes,
                            const struct iovec *g, size_t ng, int learn)
{
    size_t span = l->code_qualname + sizeof(uintptr_t) - l->code_type;
    if (span > CODE_SPAN_MAX || l->code_size < l->code_type || l->code_firstlineno < l->code_type ||
        l->code_filename < l->code_type ||
        l->code_filename + 3 * sizeof(uintptr_t) > l->code_type + span)
        return from; /* not a layout this reader knows how to batch */
    if (ng == 0 || !codes_covered(s, ncodes, l->code_type, span, g, ng)) {
        size_t nr = snapprof__py_read_codes(s, ncodes, l->code_type, span);
        if (learn)
            guess_ranges(s, nr);
    }
    for (uint32_t i = from; i < to; i++) {
        size_t k = (size_t)cap->frames[i].instr;
        uintptr_t type, names[3];
        intptr_t size;
        int32_t firstlineno;
        if (!s->ok[k])
            return i;
        const uint8_t *f = snapprof__py_code_fields(s, k, span);
        memcpy(&type, f, sizeof type);
        memcpy(&size, f + (l->code_size - l->code_type), sizeof size);
        memcpy(&firstlineno, f + (l->code_firstlineno - l->code_type), sizeof firstlineno);
        memcpy(names, f + (l->code_filename - l->code_type), sizeof names);
        if (type != snapprof__py.code_type || size < 0 || size > (1 << 28))
            return i;
        snapprof__py_frame_rec_t *r = &cap->frames[i];
        uintptr_t code = r->code & ~(uintptr_t)SNAPPROF__PY_REC_FLAGS;
        uintptr_t first = code + l->code_code;
        uintptr_t pi = (uintptr_t)r->names;
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

#define CODE_INDEX_SLOTS (sizeof(((snapprof__py_scratch_t *)0)->code_index))
_Static_assert((CODE_INDEX_SLOTS & (CODE_INDEX_SLOTS - 1)) == 0 && CODE_INDEX_SLOTS > BATCH,
               "the code index is a power of two with a free slot when the batch is full");

/* The index in s->codes[0, ncodes) of code, found through s->code_index
 * (open addressing, linear probing: slot holds 1 + the index, 0 when
 * free), or ncodes when it is not there, with *slot the free slot where
 * it goes. A frame's code object was found by a scan of the batch, 1,250
 * compares a 50-deep capture (9,600 instructions with the walk,
 * callgrind). Async-signal-safe. */
static size_t find_code(const snapprof__py_scratch_t *s, size_t ncodes, uintptr_t code,
                        size_t *slot)
{
    size_t h = (size_t)(((uint64_t)code >> 3) * 0x9e3779b97f4a7c15u >> 32) & (CODE_INDEX_SLOTS - 1);
    for (; s->code_index[h] != 0; h = (h + 1) & (CODE_INDEX_SLOTS - 1))
        if (s->codes[s->code_index[h] - 1] == code)
            return s->code_index[h] - 1u;
    *slot = h;
    return ncodes;
}

_Atomic uint32_t snapprof__py_names_wanted;
_Atomic(uint32_t *) snapprof__py_kick;

/* Whether a frame of cap->frames[from, to) (filled by check_codes()) has
 * a code object the sampling side has not named (snapprof__py_known).
 * Not inlined: called beside check_codes(), not inside it, so that the
 * handler's deepest stack stays where it was. Async-signal-safe. */
__attribute__((noinline)) static int any_unnamed(const snapprof__py_capture_t *cap, uint32_t from,
                                                 uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        const snapprof__py_frame_rec_t *r = &cap->frames[i];
        uintptr_t code = r->code & ~(uintptr_t)SNAPPROF__PY_REC_FLAGS;
        if (!snapprof__py_known_has(snapprof__py_known_key(code, r->names, r->firstlineno)))
            return 1;
    }
    return 0;
}

/* When unnamed (the capture met a code object the sampling side has not
 * named yet), asks for a drain soon: the first such capture since the
 * last drain wakes the sampling thread (python_symbols.c says why).
 * Async-signal-safe: atomics and a futex wake. */
static void ask_names(int unnamed)
{
    if (!unnamed || atomic_load_explicit(&snapprof__py_names_wanted, memory_order_relaxed) ||
        atomic_exchange_explicit(&snapprof__py_names_wanted, 1, memory_order_relaxed))
        return;
    _Atomic uint32_t *kick =
        (_Atomic uint32_t *)atomic_load_explicit(&snapprof__py_kick, memory_order_acquire);
    if (kick) {
        atomic_fetch_add_explicit(kick, 1, memory_order_release);
        syscall(SYS_futex, kick, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    }
}

int snapprof__python_names_wanted(void)
{
    return atomic_load_explicit(&snapprof__py_names_wanted, memory_order_relaxed) != 0;
}

void snapprof__python_names_taken(uint32_t *kick)
{
    atomic_store_explicit(&snapprof__py_kick, kick, memory_order_release);
    atomic_store_explicit(&snapprof__py_names_wanted, 0, memory_order_relaxed);
}

/* The walk of thread tid's frames into cap, s its working memory. stopped: tid is the calling
 * thread, stopped in its handler, so frames inside its data-stack chunks
 * can be read with plain loads; else (a blocked thread read from the
 * sampling thread, which may wake and pop a chunk meanwhile) every read is
 * checked. Async-signal-safe. */
static void capture_in(snapprof__py_capture_t *cap, snapprof__py_scratch_t *s, pid_t tid,
                       int stopped)
{
    cap->count = 0;
    cap->status = 0;
    if (!atomic_load_explicit(&snapprof__py.ready, memory_order_acquire)) {
        cap->status = SNAPPROF__PY_OFF;
        return;
    }
    const snapprof__py_layout_t *l = snapprof__py.layout;
    /* The current frame word, the current chunk's header and the code
     * objects' ranges ride on the read of the thread state, at the
     * addresses this thread's last sample found (guess): used only where
     * they are what the capture would read, else read again where the
     * thread state says. Its own thread only (stopped). */
    uintptr_t frame = 0, hdr[3] = {0, 0, 0};
    uintptr_t g_cframe = 0, g_chunk = 0;
    snapprof__py_rider_t rider = {.local = s->local, .remote = s->remote};
    if (stopped) {
        g_cframe = atomic_load_explicit(&guess.cframe, memory_order_relaxed);
        g_chunk = atomic_load_explicit(&guess.chunk, memory_order_relaxed);
    }
    size_t want = sizeof frame + (g_chunk ? sizeof hdr : 0); /* the frame word and header */
    size_t g_total = 0, ng = 0; /* the code ranges: their bytes, how many */
    const struct iovec *g = NULL;
    if (g_cframe != 0) {
        rider.local[1] = (struct iovec){&frame, sizeof frame};
        rider.remote[1] =
            (struct iovec){(void *)(g_cframe + l->cframe_current_frame), sizeof frame};
        rider.local[2] = (struct iovec){hdr, sizeof hdr};
        rider.remote[2] = (struct iovec){(void *)g_chunk, sizeof hdr};
        rider.nlocal = rider.nremote = g_chunk ? 3 : 2;
        size_t nr = atomic_load_explicit(&guess.nranges, memory_order_relaxed);
        struct iovec *r = rider.remote + rider.nremote;
        for (; ng < nr && ng < GUESS_RANGES; ng++) {
            uintptr_t lo = atomic_load_explicit(&guess.lo[ng], memory_order_relaxed);
            size_t len = atomic_load_explicit(&guess.len[ng], memory_order_relaxed);
            if (len == 0 || len > sizeof s->stage - g_total)
                break;
            r[ng] = (struct iovec){(void *)lo, len};
            g_total += len;
        }
        if (ng == nr && ng > 0) {
            rider.local[rider.nlocal++] = (struct iovec){s->stage, g_total};
            rider.nremote += ng;
            g = r;
        } else {
            ng = 0;
        }
    }
    uint8_t tsb[512];
    if (snapprof__py_tstate_find(tid, tsb, sizeof tsb, stopped, &rider) == 0) {
        cap->status = SNAPPROF__PY_NO_STATE;
        return;
    }
    uintptr_t cframe, chunk, top;
    memcpy(&cframe, tsb + l->ts_cframe, sizeof cframe);
    memcpy(&chunk, tsb + l->ts_datastack_chunk, sizeof chunk);
    memcpy(&top, tsb + l->ts_datastack_top, sizeof top);
    if (cframe == 0 || (cframe & 7) || (chunk & 7)) {
        cap->status = SNAPPROF__PY_BROKEN;
        return;
    }
    ssize_t got;
    if (rider.nremote > 1 && rider.got >= want && cframe == g_cframe && chunk == g_chunk) {
        got = (ssize_t)want; /* the guess was right: both read with the thread state */
    } else {
        /* The current frame and the current chunk's header in one read. */
        frame = 0;
        memset(hdr, 0, sizeof hdr);
        struct iovec local[2] = {{&frame, sizeof frame}, {hdr, sizeof hdr}};
        struct iovec remote[2] = {{(void *)(cframe + l->cframe_current_frame), sizeof frame},
                                  {(void *)chunk, sizeof hdr}};
        got = snapprof__process_vm_readv(
            atomic_load_explicit(&snapprof__py.pid, memory_order_relaxed), local, chunk ? 2UL : 1UL,
            remote, chunk ? 2UL : 1UL);
        if (stopped && got == (ssize_t)(sizeof frame + (chunk ? sizeof hdr : 0))) {
            atomic_store_explicit(&guess.cframe, cframe, memory_order_relaxed);
            atomic_store_explicit(&guess.chunk, chunk, memory_order_relaxed);
        }
    }
    if (got < (ssize_t)sizeof frame) {
        cap->status = SNAPPROF__PY_BROKEN;
        return;
    }
    if (ng > 0 && rider.got != want + g_total)
        ng = 0; /* the code ranges were not all read */
    walk_t w = {.l = l, .s = s, .nchunks = 0, .next_chunk = 0};
    /* The current chunk: used up to the thread's datastack_top. */
    if (got == (ssize_t)(sizeof frame + sizeof hdr) && top >= chunk + l->chunk_data &&
        top - chunk <= hdr[1]) {
        w.s->chunks[0].lo = chunk + l->chunk_data;
        w.s->chunks[0].hi = top;
        w.nchunks = 1;
        w.next_chunk = hdr[0];
    }

    /* The distinct code objects of the frames not yet checked,
     * [checked, n). */
    uintptr_t *codes = s->codes;
    size_t ncodes = 0;
    memset(s->code_index, 0, sizeof s->code_index);
    uint32_t n = 0, checked = 0;
    int unnamed = 0; /* a code object the sampling side has not named */
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
        size_t slot = 0; /* set by find_code() when not found */
        size_t k = find_code(s, ncodes, code, &slot);
        if (k == BATCH) { /* a full batch: check it, start the next */
            uint32_t ok =
                check_codes(l, cap, s, checked, n, ncodes, g, ng, stopped && checked == 0);
            ng = 0; /* the stage holds this batch now */
            unnamed = unnamed || any_unnamed(cap, checked, ok);
            if (ok < n) {
                cap->status |= SNAPPROF__PY_BROKEN;
                cap->count = ok;
                ask_names(unnamed);
                return;
            }
            checked = n;
            memset(s->code_index, 0, sizeof s->code_index);
            ncodes = 0;
            k = find_code(s, ncodes, code, &slot);
        }
        if (k == ncodes) {
            codes[ncodes++] = code;
            s->code_index[slot] = (uint8_t)ncodes;
        }
        snapprof__py_frame_rec_t *r = &cap->frames[n++];
        r->code = code | (fb[l->frame_is_entry] ? SNAPPROF__PY_REC_ENTRY : 0);
        r->instr = (int32_t)k;   /* until check_codes() */
        r->names = (uint64_t)pi; /* until check_codes() */
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
        uint32_t ok = check_codes(l, cap, s, checked, n, ncodes, g, ng, stopped && checked == 0);
        unnamed = unnamed || any_unnamed(cap, checked, ok);
        if (ok < n) {
            n = ok;
            cap->status |= SNAPPROF__PY_BROKEN;
        }
    }
    cap->count = n;
    ask_names(unnamed);
}

/* Scratch areas shared by every capture, each claimed by one at a time
 * (busy, an atomic exchange): a capture's working memory (the stage the
 * code objects' fields are read into, 12 KiB at 50 frames deep, and the
 * walk's tables) is then memory the last capture used, in the cache,
 * instead of its slot's own, which 200-odd other slots' captures have
 * pushed out since it was last used (the pool hands out slots in turn
 * between drains: 11 MiB at 1 kHz). Cold, the code objects' read took
 * 2.5-3 us more a sample at 50 deep (medians of the handler's Python
 * part, 7.0 against 4.5 us, python_cost.py, issue 29). A capture that
 * finds every one taken (more threads in their handlers at once, a
 * capture nested in another on the same thread) uses its slot's own
 * scratch, as before. After a fork in the middle of another thread's
 * capture the child never gets that one back: it has the others and the
 * slots'. */
#define SCRATCH_SHARED 4
static snapprof__py_scratch_t shared_scratch[SCRATCH_SHARED];
static _Atomic int shared_busy[SCRATCH_SHARED];

snapprof__py_scratch_t *snapprof__py_scratch_claim(void)
{
    for (int i = 0; i < SCRATCH_SHARED; i++)
        if (atomic_load_explicit(&shared_busy[i], memory_order_relaxed) == 0 &&
            atomic_exchange_explicit(&shared_busy[i], 1, memory_order_acquire) == 0)
            return &shared_scratch[i];
    return NULL;
}

void snapprof__py_scratch_release(snapprof__py_scratch_t *s)
{
    atomic_store_explicit(&shared_busy[s - shared_scratch], 0, memory_order_release);
}

/* The walk of thread tid's frames into cap, in a shared scratch area if
 * one is free, else in cap's own. Async-signal-safe: lock-free atomics. */
static void capture(snapprof__py_capture_t *cap, pid_t tid, int stopped)
{
    snapprof__py_scratch_t *s = snapprof__py_scratch_claim();
    capture_in(cap, s ? s : &cap->scratch, tid, stopped);
    if (s)
        snapprof__py_scratch_release(s);
}

void snapprof__python_capture(snapprof__py_capture_t *cap)
{
    capture(cap, snapprof__gettid_cached(), 1);
}

void snapprof__python_capture_blocked(snapprof__py_capture_t *cap, pid_t tid)
{
    capture(cap, tid, 0);
}
