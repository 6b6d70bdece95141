/* snapprof heap sampling: where the memory goes, sampled in the same
 * pipeline as the CPU.
 *
 * Allocations are sampled, not traced, by the rule every sampler we measure
 * against uses (Go's MemProfileRate, jemalloc's lg_prof_sample, Chromium's
 * PoissonAllocationSampler, tcmalloc): each thread keeps a byte countdown
 * drawn from an exponential distribution of mean R (a Poisson process over
 * the bytes it allocates); an allocation that takes the countdown to zero
 * or below is sampled and the next countdown is drawn afresh. An
 * allocation of S bytes is so sampled with probability 1 - exp(-S/R),
 * independently of every other, whatever the order of sizes; a thread's
 * first allocation draws its own countdown. R is
 * snapprof_params_t.heap_interval (0, the default, samples nothing).
 *
 * A sampled allocation copies its own thread's live stack into one of the
 * capture slots the CPU samples use, and the sampling thread unwinds it
 * later with the same unwinders and symbolization, and delivers it to the
 * builders as a SNAPPROF_SAMPLE_KIND_HEAP_ALLOC sample (bytes: the size
 * asked for; cpu_ns and wall_ns 0; the thread's labels). The sampled block
 * is kept in a lock-free set of live addresses; its free is delivered as a
 * SNAPPROF_SAMPLE_KIND_HEAP_FREE sample with the allocation's frames, bytes,
 * thread and labels, and the time of the free, always after its
 * allocation. Builders whose ops version is 1 receive neither.
 *
 * Three ways in: the preload's malloc interposition, GOT patching for a
 * program linked against the library, and the two calls below for a
 * program's own pools and arenas (Chromium's allocator observers). The
 * first two call these same functions.
 *
 * Pools whose chunks come from malloc. When the malloc hooks are on
 * (snapprof record --heap, or GOT patching), the pool's chunks are sampled
 * as malloc'd blocks; reporting the pool's pieces with the calls below too
 * counts the same bytes twice. Report one or the other: either leave the
 * pool to the malloc hooks and do not call these, or call these for the
 * pieces and take the chunks where the hooks do not see them, by mmap(2),
 * or by calling malloc for a chunk between snapprof_heap_ignore_begin()
 * and snapprof_heap_ignore_end() on that thread. A piece given back to the
 * pool is a free (snapprof_heap_note_free()); a chunk given back to malloc
 * while pieces of it are still reported live leaves them live in the
 * profile: note their frees first.
 *
 * Thread and signal safety: the functions here may be called from any
 * thread, also one the library never registered and one that is exiting
 * (after its TLS destructors ran), also from inside malloc; they never
 * allocate, never take a lock and never wait. Calls made on a thread
 * while the library's own code runs on it (a builder, the sampling thread,
 * or one of these calls interrupted by a signal whose handler allocates)
 * are ignored. They leave errno as they found it (allocation hooks need
 * not save it around them). They are not async-signal-safe in general: a sampled
 * allocation may read /proc/self/maps once per thread to find the bounds of
 * a stack the library does not know. */
#ifndef SNAPPROF_HEAP_H
#define SNAPPROF_HEAP_H

#include <snapprof/snapprof.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Call after an allocation of size bytes (the size the program asked for,
 * not what the allocator rounded it up to) returned ptr, before ptr can
 * reach another thread (so that its free cannot be noted first). Applies
 * the sampling rule on the calling thread; when sampled, captures the
 * calling thread's stack (its caller's frame is the innermost one
 * delivered) and records the block as live. Cheap when not sampled: one
 * relaxed load while no profiler samples the heap, else a thread-local
 * countdown subtracted and compared.
 *
 * realloc is the caller's business: note_free(old) before it, then
 * note_alloc(new, new_size) after it (a realloc that fails frees nothing:
 * note nothing then). A failed allocation (ptr NULL) is not one: do not
 * call this.
 *
 * Returns 1 when the allocation was sampled and recorded, 0 when it was not
 * (no profiler samples the heap, the countdown did not reach zero, the
 * call was made inside the library's own code, or a sampled allocation
 * was dropped: no free capture slot, the live set full, the stack bounds
 * not found; each counted in the stats), -EINVAL when ptr is NULL. */
SNAPPROF_API int snapprof_heap_note_alloc(void *ptr, size_t size);

/* Call before the block at ptr is freed (free, delete, the old block of a
 * realloc, a piece given back to a pool). When ptr is a sampled block that
 * is still live, records its free. One relaxed load when no live sampled
 * block shares ptr's bucket of a 65536-bucket filter (the common case);
 * else a lookup in a lock-free open-addressing set.
 *
 * If a sampled address is sampled again before its free was noted (the
 * free went another way, or the pool reused the memory without saying so),
 * the older block is taken as freed at the new allocation's time: an
 * address holds one block at a time.
 *
 * Returns 1 when ptr was a sampled live block, 0 when not (ptr NULL
 * included). */
