/* What the files of python/ share. Internal to the folder. */
#ifndef SNAPPROF_PYTHON_INTERNAL_H
#define SNAPPROF_PYTHON_INTERNAL_H

#include "python/python.h"
#include "python/python_layout.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The interpreter found by snapprof__python_enable(); written once before
 * ready is set (release), read by the handler after it sees ready. */
typedef struct snapprof__py_state {
    _Atomic int ready; /* 1: frames can be read */
    const snapprof__py_layout_t *layout;
    uintptr_t runtime;          /* &_PyRuntime */
    uintptr_t code_type;        /* &PyCode_Type */
    uintptr_t eval_lo, eval_hi; /* _PyEval_EvalFrameDefault, as its dynamic symbol says */
    uintptr_t cold_lo, cold_hi; /* its .cold part, found by the jumps into it (0, 0: none) */
    /* Our pid as of the last refresh: the handler's reads name it without
     * a getpid() (after a fork, until the child's first refresh, they read
     * the parent, whose thread states name no thread of the child). */
    _Atomic pid_t pid;
    /* _PyRuntime is in the main program, never unmapped: the handler may
     * read its GIL holder with a plain load (python_runtime.c, tls_mark). */
    int holder_plain;
} snapprof__py_state_t;

extern snapprof__py_state_t snapprof__py;

/* The check of a code object's identity the handler copies and the drain
 * compares (snapprof__py_frame_rec_t.names): its filename and qualname
 * pointers and its size in code units. Never 0. Async-signal-safe. */
static inline uint64_t snapprof__py_names_check(uintptr_t filename, uintptr_t qualname,
                                                intptr_t size)
{
    uint64_t h = (uint64_t)filename * 0x9e3779b97f4a7c15u;
    h ^= (uint64_t)qualname + (h >> 29);
    h = (h ^ (uint64_t)size) * 0xbf58476d1ce4e5b9u;
    return (h ^ (h >> 31)) | 1;
}

/* The code objects the sampling side has named (python_symbols.c), for
 * the handler: a set of snapprof__py_known_key()s, open addressing,
 * probed at most SNAPPROF__PY_KNOWN_PROBES slots from the key's own, 0 for
 * a free slot. Written only by the sampling side (under its lock), read by
 * handlers with relaxed loads: a key is a hash, and a key missed (being
 * written, or the set just emptied) costs only an early drain. */
#define SNAPPROF__PY_KNOWN_SLOTS (1u << 15)
#define SNAPPROF__PY_KNOWN_PROBES 16u
extern _Atomic uint64_t snapprof__py_known[SNAPPROF__PY_KNOWN_SLOTS];

/* Set by a capture that met a code object not in snapprof__py_known,
 * cleared by snapprof__python_names_taken(): the sampling thread is woken
 * on the first such capture (its kick word) to read the new code
 * objects' names soon, while they live. */
extern _Atomic uint32_t snapprof__py_names_wanted;
extern _Atomic(uint32_t *) snapprof__py_kick;

/* The key of a code object as the handler copied it (address, names
 * check, first line), as snapprof__py_known holds it. Never 0.
 * Async-signal-safe. */
static inline uint64_t snapprof__py_known_key(uintptr_t code, uint64_t names, int32_t firstlineno)
{
    uint64_t h = ((uint64_t)code ^ ((uint64_t)(uint32_t)firstlineno << 40)) * 0x9e3779b97f4a7c15u;
    h ^= names + (h >> 31);
    return (h ^ (h >> 29)) | 1;
}

/* Whether key is in snapprof__py_known. Async-signal-safe. */
static inline int snapprof__py_known_has(uint64_t key)
{
    size_t i = (size_t)(key >> 17);
    for (unsigned p = 0; p < SNAPPROF__PY_KNOWN_PROBES; p++, i++) {
        uint64_t k = atomic_load_explicit(&snapprof__py_known[i & (SNAPPROF__PY_KNOWN_SLOTS - 1)],
                                          memory_order_relaxed);
        if (k == key)
            return 1;
        if (k == 0)
            return 0;
    }
    return 0;
}

/* Reads n bytes at addr of our own memory with process_vm_readv: memory
 * that is not mapped or not readable fails the read instead of faulting.
 * Returns 0 when all n bytes were read, else -1. Async-signal-safe. */
int snapprof__py_read(uintptr_t addr, void *dst, size_t n);

