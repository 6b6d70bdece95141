/* profile_builder_heap: synthetic heap samples through the heap and peak builders, read back by
 * the real go tool pprof. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include "profile_builder/profile_builder_calls.h"

#include <snapprof/heap_profile.h>
#include <snapprof/snapprof.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define R 65536 /* the interval the tests use: other than the default, to see it written */

static snapprof_frame_t jit(const char *name, uintptr_t offset)
{
    snapprof_frame_t f = {pbt_jit_module.start + offset, &pbt_jit_module, SNAPPROF_FRAME_JIT, name};
    return f;
}

/* Go's scaleHeapSample for one sample of size bytes. */
static double scale(uint64_t bytes)
{
    return 1 / (1 - exp(-(double)bytes / R));
}

typedef struct expect {
    double alloc_objects, alloc_space, inuse_objects, inuse_space;
} expect_t;

static uint64_t clock_ns = 1000;

/* One heap sample of kind at the stack leaf <- main_loop, counted into e. */
static void heap_sample(snapprof_builder_t *b, snapprof_sample_kind_t kind, const char *leaf,
                        uint64_t bytes, expect_t *e)
{
    snapprof_frame_t frames[] = {jit(leaf, 0x100 + strlen(leaf)), jit("main_loop", 0x900)};
    snapprof_label_t zone = {.key = "zone", .str = "load"};
    snapprof_sample_t s = {.frames = frames,
                           .frame_count = 2,
                           .timestamp_ns = clock_ns += 1000,
                           .tid = 4242,
                           .thread_name = "worker",
                           .labels = &zone,
                           .label_count = 1,
                           .size = sizeof s,
                           .kind = kind,
                           .bytes = bytes};
    ASSERT_OK(snapprof__builder_sample(b, &s));
    if (e == NULL)
        return;
    double k = scale(bytes);
    if (kind == SNAPPROF_SAMPLE_KIND_HEAP_ALLOC) {
        e->alloc_objects += k;
        e->alloc_space += k * (double)bytes;
        e->inuse_objects += k;
        e->inuse_space += k * (double)bytes;
    } else {
        e->inuse_objects -= k;
        e->inuse_space -= k * (double)bytes;
    }
}

static snapprof_builder_t *heap_create(const char *path, int peak)
{
    snapprof_builder_t *b = NULL;
    ASSERT_OK(peak ? snapprof_heap_peak_builder_create(path, &b)
                   : snapprof_heap_builder_create(path, &b));
    ASSERT_NOT_NULL(b);
    ASSERT_OK(snapprof_heap_builder_set_interval(b, R));
    return b;
}

/* Fails unless -top with sample_index shows name's flat value within 1
 * (the file's values are rounded once per stack) of want. */
static void expect_top(const char *path, const char *index, const char *name, double want)
{
    char extra[128];
    /* Bytes in bytes (not kB), and no node dropped for being small. */
    snprintf(extra, sizeof extra, "-sample_index=%s -nodefraction=0%s", index,
             strstr(index, "space") ? " -unit=B" : "");
    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top(path, extra, &rows, &raw);
    const tu_top_row_t *r = tu_top_find(rows, n, name);
    if (want < 0.5) {
        if (r != NULL && r->flat != 0)
            TEST_FAIL("%s: %s is %.0f, want none:\n%s", index, name, r->flat, raw);
    } else {
        if (r == NULL)
            TEST_FAIL("%s: %s missing:\n%s", index, name, raw);
        if (fabs(r->flat - want) > 1.01)
            TEST_FAIL("%s: %s is %.0f, want %.1f:\n%s", index, name, r->flat, want, raw);
        printf("%-14s %-12s %12.0f (want %.1f)\n", index, name, r->flat, want);
    }
    free(rows);
    free(raw);
}

static void expect_all(const char *path, const char *name, const expect_t *e)
{
    expect_top(path, "alloc_objects", name, e->alloc_objects);
    expect_top(path, "alloc_space", name, e->alloc_space);
    expect_top(path, "inuse_objects", name, e->inuse_objects);
    expect_top(path, "inuse_space", name, e->inuse_space);
}

