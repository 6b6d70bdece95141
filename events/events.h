/* Zones, counters and instant events: the internal side of the public
 * snapprof_zone_*, snapprof_counter_* and snapprof_instant calls.
 *
 * A thread that uses them gets a state (allocated by its first call) that
 * holds its zone stack, read by the signal handler for the zone= label
 * (snapprof__events_capture), and a ring of events that it alone writes
 * and that the profilers drain on their ticks (snapprof__event_reader_*)
 * into the process-wide event log, from which every running profiler
 * copies what it has not seen yet.
 *
 * Thread and signal safety: snapprof__events_capture() is async-signal-safe
 * and runs in the handler; snapprof__events_decode() and the reader
 * functions run on the sampler side (the reader functions under the
 * sampler lock or not, they take the event log's own mutex). */
#ifndef SNAPPROF_EVENTS_H
#define SNAPPROF_EVENTS_H

#include <snapprof/snapprof.h>

#include <stdint.h>

/* Events a thread can hold before a profiler drains them (it drains on
 * every tick); more are dropped and counted. */
#define SNAPPROF__EVENT_RING 4096
/* Events held in the process-wide log for profilers that read it. A
 * profiler that falls behind by more loses the oldest (counted). */
#define SNAPPROF__EVENT_LOG 65536
/* Events one profile keeps; more are counted as lost. */
#define SNAPPROF__EVENTS_PROFILE_MAX ((size_t)1 << 20)

/* What the handler copies: the innermost zone and the attached counters. */
typedef struct snapprof__event_capture {
    uint32_t zone; /* name id of the innermost zone, 0 for none */
    uint32_t counter_count;
    struct {
        uint32_t name; /* name id */
        uint32_t attach;
        int64_t value;
    } counters[SNAPPROF_COUNTER_ATTACH_MAX];
} snapprof__event_capture_t;

/* Labels snapprof__events_decode() can add. */
#define SNAPPROF__EVENT_LABELS_MAX (1 + SNAPPROF_COUNTER_ATTACH_MAX)

/* Copies the calling thread's innermost zone and the attached counters'
 * values into out. RUNS IN THE SIGNAL HANDLER on the target thread: no
 * allocation, no locks, bounded work. Async-signal-safe. */
void snapprof__events_capture(snapprof__event_capture_t *out);

/* Appends the labels of a capture to out (zone=..., one numeric label per
 * attached counter that was set). Strings point into the name table, which
 * lives as long as the process. Returns the count. Sampler side. */
size_t snapprof__events_decode(const snapprof__event_capture_t *c, snapprof_label_t *out);

/* A profiler's view of the event log: the events it copied so far. */
typedef struct snapprof__event_reader {
    int open;
    uint64_t cursor;       /* next log entry to copy */
    uint64_t dropped_base; /* thread-side drops when the reader opened */
    uint64_t lost;         /* log overflow and the profile cap */
    snapprof_event_t *events;
    size_t count, cap;
} snapprof__event_reader_t;

/* Starts recording events for r (from now on, threads write their
 * events). Returns 0 or -ENOMEM (the log is allocated by the first
 * reader). */
int snapprof__event_reader_open(snapprof__event_reader_t *r);
/* Moves what the threads wrote into the log and copies the log's new
 * entries into r->events. Never blocks a thread that writes events. */
void snapprof__event_reader_read(snapprof__event_reader_t *r);
/* Reads what is left and stops recording for r; its events stay. */
void snapprof__event_reader_close(snapprof__event_reader_t *r);
/* Events thread buffers dropped since r opened. */
uint64_t snapprof__event_reader_dropped(const snapprof__event_reader_t *r);
/* Frees r's events. */
void snapprof__event_reader_free(snapprof__event_reader_t *r);

/* Function timing: one call path of a thread (path[0] the function,
 * path[depth - 1] the outermost caller), with its calls and self time. */
typedef void (*snapprof__calls_visit_cb)(void *ud, pid_t tid, const uintptr_t *path, size_t depth,
                                         uint64_t calls, uint64_t self_ns);
/* Calls cb for every call path of every thread that called
 * snapprof_func_enter(), live or exited (the last 256 exited ones), under
 * the log's mutex. Returns the calls no path holds (trees full, exited
 * trees let go). Sampler side. */
uint64_t snapprof__calls_visit(snapprof__calls_visit_cb cb, void *ud);

#endif
