/* The profiler object and the shared sampling thread that drives it.
 * Internal. One global lock (the sampler lock) guards the list of running
 * profilers and every running profiler's targets, counters and state; the
 * sampling thread holds it while it works on a tick and drops it while it
 * sleeps and while builders complete a profile. Lock order: sampler lock,
 * then the stack copier's request lock, then the module cache's lock. */
#ifndef SNAPPROF_PROFILER_INTERNAL_H
#define SNAPPROF_PROFILER_INTERNAL_H

#include <snapprof/profile_builder.h>
#include <snapprof/unwinder.h>

#include "common/clock.h"
#include "labels/labels.h"
#include "python/python.h"
#include "sampling_thread/histogram.h"
#include "stack_copier/stack_copier.h"
#include "stack_copier/stack_copier_slots.h"
#include "trigger/trigger.h"

#include <pthread.h>

enum { PROFILER_CREATED, PROFILER_RUNNING, PROFILER_COMPLETING, PROFILER_COMPLETED };

/* The most CPU time one of the sampling thread's drains of the CPU
 * captures spends before it leaves the rest for the next pass, a
 * millisecond later (drain() in drain.c, DRAIN_GAP_NS in tick.c). A
 * plain build unwinds and delivers a capture in tens of microseconds, so
 * a pass of the 256 slots stays well within it and nothing changes; under
 * TSan a deep thread's capture (copies of up to 800 KiB, every load
 * checked) took milliseconds, and one unbounded drain held the sampler
 * for over a second, 3-7 ticks in 3 s at 4 kHz (soak finding 9). */
#define SNAPPROF__DRAIN_BUDGET_NS 20000000u

/* Where a capture's Python frames sit in its extra area, after the labels;
 * and the size of that area with them (python) or without. */
#define SNAPPROF__PY_EXTRA_OFFSET ((sizeof(snapprof__label_capture_t) + 63u) & ~(size_t)63u)
#define SNAPPROF__EXTRA_SIZE(python)                                                               \
    ((python) ? SNAPPROF__PY_EXTRA_OFFSET + sizeof(snapprof__py_capture_t)                         \
              : sizeof(snapprof__label_capture_t))

/* A builder attached to a running profile for a stretch (attach.c). */
typedef struct snapprof__attached {
    snapprof_builder_t *builder;
    uint64_t start_mono, start_real; /* when it was attached */
    snapprof_stats_t stats0;         /* the counters then: its stretch's are the difference */
    size_t app_frames0, events0;     /* the app frames and events before it */
    int completed;                   /* by the profile's completion, with this result */
    int result;
} snapprof__attached_t;

