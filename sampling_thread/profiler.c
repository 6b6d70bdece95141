/* The profiler: its public API and its lifecycle (create, add
 * and remove threads, start, flush, stop, destroy); its params are read and
 * checked in params.c, its counters read in stats.c. The work of a tick is
 * in tick.c, triggers in arm.c, the drain and delivery in drain.c, wall
 * mode's blocked threads in wall.c. */
#include "sampling_thread/profiler_internal.h"
#include "sampling_thread/profiler_defaults.h"

#include "common/fault.h"
#include "common/fd_private.h"
#include "common/fds.h"
#include "common/hash.h"
#include "common/seccomp.h"
#include "heap/heap_sampler.h"
#include "module_cache/module_cache.h"
#include "profile_builder/profile_builder_calls.h"
#include "stack_copier/stack_copier.h"
#include "unwinder/unwinder_internal.h"

#include <snapprof/jit.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Creation and configuration                                               */
/* ------------------------------------------------------------------------ */

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Wall mode where nothing is signalled: CPU-clock triggers time the
 * running threads' captures, and /proc gives the blocked threads' stacks.
 * Without SNAPPROF_WALL_BLOCKED_PROC wall mode keeps the handshake. */
static int wall_by_triggers(const snapprof_profiler_t *p)
{
    return p->params.mode == SNAPPROF_MODE_WALL &&
           p->params.wall_blocked == SNAPPROF_WALL_BLOCKED_PROC &&
           p->params.trigger != SNAPPROF_TRIGGER_HANDSHAKE;
}

/* Frees a target; its trigger must be disarmed and its captures drained. */
void snapprof__target_free(snapprof_profiler_t *p, snapprof__target_t *t)
{
    /* The thread's handler must not find it any more. */
    snapprof__unarmed_withdraw(p, t);
    if (p->pool_ready)
        snapprof__capture_target_free_large(&p->pool, &t->cap);
    free(t->prev);
    free(t->prev_labels);
    if (p->params.mode == SNAPPROF_MODE_WALL)
        snapprof__proc_forget(t->thread->tid);
    /* Last: the release may free the thread, whose tid was read above. */
    snapprof_thread_release(t->thread);
    free(t);
}

/* The stack copier's delegate: what the profiler does in the handler
 * once the stack is copied. The unwinders that want a call there were
 * found at start (none of the built-in ones does), and stay as they are
 * while the profile runs (add_unwinder() refuses then). RUNS IN THE SIGNAL
 * HANDLER. Async-signal-safe: xOnStackCapture must be, and the labels'
 * capture is. */
static void on_capture(void *ctx, void *extra)
{
    const snapprof_profiler_t *p = ctx;
    for (size_t i = 0; i < p->capture_hook_count; i++)
        p->capture_hooks[i]->ops->xOnStackCapture(p->capture_hooks[i]->user_data);
    snapprof__labels_capture(extra);
    /* -- Python frames hook (params.python; python/python_capture.c): the
     * thread's interpreter frames into the area after the labels. -- */
    if (p->python)
        snapprof__python_capture(
            (snapprof__py_capture_t *)((uint8_t *)extra + SNAPPROF__PY_EXTRA_OFFSET));
}

/* A sampled allocation's capture, on the allocating thread (heap/): its
 * interpreter frames into the slot's tail. No allocation, no locks. */
static void heap_capture_python(void *tail)
{
    snapprof__python_capture((snapprof__py_capture_t *)tail);
}

