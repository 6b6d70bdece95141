/* One hexadecimal digit's value, for the parsers of /proc/self/maps
 * (proc_files.c) and of perf maps (module_cache/jit_perf_map.c).
 * Internal. Async-signal-safe. */
#ifndef SNAPPROF_COMMON_HEX_H
#define SNAPPROF_COMMON_HEX_H

/* The value of c as a hexadecimal digit (either case), or -1. */
static inline int snapprof__hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
