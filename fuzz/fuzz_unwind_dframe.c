/* Code for fuzz_unwind whose CFI is only in .debug_frame (built with -g
 * -fno-asynchronous-unwind-tables -fno-unwind-tables), so that the
 * .debug_frame unwinder has frames of its own to walk. */
int fuzz_dframe_leaf(int x);
int fuzz_dframe_mid(int x, int (*cb)(int));

__attribute__((noinline)) int fuzz_dframe_leaf(int x)
{
    volatile int v = x * 3;
    return v + 1;
}

__attribute__((noinline)) int fuzz_dframe_mid(int x, int (*cb)(int))
{
    volatile int buf[16];
    for (int i = 0; i < 16; i++)
        buf[i] = x + i;
    return cb(buf[x & 15]) + fuzz_dframe_leaf(x);
}
