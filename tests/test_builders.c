/* Tests of the folded-stacks and timeline (trace JSON) builders: their
 * formats on known samples, and agreement with the pprof builder when all
 * three receive the same run. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        TEST_FAIL("cannot open %s", path);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ASSERT_NOT_NULL(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            ASSERT_NOT_NULL(buf);
        }
    }
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void feed(snapprof_builder_t *b, const snapprof_frame_t *frames, size_t n, pid_t tid,
                 uint64_t ts, const snapprof_label_t *labels, size_t n_labels)
{
    snapprof_sample_t s = {.frames = frames,
                           .frame_count = n,
                           .timestamp_ns = ts,
                           .cpu_ns = 1000000,
                           .wall_ns = 1000000,
                           .tid = tid,
                           .thread_name = tid == 11 ? "eleven" : "twelve",
                           .labels = labels,
                           .label_count = n_labels};
    ASSERT_OK(b->ops->xOnSample(b->user_data, &s));
}

static void complete(snapprof_builder_t *b, const snapprof_app_frame_t *frames, size_t n)
{
    snapprof_stats_t stats = {0};
    snapprof_profile_info_t info = {.start_mono_ns = 1000000000u,
                                    .duration_ns = 1,
                                    .period_ns = 1000000u,
                                    .stats = &stats,
                                    .app_frames = frames,
                                    .app_frame_count = n};
    if (b->ops->xOnProfileStarted)
        ASSERT_OK(b->ops->xOnProfileStarted(b->user_data, &info));
    ASSERT_OK(b->ops->xOnProfileCompleted(b->user_data, &info));
}

/* Functions of this binary whose addresses make native frames. */
volatile unsigned sink;
__attribute__((noinline)) void bt_leaf(void)
{
    for (int i = 0; i < 100; i++)
        sink += (unsigned)i;
}
__attribute__((noinline)) void bt_middle(void)
{
    bt_leaf();
    sink++;
}
__attribute__((noinline)) void bt_root(void)
{
    bt_middle();
    sink++;
}

static inline __attribute__((always_inline)) void bt_inlined(int n)
{
    for (int i = 0; i < n; i++)
        sink = sink * 31 + (unsigned)i;
}
__attribute__((noinline)) void bt_with_inline(int n)
{
    bt_inlined(n);
    bt_inlined(n + 1);
}

static snapprof_frame_t native(uintptr_t pc)
{
    snapprof_frame_t f = {pc, snapprof_module_find(pc), SNAPPROF_FRAME_NATIVE, NULL};
    ASSERT_NOT_NULL(f.module);
    return f;
}

/* A pc inside bt_with_inline where the symbolizer reports bt_inlined
 * inlined into bt_with_inline. */
static uintptr_t inlined_pc(void)
{
    for (uintptr_t pc = (uintptr_t)bt_with_inline; pc < (uintptr_t)bt_with_inline + 256; pc++) {
        snapprof_frame_t f = native(pc);
        snapprof_symbol_t sym[4];
        int n = snapprof_symbolize(&f, sym, 4);
        if (n == 2 && strcmp(sym[0].name, "bt_inlined") == 0 &&
            strcmp(sym[1].name, "bt_with_inline") == 0)
            return pc;
    }
    TEST_FAIL("no inlined code found in bt_with_inline");
}

/* ------------------------------------------------------------------------ */
/* folded_format                                                            */
/* ------------------------------------------------------------------------ */

/* Known samples give known lines: root first, one line per distinct
 * function path (pcs in the same functions merge), inline calls expanded,
 * JIT and marker frames by name, lines sorted, counts summed. */
