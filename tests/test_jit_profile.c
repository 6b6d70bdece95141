/* End-to-end tests of JIT frames: a tiny JIT whose functions burn CPU and
 * call back into C, which calls another JIT function, profiled for real and
 * read back with `go tool pprof -traces`; named through the API or only
 * through a perf map; and code unregistered and replaced at the same
 * address while sampling at a high rate. */
#include "test.h"
#include "test_jit_util.h"
#include "test_util.h"

#include <snapprof/jit.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Spins of the JIT functions: the inner one holds most of the time (about
 * a millisecond per call), the outer ones a tenth of that. */
#define INNER_BURN 3000000u
#define OUTER_BURN 300000u

static uint8_t *g_code;
static size_t g_inner_size, g_outer_size, g_fixed_size;
static tj_fn_t g_inner, g_outer, g_fixed;

/* The C side. The empty asm after each call keeps it from being a tail
 * call, so these frames stay on the stack. */
__attribute__((noinline)) void jit_test_c_middle(void)
{
    g_inner();
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void jit_test_c_driver(void)
{
    g_outer();
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void jit_test_c_driver_fixed(void)
{
    g_fixed();
    __asm__ volatile("" ::: "memory");
}

/* inner at +0, outer (frame pointer) at +256, fixed (no frame pointer, rbp
 * clobbered) at +512; the outer ones call jit_test_c_middle. */
static void emit_code(void)
{
    g_code = tj_map(4096);
    g_inner_size = tj_emit_fp(g_code, INNER_BURN, NULL);
    g_outer_size = tj_emit_fp(g_code + 256, OUTER_BURN, jit_test_c_middle);
    g_fixed_size = tj_emit_fixed(g_code + 512, OUTER_BURN, jit_test_c_middle);
    tj_protect_exec(g_code, 4096);
    g_inner = (tj_fn_t)(void *)g_code;
    g_outer = (tj_fn_t)(void *)(g_code + 256);
    g_fixed = (tj_fn_t)(void *)(g_code + 512);
}

static void register_code(void)
{
    snapprof_jit_layout_t fixed = tj_fixed_layout();
    ASSERT_OK(snapprof_jit_region_register((uintptr_t)g_code, g_inner_size, "jit_inner", NULL));
    ASSERT_OK(
        snapprof_jit_region_register((uintptr_t)g_code + 256, g_outer_size, "jit_outer", NULL));
    ASSERT_OK(
        snapprof_jit_region_register((uintptr_t)g_code + 512, g_fixed_size, "jit_fixed", &fixed));
}

static char g_perf_map[64];

static void remove_perf_map(void)
{
    if (g_perf_map[0])
        unlink(g_perf_map);
}

/* Names the code the way JITs tell perf: /tmp/perf-<pid>.map. */
static void write_perf_map(void)
{
    snprintf(g_perf_map, sizeof g_perf_map, "/tmp/perf-%d.map", (int)getpid());
    atexit(remove_perf_map);
    FILE *f = fopen(g_perf_map, "w");
    ASSERT_NOT_NULL(f);
    fprintf(f, "%lx %zx jit_inner\n", (unsigned long)(uintptr_t)g_code, g_inner_size);
    fprintf(f, "%lx %zx jit_outer\n", (unsigned long)(uintptr_t)g_code + 256, g_outer_size);
    ASSERT_EQ(fclose(f), 0);
}

/* ------------------------------------------------------------------------ */
/* Profiling a worker thread                                                */
/* ------------------------------------------------------------------------ */

static atomic_int g_stop, g_ready;
static snapprof_thread_t *g_token;
static void (*g_work)(void);

static void *jit_test_worker(void *arg)
{
    (void)arg;
    ASSERT_OK(snapprof_thread_register(&g_token));
    atomic_store(&g_ready, 1);
    while (!atomic_load(&g_stop))
        g_work();
    return NULL;
}

typedef struct run {
    tu_collector_t samples;
    char path[512];
    snapprof_stats_t stats;
} run_t;

/* The unwinders: frame pointers and JIT given explicitly, none given (the
 * default: JIT, libunwind, frame pointers), or hybrid and JIT. */
enum { CHAIN_EXPLICIT, CHAIN_DEFAULT, CHAIN_HYBRID };

/* Profiles work on a worker thread until `want` samples were taken. */
static void profile(void (*work)(void), int chain, uint64_t interval_ns, uint64_t want, run_t *run)
{
    memset(run, 0, sizeof *run);
    g_work = work;
    atomic_store(&g_stop, 0);
    atomic_store(&g_ready, 0);
    pthread_t th;
    ASSERT_OK(pthread_create(&th, NULL, jit_test_worker, NULL));
    while (!atomic_load(&g_ready))
        usleep(1000);
    char *dir = tu_make_tmpdir("jit");
    snprintf(run->path, sizeof run->path, "%s/jit.pb.gz", dir);
    free(dir);
    snapprof_params_t params = tu_params(interval_ns);
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, &g_token, 1, &p));
    if (chain == CHAIN_EXPLICIT) {
        snapprof_unwinder_t *fp, *jit;
        ASSERT_OK(snapprof_frame_pointer_unwinder_create(&fp));
        ASSERT_OK(snapprof_jit_unwinder_create(&jit));
        ASSERT_OK(snapprof_profiler_add_unwinder(p, fp));
        ASSERT_OK(snapprof_profiler_add_unwinder(p, jit));
    } else if (chain == CHAIN_HYBRID) {
        snapprof_unwinder_t *hy, *jit;
        ASSERT_OK(snapprof_jit_unwinder_create(&jit));
        ASSERT_OK(snapprof_hybrid_unwinder_create(&hy));
        ASSERT_OK(snapprof_profiler_add_unwinder(p, jit));
        ASSERT_OK(snapprof_profiler_add_unwinder(p, hy));
    }
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_pprof_builder_create(run->path, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    ASSERT_OK(snapprof_profiler_add_builder(p, tu_collector_builder(&run->samples)));
    ASSERT_OK(snapprof_profiler_start(p));
    uint64_t deadline = tu_mono_ns() + 240ull * 1000000000u; /* only against hangs */
    do {
        usleep(20000);
        ASSERT_OK(snapprof_profiler_get_stats(p, &run->stats));
    } while (run->stats.samples < want && tu_mono_ns() < deadline);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_OK(snapprof_profiler_get_stats(p, &run->stats));
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(g_token);
    ASSERT_GE(run->stats.samples, want);
}

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TJ_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TJ_TSAN 1
#endif

/* TSan defers a signal until the thread reaches code it instruments: the
 * handler then gets the registers of when the signal came but the stack of
 * when it is handled, so attribution cannot be judged under TSan (the
 * "accuracy" label says the same of other tests). Everything else can:
 * these tests still run there, for races and crashes. */
static int signals_deferred(void)
{
#ifdef TJ_TSAN
    return 1;
#else
    return 0;
#endif
}

static uint64_t want_samples(uint64_t n)
{
    /* Sanitizers slow everything down; fewer samples prove the same. */
    return signals_deferred() ? n / 4 : tu_sanitizer_build() ? n / 2 : n;
}

/* The name of frame i of s as a report would show it. */
static const char *frame_name(const tu_sample_t *s, size_t i)
{
    if (i >= s->frame_count || i >= TU_MAX_FRAMES)
        return "(none)";
    return tu_frame_name(&s->frames[i]);
}

/* Checks the collected samples: of those whose leaf is jit_inner, at least
 * 95 % must show the expected stack, JIT frames as JIT frames. */
static void check_samples(const run_t *run, const char *const *stack, size_t depth)
{
    size_t inner = 0, whole = 0;
    const tu_sample_t *bad = NULL;
    for (size_t i = 0; i < run->samples.count; i++) {
        const tu_sample_t *s = &run->samples.samples[i];
        if (s->frame_count == 0 || s->frames[0].kind != SNAPPROF_FRAME_JIT ||
            strcmp(frame_name(s, 0), "jit_inner") != 0)
            continue;
        inner++;
        int ok = 1;
        for (size_t k = 0; k < depth && ok; k++) {
            ok = strcmp(frame_name(s, k), stack[k]) == 0;
            /* JIT frames are JIT frames, native ones native. */
            int jit = strncmp(stack[k], "jit_test_", 9) != 0;
            ok = ok && (s->frames[k].kind == SNAPPROF_FRAME_JIT) == jit;
        }
        whole += ok;
        if (!ok && bad == NULL)
            bad = s;
    }
    printf("%zu samples, %zu with jit_inner as the leaf, %zu of them whole (%.1f %%)\n",
           run->samples.count, inner, whole, inner ? 100.0 * (double)whole / (double)inner : 0);
    if (bad != NULL) {
        printf("first sample that is not whole:\n");
        for (size_t k = 0; k < bad->frame_count && k < 8; k++)
            printf("  #%zu %s (kind %d)\n", k, frame_name(bad, k), (int)bad->frames[k].kind);
    }
    if (signals_deferred())
        return;
    ASSERT_GE(inner * 2, run->samples.count); /* the inner function is hot */
    ASSERT_GE(whole * 100, inner * 95);
}

/* Reads the profile with `go tool pprof -traces` and checks the same: the
 * traces ending in jit_inner hold the expected interleaved stack. Prints
 * the report. Also checks with -raw that the JIT mappings are called
 * mapping_name and say they have functions (so pprof never symbolizes
 * them). */
static void check_pprof(const run_t *run, const char *const *stack, size_t depth,
                        const char *mapping_name)
{
    char args[1024];
    snprintf(args, sizeof args, "-traces -sample_index=samples '%s'", run->path);
    int status = 0;
    char *text = tu_pprof(args, &status);
    if (status != 0)
        TEST_FAIL("go tool pprof %s failed:\n%s", args, text);
    printf("go tool pprof %s:\n%s\n", args, text);
    /* A symbolization attempt would show up as a warning. */
    ASSERT(strstr(text, "symboliz") == NULL);
    tj_trace_t *traces;
    size_t n = tj_parse_traces(text, &traces);
    double inner = 0, whole = 0;
    for (size_t i = 0; i < n; i++) {
        if (traces[i].n == 0 || strcmp(traces[i].names[0], "jit_inner") != 0)
            continue;
        inner += traces[i].value;
        if (tj_trace_starts_with(&traces[i], stack, depth))
            whole += traces[i].value;
    }
    printf("pprof: %.0f samples end in jit_inner, %.0f of them in the whole stack\n", inner, whole);
    if (!signals_deferred()) {
        ASSERT_GT(inner, 0);
        ASSERT_GE(whole * 100, inner * 95);
    }
    tj_free_traces(traces, n);
    free(text);

    snprintf(args, sizeof args, "-raw '%s'", run->path);
    text = tu_pprof(args, &status);
    if (status != 0)
        TEST_FAIL("go tool pprof %s failed:\n%s", args, text);
    const char *maps = strstr(text, "Mappings");
    ASSERT_NOT_NULL(maps);
    int jit_mappings = 0;
    for (const char *line = maps; line && *line; line = strchr(line, '\n')) {
        line += *line == '\n';
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < 1023 ? len : 1023), line);
        if (strstr(buf, mapping_name) == NULL)
            continue;
        jit_mappings++;
        if (strstr(buf, "[FN]") == NULL)
            TEST_FAIL("JIT mapping without has_functions: %s", buf);
    }
    /* pprof merges mappings of one file whose sizes round to the same 4 KiB
     * (shifting their addresses); our names ride on the locations' lines,
     * so they survive that. */
    printf("%d mappings named %s, all with [FN]\n", jit_mappings, mapping_name);
    ASSERT_GE(jit_mappings, 1);
    free(text);
}

