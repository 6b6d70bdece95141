/* Stack copier: stops a target thread with a signal handshake and copies its
 * live stack and registers into a preallocated buffer. Internal.
 *
 * Protocol (one request in flight process-wide, serialised by a mutex on
 * the requesting side):
 *   requester: fill the request, state = seq|PENDING, rt_tgsigqueueinfo()
 *              with a payload naming seq, futex-wait on state with a timeout;
 *   handler:   CAS state seq|PENDING -> seq|COPYING, check the thread,
 *              capture registers and a timestamp, copy the stack,
 *              state = seq|DONE, futex-wake;
 *   requester: on timeout CAS seq|PENDING -> IDLE (a late handler then sees
 *              a stale seq and does nothing, unless a newer request waits
 *              for its own thread: that one it serves, since the kernel
 *              drops a standard signal sent while one is pending); if the
 *              handler already began copying, wait for it to finish.
 * Signals that do not carry our payload go to the previous handler. */
#ifndef SNAPPROF_STACK_COPIER_H
#define SNAPPROF_STACK_COPIER_H

#include <snapprof/unwinder.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/uio.h>

/* A registered target thread (the public snapprof_thread_t). */
struct snapprof_thread {
    atomic_int refs;
    pid_t tid;
    uintptr_t stack_low;  /* lowest valid stack address */
    uintptr_t stack_base; /* one past the highest: where the stack starts */
    int on_thread;        /* registered on the thread itself: its TLS names it */
    atomic_int exited;    /* set when the thread's TLS destructors ran */
    /* Set first thing in its exit destructor, before its TLS lets go of
     * this token: from then on a signal that finds another token (none) in
     * its TLS has reached a thread on its way out, not a recycled tid. */
    atomic_int exiting;
    /* Its CPU clock as it exited (read by itself just before exited is
     * set; 0 if unknown): its whole CPU time once no one can read its clock,
     * where no trigger counted all of it. */
    _Atomic uint64_t cpu_at_exit;
    /* Registered with SNAPPROF_REGISTER_AT_START and not yet added to a
     * profiler: the first one to add it (which clears this) counts its
     * CPU time from 0. */
    atomic_int newborn;
    /* 1 while name has not been read yet (SNAPPROF_REGISTER_AT_START):
     * the sampling side reads it from /proc when it arms the thread, so a
     * thread that exits before then costs no system call for it. Cleared
     * under the sampler lock, like every write of name. */
    atomic_int name_pending;
    char name[16];
    /* While a profile with a process-wide timer (trigger_process.c) has
     * not armed this thread yet: the snapprof__capture_target_t its
     * captures go to, else NULL. Set and cleared by that profile; read by
     * the thread's own signal handler. */
    _Atomic(void *) unarmed_ct;
};

/* The sampling side's own work at capture time, while the thread is
 * stopped in the handler, after its stack is copied (Chromium's
 * StackCopier::Delegate): the profiler runs the unwinders'
 * xOnStackCapture and copies the labels in force into extra, the
 * capture's own area (the request's, or the capture slot's). So the stack
 * copier knows nothing of unwinders or labels. on_capture RUNS IN THE
 * SIGNAL HANDLER and must be async-signal-safe. */
typedef struct snapprof__capture_delegate {
    void (*on_capture)(void *ctx, void *extra);
    void *ctx;
} snapprof__capture_delegate_t;

typedef struct snapprof__copy_request {
    const struct snapprof_thread *thread;
    int signo;
    uint8_t *buffer;     /* page-aligned; NULL: capture registers only */
    size_t buffer_size;  /* bytes */
    uint64_t timeout_ns; /* longest wait for the handler to start */
    /* Called in the handler after the copy, with extra (owned by the
     * requester, like buffer); NULL: nothing more to do. */
    const snapprof__capture_delegate_t *delegate;
    void *extra;
} snapprof__copy_request_t;