static void test_folded_format(void)
{
    char *path = pbt_tmp_path("folded", "out.folded");
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_folded_builder_create(path, &b));
    snapprof_frame_t a[] = {native((uintptr_t)bt_leaf + 4), native((uintptr_t)bt_middle + 4),
                            native((uintptr_t)bt_root + 4)};
    snapprof_frame_t a2[] = {native((uintptr_t)bt_leaf + 8), native((uintptr_t)bt_middle + 4),
                             native((uintptr_t)bt_root + 4)};
    snapprof_frame_t bb[] = {native((uintptr_t)bt_middle + 4), native((uintptr_t)bt_root + 4)};
    static const snapprof_module_t jit = {.start = 0x10000,
                                          .limit = 0x20000,
                                          .path = "[jit]",
                                          .build_id = "",
                                          .kind = SNAPPROF_MODULE_JIT,
                                          .is_loaded = 1};
    snapprof_frame_t c[] = {{0x10010, &jit, SNAPPROF_FRAME_JIT, "js;hot\nloop"},
                            {0, NULL, SNAPPROF_FRAME_MARKER, "[truncated]"}};
    snapprof_frame_t d[] = {native(inlined_pc()), native((uintptr_t)bt_root + 4)};
    for (int i = 0; i < 5; i++)
        feed(b, a, 3, 11, 0, NULL, 0);
    for (int i = 0; i < 2; i++)
        feed(b, a2, 3, 12, 0, NULL, 0);
    for (int i = 0; i < 3; i++)
        feed(b, bb, 2, 11, 0, NULL, 0);
    feed(b, c, 2, 11, 0, NULL, 0);
    feed(b, d, 2, 12, 0, NULL, 0);
    complete(b, NULL, 0);
    snapprof_builder_destroy(b);
    char *text = read_file(path);
    printf("%s", text);
    /* Counts are the samples' CPU time in microseconds (1 ms each). */
    const char *want = "[truncated];js:hot loop 1000\n"
                       "bt_root;bt_middle 3000\n"
                       "bt_root;bt_middle;bt_leaf 7000\n"
                       "bt_root;bt_with_inline;bt_inlined 1000\n";
    ASSERT_STR_EQ(text, want);
    free(text);
    pbt_remove(path);

    /* No samples: an empty file. */
    path = pbt_tmp_path("folded", "empty.folded");
    ASSERT_OK(snapprof_folded_builder_create(path, &b));
    complete(b, NULL, 0);
    snapprof_builder_destroy(b);
    text = read_file(path);
    ASSERT_STR_EQ(text, "");
    free(text);
    pbt_remove(path);
}

/* ------------------------------------------------------------------------ */
/* empty_stack_first                                                        */
/* ------------------------------------------------------------------------ */

/* A sample without frames as the very first one: the stack table's frame
 * pool did not exist yet and the empty stack pointed at NULL + 0, which
 * UBSan (clang) reports; fuzz_pprof found it (fuzz/corpus/pprof/
 * regress-empty-stack-first replays it). The empty stack must be counted
 * and later stacks come out as ever. */
static void test_empty_stack_first(void)
{
    int (*create[2])(const char *, snapprof_builder_t **) = {snapprof_folded_builder_create,
                                                             snapprof_trace_builder_create};
    const char *names[2] = {"out.folded", "out.json"};
    for (int i = 0; i < 2; i++) {
        char *path = pbt_tmp_path("empty_first", names[i]);
        snapprof_builder_t *b;
        ASSERT_OK(create[i](path, &b));
        snapprof_frame_t a[] = {native((uintptr_t)bt_leaf + 4), native((uintptr_t)bt_middle + 4),
                                native((uintptr_t)bt_root + 4)};
        feed(b, NULL, 0, 11, 1000000000u, NULL, 0);
        feed(b, NULL, 0, 11, 1001000000u, NULL, 0);
        feed(b, a, 3, 11, 1002000000u, NULL, 0);
        complete(b, NULL, 0);
        snapprof_builder_destroy(b);
        char *text = read_file(path);
        printf("%s\n", text);
        if (i == 0)
            ASSERT_CONTAINS(text, "bt_root;bt_middle;bt_leaf 1000\n");
        else
            ASSERT_CONTAINS(text, "bt_leaf");
        free(text);
        pbt_remove(path);
    }
}

/* ------------------------------------------------------------------------ */
/* trace_format                                                             */
/* ------------------------------------------------------------------------ */

static int run_checker(const char *path, const char *expect)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 '%s/check_trace.py' '%s' %s", SNAPPROF_TEST_SOURCE_DIR, path,
             expect);
    int status;
    char *out = tu_run(cmd, &status);
    printf("%s", out);
    free(out);
    return status;
}

/* Known samples of two threads: the JSON parses, samples and slices are
 * where they should be, slices nest, labels become args, and app frames
 * get their own track. */