int snapprof_profiler_create(const snapprof_params_t *params, snapprof_thread_t *const *threads,
                             size_t count, snapprof_profiler_t **out)
{
    if (!params || !out || (count > 0 && !threads))
        return -EINVAL;
    for (size_t i = 0; i < count; i++)
        if (!threads[i])
            return -EINVAL;
    snapprof_params_t known;
    int rc = snapprof__params_read(params, &known);
    if (rc == 0)
        rc = snapprof__params_check(&known);
    if (rc != 0)
        return rc;
    /* What the thread that opens our files for a moment allocates
     * (common/fd_private.h) is never the program's. */
    snapprof__fd_private_set_thread_hook(snapprof__heap_mute_thread);
    /* Before any perf_event_open or process_vm_readv of this profiler's:
     * which of them a seccomp filter would kill the process for. */
    snapprof__seccomp_check();
    snapprof_profiler_t *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->params = known;
    p->py_forced_tick = UINT64_MAX; /* wall.c: none yet, tick 0 included */
    p->state = PROFILER_CREATED;
    p->delegate = (snapprof__capture_delegate_t){.on_capture = on_capture, .ctx = p};
    p->buffer_size = (known.stack_buffer_size + 4095u) & ~(size_t)4095u;
    p->frames = calloc(known.max_frames, sizeof *p->frames);
    /* kernel_share: a stack and its "[kernel]" leaf (deliver_kernel() in drain.c). */
    if (known.kernel_share)
        p->kernel_frames = calloc(known.max_frames + 1, sizeof *p->kernel_frames);
    /* Python frames: found once per process; an interpreter whose layout
     * is unknown leaves native frames only, said in the stats. */
    if (known.python) {
        p->python = snapprof__python_enable();
        p->stats.python_layout_unknown = (uint64_t)snapprof__python_layout_unknown();
        p->stats.python_read_errno = (uint64_t)snapprof__python_read_errno();
        if (p->python)
            p->py_frames = calloc(known.max_frames, sizeof *p->py_frames);
    }
    p->labels = aligned_alloc(64, (SNAPPROF__EXTRA_SIZE(p->python) + 63u) & ~(size_t)63u);
    if (p->labels)
        memset(p->labels, 0, SNAPPROF__EXTRA_SIZE(p->python));
    p->buffer = snapprof__fault(SNAPPROF__FAULT_MMAP)
                    ? MAP_FAILED
                    : mmap(NULL, p->buffer_size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p->buffer == MAP_FAILED)
        p->buffer = NULL;
    if (p->kernel_frames)
        p->kernel_frames[0] = (snapprof_frame_t){.kind = SNAPPROF_FRAME_MARKER, .name = "[kernel]"};
    if (!p->frames || (known.kernel_share && !p->kernel_frames) || !p->labels || !p->buffer ||
        (p->python && !p->py_frames)) {
        free(p->py_frames);
        free(p->frames);
        free(p->kernel_frames);
        free(p->frames_alt);
        free(p->labels);
        if (p->buffer)
            munmap(p->buffer, p->buffer_size);
        free(p);
        return -ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        rc = snapprof_profiler_add_thread(p, threads[i]);
        if (rc != 0) {
            snapprof_profiler_destroy(p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

/* One in params.short_threads threads that join as they start is armed
 * then; the others wait for the next tick, as threads added by another
 * thread do. Arming a perf event is 9 system calls, 100-150 us a thread on
 * these VMs: every thread armed at its start cost a program of 0.4 ms
 * threads 31 % of its thread throughput at 100 Hz (2150 threads/s against
 * 3150). A thread armed at start has its first sample weigh short_threads
 * intervals, so a thread that uses c < interval of CPU time before the
 * tick is sampled with probability c / (interval * short_threads) and
 * weighs c in expectation, as each of them did when all were armed
 * (draw_first() in trigger_perf_event.c). A random draw, not every Nth
 * thread: a program that starts its workers in batches of N would have
 * only one kind of worker sampled. Lock held. */
static int arm_at_start(snapprof_profiler_t *p)
{
    if (p->params.short_threads == 0 || p->params.mode != SNAPPROF_MODE_CPU)
        return 0;
    if (p->start_rng == 0)
        p->start_rng = snapprof__monotonic_ns();
    return snapprof__splitmix64_next(&p->start_rng) % p->params.short_threads == 0;
}

int snapprof_profiler_add_thread(snapprof_profiler_t *p, snapprof_thread_t *thread)
{
    if (!p || !thread)
        return -EINVAL;
    int rc = 0;
    snapprof__sampler_lock();
    for (size_t i = 0; i < p->target_count; i++)
        if (p->targets[i]->thread == thread && !p->targets[i]->removed)
            goto out; /* already sampled */
    if (p->target_count == p->target_cap) {
        size_t cap = p->target_cap ? p->target_cap * 2 : 4;
        snapprof__target_t **n = realloc(p->targets, cap * sizeof *n);
        if (!n) {
            rc = -ENOMEM;
            goto out;
        }
        p->targets = n;
        p->target_cap = cap;
    }
    snapprof__target_t *t = calloc(1, sizeof *t);
    if (!t) {
        rc = -ENOMEM;
        goto out;
    }
    p->targets[p->target_count++] = t;
    snapprof__thread_retain(thread);
    t->thread = thread;
    /* A thread that joins as it starts has all its CPU time in the profile
     * (only the first profiler to add it can say so): its clock's few
     * microseconds so far are not worth a system call on every thread. */
    int newborn = atomic_exchange(&thread->newborn, 0);
    if (p->state == PROFILER_RUNNING) {
        t->wall_joined_ns = snapprof__monotonic_ns();
        if (!newborn)
            snapprof__thread_cpu_ns(thread->tid, &t->cpu_start);
        t->cpu_last = t->cpu_start;
        if (p->params.trigger == SNAPPROF_TRIGGER_HANDSHAKE) {
            snapprof__arm_target(p, t);
        } else if (newborn && p->pool_ready && !p->parked &&
                   thread->tid == snapprof__gettid_cached() && arm_at_start(p)) {
            /* A thread joining as it starts, on itself (the preload's
             * threads, before their start routine): armed now, its first
             * period drawn in (0, interval] (trigger_perf_event.c), so a
             * thread that uses less than one period is still sampled
             * (arm_at_start()). The cost (perf_event_open, fcntl, ioctl,
             * mmap, and the teardown at its exit) is the thread's own. */
            t->armed_at_start = 1;
            t->first_odds = p->params.short_threads;
            uint64_t before, after;
            int timed = snapprof__thread_cpu_ns(thread->tid, &before) == 0;
            snapprof__arm_target(p, t);
            /* Less the arming itself (a perf event's 9 system calls, 40-140
             * us of the thread's CPU time on these VMs): snapprof's cost,
             * not the program's, which in the thread's clock would be a
             * remainder as large as a short thread's own work. The profile
             * counts the thread's CPU time from its start (as a newborn's)
             * without it; its perf event counts from its end. */
            if (timed && t->arm && snapprof__thread_cpu_ns(thread->tid, &after) == 0 &&
                after > before) {
                t->cpu_start = after - before;
                t->cpu_last = t->cpu_start;
            }
        } else {
            /* Opening a perf event or a timer is most of what profiling
             * costs a short thread (perf_event_open, fcntl, ioctl, close,
             * and the event's teardown at exit): unless drawn above, the
             * next tick does it, if the thread is still there. */
            t->arm_pending = 1;
            /* Until then the process-wide timer samples it, if there is
             * one (params.unarmed_timer). */
            snapprof__unarmed_publish(p, t);
            /* The first one since the last tick makes the profile due at
             * its next tick (the sampling thread may be asleep until a
             * later drain); it stays due then even if that thread has
             * gone, so that threads coming and going wake it once a tick,
             * not once each. */
            if (!p->joined_since_tick && !p->parked) {
                p->joined_since_tick = 1;
                snapprof__sampler_kick();
            }
            /* Parked (params.arm_on_demand): it waits, unarmed and without
             * waking anyone, for the next attach (snapprof__unpark()). */
        }
    }
out:
    snapprof__sampler_unlock();
    return rc;
}

int snapprof_profiler_remove_thread(snapprof_profiler_t *p, snapprof_thread_t *thread)
{
    if (!p || !thread)
        return -EINVAL;
    int rc = -ENOENT;
    /* A thread that leaves on itself (the preload's threads as they exit):
     * its CPU time ends here, before the profiler's own teardown (the
     * disarm's close and munmap), which is snapprof's cost, not the
     * program's, as its arming is (snapprof_profiler_add_thread()). */
    uint64_t self_end = 0;
    if (thread->tid != snapprof__gettid_cached() ||
        snapprof__thread_cpu_ns(thread->tid, &self_end) != 0)
        self_end = 0;
    snapprof__sampler_lock();
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        if (t->thread == thread && !t->removed) {
            if (p->handed_over) {
                /* The profile is complete, or its builders are completing
                 * it right now without the lock: everything of this thread
                 * up to the profile's end has been delivered, and what its
                 * clock says since is not the profile's. Nothing more goes
                 * to the builders (xOnSample inside xOnProfileCompleted
                 * would break their one-callback-at-a-time promise). */
                snapprof__target_free(p, t);
                p->targets[i] = p->targets[--p->target_count];
                rc = 0;
                break;
            }
            if (p->state == PROFILER_RUNNING && snapprof__unarmed_withdraw(p, t)) {
                /* Never armed, but the process-wide timer captured it:
                 * those captures are delivered by the sampling thread's
                 * next full drain, which then frees it (as below), its CPU
                 * time going to the pool of threads never armed. */
                snapprof__settle_pending(t);
                snapprof__clock_at_end(t, 1);
                if (self_end != 0 && t->cpu_last > self_end)
                    t->cpu_last = self_end;
                t->dead = 1;
                t->removed = 1;
                p->removed_count++;
                rc = 0;
                break;
            }
            if (p->state == PROFILER_RUNNING && p->pool_ready && !t->arm_pending &&
                !t->never_armed) {
                /* Its captures wait in the slots with everyone else's:
                 * delivering them here would unwind every slot on the
                 * caller's thread (under the preload library, an exiting
                 * thread of the program). The caller only stops its
                 * trigger and reads its clock; the sampling thread's next
                 * full drain delivers what it left and frees it. */
                snapprof__disarm(p, t);
                snapprof__clock_at_end(t, 1); /* its CPU time up to now counts */
                if (self_end != 0 && t->cpu_last > self_end)
                    t->cpu_last = self_end;
                t->dead = 1; /* no tick looks at it again */
                t->removed = 1;
                if (t->trigger == SNAPPROF_TRIGGER_HANDSHAKE)
                    p->handshake_count--;
                p->removed_count++;
                rc = 0;
                break;
            }
            /* Its captures so far are delivered, and none can come after
             * the disarm: only then may its record go. (A thread never
             * armed has none; one disarmed since may still have some.) */
            if (!t->arm_pending && !t->never_armed) {
                snapprof__profiler_drain(p);
                snapprof__disarm(p, t);
                snapprof__profiler_drain(p);
            }
            snapprof__settle_pending(t);
            snapprof__clock_at_end(t, 1); /* its CPU time up to now counts */
            if (t->never_armed)
                snapprof__retire_unarmed(p, t);
            else
                snapprof__deliver_remainder(p, t, 1);
            if (t->trigger == SNAPPROF_TRIGGER_HANDSHAKE)
                p->handshake_count--;
            p->cpu_removed_ns += snapprof__target_cpu_ns(t);
            snapprof__target_free(p, t);
            p->targets[i] = p->targets[--p->target_count];
            rc = 0;
            break;
        }
    }
    snapprof__sampler_unlock();
    return rc;
}

/* Appends item to a growable array of pointers. */
static int push_ptr(void ***array, size_t *count, void *item)
{
    void **n = realloc(*array, (*count + 1) * sizeof *n);
    if (!n)
        return -ENOMEM;
    n[(*count)++] = item;
    *array = n;
    return 0;
}

int snapprof_profiler_add_unwinder(snapprof_profiler_t *p, snapprof_unwinder_t *unwinder)
{
    if (!p || !unwinder) {
        snapprof_unwinder_destroy(unwinder);
        return -EINVAL;
    }
    int rc = p->state == PROFILER_CREATED
                 ? push_ptr((void ***)&p->unwinders, &p->unwinder_count, unwinder)
                 : SNAPPROF_ESTATE;
    if (rc != 0)
        snapprof_unwinder_destroy(unwinder);
    return rc;
}

int snapprof_profiler_add_builder(snapprof_profiler_t *p, snapprof_builder_t *builder)
{
    if (!p || !builder) {
        snapprof_builder_destroy(builder);
        return -EINVAL;
    }
    int rc = p->state == PROFILER_CREATED
                 ? push_ptr((void ***)&p->builders, &p->builder_count, builder)
                 : SNAPPROF_ESTATE;
    if (rc != 0)
        snapprof_builder_destroy(builder);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Start, stop, destroy                                                     */
/* ------------------------------------------------------------------------ */

static snapprof_profile_info_t make_info(const snapprof_profiler_t *p,
                                         const snapprof_stats_t *stats)
{
    snapprof_profile_info_t info = {
        .start_time_ns = p->start_real,
        .start_mono_ns = p->start_mono,
        .duration_ns = stats ? p->end_mono - p->start_mono : 0,
        .period_ns = p->params.interval_ns,
        .mode = p->params.mode,
        .stats = stats,
    };
    if (stats != NULL) {
        info.app_frames = p->app_frames;
        info.app_frame_count = p->app_frame_count;
        info.events = p->events.events;
        info.event_count = p->events.count;
    }
    return info;
}

/* Stops the process-wide timer, if this profile has it: no capture of a
 * thread not yet armed comes after this. Lock held. */
static void stop_unarmed_timer(snapprof_profiler_t *p)
{
    if (!p->ptimer_live)
        return;
    p->ptimer_live = 0;
    snapprof__process_timer_stop(&p->ptimer);
    for (size_t i = 0; i < p->target_count; i++)
        snapprof__unarmed_withdraw(p, p->targets[i]);
    /* The counters stay readable (snapprof__snapshot_stats()). */
}

int snapprof_profiler_start(snapprof_profiler_t *p)
{
    if (!p)
        return -EINVAL;
    if (p->state != PROFILER_CREATED)
        return SNAPPROF_ESTATE;
    /* Process-wide and installed once: it stays even if this start fails
     * (it passes on every signal that is not one of our requests). */
    int rc = snapprof__stack_copier_install(p->params.signal);
    if (rc != 0)
        return rc;
    /* A start that fails takes back the unwinders it added, so that a
     * retry sees the profiler as the caller left it: with no unwinder it
     * builds the whole default chain again, instead of keeping a partial
     * one (the JIT unwinder alone) or ignoring unwinders added since. */
    size_t callers_unwinders = p->unwinder_count;
    if (p->unwinder_count == 0) {
        /* JIT frames first: that unwinder claims only frames in JIT code,
         * which no native unwinder can walk. Then CFI: most native code has
         * no frame pointers. The CFI tables step most frames; libunwind
         * takes the frames they mark (signal trampolines, PLT stubs, DWARF
         * expressions) and the modules they have none for. Then
         * .debug_frame CFI for objects that ship no .eh_frame_hdr but were
         * built with -g, and frame pointers for what is left. */
        snapprof_unwinder_t *jit, *ct, *lu, *df, *fp;
        rc = snapprof_jit_unwinder_create(&jit);
        if (rc == 0)
            rc = snapprof_profiler_add_unwinder(p, jit);
        if (rc == 0)
            rc = snapprof_cfi_table_unwinder_create(&ct);
        if (rc == 0)
            rc = snapprof_profiler_add_unwinder(p, ct);
        if (rc == 0)
            rc = snapprof_libunwind_unwinder_create(&lu);
        if (rc == 0)
            rc = snapprof_profiler_add_unwinder(p, lu);
        if (rc == 0)
            rc = snapprof_debug_frame_unwinder_create(&df);
        if (rc == 0)
            rc = snapprof_profiler_add_unwinder(p, df);
        if (rc == 0)
            rc = snapprof_frame_pointer_unwinder_create(&fp);
        if (rc == 0)
            rc = snapprof_profiler_add_unwinder(p, fp);
        if (rc != 0)
            goto undo;
    }
    /* Found once, not at every capture: the unwinders the handler calls. */
    snapprof_unwinder_t **hooks = realloc(p->capture_hooks, p->unwinder_count * sizeof *hooks);
    if (!hooks) {
        rc = -ENOMEM;
        goto undo;
    }
    p->capture_hooks = hooks;
    p->capture_hook_count = 0;
    for (size_t i = 0; i < p->unwinder_count; i++)
        if (p->unwinders[i]->ops->xOnStackCapture)
            p->capture_hooks[p->capture_hook_count++] = p->unwinders[i];
    p->start_mono = snapprof__monotonic_ns();
    p->start_real = realtime_ns();
    snapprof_profile_info_t info = make_info(p, NULL);
    /* Builders that started before one failed are not told: no sample
     * reached them, and a retry starts them afresh (profile_builder.h). */
    for (size_t i = 0; i < p->builder_count; i++) {
        snapprof_builder_t *b = p->builders[i];
        if ((rc = snapprof__builder_started(b, &info)) != 0)
            goto undo;
    }
    if ((rc = snapprof__attached_start(p, &info)) != 0)
        goto undo;
    snapprof__sampler_lock();
    if ((wall_by_triggers(p) || (p->params.mode == SNAPPROF_MODE_CPU &&
                                 p->params.trigger != SNAPPROF_TRIGGER_HANDSHAKE)) &&
        !p->pool_ready) {
        /* Slots for the captures, in a quarter of the memory budget (256
         * of 64 KiB by default; only the pages a copy touches are ever
         * resident). With 64, 4 threads at 1 kHz on a loaded machine lost
         * 16 % of their captures while the sampling thread waited for a
         * core. */
        size_t slot_bytes = 64u << 10, slots = 256;
        while (slots > 8 && slots * slot_bytes > p->params.capture_memory_max / 4)
            slots /= 2;
        rc = snapprof__capture_pool_init(&p->pool, slots, slot_bytes,
                                         SNAPPROF__EXTRA_SIZE(p->python),
                                         snapprof__sampler_kick_word());
        if (rc == 0) {
            p->pool.delegate = &p->delegate;
            p->pool.copy_max = p->buffer_size;
            p->pool.thread_cpu = p->params.kernel_share && p->params.mode == SNAPPROF_MODE_CPU;
            p->pool_ready = 1;
        } else {
            /* No memory for the slots: every thread gets the handshake
             * (snapprof__arm_target), which copies into p->buffer, rather than no
             * profile at all. */
            p->stats.mmap_failed++;
            rc = 0;
        }
    }
    /* Before any target is armed: its failure has nothing to undo here. */
    rc = snapprof__event_reader_open(&p->events);
    if (rc != 0) {
        snapprof__sampler_unlock();
        goto undo;
    }
    /* Heap sampling (heap/), one profiler at a time: before any target is
     * armed, so that its refusal has nothing to undo but the events. */
    if (p->params.heap_interval > 0) {
        /* With Python frames, each sampled allocation takes its thread's
         * interpreter frames too, as a signal handler's capture does. */
        snapprof__heap_more_t more = {.capture = p->python ? heap_capture_python : NULL,
                                      .tail_size = sizeof(snapprof__py_capture_t)};
        rc = snapprof__heap_start(p, p->params.heap_interval, snapprof__sampler_kick_word(), &more);
        if (rc != 0) {
            snapprof__event_reader_close(&p->events);
            snapprof__sampler_unlock();
            goto undo;
        }
    }
    /* Threads not yet armed: the process-wide timer, one profile at a
     * time; a refusal leaves them to the next tick, as without it. */
    if (p->params.unarmed_timer && p->params.mode == SNAPPROF_MODE_CPU && p->pool_ready &&
        p->params.trigger != SNAPPROF_TRIGGER_HANDSHAKE) {
        int err = snapprof__process_timer_start(&p->ptimer, &p->pool, p->params.signal,
                                                p->params.interval_ns);
        p->ptimer_on = p->ptimer_live = err == 0;
        p->stats.unarmed_timer_errno = (uint64_t)(err < 0 ? -err : 0);
    }
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        snapprof__thread_cpu_ns(t->thread->tid, &t->cpu_start);
        t->cpu_last = t->cpu_start;
        snapprof__arm_target(p, t);
    }
    /* On demand with nothing attached yet: the threads wait, their
     * triggers made and stopped again as at a detach (the arming above
     * gave each its trigger, so that its CPU time until the first attach
     * is its remainder), for the first attach. */
    if (p->attached_count == 0)
        snapprof__park(p);
    p->app_cursor = snapprof__app_frames_head();
    p->pid = getpid();
    p->next_tick = p->start_mono + p->params.initial_delay_ns;
    p->next_drain = p->next_tick;
    p->deadline = p->params.duration_ns ? p->next_tick + p->params.duration_ns : 0;
    p->state = PROFILER_RUNNING;
    rc = snapprof__sampler_activate(p);
    if (rc != 0) {
        stop_unarmed_timer(p);
        snapprof__heap_end(p);
        snapprof__event_reader_close(&p->events);
        p->state = PROFILER_CREATED;
        p->parked = 0;
        for (size_t i = 0; i < p->target_count; i++) {
            snapprof__disarm(p, p->targets[i]);
            p->targets[i]->trigger = 0;
            p->targets[i]->parked = 0;
        }
        snapprof__profiler_drain(p);
        p->handshake_count = 0;
        memset(p->stats.threads_by_trigger, 0, sizeof p->stats.threads_by_trigger);
        memset(p->stats.trigger_refused, 0, sizeof p->stats.trigger_refused);
        p->stats.trigger_fallback_from = 0;
        p->stats.trigger_fallback_errno = 0;
    }
    snapprof__sampler_unlock();
    if (rc == 0)
        return 0;
undo:
    for (size_t i = callers_unwinders; i < p->unwinder_count; i++)
        snapprof_unwinder_destroy(p->unwinders[i]);
    p->unwinder_count = callers_unwinders;
    return rc;
}

/* Moves the app frames that ended since the last call into p->app_frames,
 * judging each against the hitch threshold. Lock held. */
void snapprof__drain_app_frames(snapprof_profiler_t *p)
{
    for (;;) {
        if (p->app_frame_count == p->app_frame_cap) {
            size_t cap = p->app_frame_cap ? p->app_frame_cap * 2 : 64;
            snapprof_app_frame_t *n = realloc(p->app_frames, cap * sizeof *n);
            if (!n)
                return; /* they stay in the log for the next try */
            p->app_frames = n;
            p->app_frame_cap = cap;
        }
        size_t room = p->app_frame_cap - p->app_frame_count;
        snapprof_app_frame_t *out = p->app_frames + p->app_frame_count;
        size_t n = snapprof__app_frames_drain(&p->app_cursor, out, room, &p->stats.app_frames_lost);
        for (size_t i = 0; i < n; i++)
            out[i].hitch = out[i].end_ns - out[i].begin_ns > p->params.hitch_threshold_ns;
        p->app_frame_count += n;
        if (n < room)
            return;
    }
}

/* Hands the profile to every builder; returns the first error, or 0. */
static int complete_builders(snapprof_profiler_t *p, const snapprof_profile_info_t *info)
{
    int result = 0;
    for (size_t i = 0; i < p->builder_count; i++) {
        snapprof_builder_t *b = p->builders[i];
        int rc = snapprof__builder_completed(b, info);
        if (rc != 0 && result == 0)
            result = rc;
    }
    return result;
}

void snapprof__profiler_complete(snapprof_profiler_t *p)
{
    snapprof_stats_t stats;
    /* What the library allocates on this thread from here on (unwinding,
     * the builders' writing) is not the program's. */
    snapprof__heap_guard_enter();
    snapprof__sampler_lock();
    /* No capture can come after this: every trigger is off, heap sampling
     * too, and what the slots still hold is delivered before the profile
     * is written. */
    stop_unarmed_timer(p);
    for (size_t i = 0; i < p->target_count; i++)
        snapprof__disarm(p, p->targets[i]);
    snapprof__heap_pause(p);
    snapprof__profiler_drain_all(p);
    /* The hook side's counters stay in the profile's; blocks still live
     * need nothing (a builder's in use is allocations less frees). */
    snapprof__heap_stats(p, &p->stats);
    snapprof__heap_end(p);
    /* Every thread's excess first (snapprof__settle_final()), netted
     * against the pool of unsampled ones, then what is left against the
     * remainders. */
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        if (t->arm_pending)
            snapprof__clock_at_end(t, 1); /* never armed: no count to read */
        snapprof__settle_pending(t);
        if (t->trigger == SNAPPROF_TRIGGER_PERF_EVENT || t->trigger == SNAPPROF_TRIGGER_CPU_TIMER ||
            t->never_armed)
            snapprof__settle_final(p, t);
    }
    snapprof__net_unarmed(p);
    for (size_t i = 0; i < p->target_count; i++)
        snapprof__deliver_remainder(p, p->targets[i], 1);
    snapprof__retire_removed(p);
    snapprof__deliver_unarmed(p);
    snapprof__drain_app_frames(p);
    snapprof__event_reader_close(&p->events);
    snapprof__snapshot_stats(p, &stats);
    p->handed_over = 1;
    snapprof__sampler_unlock();
    snapprof_profile_info_t info = make_info(p, &stats);
    int result = complete_builders(p, &info);
    snapprof__attached_complete(p, &stats);
    snapprof__sampler_lock();
    p->result = result;
    p->state = PROFILER_COMPLETED;
    snapprof__sampler_done(p);
    snapprof__sampler_unlock();
    snapprof__heap_guard_leave();
}

int snapprof_profiler_stop(snapprof_profiler_t *p)
{
    if (!p)
        return -EINVAL;
    snapprof__sampler_lock();
    switch (p->state) {
    case PROFILER_CREATED:
        snapprof__sampler_unlock();
        return SNAPPROF_ESTATE;
    case PROFILER_RUNNING:
        snapprof__sampler_deactivate(p);
        p->state = PROFILER_COMPLETING;
        p->end_mono = snapprof__monotonic_ns();
        snapprof__sampler_unlock();
        snapprof__profiler_complete(p);
        snapprof__sampler_lock();
        break;
    default:
        while (p->state != PROFILER_COMPLETED)
            snapprof__sampler_wait(p);
        break;
    }
    int result = p->result;
    snapprof__sampler_unlock();
    return result;
}

void snapprof_profiler_destroy(snapprof_profiler_t *p)
{
    if (!p)
        return;
    if (p->state != PROFILER_CREATED)
        snapprof_profiler_stop(p);
    for (size_t i = 0; i < p->target_count; i++)
        snapprof__target_free(p, p->targets[i]);
    free(p->targets);
    if (p->pool_ready)
        snapprof__capture_pool_destroy(&p->pool);
    for (size_t i = 0; i < p->unwinder_count; i++)
        snapprof_unwinder_destroy(p->unwinders[i]);
    free(p->unwinders);
    free(p->capture_hooks);
    for (size_t i = 0; i < p->builder_count; i++)
        snapprof_builder_destroy(p->builders[i]);
    free(p->builders);
    snapprof__attached_destroy(p);
    free(p->frames);
    free(p->py_frames);
    free(p->kernel_frames);
    free(p->frames_alt);
    free(p->labels);
    free(p->app_frames);
    snapprof__event_reader_free(&p->events);
    munmap(p->buffer, p->buffer_size);
    free(p);
}

/* ------------------------------------------------------------------------ */
/* Flush and thread names (writing one attached builder: attach.c)        */
/* ------------------------------------------------------------------------ */

/* The info a profile is written with now: while it runs, what the
 * threads, the heap and the app events hold so far reaches every builder
 * first (nothing is held back from this write nor delivered twice later)
 * and its duration runs to now. stats: where its counters are kept (the
 * info points at them). Lock held. */
snapprof_profile_info_t snapprof__info_now(snapprof_profiler_t *p, snapprof_stats_t *stats)
{
    int running = p->state == PROFILER_RUNNING;
    if (running) {
        snapprof__deliver_so_far(p); /* the captures and unplaced CPU time so far */
        snapprof__drain_app_frames(p);
        snapprof__event_reader_read(&p->events);
    }
    snapprof__snapshot_stats(p, stats);
    snapprof_profile_info_t info = make_info(p, stats);
    if (running)
        info.duration_ns = snapprof__monotonic_ns() - p->start_mono;
    return info;
}

int snapprof_profiler_flush(snapprof_profiler_t *p)
{
    if (!p)
        return -EINVAL;
    snapprof__heap_guard_enter(); /* the builders' allocations are not the program's */
    snapprof__sampler_lock();
    while (p->state == PROFILER_COMPLETING)
        snapprof__sampler_wait(p);
    if (p->state == PROFILER_CREATED) {
        snapprof__sampler_unlock();
        snapprof__heap_guard_leave();
        return SNAPPROF_ESTATE;
    }
    snapprof_stats_t stats;
    snapprof_profile_info_t info = snapprof__info_now(p, &stats);
    /* The lock stays held while the builders write: the sampling thread
     * cannot deliver a sample meanwhile, nor another flush or stop complete
     * the same builders, since a builder's callbacks never run concurrently. */
    int result = complete_builders(p, &info);
    snapprof__sampler_unlock();
    snapprof__heap_guard_leave();
    return result;
}

int snapprof_thread_update_name(snapprof_thread_t *thread, const char *name)
{
    if (!thread || !name)
        return -EINVAL;
    /* Samples read the name on the sampling thread under the sampler lock,
     * so writing it under the same lock never tears a name in flight. The
     * captures already taken (a thread renaming itself has finished all of
     * its own) are delivered first, under the name they were taken with:
     * by the sampling thread, while this one waits (it unwinds every slot,
     * which is no work for the program's thread), and only when there are
     * such captures (a thread naming itself as it starts has none). */
    snapprof__sampler_lock();
    if (snapprof__sampler_active_have_captures_of(thread))
        snapprof__sampler_drain_active_handoff();
    size_t n = strnlen(name, sizeof thread->name - 1);
    memcpy(thread->name, name, n);
    thread->name[n] = '\0';
    atomic_store(&thread->name_pending, 0);
    snapprof__sampler_unlock();
    snapprof__heap_names_changed();
    return 0;
}