typedef struct snapprof__target {
    struct snapprof_thread *thread;
    uint64_t cpu_start;     /* its CPU clock when it joined a running profile */
    uint64_t cpu_after;     /* its CPU clock read after its previous sample */
    uint64_t cpu_at_sample; /* its CPU clock in the handler at its previous sample */
    uint64_t cpu_last;      /* its CPU clock when the sampler last read it */
    int sampled;            /* it has been sampled through the signal once */
    int dead;               /* exited or recycled: no more attempts */
    /* Removed while the profile runs: disarmed, its clock read, waiting
     * for the sampling thread's next full drain to deliver its last
     * captures and free it (snapprof__retire_removed()). */
    int removed;
    unsigned backoff, backoff_left; /* ticks to skip after a timeout */
    /* Moved to the handshake by snapprof__check_handler() with its
     * trigger's captures maybe still in the slots: not signalled until the
     * drains have delivered them (sample_target() in tick.c). */
    int captures_left;
    snapprof_frame_t *prev; /* wall mode: its last stack, for idle ticks */
    size_t prev_count;
    unsigned prev_flags;
    uint64_t prev_time;                     /* when prev was taken (its copy's timestamp) */
    snapprof__label_capture_t *prev_labels; /* wall mode: the labels of that stack */
    /* Its trigger (0 until the profile starts): with a CPU-clock trigger,
     * its arm and where its captures go. */
    snapprof_trigger_t trigger;
    /* Joined a running profile with a CPU-clock trigger asked for, not as
     * it started on itself (those arm at once): the sampling thread arms
     * it at its next tick. */
    int arm_pending;
    int never_armed; /* it left, or the profile ended, while arm_pending */
    /* params.arm_on_demand: its trigger was stopped when the last builder
     * was detached (snapprof__park()); the next attach arms it again
     * (snapprof__unpark()). */
    int parked;
    /* Armed by the thread itself as it joined at its start: when it ends
     * without a sample its CPU time goes to the pool (deliver_unarmed()). */
    int armed_at_start;
    snapprof__arm_t *arm;
    uint32_t arm_gen;
    /* Its arm was made with SNAPPROF__ARM_NO_PAGE and the sampling thread
     * has not yet tried to map its page (snapprof__check_armed()): set by
     * snapprof__arm_target() at each arming, cleared at the first try,
     * whatever its outcome, so that the try is made once per arm and not
     * at every tick. */
    int page_to_map;
    snapprof__capture_target_t cap;
    /* While it waits to be armed, with the profile's process-wide timer
     * (params.unarmed_timer): where that timer's captures of it go
     * (published in thread->unarmed_ct while unarmed_ct_set), so that the
     * drain tells them from its own trigger's. */
    snapprof__capture_target_t pcap;
    int unarmed_ct_set;
    uint64_t sampled_ns; /* CPU time its delivered samples stand for */
    /* A CPU-clock trigger's first period is short (drawn in (0, interval]
     * so that a short thread is sampled with probability its CPU time /
     * interval), but its sample weighs the interval: first_debt_ns is by
     * how much, owed from the arm's first sample on (first_pending until
     * it comes), and first_short_ns what is still owed, repaid from the
     * thread's next samples (drain_some()). */
    int first_pending;
    unsigned first_odds; /* its first sample weighs this many intervals (arm_at_start()) */
    uint64_t first_debt_ns;
    uint64_t first_short_ns;
    int settled;                     /* its last remainder or excess is taken (settle_final()) */
    uint64_t remainder_ns;           /* CPU time already delivered as its remainder */
    uint64_t watch_fired, watch_cpu; /* cap.fired and CPU clock when last seen to progress */
    /* Wall mode without signals to blocked threads: what its latest
     * sample found it doing (a WALL_STATE_* and the system call). Its /proc
     * files are in stack_copier_proc.c's cache, not here. */
    uint64_t kernel_cpu_prev;     /* CPU clock at its previous capture (kernel_share) */
    uint64_t wall_unplaced_ticks; /* ticks of wall time still to go on a sample */
    /* Wall mode: when it joined a running profile (monotonic; 0 when it
     * was there from the start). Ticks the sampler missed before then are
     * not its wall time (snapprof__wall_owed()). */
    uint64_t wall_joined_ns;
    uint64_t sched_run, sched_wait; /* what its schedstat said last time */
    int wall_state;
    long wall_syscall;
    /* Wall mode with a perf trigger: the arm's schedule sequence as read
     * before the CPU clock read that found it blocked (valid while
     * blocked_seq_valid). While the sequence stays the same, the thread has
     * not been scheduled in, so it is still in that wait. */
    uint32_t blocked_seq;
    int blocked_seq_valid;
} snapprof__target_t;

struct snapprof_profiler {
    snapprof_params_t params;
    snapprof__target_t **targets; /* each allocated alone: arms point at them */
    size_t target_count, target_cap;
    snapprof_unwinder_t **unwinders;
    size_t unwinder_count;
    snapprof_builder_t **builders;
    size_t builder_count;
    /* Builders attached while it runs (attach.c); every sample goes to
     * these after the builders above. */
    snapprof__attached_t attached[SNAPPROF_ATTACHED_MAX];
    size_t attached_count;

