/* Heap sampling as the profiler sees it (the public side is
 * <snapprof/heap.h>): turning it on and off for one profiler, draining
 * the sampled allocations and frees towards its builders, and keeping the
 * library's own threads and code out of it. Internal.
 *
 * One profiler at a time owns the heap sampler (the note functions are
 * process-wide). Everything here but snapprof__heap_mute_thread() and the
 * guard runs with the sampler lock held. */
#ifndef SNAPPROF_HEAP_SAMPLER_H
#define SNAPPROF_HEAP_SAMPLER_H

#include "heap/heap_hook_abi.h"
#include "stack_copier/stack_copier.h"

#include <snapprof/snapprof.h>

#include <stddef.h>
#include <stdint.h>

/* What the owner adds to each sampled allocation's capture: capture runs
 * on the allocating thread right after the labels are taken, and fills
 * tail_size bytes of the slot (the sink's unwind gets them back). It must
 * be async-signal-safe in spirit: no allocation, no locks (it runs inside
 * malloc). The profiler's Python frames (python/) come this way, since
 * heap/ sits beside python/ and does not call it. */
typedef struct snapprof__heap_more {
    void (*capture)(void *tail);
    size_t tail_size;
} snapprof__heap_more_t;

/* Starts heap sampling for owner with a mean interval of interval bytes:
 * the first start makes the capture slots and the free queue (kept for
 * the life of the process: a hook may still hold a slot after a stop),
 * with room for more->tail_size bytes beside each capture (more NULL:
 * none). A later start whose more needs a bigger tail than the slots have
 * runs without it (its captures carry no tail). kick is the futex word
 * that wakes the sampling thread. Returns 0, -EBUSY when another profiler
 * owns it, -ENOMEM. */
int snapprof__heap_start(const void *owner, size_t interval, uint32_t *kick,
                         const snapprof__heap_more_t *more);

/* Stops taking new samples (the note functions return 0 from now on);
 * what was sampled until now can still be drained. No-op unless owner
 * owns it. */
void snapprof__heap_pause(const void *owner);

/* Ends owner's session: forgets its live blocks and stacks, empties the
 * set of live addresses, and lets another profiler start. Call after
 * the last drain. No-op unless owner owns it. */
void snapprof__heap_end(const void *owner);

/* 1 when owner owns the heap sampler. */
int snapprof__heap_owned_by(const void *owner);

/* 1 when owner's heap captures or frees fill up and want a drain now. */
int snapprof__heap_due(const void *owner);

/* Where the drain sends samples: the profiler's unwinders and builders. */
typedef struct snapprof__heap_sink {
    void *ctx;
    /* Called once before the first unwind of a drain that has any. */
    void (*prepare)(void *ctx);
    /* Unwinds a copy (the thread has long resumed): sets *frames (valid
     * until the next call) and *flags (SNAPPROF_SAMPLE_*), returns the
     * count (0: nothing could be unwound). tail: what the session's
     * snapprof__heap_more_t captured beside it, NULL when it had none. */
    size_t (*unwind)(void *ctx, const snapprof__copy_result_t *res, uint8_t *buffer,
                     const void *tail, const snapprof_frame_t **frames, unsigned *flags);
    /* Gives a sample to the builders. */
    void (*deliver)(void *ctx, const snapprof_sample_t *s);
    snapprof_stats_t *stats; /* heap_samples, heap_frees counted here */
    /* Asked between deliveries; nonzero stops the drain there, the rest
     * kept in order for the next one. NULL: never stops early. */
    int (*give_way)(void *ctx);
    /* Nonzero: the drain stops between deliveries once it has taken this
     * long, the rest kept in order for the next one, as for give_way but
     * not reported as stopped early. The sampling thread's ticks pass
     * their interval, so that heap samples that come faster than they can
     * be delivered (a delivery under TSan takes a millisecond) cannot keep
     * the ticks and the CPU captures waiting behind one drain. */
    uint64_t budget_ns;
} snapprof__heap_sink_t;

/* Delivers owner's sampled allocations and frees so far, in the order
 * they happened (a free always after its allocation), and grows the set
 * of live addresses when it fills. Returns 1 when sink->give_way stopped
 * it early, else 0. No-op unless owner owns it. */
int snapprof__heap_drain(const void *owner, const snapprof__heap_sink_t *sink);

/* 1 when the last drain stopped before the end (give_way, budget_ns):
 * what it left wants the next drain soon. Lock held (the sampler's). */
int snapprof__heap_drain_behind(void);

/* Adds the hook-side counters of owner's session (drops, lost frees) to
 * out. No-op unless owner owns it. */
void snapprof__heap_stats(const void *owner, snapprof_stats_t *out);

/* A thread was renamed through the library (snapprof_thread_update_name):
 * sampled allocations read their thread's name again. Any thread. */
void snapprof__heap_names_changed(void);

/* Marks the calling thread as one of the library's own: its allocations
 * are never sampled, for the rest of its life. Any thread. */
void snapprof__heap_mute_thread(void);

/* The library's own code runs on the calling thread between the two
 * (they nest): note functions called meanwhile on it are ignored. Any
 * thread; never allocates. */
void snapprof__heap_guard_enter(void);
void snapprof__heap_guard_leave(void);

/* Test seams (tests/README.md, "Test seams"): the rule alone. With
 * rule_only_interval nonzero, heap sampling is on with that interval and a
 * sampled allocation captures nothing, records nothing and returns 1. */
typedef struct snapprof__heap_seams {
    size_t rule_only_interval;
} snapprof__heap_seams_t;

/* Installs seams (NULL: none, and heap sampling off again); *seams must
 * stay valid until the next call. Not while a profiler samples the heap. */
void snapprof__heap_set_seams(const snapprof__heap_seams_t *seams);

/* The hooks' shared state (heap_hook_abi.h) that the GOT hooks
 * (heap_got/) count down against: the preload's when libsnapprof-heap.so is
 * loaded, else this library's own, with the sampler's slow path attached
 * (at construction). Any thread. */
snapprof__heap_hook_t *snapprof__heap_hook_shared(void);

/* This library's own hook state: what snapprof__heap_hook_shared() returns
 * when libsnapprof-heap.so is not loaded (whether it is is settled when
 * this library is relocated), and so the one the GOT hooks, installed
 * only then, count down against. Hidden: they reach it without the GOT. */
extern snapprof__heap_hook_t snapprof__heap_own_hook __attribute__((visibility("hidden")));

/* The code of the GOT hooks (heap_got/): a sampled allocation's frames in
 * [start, limit) next to its caller are cut, as those of
 * libsnapprof-heap.so's hooks are. Any thread. */
void snapprof__heap_set_hook_range(uintptr_t start, uintptr_t limit);

/* 1 when libsnapprof-heap.so's hooks are loaded (and attached). */
int snapprof__heap_hooks_preloaded(void);

/* A check for modules loaded or unloaded since the last, run once a tick
 * by the sampling thread (snapprof__heap_tick(), with the sampler lock
 * held: fn must never wait for a lock a program thread can hold while it
 * calls the library). The GOT patcher sets it at install and clears it at
 * uninstall; NULL: nothing. */
typedef void (*snapprof__heap_tick_fn)(void);
void snapprof__heap_set_tick(snapprof__heap_tick_fn fn);
void snapprof__heap_tick(void);

#endif
