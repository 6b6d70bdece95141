/* snapprof JIT support: where generated code lives, what it is called and
 * how its frames are laid out, so that stacks through it unwind and name.
 *
 * A JIT reports its code regions as V8's code-event observers do: creation
 * (register), move, deletion (unregister). Each region becomes a module of
 * kind SNAPPROF_MODULE_JIT in the process-wide module cache; frames in it are
 * SNAPPROF_FRAME_JIT frames named after the region, whichever unwinder found
 * them. The JIT unwinder (snapprof_jit_unwinder_create) walks such frames by
 * the region's frame layout and hands the first caller outside JIT code back
 * to the native unwinders, so native -> JIT -> native -> JIT stacks come out
 * whole. Code that is not registered is named from the perf map convention,
 * /tmp/perf-<pid>.map, when the JIT writes one.
 *
 * Thread and signal safety: every function here may be called from any
 * thread, also while profilers run, but none from a signal handler (they
 * allocate and take a mutex that only other writers hold). The sampler never
 * blocks them and they never wait for it: the sampler reads an immutable
 * snapshot of the regions that writers replace copy-on-write.
 *
 * Names given to the API are copied. Region entries are never freed: a frame
 * that points at a region stays sound after the region is unregistered. A
 * sample is attributed to the region that was registered when its stack was
 * copied, also when it is unwound later, so code that is unregistered and
 * replaced at the same address is never shown under the old name in newer
 * samples (nor the new name in older ones, within the last 1024 regions that
 * went away). The cost: every region registered in the life of the process
 * keeps about 100 bytes plus its name.
 */
#ifndef SNAPPROF_JIT_H
#define SNAPPROF_JIT_H

#include <snapprof/snapprof.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Frame layouts                                                            */
/* ------------------------------------------------------------------------ */

typedef enum {
    /* The standard prologue, push rbp; mov rbp, rsp: the caller's rbp is
     * saved at [rbp] and the return address at [rbp + 8]. V8, LuaJIT frames. */
    SNAPPROF_JIT_LAYOUT_FRAME_POINTER = 0,
    /* No frame pointer: in the function's body rsp stays put, the return
     * address is at [rsp + return_address_offset] and the caller's rsp is
     * rsp + frame_size. rbp is either left alone or saved at
     * [rsp + saved_fp_offset]. A sample in the prologue or epilogue (before
     * rsp reaches its body value, after it left it) loses its caller. */
    SNAPPROF_JIT_LAYOUT_FIXED_FRAME = 1,
    /* CPython's perf trampolines (python -X perf, Python/asm_trampoline.S),
     * told apart by their size: `sub $8,%rsp; call *%rcx; add $8,%rsp;
     * ret` (11 bytes: 3.12, 3.13) and the frame-pointer form of later
     * versions, `push %rbp; mov %rsp,%rbp; call *%rcx; pop %rbp; ret` (8
     * bytes), each also with a leading endbr64 (15 and 12 bytes). The frame is known at every
     * instruction, so a sample at the entry or the ret keeps its caller; a
     * caller frame must be the return site of the call, or the walk stops
     * with an "[unwind error]" frame. The region must be one trampoline,
     * of one of those sizes. */
    SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE = 2
} snapprof_jit_layout_kind_t;

/* saved_fp_offset of a fixed frame that never touches rbp. */
#define SNAPPROF_JIT_FP_UNCHANGED (-1)

typedef struct snapprof_jit_layout {
    snapprof_jit_layout_kind_t kind;
    /* SNAPPROF_JIT_LAYOUT_FIXED_FRAME only: */
    uint32_t frame_size;            /* rsp in the body + frame_size = caller's rsp */
    uint32_t return_address_offset; /* usually frame_size - 8 */
    int32_t saved_fp_offset;        /* or SNAPPROF_JIT_FP_UNCHANGED */
} snapprof_jit_layout_t;

/* Fills *layout with the frame-pointer layout. Any thread. */
SNAPPROF_API void snapprof_jit_layout_init_frame_pointer(snapprof_jit_layout_t *layout);

/* Fills *layout with a fixed-frame layout whose code leaves rbp alone (set
 * saved_fp_offset afterwards if it saves rbp). Any thread. */
SNAPPROF_API void snapprof_jit_layout_init_fixed(snapprof_jit_layout_t *layout, uint32_t frame_size,
                                                 uint32_t return_address_offset);

/* Fills *layout with the layout of CPython's perf trampolines. Any thread.
 * */
SNAPPROF_API void snapprof_jit_layout_init_cpython(snapprof_jit_layout_t *layout);

/* ------------------------------------------------------------------------ */
/* Code regions                                                             */
/* ------------------------------------------------------------------------ */

/* Registers [start, start + size) as JIT code called name, laid out as
 * layout (NULL: frame pointer). name is copied. Registered regions must not
 * overlap: unregister (or move) the old code first. Returns 0, -EINVAL (size
 * 0, a range that wraps, NULL name, a bad layout, a CPython trampoline
 * layout for a size no trampoline has), -EEXIST (overlaps a
 * registered region) or -ENOMEM. Any thread, not from a signal handler. */
