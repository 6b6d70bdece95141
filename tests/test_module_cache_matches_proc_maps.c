/* module_cache_matches_proc_maps: the cache agrees with /proc/self/maps.
 * module_cache_refresh_exec_lines: a refresh parses only its executable
 * lines. */
#include "test.h"
#include "test_util.h"
#include "common/proc_files.h"
#include "module_cache/module_cache.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct line {
    uintptr_t start, end;
    uint64_t offset;
    char name[PATH_MAX];
} line_t;

static line_t lines[4096];
static int nlines;

static void read_exec_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ASSERT_NOT_NULL(f);
    char buf[PATH_MAX + 256];
    nlines = 0;
    while (fgets(buf, sizeof buf, f) && nlines < 4096) {
        line_t *l = &lines[nlines];
        char perms[8];
        int at = 0;
        unsigned long s, e;
        unsigned long long off;
        if (sscanf(buf, "%lx-%lx %7s %llx %*s %*s %n", &s, &e, perms, &off, &at) < 4 || at == 0)
            continue;
        if (perms[2] != 'x')
            continue;
        l->start = s;
        l->end = e;
        l->offset = off;
        snprintf(l->name, sizeof l->name, "%s", buf + at);
        l->name[strcspn(l->name, "\n")] = '\0';
        nlines++;
    }
    fclose(f);
    ASSERT_GT(nlines, 0);
}

