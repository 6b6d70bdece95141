/* From capture to builders: drains the capture slots oldest first, unwinds
 * each stack copy, delivers the samples (and the remainders no sample
 * placed) to the builders, and remembers wall mode's last stacks. */
#include "sampling_thread/profiler_internal.h"

#include "heap/heap_sampler.h"
#include "module_cache/module_cache.h"
#include "profile_builder/profile_builder_calls.h"
#include "stack_copier/stack_copier.h"
#include "unwinder/unwinder_fp_guess.h"
#include "unwinder/unwinder_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Delivery to the builders                                                 */
/* ------------------------------------------------------------------------ */

/* Wall mode: of the ticks the sampler missed before the one at now, those
 * t was there for. A thread that joined during the sampler's late stretch
 * (a flush or a stalled vCPU held it up) was not there for all of them:
 * given every one, a thread that lived 10 ms took 250 ms of wall time. */
uint64_t snapprof__wall_owed(const snapprof_profiler_t *p, const snapprof__target_t *t,
                             uint64_t now)
{
    uint64_t owed = p->wall_ticks_owed;
    if (owed == 0 || t->wall_joined_ns == 0)
        return owed;
    uint64_t age = now > t->wall_joined_ns ? (now - t->wall_joined_ns) / p->params.interval_ns : 0;
    return owed < age ? owed : age;
}

/* The wall time a sample stands for. In wall mode a tick's sample carries
 * the ticks since t's previous one (those the sampler was too late for
 * while t was there, and those t had no stack for); a trigger's capture
 * stands for CPU time only. */
static uint64_t sample_wall_ns(const snapprof_profiler_t *p, const snapprof__target_t *t,
                               unsigned flags, uint64_t now)
{
    if (flags & SNAPPROF_SAMPLE_REMAINDER)
        return 0;
    if (p->params.mode != SNAPPROF_MODE_WALL)
        return p->params.interval_ns;
    if (p->draining)
        return 0;
    return (1 + snapprof__wall_owed(p, t, now) + t->wall_unplaced_ticks) * p->params.interval_ns;
}

/* Gives s to every builder; one failure among them is one BUILDER failure.
 * Lock held. */
static void to_builders(snapprof_profiler_t *p, const snapprof_sample_t *s)
{
    int failed = 0;
    for (size_t i = 0; i < p->builder_count; i++)
        if (snapprof__builder_sample(p->builders[i], s) < 0)
            failed = 1;
    for (size_t i = 0; i < p->attached_count; i++) /* attach.c */
        if (snapprof__builder_sample(p->attached[i].builder, s) < 0)
            failed = 1;
    if (failed)
        snapprof__fail(p, SNAPPROF_FAIL_BUILDER);
}

void snapprof__deliver(snapprof_profiler_t *p, snapprof__target_t *t,
                       const snapprof_frame_t *frames, size_t count, unsigned flags,
                       uint64_t timestamp, uint64_t cpu_ns, snapprof__label_capture_t *labels)
{
    size_t label_count = labels ? snapprof__labels_decode(labels, p->label_views) : 0;
    if (p->params.mode == SNAPPROF_MODE_WALL &&
        p->params.wall_blocked == SNAPPROF_WALL_BLOCKED_PROC &&
        (p->draining || t->wall_state != WALL_STATE_NONE))
        label_count += snapprof__wall_state_labels(p->draining ? WALL_STATE_RUNNING : t->wall_state,
                                                   t->wall_syscall, p->label_views + label_count);
    snapprof_sample_t s = {
        .labels = p->label_views,
        .label_count = label_count,
        .frames = frames,
        .frame_count = count,
        .timestamp_ns = timestamp,
        .cpu_ns = cpu_ns,
        /* In wall mode a trigger's capture (drained) stands for CPU time;
         * the ticks' samples carry the wall time. */
        .wall_ns = sample_wall_ns(p, t, flags, timestamp),
        .tid = t->thread->tid,
        .thread_name = t->thread->name,
        .flags = flags,
        .size = sizeof(snapprof_sample_t),
        .kind = SNAPPROF_SAMPLE_KIND_TIME,
    };
    if (!(flags & SNAPPROF_SAMPLE_REMAINDER))
        p->stats.cpu_ns_sampled += cpu_ns;
    if (s.wall_ns > 0)
        t->wall_unplaced_ticks = 0;
    to_builders(p, &s);
    /* A remainder is CPU time no sample placed, not a sample: counted, it
     * would add one "sample" per thread to the rate. */
    if (!(flags & (SNAPPROF_SAMPLE_REMAINDER | SNAPPROF_SAMPLE_KERNEL)))
        p->stats.samples++;
}

