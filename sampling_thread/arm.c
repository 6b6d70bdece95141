/* The triggers of a profiler's threads: arming each with the best trigger
 * that works (perf event, CPU timer, else the handshake), disarming it with
 * its CPU time kept, the threads that leave before or after, and the
 * tick's checks on armed threads (gone, blocking the signal, handler
 * replaced). */
#include "sampling_thread/profiler_internal.h"

#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Triggers                                                                 */
/* ------------------------------------------------------------------------ */

/* Notes the first refusal of a better trigger, for the stats. */
static void note_fallback(snapprof_profiler_t *p, snapprof_trigger_t from, int err)
{
    if (p->stats.trigger_fallback_errno == 0) {
        p->stats.trigger_fallback_from = from;
        p->stats.trigger_fallback_errno = err < 0 ? -err : err;
    }
}

/* Makes ct name t's thread: where its captures go, and whose they are. */
static void capture_target_of(snapprof__target_t *t, snapprof__capture_target_t *ct)
{
    const struct snapprof_thread *th = t->thread;
    ct->tid = th->tid;
    ct->stack_low = th->stack_low;
    ct->stack_base = th->stack_base;
    ct->thread = th;
    ct->on_thread = th->on_thread;
    ct->owner = t;
}

/* Gives t the best trigger that works, starting from the one asked for:
 * perf event, CPU timer, handshake. Lock held. */
void snapprof__arm_target(snapprof_profiler_t *p, snapprof__target_t *t)
{
    /* Its own trigger from now on (a capture the process-wide timer took
     * meanwhile stays in the slots, tied to pcap). */
    snapprof__unarmed_withdraw(p, t);
    t->trigger = SNAPPROF_TRIGGER_HANDSHAKE;
    t->never_armed = 0;
    t->blocked_seq_valid = 0;
    snapprof__thread_resolve_name(t->thread);
    if (p->pool_ready && !atomic_load(&t->thread->exited)) {
        capture_target_of(t, &t->cap);
        snapprof_trigger_t first = p->params.trigger == SNAPPROF_TRIGGER_AUTO
                                       ? SNAPPROF_TRIGGER_PERF_EVENT
                                       : p->params.trigger;
        for (snapprof_trigger_t k = first; k < SNAPPROF_TRIGGER_HANDSHAKE; k++) {
            /* Wall mode asks for the perf event's schedule sequence: a
             * thread that stays blocked then costs no system call a tick. */
            unsigned flags = p->params.mode == SNAPPROF_MODE_WALL ? SNAPPROF__ARM_SCHED_SEQ : 0;
            if (t->first_odds > 0) {
                flags |= SNAPPROF__ARM_FIRST_SPREAD; /* armed as it starts */
                /* Most such threads end first: spare them the page's
                 * unmap at their end (trigger.h). */
                if (!(flags & SNAPPROF__ARM_SCHED_SEQ))
                    flags |= SNAPPROF__ARM_NO_PAGE;
            }
            int rc = snapprof__trigger_arm(snapprof__trigger_ops(k), &p->pool, &t->cap,
                                           p->params.signal, p->params.interval_ns, flags, &t->arm);
            if (rc == 0) {
                /* Without its page, a perf event's count cannot be read
                 * and wall mode reads the thread's clock instead. */
                if (k == SNAPPROF_TRIGGER_PERF_EVENT && !t->arm->page &&
                    !(flags & SNAPPROF__ARM_NO_PAGE))
                    p->stats.mmap_failed++;
                t->trigger = k;
                t->arm_gen = t->arm->gen;
                t->page_to_map = (flags & SNAPPROF__ARM_NO_PAGE) != 0;
                t->kernel_cpu_prev = 0; /* kernel_share: from its first capture */
                /* Its first sample weighs first_odds intervals
                 * (snapprof__drain_some()). */
                uint64_t first_weight =
                    p->params.interval_ns * (t->first_odds > 1 ? t->first_odds : 1);
                t->first_debt_ns = first_weight > t->arm->first_period_ns
                                       ? first_weight - t->arm->first_period_ns
                                       : 0;
                t->first_pending = 1;
                p->armed_count++;
                p->stats.threads_by_trigger[k]++;
                return;
            }
            note_fallback(p, k, rc);
            p->stats.trigger_refused[k]++;
        }
    }
    p->handshake_count++;
    p->stats.threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE]++;
}

/* t leaves (or the profile ends) before the tick that was to arm it.
 * Lock held. */
