/* FNV-1a over strings, written once for the hash tables that key on names
 * and paths (module_cache/, profile_builder/), and the 64-bit finalizers
 * of MurmurHash3 and splitmix64 (hash tables, random draws). Header-only
 * (static inline): each is a few instructions and the callers hash on hot
 * paths. Internal. */
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

/* The 64-bit finalizer that MurmurHash3 (fmix64) and splitmix64 share,
 * each with its own shifts and multipliers: xor-shift, multiply,
 * xor-shift, multiply, xor-shift, so that every bit of x moves every bit
 * of the result. Async-signal-safe. */
static inline uint64_t snapprof__xmx64(uint64_t x, unsigned s1, uint64_t m1, unsigned s2,
                                       uint64_t m2, unsigned s3)
{
    x ^= x >> s1;
    x *= m1;
    x ^= x >> s2;
    x *= m2;
    x ^= x >> s3;
    return x;
}

/* MurmurHash3's fmix64. Async-signal-safe. */
static inline uint64_t snapprof__murmur3_fmix64(uint64_t h)
{
    return snapprof__xmx64(h, 33, 0xff51afd7ed558ccdull, 33, 0xc4ceb9fe1a85ec53ull, 33);
}

/* splitmix64's finalizer. Async-signal-safe. */
static inline uint64_t snapprof__splitmix64_mix(uint64_t x)
{
    return snapprof__xmx64(x, 30, 0xbf58476d1ce4e5b9ull, 27, 0x94d049bb133111ebull, 31);
}

/* The next draw of the splitmix64 generator whose state is *state (the
 * caller's alone): the state advances by the golden gamma. */
static inline uint64_t snapprof__splitmix64_next(uint64_t *state)
{
    return snapprof__splitmix64_mix(*state += 0x9e3779b97f4a7c15ull);
}

#endif