/* Delivers the CPU time of t that no sample placed since the last call, as
 * one "[kernel and unsampled]" sample, so the profile's CPU total matches
 * the thread's CPU clock while the user-space shares keep one period per
 * sample. Only for CPU-clock triggers (a handshake sample carries all the
 * CPU time since the previous one). Lock held. */
void snapprof__deliver_remainder(snapprof_profiler_t *p, snapprof__target_t *t, int final)
{
    /* A thread never armed (it came and went between two ticks) was to
     * get a CPU-clock trigger: all its CPU time is remainder. */
    if (t->trigger != SNAPPROF_TRIGGER_PERF_EVENT && t->trigger != SNAPPROF_TRIGGER_CPU_TIMER &&
        !t->never_armed)
        return;
    if (final && snapprof__settle_final(p, t))
        return;
    uint64_t unsampled = snapprof__target_unsampled_ns(t);
    if (unsampled <= t->remainder_ns)
        return;
    uint64_t cpu_ns = unsampled - t->remainder_ns;
    t->remainder_ns = unsampled;
    /* Less what ended threads' samples stood for beyond their clocks and
     * the pool of unsampled ones did not take (snapprof__net_unarmed()),
     * so that the profile's total stays the threads' clocks. */
    uint64_t netted = cpu_ns < p->overshoot_ns ? cpu_ns : p->overshoot_ns;
    cpu_ns -= netted;
    p->overshoot_ns -= netted;
    if (cpu_ns == 0)
        return;
    snapprof_frame_t frame = {.kind = SNAPPROF_FRAME_MARKER, .name = "[kernel and unsampled]"};
    snapprof__deliver(p, t, &frame, 1, SNAPPROF_SAMPLE_REMAINDER, snapprof__monotonic_ns(), cpu_ns,
                      NULL);
}

/* The last word of t, which ended (or the profile did). A thread armed as
 * it started (snapprof_params_t.short_threads) has its first sample weigh
 * first_odds intervals for a first period drawn in (0, interval] (why:
 * draw_first() in trigger_perf_event.c), so a short thread's samples add
 * up to its CPU time only in expectation: more than its clock when it was
 * sampled (by what it still owed: snapprof__drain_some()), nothing when it
 * was not. Both go to the pool of such threads (snapprof__deliver_unarmed()),
 * where they cancel: a thread armed as it started with no sample at all
 * adds its CPU time there (one sample for all of them, not one thread_id
 * each), a thread whose samples stand for more than its clock takes the
 * excess off, and an excess the pool cannot take comes off the other
 * threads' remainders (snapprof__deliver_remainder()). Left per thread,
 * every excess would stay and every unsampled thread would add, and the
 * remainder would grow with the number of short threads (62 % of a profile
 * of 0.4 ms threads at 1 kHz instead of their kernel time). Returns 1 when
 * t has nothing left to deliver. Lock held. */
int snapprof__settle_final(snapprof_profiler_t *p, snapprof__target_t *t)
{
    if (t->settled)
        return 0;
    t->settled = 1;
    if (t->armed_at_start && t->sampled_ns == 0 && !t->sampled) {
        snapprof__retire_unarmed(p, t);
        return 1;
    }
    uint64_t total = snapprof__target_cpu_ns(t);
    uint64_t placed = t->sampled_ns + t->remainder_ns;
    if (placed > total) {
        p->overshoot_ns += placed - total;
        return 1;
    }
    return 0;
}

