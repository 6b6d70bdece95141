/* Sample labels and app frame markers: the internal side of the public
 * snapprof_label_* and snapprof_app_frame_* calls. The signal handler
 * copies the labels in force into a capture buffer the sampler owns
 * (snapprof__labels_capture); the sampler turns the copy into
 * snapprof_label_t views after the target resumed (snapprof__labels_decode).
 *
 * Thread and signal safety: snapprof__labels_capture() and
 * snapprof__app_frame_capture() are async-signal-safe and run in the
 * handler; everything else runs on the sampling thread. */
#ifndef SNAPPROF_LABELS_H
#define SNAPPROF_LABELS_H

#include "events/events.h"

#include <snapprof/snapprof.h>

#include <stdint.h>

/* A label as stored: 16 words of 8 bytes (kind, number, unit, key,
 * string), so a slot is copied with word-sized atomic loads. */
#define SNAPPROF__LABEL_WORDS 16

/* Labels a sample can carry: both scopes' slots, the app frame, the zone
 * and the attached counters. */
#define SNAPPROF__LABELS_MAX (2 * SNAPPROF_LABEL_SLOTS + 1 + SNAPPROF__EVENT_LABELS_MAX)

typedef struct snapprof__label_capture {
    uint32_t count;   /* slots copied into slots[] */
    uint32_t skipped; /* process labels left out: a writer kept changing them */
    int in_app_frame; /* an app frame was in progress */
    uint64_t app_frame_id;
    uint8_t is_thread[2 * SNAPPROF_LABEL_SLOTS]; /* slot i came from the thread scope */
    uint64_t slots[2 * SNAPPROF_LABEL_SLOTS][SNAPPROF__LABEL_WORDS];
    snapprof__event_capture_t events; /* the zone and the attached counters */
} snapprof__label_capture_t;

/* Copies the calling thread's labels, the process's labels, the app frame
 * in progress, the thread's zone and the attached counters into out. RUNS IN THE SIGNAL HANDLER on
 * the target thread: no allocation, no locks, bounded work. Async-signal-safe. */
void snapprof__labels_capture(snapprof__label_capture_t *out);

/* Fills out[0..SNAPPROF__LABELS_MAX) with views of a capture: the process
 * labels whose key the thread does not also set, the thread labels, then
 * "frame" (numeric) when an app frame was in progress, "zone" and the
 * attached counters (snapprof__events_decode()). The strings point
 * into c, which must outlive the views. Returns the count. Sampler side. */
size_t snapprof__labels_decode(snapprof__label_capture_t *c, snapprof_label_t *out);

/* The app frame in progress, read in the handler. Async-signal-safe. */
void snapprof__app_frame_capture(int *in_frame, uint64_t *id);

/* Position in the process-wide log of ended app frames: a profiler
 * remembers it at start and drains from it. */
uint64_t snapprof__app_frames_head(void);

/* Copies up to max app frames that ended since *cursor into out and moves
 * *cursor past them; frames the log overwrote before they were read are
 * added to *lost. Returns the count. Never blocks (the log is lock-free
 * for readers); sampler side. */
size_t snapprof__app_frames_drain(uint64_t *cursor, snapprof_app_frame_t *out, size_t max,
                                  uint64_t *lost);

#endif