void snapprof__settle_pending(snapprof__target_t *t)
{
    if (!t->arm_pending)
        return;
    t->arm_pending = 0;
    t->never_armed = 1;
}

/* Brings t's CPU clock up to where it ended: the clock the thread read
 * itself as it exited, or else, with read_live, its clock now. Lock held. */
void snapprof__clock_at_end(snapprof__target_t *t, int read_live)
{
    uint64_t end = atomic_load(&t->thread->cpu_at_exit);
    if (end == 0 && read_live && !t->dead && snapprof__thread_cpu_ns(t->thread->tid, &end) != 0)
        end = 0;
    if (end > t->cpu_last)
        t->cpu_last = end;
}

/* t was never armed and is gone: its CPU time joins the one remainder of
 * such threads (snapprof__deliver_unarmed()). One the process-wide timer
 * sampled may have samples that stand for more than its clock: the excess
 * comes off that pool (snapprof__net_unarmed()), as a short thread's
 * first sample's does. Lock held. */
void snapprof__retire_unarmed(snapprof_profiler_t *p, snapprof__target_t *t)
{
    uint64_t total = snapprof__target_cpu_ns(t);
    if (t->sampled_ns > total) {
        if (!t->settled)
            p->overshoot_ns += t->sampled_ns - total;
        t->settled = 1;
        return;
    }
    uint64_t unsampled = snapprof__target_unsampled_ns(t);
    if (unsampled > t->remainder_ns)
        p->unarmed_ns += unsampled - t->remainder_ns;
    t->remainder_ns = unsampled;
}

void snapprof__unarmed_publish(snapprof_profiler_t *p, snapprof__target_t *t)
{
    if (!p->ptimer_live || t->unarmed_ct_set)
        return;
    struct snapprof_thread *th = t->thread;
    if (!th->on_thread)
        return; /* its handler could not tell it is the thread's */
    capture_target_of(t, &t->pcap);
    t->unarmed_ct_set = 1;
    atomic_store_explicit(&th->unarmed_ct, (void *)&t->pcap, memory_order_release);
}

int snapprof__unarmed_withdraw(snapprof_profiler_t *p, snapprof__target_t *t)
{
    if (!t->unarmed_ct_set)
        return 0;
    t->unarmed_ct_set = 0;
    void *mine = &t->pcap;
    atomic_compare_exchange_strong(&t->thread->unarmed_ct, &mine, NULL);
    /* A handler that found it before has published its capture. */
    snapprof__process_timer_quiesce(&p->ptimer);
    return atomic_load_explicit(&t->pcap.fired, memory_order_relaxed) != 0;
}

/* Frees the targets removed since the last full drain, which delivered
 * their last captures: their CPU time that no sample placed goes out as
 * their remainder first. Only after a drain that left no slot behind.
 * Lock held. */
void snapprof__retire_removed(snapprof_profiler_t *p)
{
    for (size_t i = 0; p->removed_count > 0 && i < p->target_count;) {
        snapprof__target_t *t = p->targets[i];
        if (!t->removed) {
            i++;
            continue;
        }
        /* One the process-wide timer captured before it was armed joins
         * the pool of threads never armed (snapprof__retire_unarmed()). */
        if (t->never_armed)
            snapprof__retire_unarmed(p, t);
        else
            snapprof__deliver_remainder(p, t, 1);
        p->cpu_removed_ns += snapprof__target_cpu_ns(t);
        snapprof__target_free(p, t);
        p->targets[i] = p->targets[--p->target_count];
        p->removed_count--;
    }
}

/* Stops t's trigger, keeping the CPU time it counted. Lock held. */
void snapprof__disarm(snapprof_profiler_t *p, snapprof__target_t *t)
{
    if (!t->arm)
        return;
    uint64_t counted = UINT64_MAX;
    /* A forked child's arms were freed at the fork (trigger_arms.c). */
    if (t->arm->gen == t->arm_gen)
        snapprof__trigger_disarm(t->arm, &counted);
    if (t->trigger == SNAPPROF_TRIGGER_PERF_EVENT && counted != UINT64_MAX &&
        t->cpu_start + counted > t->cpu_last)
        t->cpu_last = t->cpu_start + counted; /* the event's count survives the thread */
    else if (t->trigger == SNAPPROF_TRIGGER_CPU_TIMER && counted != UINT64_MAX &&
             counted > t->cpu_last)
        t->cpu_last = counted;
    /* Armed at a tick after it joined, the event counted from then on only:
     * a thread that exited says its whole clock itself. */
    snapprof__clock_at_end(t, 0);
    t->arm = NULL;
    t->blocked_seq_valid = 0;
    p->armed_count--;
}

