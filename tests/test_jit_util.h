/* A tiny x86-64 JIT for snapprof's JIT tests: executable memory and a few
 * hand-assembled functions that burn CPU and call back into C. */
#ifndef SNAPPROF_TESTS_TEST_JIT_UTIL_H
#define SNAPPROF_TESTS_TEST_JIT_UTIL_H

#include <snapprof/jit.h>

#include <stddef.h>
#include <stdint.h>

typedef void (*tj_fn_t)(void);

/* Maps size bytes (rounded up to pages) of read-write memory for code;
 * exits the test on failure. */
uint8_t *tj_map(size_t size);
/* Makes the mapping executable and read-only (W^X), or writable again. */
void tj_protect_exec(uint8_t *base, size_t size);
void tj_protect_write(uint8_t *base, size_t size);

/* Emits at code a function with the standard frame-pointer prologue
 *   push rbp; mov rbp, rsp
 * that spins burn times, then (unless callback is NULL) calls callback
 * through rax (movabs rax, callback; call rax), and returns. Returns its
 * size in bytes. */
size_t tj_emit_fp(uint8_t *code, uint32_t burn, tj_fn_t callback);

/* Emits a function without a frame pointer whose frame is fixed:
 *   sub rsp, 24; mov [rsp + 16], rbp; mov ebp, 0x5a5a5a5a  (rbp is clobbered)
 *   spin; call callback; mov rbp, [rsp + 16]; add rsp, 24; ret
 * Its layout: frame_size 32, return address at 24, rbp saved at 16 (see
 * tj_fixed_layout). Returns its size in bytes. */
size_t tj_emit_fixed(uint8_t *code, uint32_t burn, tj_fn_t callback);
snapprof_jit_layout_t tj_fixed_layout(void);

/* snapprof_jit_get_stats, which must succeed. */
snapprof_jit_stats_t tj_stats(void);

/* The frames of a `go tool pprof -traces` report: for every trace, the
 * function names, leaf first, and the trace's value as printed. */
typedef struct tj_trace {
    char **names;
    size_t n;
    double value; /* in the report's unit (e.g. ms); 1 per sample with -sample_index=samples */
} tj_trace_t;

/* Parses -traces output; returns the number of traces (*out malloc'd). */
size_t tj_parse_traces(const char *text, tj_trace_t **out);
void tj_free_traces(tj_trace_t *t, size_t n);

/* Whether trace t has names[0..n) as its innermost frames. */
int tj_trace_starts_with(const tj_trace_t *t, const char *const *names, size_t n);

#endif
