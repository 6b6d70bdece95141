/* snapprof: an in-process sampling CPU profiler for Linux.
 *
 * This is the main public header: everything a program needs to profile
 * itself. Four more public headers build on it (each includes this one):
 *   <snapprof/jit.h>              JIT code regions and perf maps, so that
 *                                 frames in generated code get names;
 *   <snapprof/unwinder.h>         the ops struct for writing an unwinder;
 *   <snapprof/profile_builder.h>  the ops struct for writing a builder;
 *   <snapprof/heap_profile.h>     the heap and peak heap profile builders.
 * (The preload library's gperftools-compatible <gperftools/profiler.h>,
 * installed under snapprof/compat/, is for programs written against
 * gperftools, not part of this API.)
 *
 * It reads top to bottom: version and errors, forward typedefs, the shared
 * value types (modules, frames, symbols; samples and statistics), then one
 * section per object: threads, unwinders, builders; then labels, app
 * frames, zones, counters and instants; seccomp filters the program
 * installs; and profilers last.
 *
 * Conventions (as in libuv):
 *   - Functions return int: 0 (or a non-negative count) on success, a
 *     negative errno value (-EINVAL, -ENOMEM, -ESRCH, ...) or one of the
 *     SNAPPROF_E* codes below on failure. snapprof_strerror() describes
 *     them, snapprof_err_name() names them.
 *   - A call that fails leaves nothing half-built and changes no state,
 *     with the exceptions its comment names: snapprof_profiler_add_builder()
 *     and _add_unwinder() own (and so destroy) their object even when they
 *     fail; snapprof_profiler_start() installs the signal handler for good;
 *     snapprof_zone_begin() past SNAPPROF_ZONE_DEPTH_MAX counts the zone
 *     open. Each function's comment says which argument each -EINVAL
 *     means.
 *   - Objects made by _create() are released by the matching _destroy();
 *     _destroy(NULL) is a no-op.
 *   - The library never aborts and never prints, with one exception in
 *     test builds only (CMake option SNAPPROF_TEST_SEAMS, off by default;
 *     tests/README.md): the fault-injection seam its own tests use
 *     (common/fault.h) reads SNAPPROF_TEST_FAULTS once, when the library
 *     is loaded, and a malformed value costs one line on stderr. A build
 *     without the option never reads that variable.
 *
 * Threads: unless a function says otherwise, it may be called from any
 * thread, but not from a signal handler and not from inside a builder or
 * unwinder callback. snapprof_symbolize(), snapprof_module_find() and the
 * name functions (snapprof_strerror(), snapprof_err_name(),
 * snapprof_trigger_name(), snapprof_fail_reason_name()) say otherwise:
 * builder callbacks may call them.
 */
#ifndef SNAPPROF_SNAPPROF_H
#define SNAPPROF_SNAPPROF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SNAPPROF_BUILDING) && defined(__GNUC__)
#define SNAPPROF_API __attribute__((visibility("default")))
#else
#define SNAPPROF_API
#endif

/* ------------------------------------------------------------------------ */
/* Version and errors                                                       */
/* ------------------------------------------------------------------------ */

/* The version of this header, the project's (CMake checks that they
 * agree). The library file is libsnapprof.so.MAJOR.MINOR.PATCH of this
 * version; its soname, libsnapprof.so.1, is not this version but the ABI's:
 * it changed once, in 0.4.0, when snapprof_params_t and snapprof_stats_t
 * got their size member, and stays until the ABI breaks again (everything
 * since was added compatibly; see "Added in" below and the README). */
#define SNAPPROF_VERSION_MAJOR 0
#define SNAPPROF_VERSION_MINOR 7
#define SNAPPROF_VERSION_PATCH 0

/* Library-specific error codes, one table: XX(name, value, description).
 * SNAPPROF_ERRNO_MAP(XX) expands XX once per code, in the libuv style, so
 * code that needs every code (the enum below, snapprof_strerror(),
 * snapprof_err_name(), a test) derives it from this list. The codes lie
 * below -10000 so they never collide with a negated errno value. -10005 is
 * retired and not to be reused: it was SNAPPROF_ENOTHREAD, which no call
 * returned (a tid that names no thread is -ESRCH; a profiled thread that
 * exits is a counted SNAPPROF_FAIL_THREAD_EXITED). The enum below defines
 * SNAPPROF_ESTATE, SNAPPROF_ESIGNAL, SNAPPROF_EENCODE and SNAPPROF_EVERSION;
 * each description is what snapprof_strerror() returns for its code. */
#define SNAPPROF_ERRNO_MAP(XX)                                                                     \
    XX(ESTATE, -10001, "not valid in the current state")                                           \
    XX(ESIGNAL, -10002, "the sampling signal cannot be used")                                      \
    XX(EENCODE, -10003, "the profile could not be encoded")                                        \
    XX(EVERSION, -10004, "unsupported ops struct version")

enum {
#define SNAPPROF_ERRNO_ENUM_(name, value, description) SNAPPROF_##name = (value),
    SNAPPROF_ERRNO_MAP(SNAPPROF_ERRNO_ENUM_)
#undef SNAPPROF_ERRNO_ENUM_
};

/* Returns a static, human-readable description of an error code: 0 is
 * "success", a SNAPPROF_E* code its description in the table above, a
 * negated errno value the C library's description (as strerror()), any
 * other value "unknown error". Thread-safe; builder callbacks may call it.
 * Never returns NULL. */
SNAPPROF_API const char *snapprof_strerror(int err);

/* Returns the static name of an error code, for logs and tests that want
 * a stable token rather than prose: "SNAPPROF_ESTATE" and so on for the
 * codes in the table above, the errno name for a negated errno value
 * ("ENOENT" for -ENOENT), "OK" for 0, and "UNKNOWN" for any other value
 * (a retired code such as -10005 included). Thread-safe; builder callbacks
 * may call it. Never returns NULL. Added in 0.2.0. */
SNAPPROF_API const char *snapprof_err_name(int err);

/* ------------------------------------------------------------------------ */
/* Forward typedefs                                                         */
/* ------------------------------------------------------------------------ */

typedef struct snapprof_thread snapprof_thread_t;
typedef struct snapprof_profiler snapprof_profiler_t;
typedef struct snapprof_unwinder snapprof_unwinder_t;
typedef struct snapprof_builder snapprof_builder_t;

/* ------------------------------------------------------------------------ */
/* Modules, frames, symbols                                                 */
/* ------------------------------------------------------------------------ */

typedef enum {
    SNAPPROF_MODULE_NATIVE = 0, /* an ELF object mapped from a file (or vdso) */
    SNAPPROF_MODULE_JIT = 1,    /* code generated at run time */
    SNAPPROF_MODULE_ANON = 2    /* executable memory nobody described */
} snapprof_module_kind_t;

/* One executable range of a loaded module. Entries live in the process-wide
 * module cache and stay valid (read-only) for the life of the process, even
 * after the module is unloaded, so frames that point at them stay sound. */
typedef struct snapprof_module {
    uintptr_t start;      /* first address of the executable range */
    uintptr_t limit;      /* one past the last address */
    uint64_t file_offset; /* file offset that maps to start */
    uintptr_t load_bias;  /* runtime address - ELF virtual address */
    const char *path;     /* file path, or "[vdso]", "[jit]", ... */
    const char *build_id; /* GNU build-id as lower-case hex, "" if none */
    snapprof_module_kind_t kind;
    int is_main_executable; /* 1 for the program's own binary */
    int is_loaded;          /* 0 once the module has been unloaded */
} snapprof_module_t;

typedef enum {
    SNAPPROF_FRAME_NATIVE = 0, /* symbolized through the module cache */
    SNAPPROF_FRAME_JIT = 1,    /* name given by the JIT unwinder */
    SNAPPROF_FRAME_MARKER = 2  /* not code: "[truncated]", "[unknown]", ... */
} snapprof_frame_kind_t;

/* One stack frame. For the innermost frame pc is the interrupted
 * instruction; for every caller it is the return address minus one, so it
 * falls inside the call instruction. */
typedef struct snapprof_frame {
    uintptr_t pc;
    const snapprof_module_t *module; /* NULL when no known module holds pc */
    snapprof_frame_kind_t kind;
    const char *name; /* JIT and marker frames: the name; else NULL */
} snapprof_frame_t;

/* One source-level function at an address. For inlined code several
 * symbols describe one address: the innermost first, the outermost last. */
typedef struct snapprof_symbol {
    const char *name;        /* display name (demangled), never NULL */
    const char *system_name; /* linkage name as in the ELF file */
    const char *file;        /* source file, NULL when unknown */
    int line;                /* 1-based line, 0 when unknown */
    uintptr_t start;         /* runtime address of the function, 0 if unknown */
} snapprof_symbol_t;

/* Returns the module holding addr, refreshing the module cache once if it
 * is not known, or NULL. The result stays valid for the life of the process.
 * Not async-signal-safe (it may read /proc and take the loader lock). Any
 * thread, builder callbacks included: it takes only the module cache's own
 * locks, never one a profiler holds while it calls its builders. */
SNAPPROF_API const snapprof_module_t *snapprof_module_find(uintptr_t addr);

/* Symbolizes one frame into out[0..max). Returns the number of symbols
 * written (0 when the address has no known function, or max is 0);
 * -EINVAL (frame NULL, out NULL with max above 0, or frame->kind not a
 * snapprof_frame_kind_t); -ENOMEM (the module's symbols could not be
 * loaded for want of memory).
 * Strings belong to the module cache and live as long as the process.
 * Results are cached per module. Not async-signal-safe. Any thread, builder
 * callbacks included, as for snapprof_module_find(); the first lookup in a
 * module loads its symbols and DWARF (up to about a second), so a builder
 * does it when the profile completes rather than in xOnSample. */
SNAPPROF_API int snapprof_symbolize(const snapprof_frame_t *frame, snapprof_symbol_t *out,
                                    size_t max);

/* Where source lines and inlined frames come from (snapprof_symbols_set_lines()).
 * Added in 0.7.0. */
typedef enum {
    /* DWARF in the object's own file or in its separate debug file
     * (/usr/lib/debug, by build-id or .gnu_debuglink): the default. */
    SNAPPROF_LINES_ALL = 0,
    /* DWARF in the object's own file only. A separate debug file still
     * names the functions its object's symbol table lacks, but its lines
     * and inlined frames are not read: libc6-dbg's libc costs 60-70 ms of
     * CPU to open (its compressed sections are inflated whole), most of
     * what writing a small program's profile costs. */
    SNAPPROF_LINES_OWN = 1,
    /* As SNAPPROF_LINES_ALL for programs and for libraries outside the
     * system's library directories (/lib..., /usr/lib...: libc, libstdc++,
     * the distribution's other libraries), as SNAPPROF_LINES_OWN for
     * those: the code a user builds keeps its lines and inlined frames,
     * also from its separate debug file, and the system libraries' debug
     * files name functions without costing their DWARF. The preload's
     * default (SNAPPROF_LINES, `snapprof record --lines`). Added in 0.7.0. */
    SNAPPROF_LINES_PROGRAM = 2
} snapprof_lines_t;

