/* Wall mode's blocked threads: their stacks copied from /proc without a
 * signal, what they were doing (state and system call labels, with the
 * x86-64 system call names), and the ticks they sleep through. */
#include "common/label_keys.h"
#include "common/proc_files.h"
#include "sampling_thread/profiler_internal.h"

#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The names of the x86-64 system calls threads wait in. */
static const char *syscall_name(long nr)
{
    static const struct {
        long nr;
        const char *name;
    } names[] = {
        {0, "read"},
        {1, "write"},
        {7, "poll"},
        {17, "pread64"},
        {18, "pwrite64"},
        {19, "readv"},
        {20, "writev"},
        {23, "select"},
        {34, "pause"},
        {35, "nanosleep"},
        {42, "connect"},
        {43, "accept"},
        {44, "sendto"},
        {45, "recvfrom"},
        {46, "sendmsg"},
        {47, "recvmsg"},
        {61, "wait4"},
        {69, "msgsnd"},
        {70, "msgrcv"},
        {72, "fcntl"},
        {73, "flock"},
        {74, "fsync"},
        {75, "fdatasync"},
        {128, "rt_sigtimedwait"},
        {130, "rt_sigsuspend"},
        {202, "futex"},
        {206, "io_setup"},
        {208, "io_getevents"},
        {230, "clock_nanosleep"},
        {232, "epoll_wait"},
        {247, "waitid"},
        {257, "openat"},
        {270, "pselect6"},
        {271, "ppoll"},
        {281, "epoll_pwait"},
        {288, "accept4"},
        {299, "recvmmsg"},
        {307, "sendmmsg"},
        {426, "io_uring_enter"},
        {441, "epoll_pwait2"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].nr == nr)
            return names[i].name;
    return NULL;
}

/* Appends t's state (and system call) labels to out; returns how many. */
size_t snapprof__wall_state_labels(int state, long syscall, snapprof_label_t *out)
{
    static const char *const names[] = {"running", "running", "runnable", "blocked"};
    out[0] = (snapprof_label_t){.key = snapprof__key_state, .str = names[state]};
    if (state != WALL_STATE_BLOCKED)
        return 1;
    const char *name = syscall_name(syscall);
    if (name)
        out[1] = (snapprof_label_t){.key = snapprof__key_syscall, .str = name};
    else
        out[1] = (snapprof_label_t){.key = snapprof__key_syscall, .num = syscall};
    return 2;
}

/* ------------------------------------------------------------------------ */
/* Threads, running or blocked, as /proc says                              */
/* ------------------------------------------------------------------------ */

/* Whether the kernel says tid is running or runnable ('R' in its stat
 * line); a thread we cannot ask counts as running. */
int snapprof__thread_running(pid_t tid)
{
    int state = snapprof__proc_task_state(tid);
    return state < 0 || state == 'R'; /* unreadable: taken as running */
}

/* Wall mode: whether t, which is not blocked, spent the time since its
 * previous look mostly on a CPU (running) or mostly waiting for one
 * (runnable), as its schedstat says; running when that cannot be read. */
int snapprof__running_or_runnable(snapprof__target_t *t)
{
    uint64_t run, wait;
    if (snapprof__proc_schedstat_read(t->thread->tid, &run, &wait) != 0)
        return WALL_STATE_RUNNING;
    int waited = wait - t->sched_wait > run - t->sched_run;
    t->sched_run = run;
    t->sched_wait = wait;
    return waited ? WALL_STATE_RUNNABLE : WALL_STATE_RUNNING;
}

/* Wall mode: t's previous stack again, for a tick it spent where it was. */
void snapprof__deliver_previous(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now)
{
    if (t->prev_count == 0) {
        /* No stack yet (a trigger's first capture is still to come): the
         * tick's wall time goes with t's first sample. */
        t->wall_unplaced_ticks += 1 + snapprof__wall_owed(p, t, now);
        return;
    }
    snapprof__deliver(p, t, t->prev, t->prev_count, t->prev_flags | SNAPPROF_SAMPLE_REUSED, now, 0,
                      t->prev_labels);
    p->stats.samples_reused++;
}

