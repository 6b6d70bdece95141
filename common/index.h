/* An open-addressing hash index, written once for the interning tables of
 * the profile builders (the pprof builder and the stack table). Internal.
 *
 * It maps a key's 64-bit hash to index + 1 of an entry that the owner keeps
 * in an array of its own; keys are compared by the owner's callback. A slot
 * holds index + 1 (0 is empty) and the key's full hash, so probing compares
 * keys only when the hashes agree and growing never rehashes a key. Entries
 * are never removed, so linear probing needs no tombstones.
 *
 * Not thread-safe; not async-signal-safe (it allocates). */
#ifndef SNAPPROF_COMMON_INDEX_H
#define SNAPPROF_COMMON_INDEX_H

#include <stddef.h>
#include <stdint.h>

/* Zero-initialize ({0}) before the first use. */
typedef struct snapprof__index {
    uint32_t *slots;
    uint64_t *hashes;
    size_t cap; /* a power of two, or 0 */
    size_t count;
} snapprof__index_t;

/* Whether the owner's entry at index equals key. */
typedef int (*snapprof__index_eq_cb)(const void *owner, uint32_t index, const void *key);

/* Returns index + 1 of the entry under hash that eq(owner, index, key)
 * finds equal, or 0. Inline: it is on the builders' per-sample path and
 * inlining lets the compiler call eq directly. */
static inline uint32_t snapprof__index_find(const snapprof__index_t *x, uint64_t hash,
                                            snapprof__index_eq_cb eq, const void *owner,
                                            const void *key)
{
    if (x->cap == 0)
        return 0;
    size_t mask = x->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t slot = x->slots[i];
        if (slot == 0)
            return 0;
        if (x->hashes[i] == hash && eq(owner, slot - 1, key))
            return slot;
    }
}

/* Makes room for one more entry, keeping the load at most one half.
 * Returns 0 or -ENOMEM (the index is unchanged then). */
int snapprof__index_reserve(snapprof__index_t *x);

/* Adds index under hash; the caller has called snapprof__index_reserve()
 * and checked with snapprof__index_find() that the key is not there. */
void snapprof__index_insert(snapprof__index_t *x, uint64_t hash, size_t index);

/* Frees the index and zeroes it (it can be used again). */
void snapprof__index_free(snapprof__index_t *x);

#endif
