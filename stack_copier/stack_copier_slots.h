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
 * A stack that does not fit a slot goes into a large buffer, from one
 * list the pool shares between its threads. The handler notes the largest
 * copy each thread wanted; the sampling thread (never the handler) keeps a
 * few buffers per thread that went deeper than a slot, of its deepest copy
 * and a quarter more, mapped and faulted in there; it replaces them with
 * larger ones when a thread goes deeper, adds more when a thread's
 * captures found them all in use, and unmaps a thread's share once it has
 * left, all within a memory budget (snapprof__capture_target_plan,
 * snapprof__capture_pool_provision). The handler takes the smallest free
 * one that fits, of those the first, so a buffer already written is taken
 * again before one never used, a shallower thread leaves the larger ones
 * to the deeper, and a second deep thread finds the first one's at once;
 * when none is free, it falls back to a truncated slot copy (counted) and
 * wakes the drainer so that the pool gets what it needs at once. Large
 * buffers are held until the drainer is done with them, which the
 * sampling thread does within a millisecond or so (pool->large_full). */
#ifndef SNAPPROF_STACK_COPIER_SLOTS_H
#define SNAPPROF_STACK_COPIER_SLOTS_H

#include "stack_copier/stack_copier.h"

#include <signal.h>
#include <stdatomic.h>
#include <ucontext.h>

enum { SNAPPROF__SLOT_FREE = 0, SNAPPROF__SLOT_FILLING = 1, SNAPPROF__SLOT_FULL = 2 };

/* A large buffer: the sampling side (re)allocates it, and the handler fills
 * it, only while holding busy (0 -> 1); the drain gives it back. size is
 * atomic because the handler reads it unheld, as a hint, to pick the
 * smallest free buffer that fits. */
typedef struct snapprof__large_buffer {
    _Atomic uint32_t busy;
    uint8_t *buf;
    _Atomic size_t size;
} snapprof__large_buffer_t;

/* Large buffers one thread may ask for (the budget usually says fewer). */
#define SNAPPROF__TARGET_LARGE_MAX 32
/* What a thread asks for first when it goes deeper than a slot. */
#define SNAPPROF__TARGET_LARGE_FIRST 4
/* Large buffers a pool holds at most, whatever its threads ask for: the
 * handler looks through them all when none is free. */
#define SNAPPROF__POOL_LARGE_MAX 128
/* Sizes of large buffers a pool plans for at once; threads of depths
 * further apart share the larger size. */
#define SNAPPROF__PLAN_CLASSES 8

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
    /* Deep stacks. Written by the handler (one at a time per target: its
     * arm is BUSY meanwhile), read by the sampling side: the most stack a
     * capture of this thread wanted to copy, and how many captures it
     * truncated for want of a free large buffer that fits. */
    _Atomic size_t deepest;
    _Atomic uint64_t large_short;
    /* The sampling side's own: how many of the pool's large buffers this
     * thread asks for, the large_short it last acted on, and whether the
     * budget refused the pool a buffer at the last provisioning (what the
     * captures drained next were taken under). */
    uint32_t large_want;
    uint64_t large_short_seen;
    int large_refused;
} snapprof__capture_target_t;

typedef struct snapprof__capture_slot {
    _Atomic uint32_t state;
    snapprof__capture_target_t *target;
    snapprof__copy_result_t res;     /* registers, time, copy range as live addresses */
    uint8_t *buffer;                 /* where the copy is: its own buffer or a large one */
    snapprof__large_buffer_t *large; /* that large buffer (the pool's), or NULL */
    uint64_t weight_ns;              /* the thread's CPU time this capture stands for */
    int fail;                        /* -1, or the snapprof_fail_reason_t of a failed capture */
    void *extra;                     /* the delegate's area for this slot (pool->extra_size) */
} snapprof__capture_slot_t;

/* A class of targets of about one depth in a pool's plan (sampling side). */
typedef struct snapprof__plan_class {
    uint32_t want;     /* buffers its targets asked for */
    size_t need, size; /* the deepest copy of its targets; the size to make */
} snapprof__plan_class_t;

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
    int thread_cpu;               /* each capture reads its thread's CPU clock (res.cpu_ns) */
    _Atomic uint32_t *kick;       /* futex word that wakes the drainer */
    uint32_t kick_at;             /* wake it when this many slots are full */
    size_t copy_max;              /* a copy's limit (0: none) */
    _Atomic uint32_t large_full;  /* FULL slots that hold a large buffer */
    _Atomic uint32_t large_asked; /* a capture was short of a large buffer since the last look */
    /* The large buffers, every target's: large_count entries (only ever
     * grows; release store after the entry is filled), an entry's buffer
     * NULL when it was given back. */
    _Atomic uint32_t large_count;
    snapprof__large_buffer_t large[SNAPPROF__POOL_LARGE_MAX];
    /* Sampling side. What the targets planned for the next provisioning:
     * classes of threads of about one depth, each wanting a count of
     * buffers of at least need bytes, made at size; whether the last one
     * gave them all (ready) or the budget refused some (refused). */
    snapprof__plan_class_t plan[SNAPPROF__PLAN_CLASSES];
    uint32_t plan_count;
    int large_ready, large_refused;
    size_t large_bytes, large_bytes_max; /* in the large buffers (sampling side) */
} snapprof__capture_pool_t;