/* Takes what ended threads' samples stood for beyond their clocks
 * (snapprof__settle_final()) off the pool of those that ended unsampled.
 * Lock held. */
void snapprof__net_unarmed(snapprof_profiler_t *p)
{
    uint64_t netted = p->unarmed_ns < p->overshoot_ns ? p->unarmed_ns : p->overshoot_ns;
    p->unarmed_ns -= netted;
    p->overshoot_ns -= netted;
}

/* The CPU time of the threads that ended without a sample (armed as they
 * started, or never armed: they came and went between two ticks), less
 * the excess of those whose samples stand for more than their clocks, as
 * one remainder sample: thousands of short threads would otherwise make
 * thousands of samples, one thread_id each. Its thread_name says what it
 * is; its thread_id is 0. Lock held. */
void snapprof__deliver_unarmed(snapprof_profiler_t *p)
{
    /* An excess the pool cannot take comes off the threads' remainders
     * (snapprof__deliver_remainder()), at the next flush or at the end. */
    snapprof__net_unarmed(p);
    if (p->unarmed_ns == 0)
        return;
    snapprof_frame_t frame = {.kind = SNAPPROF_FRAME_MARKER, .name = "[kernel and unsampled]"};
    snapprof_sample_t s = {
        .frames = &frame,
        .frame_count = 1,
        .timestamp_ns = snapprof__monotonic_ns(),
        .cpu_ns = p->unarmed_ns,
        .tid = 0,
        .thread_name = "(threads that ended before their first sample)",
        .flags = SNAPPROF_SAMPLE_REMAINDER,
        .size = sizeof(snapprof_sample_t),
        .kind = SNAPPROF_SAMPLE_KIND_TIME,
    };
    to_builders(p, &s);
    p->unarmed_ns = 0;
}

/* Wall mode keeps each thread's latest stack for the ticks it sleeps
 * through. A trigger's capture can be drained after a later look found the
 * thread blocked (it ran, was captured, then blocked before the drain): it
 * is older than the wait and must not replace the wait's stack. */
static void remember(snapprof_profiler_t *p, snapprof__target_t *t, size_t count, unsigned flags,
                     const snapprof__label_capture_t *labels, uint64_t taken_ns)
{
    if (p->params.mode != SNAPPROF_MODE_WALL)
        return;
    if (t->prev_count > 0 && taken_ns < t->prev_time)
        return;
    if (!t->prev && !(t->prev = malloc(p->params.max_frames * sizeof *t->prev))) {
        t->prev_count = 0;
        return;
    }
    if (!t->prev_labels && !(t->prev_labels = malloc(sizeof *t->prev_labels))) {
        t->prev_count = 0;
        return;
    }
    memcpy(t->prev, p->frames, count * sizeof *t->prev);
    memcpy(t->prev_labels, labels, sizeof *t->prev_labels);
    t->prev_count = count;
    t->prev_flags = flags;
    t->prev_time = taken_ns;
}

/* The kernel time measured before the capture whose count frames
 * p->frames holds, as a second sample of that stack under the "[kernel]"
 * leaf that p->kernel_frames[0] holds from creation
 * (snapprof_params_t.kernel_share). Its labels are the capture's.
 * Lock held. */
static void deliver_kernel(snapprof_profiler_t *p, snapprof__target_t *t, size_t count,
                           unsigned flags, uint64_t timestamp, uint64_t kernel_ns,
                           snapprof__label_capture_t *labels)
{
    memcpy(p->kernel_frames + 1, p->frames, count * sizeof *p->frames);
    snapprof__deliver(p, t, p->kernel_frames, count + 1, flags | SNAPPROF_SAMPLE_KERNEL, timestamp,
                      kernel_ns, labels);
}

/* The evaluation loop's frames among p->frames[0..count) replaced by the
 * Python frames cap holds (python/python_splice.c), counted. Returns the
 * new count. Lock held. */