static void test_trace_format(void)
{
    char *path = pbt_tmp_path("trace", "out.json");
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_trace_builder_create(path, &b));
    snapprof_frame_t a[] = {native((uintptr_t)bt_leaf + 4), native((uintptr_t)bt_middle + 4),
                            native((uintptr_t)bt_root + 4)};
    snapprof_frame_t bb[] = {native((uintptr_t)bt_middle + 4), native((uintptr_t)bt_root + 4)};
    snapprof_frame_t d[] = {native(inlined_pc()), native((uintptr_t)bt_root + 4)};
    snapprof_label_t labels[] = {{.key = "req", .str = "GET \"/x\""}, {.key = "frame", .num = 3}};
    uint64_t t0 = 1000000000u;
    /* Thread 11: leaf, leaf, middle, (gap of 10 periods), leaf. */
    feed(b, a, 3, 11, t0 + 1000000, labels, 2);
    feed(b, a, 3, 11, t0 + 2000000, labels, 2);
    feed(b, bb, 2, 11, t0 + 3000000, NULL, 0);
    feed(b, a, 3, 11, t0 + 13000000, NULL, 0);
    /* Thread 12: the inlined code twice. */
    feed(b, d, 2, 12, t0 + 1500000, NULL, 0);
    feed(b, d, 2, 12, t0 + 2500000, NULL, 0);
    /* Thread 13: a sample that weighs more than the time since the start
     * (the remainder of threads that came and went can) starts at 0, and
     * the next one after it, not inside it: bt_leaf 0-5 ms, bt_inlined
     * 5-6 ms, bt_root 0-6 ms. */
    snapprof_sample_t heavy = {.frames = a,
                               .frame_count = 3,
                               .timestamp_ns = t0 + 1000000,
                               .cpu_ns = 5000000,
                               .tid = 13,
                               .thread_name = "thirteen"};
    ASSERT_OK(b->ops->xOnSample(b->user_data, &heavy));
    heavy.frames = d;
    heavy.frame_count = 2;
    heavy.timestamp_ns = t0 + 2000000;
    heavy.cpu_ns = 1000000;
    ASSERT_OK(b->ops->xOnSample(b->user_data, &heavy));
    snapprof_app_frame_t frames[] = {{3, t0 + 500000, t0 + 2600000, 0},
                                     {4, t0 + 2600000, t0 + 40000000, 1}};
    complete(b, frames, 2);
    snapprof_builder_destroy(b);
    ASSERT_EQ(run_checker(path, "11:4 12:2 13:2 --frames 2"), 0);

    char *text = read_file(path);
    /* Samples relative to the start, in microseconds. */
    ASSERT_CONTAINS(text, "\"ph\":\"P\",\"name\":\"sample\"");
    ASSERT_CONTAINS(text, "\"tid\":11,\"ts\":1000.000");
    ASSERT_CONTAINS(text, "\"args\":{\"req\":\"GET \\\"/x\\\"\",\"frame\":3}");
    ASSERT_CONTAINS(text, "\"weight\":1000.000");
    /* Each sample is the millisecond (its weight) before it was taken:
     * bt_root spans the first three samples, then the gap closes it; it
     * opens again for the fourth, at 12 ms. */
    ASSERT_CONTAINS(text, "\"name\":\"bt_root\",\"pid\":");
    ASSERT_CONTAINS(text, "\"tid\":11,\"ts\":0.000,\"dur\":3000.000}");
    ASSERT_CONTAINS(text, "\"tid\":11,\"ts\":12000.000,\"dur\":1000.000}");
    /* bt_leaf: the first two samples, ended by the third. */
    ASSERT_CONTAINS(text, "\"name\":\"bt_leaf\"");
    ASSERT_CONTAINS(text, "\"tid\":11,\"ts\":0.000,\"dur\":2000.000}");
    /* The process is named after the program (this test's executable). */
    char process[256];
    snprintf(process, sizeof process, "\"args\":{\"name\":\"%s\"}}", program_invocation_short_name);
    ASSERT_CONTAINS(text, process);
    ASSERT_CONTAINS(text, "\"args\":{\"name\":\"builders\"}}");
    ASSERT_CONTAINS(text, "\"tid\":13,\"ts\":0.000,\"dur\":6000.000}");
    ASSERT_CONTAINS(text, "\"tid\":13,\"ts\":0.000,\"dur\":5000.000}");
    ASSERT_CONTAINS(text, "\"tid\":13,\"ts\":5000.000,\"dur\":1000.000}");
    /* The inlined function is a slice of its own inside its caller. */
    ASSERT_CONTAINS(text, "\"name\":\"bt_inlined\"");
    ASSERT_CONTAINS(text, "\"name\":\"hitch 4\"");
    ASSERT_CONTAINS(text, "\"name\":\"frame 3\"");
    ASSERT_CONTAINS(text, "\"name\":\"eleven\"");
    free(text);
    pbt_remove(path);
}

/* ------------------------------------------------------------------------ */
/* same_run_agree                                                           */
/* ------------------------------------------------------------------------ */

static atomic_int g_stop;

__attribute__((noinline)) void builders_hot(volatile uint64_t *x)
{
    for (int i = 0; i < 200000; i++)
        *x = *x * 6364136223846793005u + 1442695040888963407u;
}

/* The thread's own entry: the root-first check looks for it, not for libc's
 * start_thread, whose name only a libc debug file gives. */
