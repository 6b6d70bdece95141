/* The flight builder (<snapprof/flight.h>): keeps the last minutes of a
 * profile's samples and replays a window of them into another builder.
 * Would catch samples outside the window replayed or inside it lost,
 * strings kept by pointer (dead after xOnSample), pieces kept past the
 * span or memory past max_bytes, and a replay of a live profile that
 * differs from what the profile's own builder received. */
#include "test.h"
#include "test_util.h"

#include "profile_builder/profile_builder_internal.h"

#include <snapprof/flight.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* A builder that keeps a copy of what it is given                          */
/* ------------------------------------------------------------------------ */

typedef struct kept {
    uint64_t timestamp_ns, cpu_ns, wall_ns;
    pid_t tid;
    unsigned flags;
    size_t frame_count, label_count;
    uintptr_t pc0;
    char thread[32], jit[32], key[32], str[32], unit[16];
    int64_t num1;
} kept_t;

typedef struct keeper {
    kept_t *s;
    size_t n, cap;
    int started, completed, fail_start;
    snapprof_profile_info_t started_info, completed_info;
    snapprof_stats_t completed_stats; /* a copy of *completed_info.stats */
    int had_stats;
} keeper_t;

static void copy_str(char *dst, size_t size, const char *s)
{
    snprintf(dst, size, "%s", s ? s : "(null)");
}

static int keep_sample(void *ud, const snapprof_sample_t *s)
{
    keeper_t *k = ud;
    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 256;
        k->s = realloc(k->s, k->cap * sizeof *k->s);
        ASSERT_NOT_NULL(k->s);
    }
    kept_t *c = &k->s[k->n++];
    memset(c, 0, sizeof *c);
    c->timestamp_ns = s->timestamp_ns;
    c->cpu_ns = s->cpu_ns;
    c->wall_ns = s->wall_ns;
    c->tid = s->tid;
    c->flags = s->flags;
    c->frame_count = s->frame_count;
    c->label_count = s->label_count;
    c->pc0 = s->frame_count ? s->frames[0].pc : 0;
    copy_str(c->thread, sizeof c->thread, s->thread_name);
    if (s->frame_count > 1)
        copy_str(c->jit, sizeof c->jit, s->frames[1].name);
    if (s->label_count > 1) {
        copy_str(c->key, sizeof c->key, s->labels[0].key);
        copy_str(c->str, sizeof c->str, s->labels[0].str);
        copy_str(c->unit, sizeof c->unit, s->labels[1].num_unit);
        c->num1 = s->labels[1].num;
    }
    return 0;
}

static int keep_started(void *ud, const snapprof_profile_info_t *info)
{
    keeper_t *k = ud;
    k->started++;
    k->started_info = *info;
    return k->fail_start;
}

static int keep_completed(void *ud, const snapprof_profile_info_t *info)
{
    keeper_t *k = ud;
    k->completed++;
    k->completed_info = *info;
    k->had_stats = info->stats != NULL;
    if (info->stats)
        k->completed_stats = *info->stats;
    return 0;
}

static const snapprof_builder_ops_t keeper_ops = {
    .version = SNAPPROF_BUILDER_OPS_VERSION,
    .name = "keeper",
    .xOnProfileStarted = keep_started,
    .xOnSample = keep_sample,
    .xOnProfileCompleted = keep_completed,
};

/* ------------------------------------------------------------------------ */
/* Samples made up, with timestamps around now                              */
/* ------------------------------------------------------------------------ */

static snapprof_builder_t *make_flight(uint64_t span_ns, uint64_t piece_ns, size_t max_bytes)
{
    snapprof_flight_params_t fp = {
        .size = sizeof fp, .span_ns = span_ns, .piece_ns = piece_ns, .max_bytes = max_bytes};
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_flight_builder_create(&fp, &b));
    return b;
}

static void start_flight(snapprof_builder_t *f, uint64_t start_mono_ns)
{
    snapprof_profile_info_t info = {.start_time_ns = 1700000000000000000ull,
                                    .start_mono_ns = start_mono_ns,
                                    .period_ns = 1000000,
                                    .mode = SNAPPROF_MODE_CPU};
    ASSERT_OK(f->ops->xOnProfileStarted(f->user_data, &info));
}

/* One sample at ts with nframes frames, the second a JIT frame named from
 * a buffer of the caller's that is overwritten after the call, and two
 * labels. */
