/* The capture of a sampled allocation, on the allocating thread itself:
 * its registers taken in a live frame (no signal: the thread captures
 * itself, as it would in its own handler), its stack bounds found without
 * allocating, its live stack copied into a capture slot with the
 * stack copier's own code, and its address recorded as live. */
#include "heap/heap_internal.h"

#include "common/clock.h"
#include "common/fault.h"
#include "common/proc_files.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

/* The stacks a thread no profiler registered allocated on lately, most
 * recent first: the thread's own and, for a thread that runs fibers
 * (makecontext/swapcontext, a coroutine library's stacks), theirs. A hit
 * here costs a scan of KNOWN_STACKS ranges and the msync() check; a miss
 * asks the process's table below. Keyed by tid, so a fork child looks
 * again. */
#define KNOWN_STACKS 8
static __thread struct {
    pid_t tid;
    unsigned count;
    struct {
        uintptr_t low, base;
    } r[KNOWN_STACKS];
} tls_stacks __attribute__((tls_model("initial-exec")));

/* The process's candidate stacks as one read of /proc/self/maps found
 * them: every private read-write mapping that is anonymous or named in
 * brackets ("[stack]", "[heap]", "[anon:...]"; what thread, fiber and
 * coroutine stacks are), in address order, and always the mapping of the
 * stack pointer that asked. A thread that switches among more stacks than
 * KNOWN_STACKS finds them here (a binary search) rather than in the file:
 * 64 fibers in turn cost one read in all, not one a sampled allocation.
 * A read happens only when a stack pointer is in no range here, or in a
 * range no longer all mapped (the msync() check), and it replaces the
 * whole table; a process with more than SHARED_STACKS candidates keeps
 * the first ones and the asker's, and the others are read again on each
 * miss (counted in heap_stack_lookups).
 *
 * Two tables, one current: one thread at a time (g_filler, tried, never
 * waited for) fills the other one and then makes it current, so readers
 * never wait either. Each table is a seqlock: odd while written, and a
 * reader that sees it change, or odd, has no answer from it this time.
 * g_filler holds the filling process's pid: a fork child that inherited
 * it from a fill in progress in its parent takes it over. No allocation,
 * no lock: runs inside the program's malloc, in signal handlers and in
 * fork children. */
#define SHARED_STACKS 1024
typedef struct {
    _Atomic unsigned seq;
    _Atomic unsigned count;
    struct {
        _Atomic uintptr_t low, base;
    } r[SHARED_STACKS];
} shared_stacks_t;
static shared_stacks_t g_shared[2];
static _Atomic unsigned g_shared_current;
static _Atomic pid_t g_filler;
/* The filler's pass over the file: one filler at a time, so static rather
 * than 8 KiB more on what may be a small fiber stack. */
static snapprof__proc_maps_t g_fill_it;

/* The calling thread's name, read with prctl() at most every
 * NAME_REFRESH_NS on its sampled allocations, and at once after a rename
 * the library sees (snapprof__heap_names_changed()): a sampled allocation
 * makes no system call for it otherwise. A rename by prctl() or
 * pthread_setname_np() that bypasses the library shows within that time. */
#define NAME_REFRESH_NS 10000000u /* 10 ms */

static atomic_uint g_name_gen;

static __thread struct {
    pid_t tid;
    unsigned gen;
    uint64_t read_ns;
    char name[16];
} tls_name __attribute__((tls_model("initial-exec")));

void snapprof__heap_names_changed(void)
{
    atomic_fetch_add_explicit(&g_name_gen, 1, memory_order_relaxed);
}

/* Copies the calling thread's name into out[16]. */
static void thread_name(char out[16], pid_t tid, uint64_t now)
{
    unsigned gen = atomic_load_explicit(&g_name_gen, memory_order_relaxed);
    if (tls_name.tid != tid || tls_name.gen != gen || now - tls_name.read_ns >= NAME_REFRESH_NS) {
        if (prctl(PR_GET_NAME, tls_name.name) != 0)
            tls_name.name[0] = '\0';
        tls_name.name[sizeof tls_name.name - 1] = '\0';
        tls_name.tid = tid;
        tls_name.gen = gen;
        tls_name.read_ns = now;
    }
    memcpy(out, tls_name.name, sizeof tls_name.name);
}

/* A thread's stack mapping holds its thread descriptor and static TLS at
 * its top: the copy stops below them, as snapprof_thread_register() does. */
static void below_self(uintptr_t sp, uintptr_t *base)
{
    uintptr_t self = (uintptr_t)pthread_self();
    if (self > sp && self < *base)
        *base = self & ~(uintptr_t)15;
}