/* Makes a pool of slot_count slots of slot_bytes each (rounded up to a
 * page). Returns 0 or -ENOMEM. Sampling side. */
int snapprof__capture_pool_init(snapprof__capture_pool_t *pool, size_t slot_count,
                                size_t slot_bytes, size_t extra_size, uint32_t *kick);

/* Frees the pool's memory, its large buffers too. Only when no handler can
 * use it any more (every trigger pointing at it disarmed). Sampling side. */
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

/* Captures the calling thread into a free slot of pool outside a signal
 * handler (a sampled allocation, heap/): registers already taken in a live
 * frame of the caller's (regs: at least sp, pc and the callee-saved ones),
 * the time entry_ns, and the live stack from sp (less the red zone) up to
 * stack_base, the innermost slot's worth of it when longer (marked
 * truncated; no large buffers: the thread may be one no profiler knows),
 * or a window of a foreign stack when sp is outside [stack_low,
 * stack_base), as snapprof__capture_self() does. The pool's delegate runs
 * after the copy. Returns the slot, still FILLING, for the caller to fill
 * its extra area and publish with snapprof__capture_slot_publish(); NULL
 * when no slot was free (counted in pool->dropped) or the stack could not
 * be read from sp (the slot is given back). The thread's own stack is
 * copied as far as it can be read, never with a fault: its range may be a
 * mapping shared with memory another thread unmaps (a fiber's malloc'd
 * stack). No allocation, no locks.
 * Async-signal-safe. */
snapprof__capture_slot_t *snapprof__capture_regs(snapprof__capture_pool_t *pool,
                                                 const snapprof_regs_t *regs, uintptr_t stack_low,
                                                 uintptr_t stack_base, uint64_t entry_ns);

/* Gives back a slot taken by snapprof__capture_regs() and not published
 * (the caller found it could not use the capture). Async-signal-safe. */
void snapprof__capture_slot_abandon(snapprof__capture_slot_t *slot);

/* Publishes a slot taken by snapprof__capture_regs() to the drainer.
 * Async-signal-safe. */
void snapprof__capture_slot_publish(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot);

/* Gives a drained slot back (and the large buffer it used). Sampling side. */
void snapprof__capture_slot_release(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot);

/* Adds what target's captures need to the pool's plan for the next
 * snapprof__capture_pool_provision(), from what its handler noted: once it
 * went deeper than a slot, SNAPPROF__TARGET_LARGE_FIRST buffers of its
 * deepest copy and a quarter more (at most pool->copy_max and its stack's
 * size); when its captures found none free although the pool had every
 * buffer planned, half as many again (up to SNAPPROF__TARGET_LARGE_MAX).
 * Targets whose buffers one size can serve (within a quarter) share a
 * class of the plan; past SNAPPROF__PLAN_CLASSES, the deepest class takes
 * the rest. Sets target->large_refused from the last provisioning (deep
 * targets only). Sampling side. */
void snapprof__capture_target_plan(snapprof__capture_pool_t *pool,
                                   snapprof__capture_target_t *target);

/* Makes the pool's large buffers what the plan says (and clears it): for
 * each class of depth, from the deepest, as many buffers as its targets
 * planned that fit their deepest copy (at most SNAPPROF__POOL_LARGE_MAX in
 * all), those there first, then new ones mapped and faulted in here. Free
 * buffers no class takes (too small, or past the plan: a thread that
 * left) are unmapped first, so that their bytes can go to new ones;
 * buffers in use are left for a later call. All large buffers together
 * stay within budget bytes: past it pool->large_refused is set, and
 * captures that find no buffer stay truncated. Returns 0, or -ENOMEM when
 * a mapping was refused (asked again at the next call). Sampling side;
 * cheap when nothing changed. */
int snapprof__capture_pool_provision(snapprof__capture_pool_t *pool, size_t budget);

/* Withdraws target's share of the pool's large buffers: the next
 * snapprof__capture_pool_provision() unmaps what the targets left no
 * longer plan for (the buffers themselves are the pool's, and another
 * deep thread may be using them). Only when no handler can use target
 * (disarmed) and none of its captures waits in a slot. Sampling side. */
void snapprof__capture_target_free_large(snapprof__capture_pool_t *pool,
                                         snapprof__capture_target_t *target);

#endif
