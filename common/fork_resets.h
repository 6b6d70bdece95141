/* Locks a fork() child takes anew: which ones a child found held by a
 * thread that did not come along, counted (a test seam, as the module
 * cache's and the symbol tables' own counts are). Internal.
 *
 * The child of fork() has only the thread that forked. A lock another
 * thread held at that moment stays held in the child for good, and the
 * child's first use of what it guards waits for ever. Each lock below has
 * a pthread_atfork() child handler, registered before the lock is first
 * taken, that tries the lock and, when it finds it held, initializes it
 * again and puts what it guards in a state the child can go on from (the
 * comment at each handler says which), then counts it here. */
#ifndef SNAPPROF_COMMON_FORK_RESETS_H
#define SNAPPROF_COMMON_FORK_RESETS_H

typedef enum snapprof__fork_lock {
    SNAPPROF__FORK_LABELS_PROCESS = 0, /* labels.c: the process-wide label table */
    SNAPPROF__FORK_APP_FRAMES,         /* app_frames.c: frame begin/end */
    SNAPPROF__FORK_EVENT_NAMES,        /* events.c: interned names, attached counters */
    SNAPPROF__FORK_EVENT_LOG,          /* events.c: thread registry and the event log */
    SNAPPROF__FORK_JIT_API,            /* jit_regions.c: regions registered by the API */
    SNAPPROF__FORK_JIT_PERF_MAP,       /* jit_perf_map.c: the perf map reader */
    SNAPPROF__FORK_JIT_RETIRE,         /* jit_regions.c: retired snapshots */
    SNAPPROF__FORK_JIT_READERS,        /* jit_regions.c: readers counted in an epoch */
    SNAPPROF__FORK_FD_PRIVATE,         /* fd_private.c: the private fd table's thread */
    SNAPPROF__FORK_LOCK_COUNT
} snapprof__fork_lock_t;

/* Counts a reset of lock in this (child) process. */
void snapprof__fork_reset_note(snapprof__fork_lock_t lock);

/* How many fork children found lock held and took it anew, as seen by
 * this process (a child inherits its parent's count). */
unsigned snapprof__fork_resets(snapprof__fork_lock_t lock);

#endif
