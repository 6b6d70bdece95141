/* Bump arena (see arena.h). Blocks come from calloc and are given back
 * only by snapprof__arena_release(): the module cache never releases its
 * arenas, the pprof builder releases its own when it is destroyed. Every
 * block is zeroed and no byte is handed out twice, so what
 * snapprof__arena_alloc() returns reads as zeros. */
#include "common/arena.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Large enough that a typical process needs a handful of blocks, small
 * enough that an idle cache does not hold much. */
#define ARENA_BLOCK_SIZE (64u * 1024u)

struct snapprof__arena_block {
    snapprof__arena_block_t *next;
    size_t used, cap;
    alignas(16) unsigned char data[];
};

void *snapprof__arena_alloc(snapprof__arena_t *arena, size_t size, size_t align)
{
    if (align == 0)
        align = 1;
    snapprof__arena_block_t *b = arena->head;
    if (b != NULL) {
        size_t at = (b->used + align - 1) & ~(align - 1);
        if (at <= b->cap && size <= b->cap - at) {
            b->used = at + size;
            return b->data + at;
        }
    }
    /* A large request gets a block of its own, kept behind the current one
     * so the free space left in that block is not abandoned. */
    int dedicated = size > ARENA_BLOCK_SIZE / 4;
    size_t cap = dedicated ? size : ARENA_BLOCK_SIZE;
    if (cap > SIZE_MAX - sizeof *b)
        return NULL;
    snapprof__arena_block_t *nb = calloc(1, sizeof *nb + cap);
    if (nb == NULL)
        return NULL;
    nb->cap = cap;
    nb->used = size;
    arena->bytes += sizeof *nb + cap;
    if (dedicated && b != NULL) {
        nb->next = b->next;
        b->next = nb;
    } else {
        nb->next = b;
        arena->head = nb;
    }
    return nb->data;
}

char *snapprof__arena_strdup(snapprof__arena_t *arena, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = snapprof__arena_alloc(arena, n, 1);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

void snapprof__arena_release(snapprof__arena_t *arena)
{
    snapprof__arena_block_t *b = arena->head;
    while (b != NULL) {
        snapprof__arena_block_t *next = b->next;
        free(b);
        b = next;
    }
    arena->head = NULL;
    arena->bytes = 0;
}