typedef struct snapprof__copy_result {
    snapprof_regs_t regs;  /* as captured: live addresses */
    uint64_t timestamp_ns; /* CLOCK_MONOTONIC at handler entry */
    uint64_t cpu_ns;       /* the thread's CPU clock just after the handshake */
    uint64_t pause_ns;     /* handler entry to done */
    uint64_t roundtrip_ns; /* signal sent to handshake done, requester side */
    uintptr_t copy_lo;     /* live address of the first byte copied */
    size_t copy_size;      /* bytes copied */
    int truncated;         /* the stack did not fit in the buffer */
    int foreign;           /* sp was on another stack: a window was copied */
} snapprof__copy_result_t;

/* The most a capture copies of a stack that is not the thread's own
 * (stack_copier_foreign.c): Gecko's first window was 32 KiB, and a
 * goroutine's stack starts at 2-8 KiB. */
#define SNAPPROF__FOREIGN_WINDOW (32u << 10)

/* Copies the stack that sp is on when it is not the thread's own (a
 * goroutine's, a fiber's, an alternate signal stack): from just below sp
 * up to SNAPPROF__FOREIGN_WINDOW bytes (at most buffer_size), as far as
 * the memory is mapped and readable, through process_vm_readv so that the
 * end of a mapping stops the copy instead of faulting. Fills res's copy
 * range and sets res->foreign. Returns 0, or -1 when not even the word at
 * sp could be read (or process_vm_readv is refused). RUNS IN THE SIGNAL
 * HANDLER. Async-signal-safe. */
int snapprof__copy_foreign_stack(uintptr_t sp, uint8_t *buffer, size_t buffer_size,
                                 snapprof__copy_result_t *res);

/* Copies up to size bytes from lo into dst through process_vm_readv on
 * our own pid, one remote iovec per page, so that the copy stops at the
 * first page that cannot be read (unmapped meanwhile by another thread)
 * instead of faulting. Returns the bytes copied (0 when not even lo's page
 * could be), or -1 when process_vm_readv is refused (seccomp, ENOSYS).
 * errno is left as it was. Async-signal-safe (system calls only). */
long snapprof__copy_readable(uint8_t *dst, uintptr_t lo, size_t size);

/* Where the readable run of pages from lo's page stops, looking no
 * further than end: the address of the first page that cannot be read
 * (lo's own when it cannot be), or one at or past end when all can; 0
 * when process_vm_readv is refused (seccomp, ENOSYS). One byte a page,
 * through process_vm_readv on our own pid, so nothing faults. errno is
 * left as it was. Async-signal-safe (system calls only). */
uintptr_t snapprof__readable_until(uintptr_t lo, uintptr_t end);

/* Our pid for process_vm_readv() on ourselves, without a system call but
 * the first in each process (a fork child's of any kind included:
 * stack_copier_foreign.c says how). After such a call failed otherwise
 * than with EFAULT, snapprof__our_pid_again(pid) returns getpid() when it
 * differs from pid (try again with it), else 0. Async-signal-safe. */
pid_t snapprof__our_pid(void);
pid_t snapprof__our_pid_again(pid_t pid);

/* process_vm_readv() on our own pid of remote[0..n) into [dst, dst +
 * size): the bytes read, or -1 with errno (EFAULT: not even the first
 * byte could be read; anything else: the call is refused). The pid is
 * asked again once when the call fails otherwise than with EFAULT (a
 * CLONE_VM child whose parent is gone). Async-signal-safe. */
long snapprof__readv_self(void *dst, size_t size, const struct iovec *remote, int n);

/* Installs the handler for signo once for the life of the process (later
 * calls are no-ops). Returns 0 or SNAPPROF_ESIGNAL. */
int snapprof__stack_copier_install(int signo);

/* 1 while our handler is the one installed for signo, 0 once someone
 * replaced it (raw rt_sigaction, or a host's own sigaction). One system
 * call. Sampler side. */
int snapprof__stack_copier_handler_ours(int signo);

/* Stops req->thread, copies its stack into req->buffer and lets it go.
 * Returns 0, or -1 with *reason set. Never hangs: a handler that does not
 * start within the timeout is a SNAPPROF_FAIL_TIMEOUT. Sampler side. */
