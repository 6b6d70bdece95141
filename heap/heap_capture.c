/* The capture of a sampled allocation, on the allocating thread itself:
 * its registers taken in a live frame (no signal: the thread captures
 * itself, as it would in its own handler), its stack bounds found without
 * allocating, its live stack copied into a capture slot with the
 * stack copier's own code, and its address recorded as live. */
#include "heap/heap_internal.h"

#include "common/clock.h"
#include "common/fault.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>

/* The stacks a thread no profiler registered allocated on lately, most
 * recent first: the thread's own and, for a thread that runs fibers
 * (makecontext/swapcontext, a coroutine library's stacks), theirs. Each
 * is found once in /proc/self/maps (an open, reads and a close on the
 * program's thread) and then answered from here, so a thread switching
 * among up to KNOWN_STACKS stacks reads the file once per stack rather
 * than at every switch; more stacks in turn push the oldest out and read
 * it again. Keyed by tid, so a fork child looks again. A range is kept
 * after its stack is unmapped, as the single cached range before it was:
 * a new stack mapped inside an old range reads as the old one. */
#define KNOWN_STACKS 8
static __thread struct {
    pid_t tid;
    unsigned count;
    struct {
        uintptr_t low, base;
    } r[KNOWN_STACKS];
} tls_stacks __attribute__((tls_model("initial-exec")));

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

/* The bounds of the mapping that holds sp (snapprof__find_mapping(): no
 * malloc, no stdio): the main thread's "[stack]", or a thread's stack
 * mapping, whose top holds its thread descriptor and static TLS (the copy
 * stops below them, as snapprof_thread_register() does). Returns 0 or a
 * negative errno. */
static int find_bounds(uintptr_t sp, uintptr_t *low, uintptr_t *base)
{
    int rc = snapprof__find_mapping(sp, low, base);
    if (rc != 0)
        return rc;
    uintptr_t self = (uintptr_t)pthread_self();
    if (self > sp && self < *base)
        *base = self & ~(uintptr_t)15;
    return 0;
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

/* The calling thread's stack bounds: its registration's, else a known
 * stack's (moved to the front), else found in /proc/self/maps and put in
 * front. Returns 0, or -1 when sp is in no stack we know or can find (an
 * open that failed, at EMFILE too: then nothing is kept, and the next
 * sampled allocation tries again). */
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
        atomic_fetch_add_explicit(&snapprof__heap.stack_lookups, 1, memory_order_relaxed);
        if (find_bounds(sp, &l, &b) != 0)
            return -1;
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
    if (bounds(regs.r[SNAPPROF_REG_SP], &low, &base) != 0) {
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
