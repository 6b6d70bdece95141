/* The profiler: public API, and the work of one tick for one profiler (idle
 * detection, stack copy, unwinding, delivery to the builders). */
#include "sampling_thread/profiler_internal.h"
#include "sampling_thread/profiler_defaults.h"

#include "common/fault.h"
#include "common/fds.h"
#include "module_cache/module_cache.h"
#include "profile_builder/profile_builder_internal.h"
#include "stack_copier/stack_copier.h"
#include "unwinder/cfi_table_unwinder.h"
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
/* Names (those of error codes are in common/errors.c)                     */
/* ------------------------------------------------------------------------ */

const char *snapprof_fail_reason_name(snapprof_fail_reason_t reason)
{
    static const char *const names[SNAPPROF_FAIL_COUNT] = {
        [SNAPPROF_FAIL_THREAD_EXITED] = "thread_exited",
        [SNAPPROF_FAIL_TID_RECYCLED] = "tid_recycled",
        [SNAPPROF_FAIL_TIMEOUT] = "timeout",
        [SNAPPROF_FAIL_SP_OUT_OF_RANGE] = "sp_out_of_range",
        [SNAPPROF_FAIL_SEND] = "send",
        [SNAPPROF_FAIL_HANDLER_REPLACED] = "handler_replaced",
        [SNAPPROF_FAIL_NO_FRAMES] = "no_frames",
        [SNAPPROF_FAIL_BUILDER] = "builder",
    };
    if ((unsigned)reason >= SNAPPROF_FAIL_COUNT)
        return "unknown";
    return names[reason];
}

const char *snapprof_trigger_name(snapprof_trigger_t trigger)
{
    static const char *const names[SNAPPROF_TRIGGER_COUNT] = {
        [SNAPPROF_TRIGGER_AUTO] = "auto",
        [SNAPPROF_TRIGGER_PERF_EVENT] = "perf",
        [SNAPPROF_TRIGGER_CPU_TIMER] = "timer",
        [SNAPPROF_TRIGGER_HANDSHAKE] = "handshake",
    };
    if ((unsigned)trigger >= SNAPPROF_TRIGGER_COUNT)
        return "unknown";
    return names[trigger];
}

/* ------------------------------------------------------------------------ */
/* Creation and configuration                                               */
/* ------------------------------------------------------------------------ */

/* The defaults of every member this library knows, size included. */
static void params_defaults(snapprof_params_t *params)
{
    memset(params, 0, sizeof *params);
    params->size = sizeof *params;
    params->interval_ns = 10000000u;
    params->signal = SIGURG;
    params->copy_timeout_ns = 50000000u;
    params->mode = SNAPPROF_MODE_CPU;
    params->stack_buffer_size = 8u << 20;
    params->max_frames = 4096;
    params->idle_threshold_ns = 100000u;
    params->hitch_threshold_ns = 50000000u;
    params->trigger = SNAPPROF__TRIGGER_DEFAULT;
    params->wall_blocked = SNAPPROF__WALL_BLOCKED_DEFAULT;
    params->capture_memory_max = 64u << 20;
}

void snapprof_params_init_sized(snapprof_params_t *params, size_t size)
{
    if (!params || size < sizeof params->size)
        return;
    snapprof_params_t defaults;
    params_defaults(&defaults);
    size_t known = size < sizeof defaults ? size : sizeof defaults;
    memcpy(params, &defaults, known);
    /* A newer header's members, which this library has no defaults for. */
    memset((char *)params + known, 0, size - known);
    params->size = size;
}

/* Copies the caller's params into out: the members its header had, and
 * the defaults of the ones it did not (see snapprof_params_t). */