/* Sets where snapprof_symbolize(), and the builders through it, read
 * source lines (SNAPPROF_LINES environment variable of the preload, `snapprof
 * record --lines`). Process-wide; applies to modules symbolized for the
 * first time after the call (a module's symbols are loaded once). Returns
 * 0, or -EINVAL when lines is not a snapprof_lines_t. Any thread. Added in
 * 0.7.0. */
SNAPPROF_API int snapprof_symbols_set_lines(snapprof_lines_t lines);

/* ------------------------------------------------------------------------ */
/* Samples and statistics                                                   */
/* ------------------------------------------------------------------------ */

typedef enum {
    SNAPPROF_MODE_CPU = 0, /* sample threads that ran; weight by CPU time */
    SNAPPROF_MODE_WALL = 1 /* sample every thread every tick, idle ones too */
} snapprof_mode_t;

/* Wall mode: how the stack of a thread blocked in a system call is taken.
 * A signal ends nanosleep, poll, epoll_wait and many other waits early
 * (EINTR), even under SA_RESTART; /proc/self/task/TID/syscall tells where
 * a blocked thread waits without disturbing it. */
typedef enum {
    SNAPPROF_WALL_BLOCKED_SIGNAL = 0, /* the handshake signals it */
    SNAPPROF_WALL_BLOCKED_PROC = 1    /* no signal: /proc and process_vm_readv */
} snapprof_wall_blocked_t;

/* A key/value attached to a sample: a string or a number, never both. */
typedef struct snapprof_label {
    const char *key;
    const char *str;      /* NULL for a numeric label */
    int64_t num;          /* used when str is NULL */
    const char *num_unit; /* optional unit of num, e.g. "bytes"; may be NULL */
} snapprof_label_t;

/* Flags of a sample. */
#define SNAPPROF_SAMPLE_REUSED 0x1u          /* idle thread: its previous stack again */
#define SNAPPROF_SAMPLE_TRUNCATED_COPY 0x2u  /* the stack did not fit the buffer */
#define SNAPPROF_SAMPLE_TRUNCATED_DEPTH 0x4u /* the frame cap was reached */
#define SNAPPROF_SAMPLE_UNWIND_ABORTED 0x8u  /* an unwinder gave up mid-stack */
/* Not a stack: a thread's CPU time that no CPU-clock sample placed (kernel
 * time, missed or dropped captures), one "[kernel and unsampled]" frame. */
#define SNAPPROF_SAMPLE_REMAINDER 0x10u
/* The kernel time a thread spent since its previous sample, measured
 * (snapprof_params_t.kernel_share), on this sample's stack under a
 * "[kernel]" leaf. Not counted as a sample in the statistics. */
#define SNAPPROF_SAMPLE_KERNEL 0x20u

/* What a sample counts (snapprof_sample_t.kind, added in 0.7.0). One
 * table: XX(name, value, text), as SNAPPROF_FAIL_MAP. */
#define SNAPPROF_SAMPLE_KIND_MAP(XX)                                                               \
    /* CPU or wall time, weighed by cpu_ns and wall_ns (every sample before 0.7.0) */              \
    XX(TIME, 0, "time")                                                                            \
    /* one sampled allocation of `bytes` bytes, taken at this stack */                             \
    XX(HEAP_ALLOC, 1, "heap_alloc")                                                                \
    /* the free of a sampled allocation: frames and bytes are the allocation's */                  \
    XX(HEAP_FREE, 2, "heap_free")

typedef enum {
#define SNAPPROF_SAMPLE_KIND_ENUM_(name, value, text) SNAPPROF_SAMPLE_KIND_##name = (value),
    SNAPPROF_SAMPLE_KIND_MAP(SNAPPROF_SAMPLE_KIND_ENUM_)
#undef SNAPPROF_SAMPLE_KIND_ENUM_
        SNAPPROF_SAMPLE_KIND_COUNT
} snapprof_sample_kind_t;

/* One sample as builders receive it. Everything it points to is valid only
 * during the builder's xOnSample call.
 *
 * Versions. The record grows only at its end, each step in a group marked
 * with the version that added it, and `size` (added in 0.7.0) says how
 * much of it the sender filled: read a later member only when
 * SNAPPROF_SAMPLE_HAS(sample, member). A record made before 0.7.0 (or by a
 * caller that left size 0) is a SNAPPROF_SAMPLE_KIND_TIME sample. A
 * builder whose ops version is 1 receives only time samples, so builders
 * written before heap samples existed never weigh an allocation as CPU
 * time (see <snapprof/profile_builder.h>). */
typedef struct snapprof_sample {
    const snapprof_frame_t *frames; /* innermost first */
    size_t frame_count;
    uint64_t timestamp_ns; /* CLOCK_MONOTONIC when the stack was taken */
    /* The sample's weight (see "Weights" in <snapprof/profile_builder.h>):
     * the thread CPU time it stands for (a CPU-clock trigger's period, which
     * varies; a handshake's CPU time since the previous sample; a
     * remainder's unplaced CPU time), and the wall time it stands for (the
     * interval, in wall mode the ticks since the thread's previous sample;
     * 0 for a remainder and a wall-mode capture of CPU time). */
    uint64_t cpu_ns;
    uint64_t wall_ns;
    pid_t tid;               /* the sampled thread */
    const char *thread_name; /* its name (see snapprof_thread_update_name()), never NULL */
    /* The labels in force on the thread when its stack was taken (see
     * "Labels"), and frame=N during an app frame. A wall-mode sample that
     * repeats an idle thread's previous stack (SNAPPROF_SAMPLE_REUSED)
     * repeats that sample's labels too: the thread was not signalled, so
     * nothing newer was read. */
    const snapprof_label_t *labels;
    size_t label_count;
    unsigned flags; /* SNAPPROF_SAMPLE_* */
    /* -- added in 0.7.0 -- */
    size_t size;                 /* sizeof(snapprof_sample_t) as the sender filled it */
    snapprof_sample_kind_t kind; /* what the sample counts */
    uint64_t bytes;              /* SNAPPROF_SAMPLE_KIND_HEAP_*: the size asked for; else 0 */
} snapprof_sample_t;

/* Nonzero when the record `s` points to has `member` (see "Versions"). */
#define SNAPPROF_SAMPLE_HAS(s, member)                                                             \
    ((s)->size >= offsetof(snapprof_sample_t, member) + sizeof((s)->member))
/* The sample's kind, SNAPPROF_SAMPLE_KIND_TIME for a record without one. */
#define SNAPPROF_SAMPLE_KIND(s)                                                                    \
    (SNAPPROF_SAMPLE_HAS(s, kind) ? (s)->kind : SNAPPROF_SAMPLE_KIND_TIME)

/* "time", "heap_alloc", "heap_free"; "unknown" for another value. */
SNAPPROF_API const char *snapprof_sample_kind_name(snapprof_sample_kind_t kind);

/* Why a sample could not be taken, one table: XX(name, value, text).
 * SNAPPROF_FAIL_MAP(XX) expands XX once per reason, as SNAPPROF_ERRNO_MAP
 * does for errors: the enum below (SNAPPROF_FAIL_<name>),
 * snapprof_fail_reason_name() (text) and the stats' keys come from it. */
#define SNAPPROF_FAIL_MAP(XX)                                                                      \
    /* the thread is gone (ESRCH, its CPU clock gone) */                                           \
    XX(THREAD_EXITED, 0, "thread_exited")                                                          \
    /* the tid now belongs to another thread */                                                    \
    XX(TID_RECYCLED, 1, "tid_recycled")                                                            \
    /* the handler did not run in time (signal blocked?) */                                        \
    XX(TIMEOUT, 2, "timeout")                                                                      \
    /* sp outside the thread's stack (sigaltstack, fiber) */                                       \
    XX(SP_OUT_OF_RANGE, 3, "sp_out_of_range")                                                      \
    /* sending the signal failed otherwise */                                                      \
    XX(SEND, 4, "send")                                                                            \
    /* someone replaced our signal handler */                                                      \
    XX(HANDLER_REPLACED, 5, "handler_replaced")                                                    \
    /* nothing could be unwound, not even the pc */                                                \
    XX(NO_FRAMES, 6, "no_frames")                                                                  \
    /* a builder's xOnSample returned an error */                                                  \
    XX(BUILDER, 7, "builder")

typedef enum {
#define SNAPPROF_FAIL_ENUM_(name, value, text) SNAPPROF_FAIL_##name = (value),
    SNAPPROF_FAIL_MAP(SNAPPROF_FAIL_ENUM_)
#undef SNAPPROF_FAIL_ENUM_
        SNAPPROF_FAIL_COUNT
} snapprof_fail_reason_t;

/* What decides when a thread's stack is taken. The perf event and the CPU
 * timer are timed by the thread's own CPU clock, so a sample lands where
 * the thread spent its CPU even when it waits for a core; the handshake is
 * timed by the sampling thread and lands where the thread is next
 * scheduled. One table: XX(name, value, text), as SNAPPROF_FAIL_MAP; text
 * is what snapprof_trigger_name() returns and what SNAPPROF_TRIGGER and
 * --trigger take. */
#define SNAPPROF_TRIGGER_MAP(XX)                                                                   \
    /* the best one that works, per thread */                                                      \
    XX(AUTO, 0, "auto")                                                                            \
    /* a per-thread perf CPU-clock event */                                                        \
    XX(PERF_EVENT, 1, "perf")                                                                      \
    /* a per-thread POSIX CPU-time timer */                                                        \
    XX(CPU_TIMER, 2, "timer")                                                                      \
    /* the sampling thread signals and waits */                                                    \
    XX(HANDSHAKE, 3, "handshake")

typedef enum {
#define SNAPPROF_TRIGGER_ENUM_(name, value, text) SNAPPROF_TRIGGER_##name = (value),
    SNAPPROF_TRIGGER_MAP(SNAPPROF_TRIGGER_ENUM_)
#undef SNAPPROF_TRIGGER_ENUM_
        SNAPPROF_TRIGGER_COUNT
} snapprof_trigger_t;

/* Returns "auto", "perf", "timer" or "handshake" ("unknown" otherwise).
 * Any thread; builder callbacks may call it. */
SNAPPROF_API const char *snapprof_trigger_name(snapprof_trigger_t trigger);

/* Returns a short name such as "timeout" for a failure reason. Any thread;
 * builder callbacks may call it. */
SNAPPROF_API const char *snapprof_fail_reason_name(snapprof_fail_reason_t reason);

/* The counters of a profiler. The struct grows: new counters are only ever
 * appended, and size (the first member) says how many bytes of it hold
 * counters, as sqlite3_vfs.szOsFile and Win32's cbSize do. Stats the
 * library makes (snapprof_profiler_get_stats(), the builders' info.stats)
 * carry the size of the struct the library was built with, so a builder
 * built against a newer header reads a counter only when it lies within
 * the first stats->size bytes. Added in 0.4.0. */