static int same_path(const char *a, const char *b)
{
    if (strcmp(a, b) == 0)
        return 1;
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* The case looks main itself up, as a function of the main executable. */
int main(int argc, char **argv);

static void test_matches_proc_maps(void)
{
    uint64_t t0 = tu_mono_ns();
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    uint64_t first_ns = tu_mono_ns() - t0;
    t0 = tu_mono_ns();
    for (int i = 0; i < 20; i++)
        ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    uint64_t refresh_ns = (tu_mono_ns() - t0) / 20;
    read_exec_maps();

    size_t n = snapprof__module_cache_list(NULL, 0);
    ASSERT_GT(n, 0);
    const snapprof_module_t **mods = calloc(n, sizeof *mods);
    ASSERT_NOT_NULL(mods);
    ASSERT_UEQ(snapprof__module_cache_list(mods, n), n);
    printf("%zu modules; first refresh %.1f us, later refreshes %.1f us\n", n, first_ns / 1e3,
           refresh_ns / 1e3);

    /* Loaded modules come first, sorted and disjoint, and each lies inside
     * one executable mapping of the same file at the matching offset. */
    size_t nloaded = 0;
    const snapprof_module_t *vdso = NULL;
    for (size_t i = 0; i < n; i++) {
        const snapprof_module_t *m = mods[i];
        if (!m->is_loaded)
            continue;
        ASSERT_EQ(nloaded, i); /* no unloaded module before a loaded one */
        nloaded++;
        ASSERT(m->start < m->limit);
        ASSERT_NOT_NULL(m->path);
        ASSERT_NOT_NULL(m->build_id);
        if (i > 0)
            ASSERT(mods[i - 1]->limit <= m->start);
        printf("  %#lx-%#lx off %#llx bias %#lx kind %d %s %s%s\n", (unsigned long)m->start,
               (unsigned long)m->limit, (unsigned long long)m->file_offset,
               (unsigned long)m->load_bias, (int)m->kind, m->path, m->build_id,
               m->is_main_executable ? " (main)" : "");
        if (strcmp(m->path, "[vdso]") == 0)
            vdso = m;
        const line_t *l = NULL;
        for (int k = 0; k < nlines; k++)
            if (lines[k].start <= m->start && m->limit <= lines[k].end)
                l = &lines[k];
        if (l == NULL)
            TEST_FAIL("module %s %#lx-%#lx is in no executable mapping", m->path,
                      (unsigned long)m->start, (unsigned long)m->limit);
        if (m->kind == SNAPPROF_MODULE_ANON && l->name[0] == '\0') {
            ASSERT_STR_EQ(m->path, "[anon]");
        } else if (!same_path(m->path, l->name)) {
            TEST_FAIL("module path %s, mapping path %s", m->path, l->name);
        }
        if (l->name[0] == '/')
            ASSERT_UEQ(m->file_offset, l->offset + (m->start - l->start));
        ASSERT_PTR_EQ(snapprof_module_find(m->start), m);
        ASSERT_PTR_EQ(snapprof_module_find(m->limit - 1), m);
    }

    /* Every executable mapping resolves. */
    for (int k = 0; k < nlines; k++) {
        const snapprof_module_t *m = snapprof_module_find(lines[k].start);
        if (m == NULL)
            TEST_FAIL("mapping %#lx-%#lx %s resolves to no module", (unsigned long)lines[k].start,
                      (unsigned long)lines[k].end, lines[k].name);
        ASSERT(m->start <= lines[k].start && lines[k].start < m->limit);
    }

    /* The main executable is found and flagged. */
    const snapprof_module_t *main_mod = snapprof__module_cache_main();
    ASSERT_NOT_NULL(main_mod);
    ASSERT_EQ(main_mod->is_main_executable, 1);
    ASSERT_EQ(main_mod->kind, SNAPPROF_MODULE_NATIVE);
    ASSERT_PTR_EQ(snapprof_module_find((uintptr_t)&main), main_mod);
    ASSERT(same_path(main_mod->path, "/proc/self/exe"));
    ASSERT_GT(strlen(main_mod->build_id), 0);
    for (size_t i = 0; i < nloaded; i++)
        if (mods[i] != main_mod)
            ASSERT_EQ(mods[i]->is_main_executable, 0);

    /* The vdso is found, native, and holds the ELF header the kernel named. */
    uintptr_t ehdr = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (ehdr != 0) {
        ASSERT_NOT_NULL(vdso);
        ASSERT_EQ(vdso->kind, SNAPPROF_MODULE_NATIVE);
        ASSERT_PTR_EQ(snapprof_module_find(ehdr), vdso);
    }

    /* A module that stays loaded keeps its entry across refreshes. */
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    for (size_t i = 0; i < nloaded; i++) {
        ASSERT_PTR_EQ(snapprof_module_find(mods[i]->start), mods[i]);
        ASSERT_EQ(mods[i]->is_loaded, 1);
    }
    ASSERT_UEQ(snapprof__module_cache_list(NULL, 0), n);

    /* What the unwinders pay per frame. */
    t0 = tu_mono_ns();
    for (int i = 0; i < 100000; i++)
        ASSERT_PTR_EQ(snapprof_module_find((uintptr_t)&main + (uintptr_t)(i & 63)), main_mod);
    printf("find (hit): %.0f ns\n", (tu_mono_ns() - t0) / 1e5);

    /* Nothing lives at address 0 or at a heap address. */
    ASSERT_NULL(snapprof_module_find(0));
    ASSERT_NULL(snapprof_module_find((uintptr_t)mods));
    free(mods);
}

/* A refresh parses only the executable lines of /proc/self/maps. A TSan
 * process has ~700 lines, ~20 of them executable, and parsing every one
 * (each byte checked by TSan) made a refresh 3.4 ms of the sampler's CPU
 * time against 0.17 ms in a plain build (soak finding 9). Here 1024 lines
 * are added, none executable: each other page of a mapping made
 * inaccessible. */
static void test_refresh_exec_lines(void)
{
    const size_t pages = 2048;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *p =
        mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(p != MAP_FAILED);
    for (size_t i = 1; i < pages; i += 2)
        ASSERT_EQ(mprotect(p + i * page, page, PROT_NONE), 0);
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    read_exec_maps();
    unsigned long before = snapprof__proc_maps_lines_parsed();
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    unsigned long parsed = snapprof__proc_maps_lines_parsed() - before;
    printf("one refresh parsed %lu lines, %d executable\n", parsed, nlines);
    ASSERT_UEQ(parsed, (unsigned long)nlines);
    /* It still finds what it found. */
    ASSERT_PTR_EQ(snapprof_module_find((uintptr_t)&main), snapprof__module_cache_main());
    ASSERT_EQ(munmap(p, pages * page), 0);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"matches_proc_maps", test_matches_proc_maps},
        {"refresh_exec_lines", test_refresh_exec_lines},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
