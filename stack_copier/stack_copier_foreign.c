/* Stack copier for a stack pointer outside the thread's own stack: a
 * goroutine's stack (Go runs goroutines on stacks it allocates in its heap
 * and switches threads between them), a fiber, a coroutine, a
 * swapcontext() stack, or an alternate signal stack. We do not know where
 * such a stack begins, so the handler copies a bounded window from sp
 * upward, and only memory that is mapped and readable: the copy goes
 * through process_vm_readv(2) on our own pid, one remote iovec per page,
 * which stops at the first page that cannot be read and returns what it
 * copied instead of faulting. (A table of mappings kept by the sampling
 * thread would go stale between refreshes; the kernel's page tables do
 * not.) */
#include "stack_copier/stack_copier.h"

#include "common/seccomp.h"
#include "stack_copier/registers_x86_64.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define PAGE 4096u
#define MAX_PAGES (SNAPPROF__FOREIGN_WINDOW / PAGE + 1)

/* Fills remote[] with one iovec per page of [lo, lo + size), at most max
 * of them and at most per_page bytes each from where the page's part
 * starts (a whole page's part, or 1 byte to probe it), so that
 * process_vm_readv() stops at the first page that cannot be read. Returns
 * the count. */
static int page_iovecs(struct iovec *remote, int max, uintptr_t lo, size_t size, size_t per_page)
{
    int n = 0;
    for (uintptr_t a = lo, end = lo + size; a < end && n < max; n++) {
        uintptr_t next = (a & ~(uintptr_t)(PAGE - 1)) + PAGE;
        if (next > end || next < a)
            next = end;
        remote[n].iov_base = (void *)a;
        remote[n].iov_len = next - a < per_page ? next - a : per_page;
        a = next;
    }
    return n;
}

/* Our pid, for process_vm_readv(), without a getpid() system call (~200
 * ns on a VM, a few a sampled allocation) each time: kept in a page of
 * its own advised MADV_WIPEONFORK, which the kernel gives every fork
 * child zeroed, whatever made it (fork() and its atfork handlers, _Fork(),
 * a fork in a signal handler, a raw clone() or fork system call, none of
 * which an atfork handler sees all of), and a zero is read anew. A child
 * that shares our memory (vfork(), clone(CLONE_VM)) shares the page too,
 * and the pid in it is of a process with the same memory:
 * process_vm_readv() on it reads what it would on the child's own. If that
 * process is gone (a CLONE_VM child outliving its parent), the call fails
 * with ESRCH and the caller asks getpid() (our_pid_again()). Where the
 * page cannot be had (mmap() failing, a kernel before 4.14 refusing the
 * advice), getpid() each time, as before. */
#define PID_PAGE_NONE ((_Atomic pid_t *)1)
static _Atomic(_Atomic pid_t *) g_pid_page;

/* The page, made on first use (a race loses one mmap()), or NULL.
 * Async-signal-safe (system calls only). */
static _Atomic pid_t *pid_page(void)
{
    _Atomic pid_t *page = atomic_load_explicit(&g_pid_page, memory_order_acquire);
    if (page)
        return page == PID_PAGE_NONE ? NULL : page;
    void *m = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL; /* tried again next time */
    _Atomic pid_t *want = m;
    if (madvise(m, PAGE, MADV_WIPEONFORK) != 0)
        want = PID_PAGE_NONE; /* not on this kernel: never again */
    if (!atomic_compare_exchange_strong_explicit(&g_pid_page, &page, want, memory_order_acq_rel,
                                                 memory_order_acquire) ||
        want == PID_PAGE_NONE) {
        munmap(m, PAGE);
        want = page ? page : PID_PAGE_NONE;
    }
    return want == PID_PAGE_NONE ? NULL : want;
}

/* Async-signal-safe. */
pid_t snapprof__our_pid(void)
{
    _Atomic pid_t *page = pid_page();
    pid_t pid = page ? atomic_load_explicit(page, memory_order_relaxed) : 0;
    if (pid == 0) {
        pid = (pid_t)syscall(SYS_getpid);
        if (page) {
            /* Only into a zero: the page holds the pid of the first process
             * that wrote it since the last fork, whose memory this is. */
            pid_t zero = 0;
            atomic_compare_exchange_strong_explicit(page, &zero, pid, memory_order_relaxed,
                                                    memory_order_relaxed);
        }
    }
    return pid;
}

/* After a process_vm_readv() on pid that failed otherwise than with
 * EFAULT: our own pid from getpid() if it is another, else 0 (the failure
 * is the call's own: seccomp, ENOSYS). Async-signal-safe. */