typedef struct snapprof_stats {
    size_t size;                          /* bytes of this struct that hold counters; see above */
    uint64_t ticks;                       /* sampling intervals that fired */
    uint64_t ticks_missed;                /* intervals skipped because the sampler was late */
    uint64_t samples;                     /* samples delivered, remainders not counted */
    uint64_t samples_signalled;           /* of those, stacks copied through the signal */
    uint64_t samples_reused;              /* of those, idle threads' previous stacks (wall mode) */
    uint64_t samples_skipped_idle;        /* idle threads left alone in CPU mode */
    uint64_t failed[SNAPPROF_FAIL_COUNT]; /* failures by reason */
    uint64_t failed_total;
    uint64_t truncated_copy;  /* stack larger than the buffer */
    uint64_t truncated_depth; /* unwinding hit max_frames */
    uint64_t unwind_aborted;  /* an unwinder aborted, for any cause (below) */
    uint64_t unwind_complete; /* unwinders reported a complete stack */
    uint64_t copy_bytes_total;
    uint64_t copy_bytes_max;
    /* Time the target spent in our signal handler (it was not running its
     * own code): percentiles over all signalled samples, in ns. */
    uint64_t pause_p50_ns, pause_p99_ns, pause_max_ns;
    /* Sampler side: from sending the request (rt_tgsigqueueinfo) to the
     * handshake done, or for a wall-mode copy through /proc the copy, in ns. */
    uint64_t roundtrip_p50_ns, roundtrip_p99_ns;
    /* Sampler side: unwinding one sample, in ns. */
    uint64_t unwind_p50_ns, unwind_p99_ns;
    /* CPU time the sampling thread spent on this profiler, in ns. */
    uint64_t sampler_cpu_ns;
    /* Unwinding in detail (added with the libunwind unwinder). Every
     * signalled sample counts in exactly one of unwind_complete,
     * truncated_depth, unwind_aborted and unwind_unknown; each aborted one
     * in exactly one unwind_aborted_* counter. */
    uint64_t unwind_unknown;                /* stopped at a frame no unwinder claims */
    uint64_t unwind_aborted_bad_frame;      /* a frame failed the unwinder's checks */
    uint64_t unwind_aborted_no_info;        /* no unwind info (CFI) for a pc */
    uint64_t unwind_aborted_memory;         /* needed memory outside copy and modules */
    uint64_t unwind_aborted_truncated_copy; /* ran past the end of a truncated copy */
    uint64_t unwind_aborted_other;          /* any other reason */
    uint64_t unwind_frames_total;           /* frames found, markers excluded */
    uint64_t unwind_frames_max;             /* the deepest stack, in frames */
    uint64_t unwind_max_ns;                 /* the slowest unwind */
    /* Process labels left out of a sample because other threads kept
     * rewriting them while the handler read them. */
    uint64_t labels_skipped;
    /* App frames that ended but were not seen (more than 1024 ended
     * between two ticks): their samples get no hitch verdict. */
    uint64_t app_frames_lost;
    /* Triggers (added with the CPU-clock triggers). threads_by_trigger
     * counts the threads armed with each trigger (index AUTO is unused);
     * when a thread got a worse trigger than the one asked for,
     * trigger_fallback_from names the better one and trigger_fallback_errno
     * the errno that refused it (the first such refusal), else both 0. */
    uint64_t threads_by_trigger[SNAPPROF_TRIGGER_COUNT];
    snapprof_trigger_t trigger_fallback_from;
    int trigger_fallback_errno;
    /* CPU time of the sampled threads while they were profiled, and the part
     * of it the delivered samples stand for; the difference is CPU no sample
     * could place (kernel time, missed or dropped captures). The delivered
     * rate is cpu_ns_sampled / interval_ns (the samples counted by their
     * weight in periods) per cpu_ns_total seconds, against 1e9 /
     * interval_ns. */
    uint64_t cpu_ns_total;
    uint64_t cpu_ns_sampled;
    /* Captures lost because no capture slot was free (their CPU time stays
     * in cpu_ns_total - cpu_ns_sampled). */
    uint64_t samples_dropped;
    /* Threads moved from a CPU-clock trigger to the handshake because they
     * block the signal: their trigger fired once, and the signal stayed
     * pending. */
    uint64_t trigger_blocked;
    /* Zones, counters and instants (snapprof_zone_begin() and friends):
     * events a thread's full buffer dropped, and events lost because this
     * profiler fell behind the process-wide log or its profile held
     * 2^20 events (48 MiB) already. */
    uint64_t events_dropped;
    uint64_t events_lost;
    /* Wall mode with SNAPPROF_WALL_BLOCKED_PROC: samples of blocked threads
     * copied without a signal; copies thrown away because the thread ran
     * while its stack was read (it was then signalled if running); the
     * errno that kept /proc/self/task/TID/syscall from being read, or
     * process_vm_readv from copying a blocked thread's stack (EPERM under
     * a seccomp filter) (0: both could be; else blocked threads keep their
     * last stack, and only running threads are signalled). */
    uint64_t samples_blocked;
    uint64_t wall_copy_raced;
    int wall_proc_errno;
    /* The CFI tables of the process (shared by every profiler, so not this
     * profiler's alone): how many modules have one, the memory they take
     * (index and compiled rows; at most 64 MiB) and the CPU time spent
     * compiling them, as of this snapshot. */
    uint64_t cfi_tables;
    uint64_t cfi_table_bytes;
    uint64_t cfi_table_build_ns;
    /* System calls refused where the profile went on without them. Each
     * refusal of a CPU-clock trigger, by the trigger refused (its
     * perf_event_open or timer_create, or their set-up): the thread then
     * got the next one, as threads_by_trigger says. And memory mappings
     * refused: the capture slots (every thread then gets the handshake), a
     * large buffer for deep stacks (their copies stay truncated meanwhile),
     * a perf event's page (wall mode reads the thread's clock instead).
     * trigger_refused, mmap_failed and wall_proc_transient were added in
     * 0.5.0. */
    uint64_t trigger_refused[SNAPPROF_TRIGGER_COUNT];
    uint64_t mmap_failed;
    /* Wall mode with SNAPPROF_WALL_BLOCKED_PROC: reads of a thread's
     * /proc/self/task/TID/syscall that failed for want of a descriptor or
     * memory (EMFILE, ENFILE, ENOMEM). That tick the thread is dealt with
     * as when /proc cannot say; the next tick asks /proc again
     * (wall_proc_errno stays 0). */
    uint64_t wall_proc_transient;
    /* Added in 0.6.0: the library's own fds. Process-wide, as of this snapshot: fds of ours (perf
     * events, cached /proc files) found closed or replaced by the program, which we then neither
     * read, ioctl nor close (its thread keeps or changes its trigger, the cache opens the file
     * again); and the most fds the library held at once (they sit at the top of RLIMIT_NOFILE's
     * range, at most 1/16 of it: the README's "The program's fds"). */
    uint64_t fds_lost;
    uint64_t fds_held_max;
    /* Added in 0.6.0 as well: */
    /* Samples whose stack pointer was on a stack other than the thread's
     * own (a goroutine's, a fiber's, a swapcontext() stack, a sigaltstack):
     * a window of that stack was copied, up to 32 KiB from sp as far as it
     * could be read. */
    uint64_t foreign_stack_copies;
    /* CPU-clock triggers stopped because the profile's signal handler was
     * found replaced (by raw rt_sigaction, or a host's own sigaction): their
     * signals would have gone to the program's handler. Their threads go
     * to the handshake, which counts failed.handler_replaced and backs
     * off. */
    uint64_t handler_replaced_disarmed;
    /* Added in 0.6.0 as well (issue 25 item 2, deep stacks): */
    /* Bytes in the large buffers of threads whose stacks do not fit a
     * capture slot (64 KiB), as of this snapshot and the most at once; they
     * are faulted in (resident) and stay with their thread until it leaves
     * the profile. Within params.capture_memory_max less the slots. */
    uint64_t large_buffer_bytes;
    uint64_t large_buffer_bytes_max;
    /* Of truncated_copy: captures of threads that memory budget left
     * without a free large buffer that fits. */
    uint64_t truncated_copy_budget;
    /* -- Added in 0.7.0: heap sampling (<snapprof/heap.h>, issue 27) -- */
    /* Sampled allocations delivered (SNAPPROF_SAMPLE_KIND_HEAP_ALLOC) and
     * frees of sampled blocks delivered (SNAPPROF_SAMPLE_KIND_HEAP_FREE). */
    uint64_t heap_samples;
    uint64_t heap_frees;
    /* Sampled allocations dropped in the hook: no capture slot was free
     * and the free queue or the set was full too (heap_samples_no_slot);
     * the set of live sampled addresses was full (the sampling thread grows
     * it before it fills, unless it falls far behind); the thread's stack
     * bounds could not be found (/proc/self/maps unreadable). */
    uint64_t heap_dropped_no_slot;
    uint64_t heap_dropped_set_full;
    uint64_t heap_dropped_no_stack;
    /* Frees of sampled blocks not delivered because the queue they wait in
     * for the sampling thread was full: those blocks stay in use in the
     * profile. */
    uint64_t heap_frees_lost;
    /* Added in 0.7.0 (issue 27, totals survive bursts): of heap_samples,
     * sampled allocations that found no free capture slot (a burst faster
     * than the sampling thread drains) and were delivered without their
     * stack, under the one frame "[heap: no capture slot]", so that the
     * totals and what is in use stay right. heap_dropped_no_slot counts
     * only those that could not be kept even so. */
    uint64_t heap_samples_no_slot;
    /* -- end of the 0.7.0 heap block -- */
    /* -- Added in 0.7.0 (issue 29, Python frames; snapprof_params_t.python) -- */
    /* Samples with CPython frames spliced in, and those frames; captures
     * whose interpreter frames were cut at 1024 (python_truncated) or ended
     * by a half-linked or unreadable frame (python_broken); runs of Python
     * frames with no evaluation-loop frame left to replace (not shown);
     * frames whose code object was freed and its address reused between
     * the capture and the unwinding (shown as "<code object freed>"); and,
     * when the process runs a Python whose frame layout snapprof does not
     * know (native frames only), its version as PY_VERSION_HEX (1 when it
     * does not say), else 0. */
    uint64_t python_samples;
    uint64_t python_frames;
    uint64_t python_truncated;
    uint64_t python_broken;
    uint64_t python_unmatched;
    uint64_t python_code_reused;
    uint64_t python_layout_unknown;
    /* -- end of issue 29's block -- */
    /* -- Added in 0.7.0 (issue 25, snapprof_params_t.unarmed_timer) -- */
    /* The process-wide timer's signals that reached a thread not yet
     * armed (captured; their samples are in samples) and those that
     * reached another thread (dropped: an armed thread's own trigger
     * counts its time); and, when the timer was asked for but not made,
     * why (an errno: ENOTSUP for a kernel before 6.4, EBUSY when another
     * profile has it), else 0. */
    uint64_t unarmed_timer_samples;
    uint64_t unarmed_timer_passed;
    uint64_t unarmed_timer_errno;
    /* -- end of the unarmed_timer block -- */
    /* -- Added in 0.7.0 (issue 27, heap captures on fiber stacks) -- */
    /* Reads of /proc/self/maps by sampled allocations, for the bounds of
     * a stack that is neither the thread's registered one nor one of the
     * last few it allocated on (each thread remembers 8, most recent
     * first). A thread that switches among N fiber stacks reads it about
     * N times, not once per sampled allocation; more than 8 stacks in
     * turn read it more often. */
    uint64_t heap_stack_lookups;
    /* -- end of the fiber block -- */
    /* -- Added in 0.7.0 (issue 29's review, Python frames) -- */
    /* Threads that ran Python code but could not be remembered by the
     * signal handler until the sampler next read the interpreter's thread
     * list (at most every 10 ms, at a drain), because more than 256 threads
     * had started since: their samples taken while they had released the
     * GIL lack Python frames until then. */
    uint64_t python_learned_full;
    /* -- end of issue 29's review block -- */
    /* -- Added in 0.7.0 (issue 27, soak finding 9: a tick's drain) -- */
    /* The sampling thread's drains of the CPU captures at its ticks stop
     * after 20 ms of its CPU time and leave the rest, still in their
     * slots, to the next pass a millisecond later (nothing is dropped for
     * it: captures that then find no free slot count in samples_dropped).
     * How many passes stopped so, and the most CPU time one pass took. */
    uint64_t drain_budget_stops;
    uint64_t drain_max_cpu_ns;
    /* -- end of the drain budget block -- */
    /* -- Added in 0.7.0 (issue 29, Python frames under seccomp) -- */
    /* When Python frames were asked for and the interpreter was found, but
     * process_vm_readv() on the profiler's own memory, which every read of
     * its frames goes through, was refused (a seccomp filter: Docker's
     * default profile without CAP_SYS_PTRACE; common/seccomp.h): the
     * errno, EPERM, and the profile has native frames only; else 0. */
    uint64_t python_read_errno;
    /* -- end of the Python seccomp block -- */
    /* -- Added in 0.7.0 (the program's fd numbers): -- */
    /* Files the library opens for a moment (a /proc read, an ELF file
     * mapped to compile its CFI) can be opened on a thread of its own with
     * an fd table of its own, so that they never take one of the program's
     * fd numbers (off by default for now: README, "The program's fds").
     * 0 while that works or is off; else the errno that kept the thread from
     * its own table (ENOSYS: a kernel before 5.9, no close_range; EPERM:
     * refused, or a seccomp filter would kill the process for it), and
     * such files are opened on the calling thread, each holding the lowest
     * free number for a few system calls, as before 0.7.0. Process-wide. */
    uint64_t fds_private_errno;
    /* How many such opens ran on the calling thread so. Process-wide. */
    uint64_t fds_private_inline;
    /* -- end of the fd numbers block -- */
} snapprof_stats_t;