static size_t splice_python(snapprof_profiler_t *p, const snapprof__py_capture_t *cap, size_t count)
{
    snapprof__python_refresh(0);
    snapprof__py_splice_stats_t ps = {0};
    count = snapprof__python_splice(cap, p->frames, count, p->py_frames, p->params.max_frames, &ps);
    memcpy(p->frames, p->py_frames, count * sizeof *p->frames);
    p->stats.python_samples += ps.samples;
    p->stats.python_frames += ps.frames;
    p->stats.python_truncated += ps.truncated;
    p->stats.python_broken += ps.broken;
    p->stats.python_unmatched += ps.unmatched;
    p->stats.python_code_reused += ps.code_reused;
    p->stats.python_learned_full += ps.learned_full;
    return count;
}

/* Unwinds a stack copy that buffer holds (the target has resumed) and
 * delivers it with cpu_ns as its weight, and kernel_ns (when not 0) as a
 * second sample under a "[kernel]" leaf. Lock held. */
void snapprof__unwind_and_deliver(snapprof_profiler_t *p, snapprof__target_t *t,
                                  const snapprof__copy_result_t *res, uint8_t *buffer,
                                  snapprof__label_capture_t *labels, uint64_t cpu_ns,
                                  int without_fp, uint64_t kernel_ns)
{
    if (!without_fp) { /* a signal stopped the thread */
        p->stats.samples_signalled++;
        snapprof__hist_add(&p->pause, res->pause_ns);
    }
    p->stats.copy_bytes_total += res->copy_size;
    p->stats.foreign_stack_copies += res->foreign != 0;
    if (res->copy_size > p->stats.copy_bytes_max)
        p->stats.copy_bytes_max = res->copy_size;

    unsigned flags = 0;
    if (res->truncated) {
        p->stats.truncated_copy++;
        flags |= SNAPPROF_SAMPLE_TRUNCATED_COPY;
    }
    snapprof_regs_t regs;
    snapprof_stack_copy_t stack;
    snapprof__stack_copier_rebase(res, buffer, &regs, &stack);
    uint64_t unwind_start = snapprof__monotonic_ns();
    snapprof__unwind_outcome_t outcome;
    size_t count = snapprof__unwind_chain(p->unwinders, p->unwinder_count, &regs, &stack, p->frames,
                                          p->params.max_frames, &outcome);
    if (without_fp)
        count =
            snapprof__unwind_guessing_fp(p->unwinders, p->unwinder_count, &regs, &stack, p->frames,
                                         count, p->params.max_frames, &p->frames_alt, &outcome);
    snapprof__hist_add(&p->unwind, snapprof__monotonic_ns() - unwind_start);
    if (outcome.completed)
        p->stats.unwind_complete++;
    if (outcome.aborted) {
        p->stats.unwind_aborted++;
        flags |= SNAPPROF_SAMPLE_UNWIND_ABORTED;
        switch (outcome.abort_kind) {
        case SNAPPROF__ABORT_BAD_FRAME:
            p->stats.unwind_aborted_bad_frame++;
            break;
        case SNAPPROF__ABORT_NO_INFO:
            p->stats.unwind_aborted_no_info++;
            break;
        case SNAPPROF__ABORT_MEMORY:
            p->stats.unwind_aborted_memory++;
            break;
        case SNAPPROF__ABORT_TRUNCATED_COPY:
            p->stats.unwind_aborted_truncated_copy++;
            break;
        default:
            p->stats.unwind_aborted_other++;
            break;
        }
    }
    if (outcome.unrecognized)
        p->stats.unwind_unknown++;
    /* -- Python frames (params.python): the evaluation loop's frames
     * replaced by the Python frames the handler copied, or, for a stack
     * read through /proc, that wall mode read beside it (wall.c). -- */
    if (p->python && count > 0)
        count = splice_python(
            p,
            (const snapprof__py_capture_t *)((const uint8_t *)labels + SNAPPROF__PY_EXTRA_OFFSET),
            count);
    size_t real_frames =
        count > 0 && p->frames[count - 1].kind == SNAPPROF_FRAME_MARKER ? count - 1 : count;
    p->stats.unwind_frames_total += real_frames;
    if (real_frames > p->stats.unwind_frames_max)
        p->stats.unwind_frames_max = real_frames;
    if (outcome.truncated_depth) {
        p->stats.truncated_depth++;
        flags |= SNAPPROF_SAMPLE_TRUNCATED_DEPTH;
    }
    p->stats.labels_skipped += labels->skipped;
    if (count == 0)
        snapprof__fail(p, SNAPPROF_FAIL_NO_FRAMES);
    else if (cpu_ns > 0 || kernel_ns == 0) /* all kernel time: its one sample below */
        snapprof__deliver(p, t, p->frames, count, flags, res->timestamp_ns, cpu_ns, labels);
    if (kernel_ns > 0 && count > 0)
        deliver_kernel(p, t, count, flags, res->timestamp_ns, kernel_ns, labels);
    remember(p, t, count, flags, labels, res->timestamp_ns);
}

