/* Helpers shared by snapprof's tests (see test_util.h). */
#include "test_util.h"
#include "test.h"
#include "test_prog.h"

#include <dirent.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/perf_event.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t tu_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t tu_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

char tu_thread_state(int tid)
{
    return tp_thread_state(tid);
}

/* Which sanitizer the build has: gcc says so with __SANITIZE_*__, clang
 * with __has_feature; CMake defines SNAPPROF_SANITIZER_BUILD for any. */
#if defined(__SANITIZE_THREAD__)
#define TU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif
#ifndef TU_TSAN
#define TU_TSAN 0
#endif
#ifndef TU_ASAN
#define TU_ASAN 0
#endif
#ifdef SNAPPROF_SANITIZER_BUILD
#define TU_SANITIZER 1
#else
#define TU_SANITIZER 0
#endif

int tu_sanitizer_build(void)
{
    return TU_SANITIZER;
}

int tu_tsan_build(void)
{
    return TU_TSAN;
}

int tu_asan_build(void)
{
    return TU_ASAN;
}

static void skip_if(int yes, const char *why)
{
    if (!yes)
        return;
    printf("skipped: %s\n", why);
    exit(TEST_SKIP);
}

void tu_skip_under_tsan(const char *why)
{
    skip_if(tu_tsan_build(), why);
}

void tu_skip_under_asan(const char *why)
{
    skip_if(tu_asan_build(), why);
}

char *tu_run(const char *cmd, int *status)
{
    size_t len = strlen(cmd) + 16;
    char *full = malloc(len);
    ASSERT_NOT_NULL(full);
    snprintf(full, len, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    free(full);
    ASSERT_NOT_NULL(p);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    ASSERT_NOT_NULL(buf);
    for (;;) {
        if (cap - n < 2048) {
            cap *= 2;
            buf = realloc(buf, cap);
            ASSERT_NOT_NULL(buf);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, p);
        if (got == 0)
            break;
        n += got;
    }
    buf[n] = '\0';
    int st = pclose(p);
    if (status)
        *status = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
    return buf;
}

char *tu_pprof(const char *args, int *status)
{
    const char *go = SNAPPROF_GO;
    if (go[0] == '\0' || strstr(go, "NOTFOUND") != NULL)
        TEST_FAIL("go was not found at configure time; install golang-go (see README)");
    char *home = tu_make_tmpdir("pprof-home");
    size_t len = strlen(args) + strlen(home) * 3 + strlen(go) + 128;
    char *cmd = malloc(len);
    ASSERT_NOT_NULL(cmd);
    snprintf(cmd, len, "HOME=%s PPROF_TMPDIR=%s GOCACHE=%s/cache %s tool pprof %s", home, home,
             home, go, args);
    char *out = tu_run(cmd, status);
    free(cmd);
    free(home);
    return out;
}

/* Parses "1.50s" or "120ms" or "42" into a number in the given unit; we
 * only compare values within one report, so the unit suffix is dropped. */
static double parse_value(const char *s)
{
    return strtod(s, NULL);
}

char *tu_pprof_ok(const char *args, const char *profile)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s '%s'", args, profile);
    int status = 0;
    char *out = tu_pprof(cmd, &status);
    if (status != 0)
        TEST_FAIL("go tool pprof %s failed (%d):\n%s", cmd, status, out);
    return out;
}

int tu_pprof_top_print(const char *profile, const char *extra, tu_top_row_t **out, char **raw)
{
    int n = tu_pprof_top(profile, extra, out, raw);
    printf("%s\n", *raw);
    return n;
}