/* Whether [sp's page, base) is still all mapped: a remembered stack may
 * have been unmapped since, and a smaller one mapped inside its range (a
 * fiber pool that frees and makes stacks), and the copy from sp up to the
 * old base would then read unmapped memory and fault in the program's own
 * thread. msync(MS_ASYNC) checks that without an fd or a buffer (ENOMEM
 * when part of the range is not mapped) and writes nothing back. A range
 * mapped but by something else is copied as it is: garbage to the
 * unwinder, never a fault. */
static int still_mapped(uintptr_t sp, uintptr_t base)
{
    uintptr_t page = sp & ~(uintptr_t)4095;
    return msync((void *)page, base - page, MS_ASYNC) == 0;
}

/* The range of the current shared table that holds sp, if the table was
 * not being rewritten meanwhile. Returns 1 when found. */
static int shared_find(uintptr_t sp, uintptr_t *low, uintptr_t *base)
{
    shared_stacks_t *t = &g_shared[atomic_load_explicit(&g_shared_current, memory_order_acquire)];
    unsigned seq = atomic_load_explicit(&t->seq, memory_order_acquire);
    if (seq & 1)
        return 0;
    unsigned n = atomic_load_explicit(&t->count, memory_order_relaxed);
    if (n > SHARED_STACKS)
        n = SHARED_STACKS;
    /* The last range whose low is at or below sp. */
    unsigned lo = 0, hi = n;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (atomic_load_explicit(&t->r[mid].low, memory_order_relaxed) <= sp)
            lo = mid + 1;
        else
            hi = mid;
    }
    uintptr_t l = 0, b = 0;
    if (lo > 0) {
        l = atomic_load_explicit(&t->r[lo - 1].low, memory_order_relaxed);
        b = atomic_load_explicit(&t->r[lo - 1].base, memory_order_relaxed);
    }
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&t->seq, memory_order_relaxed) != seq)
        return 0;
    if (lo == 0 || sp < l || sp >= b)
        return 0;
    *low = l;
    *base = b;
    return 1;
}

static int stack_candidate(const snapprof__proc_map_t *m)
{
    return m->perms[0] == 'r' && m->perms[1] == 'w' && m->perms[3] == 'p' &&
           (m->path[0] == '\0' || m->path[0] == '[');
}

/* Reads /proc/self/maps once into the table that is not current and makes
 * it current, with sp's mapping in it; or, when another thread is filling,
 * finds sp's mapping alone (snapprof__find_mapping(): no malloc, no
 * stdio). Either way one read, counted. Returns 0 with sp's mapping, or a
 * negative errno (an open that failed, at EMFILE too: nothing changes,
 * and the next sampled allocation tries again). */
