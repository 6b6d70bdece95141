/* App frame markers: snapprof_app_frame_begin/_end for frame-based programs
 * (games, renderers, UI loops). The frame in progress is one process-wide
 * atomic the signal handler reads into every sample; each frame that ends
 * is appended to a lock-free log that every running profiler drains on its
 * ticks, so that the profile can tell which frames were slow (hitches).
 *
 * The hitch is known only when the frame ends, after its samples went to
 * the builders. Rather than holding samples back in the profiler (which
 * would delay every builder by up to a frame, and a hang can make a frame
 * last seconds), samples carry the frame id and the profile's completion
 * hands the builders the list of frames with their hitch verdicts
 * (snapprof_profile_info_t.app_frames); the pprof builder then adds
 * hitch=true/false to the samples of those frames. */
#include "common/clock.h"
#include "common/fork_resets.h"
#include "labels/labels.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* Ended frames kept for the profilers to drain: they drain on every tick,
 * so this covers a frame rate of 1024 per sampling interval. */
#define LOG_SIZE 1024

typedef struct log_entry {
    _Atomic uint64_t seq; /* 2 * index + 2 once entry index is whole */
    _Atomic uint64_t id, begin_ns, end_ns;
} log_entry_t;

static log_entry_t g_log[LOG_SIZE];
static _Atomic uint64_t g_log_head; /* entries published */

/* begin/end are once per frame, so a mutex is cheap enough; neither the
 * handler nor the sampler ever takes it. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_open;          /* a frame is in progress (under g_lock) */
static uint64_t g_open_id;  /* under g_lock */
static uint64_t g_begin_ns; /* under g_lock */
/* What the handler reads: id + 1 of the frame in progress, 0 for none. */
static _Atomic uint64_t g_current;

/* The child of a fork() taken while another thread began or ended a frame
 * would find g_lock held for good (fork_resets.h): it takes it anew. An
 * append cut short left its entry's seq odd and the head where it was, so
 * the child's next append writes that entry again; g_open and the frame
 * in progress are as the cut-short call left them, which a later begin or
 * end sets right. */
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    if (pthread_mutex_trylock(&g_lock) == 0) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    pthread_mutex_init(&g_lock, NULL);
    snapprof__fork_reset_note(SNAPPROF__FORK_APP_FRAMES);
}

static void fork_once(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

/* Appends an ended frame to the log. g_lock held: one writer. */
static void log_append(uint64_t id, uint64_t begin_ns, uint64_t end_ns)
{
    uint64_t index = atomic_load_explicit(&g_log_head, memory_order_relaxed);
    log_entry_t *e = &g_log[index % LOG_SIZE];
    atomic_store_explicit(&e->seq, 2 * index + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&e->id, id, memory_order_relaxed);
    atomic_store_explicit(&e->begin_ns, begin_ns, memory_order_relaxed);
    atomic_store_explicit(&e->end_ns, end_ns, memory_order_relaxed);
    atomic_store_explicit(&e->seq, 2 * index + 2, memory_order_release);
    atomic_store_explicit(&g_log_head, index + 1, memory_order_release);
}

int snapprof_app_frame_begin(uint64_t frame_id)
{
    if (frame_id == UINT64_MAX)
        return -EINVAL;
    uint64_t now = snapprof__monotonic_ns();
    pthread_once(&g_fork_once, fork_once);
    pthread_mutex_lock(&g_lock);
    if (g_open)
        log_append(g_open_id, g_begin_ns, now); /* begin ends the previous frame */
    g_open = 1;
    g_open_id = frame_id;
    g_begin_ns = now;
    atomic_store_explicit(&g_current, frame_id + 1, memory_order_relaxed);
    pthread_mutex_unlock(&g_lock);
    return 0;
}

int snapprof_app_frame_end(uint64_t frame_id)
{
    uint64_t now = snapprof__monotonic_ns();
    pthread_once(&g_fork_once, fork_once);
    pthread_mutex_lock(&g_lock);
    if (!g_open || g_open_id != frame_id) {
        pthread_mutex_unlock(&g_lock);
        return -ENOENT;
    }
    log_append(frame_id, g_begin_ns, now);
    g_open = 0;
    atomic_store_explicit(&g_current, 0, memory_order_relaxed);
    pthread_mutex_unlock(&g_lock);
    return 0;
}

/* Async-signal-safe. */
void snapprof__app_frame_capture(int *in_frame, uint64_t *id)
{
    uint64_t v = atomic_load_explicit(&g_current, memory_order_relaxed);
    *in_frame = v != 0;
    *id = v - 1;
}

uint64_t snapprof__app_frames_head(void)
{
    return atomic_load_explicit(&g_log_head, memory_order_acquire);
}

size_t snapprof__app_frames_drain(uint64_t *cursor, snapprof_app_frame_t *out, size_t max,
                                  uint64_t *lost)
{
    uint64_t head = atomic_load_explicit(&g_log_head, memory_order_acquire);
    if (head - *cursor > LOG_SIZE) {
        *lost += head - LOG_SIZE - *cursor;
        *cursor = head - LOG_SIZE;
    }
    size_t n = 0;
    while (*cursor < head && n < max) {
        uint64_t index = *cursor;
        log_entry_t *e = &g_log[index % LOG_SIZE];
        uint64_t s0 = atomic_load_explicit(&e->seq, memory_order_acquire);
        snapprof_app_frame_t f = {
            .id = atomic_load_explicit(&e->id, memory_order_relaxed),
            .begin_ns = atomic_load_explicit(&e->begin_ns, memory_order_relaxed),
            .end_ns = atomic_load_explicit(&e->end_ns, memory_order_relaxed),
        };
        atomic_thread_fence(memory_order_acquire);
        uint64_t s1 = atomic_load_explicit(&e->seq, memory_order_relaxed);
        (*cursor)++;
        if (s0 != 2 * index + 2 || s1 != s0) {
            (*lost)++; /* overwritten by a newer frame while we looked */
            continue;
        }
        out[n++] = f;
    }
    return n;
}
