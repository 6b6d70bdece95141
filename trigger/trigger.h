/* Triggers: what decides when a thread's stack is captured. Internal.
 *
 * A CPU-clock trigger makes the kernel signal a thread every period of that
 * thread's own CPU time; the thread's signal handler then captures itself
 * into a capture slot (stack_copier_slots.h) and goes on. Two kinds, best
 * first: a per-thread perf CPU-clock event (trigger_perf_event.c) and a
 * per-thread POSIX CPU-time timer (trigger_cpu_timer.c). The third kind,
 * the sampling thread's handshake, needs no arm: it is the stack copier's
 * request and wait (stack_copier_signal.c).
 *
 * An arm is one thread's trigger. Arms live in one process-wide table that
 * is never freed, so a signal that arrives late can always look its arm up
 * safely; the arm's state word says whether it is still in force:
 *   FREE -> ARMED (sampling side, when the kernel object is made);
 *   ARMED -> BUSY -> ARMED (the thread's handler, around a capture);
 *   ARMED -> OFF (sampling side, to disarm: it waits out a BUSY handler),
 *   then the kernel object is closed and the arm goes back to FREE.
 * The signal is the profile's signal (params.signal), shared with the
 * handshake; the handler tells the three apart by si_code (SI_QUEUE: a
 * handshake; SI_TIMER: a timer; POLL_IN or POLL_HUP: a perf event's fd).
 *
 * Several profilers may arm one thread with the same signal. A standard
 * signal does not queue: when two of their triggers fire together, one
 * signal stands for both, and the arm it does not name would lose that
 * sample (every time, where the two keep the same phase). So a signal
 * serves every arm of its thread and signal that is due by the thread's
 * CPU clock, and an arm served less than 3/4 of a period ago lets its own
 * signal pass. */
#ifndef SNAPPROF_TRIGGER_H
#define SNAPPROF_TRIGGER_H

#include <snapprof/snapprof.h>

#include "stack_copier/stack_copier_slots.h"

#include <stdatomic.h>
#include <sys/types.h>
#include <time.h>

typedef struct snapprof__arm snapprof__arm_t;

typedef struct snapprof__trigger_ops {
    int version; /* 1 */
    snapprof_trigger_t kind;
    /* -- version 1 -- */
    /* Makes arm->target->tid's kernel object: signo every period_ns of the
     * thread's CPU time, not yet started. Returns 0 or a negative errno.
     * Sampling side. */
    int (*xCreate)(snapprof__arm_t *arm, int signo, uint64_t period_ns);
    /* Starts it (after the arm is ARMED). Returns 0 or a negative errno. */
    int (*xStart)(snapprof__arm_t *arm, uint64_t period_ns);
    /* Re-arms after a capture. RUNS IN THE SIGNAL HANDLER.
     * Async-signal-safe. May be NULL. */
    void (*xRearm)(snapprof__arm_t *arm);
    /* The thread's CPU time so far as the trigger's clock counts it (user
     * and kernel), also after the thread exited where the kernel keeps it.
     * Returns 0 or a negative errno. Sampling side. */
    int (*xReadCpu)(snapprof__arm_t *arm, uint64_t *ns);
    /* Closes the kernel object; no new signal comes from it after this.
     * Sampling side. */
    void (*xDestroy)(snapprof__arm_t *arm);
} snapprof__trigger_ops_t;

enum {
    SNAPPROF__ARM_FREE = 0,
    SNAPPROF__ARM_ARMED = 1,
    SNAPPROF__ARM_BUSY = 2,
    SNAPPROF__ARM_OFF = 3
};

struct snapprof__arm {
    _Atomic uint32_t state;
    uint32_t index, gen; /* gen changes each time the arm is reused */
    int signo;
    const snapprof__trigger_ops_t *ops;
    int fd; /* perf event: a number at the top of the range (common/fds.h) */
    /* The perf event's id (PERF_EVENT_IOC_ID), asked for before every use
     * of fd: the program may have closed or replaced it. */
    uint64_t event_id;
    /* Set when fd was found not to be the event's any more: it is never
     * used again, nor closed (trigger_perf_event.c). Atomic: the handler
     * and the sampling side's watchdog may both set it. */
    _Atomic int fd_lost;
    /* The perf event's first page (struct perf_event_mmap_page), mapped
     * read-only at creation (NULL when the mmap was refused). Its offset
     * is the event's count, its lock word changes each time the kernel
     * schedules the thread in. It keeps the event alive after the program
     * closed fd. Not inherited by a forked child (the kernel maps it
     * VM_DONTCOPY). */
    const volatile void *page;
    unsigned flags; /* SNAPPROF__ARM_* asked for */
    timer_t timer;  /* POSIX timer */
    int has_timer;
    /* The thread's CPU time until the first signal: one period, or less
     * where the trigger spreads its first expiry (set by xStart). */
    uint64_t first_period_ns;
    uint64_t period_ns; /* the profile's interval: the mean period */
    /* The period in force, which a signal stands for: period_ns, or the
     * perf event's current one. Set when armed; then only the thread's
     * handler touches it, while the arm is BUSY. */
    uint64_t cur_period_ns;
    /* How the perf event's periods vary (trigger_perf_event.c). Set by
     * xCreate, before the arm is published; then only the thread's handler
     * touches them, while the arm is BUSY. */
    uint64_t rng;          /* the generator's state */
    uint64_t partner_ns;   /* the period that pairs with the last one drawn, or 0 */
    uint32_t until_change; /* overflows until the next change; 0: never */
    /* The short first period (draw_first()) while the event still runs
     * it, else 0: the first signal weighs period_ns, and its handler starts
     * a period drawn as the others. */
    uint64_t first_ns;
    /* Set by the handler when the first change failed (the program closed
     * or replaced the fd first): the event keeps the short first period,
     * and the sampling side makes a new one. */
    _Atomic int first_stuck;