int tu_pprof_top(const char *profile, const char *extra, tu_top_row_t **out, char **raw)
{
    char args[4096];
    snprintf(args, sizeof args, "-top -nodecount=1000 %s", extra ? extra : "");
    char *text = tu_pprof_ok(args, profile);
    int cap = 64, n = 0;
    tu_top_row_t *rows = calloc((size_t)cap, sizeof *rows);
    ASSERT_NOT_NULL(rows);
    int in_table = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!in_table) {
            if (strstr(line, "flat%") && strstr(line, "cum%"))
                in_table = 1;
            continue;
        }
        char flat[64], cum[64];
        double flat_pct, sum_pct, cum_pct;
        int name_at = 0;
        if (sscanf(line, " %63s %lf%% %lf%% %63s %lf%% %n", flat, &flat_pct, &sum_pct, cum,
                   &cum_pct, &name_at) < 5 ||
            name_at == 0)
            continue;
        if (n == cap) {
            cap *= 2;
            rows = realloc(rows, (size_t)cap * sizeof *rows);
            ASSERT_NOT_NULL(rows);
        }
        tu_top_row_t *r = &rows[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "%s", line + name_at);
        size_t nl = strlen(r->name);
        while (nl > 0 && (r->name[nl - 1] == ' ' || r->name[nl - 1] == '\r'))
            r->name[--nl] = '\0';
        r->flat = parse_value(flat);
        r->cum = parse_value(cum);
        r->flat_pct = flat_pct;
        r->cum_pct = cum_pct;
    }
    if (raw) {
        /* strtok cut the text; run once more for an intact copy. */
        *raw = tu_pprof_ok(args, profile);
    }
    free(text);
    *out = rows;
    return n;
}

const tu_top_row_t *tu_top_find(const tu_top_row_t *rows, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0)
            return &rows[i];
    return NULL;
}

double tu_top_value(const char *profile, const char *extra, const char *name, tu_top_col_t col,
                    double absent, int print)
{
    tu_top_row_t *rows;
    char *raw = NULL;
    int n = tu_pprof_top(profile, extra, &rows, print ? &raw : NULL);
    if (print)
        printf("$ go tool pprof -top %s\n%s\n", extra, raw);
    const tu_top_row_t *r = tu_top_find(rows, n, name);
    double v = absent;
    if (r)
        v = col == TU_TOP_FLAT       ? r->flat
            : col == TU_TOP_FLAT_PCT ? r->flat_pct
            : col == TU_TOP_CUM      ? r->cum
                                     : r->cum_pct;
    free(rows);
    free(raw);
    return v;
}

double tu_top_cum_pct(const char *profile, const char *extra, const char *name, int print)
{
    return tu_top_value(profile, extra, name, TU_TOP_CUM_PCT, 0, print);
}

int tu_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ASSERT_NOT_NULL(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

char *tu_make_tmpdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    size_t len = strlen(base) + strlen(tag) + 32;
    char *path = malloc(len);
    ASSERT_NOT_NULL(path);
    snprintf(path, len, "%s/snapprof-%s-XXXXXX", base, tag);
    if (!mkdtemp(path))
        TEST_FAIL("mkdtemp(%s): %s", path, strerror(errno));
    return path;
}

char *tu_path(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = malloc(len);
    ASSERT_NOT_NULL(path);
    snprintf(path, len, "%s/%s", dir, name);
    return path;
}

void tu_wait_stats(snapprof_profiler_t *p, snapprof_stats_t *st,
                   int (*done)(const snapprof_stats_t *st, void *arg), void *arg)
{
    uint64_t deadline = tu_mono_ns() + 120000000000u;
    do {
        usleep(5000);
        ASSERT_OK(snapprof_profiler_get_stats(p, st));
    } while (!done(st, arg) && tu_mono_ns() < deadline);
}

int tu_stats_has_samples(const snapprof_stats_t *st, void *arg)
{
    return st->samples >= *(const uint64_t *)arg;
}

uint64_t tu_heap_handled(const snapprof_stats_t *st)
{
    return st->heap_samples + st->heap_dropped_no_slot + st->heap_dropped_set_full +
           st->heap_dropped_no_stack + st->failed[SNAPPROF_FAIL_NO_FRAMES];
}

