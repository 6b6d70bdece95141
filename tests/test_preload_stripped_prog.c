/* Runs a fixed amount of work in a stripped library of the test's own
 * (test_preload_stripped_lib.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

uint64_t stripped_lib_run(uint64_t n);

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 300000000ull;
    printf("%d\n", (int)(stripped_lib_run(n) & 1));
    return 0;
}