/* Periods of CPU time with no capture after which an armed thread is
 * checked for blocking the signal. */
#define BLOCKED_PERIODS 50

/* A thread with a CPU-clock trigger needs no signal from us: only notice
 * when it has gone, and keep its CPU clock for the remainder. Returns 0
 * with the clock's reading in *cpu_now, or -1 when the thread is gone.
 * A thread gone leaves its captures in the slots for the ticks' budgeted
 * drains, as one that unregisters does: its record stays until a full
 * drain has delivered them (snapprof__retire_removed()), and its
 * remainder is placed only then. (A full drain here held the sampler's
 * lock through the whole backlog, 255 captures of a slow builder, on each
 * exit: profiler_drain_budget_exit_backlog.) Lock held. */
int snapprof__check_armed(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t *cpu_now_out)
{
    uint64_t cpu_now;
    if (atomic_load(&t->thread->exited) || snapprof__thread_cpu_ns(t->thread->tid, &cpu_now) != 0) {
        snapprof__disarm(p, t);
        t->dead = 1;
        return -1;
    }
    *cpu_now_out = cpu_now;
    if (cpu_now > t->cpu_last)
        t->cpu_last = cpu_now;
    /* Armed as it started without its perf event's page (trigger.h,
     * SNAPPROF__ARM_NO_PAGE), it outlived the first tick: mapped now, so
     * that the event outlives a close of its fd, as every other arm's.
     * Tried once per arm (the call would do nothing after its first). */
    if (t->arm && t->page_to_map) {
        t->page_to_map = 0;
        int rc = snapprof__trigger_map_page(t->arm);
        if (rc < 0 && rc != -EBADF)
            p->stats.mmap_failed++;
    }
    if (t->arm && atomic_load_explicit(&t->arm->first_stuck, memory_order_relaxed)) {
        /* Its perf event could not leave its short first period (the
         * program closed or replaced the fd before the first signal): a
         * new one, or the next trigger that works. */
        snapprof__profiler_drain(p);
        snapprof__disarm(p, t);
        snapprof__arm_target(p, t);
        return 0;
    }
    uint64_t fired = atomic_load_explicit(&t->cap.fired, memory_order_relaxed);
    if (fired != t->watch_fired || cpu_now < t->watch_cpu) {
        t->watch_fired = fired;
        t->watch_cpu = cpu_now;
    } else if (cpu_now - t->watch_cpu >= BLOCKED_PERIODS * p->params.interval_ns) {
        /* Many periods of CPU time and not one capture: if the thread
         * blocks the signal, the first one stays pending for ever and
         * stands for all the others. The handshake at least counts its
         * timeouts. A thread that only ran in the kernel is left alone. */
        if (snapprof__thread_blocks_signal(t->thread->tid, p->params.signal)) {
            snapprof__disarm(p, t);
            t->trigger = SNAPPROF_TRIGGER_HANDSHAKE;
            p->handshake_count++;
            p->stats.threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE]++;
            p->stats.trigger_blocked++;
        } else if (snapprof__trigger_fd_lost(t->arm)) {
            /* The program closed its perf event's fd, and no page kept
             * the event alive: armed anew (counted in fds_lost when the
             * old arm goes), the next trigger that works. */
            snapprof__profiler_drain(p);
            snapprof__disarm(p, t);
            snapprof__arm_target(p, t);
        }
        t->watch_cpu = cpu_now;
    }
    return 0;
}

/* Once a tick while CPU-clock triggers are armed: if our handler for the
 * signal was replaced (raw rt_sigaction, a host's own sigaction), their
 * signals would flood the program's handler uncounted. Their threads go
 * to the handshake, whose requests then time out as handler_replaced and
 * back off (and succeed again if the handler comes back). One system call
 * a tick. The captures their triggers left in the slots are not drained
 * here: the ticks' drains, within their budget, deliver them (a full
 * drain here held a TSan soak's sampler for over a second, soak finding
 * 9), and until they have, the handshake leaves those threads alone
 * (captures_left), so that its first sample does not weigh again the CPU
 * time they stand for. Lock held. */
void snapprof__check_handler(snapprof_profiler_t *p)
{
    if (p->armed_count == 0 || snapprof__stack_copier_handler_ours(p->params.signal))
        return;
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        if (t->dead || !t->arm)
            continue;
        snapprof__disarm(p, t);
        t->captures_left = 1;
        t->trigger = SNAPPROF_TRIGGER_HANDSHAKE;
        p->handshake_count++;
        p->stats.threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE]++;
        p->stats.handler_replaced_disarmed++;
    }
}