int snapprof__stack_copier_copy(const snapprof__copy_request_t *req, snapprof__copy_result_t *res,
                                snapprof_fail_reason_t *reason);

/* After the target resumed (stack_copier_rebase.c): rewrites every
 * register and stack word that points into the copied live range so that
 * it points into the copy, and describes the copy for the unwinders.
 * Sampling side. */
void snapprof__stack_copier_rebase(const snapprof__copy_result_t *res, uint8_t *buffer,
                                   snapprof_regs_t *regs, snapprof_stack_copy_t *stack);

/* Which loop snapprof__rebase_words() runs: the best this CPU has, or one
 * named (the tests compare them word for word). */
typedef enum snapprof__rebase_impl {
    SNAPPROF__REBASE_BEST = 0,
    SNAPPROF__REBASE_SCALAR,
    SNAPPROF__REBASE_AVX2,
} snapprof__rebase_impl_t;

/* Adds delta to each of the n words at words that lies in [lo, lo + size)
 * (compared as w - lo < size, unsigned: the range may wrap), with impl;
 * every implementation gives the same words. words needs only the
 * alignment of a uintptr_t. Returns 0, or -ENOTSUP when this CPU cannot
 * run impl (nothing is changed then). Sampling side; it is never called
 * from a signal handler (the first call asks the CPU what it has). */
int snapprof__rebase_words(uintptr_t *words, size_t n, uintptr_t lo, uintptr_t size,
                           uintptr_t delta, snapprof__rebase_impl_t impl);

/* A thread blocked in a system call, as /proc/self/task/TID/syscall says
 * (stack_copier_proc.c). */
typedef struct snapprof__blocked {
    long nr;          /* the system call's number */
    uintptr_t sp, pc; /* its user stack pointer and program counter */
} snapprof__blocked_t;

/* Reads where thread tid is, from its /proc/self/task/TID/syscall (held
 * open in a small cache of such files, at the top of the fd range, each
 * checked to be still ours before it is read: stack_copier_proc.c).
 * Returns 1 when it is blocked in a system call (*out filled), 0 when it
 * is running or in the kernel for another reason, -ESRCH when it is gone,
 * or another negative errno when the file cannot be read. Sampling side. */
int snapprof__proc_blocked_read(pid_t tid, snapprof__blocked_t *out);

/* Closes the cached /proc files of thread tid (it left the profile). */
void snapprof__proc_forget(pid_t tid);

/* Copies the stack of thread th of process pid (ours: the caller keeps
 * getpid(), a system call), blocked as b says, from b->sp up to its base
 * (at most size bytes: more is truncated) into buffer, with
 * process_vm_readv: memory that went away fails the read, never faults.
 * Fills res as a handshake would, with only pc and sp among the registers
 * (the kernel tells no others). Returns 0, -1 with *reason (the stack went
 * away: SNAPPROF_FAIL_THREAD_EXITED; sp out of range), or a positive errno
 * when process_vm_readv itself was refused (EPERM from a seccomp filter,
 * ENOSYS): no copy of any thread can be made then. The caller checks
 * afterwards that the thread did not run meanwhile. Sampling side. */
int snapprof__proc_copy_blocked(pid_t pid, const struct snapprof_thread *th,
                                const snapprof__blocked_t *b, uint8_t *buffer, size_t size,
                                snapprof__copy_result_t *res, snapprof_fail_reason_t *reason);

/* Reads thread tid's /proc/self/task/TID/schedstat (cached as above):
 * nanoseconds it ran on a CPU and waited on a run queue. Returns 0 or a
 * negative errno. Sampling side. */
int snapprof__proc_schedstat_read(pid_t tid, uint64_t *run_ns, uint64_t *wait_ns);

/* Reads a thread's CPU clock (no signal needed; stack_copier_threads.c).
 * Returns 0 or a negative errno (-EINVAL once the thread is gone). */
int snapprof__thread_cpu_ns(pid_t tid, uint64_t *out);