/* ------------------------------------------------------------------------ */
/* Threads                                                                  */
/* ------------------------------------------------------------------------ */

/* Registers the calling thread as a sampling target and returns its token.
 * Call it on the thread itself: the stack bounds are read there. The token
 * notices when the thread exits (samples after that are counted as
 * SNAPPROF_FAIL_THREAD_EXITED) and when its tid is recycled. Registering the
 * same thread twice returns the same token with another reference.
 * Release each token with snapprof_thread_release(). Returns 0, -EINVAL
 * (out is NULL), -ENOMEM, or the negative errno that kept its stack bounds
 * from being read (e.g. -ENOENT, -EMFILE from /proc/self/maps). */
SNAPPROF_API int snapprof_thread_register(snapprof_thread_t **out);

/* Flags of snapprof_thread_register_ex(). */
enum {
    /* The calling thread registers as the first thing it does, and is then
     * added to a running profiler (the preload does this for every thread
     * that starts): the first profiler the token is added to counts the
     * thread's CPU time from the thread's start instead of reading its
     * clock now, and its name is read from /proc/self/task/TID/comm when a
     * profiler first arms it rather than now. Two system calls less for
     * every thread, most of which a short-lived thread never needs. */
    SNAPPROF_REGISTER_AT_START = 1u << 0,
};

/* snapprof_thread_register() with flags (SNAPPROF_REGISTER_*, or 0: the
 * same as snapprof_thread_register()). Returns what it returns, or -EINVAL
 * for an unknown flag. A thread registered twice keeps the token of its
 * first registration, with the flags it was made with. */
SNAPPROF_API int snapprof_thread_register_ex(unsigned flags, snapprof_thread_t **out);

/* Names a thread of this process by tid, from any thread. Its stack bounds
 * are read from /proc/self/maps: the main thread's are "[stack]"; any other
 * thread is stopped with signal signo to report its stack pointer, and the
 * mapping that holds it gives the bounds. The calling thread is registered
 * as by snapprof_thread_register(). Pass the signal of the profilers that
 * will sample the thread (params.signal): a thread that blocks it can be
 * neither registered nor sampled, one that blocks other signals can be.
 * signo's handler is installed as snapprof_profiler_start() installs it,
 * once for the life of the process.
 *
 * Returns 0 or:
 *   -EINVAL            out is NULL, tid <= 0, or signo is not a signal
 *                      number;
 *   SNAPPROF_ESIGNAL   signo cannot be used (SIGKILL, SIGSTOP, a fault
 *                      signal), its handler cannot be installed, or
 *                      someone replaced it;
 *   -ESRCH             no such thread in this process, or it exited
 *                      during the handshake;
 *   -ETIMEDOUT         it did not answer within about a second (it blocks
 *                      signo, is held in vfork(), or was not scheduled) or
 *                      the signal could not be queued: the call may be
 *                      tried again later;
 *   -ENOMEM            out of memory;
 *   -ENOENT, or another negative errno from reading /proc/self/maps: no
 *                      mapping holds the stack pointer (no "[stack]"), or
 *                      the file cannot be read;
 *   for the calling thread, what snapprof_thread_register() returns. */
SNAPPROF_API int snapprof_thread_register_tid_ex(pid_t tid, int signo, snapprof_thread_t **out);

/* snapprof_thread_register_tid_ex() with SIGURG, the default signal of
 * snapprof_params_init(); errors as there. */
SNAPPROF_API int snapprof_thread_register_tid(pid_t tid, snapprof_thread_t **out);

/* Drops a reference. Profilers that sample the thread hold references of
 * their own, so releasing a token in use is safe. NULL is a no-op. */
SNAPPROF_API void snapprof_thread_release(snapprof_thread_t *thread);

/* The tid a token stands for; -1 for NULL. */
SNAPPROF_API pid_t snapprof_thread_tid(const snapprof_thread_t *thread);

/* A thread's name is read once: at registration, or with
 * SNAPPROF_REGISTER_AT_START when a profiler first arms the thread. This
 * sets the name that later samples carry (snapprof_sample_t.thread_name,
 * the thread_name label), for a thread renamed since; the samples already
 * captured keep the old name (they are delivered first, see
 * <snapprof/profile_builder.h>). The name is cut to 15 bytes, like the
 * kernel's. Returns 0, or -EINVAL when thread or name is NULL. */
SNAPPROF_API int snapprof_thread_update_name(snapprof_thread_t *thread, const char *name);

/* ------------------------------------------------------------------------ */
/* Unwinders (the interface is in <snapprof/unwinder.h>)                    */
/* ------------------------------------------------------------------------ */

/* The frame-pointer unwinder: follows the chain of saved frame pointers
 * through the stack copy. Fast; needs code built with frame pointers. */
SNAPPROF_API int snapprof_frame_pointer_unwinder_create(snapprof_unwinder_t **out);

/* The libunwind unwinder: DWARF CFI (.eh_frame) unwinding of the stack
 * copy through libunwind's remote API; it reads only the copy and the
 * loaded objects' readable segments. Works on code built without frame
 * pointers; in the default chain (snapprof_profiler_add_unwinder()) after
 * the CFI table unwinder, which hands it the frames its tables cannot
 * express. It claims
 * native frames in objects that have .eh_frame_hdr and hands a caller in
 * other code (JIT) to the next unwinder in the chain. Any thread; the
 * caller owns *out until it hands it to a profiler. */
SNAPPROF_API int snapprof_libunwind_unwinder_create(snapprof_unwinder_t **out);

/* The .debug_frame unwinder: DWARF CFI from an object's .debug_frame
 * section (in the object or in its separate debug file, found by build-id
 * or .gnu_debuglink), read through elfutils libdw, for code built without
 * .eh_frame (-fno-asynchronous-unwind-tables -fno-unwind-tables). It
 * claims native frames in objects that no .eh_frame_hdr table covers and
 * hands a caller in any other code to the next unwinder in the chain; it
 * reads only the stack copy and the loaded objects' readable segments. In
 * the default chain after the libunwind unwinder. Any thread; the caller
 * owns *out until it hands it to a profiler. */
SNAPPROF_API int snapprof_debug_frame_unwinder_create(snapprof_unwinder_t **out);

/* The hybrid unwinder: frame pointers where the code has a frame record,
 * CFI through libunwind where it has none (leaf functions, prologues,
 * libraries built without frame pointers). Learns which is which per pc
 * from the CFI, so on frame-pointer builds it runs at nearly the speed of
 * the frame-pointer unwinder without losing the leaf's caller. Any
 * thread; the caller owns *out until it hands it to a profiler. */
SNAPPROF_API int snapprof_hybrid_unwinder_create(snapprof_unwinder_t **out);

/* The CFI table unwinder: DWARF CFI (.eh_frame, or .debug_frame for
 * objects without .eh_frame_hdr) compiled per module, through elfutils
 * libdw, into tables sorted by address (CFA = rsp or rbp + offset; return
 * address and rbp saved at CFA + offset), built on the unwinding thread the
 * first time a pc in an FDE is met, then walked over the stack copy with a
 * binary search and checked reads per frame. Frames the tables cannot
 * express (signal trampolines, PLT stubs, DWARF expressions) are stepped
 * by libunwind, as the libunwind unwinder would; code only .debug_frame
 * describes that way, JIT code and code without CFI are handed to the next
 * unwinder in the chain. It reads only the stack copy and the loaded
 * objects' readable segments. The default native unwinder; in a chain of
 * your own, add it before a libunwind and a .debug_frame unwinder. Any
 * thread; the caller owns *out until it hands it to a profiler. */
SNAPPROF_API int snapprof_cfi_table_unwinder_create(snapprof_unwinder_t **out);

/* Each of the _create() functions above returns 0, -EINVAL when out is
 * NULL, or -ENOMEM. */

/* Destroys an unwinder not handed to a profiler. NULL is a no-op. */
SNAPPROF_API void snapprof_unwinder_destroy(snapprof_unwinder_t *unwinder);

/* ------------------------------------------------------------------------ */
/* Profile builders (the interface is in <snapprof/profile_builder.h>)      */
/* ------------------------------------------------------------------------ */