/* Three stacks: big blocks partly freed, small blocks kept, and a stack of
 * one large and many tiny blocks, whose total comes out right only when
 * each sample is scaled by its own size before summing (by their average
 * size it would come out 14% less). Time samples in between
 * count for nothing. */
static void test_values(void)
{
    char *path = pbt_tmp_path("pb-heap", "prof.heap.pb.gz");
    snapprof_builder_t *b = heap_create(path, 0);
    expect_t big = {0}, small = {0}, mixed = {0};
    for (int i = 0; i < 50; i++)
        heap_sample(b, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "big_alloc", 100000, &big);
    for (int i = 0; i < 20; i++)
        heap_sample(b, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "big_alloc", 100000, &big);
    for (int i = 0; i < 400; i++)
        heap_sample(b, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "small_alloc", 1000 + (uint64_t)i, &small);
    heap_sample(b, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "mixed_alloc", 1 << 20, &mixed);
    for (int i = 0; i < 30; i++)
        heap_sample(b, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "mixed_alloc", 64, &mixed);
    for (int i = 0; i < 10; i++)
        heap_sample(b, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "mixed_alloc", 64, &mixed);
    snapprof_frame_t f = jit("cpu_fn", 0x40);
    snapprof_sample_t time = {
        .frames = &f, .frame_count = 1, .cpu_ns = 1000000, .tid = 1, .thread_name = "t"};
    ASSERT_OK(snapprof__builder_sample(b, &time));
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    /* The interval scales samples as they come: too late to change it. */
    ASSERT_EQ(snapprof_heap_builder_set_interval(b, 1), SNAPPROF_ESTATE);
    snapprof_builder_destroy(b);

    /* By average size (Go's per-record rule applied to a mixed record)
     * mixed_alloc's space would be far less: the test tells them apart. */
    double avg = (double)((1 << 20) + 30 * 64) / 31;
    double by_average = (double)((1 << 20) + 30 * 64) * scale((uint64_t)avg);
    printf("mixed_alloc alloc_space %.0f scaled per sample, %.0f by average size\n",
           mixed.alloc_space, by_average);
    ASSERT(fabs(by_average - mixed.alloc_space) > 0.1 * mixed.alloc_space);

    expect_all(path, "big_alloc", &big);
    expect_all(path, "small_alloc", &small);
    expect_all(path, "mixed_alloc", &mixed);
    expect_top(path, "alloc_space", "cpu_fn", 0);
    /* main_loop holds it all, so its cum is the total. */
    tu_top_row_t *rows;
    int n = tu_pprof_top(path, "-sample_index=inuse_space -unit=B", &rows, NULL);
    const tu_top_row_t *main_loop = tu_top_find(rows, n, "main_loop");
    ASSERT_NOT_NULL(main_loop);
    double total = big.inuse_space + small.inuse_space + mixed.inuse_space;
    ASSERT(fabs(main_loop->cum - total) <= 3.01);
    free(rows);

    /* The default sample type is inuse_space, as in Go's heap profiles. */
    double small_pct = tu_top_cum_pct(path, "", "small_alloc", 1);
    ASSERT(fabs(small_pct - 100 * small.inuse_space / total) < 0.05);

    /* Labels and zones as in a CPU profile. */
    char *tags = tu_pprof_ok("-tags", path);
    ASSERT_CONTAINS(tags, "thread_name");
    ASSERT_CONTAINS(tags, "worker");
    ASSERT_CONTAINS(tags, "zone");
    ASSERT_CONTAINS(tags, "load");
    free(tags);

    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    ASSERT_EQ(p->n_sample, 3);
    ASSERT_EQ(p->n_comment, 1);
    ASSERT_CONTAINS(pbt_str(p, p->comment[0]), "481 sampled allocations and 30 frees");
    snapprof__pprof__profile__free_unpacked(p, NULL);
    pbt_remove(path);
}

