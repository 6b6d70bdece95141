/* Stack copier without a signal: the stack of a thread blocked in a system
 * call, from /proc/self/task/TID/syscall and process_vm_readv(2).
 *
 * While a thread waits in the kernel its user registers are saved and its
 * user stack does not change, so nothing has to stop it: the kernel says
 * where it waits (system call number, user sp and pc) and the stack is read
 * from that sp up to the thread's stack base. The read goes through
 * process_vm_readv on our own pid, never memcpy: the thread may wake, exit
 * and unmap its stack meanwhile, and a read of memory that went away must
 * fail, not fault. The caller checks afterwards that the thread is still in
 * the same wait (its CPU clock unchanged) before it trusts the copy.
 * Sampling side only; nothing here runs in a signal handler. */
#include "common/clock.h"
#include "common/fault.h"
#include "common/fds.h"
#include "common/seccomp.h"
#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* Parses a hexadecimal "0x..." field; returns the text after it or NULL. */
static const char *parse_hex(const char *s, uintptr_t *out)
{
    while (*s == ' ')
        s++;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (end == s || errno != 0)
        return NULL;
    *out = (uintptr_t)v;
    return end;
}

/* ------------------------------------------------------------------------ */
/* The cache of open /proc files                                            */
/* ------------------------------------------------------------------------ */

/* A bounded cache of open /proc/self/task/TID/{syscall,schedstat} files,
 * not one pair per thread: with many threads, one pair each took hundreds
 * of the program's fds (and the low numbers the program's own opens would
 * have got). At most CACHE_SLOTS, at the top of the fd range within the
 * budget's /proc share (common/fds.h); least recently used goes first. A
 * file that finds no place (budget spent, the program's use near) is read
 * once through the number the kernel gave it and closed.
 *
 * Each use checks the number is still the file opened (fstat: device and
 * inode as at the open): the program may have closed it or put its own
 * file there. One that is not is lost: counted (snapprof__fd_lost()),
 * never read nor closed, and the file is opened again. What remains is a
 * swap between the fstat and the pread by another thread of the program
 * (a dup2 onto exactly this number; its opens never get it, see fds.h).
 * pread cannot hang nor take the program's data there: it never moves the
 * file offset, and pipes, FIFOs, sockets, ttys and the anonymous-inode
 * files (eventfd, signalfd, timerfd, epoll) refuse it (ESPIPE); a regular
 * file gives at most 255 bytes from its start, which fail the parse or
 * give an sp the copy checks against the thread's stack. Sampling side:
 * one lock, never taken in a handler. */
#define CACHE_SLOTS 16

enum { KIND_SYSCALL, KIND_SCHEDSTAT };

typedef struct proc_slot {
    pid_t tid;
    int kind;
    int fd; /* -1: free */
    dev_t dev;
    ino_t ino;
    uint64_t used; /* the cache's clock at its last use */
} proc_slot_t;

static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static proc_slot_t g_cache[CACHE_SLOTS];
static uint64_t g_cache_clock;
static int g_cache_ready;

