/* Rolling profiles end to end: `snapprof record --loop` (and SNAPPROF_LOOP)
 * on a real program writes one pprof per interval beside the whole run's,
 * each with its time and duration, named so that they sort by time, and
 * the intervals add up to the whole run's profile sample for sample (read
 * back with our decoder and merged by `go tool pprof -proto`). Judged by counts and CPU values,
 * never by wall time. */
#include "test_preload_util.h"
#include "test_profile_builder_util.h"

#include <dirent.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLI SNAPPROF_CLI

/* ------------------------------------------------------------------------ */
/* A profile read back through go tool pprof -raw                           */
/* ------------------------------------------------------------------------ */

/* One distinct sample of a profile: its stack (each location's text, leaf
 * first) and labels as pprof prints them, and its values summed. */
typedef struct entry {
    char *key;
    uint64_t count, cpu_ns;
} entry_t;

typedef struct raw {
    entry_t *e;
    size_t n, cap;
    double duration_s; /* duration_nanos, in seconds */
    int has_time;      /* time_nanos set */
    int64_t time_nanos;
    uint64_t cpu_total;
} raw_t;

static void add_entry(raw_t *r, const char *key, uint64_t count, uint64_t cpu)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->e[i].key, key) == 0) {
            r->e[i].count += count;
            r->e[i].cpu_ns += cpu;
            return;
        }
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->e = realloc(r->e, r->cap * sizeof *r->e);
        ASSERT_NOT_NULL(r->e);
    }
    r->e[r->n++] = (entry_t){strdup(key), count, cpu};
}

static int by_label(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Reads a profile with our own decoder (each go tool pprof call costs
 * seconds on a loaded machine: the real client merges the intervals once,
 * below): every sample keyed by its stack (each location's address and
 * function, leaf first) and its labels. */
static void read_pb(const char *path, raw_t *r, int ours)
{
    memset(r, 0, sizeof *r);
    Snapprof__Pprof__Profile *p = pbt_load(path);
    ASSERT_NOT_NULL(p);
    if (ours) /* pprof's own output sets its mappings' flags its way */
        pbt_check_valid(p);
    r->duration_s = p->duration_nanos / 1e9;
    r->has_time = p->time_nanos > 0;
    r->time_nanos = p->time_nanos;
    ASSERT_GE(p->n_sample_type, 2);
    static char key[1 << 16];
    for (size_t i = 0; i < p->n_sample; i++) {
        const Snapprof__Pprof__Sample *smp = p->sample[i];
        size_t klen = 0;
        for (size_t k = 0; k < smp->n_location_id; k++) {
            const Snapprof__Pprof__Location *loc = pbt_location(p, smp->location_id[k]);
            ASSERT_NOT_NULL(loc);
            klen += (size_t)snprintf(key + klen, sizeof key - klen, "%s@%" PRIx64 ";",
                                     pbt_location_name(p, smp->location_id[k]), loc->address);
            ASSERT(klen < sizeof key);
        }
        /* Labels in key order: pprof's merge writes them sorted. */
        char labels[16][512];
        size_t nl = smp->n_label < 16 ? smp->n_label : 16;
        for (size_t k = 0; k < nl; k++) {
            const Snapprof__Pprof__Label *l = smp->label[k];
            if (l->str)
                snprintf(labels[k], sizeof labels[k], "#%s=%s", pbt_str(p, l->key),
                         pbt_str(p, l->str));
            else
                snprintf(labels[k], sizeof labels[k], "#%s=%" PRId64, pbt_str(p, l->key), l->num);
        }
        qsort(labels, nl, sizeof labels[0], by_label);
        for (size_t k = 0; k < nl; k++) {
            klen += (size_t)snprintf(key + klen, sizeof key - klen, "%s", labels[k]);
            ASSERT(klen < sizeof key);
        }
        add_entry(r, key, (uint64_t)smp->value[0], (uint64_t)smp->value[1]);
        r->cpu_total += (uint64_t)smp->value[1];
    }
    snapprof__pprof__profile__free_unpacked(p, NULL);
}

static void free_raw(raw_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->e[i].key);
    free(r->e);
}

