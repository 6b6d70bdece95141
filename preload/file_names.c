/* The names of every file a run writes: see file_names.h. */
#include "preload/file_names.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The extensions that name a format (preload_config.c maps them). */
static const char *const g_exts[] = {".pb.gz", ".pb", ".prof", ".folded", ".txt", ".json"};

static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n > k && strncasecmp(s + n - k, suffix, k) == 0;
}

size_t snapprof__name_base_length(const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof g_exts / sizeof g_exts[0]; i++)
        if (ends_with(path, n, g_exts[i]))
            return n - strlen(g_exts[i]);
    return n;
}

static int fits(int n, size_t size)
{
    return n >= 0 && (size_t)n < size ? 0 : -1;
}

int snapprof__name_file(const char *asked, const char *kind, const char *interval, int pid,
                        char *out, size_t size)
{
    size_t base = snapprof__name_base_length(asked);
    char p[24] = "";
    if (pid > 0)
        snprintf(p, sizeof p, ".%d", pid);
    int n = snprintf(out, size, "%.*s%s%s%s%s%s%s", (int)base, asked, kind && *kind ? "." : "",
                     kind ? kind : "", interval && *interval ? "." : "", interval ? interval : "",
                     p, asked + base);
    return fits(n, size);
}

int snapprof__name_kind_family(const char *asked, const char *kind, const char *ext, char *out,
                               size_t size)
{
    size_t base = snapprof__name_base_length(asked);
    return fits(snprintf(out, size, "%.*s.%s%s", (int)base, asked, kind, ext), size);
}

int snapprof__name_fallback(const char *dir, unsigned index, unsigned n_outputs, const char *ext,
                            int pid, char *out, size_t size)
{
    char asked[4096];
    int n = n_outputs > 1 ? snprintf(asked, sizeof asked, "%s/snapprof-%u%s", dir, index, ext)
                          : snprintf(asked, sizeof asked, "%s/snapprof%s", dir, ext);
    if (fits(n, sizeof asked) != 0)
        return -1;
    return snapprof__name_file(asked, NULL, NULL, pid, out, size);
}

int snapprof__name_is_pid_file(const char *asked, const char *path)
{
    size_t base = snapprof__name_base_length(asked), n = strlen(path);
    const char *ext = asked + base;
    size_t k = strlen(ext);
    if (strncmp(path, asked, base) != 0 || n < base + 2 + k || path[base] != '.' ||
        strcmp(path + n - k, ext) != 0)
        return 0;
    for (size_t i = base + 1; i < n - k; i++)
        if (path[i] < '0' || path[i] > '9')
            return 0;
    return 1;
}

int snapprof__name_pid_glob(const char *asked, char *out, size_t size)
{
    size_t base = snapprof__name_base_length(asked);
    const char *ext = asked + base;
    int n = snprintf(out, size, "'%.*s'.[0-9]*%s%s%s", (int)base, asked, *ext ? "'" : "", ext,
                     *ext ? "'" : "");
    return fits(n, size);
}

int snapprof__name_gperftools_child(const char *asked, int pid, char *out, size_t size)
{
    return fits(snprintf(out, size, "%s_%d", asked, pid), size);
}

int snapprof__name_record_file(const char *dir, int pid, const char *ext, char *out, size_t size)
{
    return fits(snprintf(out, size, "%s/%d%s", dir, pid, ext), size);
}