static void feed(snapprof_builder_t *f, uint64_t ts, pid_t tid, size_t nframes, uint64_t cpu_ns)
{
    char thread[32], jit[32], key[32], str[32], unit[16];
    snprintf(thread, sizeof thread, "worker-%d", (int)tid);
    snprintf(jit, sizeof jit, "jit_fn_%d", (int)tid);
    snprintf(key, sizeof key, "request");
    snprintf(str, sizeof str, "req-%d", (int)tid);
    snprintf(unit, sizeof unit, "bytes");
    snapprof_frame_t frames[64];
    ASSERT_LE(nframes, 64);
    for (size_t i = 0; i < nframes; i++)
        frames[i] = (snapprof_frame_t){.pc = 0x400000 + 16 * i + (uintptr_t)tid,
                                       .kind = i == 1 ? SNAPPROF_FRAME_JIT : SNAPPROF_FRAME_NATIVE,
                                       .name = i == 1 ? jit : NULL};
    snapprof_label_t labels[2] = {{.key = key, .str = str},
                                  {.key = "size", .num = tid * 10, .num_unit = unit}};
    snapprof_sample_t s = {.frames = frames,
                           .frame_count = nframes,
                           .timestamp_ns = ts,
                           .cpu_ns = cpu_ns,
                           .wall_ns = 0,
                           .tid = tid,
                           .thread_name = thread,
                           .labels = labels,
                           .label_count = 2,
                           .flags = SNAPPROF_SAMPLE_TRUNCATED_DEPTH,
                           .size = sizeof s,
                           .kind = SNAPPROF_SAMPLE_KIND_TIME};
    ASSERT_OK(f->ops->xOnSample(f->user_data, &s));
    /* What the profiler's own buffers would hold next. */
    memset(thread, 'x', sizeof thread - 1);
    memset(jit, 'x', sizeof jit - 1);
    memset(str, 'x', sizeof str - 1);
    memset(unit, 'x', sizeof unit - 1);
}

/* Feeds count samples of nframes frames, one every step_ns from base, of tids
 * 1, 2, ... and 1 ms each. */
static void feed_every(snapprof_builder_t *f, uint64_t base, int count, uint64_t step_ns,
                       size_t nframes)
{
    for (int i = 0; i < count; i++)
        feed(f, base + (uint64_t)i * step_ns, 1 + i, nframes, 1000000);
}

/* What f says it keeps (snapprof_flight_builder_get_info()). */
static snapprof_flight_info_t info_of(snapprof_builder_t *f)
{
    snapprof_flight_info_t fi = {.size = sizeof fi};
    ASSERT_OK(snapprof_flight_builder_get_info(f, &fi));
    return fi;
}

/* Samples 4.5, 3.5, 2.5, 1.5 and 0.5 s old (tid 45 ... 5); a window of the
 * last 2 s holds the two youngest, every string as it was. */