void tu_heap_wait_drained(snapprof_profiler_t *p, uint64_t recorded)
{
    uint64_t deadline = tu_mono_ns() + 60000000000ull;
    for (;;) {
        snapprof_stats_t st;
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
        if (tu_heap_handled(&st) >= recorded)
            return;
        if (tu_mono_ns() > deadline)
            TEST_FAIL("the drain did not keep up: %" PRIu64 " of %" PRIu64, tu_heap_handled(&st),
                      recorded);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

void tu_start_thread(pthread_t *th, void *(*fn)(void *), void *arg, atomic_int *ready)
{
    ASSERT_EQ(pthread_create(th, NULL, fn, arg), 0);
    while (!atomic_load(ready))
        usleep(1000);
}

void tu_worker_enter(tu_worker_t *w)
{
    ASSERT_OK(snapprof_thread_register(&w->token));
    w->tid = snapprof_thread_tid(w->token);
}

void tu_worker_start(tu_worker_t *w, void *(*fn)(void *), void *arg)
{
    tu_start_thread(&w->th, fn, arg, &w->ready);
}

void tu_worker_stop(tu_worker_t *w)
{
    atomic_store(&w->stop, 1);
    pthread_join(w->th, NULL);
    snapprof_thread_release(w->token);
}

snapprof_params_t tu_params(uint64_t interval_ns)
{
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = interval_ns;
    return params;
}

snapprof_profiler_t *tu_profile_self(snapprof_thread_t **self)
{
    ASSERT_OK(snapprof_thread_register(self));
    snapprof_params_t params = tu_params(1000000u);
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, self, 1, &p));
    return p;
}

void tu_wait_samples(snapprof_profiler_t *p, uint64_t n)
{
    snapprof_stats_t st;
    tu_wait_stats(p, &st, tu_stats_has_samples, &n);
    ASSERT_GE(st.samples, n);
}

void tu_burn_until(snapprof_profiler_t *p, uint64_t (*get)(const snapprof_stats_t *), uint64_t n)
{
    uint64_t deadline = tu_mono_ns() + 120000000000u;
    snapprof_stats_t st;
    for (;;) {
        tu_burn_cpu_ns(1000000);
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
        if (get(&st) >= n)
            return;
        ASSERT_LT(tu_mono_ns(), deadline);
    }
}

void tu_burn_cpu_ns(uint64_t ns)
{
    uint64_t end = tu_thread_cpu_ns() + ns;
    volatile uint64_t x = 1;
    while (tu_thread_cpu_ns() < end) {
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005u + 1442695040888963407u;
    }
}

/* Sleeps ns of wall time (0: not at all). */
static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    if (ns)
        nanosleep(&ts, NULL);
}

static int collector_started(void *ud, const snapprof_profile_info_t *info)
{
    (void)info;
    ((tu_collector_t *)ud)->started++;
    return 0;
}

static int collector_sample(void *ud, const snapprof_sample_t *s)
{
    tu_collector_t *c = ud;
    c->offered++;
    if (s->flags & SNAPPROF_SAMPLE_REMAINDER)
        c->remainders++;
    sleep_ns(c->sample_sleep_ns);
    if (c->fail_samples)
        return -EIO;
    if (c->count == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 256;
        c->samples = realloc(c->samples, c->cap * sizeof *c->samples);
        ASSERT_NOT_NULL(c->samples);
    }
    tu_sample_t *t = &c->samples[c->count++];
    memset(t, 0, sizeof *t);
    t->tid = s->tid;
    t->flags = s->flags;
    t->frame_count = s->frame_count;
    t->cpu_ns = s->cpu_ns;
    t->wall_ns = s->wall_ns;
    t->timestamp_ns = s->timestamp_ns;
    size_t n = s->frame_count < TU_MAX_FRAMES ? s->frame_count : TU_MAX_FRAMES;
    memcpy(t->frames, s->frames, n * sizeof *s->frames);
    if (s->frame_count > 0)
        t->outermost = s->frames[s->frame_count - 1];
    for (size_t i = 0; i < s->label_count; i++) {
        const snapprof_label_t *l = &s->labels[i];
        if (strcmp(l->key, "state") == 0 && l->str)
            snprintf(t->state, sizeof t->state, "%s", l->str);
        else if (strcmp(l->key, "syscall") == 0 && l->str)
            snprintf(t->syscall, sizeof t->syscall, "%s", l->str);
    }
    return 0;
}

static int collector_completed(void *ud, const snapprof_profile_info_t *info)
{
    tu_collector_t *c = ud;
    sleep_ns(c->complete_sleep_ns);
    c->info = *info;
    c->stats = *info->stats;
    c->info.stats = &c->stats;
    c->completed++; /* last: a reader that sees it sees the rest */
    return 0;
}