__attribute__((noinline)) void *builders_worker(void *arg)
{
    snapprof_thread_t **token = arg;
    /* Published with a release store: main polls it with acquire loads
     * (TSan saw register's own plain store race with that poll). */
    snapprof_thread_t *mine;
    ASSERT_OK(snapprof_thread_register(&mine));
    __atomic_store_n(token, mine, __ATOMIC_RELEASE);
    volatile uint64_t x = 1;
    while (!atomic_load(&g_stop))
        builders_hot(&x);
    return NULL;
}

/* Samples per thread_id label in a pprof file, and its CPU time. */
static void pprof_counts(const char *path, int64_t *total, int64_t *cpu_ns, pid_t *tids,
                         int64_t *counts, int *n)
{
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    *total = 0;
    *cpu_ns = 0;
    *n = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
        const Snapprof__Pprof__Sample *s = p->sample[i];
        *total += s->value[0];
        *cpu_ns += s->value[1];
        const Snapprof__Pprof__Label *l = pbt_label(p, s, "thread_id");
        ASSERT_NOT_NULL(l);
        int k = 0;
        while (k < *n && tids[k] != (pid_t)l->num)
            k++;
        if (k == *n) {
            tids[k] = (pid_t)l->num;
            counts[k] = 0;
            (*n)++;
        }
        counts[k] += s->value[0];
    }
    snapprof__pprof__profile__free_unpacked(p, NULL);
}

/* The frame named name in a folded stack (frames joined by ';'), or NULL. */
static const char *has_frame(const char *stack, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = stack; (p = strstr(p, name)) != NULL; p += len) {
        if ((p == stack || p[-1] == ';') && (p[len] == ';' || p[len] == '\0'))
            return p;
    }
    return NULL;
}

/* The three files of one run in a directory, and a builder writing each
 * (pprof, folded, trace) added to p. */
typedef struct run_files {
    char pprof[512], folded[512], trace[512];
} run_files_t;

