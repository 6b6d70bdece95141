/* A second shared library for the unwinder tests, built with -O2
 * -fomit-frame-pointer: its frames can only be unwound with its CFI. It
 * runs hot code of its own and calls back into the executable. */
#include <stdint.h>

typedef uint64_t (*unwinder_testlib_cb)(uint64_t);

__attribute__((noinline)) uint64_t testlib_hot(uint64_t n)
{
    uint64_t x = n | 1;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 2862933555777941757u + 3037000493u;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) uint64_t testlib_middle(uint64_t n, unwinder_testlib_cb cb)
{
    /* Several locals live across the calls, so the frame saves callee-saved
     * registers and moves the CFA away from a plain sp + 8. */
    uint64_t a = testlib_hot(n);
    uint64_t b = cb(n);
    uint64_t c = testlib_hot(n / 2);
    __asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c));
    return a ^ b ^ c;
}

__attribute__((noinline)) uint64_t testlib_outer(uint64_t n, unwinder_testlib_cb cb)
{
    uint64_t r = testlib_middle(n, cb);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}