/* The pprof builder: aggregates samples and, when the profile completes,
 * writes a gzip-compressed perftools.profiles.Profile to path, atomically
 * (a temporary file in the same directory, then rename). The directory must
 * exist and be writable, and path must not name a directory: that is
 * checked here, so a bad path fails early with a negative errno (-ENOENT,
 * -ENOTDIR, -EACCES, -EISDIR; -EINVAL when path is NULL or "" or out is
 * NULL), or -ENOMEM. The same for every builder below that takes a path. */
SNAPPROF_API int snapprof_pprof_builder_create(const char *path, snapprof_builder_t **out);

/* A pprof builder that writes no file: each time its profile completes
 * (snapprof_profiler_detach_builder() for an attached one, the profile's
 * stop, a flush) the gzipped perftools.profiles.Profile, the bytes a file
 * would hold, is kept in memory for snapprof_pprof_builder_take_bytes(),
 * replacing the previous completion's. snapprof_builder_set_path() does not
 * apply (-EINVAL). Returns 0, -EINVAL (out NULL) or -ENOMEM. Added in
 * 0.7.0. */
SNAPPROF_API int snapprof_pprof_builder_create_in_memory(snapprof_builder_t **out);

/* Hands over the bytes of the last completion of an in-memory pprof
 * builder: *bytes (free() it) and *size. Each completion's bytes are taken
 * once. Returns 0; -ENODATA (no completion since the last take, or it failed:
 * its xOnProfileCompleted's return said why); -EINVAL (a NULL argument, or
 * builder is not an in-memory pprof builder). Not while the profile
 * completes on another thread. Added in 0.7.0. */
SNAPPROF_API int snapprof_pprof_builder_take_bytes(snapprof_builder_t *builder, void **bytes,
                                                   size_t *size);

/* The folded-stacks builder: when the profile completes, writes one line per
 * distinct stack, "outermost;...;innermost count" (root first, inlined calls
 * expanded, count = samples), sorted, the format of flamegraph.pl and
 * speedscope. Symbolizes at completion. Path rules as for pprof. */
SNAPPROF_API int snapprof_folded_builder_create(const char *path, snapprof_builder_t **out);

/* The timeline builder: when the profile completes, writes Chrome
 * trace-event JSON (open it in ui.perfetto.dev or chrome://tracing): every
 * sample as a "P" event with its time, thread, stack and labels, a flame
 * chart of "X" slices per thread, and app frames (hitches marked) on their
 * own track. Times are microseconds since the profile started. Symbolizes
 * at completion. Path rules as for pprof. */
SNAPPROF_API int snapprof_trace_builder_create(const char *path, snapprof_builder_t **out);

/* gperftools' CPU profile builder: when the profile completes, writes the
 * legacy binary CPU profile gperftools' profiler writes (header, one record
 * of count and pcs per distinct stack, trailer, then /proc/self/maps), which
 * gperftools' pprof (Debian's google-pprof) and `go tool pprof` read and
 * symbolize from the mapped files. Counts are whole samples: each stack's
 * weight (CPU time, or wall time in a wall profile) in sampling periods,
 * rounded so the file's total is the total weight in periods. A thread's
 * "[kernel and unsampled]" remainder has no pc and is left out; a marker
 * frame ends its stack. Path rules as for pprof. */
SNAPPROF_API int snapprof_gperftools_builder_create(const char *path, snapprof_builder_t **out);

/* Points a pprof builder at another output path, with the same checks as
 * snapprof_pprof_builder_create(); on failure the old path stays. For a
 * write that failed at completion: set a path that works, then flush. Call
 * it only when no completion can run (before start, after stop). Returns
 * -EINVAL when builder is NULL or not a pprof builder, and the path errors
 * of snapprof_pprof_builder_create(). */
SNAPPROF_API int snapprof_pprof_builder_set_path(snapprof_builder_t *builder, const char *path);

/* The same for any built-in builder that writes a file (pprof, folded,
 * trace, gperftools), so that a run writing several formats loses none of them to a
 * failed write. Returns -EINVAL when builder is NULL or writes no file of
 * its own (one made with snapprof_builder_create()), and the path errors
 * of snapprof_pprof_builder_create(). */
SNAPPROF_API int snapprof_builder_set_path(snapprof_builder_t *builder, const char *path);

/* Destroys a builder not handed to a profiler. NULL is a no-op. */
SNAPPROF_API void snapprof_builder_destroy(snapprof_builder_t *builder);

/* ------------------------------------------------------------------------ */
/* Labels                                                                   */
/* ------------------------------------------------------------------------ */

/* Labels say what the program was doing when a sample was taken (the
 * request, the phase, the tenant): every sample carries the labels in force
 * on its thread at that instant, and pprof shows them with -tags and
 * filters with -tagfocus. They are read by the signal handler while the
 * target is stopped, so setting one costs no system call and takes no lock
 * the sampler could wait on: a thread-scope call writes a slot of the
 * calling thread's table (the first set on a thread allocates that table),
 * a process-scope call writes a slot of the process table under a mutex
 * that only other process-scope writers take.
 *
 * Limits: SNAPPROF_LABEL_SLOTS labels per scope; keys up to
 * SNAPPROF_LABEL_KEY_MAX - 1 bytes, string values up to
 * SNAPPROF_LABEL_STR_MAX - 1, units up to SNAPPROF_LABEL_UNIT_MAX - 1
 * (longer ones fail with -ENAMETOOLONG, nothing is truncated). The keys
 * "thread_id", "thread_name", "frame", "hitch", "zone", "state" and
 * "syscall" are the library's own (-EINVAL). A thread label hides a process label of the same key.
 *
 * Threads: any thread, but not from a signal handler. Thread-scope labels
 * belong to the calling thread and go away when it exits. Strings are
 * copied; the caller keeps ownership of its arguments. */

#define SNAPPROF_LABEL_SLOTS 16    /* labels per scope */
#define SNAPPROF_LABEL_KEY_MAX 32  /* bytes of a key, with its NUL */
#define SNAPPROF_LABEL_STR_MAX 64  /* bytes of a string value, with its NUL */
#define SNAPPROF_LABEL_UNIT_MAX 16 /* bytes of a numeric label's unit, with its NUL */

typedef enum {
    SNAPPROF_LABEL_THREAD = 0, /* samples of the calling thread only */
    SNAPPROF_LABEL_PROCESS = 1 /* samples of every thread */
} snapprof_label_scope_t;

/* Sets key to a string value in scope, replacing its previous value.
 * Returns 0; -EINVAL (scope not SNAPPROF_LABEL_THREAD or _PROCESS, key
 * NULL, "" or one of the library's own keys, value NULL); -ENAMETOOLONG
 * (key or value too long); -ENOSPC (all slots used) or -ENOMEM (the
 * calling thread's first thread-scope label). */
SNAPPROF_API int snapprof_label_set_str(snapprof_label_scope_t scope, const char *key,
                                        const char *value);

/* Sets key to a number in scope; unit (e.g. "bytes") may be NULL. pprof
 * shows numeric labels as values and filters them by range
 * (-tagfocus=key=10:20). Returns as snapprof_label_set_str() (a unit too
 * long is -ENAMETOOLONG). */
SNAPPROF_API int snapprof_label_set_num(snapprof_label_scope_t scope, const char *key,
                                        int64_t value, const char *unit);

/* Removes key from scope. Returns 0, -ENOENT when it is not set, or
 * -EINVAL for a bad scope or key, as snapprof_label_set_str(). */
SNAPPROF_API int snapprof_label_remove(snapprof_label_scope_t scope, const char *key);

/* App frames: the frames of a frame-based program (a game, a renderer, a
 * UI loop), not stack frames. snapprof_app_frame_begin(N) starts frame N
 * for the whole process (ending the one in progress, if any);
 * snapprof_app_frame_end(N) ends it. Every sample taken meanwhile, on any
 * thread, carries the numeric label frame=N. When the profile completes,
 * frames that lasted longer than the profiler's hitch_threshold_ns are
 * hitches: the pprof builder labels their samples hitch=true (the others'
 * hitch=false), so `go tool pprof -tagfocus=hitch=true` shows where slow
 * frames spend their time. A frame still in progress when the profile
 * stops is not judged. Durations are wall time (CLOCK_MONOTONIC).
 *
 * Any thread, not from a signal handler; the calls take a mutex that the
 * sampler and the signal handler never take. begin returns 0 or -EINVAL
 * (frame_id UINT64_MAX); end returns 0 or -ENOENT when frame_id is not the
 * frame in progress. */
SNAPPROF_API int snapprof_app_frame_begin(uint64_t frame_id);
SNAPPROF_API int snapprof_app_frame_end(uint64_t frame_id);

/* An app frame as builders see it when the profile completes. */
typedef struct snapprof_app_frame {
    uint64_t id;
    uint64_t begin_ns, end_ns; /* CLOCK_MONOTONIC */
    int hitch;                 /* end_ns - begin_ns > the profiler's hitch_threshold_ns */
} snapprof_app_frame_t;

/* ------------------------------------------------------------------------ */
/* Zones, counters and instant events                                       */
/* ------------------------------------------------------------------------ */

/* The vocabulary of frame profilers (Tracy, Optick), beside the sampler:
 * a zone ("physics", "upload") opens and closes on a thread, nested; a
 * counter ("draw calls") takes a value; an instant ("GC") marks a moment.
 * They are recorded with exact times (CLOCK_MONOTONIC, the clock of sample
 * timestamps), not sampled, and the trace builder draws them: per thread a
 * track of nested zone slices (with the thread's instants), a track per
 * counter, and per app frame the time each zone took within it. Every
 * sample taken inside a zone carries the innermost one as the string label
 * zone=<name> (pprof: -tagfocus=zone=physics); samples carry a counter's
 * value only for counters attached with snapprof_counter_attach().
 *
 * Names are interned: the first use of a name copies it into a
 * process-wide table of SNAPPROF_EVENT_NAMES_MAX names that lives as long
 * as the process; the caller keeps its strings. A name is 1 to
 * SNAPPROF_EVENT_NAME_MAX - 1 bytes (longer: -ENAMETOOLONG, nothing is
 * truncated); a name past the table's capacity is -ENOSPC.
 *
 * Cost and memory: no system call and no lock (clock_gettime through the
 * vDSO); the first call on a thread allocates that thread's state (about
 * 100 KiB: a ring of 4096 events and the zone stack), freed when the
 * thread exits, and the first call with a new name takes a mutex. Events
 * are written only while a profiler runs; when a thread's ring is full
 * (no profiler drained it for a whole tick) an event is dropped and counted
 * (snapprof_stats_t.events_dropped), the call never blocks. A zone whose
 * begin was recorded always gets its end recorded (room is kept for it).
 *
 * Threads: any thread, not from a signal handler. Zones belong to the
 * calling thread; counters and instants are process-wide names, and an
 * instant is drawn on the calling thread's zone track. */