    int state;
    /* Completion has delivered the last samples and calls the builders'
     * xOnProfileCompleted without the lock: nothing may reach a builder
     * from then on (a builder's callbacks never run concurrently, and none
     * comes after its completion). Set under the lock, never cleared. */
    int handed_over;
    int result; /* of completion */
    pid_t pid;  /* ours, read at start (getpid() is a system call) */
    uint64_t start_mono, start_real, end_mono;
    uint64_t next_tick, deadline, ticks_done;
    /* Wall mode: ticks the sampler missed since the last one it ran; that
     * one's samples carry their wall time, so each thread's wall total
     * stays its elapsed time on a machine too busy for every tick. */
    uint64_t wall_ticks_owed;
    int draining; /* snapprof__drain_some() is delivering captures (CPU samples) */
    /* CPU-clock triggers: the slots their captures go to, when to drain
     * them next, and the large buffers of deep threads. */
    snapprof__capture_pool_t pool;
    int pool_ready;
    /* params.unarmed_timer: the process-wide timer for threads not yet
     * armed (trigger_process.c), when it was made. */
    snapprof__process_timer_t ptimer;
    int ptimer_on;   /* it was made (its counters are the profile's) */
    int ptimer_live; /* and not stopped yet: threads not yet armed take its captures */
    size_t armed_count, handshake_count;
    /* params.arm_on_demand and no builder attached: no trigger is armed,
     * no handshake is sent, and the sampling thread ticks once a second
     * (snapprof__park(), snapprof__unpark() in arm.c). */
    int parked;
    /* The threads' CPU time while parked, which the run's rate leaves out
     * (snapprof__armed_cpu_ns()): summed at each unpark, and what was seen
     * at the last park. */
    uint64_t cpu_parked_ns, cpu_at_park;
    int joined_since_tick; /* a target became arm_pending since the last tick */
    /* CPU time of threads that left before their first tick (never armed),
     * delivered as one remainder, not one per thread. */
    uint64_t unarmed_ns;
    /* What ended threads' samples stood for beyond their clocks (a perf
     * trigger's first sample weighs a whole interval): taken off
     * unarmed_ns when it is delivered. */
    uint64_t overshoot_ns;
    uint64_t start_rng; /* arm_at_start()'s draws */
    uint64_t next_drain, last_drain;
    snapprof_stats_t stats;
    uint64_t cpu_removed_ns; /* CPU time of targets removed while profiled */
    size_t removed_count;    /* targets with removed set, still in targets[] */
    snapprof__hist_t pause, roundtrip, unwind;

    uint8_t *buffer; /* stack copies, mmap'd */
    size_t buffer_size;
    snapprof_frame_t *frames;        /* params.max_frames */
    snapprof_frame_t *kernel_frames; /* params.max_frames + 1, made at first use */
    snapprof_frame_t *frames_alt;    /* as many, for a second walk (wall mode) */
    /* params.python and an interpreter whose frames can be read: every
     * capture's extra area holds a snapprof__py_capture_t after the labels
     * (at SNAPPROF__PY_EXTRA_OFFSET), and py_frames (max_frames) receives
     * the spliced stack. */
    int python;
    snapprof_frame_t *py_frames;
    uint64_t py_forced_tick; /* wall mode: the tick of the last forced thread-list read */

    /* Labels: the handler's copy for the request in flight, and the views
     * handed to the builders. */
    snapprof__label_capture_t *labels;
    snapprof__capture_delegate_t delegate; /* the stack copier's, in the handler */
    /* The unwinders with an xOnStackCapture, which the delegate calls;
     * found at start. */
    snapprof_unwinder_t **capture_hooks;
    size_t capture_hook_count;
    snapprof_label_t label_views[SNAPPROF__LABELS_MAX + 2]; /* + state and syscall */
    /* App frames that ended while running, drained from the process-wide
     * log on every tick; given to the builders at completion. */
    uint64_t app_cursor;
    snapprof_app_frame_t *app_frames;
    size_t app_frame_count, app_frame_cap;
    /* Zones, counters and instants, read on every tick (events/). */
    snapprof__event_reader_t events;

    _Atomic uint32_t done_seq; /* futex word: bumped when a completion ends */
    struct snapprof_profiler *next_active;
};

/* Sampling thread (sampling_thread.c). */
void snapprof__sampler_lock(void);
void snapprof__sampler_unlock(void);
/* Whether a thread waits in snapprof__sampler_lock(): the sampling
 * thread's drain stops early for it. */
int snapprof__sampler_api_waiting(void);
/* Adds p to the running set, starting the thread if needed. Lock held. */
int snapprof__sampler_activate(snapprof_profiler_t *p);
/* Removes p from the running set. Lock held. */
void snapprof__sampler_deactivate(snapprof_profiler_t *p);
/* Waits until a completion of p ends (or a while passes: callers check
 * their condition again). Lock held; let go meanwhile. */
void snapprof__sampler_wait(snapprof_profiler_t *p);
/* Wakes the threads in snapprof__sampler_wait(p). Lock held. */
void snapprof__sampler_done(snapprof_profiler_t *p);
/* Makes the sampling thread ask every profiler again when it is due (one
 * became due sooner). Lock held. */
void snapprof__sampler_kick(void);
/* Delivers what every running profiler's capture slots hold now. Lock
 * held. */
void snapprof__sampler_drain_active(void);
/* Delivers what p's capture slots hold now (profiler.c). Lock held. */
void snapprof__profiler_drain(snapprof_profiler_t *p);
/* The same, and every heap sample so far (the final drain at stop). */
void snapprof__profiler_drain_all(snapprof_profiler_t *p);
/* Whether p's capture slots hold a capture of thread not yet delivered.
 * Lock held. */
