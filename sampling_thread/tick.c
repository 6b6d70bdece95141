/* One tick of one profiler, run by the sampling thread: drains the slots,
 * arms the threads that joined, checks the armed ones, samples the others
 * by the handshake, and says when the profiler is next due. */
#include "sampling_thread/profiler_internal.h"

#include "heap/heap_sampler.h"
#include "module_cache/module_cache.h"
#include "stack_copier/stack_copier.h"
#include "unwinder/unwinder_internal.h"

#include <time.h>

/* The handshake: signals t, waits for its copy, unwinds and delivers it.
 * Lock held. */
static void sample_target(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now)
{
    struct snapprof_thread *th = t->thread;
    uint64_t cpu_now;
    if (atomic_load(&th->exited) || snapprof__thread_cpu_ns(th->tid, &cpu_now) != 0) {
        snapprof__fail(p, SNAPPROF_FAIL_THREAD_EXITED);
        t->dead = 1;
        return;
    }
    t->cpu_last = cpu_now;
    if (t->captures_left) {
        /* Its trigger's last captures first (snapprof__check_handler()):
         * they say what part of its CPU time they stand for. */
        if (snapprof__profiler_has_captures_of(p, th)) {
            if (p->params.mode == SNAPPROF_MODE_WALL)
                snapprof__deliver_previous(p, t, now); /* its wall time still passes */
            return;
        }
        t->captures_left = 0;
    }
    if (t->sampled && cpu_now < t->cpu_after) {
        /* A thread's CPU clock never runs backwards: another thread. */
        snapprof__fail(p, SNAPPROF_FAIL_TID_RECYCLED);
        t->dead = 1;
        return;
    }
    int proc_mode = p->params.mode == SNAPPROF_MODE_WALL &&
                    p->params.wall_blocked == SNAPPROF_WALL_BLOCKED_PROC;
    /* Found running last time: it may have gone to sleep since, even
     * before its CPU clock was read after the handshake, and /proc says so
     * without a signal. */
    int look_again =
        proc_mode && (t->wall_state == WALL_STATE_RUNNING || t->wall_state == WALL_STATE_RUNNABLE);
    /* Found blocked last time: its stack is still good only while its CPU
     * clock stands still (its clock was read with the copy, exactly). Any
     * CPU time means it woke, and a short wake-up, well under the idle
     * threshold, is enough to wait somewhere else now; looking costs a
     * /proc read, never a signal. */
    uint64_t idle_ns =
        proc_mode && t->wall_state == WALL_STATE_BLOCKED ? 1 : p->params.idle_threshold_ns;
    if (t->sampled && cpu_now - t->cpu_after < idle_ns && !look_again) {
        /* It has not run since its last sample, so its stack is the same:
         * do not disturb it. */
        if (p->params.mode == SNAPPROF_MODE_CPU) {
            p->stats.samples_skipped_idle++;
        } else {
            snapprof__deliver_previous(p, t, now);
        }
        return;
    }
    if (proc_mode) {
        /* Blocked threads are copied without a signal (which would end
         * their wait early); only a running one is signalled. */
        if (snapprof__sample_blocked(p, t, now, &cpu_now, NULL))
            return;
        if (!snapprof__thread_running(th->tid)) { /* it went back to sleep meanwhile */
            snapprof__deliver_previous(p, t, now);
            return;
        }
        t->wall_state = snapprof__running_or_runnable(t);
    }
    if (t->backoff_left > 0) {
        t->backoff_left--;
        if (p->params.mode == SNAPPROF_MODE_WALL)
            snapprof__deliver_previous(p, t, now); /* its wall time still passes */
        return;
    }
    if (p->params.mode == SNAPPROF_MODE_CPU && !snapprof__thread_running(th->tid)) {
        /* It ran since its last sample but sleeps now: a signal would end
         * its sleep early (EINTR) and land in the syscall return. Its CPU
         * time goes with its next sample. */
        p->stats.samples_skipped_idle++;
        return;
    }

    snapprof__copy_request_t req = {
        .thread = th,
        .signo = p->params.signal,
        .buffer = p->buffer,
        .buffer_size = p->buffer_size,
        .timeout_ns = p->params.copy_timeout_ns,
        .delegate = &p->delegate,
        .extra = p->labels,
    };
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason;
    if (snapprof__stack_copier_copy(&req, &res, &reason) != 0) {
        snapprof__fail(p, reason);
        if (reason == SNAPPROF_FAIL_THREAD_EXITED || reason == SNAPPROF_FAIL_TID_RECYCLED) {
            t->dead = 1;
        } else if (reason == SNAPPROF_FAIL_TIMEOUT || reason == SNAPPROF_FAIL_HANDLER_REPLACED) {
            /* Probably blocking the signal: try again less and less often
             * rather than spending a timeout on it every tick. */
            t->backoff = t->backoff ? (t->backoff < 64 ? t->backoff * 2 : 64) : 1;
            t->backoff_left = t->backoff;
        }
        if (p->params.mode == SNAPPROF_MODE_WALL && !t->dead)
            snapprof__deliver_previous(p, t, now); /* its wall time still passes */
        return;
    }
    t->backoff = 0;
    snapprof__hist_add(&p->roundtrip, res.roundtrip_ns);
    uint64_t since = snapprof__cpu_placed(t);
    uint64_t cpu_ns = res.cpu_ns >= since ? res.cpu_ns - since : 0;
    snapprof__unwind_and_deliver(p, t, &res, p->buffer, p->labels, cpu_ns, 0, 0);
    t->cpu_at_sample = res.cpu_ns;
    t->sampled = 1;
    /* Read after the target resumed: our handler's own CPU time must not
     * make an idle thread look busy on the next tick. */
    snapprof__thread_cpu_ns(th->tid, &t->cpu_after);
}