/* Test seams (tests/README.md, "Test seams"); each member may be NULL.
 * Sampling side, all three.
 * - xProcRefused: asked before each snapprof__proc_blocked_read(); a
 *   positive errno fails the read with it, as a /proc that refuses the
 *   file would (0: read).
 * - xAfterProcCopy: run after each copy of a blocked thread's stack by
 *   snapprof__proc_copy_blocked(), before the caller's check.
 * - xOnThreadCpuRead: told of each snapprof__thread_cpu_ns() call. */
typedef struct snapprof__stack_copier_seams {
    int (*xProcRefused)(void *user_data, pid_t tid);
    void (*xAfterProcCopy)(void *user_data, pid_t tid);
    void (*xOnThreadCpuRead)(void *user_data, pid_t tid);
    void *user_data;
} snapprof__stack_copier_seams_t;

/* Installs seams (NULL: none) for the calls that start after; *seams must
 * stay valid until the next call. snapprof__stack_copier_seams() returns
 * them. */
void snapprof__stack_copier_set_seams(const snapprof__stack_copier_seams_t *seams);
const snapprof__stack_copier_seams_t *snapprof__stack_copier_seams(void);

/* 1 when thread tid blocks signo (its SigBlk in /proc/self/task/TID/status),
 * 0 when it does not or cannot be asked. Sampling side. */
int snapprof__thread_blocks_signal(pid_t tid, int signo);

/* Finds the /proc/self/maps line that holds addr (or, with addr == 0, the
 * "[stack]" line) and returns its range, read with plain system calls
 * (common/proc_files: no malloc, no stdio). Used for stack bounds, here
 * and by the heap sampler's capture. Returns 0 or a negative errno
 * (-ENOENT: no such line). */
int snapprof__find_mapping(uintptr_t addr, uintptr_t *start, uintptr_t *end);

/* Reads a name left for later from /proc/self/task/TID/comm, unless the
 * thread has exited (then it stays empty). Sampling side, sampler lock
 * held (renames write the name under it). */
void snapprof__thread_resolve_name(struct snapprof_thread *t);

/* Takes another reference on a thread token. */
void snapprof__thread_retain(struct snapprof_thread *t);

/* Test seam: nonzero while the calling thread runs our signal handler.
 * Async-signal-safe. */
int snapprof__in_signal_handler(void);

/* Test seam: the tid the request in flight waits for, or 0 when none
 * does. */
pid_t snapprof__stack_copier_pending_tid(void);

/* Test seam: the token registered on the calling thread, or NULL. */
const struct snapprof_thread *snapprof__thread_self(void);

/* Copies n bytes of a live stack (sanitizer builds: word by word, unchecked,
 * since sanitizers poison parts of live stacks). Async-signal-safe. */
void snapprof__copy_live_stack(uint8_t *dst, const uint8_t *src, size_t n);

/* Copies [lo, base) of the thread's own stack into buffer, the innermost
 * buffer_size bytes when it does not fit (res->truncated), and fills res's
 * copy range. Async-signal-safe. */
void snapprof__copy_own_stack(uintptr_t lo, uintptr_t base, uint8_t *buffer, size_t buffer_size,
                              snapprof__copy_result_t *res);

/* The calling thread's tid, read once per thread (and anew after fork).
 * Async-signal-safe. Right after fork only once snapprof__process_ids()
 * (or the handler's install) has run. */
pid_t snapprof__gettid_cached(void);
/* Reads the process ids once and keeps them right across fork(); returns
 * the pid without a system call. Not async-signal-safe (the first call). */
pid_t snapprof__process_ids(void);

/* A hook for the signals that are not handshake requests: returns nonzero
 * when the signal was its own (a thread's CPU-clock trigger), zero to pass
 * it on to the program's previous handler. RUNS IN THE SIGNAL HANDLER.
 * Async-signal-safe. */
typedef int (*snapprof__signal_hook_fn)(int signo, siginfo_t *info, void *uc);

/* Sets the hook, once, before any trigger that needs it is armed. */
void snapprof__stack_copier_set_hook(snapprof__signal_hook_fn hook);

#endif