/* ------------------------------------------------------------------------ */
/* The interval files of a run                                              */
/* ------------------------------------------------------------------------ */

/* 1 when name is BASE.YYYYMMDDTHHMMSSZ EXT. */
static int is_interval(const char *name, const char *base, const char *ext)
{
    size_t b = strlen(base), e = strlen(ext), n = strlen(name);
    if (n != b + 1 + 16 + e || strncmp(name, base, b) != 0 || name[b] != '.' ||
        strcmp(name + n - e, ext) != 0)
        return 0;
    const char *t = name + b + 1;
    for (int i = 0; i < 16; i++) {
        int digit = t[i] >= '0' && t[i] <= '9';
        if (i == 8 ? t[i] != 'T' : i == 15 ? t[i] != 'Z' : !digit)
            return 0;
    }
    return 1;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The interval files of BASE EXT in dir, sorted by name (so by time). */
static size_t interval_files(const char *dir, const char *base, const char *ext, char ***out)
{
    DIR *d = opendir(dir);
    ASSERT_NOT_NULL(d);
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_interval(de->d_name, base, ext))
            continue;
        names = realloc(names, (n + 1) * sizeof *names);
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        names[n] = malloc(len);
        snprintf(names[n++], len, "%s/%s", dir, de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    *out = names;
    return n;
}

static uint64_t sum_cpu(const raw_t *r)
{
    uint64_t t = 0;
    for (size_t i = 0; i < r->n; i++)
        t += r->e[i].cpu_ns;
    return t;
}

/* The intervals of a run, summed, against its whole profile: every
 * distinct sample (stack and labels) with the same count and CPU time.
 * Returns the CPU time of the samples whose leaf is in function leaf. */
/* Fails unless b has every distinct sample of a with the same count and
 * CPU time, and nothing else. */
static void expect_same(const raw_t *a, const raw_t *b, const char *what)
{
    ASSERT_UEQ(b->n, a->n);
    for (size_t i = 0; i < a->n; i++) {
        const entry_t *w = &a->e[i], *s = NULL;
        for (size_t k = 0; k < b->n && !s; k++)
            if (strcmp(b->e[k].key, w->key) == 0)
                s = &b->e[k];
        if (!s) {
            for (size_t k = 0; k < b->n; k++)
                fprintf(stderr, "  has: %s\n", b->e[k].key);
            TEST_FAIL("%s: a sample of the whole run is missing: %s", what, w->key);
        }
        if (s->count != w->count || s->cpu_ns != w->cpu_ns)
            TEST_FAIL("%s: %" PRIu64 " samples %" PRIu64 " ns, whole run %" PRIu64
                      " samples %" PRIu64 " ns: %s",
                      what, s->count, s->cpu_ns, w->count, w->cpu_ns, w->key);
    }
}

static uint64_t check_adds_up(const char *whole_path, char **files, size_t n, const char *leaf)
{
    raw_t whole, sum;
    read_pb(whole_path, &whole, 1);
    memset(&sum, 0, sizeof sum);
    int64_t prev_time = 0;
    for (size_t i = 0; i < n; i++) {
        raw_t r;
        read_pb(files[i], &r, 1);
        printf("%s: %.3f s, %.3f CPU-s in %zu distinct samples\n", files[i], r.duration_s,
               r.cpu_total / 1e9, r.n);
        ASSERT(r.has_time);
        ASSERT(r.duration_s > 0);
        ASSERT_GT(r.time_nanos, prev_time); /* the names sort by time */
        prev_time = r.time_nanos;
        for (size_t k = 0; k < r.n; k++)
            add_entry(&sum, r.e[k].key, r.e[k].count, r.e[k].cpu_ns);
        free_raw(&r);
    }
    printf("whole run: %.3f CPU-s in %zu distinct samples; intervals: %.3f CPU-s in %zu\n",
           whole.cpu_total / 1e9, whole.n, sum_cpu(&sum) / 1e9, sum.n);
    ASSERT_GT(whole.cpu_total, 0);
    expect_same(&whole, &sum, "intervals summed");

    /* The real client: go tool pprof -proto merges them, and the merge is
     * the whole run's profile. */
    static char args[1 << 16];
    size_t alen = (size_t)snprintf(args, sizeof args, "-proto");
    for (size_t i = 0; i < n; i++)
        alen += (size_t)snprintf(args + alen, sizeof args - alen, " '%s'", files[i]);
    char merged[1200];
    snprintf(merged, sizeof merged, "%s.merged.pb.gz", whole_path);
    alen += (size_t)snprintf(args + alen, sizeof args - alen, " > '%s'", merged);
    ASSERT(alen < sizeof args);
    int st = 0;
    char *out = tu_pprof(args, &st);
    if (st != 0)
        TEST_FAIL("go tool pprof %s failed:\n%s", args, out);
    free(out);
    raw_t m;
    read_pb(merged, &m, 0);
    expect_same(&whole, &m, "merged by go tool pprof -proto");
    free_raw(&m);
    unlink(merged);

    uint64_t in_leaf = 0;
    for (size_t i = 0; i < whole.n; i++) {
        const char *semi = strchr(whole.e[i].key, ';');
        const char *hit = strstr(whole.e[i].key, leaf);
        if (hit && semi && hit < semi)
            in_leaf += whole.e[i].cpu_ns;
    }
    free_raw(&whole);
    free_raw(&sum);
    return in_leaf;
}

/* ------------------------------------------------------------------------ */
/* Cases                                                                    */
/* ------------------------------------------------------------------------ */

/* record --loop 1s: three threads burn 1.2 s of CPU each, then the program
 * sleeps 4 s; at least three intervals, which add up to the whole run. */
static void test_record_loop(void)
{
    pl_skip_if_sanitized();
    char *dir = tu_make_tmpdir("loop");
    char *out = pl_run_ok("%s record --loop 1s -F 200 -o %s/base.pb.gz -- %s 1200 4000", CLI, dir,
                          LOOP_PROG);
    free(out);
    char **files;
    size_t n = interval_files(dir, "base", ".pb.gz", &files);
    printf("%zu interval files\n", n);
    ASSERT_GE(n, 3);
    char whole[1024];
    snprintf(whole, sizeof whole, "%s/base.pb.gz", dir);
    /* The burning threads' CPU is there, by name (each go tool pprof call
     * costs seconds on a loaded machine: the files are read once). */
    ASSERT_GT(check_adds_up(whole, files, n, "loop_hot_a"), 100000000u);
    for (size_t i = 0; i < n; i++)
        free(files[i]);
    free(files);
    free(dir);
}

/* SNAPPROF_LOOP through LD_PRELOAD, two outputs: each has its own
 * interval files in its own format. */
static void test_env_loop(void)
{
    pl_skip_if_sanitized();
    char *dir = tu_make_tmpdir("loop-env");
    char *out = pl_run_ok("LD_PRELOAD=%s SNAPPROF_LOOP=1s SNAPPROF_OUTPUT=%s/p.pb.gz,%s/f.folded "
                          "%s 300 2200",
                          SNAPPROF_PRELOAD_LIB, dir, dir, LOOP_PROG);
    free(out);
    char **pb, **folded;
    size_t npb = interval_files(dir, "p", ".pb.gz", &pb);
    size_t nf = interval_files(dir, "f", ".folded", &folded);
    printf("%zu pprof and %zu folded interval files\n", npb, nf);
    ASSERT_GE(npb, 2);
    ASSERT_EQ(npb, nf);
    char whole[1024];
    snprintf(whole, sizeof whole, "%s/p.pb.gz", dir);
    check_adds_up(whole, pb, npb, "loop_hot_a");
    for (size_t i = 0; i < npb; i++) {
        free(pb[i]);
        free(folded[i]);
    }
    free(pb);
    free(folded);
    free(dir);
}

/* Bad intervals are refused before anything runs. */
static void test_bad_loop(void)
{
    const char *bad[] = {"0.5s", "abc", "10x", "0", "-1s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = 0;
        char *out = pl_run(&st, "%s record --loop '%s' -o /tmp/never.pb.gz -- true", CLI, bad[i]);
        ASSERT_NE(st, 0);
        ASSERT_CONTAINS(out, "bad --loop");
        free(out);
    }
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"record", test_record_loop},
        {"env", test_env_loop},
        {"bad_value", test_bad_loop},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