/* How often the slots are drained when nothing fills them sooner, and the
 * least time between two drains when they fill faster. With only CPU-clock
 * triggers armed (no handshake, not wall mode) this is also how often the
 * armed threads are checked (their CPU clocks, our handler, new modules):
 * a capture pool that fills to half wakes the sampling thread at once
 * (stack_copier_slots.c), and so does a capture in a large buffer, a
 * thread that joins, a stop or a drain asked for, so nothing waits on it.
 * It was 20 ms: 50 wake-ups and ~400 system calls a second, 1.7 % of the
 * CPU of a program that uses 0.1 CPU (issue 28); at 200 ms, 5 wake-ups.
 * A handler replaced under us floods the program's for at most this long
 * (drain_interval_ns(): up to a second below 100 Hz). */
#define DRAIN_INTERVAL_NS 200000000u
/* With Python frames on, a drain at most this soon after the last when a
 * capture met a code object not yet named (python/python_symbols.c): its
 * name is read from the code object at the drain, and a program that
 * makes and drops functions frees them (python_frames_recursion, chains
 * remade every ~0.25 CPU-s: 51 % of its samples whole with only the
 * periodic drain at 200 ms). A program that makes new code objects all the
 * time is drained this often, as every Python run was before. */
#define PYTHON_NAMES_GAP_NS 20000000u
#define DRAIN_GAP_NS 1000000u
/* Below 100 Hz the drains wait for as many periods of one thread's CPU
 * time as at 100 Hz (20), up to a second: at the flight recorder's 19 Hz
 * (record --flight) a drain every 200 ms found one capture or none, and
 * its 5 wake-ups a second were 6.5 ms of CPU time in 20 s of a server that
 * uses 0.1 CPU, a third of what --flight cost it (issue 28, target 1 %).
 * 100 Hz and above: DRAIN_INTERVAL_NS, as before. */
#define DRAIN_PERIODS 20u
#define DRAIN_INTERVAL_MAX_NS 1000000000u

static uint64_t drain_interval_ns(const snapprof_profiler_t *p)
{
    uint64_t n = DRAIN_PERIODS * p->params.interval_ns;
    return n <= DRAIN_INTERVAL_NS       ? DRAIN_INTERVAL_NS
           : n >= DRAIN_INTERVAL_MAX_NS ? DRAIN_INTERVAL_MAX_NS
                                        : n;
}