#define SNAPPROF_EVENT_NAME_MAX 64    /* bytes of a name, with its NUL */
#define SNAPPROF_EVENT_NAMES_MAX 4096 /* distinct names per process */
#define SNAPPROF_ZONE_DEPTH_MAX 64    /* zones open at once on a thread */
#define SNAPPROF_COUNTER_ATTACH_MAX 8 /* counters attached to samples */

/* Opens a zone on the calling thread, inside the zones already open.
 * Returns 0; -EINVAL (name NULL or ""), -ENAMETOOLONG, -ENOSPC (name
 * table full) or -ENOMEM (the thread's first call), and then no zone was
 * opened: do not end it. -E2BIG when SNAPPROF_ZONE_DEPTH_MAX zones are
 * already open: the zone is neither recorded nor a label, but it counts as
 * open, so that its snapprof_zone_end() (which returns 0) closes nothing
 * else; code that ends every zone it begins stays balanced. */
SNAPPROF_API int snapprof_zone_begin(const char *name);

/* Closes the calling thread's innermost zone. Returns 0, or -ENOENT when
 * the thread has no zone open (nothing changes). Zones still open when a
 * thread exits end at its exit; zones open when a profile stops end at the
 * profile's end in its trace. */
SNAPPROF_API int snapprof_zone_end(void);

/* Marks a moment on the calling thread's zone track. Returns 0, -EINVAL,
 * -ENAMETOOLONG, -ENOSPC or -ENOMEM as snapprof_zone_begin(). */
SNAPPROF_API int snapprof_instant(const char *name);

/* Sets counter name to value: one point on its track in the trace, and,
 * when the counter is attached, its value in every later sample. value
 * must be finite (-EINVAL: JSON has no NaN). Returns as
 * snapprof_instant(). */
SNAPPROF_API int snapprof_counter_set(const char *name, double value);

/* Makes every sample carry counter name's latest value as a numeric label
 * with key name and the given unit (NULL for none), from the counter's
 * next set on. pprof labels are integers: the label is value * scale
 * rounded to the nearest integer (halves away from zero), saturated to the int64 range;
 * e.g. scale 1000 keeps milliseconds to the microsecond, with unit "us".
 * An attachment lasts as long as the process. Returns 0; -EINVAL (name
 * not a valid label key or one of the library's own, scale not finite or
 * 0); -ENAMETOOLONG (name of SNAPPROF_LABEL_KEY_MAX bytes or more, unit of
 * SNAPPROF_LABEL_UNIT_MAX or more); -EEXIST (already attached); -ENOSPC
 * (SNAPPROF_COUNTER_ATTACH_MAX counters attached, or the name table is
 * full). */
SNAPPROF_API int snapprof_counter_attach(const char *name, const char *unit, double scale);

/* Exact function timing, for programs built with -finstrument-functions
 * and linked with libsnapprof-instrument (whose __cyg_profile_func_enter
 * and _exit call these; docs/zones.md). Each thread aggregates its calls
 * by call path: count, and self time (CLOCK_MONOTONIC, wall time), in a
 * tree of up to SNAPPROF_CALL_NODES_MAX paths (calls past it are timed
 * into their caller and counted) that no event buffer limits; the calls
 * builder writes them as a profile of their own. While a profiler runs,
 * each call is also an enter and an exit event for the trace (dropped and
 * counted like any event when the thread's buffer is full). The first
 * call on a thread allocates about 170 KiB (its tree and shadow stack),
 * kept after the thread exits for the calls builder (the last 256 exited
 * threads). Not async-signal-safe: exclude signal handlers from
 * instrumentation (-finstrument-functions-exclude-function-list).
 *
 * enter returns 0, -ENOMEM, or -E2BIG past SNAPPROF_CALL_DEPTH_MAX calls
 * deep (not timed, but its exit is matched so nothing else ends). exit
 * returns 0, or -ENOENT when fn is not being timed on this thread; an exit
 * that skips calls (longjmp) ends them too. */
#define SNAPPROF_CALL_DEPTH_MAX 256
#define SNAPPROF_CALL_NODES_MAX 4096
SNAPPROF_API int snapprof_func_enter(void *fn);
SNAPPROF_API int snapprof_func_exit(void *fn);

/* The calls builder: when the profile completes, writes the function
 * timing of every thread (snapprof_func_enter) as a gzipped pprof profile
 * with sample types calls/count and time/nanoseconds: one sample per call
 * path, whose values are the calls and the self time, so that pprof's
 * flat is a function's self time (or calls, with -sample_index=calls) and
 * cum its total; labeled thread_id. Totals are since each thread's first
 * timed call. Path rules as for pprof. */
SNAPPROF_API int snapprof_calls_builder_create(const char *path, snapprof_builder_t **out);

typedef enum {
    SNAPPROF_EVENT_ZONE_BEGIN = 0,
    SNAPPROF_EVENT_ZONE_END = 1,
    SNAPPROF_EVENT_INSTANT = 2,
    SNAPPROF_EVENT_COUNTER = 3,
    SNAPPROF_EVENT_FUNC_ENTER = 4, /* snapprof_func_enter(): name "", address set */
    SNAPPROF_EVENT_FUNC_EXIT = 5
} snapprof_event_kind_t;

/* An event as builders see it when the profile completes. */
typedef struct snapprof_event {
    snapprof_event_kind_t kind;
    pid_t tid;         /* the thread that made the call */
    uint32_t depth;    /* zones and functions: nesting level, 1 for the outermost; else 0 */
    uint64_t time_ns;  /* CLOCK_MONOTONIC */
    const char *name;  /* interned: valid for the life of the process */
    double value;      /* counters: the value set; else 0 */
    uintptr_t address; /* functions: the function's address; else 0 */
} snapprof_event_t;

/* ------------------------------------------------------------------------ */
/* Seccomp filters the program installs                                     */
/* ------------------------------------------------------------------------ */

/* The profiler makes two system calls that hardened programs often filter:
 * perf_event_open (the perf trigger arms each thread with it) and
 * process_vm_readv (checked reads of the process's own memory: stacks, heap
 * captures, Python frames, CFI). A filter that would kill the process for
 * one of them (SIGSYS, as systemd's SystemCallFilter= does) and is in place
 * when a profiler is made is found then, and the call is never made. A
 * filter the program installs later, while profilers run, is found only
 * when the program says so, by these two calls around its install:
 *
 *     snapprof_seccomp_changing();
 *     rc = seccomp_load(ctx);  (or prctl(PR_SET_SECCOMP), seccomp(2))
 *     snapprof_seccomp_changed();
 *
 * The preload library (`snapprof record`, LD_PRELOAD) makes them itself
 * around every prctl(PR_SET_SECCOMP, ...) and syscall(SYS_seccomp, ...)
 * the program makes through the C library, libseccomp's seccomp_load()
 * included. A filter installed by a system call made without the C
 * library (a raw syscall instruction, Go's runtime, a statically linked
 * libseccomp) is seen by nothing but these calls: without them, the next
 * perf_event_open (a new thread armed) or process_vm_readv (the sampling
 * thread's next read) kills the process. */

/* Call before installing a seccomp filter: until the matching
 * snapprof_seccomp_changed(), no thread makes either call, as if both
 * were refused with EPERM (a thread armed meanwhile gets the CPU timer for
 * good, a read takes its refused path; the sampling thread goes on), so
 * that no call is made under a filter nothing has looked at yet. Calls may
 * nest and come from several threads; each is ended by one
 * snapprof_seccomp_changed(). Strict mode (SECCOMP_MODE_STRICT): leave it
 * unended, since a thread in strict mode cannot even read /proc, and
 * neither call is made again; release that thread's token first
 * (snapprof_thread_release(): a sample's signal handler makes system calls
 * that strict mode kills the process for). Returns 0. Any thread, not from
 * a signal handler. Added in 0.7.0. */
SNAPPROF_API int snapprof_seccomp_changing(void);

/* Call after installing a seccomp filter, on the thread that installed it
 * (without SECCOMP_FILTER_FLAG_TSYNC a filter holds that thread and the
 * threads it makes later, not the others), whether the install succeeded
 * or not: finds out, in a child process of the calling thread as when a
 * profiler is made, which of the two calls the thread's filters would kill
 * the process for, and never makes those again (process-wide, for the life
 * of the process); then ends one snapprof_seccomp_changing(), if any. A
 * filter that fails a call with an errno is no danger: that call goes on
 * being made. Without snapprof_seccomp_changing() first, the profiler's
 * threads may make a call the new filter kills for between the install and
 * this call. Takes about a millisecond under a filter (one child process
 * per call not yet given up), a read of /proc without one. Returns the
 * number of the two calls never made from now on (0, 1 or 2); or a
 * negative errno from reading /proc/self/task/TID/status (-ENOENT: no
 * /proc; then nothing is known and the calls are made, as when a profiler
 * is made without /proc; the snapprof_seccomp_changing() is ended all the
 * same). Any thread but one in strict mode, not from a signal handler.
 * Added in 0.7.0. */
SNAPPROF_API int snapprof_seccomp_changed(void);

/* ------------------------------------------------------------------------ */
/* Profilers                                                                */
/* ------------------------------------------------------------------------ */

/* The settings of a profiler. The struct grows: new members are only ever
 * appended, each with a default, and size (the first member) is
 * sizeof(snapprof_params_t) as the caller was compiled, which
 * snapprof_params_init() sets. snapprof_profiler_create() reads params
 * only up to size: members past it, which the caller's header did not
 * have, take their defaults; members of a newer header than the library's
 * are ignored. A size of 0 (params not made by snapprof_params_init()) or
 * below SNAPPROF_PARAMS_SIZE_MIN is -EINVAL. Added in 0.4.0. */