/* Wall mode: /proc could not say where t is (rc: the negative errno of the
 * read of its syscall file, not -ESRCH). Short of descriptors or memory
 * (the program's own files took them): this tick only, counted. Otherwise
 * (not mounted, or refused) for good: said once in the stats. Either way a
 * sleeping thread keeps its last stack rather than be woken by a signal.
 * Returns 1 when it sleeps (its last stack delivered again), 0 when it
 * runs (a running one is signalled or, armed, has its captures). Lock
 * held. */
static int proc_refused(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now, int rc)
{
    if (rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM)
        p->stats.wall_proc_transient++;
    else
        p->stats.wall_proc_errno = -rc;
    if (snapprof__thread_running(t->thread->tid))
        return 0;
    snapprof__deliver_previous(p, t, now);
    return 1;
}

/* Wall mode, SNAPPROF_WALL_BLOCKED_PROC: samples t without a signal if it
 * is blocked in a system call. cpu0 is its CPU clock, read just before;
 * seq0 its arm's schedule sequence, read before that (NULL when it has
 * none). With the perf trigger cpu0 may be NULL (not read: a system call,
 * 0.2-1.2 us on these VMs); then seq0 alone checks the copy, the sample
 * carries wall time only (the thread's CPU time is in its trigger's
 * samples) and the CPU clock fields stay as they are. Returns 1 when t is
 * dealt with (sampled, or a counted failure), 0 when it runs or ran while
 * its stack was read (the caller signals it or, armed, has its captures),
 * and -1, only without cpu0, when /proc says it is gone: the caller's
 * usual look (its clock first) ends it. Lock held. */
int snapprof__sample_blocked(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now,
                             const uint64_t *cpu0, const uint32_t *seq0)
{
    struct snapprof_thread *th = t->thread;
    uint64_t cpu1;
    snapprof__blocked_t b;
    int rc = p->stats.wall_proc_errno ? -p->stats.wall_proc_errno
                                      : snapprof__proc_blocked_read(th->tid, &b);
    if (rc == 0)
        return 0;
    if (rc == -ESRCH) {
        if (!cpu0)
            return -1;
        snapprof__fail(p, SNAPPROF_FAIL_THREAD_EXITED);
        t->dead = 1;
        return 1;
    }
    if (rc < 0)
        return proc_refused(p, t, now, rc);
    /* cpu0, the caller's read of its CPU clock, came before the /proc read:
     * if the clock moved by the end of the copy, the thread ran somewhere
     * in between and its stack may have changed under the copy. If it did
     * not move, the thread never ran (its clock counts kernel time too), so
     * its system call, sp and pc are still the ones read: no second look. */
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason;
    int crc = snapprof__proc_copy_blocked(p->pid, th, &b, p->buffer, p->buffer_size, &res, &reason);
    if (crc > 0) {
        /* process_vm_readv refused (seccomp): /proc can say where threads
         * wait but not what their stacks hold, which is /proc refused for
         * good: sleepers keep their last stack. */
        return proc_refused(p, t, now, -crc);
    }
    if (crc != 0) {
        snapprof__fail(p, reason);
        /* Without cpu0: a thread that exited ran to exit, so it was
         * scheduled in since seq0 was read, is looked at again next tick,
         * and is found gone then. */
        if (cpu0 && reason == SNAPPROF_FAIL_THREAD_EXITED &&
            snapprof__thread_cpu_ns(th->tid, &cpu1) != 0)
            t->dead = 1;
        return 1;
    }
    /* -- Python frames (params.python): the interpreter frames the
     * thread waits in, read like its stack, before the check below, which
     * covers both. -- */
    if (p->python) {
        snapprof__py_capture_t *py =
            (snapprof__py_capture_t *)((uint8_t *)p->labels + SNAPPROF__PY_EXTRA_OFFSET);
        snapprof__python_refresh(0);
        snapprof__python_capture_blocked(py, th->tid);
        if ((py->status & SNAPPROF__PY_NO_STATE) && p->py_forced_tick != p->stats.ticks) {
            /* A thread that blocked within 10 ms of its start is not in
             * the table yet, and a blocked thread is read again only once
             * it runs: read the interpreter's thread list now (at most
             * once a tick: a native thread has no state to find). */
            p->py_forced_tick = p->stats.ticks;
            snapprof__python_refresh(1);
            snapprof__python_capture_blocked(py, th->tid);
        }
    }
    /* With its arm's schedule sequence, read before cpu0 (or the /proc
     * read): unchanged, the thread was not scheduled in since, so it did
     * not run during the copy (found blocked, it can run again only once
     * scheduled in). That saves reading the clock again. */
    uint32_t seq1;
    int moved = seq0 ? snapprof__trigger_sched_seq(t->arm, &seq1) != 0 || seq1 != *seq0
                     : snapprof__thread_cpu_ns(th->tid, &cpu1) != 0 || cpu1 != *cpu0;
    if (moved) {
        /* It ran while its stack was read: the copy may be torn. */
        p->stats.wall_copy_raced++;
        return 0;
    }
    t->wall_state = WALL_STATE_BLOCKED;
    t->wall_syscall = b.nr;
    /* Its labels: the process's (a thread's own labels live where only its
     * handler can read them safely). */
    snapprof__labels_capture(p->labels);
    /* An armed thread's CPU time is in its trigger's samples. */
    uint64_t cpu_ns = 0;
    if (cpu0) {
        uint64_t since = snapprof__cpu_placed(t);
        res.cpu_ns = *cpu0;
        if (!t->arm && *cpu0 >= since)
            cpu_ns = *cpu0 - since;
    }
    snapprof__unwind_and_deliver(p, t, &res, p->buffer, p->labels, cpu_ns, 1, 0);
    p->stats.samples_blocked++;
    if (cpu0) {
        t->cpu_at_sample = *cpu0;
        t->cpu_after = *cpu0;
        t->cpu_last = *cpu0;
        t->sampled = 1;
    }
    return 1;
}