void snapprof__pending_gone(snapprof_profiler_t *p, snapprof__target_t *t)
{
    /* Gone before its tick, without leaving: its CPU time is what its
     * clock said as it exited. The process-wide timer's captures of it
     * are delivered first, so that what they stand for is set against its
     * clock. */
    if (snapprof__unarmed_withdraw(p, t))
        snapprof__profiler_drain(p);
    snapprof__clock_at_end(t, 0);
    snapprof__settle_pending(t);
    t->dead = 1;
    snapprof__retire_unarmed(p, t);
}

/* ------------------------------------------------------------------------ */
/* On demand (params.arm_on_demand)                                         */
/* ------------------------------------------------------------------------ */

/* The threads' CPU time while profiled as far as the sampler has seen,
 * each thread's clock read now first. Lock held. */
static uint64_t cpu_seen_now(snapprof_profiler_t *p)
{
    uint64_t total = p->cpu_removed_ns;
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        snapprof__clock_at_end(t, 1);
        total += snapprof__target_cpu_ns(t);
    }
    return total;
}

uint64_t snapprof__armed_cpu_ns(const snapprof_profiler_t *p, uint64_t total)
{
    uint64_t parked = p->cpu_parked_ns;
    if (p->parked && total > p->cpu_at_park)
        parked += total - p->cpu_at_park; /* parked now, until the end */
    return total > parked ? total - parked : 0;
}

void snapprof__park(snapprof_profiler_t *p)
{
    if (!p->params.arm_on_demand || p->parked)
        return;
    /* The same disarm as a profile's end: the CPU time each trigger
     * counted is kept, and what its thread does from now on is its
     * remainder. */
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        if (!t->arm)
            continue;
        snapprof__disarm(p, t);
        t->parked = 1;
    }
    /* From here the threads' CPU time is not the armed run's (a 12 s run
     * with one 3 s request said 22.5 Hz of 100 Hz). */
    p->cpu_at_park = cpu_seen_now(p);
    p->parked = 1;
}

/* A handshake target's next sample weighs its CPU time since its previous
 * one: from now on, not over the stretch nothing was sampled. Lock held. */
static void handshake_from_now(snapprof__target_t *t)
{
    uint64_t cpu;
    if (snapprof__thread_cpu_ns(t->thread->tid, &cpu) != 0)
        return; /* gone: its next tick finds it so */
    t->cpu_last = cpu > t->cpu_last ? cpu : t->cpu_last;
    t->cpu_at_sample = cpu;
    t->cpu_after = cpu;
    t->sampled = 1;
}

void snapprof__unpark(snapprof_profiler_t *p)
{
    if (!p->parked)
        return;
    uint64_t seen = cpu_seen_now(p);
    p->cpu_parked_ns += seen > p->cpu_at_park ? seen - p->cpu_at_park : 0;
    p->parked = 0;
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        int was_parked = t->parked;
        t->parked = 0;
        if (t->dead)
            continue;
        if (atomic_load(&t->thread->exited)) {
            if (t->arm_pending) {
                snapprof__pending_gone(p, t);
            } else {
                snapprof__clock_at_end(t, 0);
                t->dead = 1;
            }
            continue;
        }
        /* Those that joined while nothing was armed are armed now, not at
         * the next tick: their CPU time so far is then their remainder,
         * delivered before the attach, not in the attached builder's
         * stretch. */
        if (t->arm_pending) {
            t->arm_pending = 0;
            snapprof__arm_target(p, t);
        } else if (was_parked) {
            /* Counted once per thread, under the trigger it has now. */
            p->stats.threads_by_trigger[t->trigger]--;
            snapprof__arm_target(p, t);
        }
        if (t->arm) {
            /* The blocked-signal watch counts from now. */
            t->watch_fired = atomic_load_explicit(&t->cap.fired, memory_order_relaxed);
            snapprof__thread_cpu_ns(t->thread->tid, &t->watch_cpu);
        } else if (t->trigger == SNAPPROF_TRIGGER_HANDSHAKE) {
            handshake_from_now(t);
        }
    }
    p->joined_since_tick = 0; /* every pending target was armed above */
    /* The handshake's ticks and the drains resume at once. */
    p->next_tick = snapprof__monotonic_ns();
    p->next_drain = p->next_tick;
    snapprof__sampler_kick();
}
