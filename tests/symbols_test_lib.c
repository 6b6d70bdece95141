/* A small shared library for the symbols tests, built three ways: with
 * DWARF then split into a stripped object plus a separate debug file, and
 * without any debug information. dl_local_helper is static, so once the
 * object is stripped only the debug file can name it. */
volatile unsigned symbols_test_lib_sink;

__attribute__((noinline)) static unsigned dl_local_helper(unsigned x)
{
    for (int i = 0; i < 8; i++)
        x = x * 31 + (unsigned)i;
    symbols_test_lib_sink = x;
    return x;
}

__attribute__((noinline)) unsigned dl_public_entry(unsigned x)
{
    return dl_local_helper(x) + dl_local_helper(x + 1);
}

/* The address of the local function, for the tests to symbolize. */
void *dl_local_helper_address(void)
{
    return (void *)dl_local_helper;
}
