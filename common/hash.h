/* FNV-1a over strings, written once for the hash tables that key on names
 * and paths (module_cache/, profile_builder/). Header-only (static inline):
 * the loop is a few instructions and the callers hash on hot paths.
 * Internal. */
#ifndef SNAPPROF_COMMON_HASH_H
#define SNAPPROF_COMMON_HASH_H

#include <stdint.h>

/* FNV-1a, 64 bits: the standard offset basis and prime. */
#define SNAPPROF_FNV1A64_BASIS 0xcbf29ce484222325ull
#define SNAPPROF_FNV1A64_PRIME 0x100000001b3ull

/* Hashes the bytes of the NUL-terminated string s into h (start with
 * SNAPPROF_FNV1A64_BASIS, or the hash of what comes before s). Reads only
 * s; async-signal-safe. */
static inline uint64_t snapprof__fnv1a64(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * SNAPPROF_FNV1A64_PRIME;
    return h;
}

#endif
