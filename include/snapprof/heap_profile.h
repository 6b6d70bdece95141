/* snapprof heap profiles: the builders that turn sampled allocations into
 * pprof heap profiles in Go's layout.
 *
 * The profiler samples allocations by bytes, not by count: each thread
 * keeps a countdown of bytes drawn from an exponential distribution of mean
 * R (the interval), and the allocation that crosses zero is sampled, so an
 * allocation of S bytes is sampled with probability 1 - exp(-S/R). Each
 * sampled allocation reaches the builders as a SNAPPROF_SAMPLE_KIND_HEAP_ALLOC
 * sample of `bytes` bytes, and its free, if it is seen, as a
 * SNAPPROF_SAMPLE_KIND_HEAP_FREE sample with the allocation's frames, bytes,
 * thread and labels (<snapprof/snapprof.h>, snapprof_sample_t).
 *
 * The heap builder writes what Go's runtime/pprof writes for a heap
 * profile (protomem.go), so `go tool pprof` reads it as one:
 *   sample types   alloc_objects/count, alloc_space/bytes,
 *                  inuse_objects/count, inuse_space/bytes (in that order)
 *   period_type    space/bytes, period R
 *   default type   inuse_space
 * A sample of S bytes stands for 1/(1 - exp(-S/R)) allocations of that size
 * (Go's scaleHeapSample), and is scaled by that before it is summed, never
 * after: summed first, a stack with one large and many small allocations
 * would be scaled by their average size and come out wrong. alloc_* are all
 * allocations made at a stack (and label set); inuse_* those not freed when
 * the profile was written, the frees scaled as their allocations were. A
 * heap profile written at exit is the leak report: inuse_space is what was
 * still held.
 *
 * The peak builder writes the same layout as it stood at one moment: when
 * the estimated bytes in use (the sum of inuse_space over every stack) were
 * highest in the run. Its inuse_* are the stacks' in-use estimates at that
 * moment, its alloc_* the allocations made up to it. It keeps the moment
 * exactly (every new maximum, not one in steps) at a bounded cost: besides
 * the current totals it keeps each stack's totals at the last maximum, and a
 * list of the stacks changed since; a new maximum copies only those, so
 * every sample is copied at most once more and the memory is twice the
 * heap builder's per stack.
 *
 * Both builders have ops version 2 and ignore time samples; a CPU profile's
 * builders (version 1) never see heap samples. Each writes one file, so a
 * run that wants both adds both to its profiler. Labels: every sample
 * carries thread_id and thread_name labels, then its own (zones included),
 * as in a CPU profile; `go tool pprof -tags` shows them.
 *
 * Thread safety: as every builder, the builders are driven by the profiler
 * they are added to; the calls here are for the thread that creates the
 * builder, before it is added to a running profiler.
 */
#ifndef SNAPPROF_HEAP_PROFILE_H
#define SNAPPROF_HEAP_PROFILE_H

#include <snapprof/snapprof.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The heap builder: when the profile completes (and at every flush),
 * writes the heap profile of every heap sample received so far to path,
 * gzipped pprof, atomically, as the pprof builder does. Returns 0, -EINVAL
 * when path or out is NULL (*out is then NULL), the path errors of
 * snapprof_pprof_builder_create(), or -ENOMEM. The interval is 512 KiB
 * (524288 bytes, the profiler's default) until
 * snapprof_heap_builder_set_interval() says otherwise.
 * snapprof_builder_set_path() moves it. Destroy it with
 * snapprof_builder_destroy() unless a profiler owns it. */
SNAPPROF_API int snapprof_heap_builder_create(const char *path, snapprof_builder_t **out);

/* The peak builder: the same, but writes the heap profile as it was when
 * the estimated bytes in use were highest (see above). A run without heap
 * samples gets a valid profile with no sample. */
SNAPPROF_API int snapprof_heap_peak_builder_create(const char *path, snapprof_builder_t **out);

/* Tells a heap or peak builder the mean sampling interval R in bytes, the
 * profiler's heap interval, which scales every sample and is the profile's
 * period. 1 means every allocation was recorded (no scaling, as Go does
 * for a rate of 1). Call it before the builder receives its first heap
 * sample: the samples are scaled as they arrive. Returns 0; -EINVAL when
 * builder is NULL or not a heap or peak builder, or bytes is 0;
 * SNAPPROF_ESTATE when the builder has received a heap sample already. */
SNAPPROF_API int snapprof_heap_builder_set_interval(snapprof_builder_t *builder, uint64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* SNAPPROF_HEAP_PROFILE_H */
