/* Log-linear histogram of durations for p50/p99 without keeping every
 * value: 16 buckets per power of two (about 6 % resolution), fixed size. */
#ifndef SNAPPROF_HISTOGRAM_H
#define SNAPPROF_HISTOGRAM_H

#include <stdint.h>

#define SNAPPROF_HIST_BUCKETS (16 + 60 * 16)

typedef struct snapprof__hist {
    uint64_t count;
    uint64_t max;
    uint32_t buckets[SNAPPROF_HIST_BUCKETS];
} snapprof__hist_t;

void snapprof__hist_add(snapprof__hist_t *h, uint64_t value);
/* The value at quantile q (0 < q <= 1), as the upper bound of its bucket
 * clamped to the maximum seen; 0 when empty. */
uint64_t snapprof__hist_quantile(const snapprof__hist_t *h, double q);

#endif
