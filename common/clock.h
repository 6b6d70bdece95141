/* The monotonic clock in nanoseconds, written once for the library and the
 * preload library. Header-only (static inline): libsnapprof-preload.so
 * links only libsnapprof.so's public API, so it could not call an internal
 * function of the library. Internal. */
#ifndef SNAPPROF_COMMON_CLOCK_H
#define SNAPPROF_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns, the clock of sample timestamps. Async-signal-safe:
 * it calls only clock_gettime(), which is on POSIX's list of
 * async-signal-safe functions (keep it so). */
static inline uint64_t snapprof__monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