pid_t snapprof__our_pid_again(pid_t pid)
{
    pid_t now = (pid_t)syscall(SYS_getpid);
    return now != pid ? now : 0;
}

long snapprof__readv_self(void *dst, size_t size, const struct iovec *remote, int n)
{
    struct iovec local = {dst, size};
    pid_t pid = snapprof__our_pid();
    long got = snapprof__process_vm_readv(pid, &local, 1, remote, (unsigned long)n);
    if (got < 0 && errno != EFAULT && errno != EPERM && (pid = snapprof__our_pid_again(pid)) != 0)
        got = snapprof__process_vm_readv(pid, &local, 1, remote, (unsigned long)n);
    return got;
}

/* process_vm_readv() of [lo, lo + size) (at most SNAPPROF__FOREIGN_WINDOW
 * bytes) on our own pid into dst: the bytes read, or -1 with errno. */
static long read_window(uint8_t *dst, uintptr_t lo, size_t size)
{
    struct iovec remote[MAX_PAGES];
    int n = page_iovecs(remote, (int)MAX_PAGES, lo, size, PAGE);
    return snapprof__readv_self(dst, size, remote, n);
}

/* Async-signal-safe. */
uintptr_t snapprof__readable_until(uintptr_t lo, uintptr_t end)
{
    enum { PROBES = 32 }; /* pages a call */
    struct iovec remote[PROBES];
    char sink[PROBES];
    int saved = errno;
    uintptr_t page = lo & ~(uintptr_t)(PAGE - 1);
    while (page < end) {
        int n = page_iovecs(remote, PROBES, page, end - page, 1);
        long got = snapprof__readv_self(sink, (size_t)n, remote, n);
        if (got < 0) {
            page = errno == EFAULT ? page : 0;
            break;
        }
        page += (uintptr_t)got * PAGE;
        if (got < n)
            break;
    }
    errno = saved;
    return page;
}

/* Copies up to size bytes from lo, page by page, stopping at the first
 * page that cannot be read. Returns the bytes copied (0 when not even the
 * first page could be, or process_vm_readv is refused, as seccomp may).
 * Async-signal-safe (one system call). */
static size_t read_pages(uint8_t *dst, uintptr_t lo, size_t size)
{
    long got = read_window(dst, lo, size);
    return got > 0 ? (size_t)got : 0;
}

/* Async-signal-safe. */
long snapprof__copy_readable(uint8_t *dst, uintptr_t lo, size_t size)
{
    int saved = errno;
    long rc = 0;
    for (size_t done = 0; done < size;) {
        size_t chunk =
            size - done < SNAPPROF__FOREIGN_WINDOW ? size - done : SNAPPROF__FOREIGN_WINDOW;
        long got = read_window(dst + done, lo + done, chunk);
        if (got < 0) {
            /* EFAULT: the page at lo + done cannot be read; anything
             * else: the call itself is refused. */
            rc = errno == EFAULT ? (long)done : done > 0 ? (long)done : -1;
            break;
        }
        done += (size_t)got;
        rc = (long)done;
        if ((size_t)got < chunk)
            break;
    }
    errno = saved;
    return rc;
}

/* Async-signal-safe. */
int snapprof__copy_foreign_stack(uintptr_t sp, uint8_t *buffer, size_t buffer_size,
                                 snapprof__copy_result_t *res)
{
    size_t window = buffer_size < SNAPPROF__FOREIGN_WINDOW ? buffer_size : SNAPPROF__FOREIGN_WINDOW;
    window &= ~(size_t)(SNAPPROF_STACK_ALIGN - 1);
    if (window == 0 || sp < SNAPPROF_RED_ZONE)
        return -1;
    /* The red zone below sp too, as for the thread's own stack, unless it
     * lies on a page that cannot be read (a guard page right below). */
    uintptr_t lo = (sp - SNAPPROF_RED_ZONE) & ~(uintptr_t)(SNAPPROF_STACK_ALIGN - 1);
    if (lo + window < lo)
        return -1;
    size_t got = read_pages(buffer, lo, window);
    if (got <= sp - lo && (lo & ~(uintptr_t)(PAGE - 1)) != (sp & ~(uintptr_t)(PAGE - 1))) {
        lo = sp & ~(uintptr_t)(SNAPPROF_STACK_ALIGN - 1);
        got = read_pages(buffer, lo, window);
    }
    got &= ~(size_t)(sizeof(uintptr_t) - 1);
    if (got <= sp - lo)
        return -1; /* not even the word at sp */
    res->copy_lo = lo;
    res->copy_size = got;
    /* Where this stack ends is not known: the window is not counted as a
     * truncated copy (an unwind that runs past it is counted as such). */
    res->truncated = 0;
    res->foreign = 1;
    return 0;
}