typedef struct snapprof_params {
    size_t size;                 /* sizeof(snapprof_params_t); set by snapprof_params_init() */
    uint64_t interval_ns;        /* sampling interval; default 10 ms (100 Hz) */
    uint64_t duration_ns;        /* stop by itself after this long; 0 = until stop */
    uint64_t max_samples;        /* stop by itself after this many ticks; 0 = no cap */
    uint64_t initial_delay_ns;   /* wait before the first sample; default 0 */
    int signal;                  /* signal used to stop targets; default SIGURG */
    uint64_t copy_timeout_ns;    /* longest wait for a target's handler; default 50 ms */
    snapprof_mode_t mode;        /* default SNAPPROF_MODE_CPU */
    size_t stack_buffer_size;    /* bytes of stack copied at most; default 8 MiB */
    size_t max_frames;           /* unwinding depth cap; default 4096 */
    uint64_t idle_threshold_ns;  /* CPU time below which a thread counts as idle;
                                    default 100 us */
    uint64_t hitch_threshold_ns; /* app frames longer than this are hitches;
                                    default 50 ms */
    /* What times each thread's samples in CPU mode, and in wall mode with
     * SNAPPROF_WALL_BLOCKED_PROC the captures of running threads (with
     * SNAPPROF_WALL_BLOCKED_SIGNAL wall mode uses the handshake). AUTO and
     * a named CPU-clock trigger try that one, then the next one down (perf
     * event, CPU timer, handshake), per thread; the stats say which ran and
     * why a better one did not. Default SNAPPROF_TRIGGER_AUTO. */
    snapprof_trigger_t trigger;
    /* CPU-clock triggers: memory for stack copies, the capture slots (a
     * quarter of it at most, 16 MiB by default) and the large buffers of
     * threads whose stacks do not fit a slot (the rest; resident, held
     * until the thread leaves the profile), together, for any number of
     * threads; past it a deep thread's capture that finds no free large
     * buffer copies only the innermost 64 KiB (counted in truncated_copy
     * and truncated_copy_budget). Default 64 MiB; at least 1 MiB. */
    size_t capture_memory_max;
    /* Wall mode: how blocked threads are sampled. Default
     * SNAPPROF_WALL_BLOCKED_PROC: a blocked thread is never signalled, and
     * every wall-mode sample carries state=running|runnable|blocked (and a
     * blocked one syscall=NAME) as labels. SNAPPROF_WALL_BLOCKED_SIGNAL
     * uses the handshake for every thread, which ends waits early. */
    snapprof_wall_blocked_t wall_blocked;
    /* Added in 0.6.0 (read only when size covers it). CPU mode with the
     * perf trigger: when nonzero, each thread's kernel time is attributed
     * to the user stack that entered the kernel instead of going to its
     * "[kernel and unsampled]" remainder. The event counts user time only;
     * the handler also reads the thread's CPU clock (which includes kernel
     * time), and the clock's advance between two captures, less the
     * period, is delivered as a second sample of the later capture's
     * stack under a "[kernel]" leaf (SNAPPROF_SAMPLE_KERNEL). The kernel
     * time of an interval goes to the stack found at its end: right for a
     * stretch of code that makes the same system calls for longer than a
     * period, off by at most one interval's kernel time where a thread
     * moves from such code to other code. Signal delivery to the handler
     * (a few microseconds a sample) and captures dropped for want of a
     * slot count as kernel time too, and so does the period of a capture
     * taken at the instruction after a syscall (an overflow due in the
     * kernel, signalled on the way back). Default 0 (SNAPPROF_KERNEL=1 in
     * the preload library). */
    int kernel_share;
    /* Added in 0.6.0 (read only when size covers it). CPU mode with a
     * CPU-clock trigger: threads that join a running profile as they start,
     * on themselves (snapprof_profiler_add_thread() called by the new
     * thread; the preload library's threads), are armed then, one in
     * short_threads of them (drawn at random), instead of at the sampling
     * thread's next tick. A thread that uses less CPU time than one period
     * is then sampled with probability (its CPU time / (interval *
     * short_threads)), its sample weighing interval * short_threads: the
     * threads of a thread-per-task program are in the profile as their
     * clocks say, where otherwise a thread that ends before the next tick
     * is never sampled and all its CPU time is "[kernel and unsampled]".
     * The cost is one trigger's arming and teardown per armed thread (the
     * perf event's: 9 system calls, 20-50 us of the thread's CPU time on a
     * nested VM; README, "Short-lived threads"). 0 (the default): none.
     * The preload library and `snapprof record` take it from
     * SNAPPROF_SHORT_THREADS=N (0 unless told). */
    unsigned short_threads;
    /* Added in 0.7.0 (read only when size covers it). Heap sampling
     * (<snapprof/heap.h>): the mean number of bytes allocated between two
     * sampled allocations, per thread (Go's MemProfileRate; 524288 is Go's
     * and jemalloc's default). While a profiler with a nonzero heap_interval
     * runs, snapprof_heap_note_alloc() samples allocations and its builders
     * of ops version 2 receive SNAPPROF_SAMPLE_KIND_HEAP_ALLOC and _FREE
     * samples. One profiler at a time samples the heap: starting a second
     * one fails with -EBUSY. 0 (the default): no heap sampling. */
    size_t heap_interval;
    /* Added in 0.7.0 (read only when size covers it). When nonzero, in a
     * process running CPython 3.11, each capture also copies the thread's
     * interpreter frames, and every frame of the evaluation loop
     * (_PyEval_EvalFrameDefault) in its stack is replaced by the Python
     * functions it was running, named qualname with file and line, under
     * the "[python]" mapping (docs/python.md). Another version, or no
     * interpreter: native frames only (stats python_layout_unknown). Default 0
     * (SNAPPROF_PYTHON=1 in the preload library, `snapprof record
     * --python`). */
    int python;
    /* Added in 0.7.0 (read only when size covers it). CPU mode with a
     * CPU-clock trigger: a process-wide timer on the process's CPU clock,
     * every interval, samples the threads the profile has not armed yet
     * (those that joined since the sampling thread's last tick), its
     * sample weighing (1 + overrun) intervals; on an armed thread its
     * signal is dropped (that thread's own trigger counts its time). A
     * thread that ends before it is armed is then still sampled with
     * probability (its CPU time / interval), at no cost of its own, where
     * short_threads arms it (9 system calls). The kernel delivers the
     * timer's signal to the thread that was running only since Linux 6.4;
     * on older kernels, or when another profile has the timer, it is not
     * made (stats unarmed_timer_errno). Checked at the scheduler tick, so a
     * second is sampled at most CONFIG_HZ times per CPU. Default 0
     * (SNAPPROF_SHORT_THREADS=timer in the preload library). */
    int unarmed_timer;
    /* Added in 0.7.0 (read only when size covers it). CPU mode: when
     * nonzero, the threads' triggers are armed only while at least one
     * builder is attached to the running profile
     * (snapprof_profiler_attach_builder(), snapprof_profiler_collect()),
     * and disarmed when the last one is detached: between such stretches
     * no signal reaches the program and the sampling thread wakes at most
     * once a second (issue 28: an HTTP endpoint that is not asked costs
     * nothing). The profile's own builders then receive time samples only
     * while something is attached; a thread's CPU time while disarmed
     * reaches them as its "[kernel and unsampled]" remainder (with a
     * CPU-clock trigger) or not at all (with the handshake). Threads that
     * join while disarmed are armed by the next attach, with the others.
     * Heap sampling (heap_interval) is not affected. Not with
     * unarmed_timer (-EINVAL) nor in wall mode (-EINVAL). Default 0: armed
     * from start to stop (SNAPPROF_ARM=demand in the preload library,
     * `snapprof record --http` without -o). */
    int arm_on_demand;
} snapprof_params_t;

/* The size of the first snapprof_params_t that had a size member (0.4.0),
 * the smallest size snapprof_profiler_create() accepts. */
#define SNAPPROF_PARAMS_SIZE_MIN                                                                   \
    (offsetof(snapprof_params_t, wall_blocked) + sizeof(snapprof_wall_blocked_t))

/* Fills the first size bytes of params with the defaults and sets
 * params->size to size (nothing when size is below sizeof(size_t)). Call
 * it through snapprof_params_init(), which passes the caller's
 * sizeof(snapprof_params_t); a binding that cannot compile the header
 * passes the size of the struct it declares. Added in 0.4.0. */
SNAPPROF_API void snapprof_params_init_sized(snapprof_params_t *params, size_t size);

/* Fills params with the defaults, size included. Inline so that size is
 * sizeof(snapprof_params_t) as the caller was compiled: a program built
 * against this header keeps working with a library whose struct has grown. */
static inline void snapprof_params_init(snapprof_params_t *params)
{
    snapprof_params_init_sized(params, sizeof *params);
}

/* Creates a profiler for the given threads (count may be 0; add more with
 * snapprof_profiler_add_thread()). The profiler takes its own reference on
 * each thread; params are copied. Returns 0 or:
 *   -EINVAL   params, out, or (count > 0) threads is NULL, or one of
 *             threads[] is; params->size is 0 or below
 *             SNAPPROF_PARAMS_SIZE_MIN (params not made by
 *             snapprof_params_init()); interval_ns below 10 us; signal not
 *             a signal number; copy_timeout_ns 0; max_frames below 2;
 *             stack_buffer_size below 4096; mode or trigger not one of
 *             its enum's values; capture_memory_max below 1 MiB (unless
 *             the trigger is SNAPPROF_TRIGGER_HANDSHAKE); arm_on_demand
 *             in wall mode or with unarmed_timer;
 *   -ENOMEM   out of memory (the profiler's buffers are allocated here). */
SNAPPROF_API int snapprof_profiler_create(const snapprof_params_t *params,
                                          snapprof_thread_t *const *threads, size_t count,
                                          snapprof_profiler_t **out);

/* Adds or removes a target thread; allowed before and while running.
 * Both return 0, -EINVAL when profiler or thread is NULL, -ENOMEM (add);
 * adding a thread the profiler samples already does nothing and returns 0;
 * removing a thread the profiler does not sample returns -ENOENT. A thread
 * that has exited can be added (its exit could race the call anyway): the
 * sampler finds it gone, counts SNAPPROF_FAIL_THREAD_EXITED once and leaves
 * it alone. Removing a thread from a running profile stops its sampling at
 * once and costs the caller no unwinding: the samples it had already given
 * reach the builders from the sampling thread, at its next drain (a
 * profile without capture slots, the handshake trigger's or wall mode's
 * with SNAPPROF_WALL_BLOCKED_SIGNAL, has no captures waiting: the caller
 * delivers the thread's "[kernel and unsampled]" remainder). A thread
 * removed once the profile is completing or complete leaves without adding
 * anything to it. */
SNAPPROF_API int snapprof_profiler_add_thread(snapprof_profiler_t *profiler,
                                              snapprof_thread_t *thread);
SNAPPROF_API int snapprof_profiler_remove_thread(snapprof_profiler_t *profiler,
                                                 snapprof_thread_t *thread);

/* Appends an unwinder to the chain (earlier ones are asked first). The
 * profiler owns it from now on, also when this call fails. Only before
 * start. Returns 0; -EINVAL when profiler or unwinder is NULL;
 * SNAPPROF_ESTATE after start; -ENOMEM. With no unwinder added, the JIT
 * unwinder (<snapprof/jit.h>) is
 * used, then the CFI table unwinder, then the libunwind unwinder (for the
 * frames the tables cannot express), then the .debug_frame unwinder (for
 * objects with no .eh_frame), then the frame-pointer unwinder for
 * objects that have no CFI. */
SNAPPROF_API int snapprof_profiler_add_unwinder(snapprof_profiler_t *profiler,
                                                snapprof_unwinder_t *unwinder);

/* Adds a builder; every builder receives every sample. The profiler owns it
 * from now on, also when this call fails. Only before start. Returns 0;
 * -EINVAL when profiler or builder is NULL; SNAPPROF_ESTATE after start;
 * -ENOMEM. */
SNAPPROF_API int snapprof_profiler_add_builder(snapprof_profiler_t *profiler,
                                               snapprof_builder_t *builder);