static const char *const k_interleaved[] = {"jit_inner", "jit_test_c_middle", "jit_outer",
                                            "jit_test_c_driver", "jit_test_worker"};
static const char *const k_fixed[] = {"jit_inner", "jit_test_c_middle", "jit_fixed",
                                      "jit_test_c_driver_fixed", "jit_test_worker"};
#define DEPTH 5

/* native -> JIT -> native -> JIT, named through the API, with the
 * frame-pointer and JIT unwinders given explicitly. */
static void test_interleaved_api(void)
{
    ASSERT_OK(snapprof_jit_perf_map_configure("", NULL));
    emit_code();
    register_code();
    run_t run;
    profile(jit_test_c_driver, CHAIN_EXPLICIT, 1000000, want_samples(400), &run);
    check_samples(&run, k_interleaved, DEPTH);
    check_pprof(&run, k_interleaved, DEPTH, " [jit] ");
    tu_collector_free(&run.samples);
}

/* The same code named only by /tmp/perf-<pid>.map. */
static void test_interleaved_perf_map(void)
{
    emit_code();
    write_perf_map();
    run_t run;
    profile(jit_test_c_driver, CHAIN_EXPLICIT, 1000000, want_samples(400), &run);
    check_samples(&run, k_interleaved, DEPTH);
    char mapping[80];
    snprintf(mapping, sizeof mapping, " %s ", g_perf_map);
    check_pprof(&run, k_interleaved, DEPTH, mapping);
    snapprof_jit_stats_t st;
    ASSERT_OK(snapprof_jit_get_stats(&st));
    ASSERT_UEQ(st.regions_live, 0);
    ASSERT_UEQ(st.perf_map_regions, 2);
    tu_collector_free(&run.samples);
}

