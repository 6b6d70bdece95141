/* x86-64 register capture from a signal's ucontext, in DWARF numbering.
 * Everything architecture-specific about registers lives here. */
#ifndef SNAPPROF_REGISTERS_X86_64_H
#define SNAPPROF_REGISTERS_X86_64_H

#include <snapprof/unwinder.h>
#include <ucontext.h>

/* Async-signal-safe. */
static inline void snapprof__regs_from_ucontext(const ucontext_t *uc, snapprof_regs_t *r)
{
    const greg_t *g = uc->uc_mcontext.gregs;
    r->r[0] = (uintptr_t)g[REG_RAX];
    r->r[1] = (uintptr_t)g[REG_RDX];
    r->r[2] = (uintptr_t)g[REG_RCX];
    r->r[3] = (uintptr_t)g[REG_RBX];
    r->r[4] = (uintptr_t)g[REG_RSI];
    r->r[5] = (uintptr_t)g[REG_RDI];
    r->r[6] = (uintptr_t)g[REG_RBP];
    r->r[7] = (uintptr_t)g[REG_RSP];
    r->r[8] = (uintptr_t)g[REG_R8];
    r->r[9] = (uintptr_t)g[REG_R9];
    r->r[10] = (uintptr_t)g[REG_R10];
    r->r[11] = (uintptr_t)g[REG_R11];
    r->r[12] = (uintptr_t)g[REG_R12];
    r->r[13] = (uintptr_t)g[REG_R13];
    r->r[14] = (uintptr_t)g[REG_R14];
    r->r[15] = (uintptr_t)g[REG_R15];
    r->r[16] = (uintptr_t)g[REG_RIP];
}

/* The System V ABI lets leaf code use 128 bytes below sp. */
#define SNAPPROF_RED_ZONE 128u
/* Frame records and the copy keep this alignment. */
#define SNAPPROF_STACK_ALIGN 16u

/* Where a copy of the thread's own stack starts, for sp in [low, base): the
 * red zone below sp, aligned down, never below low. Async-signal-safe. */
static inline uintptr_t snapprof__copy_low(uintptr_t sp, uintptr_t low)
{
    uintptr_t lo = sp >= low + SNAPPROF_RED_ZONE ? sp - SNAPPROF_RED_ZONE : low;
    lo &= ~(uintptr_t)(SNAPPROF_STACK_ALIGN - 1);
    return lo < low ? low : lo;
}

#endif
