/* Work that opens a file for a moment, done where the program's fd
 * numbers cannot see it. Internal.
 *
 * The kernel gives each new fd the lowest free number of the fd table,
 * and our threads share the program's table. A file we open for a moment
 * (a /proc read; an ELF file mapped to compile its CFI) holds, for those
 * microseconds, the number the program's next open() would have got: that
 * open() gets the next one, and the program's numbers differ from a run
 * without us (record_fds_budget_*: the program's highest fd one higher,
 * about once in seven full runs, from the sampling thread's read of a
 * handshake thread's /proc stat at each tick and its CFI opens of modules
 * met for the first time).
 *
 * A thread can have a table of its own: close_range(0, ~0U,
 * CLOSE_RANGE_UNSHARE) (Linux 5.9) gives the calling thread a new, empty
 * one, while it goes on sharing the memory. So one thread of ours, made at
 * the first call, runs such work for the callers: what it opens is
 * numbered in its own table, and what it reads into memory or maps stays
 * everyone's. Its table starts empty (nothing of the program's is held
 * there: a pipe the program closes still ends).
 *
 * What may run there: work that opens, uses and closes its fds within the
 * call (a mapping made from an fd outlives the fd); that takes no lock a
 * caller may hold; that does not call back into this. Not an fd a caller
 * keeps (a perf event, a cached /proc file: fds.h places those at the top
 * of the range instead).
 *
 * Where the thread cannot be had (pthread_create fails; close_range is
 * refused or unknown: a kernel before 5.9, a seccomp filter, which
 * common/seccomp.h checks first) the work runs on the caller, as it did
 * before, and snapprof__fd_private_errno() says why. In a process made by
 * fork() the thread is made anew at the first call; in one made any other
 * way (vfork(), posix_spawn(), a raw clone()) the work runs on the caller.
 *
 * Not async-signal-safe. Callers are serialised; the work runs on one
 * thread, one call at a time.
 *
 * OFF BY DEFAULT (snapprof__fd_private_set_enabled()): with it on, wall
 * mode with --wall-blocked proc under a load stalled the sampling thread
 * for 0.5-1 s in 6 of 40 runs of `record --wall -- fds_prog dup2` (0 of 40
 * with it off, same build, same load; record_fds_dup2_wall failed once in
 * CI that way): each of its per-tick /proc reads became a hand-off to
 * another thread, which a loaded machine schedules late. Until the
 * frequent reads are kept off it (or cached, as the syscall and schedstat
 * files are), every call runs on its caller, as before. */
#ifndef SNAPPROF_COMMON_FD_PRIVATE_H
#define SNAPPROF_COMMON_FD_PRIVATE_H

#include <stdint.h>

typedef int (*snapprof__fd_private_fn)(void *arg);

/* Runs fn(arg) on the thread with an fd table of its own (on the caller
 * where there is none) and returns what fn returned. */
int snapprof__fd_private_run(snapprof__fd_private_fn fn, void *arg);

/* Turns the thread on (1) or off (0, the default: every call runs on
 * its caller). Any thread, any time. */
void snapprof__fd_private_set_enabled(int on);

/* Called on that thread before its next piece of work (once per hook
 * set): a higher layer's per-thread set-up (the heap sampler's: what the
 * thread allocates is never the program's). */
void snapprof__fd_private_set_thread_hook(void (*hook)(void));

/* 0 while work runs on the private thread (or none was asked for yet);
 * else the errno that kept it from being made (ENOSYS: no close_range;
 * EPERM: refused, or a seccomp filter would kill the process for it; that
 * of pthread_create). */
int snapprof__fd_private_errno(void);

/* How many calls ran on their caller for want of the thread. */
uint64_t snapprof__fd_private_inline_calls(void);

#endif