uint64_t snapprof__profiler_due(const snapprof_profiler_t *p, uint64_t now)
{
    /* Heap captures or frees filling up (heap/): drain now. */
    if (snapprof__heap_due(p))
        return p->last_drain + DRAIN_GAP_NS > now ? p->last_drain + DRAIN_GAP_NS : now;
    /* Parked (params.arm_on_demand, nothing attached): its slow tick, or
     * its end. */
    if (p->parked)
        return p->deadline && p->deadline < p->next_tick ? p->deadline : p->next_tick;
    if (p->armed_count == 0)
        return p->next_tick;
    /* Filling up: drain now, but leave the lock free for a moment between
     * drains (see snapprof__drain_some()). */
    if (atomic_load_explicit(&p->pool.full, memory_order_relaxed) >= p->pool.kick_at)
        return p->last_drain + DRAIN_GAP_NS > now ? p->last_drain + DRAIN_GAP_NS : now;
    /* A deep thread's capture holds one of its few large buffers until it
     * is drained, and one that found none wants more: as soon, so that
     * the thread's next captures find one free. */
    if (atomic_load_explicit(&p->pool.large_full, memory_order_relaxed) > 0 ||
        atomic_load_explicit(&p->pool.large_asked, memory_order_relaxed))
        return p->last_drain + DRAIN_GAP_NS > now ? p->last_drain + DRAIN_GAP_NS : now;
    uint64_t due = p->next_drain;
    if (p->python && snapprof__python_names_wanted()) {
        uint64_t soon =
            p->last_drain + PYTHON_NAMES_GAP_NS > now ? p->last_drain + PYTHON_NAMES_GAP_NS : now;
        if (soon < due)
            due = soon;
    }
    if ((p->handshake_count > 0 || p->joined_since_tick || p->params.mode == SNAPPROF_MODE_WALL) &&
        p->next_tick < due)
        due = p->next_tick;
    if (p->deadline && p->deadline < due)
        due = p->deadline;
    return due;
}

/* Whether t, which waits to be armed, is armed at this tick. With the
 * process-wide timer (params.unarmed_timer) sampling it meanwhile, only
 * once it has used an interval of CPU time: a thread armed with less of
 * its life left than its first period (drawn around one interval) would
 * mostly end unsampled, its time in the remainder, and the arming (9
 * system calls) would cost it more than its work. Lock held. */
static int unarmed_due(const snapprof_profiler_t *p, const snapprof__target_t *t, uint64_t now)
{
    if (!t->unarmed_ct_set)
        return 1;
    uint64_t interval = p->params.interval_ns;
    if (now < t->wall_joined_ns + interval)
        return 0; /* it cannot have used an interval yet */
    uint64_t cpu;
    if (snapprof__thread_cpu_ns(t->thread->tid, &cpu) != 0)
        return 1;
    return cpu >= t->cpu_start + interval;
}

/* Adds the sampling thread's CPU time since c0 to p's counters. */
static void count_sampler_cpu(snapprof_profiler_t *p, const struct timespec *c0)
{
    struct timespec c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    p->stats.sampler_cpu_ns +=
        (uint64_t)(c1.tv_sec - c0->tv_sec) * 1000000000u + (uint64_t)(c1.tv_nsec - c0->tv_nsec);
}

/* How often a parked profiler ticks (params.arm_on_demand with nothing
 * attached): issue 28 allows a thread of ours one wake-up a second in an
 * idle program. */
#define PARKED_TICK_NS 1000000000u

/* A tick of a parked profiler: nothing is armed and no thread is
 * signalled; the process-wide logs (app frames, events) are read and the
 * heap hooks patch new modules, once a second. Threads that join wait,
 * unarmed, for the next attach (snapprof__unpark()). Returns 1 when the
 * profile is finished. Lock held. */
static int parked_tick(snapprof_profiler_t *p, uint64_t now, const struct timespec *c0)
{
    if (now >= p->next_tick) {
        snapprof__heap_tick();
        snapprof__drain_app_frames(p);
        snapprof__event_reader_read(&p->events);
        p->next_tick = snapprof__monotonic_ns() + PARKED_TICK_NS;
    }
    count_sampler_cpu(p, c0);
    return p->deadline && now >= p->deadline;
}

