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
#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static _Atomic int g_fail_err; /* test seam: reads of the file fail with it */
static snapprof__proc_hook_fn g_hook;
static void *g_hook_data;

void snapprof__proc_fail_for_test(int err)
{
    atomic_store(&g_fail_err, err);
}

void snapprof__proc_set_hook_for_test(snapprof__proc_hook_fn fn, void *user_data)
{
    g_hook = fn;
    g_hook_data = user_data;
}

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

int snapprof__proc_blocked_read(pid_t tid, int *fd, snapprof__blocked_t *out)
{
    int err = atomic_load(&g_fail_err);
    if (err != 0)
        return -err;
    if (*fd < 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
        if (snapprof__fault(SNAPPROF__FAULT_OPEN))
            errno = EMFILE; /* as when the program's files took them all */
        else
            *fd = open(path, O_RDONLY | O_CLOEXEC);
        if (*fd < 0)
            return errno == ENOENT ? -ESRCH : -errno;
    }
    /* "nr arg1 ... arg6 sp pc", "-1 sp pc" (in the kernel, not in a system
     * call), or "running". */
    char buf[256];
    ssize_t n = pread(*fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        return errno == ESRCH ? -ESRCH : -errno;
    if (n == 0)
        return -ESRCH; /* the thread is gone */
    buf[n] = '\0';
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

int snapprof__proc_schedstat_read(pid_t tid, int *fd, uint64_t *run_ns, uint64_t *wait_ns)
{
    if (*fd < 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)tid);
        *fd = open(path, O_RDONLY | O_CLOEXEC);
        if (*fd < 0)
            return -errno;
    }
    char buf[128];
    ssize_t n = pread(*fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return n < 0 ? -errno : -ESRCH;
    buf[n] = '\0';
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
        got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
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
    if (g_hook)
        g_hook(th->tid, g_hook_data);
    res->regs.r[SNAPPROF_REG_PC] = b->pc;
    res->regs.r[SNAPPROF_REG_SP] = b->sp;
    res->timestamp_ns = t0;
    res->copy_lo = lo;
    res->copy_size = want;
    res->roundtrip_ns = snapprof__monotonic_ns() - t0;
    return 0;
}