/* Whether fd is still the file of slot s. */
static int slot_ours(const proc_slot_t *s)
{
    struct stat st;
    return fstat(s->fd, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino;
}

/* Empties slot s: closes its file if the number is still it, else counts
 * it lost and leaves the number alone. Cache lock held. */
static void slot_drop(proc_slot_t *s)
{
    if (s->fd < 0)
        return;
    if (slot_ours(s))
        close(s->fd);
    else
        snapprof__fd_lost();
    snapprof__fd_release(SNAPPROF__FD_PROC);
    s->fd = -1;
}

/* A forked child's cached files are its parent's threads': dropped. */
static void cache_fork_child(void)
{
    pthread_mutex_init(&g_cache_lock, NULL);
    for (int i = 0; i < CACHE_SLOTS; i++)
        slot_drop(&g_cache[i]);
}

/* Cache lock held. */
static void cache_init(void)
{
    if (g_cache_ready)
        return;
    for (int i = 0; i < CACHE_SLOTS; i++)
        g_cache[i].fd = -1;
    pthread_atfork(NULL, NULL, cache_fork_child);
    g_cache_ready = 1;
}

/* Opens tid's file kind, or finds it in the cache. Returns an fd, with
 * *slot_out the cache slot holding it, or NULL when it is not cached (the
 * caller closes it after the read); or a negative errno. Cache lock held. */
static int cache_open(pid_t tid, int kind, proc_slot_t **slot_out)
{
    cache_init();
    *slot_out = NULL;
    proc_slot_t *lru = &g_cache[0];
    for (int i = 0; i < CACHE_SLOTS; i++) {
        proc_slot_t *s = &g_cache[i];
        if (s->fd >= 0 && s->tid == tid && s->kind == kind) {
            if (slot_ours(s)) {
                s->used = ++g_cache_clock;
                *slot_out = s;
                return s->fd;
            }
            slot_drop(s); /* the program's now: lost */
        }
        if (s->fd < 0 ? lru->fd >= 0 : lru->fd >= 0 && s->used < lru->used)
            lru = s;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid,
             kind == KIND_SYSCALL ? "syscall" : "schedstat");
    int fd;
    if (kind == KIND_SYSCALL && snapprof__fault(SNAPPROF__FAULT_OPEN)) {
        errno = EMFILE; /* as when the program's files took them all */
        fd = -1;
    } else {
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return errno == ENOENT ? -ESRCH : -errno;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return fd;  /* read once, not cached */
    slot_drop(lru); /* its share of the budget back first */
    int high = snapprof__fd_place(fd, SNAPPROF__FD_PROC);
    if (high < 0)
        return fd;
    *lru = (proc_slot_t){.tid = tid, .kind = kind, .fd = high, .dev = st.st_dev, .ino = st.st_ino};
    lru->used = ++g_cache_clock;
    *slot_out = lru;
    return high;
}

/* Reads tid's file kind into buf (NUL-terminated). Returns the length, 0
 * when the thread is gone (ESRCH or an empty file), or a negative errno.
 * A cached file that says the thread is gone may be a thread that used to
 * have that tid: dropped, and read once more through a fresh open. */
static ssize_t proc_read(pid_t tid, int kind, char *buf, size_t size)
{
    pthread_mutex_lock(&g_cache_lock);
    ssize_t n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        proc_slot_t *slot;
        int fd = cache_open(tid, kind, &slot);
        if (fd < 0) {
            n = fd == -ESRCH ? 0 : fd;
            break;
        }
        n = pread(fd, buf, size - 1, 0);
        int err = errno;
        if (!slot)
            close(fd);
        if (n > 0)
            break;
        if (slot)
            slot_drop(slot);
        n = n == 0 || err == ESRCH ? 0 : -err;
        if (!slot || n != 0)
            break;
    }
    pthread_mutex_unlock(&g_cache_lock);
    if (n > 0)
        buf[n] = '\0';
    return n;
}

void snapprof__proc_forget(pid_t tid)
{
    pthread_mutex_lock(&g_cache_lock);
    for (int i = 0; g_cache_ready && i < CACHE_SLOTS; i++)
        if (g_cache[i].fd >= 0 && g_cache[i].tid == tid)
            slot_drop(&g_cache[i]);
    pthread_mutex_unlock(&g_cache_lock);
}

int snapprof__proc_blocked_read(pid_t tid, snapprof__blocked_t *out)
{
    const snapprof__stack_copier_seams_t *seams = snapprof__stack_copier_seams();
    int err = seams && seams->xProcRefused ? seams->xProcRefused(seams->user_data, tid) : 0;
    if (err != 0)
        return err < 0 ? err : -err;
    /* "nr arg1 ... arg6 sp pc", "-1 sp pc" (in the kernel, not in a system
     * call), or "running". */
    char buf[256];
    ssize_t n = proc_read(tid, KIND_SYSCALL, buf, sizeof buf);
    if (n < 0)
        return (int)n;
    if (n == 0)
        return -ESRCH; /* the thread is gone */
    if (strncmp(buf, "running", 7) == 0)
        return 0;
    char *end;
    long nr = strtol(buf, &end, 10);
    if (end == buf)
        return -EPROTO;
    if (nr < 0)
        return 0; /* blocked, but not in a system call: no stable sp */
    uintptr_t field[8];
    const char *s = end;
    for (int i = 0; i < 8; i++)
        if (!(s = parse_hex(s, &field[i])))
            return -EPROTO;
    out->nr = nr;
    out->sp = field[6];
    out->pc = field[7];
    return 1;
}

int snapprof__proc_schedstat_read(pid_t tid, uint64_t *run_ns, uint64_t *wait_ns)
{
    char buf[128];
    ssize_t n = proc_read(tid, KIND_SCHEDSTAT, buf, sizeof buf);
    if (n <= 0)
        return n < 0 ? (int)n : -ESRCH;
    unsigned long long run, wait;
    if (sscanf(buf, "%llu %llu", &run, &wait) != 2)
        return -EPROTO;
    *run_ns = run;
    *wait_ns = wait;
    return 0;
}

int snapprof__proc_copy_blocked(pid_t pid, const struct snapprof_thread *th,
                                const snapprof__blocked_t *b, uint8_t *buffer, size_t size,
                                snapprof__copy_result_t *res, snapprof_fail_reason_t *reason)
{
    memset(res, 0, sizeof *res);
    if (th->stack_base == 0 || b->sp < th->stack_low || b->sp >= th->stack_base) {
        *reason = SNAPPROF_FAIL_SP_OUT_OF_RANGE;
        return -1;
    }
    uint64_t t0 = snapprof__monotonic_ns();
    /* From sp, 16-byte aligned down as the handshake's copy is (the kernel
     * left nothing below sp that unwinding needs). */
    uintptr_t lo = b->sp & ~(uintptr_t)15;
    if (lo < th->stack_low)
        lo = th->stack_low;
    size_t want = th->stack_base - lo;
    res->truncated = want > size;
    if (res->truncated)
        want = size & ~(size_t)15;
    struct iovec local = {buffer, want}, remote = {(void *)lo, want};
    ssize_t got;
    if (snapprof__fault(SNAPPROF__FAULT_PROCESS_VM_READV)) {
        errno = EPERM; /* as a seccomp filter refuses it */
        got = -1;
    } else {
        got = snapprof__process_vm_readv(pid, &local, 1, &remote, 1);
    }
    if (got != (ssize_t)want) {
        /* EFAULT, or a short read: the stack went away under us, the
         * thread exited. Anything else (EPERM from a seccomp filter,
         * ENOSYS) is the call refused, whatever the thread does. */
        if (got >= 0 || errno == EFAULT || errno == ESRCH) {
            *reason = SNAPPROF_FAIL_THREAD_EXITED;
            return -1;
        }
        return errno > 0 ? errno : EPERM;
    }
    const snapprof__stack_copier_seams_t *seams = snapprof__stack_copier_seams();
    if (seams && seams->xAfterProcCopy)
        seams->xAfterProcCopy(seams->user_data, th->tid);
    res->regs.r[SNAPPROF_REG_PC] = b->pc;
    res->regs.r[SNAPPROF_REG_SP] = b->sp;
    res->timestamp_ns = t0;
    res->copy_lo = lo;
    res->copy_size = want;
    res->roundtrip_ns = snapprof__monotonic_ns() - t0;
    return 0;
}
