/* `snapprof record --http`: /allocs' answer, the heap profile the program
 * wrote with alloc_space as its default sample type (Go's writeAlloc does
 * the same to its heap profile). */
#ifdef SNAPPROF_HAVE_MHD

#include "cli/snapprof_http_internal.h"
#include "profile.pb-c.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* /allocs: the heap profile with alloc_space as its default sample type
 * (Go's writeAlloc: the same profile, defaultSampleType "alloc_space").
 * The gzipped pprof in body is replaced; -1 when it cannot be read. */
int snapprof__http_set_alloc_space(char **body, size_t *len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return -1;
    size_t cap = *len * 4 + 4096, got = 0;
    unsigned char *raw = malloc(cap);
    int zr = Z_OK;
    z.next_in = (unsigned char *)*body;
    z.avail_in = (uInt)*len;
    while (raw && zr == Z_OK) {
        if (got == cap) {
            unsigned char *more = cap < ((size_t)1 << 30) ? realloc(raw, cap * 2) : NULL;
            if (!more) {
                free(raw);
                raw = NULL;
                break;
            }
            raw = more;
            cap *= 2;
        }
        z.next_out = raw + got;
        z.avail_out = (uInt)(cap - got);
        zr = inflate(&z, Z_NO_FLUSH);
        got = cap - z.avail_out;
    }
    inflateEnd(&z);
    if (!raw || zr != Z_STREAM_END) {
        free(raw);
        return -1;
    }
    Snapprof__Pprof__Profile *p = snapprof__pprof__profile__unpack(NULL, got, raw);
    free(raw);
    if (!p)
        return -1;
    int64_t idx = -1;
    for (size_t i = 0; i < p->n_string_table; i++)
        if (strcmp(p->string_table[i], "alloc_space") == 0)
            idx = (int64_t)i;
    unsigned char *packed = NULL;
    size_t plen = 0;
    if (idx >= 0) {
        p->default_sample_type = idx;
        plen = snapprof__pprof__profile__get_packed_size(p);
        packed = malloc(plen ? plen : 1);
        if (packed)
            snapprof__pprof__profile__pack(p, packed);
    }
    snapprof__pprof__profile__free_unpacked(p, NULL);
    if (!packed)
        return -1;
    memset(&z, 0, sizeof z);
    uLong bound = compressBound((uLong)plen) + 64;
    char *out = malloc(bound);
    int ok = out && deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                                 Z_DEFAULT_STRATEGY) == Z_OK;
    if (ok) {
        z.next_in = packed;
        z.avail_in = (uInt)plen;
        z.next_out = (unsigned char *)out;
        z.avail_out = (uInt)bound;
        ok = deflate(&z, Z_FINISH) == Z_STREAM_END;
        deflateEnd(&z);
    }
    free(packed);
    if (!ok) {
        free(out);
        return -1;
    }
    free(*body);
    *body = out;
    *len = bound - z.avail_out;
    return 0;
}
#endif /* SNAPPROF_HAVE_MHD */