static int shared_fill(uintptr_t sp, uintptr_t *low, uintptr_t *base)
{
    atomic_fetch_add_explicit(&snapprof__heap.stack_lookups, 1, memory_order_relaxed);
    pid_t pid = getpid();
    pid_t was = atomic_load_explicit(&g_filler, memory_order_relaxed);
    if (was == pid || !atomic_compare_exchange_strong_explicit(
                          &g_filler, &was, pid, memory_order_acquire, memory_order_relaxed))
        return snapprof__find_mapping(sp, low, base);
    unsigned cur = atomic_load_explicit(&g_shared_current, memory_order_relaxed);
    shared_stacks_t *t = &g_shared[cur ^ 1];
    int rc = snapprof__proc_maps_open(&g_fill_it);
    if (rc != 0) {
        atomic_store_explicit(&g_filler, 0, memory_order_release);
        return rc;
    }
    unsigned seq = atomic_load_explicit(&t->seq, memory_order_relaxed) | 1;
    atomic_store_explicit(&t->seq, seq, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    unsigned n = 0;
    rc = -ENOENT;
    snapprof__proc_map_t m;
    while (snapprof__proc_maps_next(&g_fill_it, &m) > 0) {
        int has_sp = sp >= m.start && sp < m.end;
        if (has_sp) {
            *low = m.start;
            *base = m.end;
            rc = 0;
        }
        /* The last entry is kept for sp's mapping: the table stays in
         * address order, since the file is. */
        if ((has_sp && n < SHARED_STACKS) ||
            (stack_candidate(&m) && n < SHARED_STACKS - (rc != 0))) {
            atomic_store_explicit(&t->r[n].low, m.start, memory_order_relaxed);
            atomic_store_explicit(&t->r[n].base, m.end, memory_order_relaxed);
            n++;
        }
        if (rc == 0 && n == SHARED_STACKS)
            break;
    }
    snapprof__proc_maps_close(&g_fill_it);
    atomic_store_explicit(&t->count, n, memory_order_relaxed);
    atomic_store_explicit(&t->seq, seq + 1, memory_order_release);
    if (rc == 0)
        atomic_store_explicit(&g_shared_current, cur ^ 1, memory_order_release);
    atomic_store_explicit(&g_filler, 0, memory_order_release);
    return rc;
}

/* The calling thread's stack bounds: its registration's, else a known
 * stack's (moved to the front), else the process table's, else read from
 * /proc/self/maps (shared_fill()); the last two are put in front. A range
 * no longer all mapped is forgotten and read again. Returns 0, or -1 when
 * sp is in no stack we know or can find. */
static int bounds(uintptr_t sp, uintptr_t *low, uintptr_t *base)
{
    pid_t tid = snapprof__gettid_cached();
    const struct snapprof_thread *self = snapprof__thread_self();
    if (self && self->tid == tid && sp >= self->stack_low && sp < self->stack_base) {
        *low = self->stack_low;
        *base = self->stack_base;
        return 0;
    }
    if (tls_stacks.tid != tid) {
        tls_stacks.tid = tid;
        tls_stacks.count = 0;
    }
    unsigned i = 0;
    while (i < tls_stacks.count && (sp < tls_stacks.r[i].low || sp >= tls_stacks.r[i].base))
        i++;
    uintptr_t l, b;
    if (i < tls_stacks.count && !still_mapped(sp, tls_stacks.r[i].base)) {
        /* Unmapped since (a fiber stack freed, another mapped where it
         * was): forgotten, and found again below. */
        tls_stacks.count--;
        memmove(&tls_stacks.r[i], &tls_stacks.r[i + 1],
                (tls_stacks.count - i) * sizeof tls_stacks.r[0]);
        i = tls_stacks.count;
    }
    if (i < tls_stacks.count) {
        l = tls_stacks.r[i].low;
        b = tls_stacks.r[i].base;
    } else {
        int found = shared_find(sp, &l, &b);
        if (found) {
            below_self(sp, &b);
            found = still_mapped(sp, b);
        }
        if (!found) {
            if (shared_fill(sp, &l, &b) != 0)
                return -1;
            below_self(sp, &b);
        }
        if (tls_stacks.count < KNOWN_STACKS)
            tls_stacks.count++;
        i = tls_stacks.count - 1; /* the last goes, if the table was full */
    }
    memmove(&tls_stacks.r[1], &tls_stacks.r[0], i * sizeof tls_stacks.r[0]);
    tls_stacks.r[0].low = l;
    tls_stacks.r[0].base = b;
    *low = l;
    *base = b;
    return 0;
}

/* Clamps *base to the first page at or above sp that cannot be read, over
 * the part of [low, *base) the copy will read (window bytes from sp less
 * its red zone). A remembered range, the thread's or the process's, can
 * pass the msync() check and still hold a page that is mapped but not
 * readable: its stack freed and the address taken by other mappings, one
 * of them a thread stack's PROT_NONE guard page (ASan+UBSan, soak_heap:
 * the fibers thread died of SIGSEGV in the copy one page above its sp).
 * snapprof__readable_until() reads one byte a page, as the copy would,
 * without a fault. Returns 0 (the range left as it is, or clamped), or -1
 * when not even sp's page reads from where the copy starts. When the
 * kernel refuses the probe (seccomp, ENOSYS) the range is left as msync()
 * allowed, as before: 0. (It returned -errno there, and a seccomp
 * filter's EPERM is 1: every sampled allocation was dropped as "no
 * stack".) */
static int clamp_readable(uintptr_t sp, uintptr_t low, uintptr_t *base, size_t window)
{
    uintptr_t lo = sp >= low + 128 ? sp - 128 : low;
    uintptr_t end = *base - lo > window ? lo + window : *base;
    uintptr_t top = snapprof__readable_until(lo, end);
    if (top == 0)
        return 0; /* refused: unchecked */
    if (top <= sp)
        return -1;
    if (top < end)
        *base = top; /* end <= *base */
    return 0;
}

/* Takes this frame's registers as a signal's context would give them: the
 * stack pointer, the frame pointer, the callee-saved registers, and a pc
 * inside this function, all at one instruction, so that the unwinders walk
 * from here through note_alloc to its caller. Always inlined into its
 * caller, whose frame stays live while its stack is copied. */
#define TAKE_REGISTERS(regs_ptr)                                                                   \
    __asm__ volatile("movq %%rbx, 0x18(%0)\n\t"                                                    \
                     "movq %%rbp, 0x30(%0)\n\t"                                                    \
                     "movq %%rsp, 0x38(%0)\n\t"                                                    \
                     "movq %%r12, 0x60(%0)\n\t"                                                    \
                     "movq %%r13, 0x68(%0)\n\t"                                                    \
                     "movq %%r14, 0x70(%0)\n\t"                                                    \
                     "movq %%r15, 0x78(%0)\n\t"                                                    \
                     "leaq 0(%%rip), %%rax\n\t"                                                    \
                     "movq %%rax, 0x80(%0)\n\t"                                                    \
                     :                                                                             \
                     : "r"((regs_ptr)->r)                                                          \
                     : "rax", "memory")

_Static_assert(sizeof(((snapprof_regs_t *)0)->r[0]) == 8, "64-bit registers");

/* A sampled allocation that found every capture slot taken (a burst of
 * samples faster than the sampling thread drains them): its address goes
 * into the live set and its size and thread into the free queue, in the
 * order of the frees, so that the totals and what is in use stay right;
 * the drain gives it the frame "[heap: no capture slot]" for a stack.
 * Dropped and counted only when the queue or the set is full too. Returns
 * 1 when queued. No allocation, no locks. */
static int record_without_stack(snapprof__heap_state_t *h, uintptr_t addr, size_t size,
                                uint64_t entry)
{
    if (snapprof__heap_set_insert(addr) != 0) {
        atomic_fetch_add_explicit(&h->dropped_no_slot, 1, memory_order_relaxed);
        return 0;
    }
    snapprof__heap_free_rec_t rec = {
        .gen = atomic_load_explicit(&h->gen, memory_order_relaxed),
        .seq = atomic_fetch_add_explicit(&h->seq, 1, memory_order_relaxed),
        .time_ns = entry,
        .addr = addr,
        .bytes = size,
        .tid = snapprof__gettid_cached(),
        .alloc = 1,
    };
    if (snapprof__heap_free_push(&rec) != 0) {
        /* Nobody else has addr yet: its entry goes again. */
        snapprof__heap_set_remove(addr);
        atomic_fetch_add_explicit(&h->dropped_no_slot, 1, memory_order_relaxed);
        return 0;
    }
    return 1;
}

__attribute__((noinline)) int snapprof__heap_capture(uintptr_t addr, size_t size,
                                                     uintptr_t caller_pc)
{
    snapprof__heap_state_t *h = &snapprof__heap;
    uint64_t entry = snapprof__monotonic_ns();
    snapprof_regs_t regs;
    memset(&regs, 0, sizeof regs);
    TAKE_REGISTERS(&regs);
    uintptr_t low, base;
    if (bounds(regs.r[SNAPPROF_REG_SP], &low, &base) != 0 ||
        clamp_readable(regs.r[SNAPPROF_REG_SP], low, &base,
                       h->pool.copy_max > h->pool.slot_bytes ? h->pool.copy_max
                                                             : h->pool.slot_bytes) == -1) {
        atomic_fetch_add_explicit(&h->dropped_no_stack, 1, memory_order_relaxed);
        return 0;
    }
    if (snapprof__heap_set_nearly_full()) {
        atomic_fetch_add_explicit(&h->dropped_set_full, 1, memory_order_relaxed);
        return 0;
    }
    /* sp is inside [low, base) (the bounds are those of its mapping), so
     * the copy is of our own stack and NULL means no free slot. */
    snapprof__capture_slot_t *slot =
        snapprof__fault(SNAPPROF__FAULT_HEAP_SLOT)
            ? NULL
            : snapprof__capture_regs(&h->pool, &regs, low, base, entry);
    if (!slot)
        return record_without_stack(h, addr, size, entry);
    /* Recorded live before the slot is published and before the caller
     * hands the block out: its free, on any thread, finds it. */
    if (snapprof__heap_set_insert(addr) != 0) {
        snapprof__capture_slot_abandon(slot);
        atomic_fetch_add_explicit(&h->dropped_set_full, 1, memory_order_relaxed);
        return 0;
    }
    snapprof__heap_extra_t *x = slot->extra;
    x->gen = atomic_load_explicit(&h->gen, memory_order_relaxed);
    x->seq = atomic_fetch_add_explicit(&h->seq, 1, memory_order_relaxed);
    x->bytes = size;
    x->addr = addr;
    x->caller_pc = caller_pc;
    x->tid = snapprof__gettid_cached();
    thread_name(x->name, x->tid, entry);
    snapprof__capture_slot_publish(&h->pool, slot);
    return 1;
}