static void add_file_builders(snapprof_profiler_t *p, const char *dir, run_files_t *f)
{
    snprintf(f->pprof, sizeof f->pprof, "%s/run.pb.gz", dir);
    snprintf(f->folded, sizeof f->folded, "%s/run.folded", dir);
    snprintf(f->trace, sizeof f->trace, "%s/run.json", dir);
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_pprof_builder_create(f->pprof, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    ASSERT_OK(snapprof_folded_builder_create(f->folded, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    ASSERT_OK(snapprof_trace_builder_create(f->trace, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
}

/* pprof, folded and trace builders in one profiler receive the same
 * samples: the folded totals and the trace's samples per thread equal the
 * pprof file's. */
static void test_same_run_agree(void)
{
    atomic_store(&g_stop, 0);
    snapprof_thread_t *tokens[2] = {NULL, NULL};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(pthread_create(&th[i], NULL, builders_worker, &tokens[i]), 0);
        while (__atomic_load_n(&tokens[i], __ATOMIC_ACQUIRE) == NULL)
            usleep(1000);
    }
    char *dir = tu_make_tmpdir("builders");
    snapprof_params_t params = tu_params(2000000u);
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, tokens, 2, &p));
    run_files_t files;
    add_file_builders(p, dir, &files);
    tu_collector_t col = {0}; /* counts the remainders, which are not samples */
    ASSERT_OK(snapprof_profiler_add_builder(p, tu_collector_builder(&col)));
    ASSERT_OK(snapprof_label_set_str(SNAPPROF_LABEL_PROCESS, "run", "agree"));
    ASSERT_OK(snapprof_profiler_start(p));
    snapprof_stats_t st;
    uint64_t want = 300;
    tu_wait_stats(p, &st, tu_stats_has_samples, &want);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    snapprof_profiler_destroy(p);
    ASSERT_OK(snapprof_label_remove(SNAPPROF_LABEL_PROCESS, "run"));
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        snapprof_thread_release(tokens[i]);
    }

    int64_t total, cpu_ns, counts[8];
    pid_t tids[8];
    int n;
    pprof_counts(files.pprof, &total, &cpu_ns, tids, counts, &n);
    /* Each sample, and with a CPU-clock trigger each thread's "[kernel and
     * unsampled]" remainder, is one count. */
    ASSERT_UEQ(col.offered, st.samples + col.remainders);
    ASSERT_EQ(total, (int64_t)col.offered);
    tu_collector_free(&col);

    /* Folded: every line "frames count", the counts (microseconds)
     * summing to pprof's CPU time, within half a microsecond a line. */
    char *text = read_file(files.folded);
    int64_t folded_total = 0;
    int lines = 0, hot_lines = 0;
    int64_t rooted = 0, hot_samples = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *sp = strrchr(line, ' ');
        ASSERT_NOT_NULL(sp);
        ASSERT_GT(sp - line, 0);
        char *end;
        long long c = strtoll(sp + 1, &end, 10);
        ASSERT(*end == '\0' && c > 0);
        folded_total += c;
        lines++;
        /* Root first: the leaf where the time went at the right, just
         * before the count, so the thread's entry (builders_worker, which
         * calls builders_hot) is to its left. Only the test's own functions
         * are looked at: libc's frames (start_thread, clone3) have names
         * only where its debug file is installed. */
        *sp = '\0';
        const char *leaf = strrchr(line, ';');
        leaf = leaf ? leaf + 1 : line;
        /* Not under TSan (see tu_tsan_build; CI saw
         * "[unknown];0x1be107f8d48;builders_hot;__tsan_read8"). */
        if (has_frame(line, "builders_hot") && !tu_tsan_build()) {
            hot_lines++;
            hot_samples += c;
            if (strcmp(leaf, "builders_hot") != 0)
                TEST_FAIL("not root first: %s %lld", line, c);
            if (has_frame(line, "builders_worker"))
                rooted += c;
        }
    }
    printf("folded: %d lines, %lld us; pprof: %lld samples, %lld ns on %d threads\n", lines,
           (long long)folded_total, (long long)total, (long long)cpu_ns, n);
    ASSERT(llabs(folded_total * 1000 - cpu_ns) <= (long long)lines * 500);
    if (!tu_tsan_build()) {
        /* Nearly every sample in builders_hot is a whole stack from its
         * thread's entry; a rare one the unwinder lost a caller of may not
         * name builders_worker. */
        printf("builders_hot: %d lines, %lld samples, %lld under builders_worker\n", hot_lines,
               (long long)hot_samples, (long long)rooted);
        ASSERT_GT(hot_lines, 0);
        ASSERT_GE(rooted * 10, hot_samples * 9);
    }
    free(text);

    /* Trace: per-thread sample counts equal pprof's thread_id counts. */
    char expect[512] = "";
    for (int i = 0; i < n; i++) {
        size_t len = strlen(expect);
        snprintf(expect + len, sizeof expect - len, "%d:%lld ", (int)tids[i], (long long)counts[i]);
    }
    ASSERT_EQ(run_checker(files.trace, expect), 0);
    text = read_file(files.trace);
    ASSERT_CONTAINS(text, "\"run\":\"agree\"");
    free(text);
    unlink(files.pprof);
    unlink(files.folded);
    unlink(files.trace);
    rmdir(dir);
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* shares_agree                                                             */
/* ------------------------------------------------------------------------ */

/* The names whose shares the three files must agree on. */
#define SHARE_NAMES 3
static const char *const share_names[SHARE_NAMES] = {"shares_hot_a", "shares_hot_b",
                                                     "[kernel and unsampled]"};

static int share_index(const char *name)
{
    for (int i = 0; i < SHARE_NAMES; i++)
        if (strcmp(name, share_names[i]) == 0)
            return i;
    return -1;
}

__attribute__((noinline)) void shares_hot_a(volatile uint64_t *x)
{
    for (int i = 0; i < 20000; i++)
        *x = *x * 6364136223846793005u + 1442695040888963407u;
}

__attribute__((noinline)) void shares_hot_b(volatile uint64_t *x)
{
    for (int i = 0; i < 20000; i++)
        *x = *x * 6364136223846793005u + 1442695040888963407u;
}

typedef struct shares_worker {
    snapprof_thread_t *token; /* published with a release store */
    void (*hot)(volatile uint64_t *);
    uint64_t burn_ns;
    atomic_int done;
} shares_worker_t;

static atomic_int g_shares_go, g_shares_stop;

static void *shares_worker_main(void *arg)
{
    shares_worker_t *w = arg;
    snapprof_thread_t *mine;
    ASSERT_OK(snapprof_thread_register(&mine));
    __atomic_store_n(&w->token, mine, __ATOMIC_RELEASE);
    while (!atomic_load(&g_shares_go))
        usleep(1000);
    volatile uint64_t x = 1;
    uint64_t until = tu_thread_cpu_ns() + w->burn_ns;
    while (tu_thread_cpu_ns() < until)
        w->hot(&x);
    atomic_store(&w->done, 1);
    while (!atomic_load(&g_shares_stop))
        usleep(1000);
    return NULL;
}

/* Shares by leaf function in a pprof file: its default sample type (cpu)
 * per leaf, over the total. */
static void pprof_shares(const char *path, double *share)
{
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    /* A CPU profile carries only what it measured: samples and CPU. */
    ASSERT_EQ(p->n_sample_type, 2);
    ASSERT_STR_EQ(pbt_str(p, p->sample_type[1]->type), "cpu");
    ASSERT_STR_EQ(pbt_str(p, p->default_sample_type), "cpu");
    double total = 0, by[SHARE_NAMES] = {0};
    for (size_t i = 0; i < p->n_sample; i++) {
        const Snapprof__Pprof__Sample *s = p->sample[i];
        ASSERT_EQ(s->n_value, 2);
        total += (double)s->value[1];
        if (s->n_location_id == 0)
            continue;
        const Snapprof__Pprof__Location *l = pbt_location(p, s->location_id[0]);
        if (l->n_line == 0)
            continue;
        /* The innermost function, as the folded and trace leaves are. */
        const Snapprof__Pprof__Function *f = pbt_function(p, l->line[0]->function_id);
        int k = share_index(pbt_str(p, f->name));
        if (k >= 0)
            by[k] += (double)s->value[1];
    }
    for (int k = 0; k < SHARE_NAMES; k++)
        share[k] = total > 0 ? by[k] / total : 0;
    snapprof__pprof__profile__free_unpacked(p, NULL);
}

/* Shares by leaf in a folded file: the counts of the lines ending in it. */
static void folded_shares(const char *path, double *share)
{
    char *text = read_file(path);
    double total = 0, by[SHARE_NAMES] = {0};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *sp = strrchr(line, ' ');
        ASSERT_NOT_NULL(sp);
        double c = strtod(sp + 1, NULL);
        total += c;
        *sp = '\0';
        const char *leaf = strrchr(line, ';');
        int k = share_index(leaf ? leaf + 1 : line);
        if (k >= 0)
            by[k] += c;
    }
    for (int k = 0; k < SHARE_NAMES; k++)
        share[k] = total > 0 ? by[k] / total : 0;
    free(text);
}

