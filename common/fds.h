/* The library's own file descriptors: where they go and how many there
 * may be. Internal.
 *
 * The program's fds are the program's: its open, socket, pipe and accept
 * calls must get the numbers and succeed exactly as they would without
 * us. The kernel hands out the lowest free number, so ours sit at the top
 * of the allowed range, where the program's never reach: each new one
 * (a perf event, a cached /proc file) is moved there with F_DUPFD_CLOEXEC
 * from a floor computed from RLIMIT_NOFILE, and the low number the kernel
 * gave it is closed at once.
 *
 * The top is the soft limit, at most FD_TOP (65536, the arm table's fd
 * lookup; a larger limit would also make the kernel grow the fd table to
 * that size). The budget is 1/16 of the top, at most 4096: 64 fds under
 * the common 1024. The program keeps the other 15/16 of its numbers, and
 * a new fd of ours is refused when the lowest free number (the one the
 * kernel just gave us) is within another budget of the floor: the
 * program's own use is then coming near, and ours stop growing before it
 * gets there. A refused perf event means the CPU timer for that thread
 * (no fd: counted in trigger_refused[perf]); a refused /proc file is read
 * once through the low number and closed, not cached.
 *
 * Of the budget, a quarter (at most 16) is the /proc cache's
 * (stack_copier_proc.c), the rest the perf events'.
 *
 * What remains: the moment between the kernel's low number and its close
 * (two system calls): a program's open in another thread then gets the
 * next number instead, and the low one at its next open. The program's
 * set of fds is the same. Files opened only for a moment can be opened
 * where they take none of the program's numbers (fd_private.h, off by
 * default). Raising
 * RLIMIT_NOFILE is not ours to do (the program's children inherit it). */
#ifndef SNAPPROF_COMMON_FDS_H
#define SNAPPROF_COMMON_FDS_H

#include <stdint.h>

typedef enum snapprof__fd_kind {
    SNAPPROF__FD_TRIGGER = 0, /* a perf event (trigger_perf_event.c) */
    SNAPPROF__FD_PROC,        /* a cached /proc file (stack_copier_proc.c) */
    SNAPPROF__FD_KIND_COUNT
} snapprof__fd_kind_t;

/* Moves fd (just opened by us, close-on-exec) to the top of the range.
 * Returns the number to keep (fd has been closed), or -EMFILE when the
 * budget of kind is spent or the program's fds come near ours (fd is left
 * as it was, the caller's to close). Each number returned is released
 * once with snapprof__fd_release(). Thread-safe; not async-signal-safe. */
int snapprof__fd_place(int fd, snapprof__fd_kind_t kind);

/* 0 when kind's share of the budget is spent (or there is no budget):
 * snapprof__fd_place() would refuse any fd of kind now. A caller checks
 * it before it opens one, so that past the budget it does not take a low
 * number even for a moment: with thousands of threads refused a perf
 * event each, those moments met the program's open()s (record with 5000
 * threads: the program's highest fd 908 instead of 905, once in 14).
 * Only a hint: snapprof__fd_place() decides. Thread-safe. */
int snapprof__fd_room(snapprof__fd_kind_t kind);

/* One fd of kind is ours no more: closed after its identity check, or
 * found lost (then also snapprof__fd_lost()). Async-signal-safe. */
void snapprof__fd_release(snapprof__fd_kind_t kind);

/* Counts an fd of ours that the program closed or replaced (found by its
 * identity check: we did not read, ioctl or close it). Async-signal-safe. */
void snapprof__fd_lost(void);

/* Since the process started: fds of ours found lost; the most held at
 * once. */
uint64_t snapprof__fds_lost(void);
uint64_t snapprof__fds_held_max(void);

/* The budget now (all kinds), and the floor ours go at or above. */
void snapprof__fd_budget(int *budget, int *floor);

#endif