/* ------------------------------------------------------------------------ */
/* Draining the capture slots                                               */
/* ------------------------------------------------------------------------ */

/* snapprof_params_t.kernel_share: the CPU time t spent in the kernel
 * between its previous capture and this one, as the advance of its CPU
 * clock (read in the handler, kernel time included) less the user time the
 * perf event counted (the capture's period). The first capture of a
 * thread, and captures of other triggers (the CPU timer's periods count
 * kernel time already), give 0. Lock held. */
static uint64_t kernel_since(snapprof__target_t *t, const snapprof__capture_slot_t *slot)
{
    uint64_t now = slot->res.cpu_ns, prev = t->kernel_cpu_prev;
    if (now == 0 || t->trigger != SNAPPROF_TRIGGER_PERF_EVENT)
        return 0;
    t->kernel_cpu_prev = now;
    if (prev == 0 || now <= prev + slot->weight_ns)
        return 0;
    return now - prev - slot->weight_ns;
}

/* Whether pc is just after a syscall instruction (0f 05): where a thread
 * returns from a system call. A perf overflow due while the thread ran in
 * the kernel is not dropped on these VMs but taken on the return to user
 * mode, at that instruction (bench/bench_eintr_kernel.c found 1-2 % of all
 * signals there, and kernel_kernel_share's syscall loop put 11 % of its
 * CPU as flat time on write() and only 16 % under "[kernel]", against 33 %
 * for its system calls): with kernel_share, such a capture's period is
 * kernel time. A timer that really runs out at the one user instruction
 * after a system call is rare next to those. Read through
 * process_vm_readv (the code may have been unmapped since); 0 when it
 * cannot be read. Lock held. */
static int after_syscall(uintptr_t pc)
{
    uint8_t op[2];
    if (pc < sizeof op)
        return 0;
    struct iovec remote = {(void *)(pc - sizeof op), sizeof op};
    return snapprof__readv_self(op, sizeof op, &remote, 1) == (long)sizeof op && op[0] == 0x0f &&
           op[1] == 0x05;
}

static int by_time(const void *a, const void *b)
{
    const snapprof__capture_slot_t *x = *(snapprof__capture_slot_t *const *)a;
    const snapprof__capture_slot_t *y = *(snapprof__capture_slot_t *const *)b;
    return (x->res.timestamp_ns > y->res.timestamp_ns) -
           (x->res.timestamp_ns < y->res.timestamp_ns);
}

/* The bytes large buffers may take: the capture memory less the slots. */
static size_t large_budget(const snapprof_profiler_t *p)
{
    size_t slots = p->pool.slot_count * p->pool.slot_bytes;
    return p->params.capture_memory_max > slots ? p->params.capture_memory_max - slots : 0;
}