/* Wall mode with a perf trigger: whether t, found blocked (and sampled) at
 * an earlier tick, which is what blocked_seq_valid says, has not been
 * scheduled in since (seq: its arm's schedule sequence now). Then it is
 * still in the same wait with the same stack, and neither its CPU clock
 * nor /proc need be read. It cannot have exited either: a thread runs to
 * exit. Lock held. */
int snapprof__still_blocked(const snapprof__target_t *t, uint32_t seq)
{
    return t->blocked_seq_valid && seq == t->blocked_seq;
}

/* Wall mode with a CPU-clock trigger (wall_by_triggers): t's trigger
 * captures it while it runs; each tick gives it one wall sample without a
 * signal: from /proc if it is blocked, else its latest capture's stack.
 * cpu_now is its CPU clock as snapprof__check_armed() just read it (one read per
 * tick: on these machines a thread's clock is a 1.2 us system call, most
 * of what a reused sample costs). runs: /proc said just now that it runs.
 * Lock held. */
void snapprof__wall_tick_armed(snapprof_profiler_t *p, snapprof__target_t *t, uint64_t now,
                               uint64_t cpu_now, const uint32_t *seq, int runs)
{
    if (runs) { /* snapprof__sample_blocked() just found it so */
        t->wall_state = snapprof__running_or_runnable(t);
        snapprof__deliver_previous(p, t, now);
        return;
    }
    if (t->wall_state == WALL_STATE_BLOCKED && t->sampled && cpu_now == t->cpu_after) {
        /* Its clock stood still since the copy: still in the same wait.
         * Any CPU time may have taken it to another one. */
        snapprof__deliver_previous(p, t, now);
        return;
    }
    if (snapprof__sample_blocked(p, t, now, &cpu_now, seq))
        return;
    t->wall_state = snapprof__running_or_runnable(t);
    snapprof__deliver_previous(p, t, now);
}
