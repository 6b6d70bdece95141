/* Rolling profiles end to end: `snapprof record --loop` (and SNAPPROF_LOOP)
 * on a real program writes one pprof per interval beside the whole run's,
 * each with its time and duration, named so that they sort by time, and
 * the intervals add up to the whole run's profile sample for sample (read
 * back through `go tool pprof -raw`). Judged by counts and CPU values,
 * never by wall time. */
#include "test_preload_util.h"

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
    double duration_s; /* "Duration:", -1 when absent */
    int has_time;      /* "Time:" */
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

/* The text of location id in -raw's "Locations" section (its lines, the
 * address included: the same process maps the same code at the same
 * place in every file of a run). */
static const char *location_text(char **locs, size_t nlocs, unsigned long id)
{
    ASSERT(id > 0 && id < nlocs && locs[id]);
    return locs[id];
}

static void read_raw(const char *path, raw_t *r)
{
    memset(r, 0, sizeof *r);
    r->duration_s = -1;
    char args[1200];
    snprintf(args, sizeof args, "-raw '%s'", path);
    int st = 0;
    char *text = tu_pprof(args, &st);
    if (st != 0)
        TEST_FAIL("go tool pprof -raw %s failed:\n%s", path, text);
    /* The locations first: they come after the samples. */
    size_t nlocs = 1;
    char **locs = calloc(1, sizeof *locs);
    char *loc = strstr(text, "\nLocations\n");
    ASSERT_NOT_NULL(loc);
    char *end = strstr(loc, "\nMappings\n");
    for (char *line = loc + strlen("\nLocations\n"); line && *line && (!end || line < end);) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char *colon = memchr(line, ':', len);
        char *idend;
        unsigned long id = strtoul(line, &idend, 10);
        if (colon && idend == colon && id > 0) {
            if (id >= nlocs) {
                locs = realloc(locs, (id + 1) * sizeof *locs);
                memset(locs + nlocs, 0, (id + 1 - nlocs) * sizeof *locs);
                nlocs = id + 1;
            }
            locs[id] = strndup(colon + 1, len - (size_t)(colon + 1 - line));
        } else if (id == 0 && nlocs > 1) {
            /* An inlined caller's line of the location before. */
            size_t i = nlocs - 1;
            size_t old = strlen(locs[i]);
            locs[i] = realloc(locs[i], old + len + 2);
            locs[i][old] = '|';
            memcpy(locs[i] + old + 1, line, len);
            locs[i][old + 1 + len] = '\0';
        }
        line = nl ? nl + 1 : NULL;
    }
    char *d = strstr(text, "\nDuration: ");
    if (d)
        r->duration_s = strtod(d + strlen("\nDuration: "), NULL);
    r->has_time = strstr(text, "\nTime: ") != NULL;
    char *samples = strstr(text, "\nSamples:\n");
    ASSERT_NOT_NULL(samples);
    char *line = strchr(samples + strlen("\nSamples:\n"), '\n'); /* past the types */
    ASSERT_NOT_NULL(line);
    line++;
    static char key[1 << 16];
    size_t klen = 0;
    uint64_t count = 0, cpu = 0;
    int have = 0;
    while (line && *line && line < loc) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char tmp[8192];
        snprintf(tmp, sizeof tmp, "%.*s", (int)(len < sizeof tmp ? len : sizeof tmp - 1), line);
        char *p;
        unsigned long long c = strtoull(tmp, &p, 10);
        if (p != tmp && *p == ' ' && strchr(tmp, ':') && !strchr(tmp, '[')) {
            /* "  count  cpu: id id id" */
            if (have)
                add_entry(r, key, count, cpu);
            count = c;
            cpu = strtoull(p, &p, 10);
            ASSERT(*p == ':');
            p++;
            klen = 0;
            key[0] = '\0';
            for (;;) {
                char *q;
                unsigned long id = strtoul(p, &q, 10);
                if (q == p)
                    break;
                p = q;
                klen += (size_t)snprintf(key + klen, sizeof key - klen, "%s;",
                                         location_text(locs, nlocs, id));
                ASSERT(klen < sizeof key);
            }
            have = 1;
            r->cpu_total += cpu;
        } else if (have) {
            /* A label line of the sample. */
            klen += (size_t)snprintf(key + klen, sizeof key - klen, "#%s", tmp);
            ASSERT(klen < sizeof key);
        }
        line = nl ? nl + 1 : NULL;
    }
    if (have)
        add_entry(r, key, count, cpu);
    for (size_t i = 0; i < nlocs; i++)
        free(locs[i]);
    free(locs);
    free(text);
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
static uint64_t check_adds_up(const char *whole_path, char **files, size_t n, const char *leaf)
{
    raw_t whole, sum;
    read_raw(whole_path, &whole);
    memset(&sum, 0, sizeof sum);
    for (size_t i = 0; i < n; i++) {
        raw_t r;
        read_raw(files[i], &r);
        printf("%s: duration %g (pprof's unit), %.3f CPU-s in %zu distinct samples\n", files[i],
               r.duration_s, r.cpu_total / 1e9, r.n);
        ASSERT(r.has_time);
        ASSERT(r.duration_s > 0);
        for (size_t k = 0; k < r.n; k++)
            add_entry(&sum, r.e[k].key, r.e[k].count, r.e[k].cpu_ns);
        free_raw(&r);
    }
    printf("whole run: %.3f CPU-s in %zu distinct samples; intervals: %.3f CPU-s in %zu\n",
           whole.cpu_total / 1e9, whole.n, sum_cpu(&sum) / 1e9, sum.n);
    ASSERT_GT(whole.cpu_total, 0);
    ASSERT_UEQ(sum.n, whole.n);
    for (size_t i = 0; i < whole.n; i++) {
        const entry_t *w = &whole.e[i], *s = NULL;
        for (size_t k = 0; k < sum.n && !s; k++)
            if (strcmp(sum.e[k].key, w->key) == 0)
                s = &sum.e[k];
        if (!s)
            TEST_FAIL("a sample of the whole run is in no interval: %s", w->key);
        if (s->count != w->count || s->cpu_ns != w->cpu_ns)
            TEST_FAIL("intervals %" PRIu64 " samples %" PRIu64 " ns, whole run %" PRIu64
                      " samples %" PRIu64 " ns: %s",
                      s->count, s->cpu_ns, w->count, w->cpu_ns, w->key);
    }
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
    int st = 0;
    char *out = pl_run(&st, "%s record --loop 1s -F 200 -o %s/base.pb.gz -- %s 1200 4000", CLI, dir,
                       LOOP_PROG);
    printf("%s", out);
    ASSERT_EQ(st, 0);
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
    int st = 0;
    char *out = pl_run(&st,
                       "LD_PRELOAD=%s SNAPPROF_LOOP=1s SNAPPROF_OUTPUT=%s/p.pb.gz,%s/f.folded "
                       "%s 300 2200",
                       SNAPPROF_PRELOAD_LIB, dir, dir, LOOP_PROG);
    printf("%s", out);
    ASSERT_EQ(st, 0);
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