/* A profiler given no unwinders walks JIT code too. */
static void test_default_chain(void)
{
    ASSERT_OK(snapprof_jit_perf_map_configure("", NULL));
    emit_code();
    register_code();
    run_t run;
    profile(jit_test_c_driver, CHAIN_DEFAULT, 1000000, want_samples(400), &run);
    check_samples(&run, k_interleaved, DEPTH);
    check_pprof(&run, k_interleaved, DEPTH, " [jit] ");
    tu_collector_free(&run.samples);
}

/* native -> JIT without frame pointers (rbp junk) -> native -> JIT, with
 * each chain: the native unwinders must hand the JIT caller over whatever
 * it left in rbp. */
static void fixed_frame(int chain)
{
    ASSERT_OK(snapprof_jit_perf_map_configure("", NULL));
    emit_code();
    register_code();
    run_t run;
    profile(jit_test_c_driver_fixed, chain, 1000000, want_samples(400), &run);
    check_samples(&run, k_fixed, DEPTH);
    tu_collector_free(&run.samples);
}

/* native -> JIT -> native -> JIT with the hybrid unwinder. */
static void test_interleaved_hybrid(void)
{
    ASSERT_OK(snapprof_jit_perf_map_configure("", NULL));
    emit_code();
    register_code();
    run_t run;
    profile(jit_test_c_driver, CHAIN_HYBRID, 1000000, want_samples(400), &run);
    check_samples(&run, k_interleaved, DEPTH);
    tu_collector_free(&run.samples);
}

