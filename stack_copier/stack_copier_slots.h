/* Capture slots: where a thread that captures itself (on its own CPU-clock
 * trigger) leaves its registers, labels and stack copy for the sampling
 * thread. Internal.
 *
 * A pool is a fixed array of slots, each with a preallocated stack buffer.
 * The signal handler takes a free slot (FREE -> FILLING by compare and
 * swap), fills it and publishes it (FILLING -> FULL, release); the
 * sampling thread drains FULL slots (acquire), unwinds them after the
 * target has long resumed, and frees them (FULL -> FREE, release). Nothing
 * waits: a capture that finds no free slot is dropped and counted, and the
 * CPU time it stood for stays in the thread's remainder.
 *
 * A stack that does not fit a slot goes into one of the pool's large
 * buffers, which the sampling thread (never the handler) adds after the
 * first truncated capture, each large enough for the deepest stack seen so
 * far, within a memory budget. The handler takes a free one that fits and
 * wakes the drainer at once, since large buffers are few; when none is
 * free it falls back to a truncated slot copy, counted. */
#ifndef SNAPPROF_STACK_COPIER_SLOTS_H
#define SNAPPROF_STACK_COPIER_SLOTS_H

#include "stack_copier/stack_copier.h"

#include <signal.h>
#include <stdatomic.h>
#include <ucontext.h>

enum { SNAPPROF__SLOT_FREE = 0, SNAPPROF__SLOT_FILLING = 1, SNAPPROF__SLOT_FULL = 2 };

/* Where one thread's captures go, filled in on the sampling side before the
 * thread's trigger is armed and read by the handler. The handler never
 * dereferences thread (it only compares it with the thread's TLS token), so
 * the token's lifetime does not depend on late signals. */
typedef struct snapprof__capture_target {
    pid_t tid;
    uintptr_t stack_low, stack_base;
    const struct snapprof_thread *thread; /* compared, never dereferenced */
    int on_thread;                        /* the token names itself in TLS */
    void *owner;                          /* the sampler's record of the thread */
    /* Captures the trigger started, taken or dropped: counted as the
     * handler enters, so the sampling side sees that signals arrive
     * however far behind its draining is. */
    _Atomic uint64_t fired;
} snapprof__capture_target_t;

/* A large buffer: the sampling side (re)allocates it, and the handler fills
 * it, only while holding busy (0 -> 1); the drain gives it back. */
typedef struct snapprof__large_buffer {
    _Atomic uint32_t busy;
    uint8_t *buf;
    size_t size;
} snapprof__large_buffer_t;

#define SNAPPROF__LARGE_MAX 32

typedef struct snapprof__capture_slot {
    _Atomic uint32_t state;
    snapprof__capture_target_t *target;
    snapprof__copy_result_t res; /* registers, time, copy range as live addresses */
    uint8_t *buffer;             /* where the copy is: its own buffer or a large one */
    int large;                   /* index of that large buffer, or -1 */
    uint64_t weight_ns;          /* the thread's CPU time this capture stands for */
    int fail;                    /* -1, or the snapprof_fail_reason_t of a failed capture */
    void *extra;                 /* the delegate's area for this slot (pool->extra_size) */
} snapprof__capture_slot_t;

typedef struct snapprof__capture_pool {
    size_t slot_count;
    size_t slot_bytes; /* stack bytes each slot holds */
    snapprof__capture_slot_t *slots;
    uint8_t *memory;                              /* slot_count * slot_bytes, page-aligned */
    const snapprof__capture_delegate_t *delegate; /* run in the handler; NULL: none */
    size_t extra_size;                            /* each slot's delegate area, bytes */
    uint8_t *extra;                               /* slot_count of them */
    _Atomic uint32_t full;                        /* slots FULL and not yet drained */
    _Atomic uint64_t dropped;                     /* captures with no free slot */
    _Atomic uint64_t dropped_ns;                  /* the CPU time they stood for */
    int thread_cpu;         /* each capture reads its thread's CPU clock (res.cpu_ns) */
    _Atomic uint32_t *kick; /* futex word that wakes the drainer */
    uint32_t kick_at;       /* wake it when this many slots are full */
    snapprof__large_buffer_t large[SNAPPROF__LARGE_MAX];
    _Atomic size_t large_wanted; /* bytes the deepest truncated capture needed */
    size_t large_bytes;          /* allocated in large buffers */
} snapprof__capture_pool_t;

/* Makes a pool of slot_count slots of slot_bytes each (rounded up to a
 * page). Returns 0 or -ENOMEM. Sampling side. */
int snapprof__capture_pool_init(snapprof__capture_pool_t *pool, size_t slot_count,
                                size_t slot_bytes, size_t extra_size, uint32_t *kick);

/* Frees the pool's memory. Only when no handler can use it any more (every
 * trigger pointing at it disarmed). Sampling side. */
void snapprof__capture_pool_destroy(snapprof__capture_pool_t *pool);

/* Captures the calling thread into a free slot of pool: registers from uc,
 * the time, labels, and its live stack; the capture stands for weight_ns of
 * the thread's CPU time. entry_ns is snapprof__monotonic_ns() when the
 * signal handler was entered: the capture's time, and the start of the
 * target's pause, which ends when the capture does. Returns 0, or -1 when no slot was
 * free or the thread is in its exit destructor (both counted in
 * pool->dropped, weight kept) or the thread is not target's (a late
 * signal for a tid that was recycled, or a stack pointer outside the
 * known stack: a slot is filled with the failure so it is counted).
 * RUNS IN THE SIGNAL HANDLER: no allocation, no locks, no logging.
 * Async-signal-safe. */
int snapprof__capture_self(snapprof__capture_pool_t *pool, snapprof__capture_target_t *target,
                           const ucontext_t *uc, uint64_t weight_ns, uint64_t entry_ns);

/* Gives a drained slot back (and the large buffer it used). Sampling side. */
void snapprof__capture_slot_release(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot);

/* After truncated captures: adds a large buffer that fits the deepest one
 * (at most max_bytes), or replaces a free one too small for it, while all
 * large buffers together stay within budget bytes. Returns 1 if it added
 * or replaced one, -ENOMEM when the mapping was refused (the truncated
 * captures that asked ask again). Sampling side. */
int snapprof__capture_pool_grow(snapprof__capture_pool_t *pool, size_t max_bytes, size_t budget);

#endif
