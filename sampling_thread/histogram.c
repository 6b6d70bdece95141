/* Log-linear duration histogram (see histogram.h). */
#include "sampling_thread/histogram.h"

static unsigned bucket_of(uint64_t v)
{
    if (v < 16)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* 4 .. 63 */
    unsigned sub = (unsigned)(v >> (e - 4)) & 15u;
    unsigned idx = 16u + (e - 4u) * 16u + sub;
    return idx < SNAPPROF_HIST_BUCKETS ? idx : SNAPPROF_HIST_BUCKETS - 1;
}

static uint64_t bucket_upper(unsigned idx)
{
    if (idx < 16)
        return idx;
    unsigned e = (idx - 16u) / 16u + 4u, sub = (idx - 16u) % 16u;
    return ((uint64_t)(16u + sub + 1u) << (e - 4u)) - 1u;
}

void snapprof__hist_add(snapprof__hist_t *h, uint64_t value)
{
    h->count++;
    if (value > h->max)
        h->max = value;
    h->buckets[bucket_of(value)]++;
}

uint64_t snapprof__hist_quantile(const snapprof__hist_t *h, double q)
{
    if (h->count == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->count + 0.999999);
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < SNAPPROF_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t up = bucket_upper(i);
            return up < h->max ? up : h->max;
        }
    }
    return h->max;
}