/* ------------------------------------------------------------------------ */
/* Code replaced at the same address while sampling                         */
/* ------------------------------------------------------------------------ */

#define GENERATIONS 100000
#define REUSE_BURN 1000000u
#define REUSE_CALLS 3
static uint64_t g_gen_from[GENERATIONS], g_gen_until[GENERATIONS];
static atomic_int g_gens;
static uint8_t *g_reuse_code;

/* Generation i: new code at the same address, named gen_<i>, registered
 * for as long as it runs. g_gen_from/until bracket the registration. */
static void reuse_work(void)
{
    int i = atomic_load(&g_gens);
    if (i >= GENERATIONS)
        return;
    tj_protect_write(g_reuse_code, 4096);
    size_t size = tj_emit_fp(g_reuse_code, REUSE_BURN + (uint32_t)(i % 7) * 10000u, NULL);
    tj_protect_exec(g_reuse_code, 4096);
    char name[32];
    snprintf(name, sizeof name, "gen_%d", i);
    g_gen_from[i] = tu_mono_ns();
    ASSERT_OK(snapprof_jit_region_register((uintptr_t)g_reuse_code, size + (size_t)(i % 3) * 16,
                                           name, NULL));
    for (int k = 0; k < REUSE_CALLS; k++)
        ((tj_fn_t)(void *)g_reuse_code)();
    ASSERT_OK(snapprof_jit_region_unregister((uintptr_t)g_reuse_code));
    g_gen_until[i] = tu_mono_ns();
    atomic_store(&g_gens, i + 1);
}

/* Meanwhile another thread registers and unregisters code elsewhere as
 * fast as it can, so snapshots turn over under the sampler's feet. */