/* Gives the threads armed with a CPU-clock trigger the large buffers their
 * captures need (see snapprof__capture_pool_provision). Lock held. */
static void provision_large(snapprof_profiler_t *p)
{
    atomic_store_explicit(&p->pool.large_asked, 0, memory_order_relaxed);
    for (size_t i = 0; i < p->target_count; i++)
        if (p->targets[i]->arm)
            snapprof__capture_target_plan(&p->pool, &p->targets[i]->cap);
    if (snapprof__capture_pool_provision(&p->pool, large_budget(p)) < 0)
        p->stats.mmap_failed++; /* deep stacks stay truncated for now */
}

/* ------------------------------------------------------------------------ */
/* Heap samples (heap/): unwound by the same chain, to the same builders    */
/* ------------------------------------------------------------------------ */

/* Unwinds a sampled allocation's copy into p->frames, with its Python
 * frames spliced in when the profile takes them (tail: the capture's
 * snapprof__py_capture_t, heap_capture_python() in profiler.c). Lock
 * held. */
static size_t heap_unwind(void *ctx, const snapprof__copy_result_t *res, uint8_t *buffer,
                          const void *tail, const snapprof_frame_t **frames, unsigned *flags)
{
    snapprof_profiler_t *p = ctx;
    snapprof_regs_t regs;
    snapprof_stack_copy_t stack;
    snapprof__stack_copier_rebase(res, buffer, &regs, &stack);
    snapprof__unwind_outcome_t outcome;
    size_t count = snapprof__unwind_chain(p->unwinders, p->unwinder_count, &regs, &stack, p->frames,
                                          p->params.max_frames, &outcome);
    *flags = (res->truncated ? SNAPPROF_SAMPLE_TRUNCATED_COPY : 0) |
             (outcome.aborted ? SNAPPROF_SAMPLE_UNWIND_ABORTED : 0) |
             (outcome.truncated_depth ? SNAPPROF_SAMPLE_TRUNCATED_DEPTH : 0);
    if (count == 0)
        snapprof__fail(p, SNAPPROF_FAIL_NO_FRAMES);
    if (p->python && tail && count > 0)
        count = splice_python(p, tail, count);
    *frames = p->frames;
    return count;
}

/* Modules may have come or gone since the captures were taken. */
static void heap_prepare(void *ctx)
{
    snapprof_profiler_t *p = ctx;
    snapprof__module_cache_update();
    for (size_t i = 0; i < p->unwinder_count; i++)
        if (p->unwinders[i]->ops->xUpdateModules)
            p->unwinders[i]->ops->xUpdateModules(p->unwinders[i]->user_data);
}

static void heap_deliver(void *ctx, const snapprof_sample_t *s)
{
    to_builders(ctx, s);
}

static int heap_give_way(void *ctx)
{
    (void)ctx;
    return snapprof__sampler_api_waiting();
}

/* The most time a tick's heap drain takes (snapprof__heap_sink_t's
 * budget_ns): the sampling interval, at least 1 ms. A drain that spends
 * it is due again a millisecond later (snapprof__heap_due(),
 * DRAIN_GAP_NS in tick.c): a backlog of heap samples gets about half of
 * the sampling thread, the ticks and the CPU captures the rest. */
static uint64_t heap_budget_ns(const snapprof_profiler_t *p)
{
    return p->params.interval_ns > 1000000u ? p->params.interval_ns : 1000000u;
}

/* Delivers p's sampled allocations and frees so far, when p samples the
 * heap; with give_way, stops early when another thread waits for the lock.
 * Returns 1 when it stopped early. Lock held. */
static int drain_heap(snapprof_profiler_t *p, int give_way)
{
    if (!snapprof__heap_owned_by(p))
        return 0;
    snapprof__heap_sink_t sink = {.ctx = p,
                                  .prepare = heap_prepare,
                                  .unwind = heap_unwind,
                                  .deliver = heap_deliver,
                                  .stats = &p->stats,
                                  .give_way = give_way ? heap_give_way : NULL,
                                  /* The ticks' drains: at most about one
                                   * tick's interval of heap deliveries
                                   * before the tick's own work. */
                                  .budget_ns = give_way ? heap_budget_ns(p) : 0};
    return snapprof__heap_drain(p, &sink);
}