/* Shares in a trace file as check_trace.py --shares reads them: self time
 * in the flame chart's slices, and sample weights. */
static void trace_shares(const char *path, double *slices, double *samples)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 '%s/check_trace.py' '%s' --shares '%s,%s,%s'",
             SNAPPROF_TEST_SOURCE_DIR, path, share_names[0], share_names[1], share_names[2]);
    int status;
    char *out = tu_run(cmd, &status);
    printf("%s", out);
    ASSERT_EQ(status, 0);
    for (int k = 0; k < SHARE_NAMES; k++) {
        char want[128];
        snprintf(want, sizeof want, "share %s ", share_names[k]);
        const char *at = strstr(out, want);
        ASSERT_NOT_NULL(at);
        ASSERT_EQ(sscanf(at + strlen(want), "%lf %lf", &slices[k], &samples[k]), 2);
    }
    free(out);
}

/* Two threads of equal work, 0.2 CPU-seconds each, under the perf trigger,
 * whose periods vary (and in a run this short, one drawn period stands for
 * each thread's whole run): pprof, folded and trace files written from the
 * same samples give each function the same share of the time, within
 * rounding (they once counted samples in the folded file: 66/34 where
 * pprof said 49/49, and "[kernel and unsampled]" was 1 sample of 267).
 * A run whose samples' counts happen to give the same shares as their
 * weights could not tell, so the run is repeated until they differ. */
