/* snapprof unwinder interface: turns a stack copy into frames.
 *
 * Unwinders are chained. The profiler starts every sample with one frame
 * (the interrupted pc), then repeatedly asks the first unwinder, in the
 * order they were added, whose xCanUnwindFrom() claims the last frame to
 * continue with xTryUnwind(). An unwinder appends caller frames until it
 * reaches the end of the stack (COMPLETED), a frame it does not handle
 * (it appends that frame, leaves ctx->regs describing it, and returns
 * UNRECOGNIZED_FRAME so that another unwinder can take over), or something
 * it cannot trust (ABORTED, with a snapprof_unwind_error_t code in
 * ctx->abort_error and optionally a text in ctx->abort_reason). The loop
 * also ends when a step adds no frame or the depth cap is reached.
 * Modelled on Chromium's base/profiler Unwinder.
 *
 * Threads. Unwinding happens after the target has resumed, under the
 * profiler's lock, so the callbacks of one unwinder (xOnStackCapture apart)
 * never run concurrently; but not always on the sampling thread. It
 * unwinds at its ticks, and the captures still waiting when a profile is
 * stopped or flushed are unwound on the thread that calls
 * snapprof_profiler_stop() (or _destroy()) or snapprof_profiler_flush(); a
 * thread that calls snapprof_thread_update_name() hands its captures to
 * the sampling thread and unwinds them itself only when that thread has
 * not taken them within 100 ms (a stalled host, a builder writing a file).
 * The callbacks must not call into the profiler that drives them.
 *
 * The ops struct is versioned like SQLite's sqlite3_io_methods: version
 * first, members grouped by the version that added them, append-only.
 */
#ifndef SNAPPROF_UNWINDER_H
#define SNAPPROF_UNWINDER_H

#include <snapprof/snapprof.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Registers in DWARF numbering, so they can be handed to libunwind as they
 * are. Only the architecture's registers are defined. */
#if defined(__x86_64__)
#define SNAPPROF_REG_COUNT 17
#define SNAPPROF_REG_FP 6  /* rbp */
#define SNAPPROF_REG_SP 7  /* rsp */
#define SNAPPROF_REG_PC 16 /* rip */
#else
#error "snapprof supports x86-64 Linux only for now"
#endif

typedef struct snapprof_regs {
    uintptr_t r[SNAPPROF_REG_COUNT];
} snapprof_regs_t;

/* The copy of a target's stack, made while it was stopped. Addresses in the
 * copy are rebased: every register and stack word that pointed into the
 * live stack [orig_bottom, orig_bottom + (top - bottom)) points at the same
 * byte of the copy [bottom, top). An unwinder reads the stack by
 * dereferencing addresses in [bottom, top) directly, after checking them. */
typedef struct snapprof_stack_copy {
    uintptr_t bottom;      /* lowest address of the copy (16-byte aligned) */
    uintptr_t top;         /* one past the highest byte */
    uintptr_t orig_bottom; /* address in the target that bottom stands for */
    int truncated;         /* 1 when the copy stops short of the stack base */
    /* CLOCK_MONOTONIC when the copy was made, 0 if unknown. Frames are
     * looked up as of this time, so JIT code replaced while the copy waited
     * to be unwound keeps its name. */
    uint64_t timestamp_ns;
} snapprof_stack_copy_t;

typedef enum {
    SNAPPROF_UNWIND_COMPLETED = 0,          /* reached the outermost frame */
    SNAPPROF_UNWIND_UNRECOGNIZED_FRAME = 1, /* the last frame is another unwinder's */
    SNAPPROF_UNWIND_ABORTED = 2             /* cannot go on: bad data */
} snapprof_unwind_result_t;

/* Why an unwinder aborted, in the manner of libunwind's UNW_E* codes. The
 * profiler counts every aborted sample under the code its unwinder left in
 * ctx->abort_error (snapprof_stats_t's unwind_aborted_* counters; a walk
 * over a truncated copy counts as unwind_aborted_truncated_copy whatever
 * the code). Added in 0.3.0. */