/* What Go writes: the four types in order, the period type and period,
 * inuse_space the default. */
static void test_layout(void)
{
    char *path = pbt_tmp_path("pb-heap", "layout.pb.gz");
    snapprof_builder_t *b = heap_create(path, 0);
    heap_sample(b, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "one_alloc", 4096, NULL);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    char *raw = tu_pprof_ok("-raw", path);
    printf("%.600s\n", raw);
    ASSERT_CONTAINS(raw, "PeriodType: space bytes\n");
    ASSERT_CONTAINS(raw, "Period: 65536\n");
    ASSERT_CONTAINS(raw, "alloc_objects/count alloc_space/bytes inuse_objects/count "
                         "inuse_space/bytes[dflt]\n");
    free(raw);
    pbt_remove(path);

    /* Unset, the interval is the profiler's default, 512 KiB. */
    path = pbt_tmp_path("pb-heap", "default.pb.gz");
    ASSERT_OK(snapprof_heap_builder_create(path, &b));
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    raw = tu_pprof_ok("-raw", path);
    ASSERT_CONTAINS(raw, "Period: 524288\n");
    free(raw);
    pbt_remove(path);
}

/* No heap sample: still a profile pprof reads, with no sample. */
static void test_empty(void)
{
    /* The heap file, then the peak file. */
    char *paths[] = {pbt_tmp_path("pb-heap", "empty.pb.gz"),
                     pbt_tmp_path("pb-heap", "empty.peak.pb.gz")};
    for (int i = 0; i < 2; i++) {
        snapprof_builder_t *b = heap_create(paths[i], i);
        ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
        snapprof_builder_destroy(b);
    }
    for (int i = 0; i < 2; i++) {
        Snapprof__Pprof__Profile *p = pbt_load(paths[i]);
        pbt_check_valid(p);
        ASSERT_EQ(p->n_sample, 0);
        snapprof__pprof__profile__free_unpacked(p, NULL);
        char *top = tu_pprof_ok("-top", paths[i]);
        ASSERT_CONTAINS(top, "Type: inuse_space");
        free(top);
        pbt_remove(paths[i]);
    }
}

/* The CPU builder (ops version 1) never counts a heap sample: not through
 * the profiler's dispatch, nor handed to its ops directly; and the heap
 * builders take only the heap kinds. */
static void test_cpu_ignores_heap(void)
{
    char *path = pbt_tmp_path("pb-heap", "cpu.pb.gz");
    snapprof_builder_t *b = pbt_create(path);
    ASSERT_EQ(b->ops->version, 1);
    heap_sample(b, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "heap_fn", 1 << 20, NULL);
    snapprof_frame_t frames[] = {jit("heap_fn", 0x100)};
    snapprof_sample_t s = {.frames = frames,
                           .frame_count = 1,
                           .cpu_ns = 5,
                           .tid = 1,
                           .thread_name = "t",
                           .size = sizeof s,
                           .kind = SNAPPROF_SAMPLE_KIND_HEAP_FREE,
                           .bytes = 100};
    pbt_sample(b, &s);
    s.kind = SNAPPROF_SAMPLE_KIND_TIME;
    s.frames = (snapprof_frame_t[]){jit("time_fn", 0x200)};
    pbt_sample(b, &s);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    ASSERT_EQ(p->n_sample, 1);
    ASSERT_STR_EQ(pbt_location_name(p, p->sample[0]->location_id[0]), "time_fn");
    snapprof__pprof__profile__free_unpacked(p, NULL);
    pbt_remove(path);

    /* The heap builders are version 2 and not pprof builders. */
    path = pbt_tmp_path("pb-heap", "h.pb.gz");
    b = heap_create(path, 0);
    ASSERT_EQ(b->ops->version, 2);
    ASSERT_EQ(snapprof_pprof_builder_set_path(b, path), -EINVAL);
    ASSERT_EQ(snapprof_heap_builder_set_interval(NULL, R), -EINVAL);
    ASSERT_EQ(snapprof_heap_builder_set_interval(b, 0), -EINVAL);
    snapprof_builder_t *cpu = pbt_create(path);
    ASSERT_EQ(snapprof_heap_builder_set_interval(cpu, R), -EINVAL);
    snapprof_builder_destroy(cpu);
    snapprof_builder_t *none = (snapprof_builder_t *)1;
    ASSERT_EQ(snapprof_heap_builder_create(NULL, &none), -EINVAL);
    ASSERT_NULL(none);
    ASSERT_EQ(snapprof_heap_peak_builder_create(path, NULL), -EINVAL);
    snapprof_builder_destroy(b);
    pbt_remove(path);
}