/* The sampling thread's CPU time, in ns. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Unwinds and delivers the slots filled by now, oldest first, and adds the
 * large buffers deep stacks need. One pass: slots filled meanwhile wait for
 * the next call, so that a thread whose captures come faster than they
 * unwind cannot keep the lock from stop() and get_stats(). With give_way,
 * (the sampling thread's ticks) it also stops early, the newer slots left
 * for the next pass, when another thread waits for the lock, or when the
 * pass has spent SNAPPROF__DRAIN_BUDGET_NS of CPU time (at least one
 * capture is delivered: the pass always makes progress). Nothing is lost
 * when it stops: the slots left stay full for the next pass, which comes
 * DRAIN_GAP_NS later (tick.c); captures that find no free slot meanwhile
 * are counted in samples_dropped, as always. Returns 1 when it stopped
 * early. Lock held. */
static int drain(snapprof_profiler_t *p, int give_way, int heap)
{
    /* The library's own allocations (unwinders, builders) on this thread
     * are not the program's. A heap drain that gave way still lets the
     * buffers below be provisioned and one CPU capture be unwound: a
     * stream of heap samples must not starve the CPU profile. */
    int stopped = 0;
    if (heap) {
        snapprof__heap_guard_enter();
        stopped = drain_heap(p, give_way);
        snapprof__heap_guard_leave();
    }
    if (!p->pool_ready)
        return stopped;
    snapprof__capture_pool_t *pool = &p->pool;
    /* Before the unwinding: the handler may need the new buffers while the
     * sampling thread unwinds a deep stack. */
    provision_large(p);
    snapprof__capture_slot_t *full[256];
    {
        size_t n = 0;
        for (size_t i = 0; i < pool->slot_count && n < sizeof full / sizeof full[0]; i++)
            if (atomic_load_explicit(&pool->slots[i].state, memory_order_acquire) ==
                SNAPPROF__SLOT_FULL)
                full[n++] = &pool->slots[i];
        if (n == 0) {
            /* A capture counted in large_full but not yet published: not
             * again within the gap (snapprof__profiler_due). */
            p->last_drain = snapprof__monotonic_ns();
            return stopped;
        }
        /* Modules may have come or gone since the captures were taken. */
        snapprof__module_cache_update();
        for (size_t i = 0; i < p->unwinder_count; i++)
            if (p->unwinders[i]->ops->xUpdateModules)
                p->unwinders[i]->ops->xUpdateModules(p->unwinders[i]->user_data);
        qsort(full, n, sizeof full[0], by_time);
        p->draining = 1;
        uint64_t cpu0 = give_way ? thread_cpu_ns() : 0, spent = 0;
        for (size_t i = 0; i < n; i++) {
            if (give_way && i > 0 && snapprof__sampler_api_waiting()) {
                stopped = 1;
                break;
            }
            if (give_way && i > 0 &&
                (spent = thread_cpu_ns() - cpu0) >= SNAPPROF__DRAIN_BUDGET_NS) {
                p->stats.drain_budget_stops++;
                stopped = 1;
                break;
            }
            snapprof__capture_slot_t *slot = full[i];
            snapprof__target_t *t = slot->target->owner;
            if (slot->fail < 0 && slot->res.truncated && slot->target->large_refused)
                p->stats.truncated_copy_budget++;
            if (slot->fail >= 0) {
                snapprof__fail(p, (snapprof_fail_reason_t)slot->fail);
            } else {
                /* A thread armed as it started (arm_at_start() in
                 * profiler.c) has a short first period, drawn in (0,
                 * interval], whose sample weighs first_odds intervals: that
                 * is what keeps a short thread's expected weight its CPU
                 * time (why: draw_first() in trigger_perf_event.c). The
                 * difference is repaid from the thread's next samples, at
                 * most half of each, so that a thread that lives a few
                 * periods has samples that add up to no more than its
                 * clock. What a thread that ends first still owes goes to
                 * the pool (snapprof__settle_final()). */
                uint64_t weight = slot->weight_ns;
                if (slot->target == &t->pcap) {
                    /* The process-wide timer's, taken before the thread's
                     * own trigger (params.unarmed_timer): (1 + overrun)
                     * intervals of the process's CPU time, no kernel split,
                     * no debt. */
                    t->sampled_ns += weight;
                    snapprof__unwind_and_deliver(p, t, &slot->res, slot->buffer,
                                                 (snapprof__label_capture_t *)slot->extra, weight,
                                                 0, 0);
                    snapprof__capture_slot_release(pool, slot);
                    continue;
                }
                if (t->first_pending && t->first_odds == 0) {
                    /* Not armed as it started (the CPU timer spreads its
                     * first expiry all the same): the first sample weighs
                     * only what it stands for, so the samples never add up
                     * to more than the clock. */
                    t->first_pending = 0;
                    weight -= t->first_debt_ns < weight ? t->first_debt_ns : weight - 1;
                } else if (t->first_pending) {
                    t->first_pending = 0;
                    weight *= t->first_odds;
                    t->first_odds = 0;
                    t->first_short_ns += t->first_debt_ns;
                } else if (t->first_short_ns > 0) {
                    uint64_t cut = t->first_short_ns < weight / 2 ? t->first_short_ns : weight / 2;
                    weight -= cut;
                    t->first_short_ns -= cut;
                }
                t->sampled_ns += weight;
                uint64_t kernel_ns = kernel_since(t, slot);
                t->sampled_ns += kernel_ns;
                if (slot->res.cpu_ns != 0 && t->trigger == SNAPPROF_TRIGGER_PERF_EVENT &&
                    after_syscall(slot->res.regs.r[SNAPPROF_REG_PC])) {
                    /* kernel_share: the period ran out in the kernel and
                     * its signal came on the way back (see after_syscall()). */
                    kernel_ns += weight;
                    weight = 0;
                }
                snapprof__unwind_and_deliver(p, t, &slot->res, slot->buffer,
                                             (snapprof__label_capture_t *)slot->extra, weight, 0,
                                             kernel_ns);
            }
            snapprof__capture_slot_release(pool, slot);
        }
        p->draining = 0;
        if (give_way) {
            if (!stopped)
                spent = thread_cpu_ns() - cpu0;
            if (spent > p->stats.drain_max_cpu_ns)
                p->stats.drain_max_cpu_ns = spent;
        }
    }
    p->last_drain = snapprof__monotonic_ns();
    return stopped;
}

int snapprof__drain_some(snapprof_profiler_t *p, int give_way)
{
    return drain(p, give_way, 1);
}

/* The CPU captures only: heap samples carry their thread's id, name and
 * labels in their own slots and outlive its record, so a thread's removal
 * or re-arming need not wait for them. Under TSan a full heap drain here,
 * on every exiting thread, held the sampler lock for seconds (soak finding
 * 8). */
void snapprof__profiler_drain(snapprof_profiler_t *p)
{
    drain(p, 0, 0);
}

void snapprof__profiler_drain_all(snapprof_profiler_t *p)
{
    drain(p, 0, 1);
}

int snapprof__profiler_has_captures_of(const snapprof_profiler_t *p,
                                       const struct snapprof_thread *thread)
{
    if (!p->pool_ready || atomic_load_explicit(&p->pool.full, memory_order_relaxed) == 0)
        return 0;
    for (size_t i = 0; i < p->pool.slot_count; i++) {
        const snapprof__capture_slot_t *slot = &p->pool.slots[i];
        if (atomic_load_explicit(&slot->state, memory_order_acquire) == SNAPPROF__SLOT_FULL &&
            slot->target->thread == thread)
            return 1;
    }
    return 0;
}
