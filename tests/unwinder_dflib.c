/* A shared library whose CFI lives only in .debug_frame: built with -O2 -g
 * -fomit-frame-pointer -fno-asynchronous-unwind-tables -fno-unwind-tables,
 * so it has no .eh_frame FDE (and no .eh_frame_hdr) and libunwind cannot
 * unwind it. Its hot code is three calls deep and calls back into the
 * executable. Built twice: as unwinder_dflib, linked in, and (with
 * DFLIB_SPLIT, other names) as a module whose .debug_frame was moved to a
 * separate file found through .gnu_debuglink; and (unwinder_dfexe.c) into
 * the test executable, whose .eh_frame_hdr covers its other code. */
#include <stdint.h>

#ifndef DFLIB
#ifdef DFLIB_SPLIT
#define DFLIB(name) dfsplit_##name
#else
#define DFLIB(name) dflib_##name
#endif
#endif

typedef uint64_t (*dflib_cb)(uint64_t);

__attribute__((noinline)) uint64_t DFLIB(hot)(uint64_t n)
{
    uint64_t x = n | 3;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 2862933555777941757u + 3037000493u;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) uint64_t DFLIB(middle)(uint64_t n, dflib_cb cb)
{
    /* Locals live across the calls, so the frame saves callee-saved
     * registers and its CFA moves away from a plain sp + 8. */
    uint64_t a = DFLIB(hot)(n);
    uint64_t b = cb(n);
    uint64_t c = DFLIB(hot)(n / 2);
    __asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c));
    return a ^ b ^ c;
}

__attribute__((noinline)) uint64_t DFLIB(outer)(uint64_t n, dflib_cb cb)
{
    uint64_t r = DFLIB(middle)(n, cb);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}
