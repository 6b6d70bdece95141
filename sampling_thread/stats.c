/* The profiler's counters (snapprof_stats_t): a snapshot with the
 * percentiles and the other components' totals filled in, and its copy into
 * a caller's struct whatever the size of the header it was built with. */
#include "sampling_thread/profiler_internal.h"

#include "common/fd_private.h"
#include "common/fds.h"
#include "heap/heap_sampler.h"
#include "unwinder/unwinder_internal.h"

#include <errno.h>
#include <string.h>

/* Counters with the percentiles filled in. Lock held. */
void snapprof__snapshot_stats(const snapprof_profiler_t *p, snapprof_stats_t *out)
{
    *out = p->stats;
    out->size = sizeof *out;
    out->cpu_ns_total = p->cpu_removed_ns;
    for (size_t i = 0; i < p->target_count; i++)
        out->cpu_ns_total += snapprof__target_cpu_ns(p->targets[i]);
    out->cpu_ns_total = snapprof__armed_cpu_ns(p, out->cpu_ns_total);
    if (p->pool_ready) {
        out->samples_dropped = atomic_load(&p->pool.dropped);
        out->large_buffer_bytes = p->pool.large_bytes;
        out->large_buffer_bytes_max = p->pool.large_bytes_max;
    }
    out->pause_p50_ns = snapprof__hist_quantile(&p->pause, 0.50);
    out->pause_p99_ns = snapprof__hist_quantile(&p->pause, 0.99);
    out->pause_max_ns = p->pause.max;
    out->roundtrip_p50_ns = snapprof__hist_quantile(&p->roundtrip, 0.50);
    out->roundtrip_p99_ns = snapprof__hist_quantile(&p->roundtrip, 0.99);
    out->unwind_p50_ns = snapprof__hist_quantile(&p->unwind, 0.50);
    out->unwind_p99_ns = snapprof__hist_quantile(&p->unwind, 0.99);
    out->unwind_max_ns = p->unwind.max;
    out->events_dropped = snapprof__event_reader_dropped(&p->events);
    out->events_lost = p->events.lost;
    snapprof__cfi_table_store_totals(&out->cfi_tables, &out->cfi_table_bytes,
                                     &out->cfi_table_build_ns);
    out->fds_lost = snapprof__fds_lost();
    out->fds_held_max = snapprof__fds_held_max();
    out->fds_private_errno = (uint64_t)snapprof__fd_private_errno();
    out->fds_private_inline = snapprof__fd_private_inline_calls();
    if (p->ptimer_on) {
        out->unarmed_timer_samples = atomic_load(&p->ptimer.captured);
        out->unarmed_timer_passed = atomic_load(&p->ptimer.passed);
    }
    snapprof__heap_stats(p, out);
}

int snapprof_profiler_get_stats_sized(snapprof_profiler_t *p, snapprof_stats_t *out, size_t size)
{
    if (!p || !out || size < SNAPPROF_STATS_SIZE_MIN)
        return -EINVAL;
    snapprof_stats_t st;
    snapprof__sampler_lock();
    snapprof__snapshot_stats(p, &st);
    snapprof__sampler_unlock();
    size_t known = size < sizeof st ? size : sizeof st;
    st.size = known;
    memcpy(out, &st, known);
    /* A newer header's counters, which this library does not keep. */
    memset((char *)out + known, 0, size - known);
    return 0;
}
