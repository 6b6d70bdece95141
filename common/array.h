/* Room for one more element at the end of a growable array (pointer,
 * count, capacity), written once for the arrays that grow by doubling in
 * module_cache/ and profile_builder/. Header-only (static inline), like
 * hash.h. Internal. */
#ifndef SNAPPROF_COMMON_ARRAY_H
#define SNAPPROF_COMMON_ARRAY_H

#include <stdlib.h>

/* Returns array (*cap elements of size bytes, count of them in use) with
 * room for one more: array itself while count < *cap, otherwise array
 * realloc'd to twice *cap elements (first when *cap is 0) with *cap set to
 * that. NULL when out of memory: array and *cap are then unchanged. */
static inline void *snapprof__array_room(void *array, size_t *cap, size_t count, size_t size,
                                         size_t first)
{
    if (count < *cap)
        return array;
    size_t n = *cap ? *cap * 2 : first;
    void *p = realloc(array, n * size);
    if (p != NULL)
        *cap = n;
    return p;
}

#endif