typedef enum {
    SNAPPROF_UNWIND_EUNSPEC = 0,   /* none given: counted as unwind_aborted_other */
    SNAPPROF_UNWIND_EBADFRAME = 1, /* a frame failed the unwinder's checks */
    SNAPPROF_UNWIND_ENOINFO = 2,   /* no unwind information for a pc */
    SNAPPROF_UNWIND_EMEMORY = 3    /* it needed memory outside the copy and the modules */
} snapprof_unwind_error_t;

typedef struct snapprof_unwind_ctx {
    /* Registers of the last frame in frames[] (rebased into the copy).
     * Unwinders keep them current as they append frames; only the
     * callee-saved registers, sp and pc are meaningful for caller frames. */
    snapprof_regs_t regs;
    const snapprof_stack_copy_t *stack;
    snapprof_frame_t *frames; /* innermost first; never empty on entry */
    size_t frame_count;
    size_t max_frames;        /* capacity of frames */
    const char *abort_reason; /* an unwinder that aborts may say why, in free text */
    /* -- added in 0.3.0 (the library allocates the ctx; an unwinder built
     * against 0.2 leaves it EUNSPEC) -- */
    snapprof_unwind_error_t abort_error; /* an unwinder that aborts says why, as a code */
} snapprof_unwind_ctx_t;

/* Appends a frame for pc (already adjusted: return address - 1 for callers)
 * and looks up its module as of ctx->stack->timestamp_ns. A frame in JIT
 * code becomes a SNAPPROF_FRAME_JIT frame named after its region (unless a
 * name is given), whichever unwinder pushes it. Returns 0, or -ENOSPC at the
 * depth cap. */
SNAPPROF_API int snapprof_unwind_push_frame(snapprof_unwind_ctx_t *ctx, uintptr_t pc,
                                            snapprof_frame_kind_t kind, const char *name);

#define SNAPPROF_UNWINDER_OPS_VERSION 1

typedef struct snapprof_unwinder_ops {
    int version;      /* SNAPPROF_UNWINDER_OPS_VERSION the implementation was built for */
    const char *name; /* for statistics and debugging */
    /* -- version 1 -- */
    /* Whether this unwinder handles frame (the last one found). On the
     * unwinding thread (see "Threads" above). Required. */
    int (*xCanUnwindFrom)(void *user_data, const snapprof_frame_t *frame);
    /* Appends caller frames to ctx. On the unwinding thread, after the
     * target has resumed. Required. */
    snapprof_unwind_result_t (*xTryUnwind)(void *user_data, snapprof_unwind_ctx_t *ctx);
    /* RUNS IN THE SIGNAL HANDLER WHILE THE TARGET IS STOPPED: no allocation,
     * no locks, no logging; async-signal-safe calls only. May be NULL. */
    void (*xOnStackCapture)(void *user_data);
    /* Modules may have been loaded or unloaded: called once per tick
     * (before that tick's samples) and once before each batch of captured
     * stacks is unwound, not once per sample, on the unwinding thread; e.g.
     * to refresh code ranges. Cheap when nothing changed, please. May be
     * NULL. */
    void (*xUpdateModules)(void *user_data);
    /* Frees user_data. May be NULL. */
    void (*xDestroy)(void *user_data);
} snapprof_unwinder_ops_t;

/* Wraps ops and user_data into an unwinder. ops must outlive it (a static
 * struct is usual). Returns 0; -EINVAL when ops or out is NULL or
 * xCanUnwindFrom or xTryUnwind is NULL; SNAPPROF_EVERSION when
 * ops->version is below 1 (not an ops struct this library can read; a
 * newer version is accepted and only the members this library knows are
 * used); -ENOMEM. On failure xDestroy is not called. */
SNAPPROF_API int snapprof_unwinder_create(const snapprof_unwinder_ops_t *ops, void *user_data,
                                          snapprof_unwinder_t **out);

#ifdef __cplusplus
}
#endif

#endif /* SNAPPROF_UNWINDER_H */
