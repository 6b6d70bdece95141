/* Helpers for the preload tests (see test_preload_util.h). */
#include "test_preload_util.h"

#include <dirent.h>
#include <stdarg.h>
#include <sys/stat.h>

static char *pl_vrun(int *status, const char *fmt, va_list args)
{
    va_list ap;
    va_copy(ap, args);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    ASSERT_GE(n, 0);
    char *cmd = malloc((size_t)n + 1);
    ASSERT_NOT_NULL(cmd);
    va_copy(ap, args);
    vsnprintf(cmd, (size_t)n + 1, fmt, ap);
    va_end(ap);
    printf("$ %s\n", cmd);
    char *out = tu_run(cmd, status);
    printf("%s[status %d]\n", out, status ? *status : 0);
    fflush(stdout);
    free(cmd);
    return out;
}

char *pl_run(int *status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *out = pl_vrun(status, fmt, ap);
    va_end(ap);
    return out;
}

char *pl_run_ok(const char *fmt, ...)
{
    int status;
    va_list ap;
    va_start(ap, fmt);
    char *out = pl_vrun(&status, fmt, ap);
    va_end(ap);
    if (status != 0)
        TEST_FAIL("the command above ended with status %d", status);
    return out;
}

void pl_skip_if_sanitized(void)
{
    if (tu_sanitizer_build()) {
        printf("skipped: LD_PRELOAD of a sanitized library into another program cannot work "
               "(the sanitizer runtime must load first)\n");
        exit(TEST_SKIP);
    }
}

double pl_samples_of(const char *profile, const char *extra, const char *fn)
{
    char flags[1024];
    snprintf(flags, sizeof flags, "-sample_index=samples %s", extra ? extra : "");
    return tu_top_value(profile, flags, fn, TU_TOP_FLAT, 0, 0);
}

void pl_require_fn(const char *profile, const char *extra, const char *fn, double min)
{
    double got = pl_samples_of(profile, extra, fn);
    if (got < min) {
        char args[2048];
        snprintf(args, sizeof args, "-top -sample_index=samples %s '%s'", extra ? extra : "",
                 profile);
        char *raw = tu_pprof(args, NULL);
        TEST_FAIL("%s: %s has %.0f samples, want at least %.0f (%s):\n%s", profile, fn, got, min,
                  extra ? extra : "", raw);
    }
    printf("%s: %s %.0f samples %s\n", profile, fn, got, extra ? extra : "");
}

void pl_require_under(const char *profile, const char *fn, double min)
{
    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top(profile, "-sample_index=samples", &rows, &raw);
    const tu_top_row_t *r = tu_top_find(rows, n, fn);
    double got = r ? r->cum : 0;
    if (got < min)
        TEST_FAIL("%s: %s is in %.0f stacks, want at least %.0f:\n%s", profile, fn, got, min, raw);
    printf("%s: %s in %.0f stacks\n", profile, fn, got);
    free(rows);
    free(raw);
}

void pl_make_dir(char *dir, size_t size, const char *tag)
{
    char *d = tu_make_tmpdir(tag);
    snprintf(dir, size, "%s", d);
    free(d);
}

char pl_dir[512];

void pl_setup(const char *tag)
{
    pl_make_dir(pl_dir, sizeof pl_dir, tag);
}

char *pl_path(const char *dir, const char *name)
{
    static char buf[4][1024];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

int pl_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int pl_count_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    ASSERT_NOT_NULL(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

void pl_require_count(const char *text, const char *needle, int count)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    if (n != count)
        TEST_FAIL("\"%s\" appears %d times, want %d, in:\n%s", needle, n, count, text);
}