/* Starts sampling on the shared sampling thread. A profiler starts once:
 * a second start returns SNAPPROF_ESTATE. -EINVAL when profiler is NULL.
 * Fails with SNAPPROF_ESIGNAL when
 * the signal cannot be installed, with the error of a builder's
 * xOnProfileStarted (builders are started in the order they were added;
 * those after the one that failed are not called), with -ENOMEM, or with
 * -EAGAIN when the sampling thread cannot be created.
 *
 * A start that fails leaves the profiler as it was, so it may be retried
 * or given other unwinders first: the default unwinders it added are
 * removed again. Builders whose xOnProfileStarted already ran are not told
 * (no sample reached them, and their xOnProfileCompleted runs only for a
 * profile that ran); a retry calls it again. The one thing that stays is
 * the signal handler, which is process-wide and installed once for the
 * life of the process (it passes on any signal that is not ours). */
SNAPPROF_API int snapprof_profiler_start(snapprof_profiler_t *profiler);

/* Stops sampling and returns after every builder's xOnProfileCompleted has
 * run; returns the first error a builder reported, else 0. Stopping a
 * profiler that already completed (duration or sample cap reached) waits for
 * that completion and returns its result. Stop without start returns
 * SNAPPROF_ESTATE; -EINVAL when profiler is NULL. */
SNAPPROF_API int snapprof_profiler_stop(snapprof_profiler_t *profiler);

/* Writes the profile collected so far while sampling goes on (or, after the
 * profile completed, writes it once more): every builder's
 * xOnProfileCompleted runs again with the counters so far. Sampling pauses
 * while the builders write. Returns the first error a builder reported, else
 * 0; SNAPPROF_ESTATE before start; -EINVAL when profiler is NULL.
 * Builders must accept more than one
 * completion (the pprof builder does: a failed write loses nothing). */
SNAPPROF_API int snapprof_profiler_flush(snapprof_profiler_t *profiler);

/* The most builders attached to one profiler at once
 * (snapprof_profiler_attach_builder()). Added in 0.7.0. */
#define SNAPPROF_ATTACHED_MAX 16

/* Attaches a builder to a running profiler, for a stretch of it (a
 * rolling profile's interval, one request of an HTTP endpoint): from now
 * on builder receives every sample the profiler's own builders receive,
 * with the same weights, until snapprof_profiler_detach_builder(). The
 * threads keep their one trigger each, however many builders are attached.
 * Its xOnProfileStarted runs during this call, with an info whose start
 * time is now (start_time_ns, start_mono_ns). Attached before
 * snapprof_profiler_start(), it starts with the profile (its
 * xOnProfileStarted runs there, with the profile's info), so that a
 * rolling profile's first interval misses nothing.
 *
 * Boundaries. A sample belongs to every builder attached when it is
 * delivered, and this call first delivers what the threads' capture slots
 * hold and each thread's "[kernel and unsampled]" remainder so far to the
 * builders attached before it (the remainders are cumulative per thread,
 * so each builder gets its own stretch's). The CPU total a builder gets
 * for a thread is then the thread's CPU clock over the stretch, exactly
 * when the trigger is a CPU-clock one, up to one sample at each end: a
 * capture taken while the boundary reads the clocks stands for CPU time
 * before the boundary but is delivered after it, and the next stretch's
 * remainder is smaller by as much (a perf period is at most 1.5 intervals).
 * Stretches that follow each other without a gap
 * (snapprof_profiler_swap_builder()) add up to the profile's builders'
 * totals exactly, sample for sample. With the handshake trigger a
 * stretch's first sample of a thread weighs its CPU time since the
 * thread's previous sample. With params.arm_on_demand the first builder
 * attached arms the threads (before its boundary) and the last one
 * detached disarms them (before its end).
 *
 * The call unwinds the captures waiting in the slots on the calling
 * thread. Ownership stays with the caller (also when the call fails); do
 * not destroy builder while it is attached. Any thread, not from a builder
 * callback, concurrently with sampling and with other attach and detach
 * calls. Returns 0; -EINVAL (profiler or builder NULL); SNAPPROF_ESTATE
 * (the profile is completing or completed);
 * -EEXIST (builder is one of the profiler's builders already); -ENOSPC
 * (SNAPPROF_ATTACHED_MAX attached already); or the nonzero return of its
 * xOnProfileStarted (then it is not attached). Added in 0.7.0. */
SNAPPROF_API int snapprof_profiler_attach_builder(snapprof_profiler_t *profiler,
                                                  snapprof_builder_t *builder);

/* Detaches a builder attached by snapprof_profiler_attach_builder(): the
 * captures so far and each thread's remainder up to now are delivered (to
 * it and the others), then it is removed and its xOnProfileCompleted runs
 * on this thread, without the profiler's lock (sampling goes on), with
 * duration_ns the attached stretch and the stretch's counters in stats
 * (the counts: samples, failures, CPU time and the like, the stretch's;
 * maxima, percentiles and threads_by_trigger, the profile's so far), and
 * the app frames and events of the stretch. The caller owns builder again
 * when this returns. A profile that completed (stop, its duration) while
 * builder was attached completed it with the others, its stretch ending
 * there; detaching it then only removes it and returns that result.
 * Builders still attached when the profiler is destroyed are destroyed
 * with it. Detached before the profile started, it is only removed
 * (returns 0). Any thread, as attach. Returns the return of its
 * xOnProfileCompleted (0 when it has none); -EINVAL (profiler or builder
 * NULL); -ENOENT (not attached to this profiler). Added in 0.7.0. */
SNAPPROF_API int snapprof_profiler_detach_builder(snapprof_profiler_t *profiler,
                                                  snapprof_builder_t *builder);

/* Removes a builder attached by snapprof_profiler_attach_builder() as
 * snapprof_profiler_detach_builder() does (the captures so far are
 * delivered to the others, and the last one attached on demand parks the
 * triggers), but does not complete it: its xOnProfileCompleted does not
 * run, so a builder that writes a file writes none. For a profile nobody
 * wants any more, such as an HTTP request whose client went away. The
 * caller owns builder again when this returns. Returns 0; -EINVAL
 * (profiler or builder NULL); -ENOENT (not attached to this profiler).
 * Added in 0.7.0. */
SNAPPROF_API int snapprof_profiler_drop_builder(snapprof_profiler_t *profiler,
                                                snapprof_builder_t *builder);

/* Detaches old and attaches builder in its place at one instant: every
 * sample goes to exactly one of them, so consecutive stretches (a rolling
 * profile's intervals) add up to the whole profile sample for sample.
 * builder's xOnProfileStarted runs first, under the profiler's lock; when
 * it fails, nothing changes and its return is returned. Then old completes
 * as snapprof_profiler_detach_builder() completes it, and its result is
 * stored in *old_result when old_result is not NULL. Returns 0 when the
 * swap took place (old is the caller's again, builder is attached);
 * -EINVAL (profiler, old or builder NULL, or old == builder); -ENOENT (old
 * not attached); -EEXIST (builder attached or added already);
 * SNAPPROF_ESTATE (the profile is not running: builder is not attached,
 * old stays until detached). Added in 0.7.0. */
SNAPPROF_API int snapprof_profiler_swap_builder(snapprof_profiler_t *profiler,
                                                snapprof_builder_t *old,
                                                snapprof_builder_t *builder, int *old_result);

/* Writes one of the profile's own builders (added with
 * snapprof_profiler_add_builder()) as it stands now to path, leaving its
 * own output alone: what a flush would write for it, but to another file,
 * and for it alone. The captures and heap samples so far are delivered
 * first (to every builder, as a flush delivers them), then builder's
 * xOnProfileCompleted runs under the profiler's lock (sampling pauses
 * while it writes) with the counters so far and the duration up to now;
 * its own path is put back before the call returns, so its file at the
 * profile's end is what it would have been without this call, sample for
 * sample. For a snapshot of a running heap profile (`/debug/pprof/heap`):
 * the builder must accept more than one completion, as the pprof and
 * heap builders do. Path rules as for snapprof_pprof_builder_create(). Any
 * thread, not from a builder callback. Returns the completion's result;
 * -EINVAL (a NULL argument, or a builder that writes no file of its own);
 * -ENOENT (builder is not one of the profiler's builders); SNAPPROF_ESTATE
 * (the profile is not running); the path errors. Added in 0.7.0. */
SNAPPROF_API int snapprof_profiler_write_builder(snapprof_profiler_t *profiler,
                                                 snapprof_builder_t *builder, const char *path);

/* A pprof profile of the next duration_ns of a running profile, as bytes:
 * what `/debug/pprof/profile?seconds=N` serves, for a host that serves it
 * from its own HTTP stack (as brpc serves gperftools' profiles). Attaches
 * an in-memory pprof builder (snapprof_pprof_builder_create_in_memory()),
 * sleeps until duration_ns has passed or the profile completes (stop, its
 * duration), whichever is first, detaches it and hands over its gzipped
 * perftools.profiles.Profile: *bytes (free() it) and *size. The stretch's
 * samples are the profile's own (one trigger per thread however many
 * collect at once, up to SNAPPROF_ATTACHED_MAX); the profile's own builders
 * lose nothing. Blocks the calling thread; any thread but the profile's
 * own builder callbacks. Returns 0; -EINVAL (a NULL argument, duration_ns
 * 0); SNAPPROF_ESTATE (the profile is not running); -ENOSPC (as
 * attach); -ENOMEM; or the builder's write error. Added in 0.7.0. */
SNAPPROF_API int snapprof_profiler_collect(snapprof_profiler_t *profiler, uint64_t duration_ns,
                                           void **bytes, size_t *size);

/* The size of the first snapprof_stats_t that had a size member (0.4.0),
 * the smallest size snapprof_profiler_get_stats_sized() accepts. */
#define SNAPPROF_STATS_SIZE_MIN (offsetof(snapprof_stats_t, cfi_table_build_ns) + sizeof(uint64_t))

/* Copies the counters so far into the first size bytes of out, size being
 * the caller's sizeof(snapprof_stats_t), and nothing past them: a caller
 * built against an older header (a smaller struct) gets the counters it
 * knows. Bytes of a newer header's struct that this library does not know
 * are zeroed. out->size is set to the bytes that hold counters (the
 * smaller of size and the library's struct). -EINVAL when profiler or out
 * is NULL, or size is 0 or below SNAPPROF_STATS_SIZE_MIN (out untouched).
 * Allowed at any time.
 * Call it through snapprof_profiler_get_stats(). Added in 0.4.0. */
SNAPPROF_API int snapprof_profiler_get_stats_sized(snapprof_profiler_t *profiler,
                                                   snapprof_stats_t *out, size_t size);

/* Copies the counters so far. Allowed at any time. Inline so that the
 * size passed is sizeof(snapprof_stats_t) as the caller was compiled: the
 * caller sets nothing, and cannot get the size wrong. */
static inline int snapprof_profiler_get_stats(snapprof_profiler_t *profiler, snapprof_stats_t *out)
{
    return snapprof_profiler_get_stats_sized(profiler, out, sizeof *out);
}

/* Stops the profiler if it runs (completing its builders) and frees it with
 * its unwinders and builders. NULL is a no-op. */
SNAPPROF_API void snapprof_profiler_destroy(snapprof_profiler_t *profiler);

#ifdef __cplusplus
}
#endif

#endif /* SNAPPROF_SNAPPROF_H */