SNAPPROF_API int snapprof_jit_region_register(uintptr_t start, size_t size, const char *name,
                                              const snapprof_jit_layout_t *layout);

/* The region that started at from now starts at to (a moving collector
 * moved the code), with the same size, name and layout. Frames taken before
 * the move keep the old address. Returns 0, -ENOENT (no region starts at
 * from), -EEXIST (the new place overlaps another region), -EINVAL (the
 * region would wrap past the end of the address space at to) or -ENOMEM.
 * Any thread, not from a signal handler. */
SNAPPROF_API int snapprof_jit_region_move(uintptr_t from, uintptr_t to);

/* The code of the region that starts at start is gone; its memory may be
 * reused at once. Returns 0 or -ENOENT. Any thread, not from a signal
 * handler. */
SNAPPROF_API int snapprof_jit_region_unregister(uintptr_t start);

/* ------------------------------------------------------------------------ */
/* Perf maps                                                                */
/* ------------------------------------------------------------------------ */

/* Code that no region covers is looked up in a perf map: lines
 * "START SIZE name" (START and SIZE in hex, 0x optional), a later line
 * replacing earlier ones it overlaps. The file is read when an address no
 * loaded object holds is looked up, and again on such a miss when it has
 * grown (checked at most once per millisecond; a lookup that finds perf map
 * code checks every 10 ms, for lines that replace it). It is read up to its
 * last newline, so a line being written is read once complete. Bad lines
 * are skipped and counted.
 *
 * Selects the file (NULL: /tmp/perf-<pid>.map, the default; "": perf maps
 * are not read) and the default layout of its code (NULL: frame pointer),
 * which lines no prefix rule (below) matches get. Regions read from the
 * previous file are dropped (frames that point at them stay sound). path is
 * copied. Returns 0, -EINVAL (a bad layout, as for
 * snapprof_jit_region_register()) or -ENOMEM. Any thread, not from a
 * signal handler. */
SNAPPROF_API int snapprof_jit_perf_map_configure(const char *path,
                                                 const snapprof_jit_layout_t *layout);

/* Perf map lines whose name starts with prefix get layout; NULL removes the
 * rule for prefix (its lines get the default again). The longest prefix
 * that matches wins; "" is the default itself (NULL: frame pointer), as
 * snapprof_jit_perf_map_configure() sets it. Built in: "py::" (the names
 * CPython gives its perf trampolines) gets SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE,
 * so `python -X perf` needs no setting; set "py::" to frame pointer to turn
 * that off. A line that a CPython trampoline rule matches but whose size no
 * trampoline has gets the default layout instead (or frame pointer, when
 * the default is the CPython layout). The perf map is read again from its
 * start with the new rules. At most SNAPPROF_JIT_PERF_MAP_RULES_MAX rules
 * besides the default; prefixes of at most 63 bytes. Returns 0, -EINVAL (a
 * bad layout, a prefix too long or NULL), -ENOSPC (too many rules) or
 * -ENOMEM. Any thread, not from a signal handler. Added in 0.6.0. */
#define SNAPPROF_JIT_PERF_MAP_RULES_MAX 16
SNAPPROF_API int snapprof_jit_perf_map_set_layout(const char *prefix,
                                                  const snapprof_jit_layout_t *layout);

/* ------------------------------------------------------------------------ */
/* Statistics                                                               */
/* ------------------------------------------------------------------------ */

typedef struct snapprof_jit_stats {
    uint64_t regions_live;         /* registered through the API now */
    uint64_t regions_registered;   /* successful register calls */
    uint64_t regions_unregistered; /* successful unregister calls */
    uint64_t regions_moved;        /* successful move calls */
    uint64_t perf_map_regions;     /* regions from the perf map now */
    uint64_t perf_map_reads;       /* times new perf map lines were read */
    uint64_t perf_map_lines;       /* good lines read */
    uint64_t perf_map_bad_lines;   /* malformed lines skipped */
    uint64_t perf_map_replaced;    /* regions replaced by a later overlapping line */
} snapprof_jit_stats_t;

/* Copies the process-wide JIT counters into *out. Returns 0 or -EINVAL
 * (out NULL).
 * Any thread. */
SNAPPROF_API int snapprof_jit_get_stats(snapprof_jit_stats_t *out);

/* ------------------------------------------------------------------------ */
/* The JIT unwinder                                                         */
/* ------------------------------------------------------------------------ */

/* The JIT unwinder: claims frames in JIT code (registered regions and perf
 * map entries), walks them by their region's layout, and returns
 * UNRECOGNIZED_FRAME with the first caller outside JIT code, its pc, sp and
 * rbp in the context (other callee-saved registers are left as they were),
 * for the native unwinders to go on. Add it to a profiler next to a native
 * unwinder; a profiler given no unwinders uses it already. Any thread; the
 * caller owns *out until it hands it to a profiler. */
SNAPPROF_API int snapprof_jit_unwinder_create(snapprof_unwinder_t **out);

#ifdef __cplusplus
}
#endif

#endif /* SNAPPROF_JIT_H */
