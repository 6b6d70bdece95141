/* The system calls a seccomp filter may kill the process for, and whether
 * this process's filter would. Internal.
 *
 * The profiler makes two calls that hardened programs often filter:
 * perf_event_open (the perf trigger) and process_vm_readv (checked reads
 * of our own memory: foreign stacks, heap captures, Python frames, the
 * CFI engine, wall mode). systemd's SystemCallFilter=@system-service
 * leaves out the @debug set, which holds both, and its default action
 * kills the process with SIGSYS: profiled that way, a service died at its
 * first perf_event_open. A filter that fails a call with an errno (Docker's
 * default) is no danger: every caller already takes that failure path.
 *
 * So where the calling thread runs under a filter (the Seccomp line of
 * its /proc status is 2), snapprof__seccomp_check() tries each call once in
 * a child process made for it, which leaves nothing behind: a child the
 * filter kills (or that does not end within a second: a filter that hands
 * the call to a supervisor) marks the call as one never to make, and its
 * callers take their refused path as if it had failed with EPERM: the perf
 * trigger falls back to the CPU timer (trigger_fallback_errno EPERM), the
 * reads fall back as they do under a filter that returns EPERM. In strict
 * mode (1) every call is marked. Without /proc the calls are made, as
 * before.
 *
 * A filter the program installs after a profiler was made is checked by
 * snapprof_seccomp_changed() (public, <snapprof/snapprof.h>), which the
 * program or the preload's prctl() and syscall() interposers call on the
 * installing thread; snapprof_seccomp_changing() before the install holds
 * both calls back (snapprof__seccomp_allowed() answers 0) until then, so
 * that none is made under a filter not yet looked at. Only a call that
 * had passed snapprof__seccomp_allowed() already, and is made in the
 * nanoseconds after, can still meet the new filter unchecked.
 *
 * The child is made by a raw clone() with no exit signal, so that no
 * atfork handler of the program runs and no SIGCHLD reaches it (a program
 * that reaps every child with waitpid(-1) does not see it: only __WALL
 * waits for it). It makes only raw system calls, with SIGSYS set to its
 * default action first, so that a filter that traps (SECCOMP_RET_TRAP)
 * kills the child instead of running the program's SIGSYS handler there.
 * A filter that kills or traps fork-like clone() itself (a browser
 * sandbox) would act on the program's thread: nothing here can know that
 * before trying, and such programs filter the calls above too. */
#ifndef SNAPPROF_COMMON_SECCOMP_H
#define SNAPPROF_COMMON_SECCOMP_H

#include <sys/types.h>
#include <sys/uio.h>

typedef enum snapprof__seccomp_call {
    SNAPPROF__SECCOMP_PERF_EVENT_OPEN = 0,
    SNAPPROF__SECCOMP_PROCESS_VM_READV,
    SNAPPROF__SECCOMP_CLOSE_RANGE, /* fd_private.h: a thread's own fd table */
    SNAPPROF__SECCOMP_CALL_COUNT
} snapprof__seccomp_call_t;

/* Finds out, for the calling thread, which of the calls above its seccomp
 * filter would kill the process for, once per filter: again only when the
 * thread's Seccomp or Seccomp_filters lines changed since the last look.
 * Not async-signal-safe (reads /proc, makes a child process); any thread;
 * serialised by a lock. Called when a profiler is made, on the caller's
 * thread (not when its sampling thread starts: that raced the program's
 * first open(), record_fds_same_numbers); snapprof_seccomp_changed()
 * checks again whatever the lines say. */
void snapprof__seccomp_check(void);

/* 1 once a check has looked at the process's filter (or found it could
 * not): snapprof__seccomp_allowed() answers for the filter from then on;
 * before, it answers 1 for every call. common/fd_private.c makes its
 * thread only then (the check's own /proc read runs on the caller). */
int snapprof__seccomp_checked(void);

/* 1 when the call may be made: no filter, the filter lets it through or
 * fails it with an errno, or nothing was checked yet; 0 when a filter
 * would kill the process for it, or while a filter is being installed
 * (snapprof_seccomp_changing()). Async-signal-safe: two atomic loads. */
int snapprof__seccomp_allowed(snapprof__seccomp_call_t call);

/* process_vm_readv(2) as a raw system call, but -1 with errno EPERM and no
 * call when the filter would kill the process for it. Async-signal-safe. */
ssize_t snapprof__process_vm_readv(pid_t pid, const struct iovec *local, unsigned long nlocal,
                                   const struct iovec *remote, unsigned long nremote);

#endif