    snapprof__capture_pool_t *pool;     /* where captures go */
    snapprof__capture_target_t *target; /* whose captures they are */
    uint32_t next_free;
    /* Arms on one thread (of several profilers) form a ring: next_sib is
     * the next one's index, the arm's own when it is alone. Changed under
     * the table's lock (with tid and linked); the handler walks it and
     * checks each arm it reaches as it checks the one its signal names. */
    _Atomic uint32_t next_sib;
    pid_t tid;
    int linked;
    uint32_t tid_next; /* the next linked arm in its tid's hash bucket */
    /* While the ring has others: the thread's CPU time (by
     * CLOCK_THREAD_CPUTIME_ID) that the arm's captures so far stand for, 0
     * before the first. Only the thread's handler touches it, while the
     * arm is BUSY. */
    uint64_t counted_cpu_ns;
};

extern const snapprof__trigger_ops_t snapprof__trigger_perf_event;
extern const snapprof__trigger_ops_t snapprof__trigger_cpu_timer;

/* Flags of snapprof__trigger_arm(). */
enum {
    /* Keep a word that changes whenever the thread is scheduled in
     * (snapprof__trigger_sched_seq()), where the trigger has one: the perf
     * event's mapped page (which every perf arm maps, for its count, but
     * one made with SNAPPROF__ARM_NO_PAGE). */
    SNAPPROF__ARM_SCHED_SEQ = 1u << 0,
    /* The perf event's first period uniform in (0, interval], its sample
     * weighing the interval (draw_first() in trigger_perf_event.c), for
     * threads armed as they start (snapprof_params_t.short_threads).
     * Without it the first period is drawn as the others. */
    SNAPPROF__ARM_FIRST_SPREAD = 1u << 1,
    /* No mapped page for the perf event until the sampling side maps it
     * (snapprof__trigger_map_page(), at the first tick the thread is still
     * there): meanwhile its count is not read at the end (the thread's own
     * clock at its exit stands in), the event dies with its fd if the
     * program closes it, and there is no schedule word (not with
     * SNAPPROF__ARM_SCHED_SEQ). For threads armed as they start, most of
     * which end before that tick: the unmap at a thread's end flushes the
     * TLB of every CPU that runs the process (an IPI each), 30-40 % of the
     * arming's cost to a 0.4 ms thread on these VMs. Its periods change
     * all the same (an ioctl). */
    SNAPPROF__ARM_NO_PAGE = 1u << 2
};

/* The ops of a CPU-clock trigger kind, or NULL (AUTO, HANDSHAKE). */
const snapprof__trigger_ops_t *snapprof__trigger_ops(snapprof_trigger_t kind);

/* Arms target's thread with ops: captures go to pool every period_ns of its
 * CPU time, signalled with signo. Returns 0 with *out set, or a negative
 * errno (the kernel's refusal, -ENOSPC when the arm table is full). Installs
 * the signal hook on first use. Sampling side. */
int snapprof__trigger_arm(const snapprof__trigger_ops_t *ops, snapprof__capture_pool_t *pool,
                          snapprof__capture_target_t *target, int signo, uint64_t period_ns,
                          unsigned flags, snapprof__arm_t **out);

/* Reads the arm's schedule sequence into *seq: a word the kernel changes
 * each time it schedules the thread in. Two equal reads mean the thread
 * was not scheduled in between them, so a thread known to be off its CPU
 * after the first read has not run since (without a system call: the
 * thread's CPU clock costs one). Returns 0, or -1 where the arm has no
 * such word (not a perf event, not asked for, or its mmap failed).
 * Sampling side. */
int snapprof__trigger_sched_seq(const snapprof__arm_t *arm, uint32_t *seq);