/* The peak: in use rises to a first maximum (first_a and first_b), falls
 * (they are freed), rises less (second_c): the peak file shows the first
 * maximum's stacks, with what they held then; the heap file shows what is
 * held at the end. */
static void test_peak(void)
{
    char *path = pbt_tmp_path("pb-heap", "prof.heap.pb.gz");
    char *peak_path = pbt_tmp_path("pb-heap", "prof.heappeak.pb.gz");
    snapprof_builder_t *b = heap_create(path, 0);
    snapprof_builder_t *pb = heap_create(peak_path, 1);
    snapprof_builder_t *both[] = {b, pb};
    expect_t a = {0}, bb = {0}, c = {0}, peak_a = {0}, peak_bb = {0};
    for (int k = 0; k < 2; k++) {
        expect_t *ea = k ? NULL : &a, *eb = k ? NULL : &bb, *ec = k ? NULL : &c;
        snapprof_builder_t *x = both[k];
        for (int i = 0; i < 40; i++)
            heap_sample(x, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "first_a", 200000, ea);
        for (int i = 0; i < 100; i++)
            heap_sample(x, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "first_b", 30000, eb);
        if (k == 0) {
            peak_a = a;
            peak_bb = bb;
        }
        for (int i = 0; i < 40; i++)
            heap_sample(x, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "first_a", 200000, ea);
        for (int i = 0; i < 90; i++)
            heap_sample(x, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "first_b", 30000, eb);
        for (int i = 0; i < 60; i++)
            heap_sample(x, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "second_c", 200000, ec);
        ASSERT_OK(pbt_complete(x, SNAPPROF_MODE_CPU, NULL));
    }
    snapprof_builder_destroy(b);
    snapprof_builder_destroy(pb);
    double first = peak_a.inuse_space + peak_bb.inuse_space;
    double second = bb.inuse_space + c.inuse_space;
    printf("first maximum %.0f bytes, second %.0f\n", first, second);
    ASSERT(second < first && second > 0.5 * first);

    expect_top(peak_path, "inuse_space", "first_a", peak_a.inuse_space);
    expect_top(peak_path, "inuse_space", "first_b", peak_bb.inuse_space);
    expect_top(peak_path, "inuse_space", "second_c", 0);
    expect_top(peak_path, "alloc_objects", "first_b", peak_bb.alloc_objects);
    expect_top(path, "inuse_space", "first_a", 0);
    expect_top(path, "inuse_space", "first_b", bb.inuse_space);
    expect_top(path, "inuse_space", "second_c", c.inuse_space);

    Snapprof__Pprof__Profile *p = pbt_load(peak_path);
    pbt_check_valid(p);
    ASSERT_EQ(p->n_sample, 2); /* second_c had nothing at the peak */
    ASSERT_CONTAINS(pbt_str(p, p->comment[0]), "snapprof: heap peak, an estimated");
    snapprof__pprof__profile__free_unpacked(p, NULL);
    char *comments = tu_pprof_ok("-comments", peak_path);
    printf("%s", comments);
    free(comments);
    pbt_remove(path);
    pbt_remove(peak_path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"values", test_values}, {"layout", test_layout},
        {"empty", test_empty},   {"cpu_ignores_heap", test_cpu_ignores_heap},
        {"peak", test_peak},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