static const snapprof_builder_ops_t collector_ops = {
    .version = 1, /* receives time samples only */
    .name = "test-collector",
    .xOnProfileStarted = collector_started,
    .xOnSample = collector_sample,
    .xOnProfileCompleted = collector_completed,
};

snapprof_builder_t *tu_builder(const snapprof_builder_ops_t *ops, void *user_data)
{
    snapprof_builder_t *b = NULL;
    ASSERT_OK(snapprof_builder_create(ops, user_data, &b));
    return b;
}

snapprof_builder_t *tu_collector_builder(tu_collector_t *c)
{
    return tu_builder(&collector_ops, c);
}

snapprof_profiler_t *tu_profile_collect(const snapprof_params_t *params,
                                        snapprof_thread_t *const *tokens, size_t n,
                                        tu_collector_t *c, uint64_t samples)
{
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(params, tokens, n, &p));
    ASSERT_OK(snapprof_profiler_add_builder(p, tu_collector_builder(c)));
    ASSERT_OK(snapprof_profiler_start(p));
    tu_wait_samples(p, samples);
    ASSERT_OK(snapprof_profiler_stop(p));
    return p;
}

size_t tu_collector_count_tid(const tu_collector_t *c, pid_t tid)
{
    size_t n = 0;
    for (size_t i = 0; i < c->count; i++)
        n += c->samples[i].tid == tid;
    return n;
}

void tu_collector_free(tu_collector_t *c)
{
    free(c->samples);
    memset(c, 0, sizeof *c);
}

const char *tu_frame_name(const snapprof_frame_t *frame)
{
    /* Inlined calls come first; the last symbol is the function the code
     * belongs to, the one the frame's return address is in. */
    snapprof_symbol_t sym[64];
    int n = snapprof_symbolize(frame, sym, 64);
    return n > 0 && sym[n - 1].name ? sym[n - 1].name : "?";
}

int tu_perf_event_allowed(void)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.exclude_kernel = 1;
    attr.disabled = 1;
    int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

void tu_need_test_seams(void)
{
#if !SNAPPROF_TEST_SEAMS
    printf("skipped: built without -DSNAPPROF_TEST_SEAMS=ON, so the library does not read "
           "SNAPPROF_TEST_FAULTS (tools/test.sh builds with it)\n");
    exit(TEST_SKIP);
#endif
}

/* Two, written in turn: the library may still read the one installed
 * before (a thread inside snapprof__fault() while the rates change). */
static snapprof__fault_seams_t g_fault_seams[2];
static unsigned g_fault_next;
static _Atomic uint64_t g_fault_injected[SNAPPROF__FAULT_SITE_COUNT];

static void count_injected(void *user_data, snapprof__fault_site_t site)
{
    (void)user_data;
    atomic_fetch_add_explicit(&g_fault_injected[site], 1, memory_order_relaxed);
}

void tu_faults(const uint32_t one_in[SNAPPROF__FAULT_SITE_COUNT], uint64_t seed)
{
    snapprof__fault_seams_t *seams = &g_fault_seams[g_fault_next++ % 2];
    memcpy(seams->one_in, one_in, sizeof seams->one_in);
    seams->seed = seed;
    seams->xOnInjected = count_injected;
    snapprof__fault_set_seams(seams);
}

void tu_fault_set(snapprof__fault_site_t site, uint32_t one_in, uint64_t seed)
{
    uint32_t rates[SNAPPROF__FAULT_SITE_COUNT] = {0};
    rates[site] = one_in;
    tu_faults(rates, seed);
}

void tu_fault_clear(void)
{
    snapprof__fault_set_seams(NULL);
}

uint64_t tu_fault_injected(snapprof__fault_site_t site)
{
    return atomic_load_explicit(&g_fault_injected[site], memory_order_relaxed);
}

void tu_seccomp_install(int nr1, int nr2, uint32_t action)
{
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr1, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, action),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    ASSERT_OK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
    ASSERT_OK((int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog));
}

void tu_need_perf_event(void)
{
    if (!tu_perf_event_allowed()) {
        printf("skipped: perf_event_open refused (%s); see /proc/sys/kernel/perf_event_paranoid\n",
               strerror(errno));
        exit(TEST_SKIP);
    }
}