/* Maps the page of an arm's perf event made with SNAPPROF__ARM_NO_PAGE,
 * for a thread that outlived the sampler's first tick: from then on its
 * event is kept alive by the page if the program closes the fd, and its
 * count is read at its end, as a mapped arm's are. Tried once (the flag is
 * cleared). Returns 0 (mapped, or nothing to do), -EBADF when the fd is no
 * longer ours, or mmap's -errno. Sampling side, while nothing else
 * disarms the arm (the profiler's lock): the handler never reads the
 * page. */
int snapprof__trigger_map_page(snapprof__arm_t *arm);

/* Whether arm's perf event fd was closed or replaced by the program (it
 * asks the kernel: one ioctl). 0 for an arm without an fd. Sampling side. */
int snapprof__trigger_fd_lost(snapprof__arm_t *arm);

/* Disarms: waits for a capture in progress, stops the kernel object and
 * frees the arm. Reads the trigger's final CPU count into *cpu_ns first
 * (left as it is when it cannot be read). A capture whose thread is gone
 * (it ended inside the handler) is not waited for: counted in
 * snapprof__trigger_died_busy(). Sampling side. */
void snapprof__trigger_disarm(snapprof__arm_t *arm, uint64_t *cpu_ns);

/* Since the process started: arms a disarm found BUSY with their thread
 * gone. */
uint64_t snapprof__trigger_died_busy(void);

/* The signal hook (snapprof__signal_hook_fn) that dispatches a trigger's
 * signal to its arm. RUNS IN THE SIGNAL HANDLER. Async-signal-safe. */
int snapprof__trigger_on_signal(int signo, siginfo_t *info, void *uc);

/* The payload a timer's signal carries for arm a (the arm's index and
 * generation, under a tag), which the hook checks. */
uint64_t snapprof__trigger_timer_payload(const snapprof__arm_t *a);

/* Installs the signal hook (snapprof__trigger_on_signal) if no arm has. */
void snapprof__trigger_install_hook(void);

/* The process-wide CPU timer for threads not yet armed
 * (trigger_process.c, snapprof_params_t.unarmed_timer). One profile at a
 * time owns it. */
typedef struct snapprof__process_timer {
    snapprof__capture_pool_t *pool; /* where captures go */
    uint64_t period_ns;
    int signo;
    pid_t pid; /* the process that made the timer */
    timer_t timer;
    int has_timer;
    _Atomic int on;            /* cleared first at stop: handlers then leave */
    _Atomic int users;         /* handlers inside, on any thread */
    _Atomic uint64_t captured; /* signals on a thread not yet armed: captured */
    _Atomic uint64_t passed;   /* signals on another thread: dropped */
} snapprof__process_timer_t;

/* Whether a kernel release (uname -r) delivers a process timer's signal to
 * the thread that was running (Linux 6.4 and later). */
int snapprof__process_timer_kernel_ok(const char *release);

/* Starts pt: signo every period_ns of the process's CPU time, captures of
 * threads not yet armed into pool. Returns 0, -ENOTSUP on a kernel before
 * 6.4, -EBUSY when another profile has the timer, or the kernel's refusal.
 * Sampling side. */
int snapprof__process_timer_start(snapprof__process_timer_t *pt, snapprof__capture_pool_t *pool,
                                  int signo, uint64_t period_ns);

/* The signal of the process-wide timer in force, else 0. A thread of
 * snapprof's that blocks every signal (the sampling thread) unblocks this
 * one while it is in force: when such a thread is running as the timer
 * expires, the kernel sends the signal to another thread, which may be a
 * thread of the program's asleep in a system call, cut short with EINTR
 * (0-5 naps of 1 ms a run in trigger_unarmed_timer before). */
int snapprof__process_timer_signo(void);

/* Waits until no handler is inside pt: one that found a thread's
 * unarmed_ct before it was cleared has published its capture. Sampling
 * side. */
void snapprof__process_timer_quiesce(snapprof__process_timer_t *pt);

/* Stops and deletes the timer (if started) and waits out its handlers.
 * Sampling side. */
void snapprof__process_timer_stop(snapprof__process_timer_t *pt);

/* The process timer's part of snapprof__trigger_on_signal(): returns 0
 * when the signal is not the process timer's. RUNS IN THE SIGNAL HANDLER.
 * Async-signal-safe. */
int snapprof__process_timer_on_signal(const siginfo_t *info, const ucontext_t *uc);

/* Test seams (tests/README.md, "Test seams"). xArmRefused, when set, is
 * asked before each arm of a thread with kind: a positive errno makes that
 * arm fail with it, as the kernel refusing the event or timer would (0:
 * arm). Sampling side. */
typedef struct snapprof__trigger_seams {
    int (*xArmRefused)(void *user_data, snapprof_trigger_t kind);
    void *user_data;
} snapprof__trigger_seams_t;

/* Installs seams (NULL: none) for the arms that start after; *seams must
 * stay valid until the next call. */
void snapprof__trigger_set_seams(const snapprof__trigger_seams_t *seams);

#endif
