/* The CFI engine behind the libunwind, hybrid and CFI table unwinders
 * (whose object table and checked reads the .debug_frame unwinder borrows):
 * libunwind's remote API over a stack copy, with accessors that read only
 * the copy and the loaded ELF objects. It knows nothing of the unwinders
 * that embed it; snapprof__cfi_of() (unwinder_internal.h) finds an
 * unwinder's engine. Internal.
 *
 * Everything here runs on the sampler thread (or a test or bench thread
 * that owns the engine), never in the signal handler: libunwind allocates
 * and takes locks. One engine is used by one thread at a time. */
#ifndef SNAPPROF_CFI_ENGINE_H
#define SNAPPROF_CFI_ENGINE_H

#include "unwinder/unwinder_internal.h"

/* Creates an engine with its own libunwind address space and caches.
 * Returns 0 or -ENOMEM (libunwind's unw_create_addr_space fails only when
 * it cannot allocate). */
int snapprof__cfi_create(snapprof__cfi_t **out);
void snapprof__cfi_destroy(snapprof__cfi_t *cfi);

/* Rescans the loaded objects when the dynamic loader reports that objects
 * were added or removed since the last scan (or on the first call), and
 * then flushes every cache that may describe unloaded code. Returns 1 when
 * it rescanned, else 0. */
int snapprof__cfi_update_modules(snapprof__cfi_t *cfi);

/* Whether pc lies in the executable code of a loaded object that has a
 * usable .eh_frame_hdr table with an FDE for pc (CFI can unwind it). The
 * answer is cached per pc until the objects change. */
int snapprof__cfi_covers(snapprof__cfi_t *cfi, uintptr_t pc);

/* Where the function holding pc starts, as its FDE says (pc_begin):
 * stores it in *start and returns 0, or -1 when no table has an FDE for
 * pc. Allocates nothing. */
int snapprof__cfi_function_start(snapprof__cfi_t *cfi, uintptr_t pc, uintptr_t *start);

/* Whether pc lies in the executable code of any loaded object. */
int snapprof__cfi_in_code(snapprof__cfi_t *cfi, uintptr_t pc);

/* Reads the word at addr by the rules libunwind's reads follow: from the
 * copy [bottom, top) (an address in the live stack that escaped rebasing
 * is taken as the same byte of the copy), or from a readable PT_LOAD
 * segment of a loaded object through process_vm_readv, so an object
 * unmapped meanwhile makes the read fail instead of crashing. Reports the
 * read to the seams. Returns 0, or -1 when addr is in neither. The CFI
 * engine's own reads and the .debug_frame unwinder's go through here. */
int snapprof__cfi_read_word(snapprof__cfi_t *cfi, const snapprof_stack_copy_t *stack,
                            uintptr_t addr, uintptr_t *out);

/* How many reads of object memory went to the kernel (process_vm_readv)
 * rather than the engine's cache of read-only object bytes. For tests. */
unsigned long long snapprof__cfi_raw_reads(const snapprof__cfi_t *cfi);

/* Walks ctx with libunwind from its last frame until the stack ends, an
 * error, the depth cap, or a caller outside CFI-covered code (which is
 * appended, with ctx->regs describing it, as UNRECOGNIZED_FRAME). */
snapprof_unwind_result_t snapprof__cfi_walk(snapprof__cfi_t *cfi, snapprof_unwind_ctx_t *ctx);

/* The result of one CFI step. */
typedef struct snapprof__cfi_step {
    uintptr_t ip;     /* the caller's pc as found: a return address, or the
                         exact interrupted pc when signal is set */
    int signal;       /* the frame stepped from was a signal trampoline */
    int frame_record; /* the frame stepped from had a standard frame record
                         at this pc: CFA = rbp + 16, rbp saved at CFA - 16,
                         return address at CFA - 8 */
} snapprof__cfi_step_t;

/* One step from the frame described by regs, whose code is looked up at
 * lookup_pc (the exact pc for an interrupted frame, return address - 1 for
 * a caller). On success regs describes the caller: pc, sp, rbp and the
 * callee-saved registers the CFI restores (others keep their values).
 * Returns 1 after a step, 0 at the end of the stack, -1 on error with
 * *reason set. */
int snapprof__cfi_step(snapprof__cfi_t *cfi, const snapprof_stack_copy_t *stack,
                       snapprof_regs_t *regs, uintptr_t lookup_pc, snapprof__cfi_step_t *out,
                       snapprof__reason_t *reason);

/* Test seams (tests/README.md, "Test seams"), also used by bench_unwind
 * and fuzz_unwind. xOnRead, when set, is told of every successful memory
 * read the engine makes for libunwind (address and size), after it was
 * validated. */
typedef struct snapprof__cfi_seams {
    void (*xOnRead)(void *user_data, uintptr_t addr, size_t size, int from_copy);
    void *user_data;
} snapprof__cfi_seams_t;

/* Copies *seams into cfi (NULL: none), for the steps that start after:
 * one engine's seams, set while no other thread uses it. */
void snapprof__cfi_set_seams(snapprof__cfi_t *cfi, const snapprof__cfi_seams_t *seams);

#endif