SNAPPROF_API int snapprof_heap_note_free(void *ptr);

/* Makes the calling thread's calls of the two functions above be ignored
 * until the matching snapprof_heap_ignore_end() (pairs nest): for a pool's
 * own chunks taken from malloc while the malloc hooks are on (see "Pools
 * whose chunks come from malloc" above), and for threads of a library's
 * own, whose allocations are not the program's (the preload's helper
 * thread calls begin once as it starts). The library's own threads and
 * builders need no call. Any thread; never allocates. */
SNAPPROF_API void snapprof_heap_ignore_begin(void);
SNAPPROF_API void snapprof_heap_ignore_end(void);

/* ---- GOT patching: the malloc hooks for a linked program ---------------
 *
 * For a program linked against libsnapprof that does not preload
 * libsnapprof-heap.so (and for sanitizer builds, whose runtime owns malloc).
 * Install points the GOT entries (JUMP_SLOT and GLOB_DAT relocations) of
 * malloc, calloc, realloc, reallocarray, free, posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc and the C++ operators new, new[],
 * delete and delete[] (plain, sized, aligned, nothrow) in every loaded
 * module at hooks that call what the entries pointed at and tell the heap
 * sampler, with the preload's fast path (a countdown in TLS). Left alone:
 * libsnapprof's own libraries, the dynamic loader, the vDSO, sanitizer
 * runtimes, and (sanitizer builds only) libc; libc itself is patched
 * otherwise, so its own allocations (strdup, fopen, NSS buffers) are the
 * program's, as with the preload. Entries on full-RELRO pages are written
 * through mprotect(2) and get their page's protection back; where
 * mprotect is refused (seccomp, an LSM) the entry is left alone and
 * counted (mprotect_failed).
 *
 * Modules loaded later (dlopen(), and libc's own loads such as NSS
 * modules) are patched by the sampling thread of a running profiler within
 * a tick of their load (allocations made before, by their constructors
 * for instance, are not seen), and at once by calling install again.
 * Nothing is sampled unless a profiler with a nonzero heap_interval runs:
 * the hooks cost a compare and a subtract until then.
 *
 * Thread and signal safety: any thread, not from a signal handler nor a
 * dl_iterate_phdr() callback (they take a lock of their own and the
 * loader's). Threads inside a hook at uninstall finish their call: the
 * hooks stay mapped (libsnapprof is never unloaded). */

/* Patches the modules loaded now (see above). Returns the number of GOT
 * entries patched by this call (0: nothing new, also on a second call), or:
 * -EEXIST when libsnapprof-heap.so is loaded (its hooks see every
 *  allocation already; nothing is patched, so nothing is counted twice);
 * -ENOSYS on an architecture other than x86-64 and aarch64, or when malloc,
 *  free, calloc or realloc cannot be found;
 * -EPERM when mprotect was refused for every entry that needed it and no
 *  entry points at the hooks. */
SNAPPROF_API int snapprof_heap_hooks_install(void);

/* Writes back what the patched entries held, in the modules still loaded
 * (a module dlclose()d meanwhile is never written: its pages are gone or
 * are another module's; an entry that holds something else than our hook
 * by now is left as it is), and stops looking for new modules. Returns the
 * number of entries restored (0 when not installed). */
SNAPPROF_API int snapprof_heap_hooks_uninstall(void);

/* What the GOT patcher did, for snapprof_heap_hooks_get_stats(). Grows at
 * the end; the caller sets size. */
typedef struct snapprof_heap_hooks_stats {
    size_t size;              /* sizeof(snapprof_heap_hooks_stats_t), set by the caller */
    int installed;            /* 1 between install and uninstall */
    int preloaded;            /* 1 when libsnapprof-heap.so is loaded (install: -EEXIST) */
    uint64_t entries;         /* GOT entries pointing at the hooks, in modules loaded now */
    uint64_t modules;         /* modules with at least one such entry */
    uint64_t scans;           /* looks at every loaded module (install, new modules) */
    uint64_t mprotect_failed; /* entries left alone: mprotect refused */
    uint64_t entries_foreign; /* entries bound to another definition than the global one
                                 (-Bsymbolic, an allocator of the module's own): left alone */
    uint64_t entries_lost;    /* entries left alone: our fixed tables (8192 entries, 1024
                                 modules) were full */
} snapprof_heap_hooks_stats_t;

/* Fills *out (up to out->size bytes). Returns 0, or -EINVAL when out is
 * NULL or out->size is too small to hold size. Any thread. */
SNAPPROF_API int snapprof_heap_hooks_get_stats(snapprof_heap_hooks_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif /* SNAPPROF_HEAP_H */
