/* Unwinding corrupt stack copies (random words, wild registers) through
 * chains of unwinders, for the unwinder tests: every read must stay in the
 * copy or in a readable segment of a loaded object, and nothing may crash
 * (the copies are malloc'd to their exact size, so ASan sees overreads). */
#ifndef SNAPPROF_TESTS_UNWIND_FUZZ_H
#define SNAPPROF_TESTS_UNWIND_FUZZ_H

#include "unwinder/cfi_engine.h"

#include <snapprof/unwinder.h>

#include <stddef.h>
#include <stdint.h>

enum { UW_FUZZ_MAX_CHAINS = 6, UW_FUZZ_MAX_CHAIN = 3, UW_FUZZ_MAX_ENGINES = 4 };

typedef struct uw_fuzz_spec {
    int seeds; /* copies to make */
    /* Code the wild words point into: code[i] + [0, code_span). */
    const uintptr_t *code;
    size_t code_count;
    uintptr_t code_span;
    /* start_pc_percent of the copies start at start_pcs[i] + [0, start_span)
     * so that real unwind information runs; the rest at a wild pc. */
    const uintptr_t *start_pcs;
    size_t start_count;
    uintptr_t start_span;
    unsigned start_pc_percent;
    int sp_in_copy; /* half the copies get an sp inside the copy */
    /* The chains each copy is unwound through. */
    snapprof_unwinder_t *chains[UW_FUZZ_MAX_CHAINS][UW_FUZZ_MAX_CHAIN];
    size_t chain_len[UW_FUZZ_MAX_CHAINS];
    size_t chain_count;
    /* CFI engines whose reads are checked (libunwind's, the hybrid's...). */
    snapprof__cfi_t *engines[UW_FUZZ_MAX_ENGINES];
    size_t engine_count;
} uw_fuzz_spec_t;

typedef struct uw_fuzz_result {
    size_t frames, completed, aborted, capped, unknown;
    size_t copy_reads, module_reads, bad_reads;
} uw_fuzz_result_t;

/* A spec's code and start pcs as designated initializers, from arrays
 * whose element counts are taken from the arrays themselves:
 * UW_FUZZ_CODE(code, span) makes the wild words point into code[i] +
 * [0, span); UW_FUZZ_STARTS(starts, span, percent) starts percent of the
 * copies at starts[i] + [0, span). */
#define UW_FUZZ_COUNT_(arr) (sizeof(arr) / sizeof((arr)[0]))
#define UW_FUZZ_CODE(arr, span)                                                                    \
    .code = (arr), .code_count = UW_FUZZ_COUNT_(arr), .code_span = (span)
#define UW_FUZZ_STARTS(arr, span, percent)                                                         \
    .start_pcs = (arr), .start_count = UW_FUZZ_COUNT_(arr), .start_span = (span),                  \
    .start_pc_percent = (percent)

/* Runs the spec and prints a line of what happened; the caller asserts. */
void uw_fuzz_corrupt_copies(const uw_fuzz_spec_t *spec, uw_fuzz_result_t *out);

#endif