int snapprof__profiler_tick(snapprof_profiler_t *p, uint64_t now)
{
    struct timespec c0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    /* Stopped early for a caller of the API: the rest right after it, not
     * a drain interval later (deep stacks hold large buffers until then). */
    /* Before the drain: a capture that meets a new code object after
     * this asks again. */
    if (p->python)
        snapprof__python_names_taken(snapprof__sampler_kick_word());
    int stopped = snapprof__drain_some(p, 1);
    if (!stopped)
        snapprof__retire_removed(p);
    if (p->parked)
        return parked_tick(p, now, &c0);
    if (p->armed_count > 0)
        p->next_drain = stopped ? now : now + drain_interval_ns(p);
    if (now >= p->next_tick) {
        p->stats.ticks++;
        /* Cheap when nothing was loaded or unloaded (the loader's counters);
         * keeps lookups from answering with a module dlclose() just removed. */
        snapprof__module_cache_update();
        /* The GOT hooks, when installed, patch modules loaded since. */
        snapprof__heap_tick();
        /* Once a tick, not once a target: each asks the loader whether objects
         * came or went, which is all they do when none did. */
        for (size_t i = 0; i < p->unwinder_count; i++)
            if (p->unwinders[i]->ops->xUpdateModules)
                p->unwinders[i]->ops->xUpdateModules(p->unwinders[i]->user_data);
        snapprof__drain_app_frames(p);
        snapprof__event_reader_read(&p->events);
        snapprof__check_handler(p);
        p->joined_since_tick = 0; /* every pending target is armed below */
        for (size_t i = 0; i < p->target_count; i++) {
            snapprof__target_t *t = p->targets[i];
            if (t->arm_pending) {
                if (t->dead || atomic_load(&t->thread->exited)) {
                    snapprof__pending_gone(p, t);
                    continue;
                }
                if (!unarmed_due(p, t, now)) {
                    p->joined_since_tick = 1; /* looked at again next tick */
                    continue;
                }
                t->arm_pending = 0;
                snapprof__arm_target(p, t);
            }
            if (t->dead)
                continue;
            if (t->arm) {
                uint32_t seq = 0;
                int have_seq = p->params.mode == SNAPPROF_MODE_WALL &&
                               snapprof__trigger_sched_seq(t->arm, &seq) == 0;
                if (have_seq && snapprof__still_blocked(t, seq)) {
                    snapprof__deliver_previous(p, t, now);
                    continue;
                }
                /* Scheduled in since: /proc first, the CPU clock only
                 * when it does not show a thread blocked again. A tick
                 * that deals with it so skips snapprof__check_armed(): its exit is
                 * noticed by /proc, and the check for a thread that
                 * blocks the trigger's signal waits for a tick that finds
                 * it running (a thread that runs much finds one soon). */
                int look = have_seq && !atomic_load(&t->thread->exited)
                               ? snapprof__sample_blocked(p, t, now, NULL, &seq)
                               : -1;
                if (look == 1) {
                    /* As below: off its CPU after seq was read. */
                    t->blocked_seq = seq;
                    t->blocked_seq_valid = t->wall_state == WALL_STATE_BLOCKED;
                    continue;
                }
                uint64_t cpu_now;
                if (snapprof__check_armed(p, t, &cpu_now) == 0 && t->arm &&
                    p->params.mode == SNAPPROF_MODE_WALL) {
                    snapprof__wall_tick_armed(p, t, now, cpu_now, have_seq ? &seq : NULL,
                                              look == 0);
                    /* seq was read before cpu_now: if t was found blocked
                     * (off its CPU at cpu_now and after), a sequence still
                     * equal to it later means it has not run since. */
                    t->blocked_seq = seq;
                    t->blocked_seq_valid = have_seq && t->wall_state == WALL_STATE_BLOCKED;
                }
            } else {
                sample_target(p, t, now);
            }
        }
        p->wall_ticks_owed = 0;
        p->ticks_done++;
        uint64_t after = snapprof__monotonic_ns();
        p->next_tick += p->params.interval_ns;
        if (p->next_tick <= after) {
            /* Late: skip the ticks we missed instead of sampling in a burst.
             * With no handshake thread nobody waits for the ticks, so they
             * are counted as done, not missed. */
            uint64_t missed = (after - p->next_tick) / p->params.interval_ns + 1;
            p->next_tick += missed * p->params.interval_ns;
            if (p->handshake_count > 0 || p->params.mode == SNAPPROF_MODE_WALL)
                p->stats.ticks_missed += missed;
            else
                p->ticks_done += missed;
            p->wall_ticks_owed = missed;
        }
    }
    count_sampler_cpu(p, &c0);
    if (p->params.max_samples && p->ticks_done >= p->params.max_samples)
        return 1;
    /* With CPU-clock triggers the profile lasts until the deadline itself;
     * the handshake's ends at its last tick before it. */
    if (p->deadline && p->next_tick > p->deadline && (p->armed_count == 0 || now >= p->deadline))
        return 1;
    return 0;
}