/* Reads span (<= SNAPPROF__PY_CODE_SPAN_MAX) bytes at s->codes[k] + off for
 * k < n (<= SNAPPROF__PY_CODE_BATCH, codes in the order the walk met them)
 * into s->stage (snapprof__py_code_fields() says where), with one
 * process_vm_readv over the codes sorted by address and merged into
 * ranges, copied one after the other through one local iovec, then, if
 * that read stopped short (a range ran into memory that cannot be read, or
 * a code pointer was garbage), one more with an iovec per code object not
 * yet read, in codes' order (a partial read keeps those before the first
 * that failed). Sets s->ok[k] to 1 for each code object read whole, else
 * 0. Returns the number of ranges when the first read brought them all
 * (they are in s->remote[0, that), for the thread's next capture to read
 * again), else 0. Uses no more of the stack than its locals' few words.
 * Async-signal-safe. */
size_t snapprof__py_read_codes(snapprof__py_scratch_t *s, size_t n, size_t off, size_t span);

/* What snapprof__py_read_codes(s, n, off, span) read of s->codes[k]: span
 * bytes, valid when s->ok[k]. Async-signal-safe. */
static inline const uint8_t *snapprof__py_code_fields(const snapprof__py_scratch_t *s, size_t k,
                                                      size_t span)
{
    return s->stage + s->end[k] - span;
}

/* Reads that ride on the read of a thread state (snapprof__py_tstate_find):
 * the same process_vm_readv reads remote[1, nremote) into local[1,
 * nlocal) (filled in order, as the system call does: the counts may
 * differ), after the thread state's own bytes, which take local[0] and
 * remote[0] (written by the lookup). One system call for several ranges:
 * the handler guesses, from the thread's last sample, what it will read
 * next (python_capture.c). got: set by the lookup to how many bytes past
 * the thread state the read of the thread state it returned brought (a
 * partial read stops at the first remote range that cannot be read), 0
 * when it returned none. */
typedef struct snapprof__py_rider {
    struct iovec *local, *remote;
    unsigned long nlocal, nremote;
    size_t got;
} snapprof__py_rider_t;

/* Claims one of the few scratch areas captures share (python_capture.c
 * says why), or returns NULL when every one is taken; the capture then
 * uses its slot's own. Release it with snapprof__py_scratch_release().
 * Async-signal-safe: lock-free atomics. */
snapprof__py_scratch_t *snapprof__py_scratch_claim(void);
void snapprof__py_scratch_release(snapprof__py_scratch_t *s);

/* The PyThreadState of thread tid, or 0: its first ts_size bytes are read
 * checked into tsb (size bytes) and its native_thread_id is tid; rider,
 * when not NULL, rides on each read of a thread state (rider->got says
 * what the last one, that of the thread state returned, brought). Looks in
 * the table the last refresh published, then among the states learned
 * since, then (self) at the calling thread's own thread-specific thread
 * state (_PyRuntime.gilstate.autoTSSkey, which it has whether or not it
 * holds the GIL), then at the thread state that holds the GIL
 * (_PyRuntime.gilstate.tstate_current), which is the thread's own whenever
 * it runs Python code, from its first moment; found there, it is learned
 * for tid, so that the thread's samples taken while it has released the
 * GIL (in zlib, in a system call) find it too until the next refresh has
 * it. self: tid is the calling thread, whose mark (found nowhere, until
 * the next refresh or a new GIL holder) is used and set. RUNS IN THE
 * SIGNAL HANDLER: atomics and process_vm_readv only, no locks.
 * Async-signal-safe. */
uintptr_t snapprof__py_tstate_find(pid_t tid, uint8_t *tsb, size_t size, int self,
                                   snapprof__py_rider_t *rider);

/* How many times since the last call a thread state found at the GIL
 * could not be remembered because the learned table (256 slots, emptied
 * at each refresh) was full. Any thread. */
uint64_t snapprof__py_learned_full_take(void);

/* Called by the splice once per frame to name it (python_symbols.c): the
 * pc of the Python frame for rec, in the "[python]" pseudo module, or 0
 * when its code object cannot be read; *reused is set when the code object
 * at that address is no longer the one captured. Sampling side, with
 * snapprof__py_names_lock() held. */
uintptr_t snapprof__py_frame_pc(const snapprof__py_frame_rec_t *rec, int *reused);

/* The lock of the names (python_symbols.c; the pprof writer's
 * symbolization takes it too), held across one splice's calls of
 * snapprof__py_frame_pc(): once a capture, not once a frame (a lock and
 * an unlock a frame were a third of the splice's time at 50 deep). Not
 * recursive. Sampling side. */
void snapprof__py_names_lock(void);
void snapprof__py_names_unlock(void);

/* The "[python]" pseudo module, made by the first call. Sampling side. */
const snapprof_module_t *snapprof__py_module(void);

#endif