int snapprof__profiler_has_captures_of(const snapprof_profiler_t *p,
                                       const struct snapprof_thread *thread);
/* Whether any running profiler's slots hold a capture of thread. Lock
 * held. */
int snapprof__sampler_active_have_captures_of(const struct snapprof_thread *thread);
/* snapprof__sampler_drain_active(), done by the sampling thread: the caller
 * (lock held) waits for it, at most 100 ms, then drains itself. The lock
 * is let go while it waits. */
void snapprof__sampler_drain_active_handoff(void);
/* How many of those timed out and drained on the caller (a test seam). */
unsigned snapprof__sampler_handoff_fallbacks(void);

/* Profiler (profiler.c), called by the sampling thread with the lock held:
 * drains its capture slots and samples every handshake target whose tick
 * is due; returns 1 when the profile is finished. */
int snapprof__profiler_tick(snapprof_profiler_t *p, uint64_t now);
/* When p next needs the sampling thread (now, when its slots fill up).
 * Lock held. */
uint64_t snapprof__profiler_due(const snapprof_profiler_t *p, uint64_t now);
/* The futex word a filling capture pool bumps to wake the sampling thread. */
uint32_t *snapprof__sampler_kick_word(void);
/* Completes a profile whose state is COMPLETING: called WITHOUT the lock;
 * runs the builders' completion and sets state COMPLETED. */
void snapprof__profiler_complete(snapprof_profiler_t *p);

/* ------------------------------------------------------------------------ */
/* What the profiler's files share (profiler.c, arm.c, drain.c, wall.c,     */
/* tick.c). Every function below is called with the lock held.              */
/* ------------------------------------------------------------------------ */

/* CPU time a target spent while profiled, as far as the sampler has seen. */
static inline uint64_t snapprof__target_cpu_ns(const snapprof__target_t *t)
{
    return t->cpu_last > t->cpu_start ? t->cpu_last - t->cpu_start : 0;
}

/* CPU time t spent while profiled that its samples do not stand for. */
static inline uint64_t snapprof__target_unsampled_ns(const snapprof__target_t *t)
{
    uint64_t total = snapprof__target_cpu_ns(t);
    return total > t->sampled_ns ? total - t->sampled_ns : 0;
}

/* The CPU clock up to which t's samples so far stand for its CPU time,
 * where a handshake or /proc sample weighs the CPU time since: its last
 * such sample's clock, else what its trigger's samples stood for from its
 * start (a thread that blocks the signal goes from its trigger to the
 * handshake, and those samples must not be counted again). */
static inline uint64_t snapprof__cpu_placed(const snapprof__target_t *t)
{
    return t->sampled ? t->cpu_at_sample : t->cpu_start + t->sampled_ns;
}

/* Counts a sample that could not be taken, by its reason. */
static inline void snapprof__fail(snapprof_profiler_t *p, snapprof_fail_reason_t reason)
{
    p->stats.failed[reason]++;
    p->stats.failed_total++;
}

/* What a wall-mode sample found its thread doing. /proc cannot tell a
 * thread on a CPU from one waiting for a CPU, so "running" means running
 * or runnable. */
enum { WALL_STATE_NONE = 0, WALL_STATE_RUNNING, WALL_STATE_RUNNABLE, WALL_STATE_BLOCKED };

/* profiler.c: frees a target; its trigger must be disarmed and its
 * captures drained. */
void snapprof__target_free(snapprof_profiler_t *p, snapprof__target_t *t);
/* profiler.c: moves the app frames that ended since the last call into
 * p->app_frames. */
void snapprof__drain_app_frames(snapprof_profiler_t *p);

/* arm.c: triggers, from arming to disarming. */
void snapprof__arm_target(snapprof_profiler_t *p, snapprof__target_t *t);
void snapprof__disarm(snapprof_profiler_t *p, snapprof__target_t *t);
void snapprof__settle_pending(snapprof__target_t *t);
void snapprof__clock_at_end(snapprof__target_t *t, int read_live);
void snapprof__retire_unarmed(snapprof_profiler_t *p, snapprof__target_t *t);
/* t, which waited to be armed, has exited: its CPU time joins the pool of
 * threads never armed. Lock held. */
void snapprof__pending_gone(snapprof_profiler_t *p, snapprof__target_t *t);
/* params.arm_on_demand: the last builder attached to p is leaving
 * (snapprof__park(): every trigger stopped, p->parked set), or the first
 * one is coming (snapprof__unpark(): every thread armed again, those that
 * joined meanwhile too, p->parked cleared). Only while p runs (or as it
 * starts), before its completion; the captures they leave in the slots
 * are the caller's to deliver. Lock held. */
