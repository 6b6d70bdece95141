/* A thread's event state and the event ring it writes, as events.c (names,
 * zones, counters, instants, the log and its readers) and events_calls.c
 * (function timing) share them. Internal to events/.
 *
 * Thread and signal safety: the state belongs to its thread (the owner);
 * the signal handler reads only the zone stack, a reader only the ring's
 * tail and the registry (under the log's mutex), the calls builder only
 * the call tree. */
#ifndef SNAPPROF_EVENTS_INTERNAL_H
#define SNAPPROF_EVENTS_INTERNAL_H

#include "events/events.h"

#include <stdatomic.h>
#include <stdint.h>

/* What became of an open zone's (or call's) begin: no profiler recorded
 * it, it is in the ring (its end will be), or the ring had no room (its
 * end is dropped and counted too). */
enum { SNAPPROF__ZONE_UNRECORDED = 0, SNAPPROF__ZONE_RECORDED = 1, SNAPPROF__ZONE_DROPPED = 2 };

typedef struct snapprof__ring_event {
    uint64_t time_ns;
    uint32_t name;
    uint16_t kind;
    uint16_t depth;
    union {
        double value;     /* counters */
        uint64_t address; /* functions */
    } u;
} snapprof__ring_event_t;

struct snapprof__call_tree; /* events_calls.c */

typedef struct snapprof__event_thread {
    /* The zone stack: the handler reads depth, then stack[depth - 1]. */
    _Atomic uint32_t depth;
    _Atomic uint32_t stack[SNAPPROF_ZONE_DEPTH_MAX];
    /* Owner only. */
    uint8_t recorded[SNAPPROF_ZONE_DEPTH_MAX]; /* SNAPPROF__ZONE_* of each open zone */
    uint32_t overflow;                         /* zones open past SNAPPROF_ZONE_DEPTH_MAX */
    uint32_t reserved; /* recorded zones open: ring room kept for their ends */
    pid_t tid;
    /* The ring: head written by the owner, tail by the reader. */
    _Atomic uint64_t head, tail;
    /* Function timing (snapprof_func_enter/_exit), made on first use. */
    _Atomic(struct snapprof__call_tree *) calls; /* read by the calls builder */
    /* The registry of threads (under the log's mutex). */
    struct snapprof__event_thread *next, *prev;
    snapprof__ring_event_t ring[SNAPPROF__EVENT_RING];
} snapprof__event_thread_t;

/* The calling thread's state, or NULL before its first call. Initial-exec
 * TLS holds only the pointer, as for the label tables. */
extern __thread _Atomic(snapprof__event_thread_t *) snapprof__event_tls
    __attribute__((tls_model("initial-exec")));

/* Profilers reading events: threads record events only while it is > 0. */
extern _Atomic int snapprof__event_readers;

static inline int snapprof__events_recording(void)
{
    return atomic_load_explicit(&snapprof__event_readers, memory_order_relaxed) > 0;
}

/* The calling thread's state, made on first use; NULL with *err set when
 * it cannot be. */
snapprof__event_thread_t *snapprof__event_thread(int *err);

/* Appends an event to t's ring if it has room beyond keep entries (kept
 * for the ends of recorded zones and calls). Returns 1 when written, 0
 * when dropped (counted). Owner. */
int snapprof__event_push(snapprof__event_thread_t *t, uint32_t keep, snapprof__ring_event_t ev);

/* Counts an event dropped for want of room (the end of a zone or call
 * whose begin was dropped). Any thread. */
void snapprof__event_count_dropped(void);

/* The log's mutex, which guards the registry of threads and the retired
 * call trees; taking it registers the fork handler first. */
void snapprof__event_log_lock(void);
void snapprof__event_log_unlock(void);

/* The first thread of the registry (then ->next). Log mutex held. */
snapprof__event_thread_t *snapprof__event_threads_locked(void);

/* events_calls.c: ends t's open calls (thread exit) and keeps its tree for
 * the calls builder. Log mutex held. */
void snapprof__calls_retire_locked(snapprof__event_thread_t *t);

/* events_calls.c: forgets the retired trees, in a fork() child that found
 * the log's mutex held (events.c's fork handler). */
void snapprof__calls_fork_forget(void);

#endif