static int read_params(const snapprof_params_t *in, snapprof_params_t *out)
{
    if (in->size < SNAPPROF_PARAMS_SIZE_MIN)
        return -EINVAL; /* 0: not made by snapprof_params_init() */
    params_defaults(out);
    memcpy(out, in, in->size < sizeof *out ? in->size : sizeof *out);
    out->size = sizeof *out;
    return 0;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int check_params(const snapprof_params_t *p)
{
    if (p->interval_ns < 10000u) /* 100 kHz is more than any use */
        return -EINVAL;
    if (p->signal <= 0 || p->signal >= NSIG)
        return -EINVAL;
    if (p->copy_timeout_ns == 0 || p->max_frames < 2 || p->stack_buffer_size < 4096)
        return -EINVAL;
    if (p->mode != SNAPPROF_MODE_CPU && p->mode != SNAPPROF_MODE_WALL)
        return -EINVAL;
    if ((unsigned)p->trigger >= SNAPPROF_TRIGGER_COUNT)
        return -EINVAL;
    if (p->trigger != SNAPPROF_TRIGGER_HANDSHAKE && p->capture_memory_max < (1u << 20))
        return -EINVAL;
    return 0;
}

/* CPU time a target spent while profiled, as far as the sampler has seen. */
static uint64_t target_cpu_ns(const snapprof__target_t *t)
{
    return t->cpu_last > t->cpu_start ? t->cpu_last - t->cpu_start : 0;
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

static void arm_target(snapprof_profiler_t *p, snapprof__target_t *t);
static void disarm(snapprof_profiler_t *p, snapprof__target_t *t);
static void drain(snapprof_profiler_t *p);
static void deliver_remainder(snapprof_profiler_t *p, snapprof__target_t *t, int final);
static int settle_final(snapprof_profiler_t *p, snapprof__target_t *t);
static void net_unarmed(snapprof_profiler_t *p);
static void settle_pending(snapprof__target_t *t);
static void deliver_unarmed(snapprof_profiler_t *p);
static uint64_t target_unsampled_ns(const snapprof__target_t *t);
static void clock_at_end(snapprof__target_t *t, int read_live);
static void retire_unarmed(snapprof_profiler_t *p, snapprof__target_t *t);
static void retire_removed(snapprof_profiler_t *p);

/* Frees a target; its trigger must be disarmed and its captures drained. */
static void target_free(snapprof_profiler_t *p, snapprof__target_t *t)
{
    if (p->pool_ready)
        snapprof__capture_target_free_large(&p->pool, &t->cap);
    snapprof_thread_release(t->thread);
    free(t->prev);
    free(t->prev_labels);
    if (p->params.mode == SNAPPROF_MODE_WALL)
        snapprof__proc_forget(t->thread->tid);
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
    int rc = read_params(params, &known);
    if (rc == 0)
        rc = check_params(&known);
    if (rc != 0)
        return rc;
    snapprof_profiler_t *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->params = known;
    p->state = PROFILER_CREATED;
    p->delegate = (snapprof__capture_delegate_t){.on_capture = on_capture, .ctx = p};
    p->buffer_size = (known.stack_buffer_size + 4095u) & ~(size_t)4095u;
    p->frames = calloc(known.max_frames, sizeof *p->frames);
    /* kernel_share: a stack and its "[kernel]" leaf (deliver_kernel()). */
    if (known.kernel_share)
        p->kernel_frames = calloc(known.max_frames + 1, sizeof *p->kernel_frames);
    p->labels = calloc(1, sizeof *p->labels);
    p->buffer = snapprof__fault(SNAPPROF__FAULT_MMAP)
                    ? MAP_FAILED
                    : mmap(NULL, p->buffer_size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p->buffer == MAP_FAILED)
        p->buffer = NULL;
    if (p->kernel_frames)
        p->kernel_frames[0] = (snapprof_frame_t){.kind = SNAPPROF_FRAME_MARKER, .name = "[kernel]"};
    if (!p->frames || (known.kernel_share && !p->kernel_frames) || !p->labels || !p->buffer) {
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

/* One in params.short_threads threads that join as they start is armed then;
 * the others wait for the next tick, as threads added by another thread
 * do. Arming a perf event is 9 system calls, 100-150 us a thread on these
 * VMs: every thread armed at its start cost a program of 0.4 ms threads
 * 31 % of its thread throughput at 100 Hz (2150 threads/s against 3150).
 * A thread armed at start has its first sample weigh short_threads
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
        p->start_rng = snapprof__mono_ns();
    uint64_t z = (p->start_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % p->params.short_threads == 0;
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
        if (!newborn)
            snapprof__thread_cpu_ns(thread->tid, &t->cpu_start);
        t->cpu_last = t->cpu_start;
        if (p->params.trigger == SNAPPROF_TRIGGER_HANDSHAKE) {
            arm_target(p, t);
        } else if (newborn && p->pool_ready && thread->tid == snapprof__gettid_cached() &&
                   arm_at_start(p)) {
            /* A thread joining as it starts, on itself (the preload's
             * threads, before their start routine): armed now, its first
             * period drawn in (0, interval] (trigger_perf_event.c), so a
             * thread that uses less than one period is still sampled, with
             * probability its CPU time / period. Thread-per-task programs
             * are mostly such threads; armed at the next tick, they were
             * never sampled. The cost (perf_event_open, fcntl, ioctl,
             * mmap, and the teardown at its exit) is the thread's own. */
            t->armed_at_start = 1;
            t->first_odds = p->params.short_threads;
            uint64_t before, after;
            int timed = snapprof__thread_cpu_ns(thread->tid, &before) == 0;
            arm_target(p, t);
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
            /* Added by another thread, not as it starts, or not drawn
             * (arm_at_start()): the next tick arms it, if the thread is
             * still there. */
            t->arm_pending = 1;
            /* The first one since the last tick makes the profile due at
             * its next tick (the sampling thread may be asleep until a
             * later drain); it stays due then even if that thread has
             * gone, so that threads coming and going wake it once a tick,
             * not once each. */
            if (!p->joined_since_tick) {
                p->joined_since_tick = 1;
                snapprof__sampler_kick();
            }
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
     * disarm's close and munmap, about 100 us of kernel time a thread on
     * these VMs, as much as a short thread's own work), which is
     * snapprof's cost, not the program's, as its arming is
     * (snapprof_profiler_add_thread()). */
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
                target_free(p, t);
                p->targets[i] = p->targets[--p->target_count];
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
                disarm(p, t);
                clock_at_end(t, 1); /* its CPU time up to now counts */
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
                drain(p);
                disarm(p, t);
                drain(p);
            }
            settle_pending(t);
            clock_at_end(t, 1); /* its CPU time up to now counts */
            if (t->never_armed)
                retire_unarmed(p, t);
            else
                deliver_remainder(p, t, 1);
            if (t->trigger == SNAPPROF_TRIGGER_HANDSHAKE)
                p->handshake_count--;
            p->cpu_removed_ns += target_cpu_ns(t);
            target_free(p, t);
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
    p->start_mono = snapprof__mono_ns();
    p->start_real = realtime_ns();
    snapprof_profile_info_t info = make_info(p, NULL);
    /* Builders that started before one failed are not told: no sample
     * reached them, and a retry starts them afresh (profile_builder.h). */
    for (size_t i = 0; i < p->builder_count; i++) {
        snapprof_builder_t *b = p->builders[i];
        if (b->ops->xOnProfileStarted && (rc = b->ops->xOnProfileStarted(b->user_data, &info)) != 0)
            goto undo;
    }
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
                                         sizeof(snapprof__label_capture_t),
                                         snapprof__sampler_kick_word());
        if (rc == 0) {
            p->pool.delegate = &p->delegate;
            p->pool.copy_max = p->buffer_size;
            p->pool.thread_cpu = p->params.kernel_share && p->params.mode == SNAPPROF_MODE_CPU;
            p->pool_ready = 1;
        } else {
            /* No memory for the slots: every thread gets the handshake
             * (arm_target), which copies into p->buffer, rather than no
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
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        snapprof__thread_cpu_ns(t->thread->tid, &t->cpu_start);
        t->cpu_last = t->cpu_start;
        arm_target(p, t);
    }
    p->app_cursor = snapprof__app_frames_head();
    p->pid = getpid();
    p->next_tick = p->start_mono + p->params.initial_delay_ns;
    p->next_drain = p->next_tick;
    p->deadline = p->params.duration_ns ? p->next_tick + p->params.duration_ns : 0;
    p->state = PROFILER_RUNNING;
    rc = snapprof__sampler_activate(p);
    if (rc != 0) {
        snapprof__event_reader_close(&p->events);
        p->state = PROFILER_CREATED;
        for (size_t i = 0; i < p->target_count; i++) {
            disarm(p, p->targets[i]);
            p->targets[i]->trigger = 0;
        }
        drain(p);
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

/* Counters with the percentiles filled in. Lock held. */
static void snapshot_stats(const snapprof_profiler_t *p, snapprof_stats_t *out)
{
    *out = p->stats;
    out->size = sizeof *out;
    out->cpu_ns_total = p->cpu_removed_ns;
    for (size_t i = 0; i < p->target_count; i++)
        out->cpu_ns_total += target_cpu_ns(p->targets[i]);
    if (p->pool_ready) {
        out->samples_dropped = atomic_load(&p->pool.dropped);
        out->large_buffer_bytes = p->pool.large_bytes;
        out->large_buffer_bytes_max = p->pool.large_bytes_max;
    }
    out->pause_p50_ns = snapprof__hist_quantile(&p->pause, 0.50);
    out->pause_p99_ns = snapprof__hist_quantile(&p->pause, 0.99);
    out->pause_max_ns = p->pause.max;
    out->roundtrip_p50_ns = snapprof__hist_quantile(&p->roundtrip, 0.50);
    out->roundtrip_p99_ns = snapprof__hist_quantile(&p->roundtrip, 0.99);
    out->unwind_p50_ns = snapprof__hist_quantile(&p->unwind, 0.50);
    out->unwind_p99_ns = snapprof__hist_quantile(&p->unwind, 0.99);
    out->unwind_max_ns = p->unwind.max;
    out->events_dropped = snapprof__event_reader_dropped(&p->events);
    out->events_lost = p->events.lost;
    snapprof__cfi_table_store_totals(&out->cfi_tables, &out->cfi_table_bytes,
                                     &out->cfi_table_build_ns);
    out->fds_lost = snapprof__fds_lost();
    out->fds_held_max = snapprof__fds_held_max();
}

/* Moves the app frames that ended since the last call into p->app_frames,
 * judging each against the hitch threshold. Lock held. */
static void drain_app_frames(snapprof_profiler_t *p)
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
        if (b->ops->xOnProfileCompleted) {
            int rc = b->ops->xOnProfileCompleted(b->user_data, info);
            if (rc != 0 && result == 0)
                result = rc;
        }
    }
    return result;
}

void snapprof__profiler_complete(snapprof_profiler_t *p)
{
    snapprof_stats_t stats;
    snapprof__sampler_lock();
    /* No capture can come after this: every trigger is off, and what the
     * slots still hold is delivered before the profile is written. */
    for (size_t i = 0; i < p->target_count; i++)
        disarm(p, p->targets[i]);
    drain(p);
    /* Every thread's excess first (settle_final()), netted against the
     * pool of unsampled ones, then what is left against the remainders. */
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        if (t->arm_pending)
            clock_at_end(t, 1); /* never armed: no count to read */
        settle_pending(t);
        if (t->trigger == SNAPPROF_TRIGGER_PERF_EVENT || t->trigger == SNAPPROF_TRIGGER_CPU_TIMER ||
            t->never_armed)
            settle_final(p, t);
    }
    net_unarmed(p);
    for (size_t i = 0; i < p->target_count; i++)
        deliver_remainder(p, p->targets[i], 1);
    retire_removed(p);
    deliver_unarmed(p);
    drain_app_frames(p);
    snapprof__event_reader_close(&p->events);
    snapshot_stats(p, &stats);
    p->handed_over = 1;
    snapprof__sampler_unlock();
    snapprof_profile_info_t info = make_info(p, &stats);
    int result = complete_builders(p, &info);
    snapprof__sampler_lock();
    p->result = result;
    p->state = PROFILER_COMPLETED;
    snapprof__sampler_done(p);
    snapprof__sampler_unlock();
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
        p->end_mono = snapprof__mono_ns();
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

int snapprof_profiler_get_stats_sized(snapprof_profiler_t *p, snapprof_stats_t *out, size_t size)
{
    if (!p || !out || size < SNAPPROF_STATS_SIZE_MIN)
        return -EINVAL;
    snapprof_stats_t st;
    snapprof__sampler_lock();
    snapshot_stats(p, &st);
    snapprof__sampler_unlock();
    size_t known = size < sizeof st ? size : sizeof st;
    st.size = known;
    memcpy(out, &st, known);
    /* A newer header's counters, which this library does not keep. */
    memset((char *)out + known, 0, size - known);
    return 0;
}

void snapprof_profiler_destroy(snapprof_profiler_t *p)
{
    if (!p)
        return;
    if (p->state != PROFILER_CREATED)
        snapprof_profiler_stop(p);
    for (size_t i = 0; i < p->target_count; i++)
        target_free(p, p->targets[i]);
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
    free(p->frames);
    free(p->kernel_frames);
    free(p->frames_alt);
    free(p->labels);
    free(p->app_frames);
    snapprof__event_reader_free(&p->events);
    munmap(p->buffer, p->buffer_size);
    free(p);
}

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

/* Gives t the best trigger that works, starting from the one asked for:
 * perf event, CPU timer, handshake. Lock held. */
static void arm_target(snapprof_profiler_t *p, snapprof__target_t *t)
{
    t->trigger = SNAPPROF_TRIGGER_HANDSHAKE;
    t->never_armed = 0;
    t->blocked_seq_valid = 0;
    snapprof__thread_resolve_name(t->thread);
    if (p->pool_ready && !atomic_load(&t->thread->exited)) {
        struct snapprof_thread *th = t->thread;
        t->cap.tid = th->tid;
        t->cap.stack_low = th->stack_low;
        t->cap.stack_base = th->stack_base;
        t->cap.thread = th;
        t->cap.on_thread = th->on_thread;
        t->cap.owner = t;
        snapprof_trigger_t first = p->params.trigger == SNAPPROF_TRIGGER_AUTO
                                       ? SNAPPROF_TRIGGER_PERF_EVENT
                                       : p->params.trigger;
        for (snapprof_trigger_t k = first; k < SNAPPROF_TRIGGER_HANDSHAKE; k++) {
            /* Wall mode asks for the perf event's schedule sequence: a
             * thread that stays blocked then costs no system call a tick. */
            unsigned flags = p->params.mode == SNAPPROF_MODE_WALL ? SNAPPROF__ARM_SCHED_SEQ : 0;
            if (t->first_odds > 0)
                flags |= SNAPPROF__ARM_FIRST_SPREAD; /* armed as it starts */
            int rc = snapprof__trigger_arm(snapprof__trigger_ops(k), &p->pool, &t->cap,
                                           p->params.signal, p->params.interval_ns, flags, &t->arm);
            if (rc == 0) {
                /* Without its page, a perf event's count cannot be read
                 * and wall mode reads the thread's clock instead. */
                if (k == SNAPPROF_TRIGGER_PERF_EVENT && !t->arm->page)
                    p->stats.mmap_failed++;
                t->trigger = k;
                t->arm_gen = t->arm->gen;
                t->kernel_cpu_prev = 0; /* kernel_share: from its first capture */
                /* Its first sample weighs first_odds intervals (drain_some()). */
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
static void settle_pending(snapprof__target_t *t)
{
    if (!t->arm_pending)
        return;
    t->arm_pending = 0;
    t->never_armed = 1;
}

/* Brings t's CPU clock up to where it ended: the clock the thread read
 * itself as it exited, or else, with read_live, its clock now. Lock held. */
static void clock_at_end(snapprof__target_t *t, int read_live)
{
    uint64_t end = atomic_load(&t->thread->cpu_at_exit);
    if (end == 0 && read_live && !t->dead && snapprof__thread_cpu_ns(t->thread->tid, &end) != 0)
        end = 0;
    if (end > t->cpu_last)
        t->cpu_last = end;
}

/* t was never armed and is gone: its CPU time joins the one remainder of
 * such threads (deliver_unarmed()). Lock held. */
static void retire_unarmed(snapprof_profiler_t *p, snapprof__target_t *t)
{
    uint64_t unsampled = target_unsampled_ns(t);
    if (unsampled > t->remainder_ns)
        p->unarmed_ns += unsampled - t->remainder_ns;
    t->remainder_ns = unsampled;
}

/* Frees the targets removed since the last full drain, which delivered
 * their last captures: their CPU time that no sample placed goes out as
 * their remainder first. Only after a drain that left no slot behind.
 * Lock held. */
static void retire_removed(snapprof_profiler_t *p)
{
    for (size_t i = 0; p->removed_count > 0 && i < p->target_count;) {
        snapprof__target_t *t = p->targets[i];
        if (!t->removed) {
            i++;
            continue;
        }
        deliver_remainder(p, t, 1);
        p->cpu_removed_ns += target_cpu_ns(t);
        target_free(p, t);
        p->targets[i] = p->targets[--p->target_count];
        p->removed_count--;
    }
}

/* Stops t's trigger, keeping the CPU time it counted. Lock held. */
static void disarm(snapprof_profiler_t *p, snapprof__target_t *t)
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
    clock_at_end(t, 0);
    t->arm = NULL;
    t->blocked_seq_valid = 0;
    p->armed_count--;
}

/* CPU time t spent while profiled that its samples do not stand for. */
static uint64_t target_unsampled_ns(const snapprof__target_t *t)
{
    uint64_t total = target_cpu_ns(t);
    return total > t->sampled_ns ? total - t->sampled_ns : 0;
}

/* The CPU clock up to which t's samples so far stand for its CPU time,
 * where a handshake or /proc sample weighs the CPU time since: its last
 * such sample's clock, else what its trigger's samples stood for from its
 * start (a thread that blocks the signal goes from its trigger to the
 * handshake, and those samples must not be counted again). */
static uint64_t cpu_placed(const snapprof__target_t *t)
{
    return t->sampled ? t->cpu_at_sample : t->cpu_start + t->sampled_ns;
}

/* ------------------------------------------------------------------------ */
/* Samples                                                                  */
/* ------------------------------------------------------------------------ */

static void fail(snapprof_profiler_t *p, snapprof_fail_reason_t reason)
{
    p->stats.failed[reason]++;
    p->stats.failed_total++;
}

/* What a wall-mode sample found its thread doing. /proc cannot tell a
 * thread on a CPU from one waiting for a CPU, so "running" means running
 * or runnable. */
enum { WALL_STATE_NONE = 0, WALL_STATE_RUNNING, WALL_STATE_RUNNABLE, WALL_STATE_BLOCKED };

/* The names of the x86-64 system calls threads wait in. */
static const char *syscall_name(long nr)
{
    static const struct {
        long nr;
        const char *name;
    } names[] = {
        {0, "read"},
        {1, "write"},
        {7, "poll"},
        {17, "pread64"},
        {18, "pwrite64"},
        {19, "readv"},
        {20, "writev"},
        {23, "select"},
        {34, "pause"},
        {35, "nanosleep"},
        {42, "connect"},
        {43, "accept"},
        {44, "sendto"},
        {45, "recvfrom"},
        {46, "sendmsg"},
        {47, "recvmsg"},
        {61, "wait4"},
        {69, "msgsnd"},
        {70, "msgrcv"},
        {72, "fcntl"},
        {73, "flock"},
        {74, "fsync"},
        {75, "fdatasync"},
        {128, "rt_sigtimedwait"},
        {130, "rt_sigsuspend"},
        {202, "futex"},
        {206, "io_setup"},
        {208, "io_getevents"},
        {230, "clock_nanosleep"},
        {232, "epoll_wait"},
        {247, "waitid"},
        {257, "openat"},
        {270, "pselect6"},
        {271, "ppoll"},
        {281, "epoll_pwait"},
        {288, "accept4"},
        {299, "recvmmsg"},
        {307, "sendmmsg"},
        {426, "io_uring_enter"},
        {441, "epoll_pwait2"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].nr == nr)
            return names[i].name;
    return NULL;
}

/* Appends t's state (and system call) labels to out; returns how many. */
static size_t wall_state_labels(int state, long syscall, snapprof_label_t *out)
{
    static const char *const names[] = {"running", "running", "runnable", "blocked"};
    out[0] = (snapprof_label_t){.key = "state", .str = names[state]};
    if (state != WALL_STATE_BLOCKED)
        return 1;
    const char *name = syscall_name(syscall);
    if (name)
        out[1] = (snapprof_label_t){.key = "syscall", .str = name};
    else
        out[1] = (snapprof_label_t){.key = "syscall", .num = syscall};
    return 2;
}

/* The wall time a sample stands for. In wall mode a tick's sample carries
 * the ticks since t's previous one (those the sampler was too late for,
 * and those t had no stack for); a trigger's capture stands for CPU time
 * only. */
static uint64_t sample_wall_ns(const snapprof_profiler_t *p, const snapprof__target_t *t,
                               unsigned flags)
{
    if (flags & SNAPPROF_SAMPLE_REMAINDER)
        return 0;
    if (p->params.mode != SNAPPROF_MODE_WALL)
        return p->params.interval_ns;
    if (p->draining)
        return 0;
    return (1 + p->wall_ticks_owed + t->wall_unplaced_ticks) * p->params.interval_ns;
}

/* Gives s to every builder; one failure among them is one BUILDER failure.
 * Lock held. */
static void to_builders(snapprof_profiler_t *p, const snapprof_sample_t *s)
{
    int failed = 0;
    for (size_t i = 0; i < p->builder_count; i++)
        if (p->builders[i]->ops->xOnSample(p->builders[i]->user_data, s) < 0)
            failed = 1;
    if (failed)
        fail(p, SNAPPROF_FAIL_BUILDER);
}

static void deliver(snapprof_profiler_t *p, snapprof__target_t *t, const snapprof_frame_t *frames,
                    size_t count, unsigned flags, uint64_t timestamp, uint64_t cpu_ns,
                    snapprof__label_capture_t *labels)
{
    size_t label_count = labels ? snapprof__labels_decode(labels, p->label_views) : 0;
    if (p->params.mode == SNAPPROF_MODE_WALL &&
        p->params.wall_blocked == SNAPPROF_WALL_BLOCKED_PROC &&
        (p->draining || t->wall_state != WALL_STATE_NONE))
        label_count += wall_state_labels(p->draining ? WALL_STATE_RUNNING : t->wall_state,
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
        .wall_ns = sample_wall_ns(p, t, flags),
        .tid = t->thread->tid,
        .thread_name = t->thread->name,
        .flags = flags,
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
static void deliver_remainder(snapprof_profiler_t *p, snapprof__target_t *t, int final)
{
    /* A thread never armed (it came and went between two ticks) was to
     * get a CPU-clock trigger: all its CPU time is remainder. */
    if (t->trigger != SNAPPROF_TRIGGER_PERF_EVENT && t->trigger != SNAPPROF_TRIGGER_CPU_TIMER &&
        !t->never_armed)
        return;
    if (final && settle_final(p, t))
        return;
    uint64_t unsampled = target_unsampled_ns(t);
    if (unsampled <= t->remainder_ns)
        return;
    uint64_t cpu_ns = unsampled - t->remainder_ns;
    t->remainder_ns = unsampled;
    /* Less what ended threads' samples stood for beyond their clocks and
     * the pool of unsampled ones did not take (deliver_unarmed()), so that
     * the profile's total stays the threads' clocks. */
    uint64_t netted = cpu_ns < p->overshoot_ns ? cpu_ns : p->overshoot_ns;
    cpu_ns -= netted;
    p->overshoot_ns -= netted;
    if (cpu_ns == 0)
        return;
    snapprof_frame_t frame = {.kind = SNAPPROF_FRAME_MARKER, .name = "[kernel and unsampled]"};
    deliver(p, t, &frame, 1, SNAPPROF_SAMPLE_REMAINDER, snapprof__mono_ns(), cpu_ns, NULL);
}

/* The last word of t, which ended (or the profile did). A CPU-clock
 * trigger's first sample weighs a whole interval for a first period drawn
 * in (0, interval] (why: draw_first() in trigger_perf_event.c), so a short
 * thread's samples add up to its CPU time only in expectation: more than
 * its clock when it was sampled (by what it still owed: drain_some()),
 * nothing when it was not. Both go to the pool of such threads
 * (deliver_unarmed()), where they cancel: a thread armed as it started
 * with no sample at all adds its CPU time there (one sample for all of
 * them, not one thread_id each), a thread whose samples stand for more
 * than its clock takes the excess off, and an excess the pool cannot take
 * comes off the other threads' remainders (deliver_remainder()). Left per
 * thread, every excess would stay and every unsampled thread would add,
 * and the remainder would grow with the number of short threads (62 % of a
 * profile of 0.4 ms threads at 1 kHz instead of their kernel time).
 * Returns 1 when t has nothing left to deliver. Lock held. */
static int settle_final(snapprof_profiler_t *p, snapprof__target_t *t)
{
    if (t->settled)
        return 0;
    t->settled = 1;
    if (t->armed_at_start && t->sampled_ns == 0 && !t->sampled) {
        retire_unarmed(p, t);
        return 1;
    }
    uint64_t total = target_cpu_ns(t);
    uint64_t placed = t->sampled_ns + t->remainder_ns;
    if (placed > total) {
        p->overshoot_ns += placed - total;
        return 1;
    }
    return 0;
}

/* Takes what ended threads' samples stood for beyond their clocks
 * (settle_final()) off the pool of those that ended unsampled. Lock held. */
static void net_unarmed(snapprof_profiler_t *p)
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
static void deliver_unarmed(snapprof_profiler_t *p)
{
    /* An excess the pool cannot take comes off the threads' remainders
     * (deliver_remainder()), at the next flush or at the end. */
    net_unarmed(p);
    if (p->unarmed_ns == 0)
        return;
    snapprof_frame_t frame = {.kind = SNAPPROF_FRAME_MARKER, .name = "[kernel and unsampled]"};
    snapprof_sample_t s = {
        .frames = &frame,
        .frame_count = 1,
        .timestamp_ns = snapprof__mono_ns(),
        .cpu_ns = p->unarmed_ns,
        .tid = 0,
        .thread_name = "(threads that ended before their first sample)",
        .flags = SNAPPROF_SAMPLE_REMAINDER,
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

/* Wall mode, blocked threads: whether the copy's word at a is a plausible frame record: a saved
 * frame pointer that is 0 or points higher up the copy, then a return address in a loaded module's
 * code. */
static int frame_record_at(const snapprof_stack_copy_t *stack, uintptr_t a)
{
    if (a < stack->bottom || a + 16 > stack->top)
        return 0;
    uintptr_t saved, ra;
    memcpy(&saved, (const void *)a, sizeof saved);
    memcpy(&ra, (const void *)(a + 8), sizeof ra);
    if (saved != 0 && (saved <= a || saved + 16 > stack->top || saved % 8 != 0))
        return 0;
    const snapprof_module_t *m = snapprof__module_find_at(ra, 0);
    return m && m->kind == SNAPPROF_MODULE_NATIVE && m->is_loaded;
}

/* The address of the first frame record in the copy at or above from, or
 * above the word that holds return_address when that is not 0: the frame
 * pointer of the frame that return_address returns into, most likely. At
 * most max_scan bytes are searched (0: up to the top). */
static uintptr_t guess_fp(const snapprof_stack_copy_t *stack, uintptr_t from,
                          uintptr_t return_address, size_t max_scan)
{
    from = (from + 7) & ~(uintptr_t)7;
    uintptr_t end = stack->top - 16;
    if (max_scan && from + max_scan < end)
        end = from + max_scan;
    uintptr_t a = from;
    if (return_address != 0) {
        /* The frame whose caller is return_address starts just above the
         * word that holds it. */
        for (; a + 8 <= stack->top; a += 8) {
            uintptr_t w;
            memcpy(&w, (const void *)a, sizeof w);
            if (w == return_address)
                break;
        }
        if (a + 8 > stack->top)
            return 0;
        a += 8;
    }
    for (; a <= end; a += 8)
        if (frame_record_at(stack, a))
            return a;
    return 0;
}

/* Whether walk a (n_a frames) is better than walk b: it reached the
 * outermost frame and b did not, or it found more frames. */
static int walk_better(size_t n_a, const snapprof__unwind_outcome_t *a, size_t n_b,
                       const snapprof__unwind_outcome_t *b)
{
    if (a->completed != b->completed)
        return a->completed;
    return n_a > n_b;
}

/* A blocked thread's copy comes with pc and sp only: the kernel does not
 * say what rbp held, and code with frame records finds its CFA from rbp.
 * p->frames holds the walk made without it (count frames). Where a frame
 * record lies above the frame that walk stopped at, rbp most likely held
 * its address (the first frame record above a frame is its own, as
 * Breakpad's stack scan assumes): unwind again from there, trying up to
 * three such records, and keep the best walk. Returns its frame count.
 * A walk the CFI tables completed needed no rbp it did not find saved on
 * the stack: no guess can better it, and the second walk would cost as
 * much as the first. A walk another unwinder completed may have stopped
 * at the rbp of 0 the copy holds (the frame-pointer unwinder takes it for
 * the outermost frame), so it is tried again. */
static size_t unwind_guessing_fp(snapprof_profiler_t *p, snapprof_regs_t *regs,
                                 const snapprof_stack_copy_t *stack, size_t count,
                                 snapprof__unwind_outcome_t *outcome)
{
    if (outcome->completed && snapprof__unwinder_is_cfi_table(outcome->completed_by))
        return count;
    size_t last = count;
    if (last > 0 && p->frames[last - 1].kind == SNAPPROF_FRAME_MARKER)
        last--;
    if (last == 0)
        return count;
    if (!p->frames_alt && !(p->frames_alt = calloc(p->params.max_frames, sizeof *p->frames_alt)))
        return count;
    uintptr_t ra = last > 1 ? p->frames[last - 1].pc + 1 : 0;
    uintptr_t from = regs->r[SNAPPROF_REG_SP];
    for (int attempt = 0; attempt < 3; attempt++) {
        uintptr_t fp = guess_fp(stack, from, attempt == 0 ? ra : 0, 64u << 10);
        if (fp == 0)
            break;
        regs->r[SNAPPROF_REG_FP] = fp;
        snapprof__unwind_outcome_t o;
        size_t n = snapprof__unwind_chain(p->unwinders, p->unwinder_count, regs, stack,
                                          p->frames_alt, p->params.max_frames, &o);
        if (walk_better(n, &o, count, outcome)) {
            memcpy(p->frames, p->frames_alt, n * sizeof *p->frames);
            count = n;
            *outcome = o;
        }
        if (outcome->completed)
            break;
        from = fp + 16;
    }
    return count;
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
    deliver(p, t, p->kernel_frames, count + 1, flags | SNAPPROF_SAMPLE_KERNEL, timestamp, kernel_ns,
            labels);
}

/* Unwinds a stack copy that buffer holds (the target has resumed) and
 * delivers it with cpu_ns as its weight, and kernel_ns (when not 0) as a
 * second sample under a "[kernel]" leaf. Lock held. */
static void unwind_and_deliver(snapprof_profiler_t *p, snapprof__target_t *t,
                               const snapprof__copy_result_t *res, uint8_t *buffer,
                               snapprof__label_capture_t *labels, uint64_t cpu_ns, int without_fp,
                               uint64_t kernel_ns)
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
    uint64_t unwind_start = snapprof__mono_ns();
    snapprof__unwind_outcome_t outcome;
    size_t count = snapprof__unwind_chain(p->unwinders, p->unwinder_count, &regs, &stack, p->frames,
                                          p->params.max_frames, &outcome);
    if (without_fp)
        count = unwind_guessing_fp(p, &regs, &stack, count, &outcome);
    snapprof__hist_add(&p->unwind, snapprof__mono_ns() - unwind_start);
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
        fail(p, SNAPPROF_FAIL_NO_FRAMES);
    else
        deliver(p, t, p->frames, count, flags, res->timestamp_ns, cpu_ns, labels);
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

/* Gives every thread armed with a CPU-clock trigger the large buffers its
 * captures need (see snapprof__capture_target_provision). Lock held. */
static void provision_large(snapprof_profiler_t *p)
{
    atomic_store_explicit(&p->pool.large_asked, 0, memory_order_relaxed);
    int failed = 0;
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        if (t->arm && snapprof__capture_target_provision(&p->pool, &t->cap, large_budget(p)) < 0)
            failed = 1;
    }
    if (failed)
        p->stats.mmap_failed++; /* deep stacks stay truncated for now */
}

/* Unwinds and delivers the slots filled by now, oldest first, and adds the
 * large buffers deep stacks need. One pass: slots filled meanwhile wait for
 * the next call, so that a thread whose captures come faster than they
 * unwind cannot keep the lock from stop() and get_stats(). With give_way,
 * (the sampling thread's ticks) it also stops early, the newer slots left
 * for the next pass, when another thread waits for the lock. Returns 1 when
 * it stopped early. Lock held. */
static int drain_some(snapprof_profiler_t *p, int give_way)
{
    int stopped = 0;
    if (!p->pool_ready)
        return 0;
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
            p->last_drain = snapprof__mono_ns();
            return 0;
        }
        /* Modules may have come or gone since the captures were taken. */
        snapprof__module_cache_update();
        for (size_t i = 0; i < p->unwinder_count; i++)
            if (p->unwinders[i]->ops->xUpdateModules)
                p->unwinders[i]->ops->xUpdateModules(p->unwinders[i]->user_data);
        qsort(full, n, sizeof full[0], by_time);
        p->draining = 1;
        for (size_t i = 0; i < n; i++) {
            if (give_way && i > 0 && snapprof__sampler_api_waiting()) {
                stopped = 1;
                break;
            }
            snapprof__capture_slot_t *slot = full[i];
            snapprof__target_t *t = slot->target->owner;
            if (slot->fail < 0 && slot->res.truncated && slot->target->large_refused)
                p->stats.truncated_copy_budget++;
            if (slot->fail >= 0) {
                fail(p, (snapprof_fail_reason_t)slot->fail);
            } else {
                /* A thread armed as it started (arm_at_start()) has a
                 * short first period, drawn in (0, interval], whose sample
                 * weighs first_odds intervals: that is what keeps a short
                 * thread's expected weight its CPU time (why: draw_first()
                 * in trigger_perf_event.c). The difference is repaid from
                 * the thread's next samples, at most half of each, so that
                 * a thread that lives a few periods has samples that add
                 * up to no more than its clock. What a thread that ends
                 * first still owes goes to the pool (settle_final()). */
                uint64_t weight = slot->weight_ns;
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
                unwind_and_deliver(p, t, &slot->res, slot->buffer,
                                   (snapprof__label_capture_t *)slot->extra, weight, 0, kernel_ns);
            }
            snapprof__capture_slot_release(pool, slot);
        }
        p->draining = 0;
    }
    p->last_drain = snapprof__mono_ns();
    return stopped;
}

static void drain(snapprof_profiler_t *p)
{
    drain_some(p, 0);
}

void snapprof__profiler_drain(snapprof_profiler_t *p)
{
    drain(p);
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

/* ------------------------------------------------------------------------ */
/* One tick                                                                 */
/* ------------------------------------------------------------------------ */

/* Whether the kernel says tid is running or runnable ('R' in its stat
 * line); a thread we cannot ask counts as running. */
static int thread_running(pid_t tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 1;
    buf[n] = '\0';
    /* "tid (comm) S ...": comm may hold spaces and parentheses. */
    const char *paren = strrchr(buf, ')');
    return !paren || paren[1] != ' ' || paren[2] == 'R';
}

/* Wall mode: whether t, which is not blocked, spent the time since its
 * previous look mostly on a CPU (running) or mostly waiting for one
 * (runnable), as its schedstat says; running when that cannot be read. */
static int running_or_runnable(snapprof__target_t *t)
{
    uint64_t run, wait;
    if (snapprof__proc_schedstat_read(t->thread->tid, &run, &wait) != 0)
        return WALL_STATE_RUNNING;
    int waited = wait - t->sched_wait > run - t->sched_run;
    t->sched_run = run;
    t->sched_wait = wait;
    return waited ? WALL_STATE_RUNNABLE : WALL_STATE_RUNNING;
}

/* Wall mode: t's previous stack again, for a tick it spent where it was. */
static void deliver_previous(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now)
{
    if (t->prev_count == 0) {
        /* No stack yet (a trigger's first capture is still to come): the
         * tick's wall time goes with t's first sample. */
        t->wall_unplaced_ticks += 1 + p->wall_ticks_owed;
        return;
    }
    deliver(p, t, t->prev, t->prev_count, t->prev_flags | SNAPPROF_SAMPLE_REUSED, now, 0,
            t->prev_labels);
    p->stats.samples_reused++;
}

/* Wall mode: /proc could not say where t is (rc: the negative errno of the
 * read of its syscall file, not -ESRCH). Short of descriptors or memory
 * (the program's own files took them): this tick only, counted. Otherwise
 * (not mounted, or refused) for good: said once in the stats. Either way a
 * sleeping thread keeps its last stack rather than be woken by a signal.
 * Returns 1 when it sleeps (its last stack delivered again), 0 when it
 * runs (a running one is signalled or, armed, has its captures). Lock
 * held. */
static int proc_refused(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now, int rc)
{
    if (rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM)
        p->stats.wall_proc_transient++;
    else
        p->stats.wall_proc_errno = -rc;
    if (thread_running(t->thread->tid))
        return 0;
    deliver_previous(p, t, now);
    return 1;
}

/* Wall mode, SNAPPROF_WALL_BLOCKED_PROC: samples t without a signal if it
 * is blocked in a system call. cpu0 is its CPU clock, read just before;
 * seq0 its arm's schedule sequence, read before that (NULL when it has
 * none). With the perf trigger cpu0 may be NULL (not read: a system call,
 * 0.2-1.2 us on these VMs); then seq0 alone checks the copy, the sample
 * carries wall time only (the thread's CPU time is in its trigger's
 * samples) and the CPU clock fields stay as they are. Returns 1 when t is
 * dealt with (sampled, or a counted failure), 0 when it runs or ran while
 * its stack was read (the caller signals it or, armed, has its captures),
 * and -1, only without cpu0, when /proc says it is gone: the caller's
 * usual look (its clock first) ends it. Lock held. */
static int sample_blocked(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now,
                          const uint64_t *cpu0, const uint32_t *seq0)
{
    struct snapprof_thread *th = t->thread;
    uint64_t cpu1;
    snapprof__blocked_t b;
    int rc = p->stats.wall_proc_errno ? -p->stats.wall_proc_errno
                                      : snapprof__proc_blocked_read(th->tid, &b);
    if (rc == 0)
        return 0;
    if (rc == -ESRCH) {
        if (!cpu0)
            return -1;
        fail(p, SNAPPROF_FAIL_THREAD_EXITED);
        t->dead = 1;
        return 1;
    }
    if (rc < 0)
        return proc_refused(p, t, now, rc);
    /* cpu0, the caller's read of its CPU clock, came before the /proc read:
     * if the clock moved by the end of the copy, the thread ran somewhere
     * in between and its stack may have changed under the copy. If it did
     * not move, the thread never ran (its clock counts kernel time too), so
     * its system call, sp and pc are still the ones read: no second look. */
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason;
    int crc = snapprof__proc_copy_blocked(p->pid, th, &b, p->buffer, p->buffer_size, &res, &reason);
    if (crc > 0) {
        /* process_vm_readv refused (seccomp): /proc can say where threads
         * wait but not what their stacks hold, which is /proc refused for
         * good: sleepers keep their last stack. */
        return proc_refused(p, t, now, -crc);
    }
    if (crc != 0) {
        fail(p, reason);
        /* Without cpu0: a thread that exited ran to exit, so it was
         * scheduled in since seq0 was read, is looked at again next tick,
         * and is found gone then. */
        if (cpu0 && reason == SNAPPROF_FAIL_THREAD_EXITED &&
            snapprof__thread_cpu_ns(th->tid, &cpu1) != 0)
            t->dead = 1;
        return 1;
    }
    /* With its arm's schedule sequence, read before cpu0 (or the /proc
     * read): unchanged, the thread was not scheduled in since, so it did
     * not run during the copy (found blocked, it can run again only once
     * scheduled in). That saves reading the clock again. */
    uint32_t seq1;
    int moved = seq0 ? snapprof__trigger_sched_seq(t->arm, &seq1) != 0 || seq1 != *seq0
                     : snapprof__thread_cpu_ns(th->tid, &cpu1) != 0 || cpu1 != *cpu0;
    if (moved) {
        /* It ran while its stack was read: the copy may be torn. */
        p->stats.wall_copy_raced++;
        return 0;
    }
    t->wall_state = WALL_STATE_BLOCKED;
    t->wall_syscall = b.nr;
    /* Its labels: the process's (a thread's own labels live where only its
     * handler can read them safely). */
    snapprof__labels_capture(p->labels);
    /* An armed thread's CPU time is in its trigger's samples. */
    uint64_t cpu_ns = 0;
    if (cpu0) {
        uint64_t since = cpu_placed(t);
        res.cpu_ns = *cpu0;
        if (!t->arm && *cpu0 >= since)
            cpu_ns = *cpu0 - since;
    }
    unwind_and_deliver(p, t, &res, p->buffer, p->labels, cpu_ns, 1, 0);
    p->stats.samples_blocked++;
    if (cpu0) {
        t->cpu_at_sample = *cpu0;
        t->cpu_after = *cpu0;
        t->cpu_last = *cpu0;
        t->sampled = 1;
    }
    return 1;
}

/* Wall mode with a perf trigger: whether t, found blocked (and sampled) at
 * an earlier tick, which is what blocked_seq_valid says, has not been
 * scheduled in since (seq: its arm's schedule sequence now). Then it is
 * still in the same wait with the same stack, and neither its CPU clock
 * nor /proc need be read. It cannot have exited either: a thread runs to
 * exit. Lock held. */
static int still_blocked(const snapprof__target_t *t, uint32_t seq)
{
    return t->blocked_seq_valid && seq == t->blocked_seq;
}

/* Wall mode with a CPU-clock trigger (wall_by_triggers): t's trigger
 * captures it while it runs; each tick gives it one wall sample without a
 * signal: from /proc if it is blocked, else its latest capture's stack.
 * cpu_now is its CPU clock as check_armed() just read it (one read per
 * tick: on these machines a thread's clock is a 1.2 us system call, most
 * of what a reused sample costs). runs: /proc said just now that it runs.
 * Lock held. */
static void wall_tick_armed(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now,
                            uint64_t cpu_now, const uint32_t *seq, int runs)
{
    if (runs) { /* sample_blocked() just found it so */
        t->wall_state = running_or_runnable(t);
        deliver_previous(p, t, now);
        return;
    }
    if (t->wall_state == WALL_STATE_BLOCKED && t->sampled && cpu_now == t->cpu_after) {
        /* Its clock stood still since the copy: still in the same wait.
         * Any CPU time may have taken it to another one. */
        deliver_previous(p, t, now);
        return;
    }
    if (sample_blocked(p, t, now, &cpu_now, seq))
        return;
    t->wall_state = running_or_runnable(t);
    deliver_previous(p, t, now);
}

/* The handshake: signals t, waits for its copy, unwinds and delivers it.
 * Lock held. */
static void sample_target(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now)
{
    struct snapprof_thread *th = t->thread;
    uint64_t cpu_now;
    if (atomic_load(&th->exited) || snapprof__thread_cpu_ns(th->tid, &cpu_now) != 0) {
        fail(p, SNAPPROF_FAIL_THREAD_EXITED);
        t->dead = 1;
        return;
    }
    t->cpu_last = cpu_now;
    if (t->sampled && cpu_now < t->cpu_after) {
        /* A thread's CPU clock never runs backwards: another thread. */
        fail(p, SNAPPROF_FAIL_TID_RECYCLED);
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
            deliver_previous(p, t, now);
        }
        return;
    }
    if (proc_mode) {
        /* Blocked threads are copied without a signal (which would end
         * their wait early); only a running one is signalled. */
        if (sample_blocked(p, t, now, &cpu_now, NULL))
            return;
        if (!thread_running(th->tid)) { /* it went back to sleep meanwhile */
            deliver_previous(p, t, now);
            return;
        }
        t->wall_state = running_or_runnable(t);
    }
    if (t->backoff_left > 0) {
        t->backoff_left--;
        if (p->params.mode == SNAPPROF_MODE_WALL)
            deliver_previous(p, t, now); /* its wall time still passes */
        return;
    }
    if (p->params.mode == SNAPPROF_MODE_CPU && !thread_running(th->tid)) {
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
        fail(p, reason);
        if (reason == SNAPPROF_FAIL_THREAD_EXITED || reason == SNAPPROF_FAIL_TID_RECYCLED) {
            t->dead = 1;
        } else if (reason == SNAPPROF_FAIL_TIMEOUT || reason == SNAPPROF_FAIL_HANDLER_REPLACED) {
            /* Probably blocking the signal: try again less and less often
             * rather than spending a timeout on it every tick. */
            t->backoff = t->backoff ? (t->backoff < 64 ? t->backoff * 2 : 64) : 1;
            t->backoff_left = t->backoff;
        }
        if (p->params.mode == SNAPPROF_MODE_WALL && !t->dead)
            deliver_previous(p, t, now); /* its wall time still passes */
        return;
    }
    t->backoff = 0;
    snapprof__hist_add(&p->roundtrip, res.roundtrip_ns);
    uint64_t since = cpu_placed(t);
    uint64_t cpu_ns = res.cpu_ns >= since ? res.cpu_ns - since : 0;
    unwind_and_deliver(p, t, &res, p->buffer, p->labels, cpu_ns, 0, 0);
    t->cpu_at_sample = res.cpu_ns;
    t->sampled = 1;
    /* Read after the target resumed: our handler's own CPU time must not
     * make an idle thread look busy on the next tick. */
    snapprof__thread_cpu_ns(th->tid, &t->cpu_after);
}

/* Periods of CPU time with no capture after which an armed thread is
 * checked for blocking the signal. */
#define BLOCKED_PERIODS 50

/* A thread with a CPU-clock trigger needs no signal from us: only notice
 * when it has gone, and keep its CPU clock for the remainder. Returns 0
 * with the clock's reading in *cpu_now, or -1 when the thread is gone.
 * Lock held. */
static int check_armed(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t *cpu_now_out)
{
    uint64_t cpu_now;
    if (atomic_load(&t->thread->exited) || snapprof__thread_cpu_ns(t->thread->tid, &cpu_now) != 0) {
        drain(p);
        disarm(p, t);
        t->dead = 1;
        return -1;
    }
    *cpu_now_out = cpu_now;
    if (cpu_now > t->cpu_last)
        t->cpu_last = cpu_now;
    if (t->arm && atomic_load_explicit(&t->arm->first_stuck, memory_order_relaxed)) {
        /* Its perf event could not leave its short first period (the
         * program closed or replaced the fd before the first signal): a
         * new one, or the next trigger that works. */
        drain(p);
        disarm(p, t);
        arm_target(p, t);
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
            disarm(p, t);
            t->trigger = SNAPPROF_TRIGGER_HANDSHAKE;
            p->handshake_count++;
            p->stats.threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE]++;
            p->stats.trigger_blocked++;
        } else if (snapprof__trigger_fd_lost(t->arm)) {
            /* The program closed its perf event's fd, and no page kept
             * the event alive: armed anew (counted in fds_lost when the
             * old arm goes), the next trigger that works. */
            drain(p);
            disarm(p, t);
            arm_target(p, t);
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
 * a tick. Lock held. */
static void check_handler(snapprof_profiler_t *p)
{
    if (p->armed_count == 0 || snapprof__stack_copier_handler_ours(p->params.signal))
        return;
    drain(p);
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        if (t->dead || !t->arm)
            continue;
        disarm(p, t);
        t->trigger = SNAPPROF_TRIGGER_HANDSHAKE;
        p->handshake_count++;
        p->stats.threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE]++;
        p->stats.handler_replaced_disarmed++;
    }
}

/* How often the slots are drained when nothing fills them sooner, and the
 * least time between two drains when they fill faster. */
#define DRAIN_INTERVAL_NS 20000000u
#define DRAIN_GAP_NS 1000000u

uint64_t snapprof__profiler_due(const snapprof_profiler_t *p, uint64_t now)
{
    if (p->armed_count == 0)
        return p->next_tick;
    /* Filling up: drain now, but leave the lock free for a moment between
     * drains (see drain()). */
    if (atomic_load_explicit(&p->pool.full, memory_order_relaxed) >= p->pool.kick_at)
        return p->last_drain + DRAIN_GAP_NS > now ? p->last_drain + DRAIN_GAP_NS : now;
    /* A deep thread's capture holds one of its few large buffers until it
     * is drained, and one that found none wants more: as soon, so that
     * the thread's next captures find one free. */
    if (atomic_load_explicit(&p->pool.large_full, memory_order_relaxed) > 0 ||
        atomic_load_explicit(&p->pool.large_asked, memory_order_relaxed))
        return p->last_drain + DRAIN_GAP_NS > now ? p->last_drain + DRAIN_GAP_NS : now;
    uint64_t due = p->next_drain;
    if ((p->handshake_count > 0 || p->joined_since_tick || p->params.mode == SNAPPROF_MODE_WALL) &&
        p->next_tick < due)
        due = p->next_tick;
    if (p->deadline && p->deadline < due)
        due = p->deadline;
    return due;
}

int snapprof__profiler_tick(snapprof_profiler_t *p, uint64_t now)
{
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    /* Stopped early for a caller of the API: the rest right after it, not
     * a drain interval later (deep stacks hold large buffers until then). */
    int stopped = drain_some(p, 1);
    if (!stopped)
        retire_removed(p);
    if (p->armed_count > 0)
        p->next_drain = stopped ? now : now + DRAIN_INTERVAL_NS;
    if (now >= p->next_tick) {
        p->stats.ticks++;
        /* Cheap when nothing was loaded or unloaded (the loader's counters);
         * keeps lookups from answering with a module dlclose() just removed. */
        snapprof__module_cache_update();
        /* Once a tick, not once a target: each asks the loader whether objects
         * came or went, which is all they do when none did. */
        for (size_t i = 0; i < p->unwinder_count; i++)
            if (p->unwinders[i]->ops->xUpdateModules)
                p->unwinders[i]->ops->xUpdateModules(p->unwinders[i]->user_data);
        drain_app_frames(p);
        snapprof__event_reader_read(&p->events);
        check_handler(p);
        p->joined_since_tick = 0; /* every pending target is armed below */
        for (size_t i = 0; i < p->target_count; i++) {
            snapprof__target_t *t = p->targets[i];
            if (t->arm_pending) {
                if (t->dead || atomic_load(&t->thread->exited)) {
                    /* Gone before its tick, without leaving: its CPU time
                     * is what its clock said as it exited. */
                    clock_at_end(t, 0);
                    settle_pending(t);
                    t->dead = 1;
                    retire_unarmed(p, t);
                    continue;
                }
                t->arm_pending = 0;
                arm_target(p, t);
            }
            if (t->dead)
                continue;
            if (t->arm) {
                uint32_t seq = 0;
                int have_seq = p->params.mode == SNAPPROF_MODE_WALL &&
                               snapprof__trigger_sched_seq(t->arm, &seq) == 0;
                if (have_seq && still_blocked(t, seq)) {
                    deliver_previous(p, t, now);
                    continue;
                }
                /* Scheduled in since: /proc first, the CPU clock only
                 * when it does not show a thread blocked again. A tick
                 * that deals with it so skips check_armed(): its exit is
                 * noticed by /proc, and the check for a thread that
                 * blocks the trigger's signal waits for a tick that finds
                 * it running (a thread that runs much finds one soon). */
                int look = have_seq && !atomic_load(&t->thread->exited)
                               ? sample_blocked(p, t, now, NULL, &seq)
                               : -1;
                if (look == 1) {
                    /* As below: off its CPU after seq was read. */
                    t->blocked_seq = seq;
                    t->blocked_seq_valid = t->wall_state == WALL_STATE_BLOCKED;
                    continue;
                }
                uint64_t cpu_now;
                if (check_armed(p, t, &cpu_now) == 0 && t->arm &&
                    p->params.mode == SNAPPROF_MODE_WALL) {
                    wall_tick_armed(p, t, now, cpu_now, have_seq ? &seq : NULL, look == 0);
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
        uint64_t after = snapprof__mono_ns();
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
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    p->stats.sampler_cpu_ns +=
        (uint64_t)(c1.tv_sec - c0.tv_sec) * 1000000000u + (uint64_t)(c1.tv_nsec - c0.tv_nsec);
    if (p->params.max_samples && p->ticks_done >= p->params.max_samples)
        return 1;
    /* With CPU-clock triggers the profile lasts until the deadline itself;
     * the handshake's ends at its last tick before it. */
    if (p->deadline && p->next_tick > p->deadline && (p->armed_count == 0 || now >= p->deadline))
        return 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Flush and thread names                                                   */
/* ------------------------------------------------------------------------ */

int snapprof_profiler_flush(snapprof_profiler_t *p)
{
    if (!p)
        return -EINVAL;
    snapprof__sampler_lock();
    while (p->state == PROFILER_COMPLETING)
        snapprof__sampler_wait(p);
    if (p->state == PROFILER_CREATED) {
        snapprof__sampler_unlock();
        return SNAPPROF_ESTATE;
    }
    if (p->state == PROFILER_RUNNING) {
        /* The captures so far and the CPU time no sample placed so far. */
        drain(p);
        retire_removed(p);
        for (size_t i = 0; i < p->target_count; i++) {
            snapprof__target_t *t = p->targets[i];
            if (!t->dead)
                snapprof__thread_cpu_ns(t->thread->tid, &t->cpu_last);
            deliver_remainder(p, t, 0);
        }
        deliver_unarmed(p);
    }
    if (p->state == PROFILER_RUNNING) {
        drain_app_frames(p);
        snapprof__event_reader_read(&p->events);
    }
    snapprof_stats_t stats;
    snapshot_stats(p, &stats);
    snapprof_profile_info_t info = make_info(p, &stats);
    if (p->state == PROFILER_RUNNING)
        info.duration_ns = snapprof__mono_ns() - p->start_mono;
    /* The lock stays held while the builders write: the sampling thread
     * cannot deliver a sample meanwhile, nor another flush or stop complete
     * the same builders, since a builder's callbacks never run concurrently. */
    int result = complete_builders(p, &info);
    snapprof__sampler_unlock();
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
    return 0;
}
