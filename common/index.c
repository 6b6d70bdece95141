/* Open-addressing hash index (see index.h). */
#include "common/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void put(uint32_t *slots, uint64_t *hashes, size_t cap, uint64_t hash, uint32_t slot)
{
    size_t mask = cap - 1;
    size_t i = hash & mask;
    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = slot;
    hashes[i] = hash;
}

int snapprof__index_reserve(snapprof__index_t *x)
{
    if ((x->count + 1) * 2 <= x->cap)
        return 0;
    /* A slot holds index + 1 in 32 bits. */
    if (x->count >= UINT32_MAX - 1)
        return -ENOMEM;
    size_t ncap = x->cap ? x->cap * 2 : 64;
    uint32_t *slots = calloc(ncap, sizeof *slots);
    uint64_t *hashes = malloc(ncap * sizeof *hashes);
    if (slots == NULL || hashes == NULL) {
        free(slots);
        free(hashes);
        return -ENOMEM;
    }
    for (size_t i = 0; i < x->cap; i++)
        if (x->slots[i] != 0)
            put(slots, hashes, ncap, x->hashes[i], x->slots[i]);
    free(x->slots);
    free(x->hashes);
    x->slots = slots;
    x->hashes = hashes;
    x->cap = ncap;
    return 0;
}

void snapprof__index_insert(snapprof__index_t *x, uint64_t hash, size_t index)
{
    put(x->slots, x->hashes, x->cap, hash, (uint32_t)index + 1);
    x->count++;
}

void snapprof__index_free(snapprof__index_t *x)
{
    free(x->slots);
    free(x->hashes);
    memset(x, 0, sizeof *x);
}
