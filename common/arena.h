/* A bump arena, written once for everything that allocates many small
 * objects which die together or never: the module cache (entries, symbols
 * and strings that live as long as the process), the pprof builder
 * (messages that die with the builder) and the stack table (names it
 * copies). Internal.
 *
 * Not thread-safe: each arena is guarded by its owner (a mutex, or one
 * thread). Not async-signal-safe: it calls calloc(). */
#ifndef SNAPPROF_COMMON_ARENA_H
#define SNAPPROF_COMMON_ARENA_H

#include <stddef.h>

/* Zero-initialize ({0}) before the first use; needs no other setup. */
typedef struct snapprof__arena_block snapprof__arena_block_t;
typedef struct snapprof__arena {
    snapprof__arena_block_t *head; /* the block being filled; older ones follow */
    size_t bytes;                  /* total bytes reserved from malloc */
} snapprof__arena_t;

/* Returns size bytes aligned to align (a power of two, at most 16; 0 means
 * 1), zeroed, or NULL when out of memory. What it returns never moves and
 * stays valid until snapprof__arena_release(). */
void *snapprof__arena_alloc(snapprof__arena_t *arena, size_t size, size_t align);

/* Copies s (NUL-terminated) into the arena; NULL when out of memory. */
char *snapprof__arena_strdup(snapprof__arena_t *arena, const char *s);

/* Frees every block and empties the arena (it can be used again). Only
 * for an arena whose contents nobody kept. */
void snapprof__arena_release(snapprof__arena_t *arena);

#endif