static void test_window(void)
{
    snapprof_builder_t *f = make_flight(10000000000ull, 1000000000ull, 0);
    uint64_t now = tu_mono_ns();
    start_flight(f, now - 5000000000ull);
    for (int age10 = 45; age10 > 0; age10 -= 10)
        feed(f, now - (uint64_t)age10 * 100000000ull, age10, 3, 1000000u * (uint64_t)age10);
    keeper_t k = {0};
    snapprof_builder_t *into = tu_builder(&keeper_ops, &k);
    ASSERT_OK(snapprof_flight_builder_replay(f, 2000000000ull, into));
    ASSERT_EQ(k.started, 1);
    ASSERT_EQ(k.completed, 1);
    ASSERT_EQ(k.n, 2);
    ASSERT_EQ(k.s[0].tid, 15);
    ASSERT_EQ(k.s[1].tid, 5);
    ASSERT_EQ(k.s[0].cpu_ns, 15000000u);
    ASSERT_EQ(k.s[0].timestamp_ns, now - 1500000000ull);
    ASSERT_EQ(k.s[0].frame_count, 3);
    ASSERT_EQ(k.s[0].label_count, 2);
    ASSERT_EQ(k.s[0].flags, SNAPPROF_SAMPLE_TRUNCATED_DEPTH);
    ASSERT_EQ(k.s[0].pc0, 0x400000 + 15);
    ASSERT_STR_EQ(k.s[0].thread, "worker-15");
    ASSERT_STR_EQ(k.s[0].jit, "jit_fn_15");
    ASSERT_STR_EQ(k.s[0].key, "request");
    ASSERT_STR_EQ(k.s[0].str, "req-15");
    ASSERT_STR_EQ(k.s[0].unit, "bytes");
    ASSERT_EQ(k.s[0].num1, 150);
    /* The window starts at its first kept sample, and the info says so on
     * both clocks, with the feeding profile's mode and period. */
    const snapprof_profile_info_t *in = &k.completed_info;
    ASSERT_EQ(in->start_mono_ns, now - 1500000000ull);
    ASSERT_EQ(in->start_time_ns, 1700000000000000000ull + 3500000000ull);
    ASSERT_GE(in->duration_ns, 1500000000ull);
    ASSERT_LT(in->duration_ns, 60000000000ull);
    ASSERT_EQ(in->period_ns, 1000000);
    ASSERT_EQ(in->mode, SNAPPROF_MODE_CPU);
    /* The window's own counters (in->stats itself pointed into the
     * replay's frame): its 2 samples and the 20 ms they stand for. */
    ASSERT(k.had_stats);
    ASSERT_EQ(k.completed_stats.samples, 2);
    ASSERT_EQ(k.completed_stats.cpu_ns_sampled, 20000000u);
    ASSERT_EQ(k.completed_stats.cpu_ns_total, 20000000u);
    /* since 0: everything kept, oldest first. */
    keeper_t all = {0};
    snapprof_builder_t *into_all = tu_builder(&keeper_ops, &all);
    ASSERT_OK(snapprof_flight_builder_replay(f, 0, into_all));
    ASSERT_EQ(all.n, 5);
    ASSERT_EQ(all.s[0].tid, 45);
    ASSERT_STR_EQ(all.s[0].jit, "jit_fn_45");
    snapprof_flight_info_t fi = info_of(f);
    ASSERT_EQ(fi.samples, 5);
    ASSERT_EQ(fi.oldest_ns, now - 4500000000ull);
    ASSERT_EQ(fi.newest_ns, now - 500000000ull);
    ASSERT_EQ(fi.samples_dropped, 0);
    ASSERT_GT(fi.bytes, 0);
    snapprof_builder_destroy(into);
    snapprof_builder_destroy(into_all);
    snapprof_builder_destroy(f);
    free(k.s);
    free(all.s);
}

/* 20 s of samples every 100 ms into 1 s pieces with a 3 s span: what is
 * kept reaches back 3 s and at most a piece more, and expiry is not
 * counted as a loss. */
static void test_span(void)
{
    snapprof_builder_t *f = make_flight(3000000000ull, 1000000000ull, 0);
    uint64_t base = tu_mono_ns() - 30000000000ull;
    start_flight(f, base);
    feed_every(f, base, 200, 100000000ull, 4);
    snapprof_flight_info_t fi = info_of(f);
    uint64_t newest = base + 199 * 100000000ull;
    printf("kept %llu samples, %.1f s back, %llu bytes\n", (unsigned long long)fi.samples,
           (newest - fi.oldest_ns) / 1e9, (unsigned long long)fi.bytes);
    ASSERT_EQ(fi.newest_ns, newest);
    ASSERT_GE(newest - fi.oldest_ns, 3000000000ull - 100000000ull);
    ASSERT_LE(newest - fi.oldest_ns, 4000000000ull);
    ASSERT_GE(fi.samples, 30);
    ASSERT_LE(fi.samples, 41);
    ASSERT_EQ(fi.samples_dropped, 0);
    /* A piece's memory is given back: a handful of 64 KiB pieces. */
    ASSERT_LE(fi.bytes, 6 * 64 * 1024);
    snapprof_builder_destroy(f);
}

/* 20000 samples of 30 frames (~1 KiB each), 100 to a piece, into 1 MiB:
 * the memory stays within it, the oldest pieces go first and are counted,
 * the newest samples are all there, and a replay gives exactly what
 * get_info says is kept. */
static void test_max_bytes(void)
{
    snapprof_builder_t *f = make_flight(3600000000000ull, 10000000ull, 1024 * 1024);
    uint64_t base = tu_mono_ns() - 10000000000ull;
    start_flight(f, base);
    feed_every(f, base, 20000, 100000ull, 30);
    snapprof_flight_info_t fi = info_of(f);
    printf("kept %llu, dropped %llu, %llu bytes\n", (unsigned long long)fi.samples,
           (unsigned long long)fi.samples_dropped, (unsigned long long)fi.bytes);
    ASSERT_LE(fi.bytes, 1024 * 1024);
    ASSERT_GT(fi.samples, 50);
    ASSERT_GT(fi.samples_dropped, 0);
    ASSERT_EQ(fi.samples + fi.samples_dropped, 20000);
    ASSERT_EQ(fi.newest_ns, base + 19999 * 100000ull);
    keeper_t k = {0};
    snapprof_builder_t *into = tu_builder(&keeper_ops, &k);
    ASSERT_OK(snapprof_flight_builder_replay(f, 0, into));
    ASSERT_EQ(k.n, fi.samples);
    ASSERT_EQ(k.s[k.n - 1].tid, 20000);
    ASSERT_STR_EQ(k.s[k.n - 1].thread, "worker-20000");
    for (size_t i = 1; i < k.n; i++)
        ASSERT_EQ(k.s[i].tid, k.s[i - 1].tid + 1); /* none lost in between */
    snapprof_builder_destroy(into);
    snapprof_builder_destroy(f);
    free(k.s);
}

