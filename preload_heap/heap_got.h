/* The heap hooks for a program that links snapprof instead of preloading
 * libsnapprof-heap.so (issue 27 (b)): the GOT entries of the allocation
 * functions in every loaded module are pointed at hooks of ours, which
 * forward to the functions the entries pointed at and tell the heap
 * sampler (snapprof_heap_note_alloc/free) what came back, as the preload's
 * hooks do (heap_hook_core.h). Internal for now: the integrator makes
 * these two calls public. */
#ifndef SNAPPROF_PRELOAD_HEAP_HEAP_GOT_H
#define SNAPPROF_PRELOAD_HEAP_HEAP_GOT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Patches the JUMP_SLOT and GLOB_DAT relocations of malloc, calloc,
 * realloc, reallocarray, free, posix_memalign, aligned_alloc, memalign,
 * valloc, pvalloc and the C++ operators new and delete in every module
 * loaded now (the program, its libraries, libc; not the dynamic loader,
 * the vDSO or a sanitizer runtime), making full-RELRO pages writable for
 * the write and read-only again. Modules loaded later (dlopen, and libc's
 * own loads such as NSS modules) are noticed by a check that each thread
 * makes at its first hooked allocation and every 1024th after. Calling it
 * again checks at once.
 *
 * Returns the number of GOT entries it patched (0 when there was nothing
 * new), 0 without patching anything when libsnapprof-heap.so is loaded
 * (its hooks already see every allocation, and both would note each one),
 * or a negative errno: -ENOSYS when the allocator cannot be found, -EPERM
 * when mprotect refused for every module that needed it. Any thread; takes
 * a lock of its own and the loader's (dl_iterate_phdr), so never from a
 * signal handler or a dl_iterate_phdr callback. */
int snapprof_heap_hooks_install(void);

/* Puts back the GOT entries it patched in the modules still loaded (a
 * module dlclose()d meanwhile is left alone; an entry that holds something
 * else than our hook by now is left as it is). Returns the number of
 * entries restored. Threads inside a hook finish their call normally: the
 * hooks stay mapped. Same threads and locks as install. */
int snapprof_heap_hooks_uninstall(void);

#ifdef __cplusplus
}
#endif

#endif