void snapprof__park(snapprof_profiler_t *p);
void snapprof__unpark(snapprof_profiler_t *p);
/* total (the threads' CPU time while profiled) less their CPU time while
 * parked: a rate per CPU-second is per CPU-second while armed. Lock held. */
uint64_t snapprof__armed_cpu_ns(const snapprof_profiler_t *p, uint64_t total);
/* With the process-wide timer: t, which waits to be armed, takes that
 * timer's captures from now on (snapprof__unarmed_publish()), or no longer
 * (snapprof__unarmed_withdraw(): returns 1 when a capture of it may be in
 * the slots; none can come after). Lock held. */
void snapprof__unarmed_publish(snapprof_profiler_t *p, snapprof__target_t *t);
int snapprof__unarmed_withdraw(snapprof_profiler_t *p, snapprof__target_t *t);
void snapprof__retire_removed(snapprof_profiler_t *p);
int snapprof__check_armed(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t *cpu_now_out);
void snapprof__check_handler(snapprof_profiler_t *p);

/* stats.c: the counters with the percentiles filled in. */
void snapprof__snapshot_stats(const snapprof_profiler_t *p, snapprof_stats_t *out);
/* The info a profile is written with now (a flush, a builder written while
 * the profile runs): what is held so far is delivered first. Lock held. */
snapprof_profile_info_t snapprof__info_now(snapprof_profiler_t *p, snapprof_stats_t *stats);

/* attach.c: builders attached for a stretch. At start, without the lock,
 * starts those attached before it (returns the first error). At completion, with the lock
 * held, prepares the attached builders' infos; then, without the lock,
 * completes them (stats: the profile's final counters). At destroy, frees
 * those still attached. */
int snapprof__attached_start(snapprof_profiler_t *p, const snapprof_profile_info_t *info);
void snapprof__attached_complete(snapprof_profiler_t *p, const snapprof_stats_t *stats);
void snapprof__attached_destroy(snapprof_profiler_t *p);

/* drain.c: the capture slots drained, stacks unwound, samples delivered. */
void snapprof__deliver(snapprof_profiler_t *p, snapprof__target_t *t,
                       const snapprof_frame_t *frames, size_t count, unsigned flags,
                       uint64_t timestamp, uint64_t cpu_ns, snapprof__label_capture_t *labels);
void snapprof__deliver_remainder(snapprof_profiler_t *p, snapprof__target_t *t, int final);
int snapprof__settle_final(snapprof_profiler_t *p, snapprof__target_t *t);
void snapprof__net_unarmed(snapprof_profiler_t *p);
void snapprof__deliver_unarmed(snapprof_profiler_t *p);
/* Drains the slots and delivers every thread's remainder and the unarmed
 * pool up to now (attach.c): what a flush, an attach, a detach or a swap
 * delivers before its boundary. Lock held. */
void snapprof__deliver_so_far(snapprof_profiler_t *p);
/* params.c: the caller's params into out (the members its header had,
 * the defaults of the others); -EINVAL when in was not made by
 * snapprof_params_init(). Then their check: 0 or -EINVAL. */
int snapprof__params_read(const snapprof_params_t *in, snapprof_params_t *out);
int snapprof__params_check(const snapprof_params_t *p);

void snapprof__unwind_and_deliver(snapprof_profiler_t *p, snapprof__target_t *t,
                                  const snapprof__copy_result_t *res, uint8_t *buffer,
                                  snapprof__label_capture_t *labels, uint64_t cpu_ns,
                                  int without_fp, uint64_t kernel_ns);
int snapprof__drain_some(snapprof_profiler_t *p, int give_way);

/* wall.c: wall mode's blocked threads, read from /proc. */
size_t snapprof__wall_state_labels(int state, long syscall, snapprof_label_t *out);
int snapprof__thread_running(pid_t tid);
int snapprof__running_or_runnable(snapprof__target_t *t);
void snapprof__deliver_previous(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now);
uint64_t snapprof__wall_owed(const snapprof_profiler_t *p, const snapprof__target_t *t,
                             uint64_t now);
int snapprof__sample_blocked(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now,
                             const uint64_t *cpu0, const uint32_t *seq0);
int snapprof__still_blocked(const snapprof__target_t *t, uint32_t seq);
void snapprof__wall_tick_armed(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now,
                               uint64_t cpu_now, const uint32_t *seq, int runs);

#endif
