/* Copies of another thread's stack for unwinding outside a profiler, taken
 * with the stack copier's handshake and rebased as the sampler rebases
 * them: shared by test_unwinder_cfi_table.c and bench/bench_unwind.c
 * (white-box: the copier's internal calls). A header of static functions,
 * so that the bench links nothing of the tests. */
#ifndef SNAPPROF_TESTS_UNWIND_COPY_H
#define SNAPPROF_TESTS_UNWIND_COPY_H

#include "stack_copier/stack_copier.h"

#include <snapprof/unwinder.h>

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

/* One copy and what the unwinders take of it. */
typedef struct uw_copy {
    uint8_t *buffer; /* mapped by uw_copy_take(), NULL when not */
    size_t size;
    snapprof_regs_t regs;
    snapprof_stack_copy_t stack;
} uw_copy_t;

/* Maps a 1 MiB buffer for *copy and copies thread's stack into it by a
 * SIGURG handshake (the caller installed the copier's handler), trying up
 * to tries times with a 1 s timeout each: a loaded machine misses one now
 * and then. Returns 0 with the copy rebased, -ENOMEM when the buffer
 * cannot be mapped, or the copier's last error, its reason in *why.
 * uw_copy_free() unmaps the buffer in every case. */
static inline int uw_copy_take(const snapprof_thread_t *thread, uw_copy_t *copy, int tries,
                               snapprof_fail_reason_t *why)
{
    *why = SNAPPROF_FAIL_SEND;
    copy->size = 1u << 20;
    copy->buffer =
        mmap(NULL, copy->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy->buffer == MAP_FAILED) {
        copy->buffer = NULL;
        return -ENOMEM;
    }
    snapprof__copy_request_t req = {.thread = thread,
                                    .signo = SIGURG,
                                    .buffer = copy->buffer,
                                    .buffer_size = copy->size,
                                    .timeout_ns = 1000000000u};
    snapprof__copy_result_t res;
    int rc = -1;
    for (int attempt = 0; rc != 0 && attempt < tries; attempt++)
        rc = snapprof__stack_copier_copy(&req, &res, why);
    if (rc == 0)
        snapprof__stack_copier_rebase(&res, copy->buffer, &copy->regs, &copy->stack);
    return rc;
}

static inline void uw_copy_free(uw_copy_t *copy)
{
    if (copy->buffer != NULL)
        munmap(copy->buffer, copy->size);
    copy->buffer = NULL;
}

#endif