/* Each misuse is refused with its code and changes nothing. */
static void test_errors(void)
{
    snapprof_builder_t *f = NULL;
    ASSERT_EQ(snapprof_flight_builder_create(NULL, NULL), -EINVAL);
    snapprof_flight_params_t fp = {0};
    ASSERT_EQ(snapprof_flight_builder_create(&fp, &f), -EINVAL); /* size 0 */
    ASSERT_NULL(f);
    fp = (snapprof_flight_params_t){.size = sizeof fp, .span_ns = 1000, .piece_ns = 2000};
    ASSERT_EQ(snapprof_flight_builder_create(&fp, &f), -EINVAL); /* piece above span */
    fp = (snapprof_flight_params_t){.size = sizeof fp, .max_bytes = 4096};
    ASSERT_EQ(snapprof_flight_builder_create(&fp, &f), -EINVAL); /* too small */
    ASSERT_OK(snapprof_flight_builder_create(NULL, &f));         /* defaults */
    keeper_t k = {0};
    snapprof_builder_t *into = tu_builder(&keeper_ops, &k);
    /* Not started by any profile yet. */
    ASSERT_EQ(snapprof_flight_builder_replay(f, 0, into), -ENODATA);
    ASSERT_EQ(k.started, 0);
    void *bytes = NULL;
    size_t size = 0;
    ASSERT_EQ(snapprof_flight_builder_collect(f, 0, &bytes, &size), -ENODATA);
    ASSERT_NULL(bytes);
    ASSERT_EQ(snapprof_flight_builder_replay(f, 0, NULL), -EINVAL);
    ASSERT_EQ(snapprof_flight_builder_replay(f, 0, f), -EINVAL);
    ASSERT_EQ(snapprof_flight_builder_replay(into, 0, f), -EINVAL); /* not a flight builder */
    ASSERT_EQ(snapprof_flight_builder_collect(f, 0, NULL, &size), -EINVAL);
    ASSERT_EQ(snapprof_flight_builder_collect(f, 0, &bytes, NULL), -EINVAL);
    snapprof_flight_info_t fi = {.size = sizeof fi};
    ASSERT_EQ(snapprof_flight_builder_get_info(into, &fi), -EINVAL);
    ASSERT_EQ(snapprof_flight_builder_get_info(f, NULL), -EINVAL);
    fi.size = 0;
    ASSERT_EQ(snapprof_flight_builder_get_info(f, &fi), -EINVAL);
    /* A caller that knows only the first members gets only those. */
    start_flight(f, tu_mono_ns());
    feed(f, tu_mono_ns(), 7, 2, 1000);
    snapprof_flight_info_t small[2];
    memset(small, 0xab, sizeof small);
    small[0].size = offsetof(snapprof_flight_info_t, bytes);
    ASSERT_OK(snapprof_flight_builder_get_info(f, &small[0]));
    ASSERT_EQ(small[0].samples, 1);
    ASSERT_EQ(small[0].bytes, 0xababababababababull);
    /* into's start fails: its error, and nothing more is called. */
    k.fail_start = -EIO;
    ASSERT_EQ(snapprof_flight_builder_replay(f, 0, into), -EIO);
    ASSERT_EQ(k.started, 1);
    ASSERT_EQ(k.n, 0);
    ASSERT_EQ(k.completed, 0);
    snapprof_builder_destroy(into);
    snapprof_builder_destroy(f);
    free(k.s);
}

/* ------------------------------------------------------------------------ */
/* A live profile                                                           */
/* ------------------------------------------------------------------------ */

__attribute__((noinline)) static void flight_burn(uint64_t ns)
{
    tu_burn_cpu_ns(ns);
    __asm__ volatile("" ::: "memory");
}