static atomic_int g_churn_stop;
static atomic_ulong g_churn_ops;

static void *churn(void *arg)
{
    uintptr_t base = (uintptr_t)tj_map(64 * 64);
    (void)arg;
    unsigned long ops = 0;
    while (!atomic_load(&g_churn_stop)) {
        for (int s = 0; s < 64; s++) {
            char name[32];
            snprintf(name, sizeof name, "churn_%lu", ops);
            ASSERT_OK(snapprof_jit_region_register(base + (uintptr_t)s * 64, 48, name, NULL));
            ops++;
        }
        for (int s = 0; s < 64; s++, ops++)
            ASSERT_OK(snapprof_jit_region_unregister(base + (uintptr_t)s * 64));
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&g_churn_ops, ops);
    return NULL;
}

static void test_reuse_while_sampling(void)
{
    ASSERT_OK(snapprof_jit_perf_map_configure("", NULL));
    g_reuse_code = tj_map(4096);
    pthread_t ch;
    ASSERT_OK(pthread_create(&ch, NULL, churn, NULL));
    run_t run;
    /* 5 kHz. */
    profile(reuse_work, CHAIN_EXPLICIT, 200000, want_samples(2000), &run);
    atomic_store(&g_churn_stop, 1);
    pthread_join(ch, NULL);
    int gens = atomic_load(&g_gens);
    size_t named = 0, wrong = 0, twice = 0, unnamed = 0;
    uintptr_t lo = (uintptr_t)g_reuse_code, hi = lo + 4096;
    for (size_t i = 0; i < run.samples.count; i++) {
        const tu_sample_t *s = &run.samples.samples[i];
        int seen = 0;
        for (size_t k = 0; k < s->frame_count && k < TU_MAX_FRAMES; k++) {
            const snapprof_frame_t *f = &s->frames[k];
            /* In the code, but named after nothing: no region was found
             * for the time of the copy. Allowed, counted. */
            unnamed += f->kind != SNAPPROF_FRAME_JIT && f->pc >= lo && f->pc < hi;
            if (f->kind != SNAPPROF_FRAME_JIT)
                continue;
            int g = -1;
            ASSERT_EQ(sscanf(f->name, "gen_%d", &g), 1);
            ASSERT(g >= 0 && g < gens);
            seen++;
            /* Only while generation g was registered. */
            if (s->timestamp_ns < g_gen_from[g] || s->timestamp_ns > g_gen_until[g]) {
                if (wrong < 5)
                    printf("sample at %llu names gen_%d, registered %llu..%llu\n",
                           (unsigned long long)s->timestamp_ns, g,
                           (unsigned long long)g_gen_from[g], (unsigned long long)g_gen_until[g]);
                wrong++;
            }
        }
        named += seen > 0;
        twice += seen > 1;
    }
    printf("%d generations, %zu samples, %zu in JIT code, %zu misattributed, %zu unnamed, "
           "%lu churn operations\n",
           gens, run.samples.count, named, wrong, unnamed, atomic_load(&g_churn_ops));
    ASSERT_GE(gens, 1);
    if (!signals_deferred()) {
        ASSERT_EQ(wrong, 0);
        ASSERT_EQ(twice, 0);
        ASSERT_GE(gens, 20);
        ASSERT_GE(named, want_samples(2000) / 4);
    }
    tu_collector_free(&run.samples);
}

static void test_fixed_frame(void)
{
    fixed_frame(CHAIN_EXPLICIT);
}

static void test_fixed_frame_default_chain(void)
{
    fixed_frame(CHAIN_DEFAULT);
}

static void test_fixed_frame_hybrid(void)
{
    fixed_frame(CHAIN_HYBRID);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"interleaved_api", test_interleaved_api},
        {"interleaved_perf_map", test_interleaved_perf_map},
        {"default_chain", test_default_chain},
        {"fixed_frame", test_fixed_frame},
        {"fixed_frame_default_chain", test_fixed_frame_default_chain},
        {"fixed_frame_hybrid", test_fixed_frame_hybrid},
        {"interleaved_hybrid", test_interleaved_hybrid},
        {"reuse_while_sampling", test_reuse_while_sampling},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