static void test_shares_agree(void)
{
    tu_need_perf_event();
    for (int attempt = 0;; attempt++) {
        atomic_store(&g_shares_go, 0);
        atomic_store(&g_shares_stop, 0);
        shares_worker_t w[2] = {{.hot = shares_hot_a, .burn_ns = 200000000u},
                                {.hot = shares_hot_b, .burn_ns = 200000000u}};
        pthread_t th[2];
        snapprof_thread_t *tokens[2];
        for (int i = 0; i < 2; i++) {
            ASSERT_EQ(pthread_create(&th[i], NULL, shares_worker_main, &w[i]), 0);
            while ((tokens[i] = __atomic_load_n(&w[i].token, __ATOMIC_ACQUIRE)) == NULL)
                usleep(1000);
        }
        char *dir = tu_make_tmpdir("shares");
        snapprof_params_t params;
        snapprof_params_init(&params);
        params.trigger = SNAPPROF_TRIGGER_PERF_EVENT;
        snapprof_profiler_t *p;
        ASSERT_OK(snapprof_profiler_create(&params, tokens, 2, &p));
        run_files_t files;
        add_file_builders(p, dir, &files);
        tu_collector_t col = {0};
        ASSERT_OK(snapprof_profiler_add_builder(p, tu_collector_builder(&col)));
        ASSERT_OK(snapprof_profiler_start(p));
        atomic_store(&g_shares_go, 1);
        while (!atomic_load(&w[0].done) || !atomic_load(&w[1].done))
            usleep(2000);
        ASSERT_OK(snapprof_profiler_stop(p));
        snapprof_stats_t st;
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
        snapprof_profiler_destroy(p);
        atomic_store(&g_shares_stop, 1);
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            snapprof_thread_release(tokens[i]);
        }
        if (st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT] != 2) {
            printf("skipped: the perf trigger armed %llu of 2 threads\n",
                   (unsigned long long)st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT]);
            exit(TEST_SKIP);
        }

        /* What the samples say, counted and weighed, from the collector. */
        double counted[SHARE_NAMES] = {0}, weighed[SHARE_NAMES] = {0}, n_all = 0, w_all = 0;
        for (size_t i = 0; i < col.count; i++) {
            const tu_sample_t *smp = &col.samples[i];
            int k = smp->frame_count ? share_index(tu_frame_name(&smp->frames[0])) : -1;
            if (smp->flags & SNAPPROF_SAMPLE_REMAINDER)
                k = 2;
            n_all += 1;
            w_all += (double)smp->cpu_ns;
            if (k >= 0) {
                counted[k] += 1;
                weighed[k] += (double)smp->cpu_ns;
            }
        }
        double skew = 0;
        for (int k = 0; k < SHARE_NAMES; k++) {
            counted[k] /= n_all;
            weighed[k] /= w_all;
            if (fabs(counted[k] - weighed[k]) > skew)
                skew = fabs(counted[k] - weighed[k]);
        }
        tu_collector_free(&col);

        double pp[SHARE_NAMES], fo[SHARE_NAMES], ts[SHARE_NAMES], tp[SHARE_NAMES];
        pprof_shares(files.pprof, pp);
        folded_shares(files.folded, fo);
        trace_shares(files.trace, ts, tp);
        printf("attempt %d: %llu samples; counted vs weighed differ by up to %.1f pp; "
               "counted one by one (before 0.6.0) the rate line said %.1f Hz\n",
               attempt, (unsigned long long)st.samples, skew * 100,
               (double)st.samples / ((double)st.cpu_ns_total / 1e9));
        printf("%-24s %8s %8s %8s %8s %8s\n", "share %", "pprof", "folded", "slices", "samples",
               "counted");
        for (int k = 0; k < SHARE_NAMES; k++)
            printf("%-24s %8.2f %8.2f %8.2f %8.2f %8.2f\n", share_names[k], pp[k] * 100,
                   fo[k] * 100, ts[k] * 100, tp[k] * 100, counted[k] * 100);
        for (int k = 0; k < SHARE_NAMES; k++) {
            ASSERT(fabs(fo[k] - pp[k]) <= 0.005);
            ASSERT(fabs(ts[k] - pp[k]) <= 0.005);
            ASSERT(fabs(tp[k] - pp[k]) <= 0.005);
        }
        /* The hot functions are most of the time, as they should be; not
         * under TSan, which holds the signal until an interceptor of its
         * own, so the leaves are TSan's (see builders.cmake). */
        if (!tu_tsan_build())
            ASSERT(pp[0] + pp[1] > 0.5);
        /* The rate line reads the requested 100 Hz, less what no sample
         * placed, whatever period the run drew. */
        Snapprof__Pprof__Profile *prof = pbt_load(files.pprof);
        ASSERT_GT(prof->n_comment, 0);
        const char *line = pbt_str(prof, prof->comment[0]);
        printf("%s\n", line);
        const char *hz = strstr(line, " samples, ");
        ASSERT_NOT_NULL(hz);
        double rate = strtod(hz + strlen(" samples, "), NULL);
        ASSERT_CONTAINS(line, " Hz per CPU-second of 100 Hz requested");
        ASSERT(rate > 100 * (1 - pp[2]) - 2 && rate < 100 * (1 - pp[2]) + 2);
        snapprof__pprof__profile__free_unpacked(prof, NULL);
        unlink(files.pprof);
        unlink(files.folded);
        unlink(files.trace);
        rmdir(dir);
        free(dir);
        if (skew > 0.02)
            break;
        if (attempt == 4) {
            printf("skipped: in 5 runs the samples' counts gave the shares of their weights\n");
            exit(TEST_SKIP);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* callbacks_symbolize                                                      */
/* ------------------------------------------------------------------------ */

/* A builder that uses what snapprof.h allows in its callbacks: module
 * lookups and symbols in xOnSample (the sampler's lock held) and in
 * xOnProfileCompleted (also run by flush, with that lock held). */
typedef struct sym_builder {
    int symbolized_in_sample; /* samples whose leaf was looked up there */
    int completions;
    int completions_naming_hot; /* completions that found builders_hot */
    snapprof_frame_t leaf[256];
    size_t n;
} sym_builder_t;

static int sym_on_sample(void *user_data, const snapprof_sample_t *s)
{
    sym_builder_t *b = user_data;
    if (s->frame_count == 0 || s->frames[0].kind != SNAPPROF_FRAME_NATIVE)
        return 0;
    if (b->symbolized_in_sample < 3) { /* slow the first time: loads DWARF */
        snapprof_symbol_t sym[8];
        if (snapprof_module_find(s->frames[0].pc) != NULL &&
            snapprof_symbolize(&s->frames[0], sym, 8) >= 0)
            b->symbolized_in_sample++;
    }
    if (b->n < sizeof b->leaf / sizeof b->leaf[0])
        b->leaf[b->n++] = s->frames[0];
    return 0;
}

static int sym_on_completed(void *user_data, const snapprof_profile_info_t *info)
{
    sym_builder_t *b = user_data;
    (void)info;
    int hot = 0;
    for (size_t i = 0; i < b->n; i++) {
        snapprof_symbol_t sym[8];
        (void)snapprof_module_find(b->leaf[i].pc);
        int k = snapprof_symbolize(&b->leaf[i], sym, 8);
        if (k > 0 && strcmp(sym[k - 1].name, "builders_hot") == 0)
            hot = 1;
    }
    b->completions_naming_hot += hot;
    b->completions++;
    return 0;
}

static const snapprof_builder_ops_t sym_ops = {
    .version = 1, /* receives time samples only */
    .name = "symbolizing",
    .xOnSample = sym_on_sample,
    .xOnProfileCompleted = sym_on_completed,
};

/* Builder callbacks may call snapprof_symbolize() and
 * snapprof_module_find(), also while a flush holds the sampler's lock
 * (a deadlock would end in the ctest timeout); xOnProfileCompleted runs at
 * every flush, before and after stop, and at stop. */
static void test_callbacks_symbolize(void)
{
    atomic_store(&g_stop, 0);
    snapprof_thread_t *token = NULL;
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, builders_worker, &token), 0);
    while (__atomic_load_n(&token, __ATOMIC_ACQUIRE) == NULL)
        usleep(1000);
    static sym_builder_t b;
    snapprof_params_t params = tu_params(2000000u);
    snapprof_profiler_t *p;
    snapprof_builder_t *builder;
    ASSERT_OK(snapprof_profiler_create(&params, &token, 1, &p));
    ASSERT_OK(snapprof_builder_create(&sym_ops, &b, &builder));
    ASSERT_OK(snapprof_profiler_add_builder(p, builder));
    ASSERT_OK(snapprof_profiler_start(p));
    tu_wait_samples(p, 10);
    ASSERT_OK(snapprof_profiler_flush(p));
    ASSERT_EQ(b.completions, 1);
    tu_wait_samples(p, 20);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_EQ(b.completions, 2);
    ASSERT_OK(snapprof_profiler_flush(p));
    ASSERT_EQ(b.completions, 3);
    ASSERT_EQ(b.symbolized_in_sample, 3);
    if (!tu_tsan_build()) /* TSan's leaves can be its own (see same_run_agree) */
        ASSERT_EQ(b.completions_naming_hot, 3);
    snapprof_profiler_destroy(p);
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    snapprof_thread_release(token);
}

/* ------------------------------------------------------------------------ */
/* bad_path                                                                 */
/* ------------------------------------------------------------------------ */

static void test_bad_path(void)
{
    int (*create[2])(const char *, snapprof_builder_t **) = {snapprof_folded_builder_create,
                                                             snapprof_trace_builder_create};
    for (int i = 0; i < 2; i++) {
        snapprof_builder_t *b = (snapprof_builder_t *)1;
        ASSERT_EQ(create[i]("/nonexistent-snapprof-dir/x", &b), -ENOENT);
        ASSERT_NULL(b);
        ASSERT_EQ(create[i](NULL, &b), -EINVAL);
        ASSERT_EQ(create[i]("", &b), -EINVAL);
        ASSERT_EQ(create[i]("/tmp/", &b), -EISDIR);
        ASSERT_EQ(create[i]("x", NULL), -EINVAL);
    }
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"folded_format", test_folded_format},
        {"trace_format", test_trace_format},
        {"same_run_agree", test_same_run_agree},
        {"shares_agree", test_shares_agree},
        {"empty_stack_first", test_empty_stack_first},
        {"bad_path", test_bad_path},
        {"callbacks_symbolize", test_callbacks_symbolize},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