/* A profile of this thread with a collector and a flight builder: after
 * stop, a replay of everything equals what the collector received, sample
 * for sample (remainders included), and the pprof bytes of the last
 * seconds open in pprof and name the burning function. */
static void test_live(void)
{
    snapprof_thread_t *self;
    snapprof_profiler_t *p = tu_profile_self(&self);
    tu_collector_t c = {0};
    ASSERT_OK(snapprof_profiler_add_builder(p, tu_collector_builder(&c)));
    snapprof_builder_t *f;
    ASSERT_OK(snapprof_flight_builder_create(NULL, &f));
    ASSERT_OK(snapprof_profiler_add_builder(p, f)); /* the profiler owns it */
    ASSERT_OK(snapprof_profiler_start(p));
    uint64_t samples_wanted = tu_tsan_build() ? 50 : 200;
    uint64_t deadline = tu_mono_ns() + 120000000000ull;
    snapprof_stats_t st;
    do {
        flight_burn(20000000);
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
        ASSERT_LT(tu_mono_ns(), deadline);
    } while (st.samples < samples_wanted);
    /* While it runs: the bytes of the last 60 s. */
    void *bytes = NULL;
    size_t size = 0;
    ASSERT_OK(snapprof_flight_builder_collect(f, 60000000000ull, &bytes, &size));
    ASSERT_GT(size, 20);
    char *dir = tu_make_tmpdir("flight-live");
    char path[1024];
    snprintf(path, sizeof path, "%s/flight.pb.gz", dir);
    FILE *out = fopen(path, "wb");
    ASSERT_NOT_NULL(out);
    ASSERT_EQ(fwrite(bytes, 1, size, out), size);
    ASSERT_EQ(fclose(out), 0);
    free(bytes);
    char *top = tu_pprof_ok("-top", path);
    printf("%s\n", top);
    ASSERT_CONTAINS(top, "flight_burn");
    /* The statistics comment every profile of ours carries (issue 28:
     * a ?since= answer had none). */
    ASSERT_CONTAINS(top, "Hz per CPU-second of");
    free(top);
    unlink(path);
    rmdir(dir);
    free(dir);
    ASSERT_OK(snapprof_profiler_stop(p));
    /* After the stop the flight builder still holds the profile. */
    keeper_t k = {0};
    snapprof_builder_t *into = tu_builder(&keeper_ops, &k);
    ASSERT_OK(snapprof_flight_builder_replay(f, 0, into));
    printf("collector %zu samples, replay %zu\n", c.count, k.n);
    ASSERT_EQ(k.n, c.count);
    uint64_t cpu_c = 0, cpu_k = 0;
    for (size_t i = 0; i < c.count; i++) {
        cpu_c += c.samples[i].cpu_ns;
        cpu_k += k.s[i].cpu_ns;
        ASSERT_EQ(k.s[i].timestamp_ns, c.samples[i].timestamp_ns);
        ASSERT_EQ(k.s[i].flags, c.samples[i].flags);
        ASSERT_EQ(k.s[i].frame_count, c.samples[i].frame_count);
        if (k.s[i].frame_count > 0)
            ASSERT_EQ(k.s[i].pc0, c.samples[i].frames[0].pc);
    }
    ASSERT_EQ(cpu_k, cpu_c);
    /* The window's counters, at xOnProfileCompleted: its samples as the
     * profiler counts them (remainders and kernel time in the total only). */
    uint64_t n_sampled = 0, cpu_sampled = 0;
    for (size_t i = 0; i < c.count; i++)
        if (!(c.samples[i].flags & (SNAPPROF_SAMPLE_REMAINDER | SNAPPROF_SAMPLE_KERNEL))) {
            n_sampled++;
            cpu_sampled += c.samples[i].cpu_ns;
        }
    ASSERT(k.had_stats);
    printf("replay stats: %" PRIu64 " samples, %.1f of %.1f ms sampled\n",
           k.completed_stats.samples, k.completed_stats.cpu_ns_sampled / 1e6,
           k.completed_stats.cpu_ns_total / 1e6);
    ASSERT_EQ(k.completed_stats.samples, n_sampled);
    ASSERT_EQ(k.completed_stats.cpu_ns_sampled, cpu_sampled);
    ASSERT_EQ(k.completed_stats.cpu_ns_total, cpu_c);
    snapprof_builder_destroy(into);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(self);
    tu_collector_free(&c);
    free(k.s);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"window", test_window}, {"span", test_span}, {"max_bytes", test_max_bytes},
        {"errors", test_errors}, {"live", test_live},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
