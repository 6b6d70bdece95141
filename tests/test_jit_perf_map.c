/* Tests of perf map reading: good and bad lines, a file that grows, lines
 * that replace older ones, a file rewritten from scratch, overlong lines,
 * the layout of perf map code (by name prefix), and turning it off. */
#include "test.h"
#include "test_jit_util.h"
#include "test_util.h"

#include "module_cache/jit_regions.h"
#include "module_cache/module_cache.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Addresses the perf map talks about: mapped, so that nothing else is put
 * there, but neither executable nor registered. */
static uintptr_t g_base;
static char g_path[512];

static void write_file(const char *mode, const char *text)
{
    FILE *f = fopen(g_path, mode);
    ASSERT_NOT_NULL(f);
    fputs(text, f);
    ASSERT_EQ(fclose(f), 0);
}

/* write_file of the text printf would make of fmt. */
__attribute__((format(printf, 2, 3))) static void write_filef(const char *mode, const char *fmt,
                                                              ...)
{
    FILE *f = fopen(g_path, mode);
    ASSERT_NOT_NULL(f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    ASSERT_EQ(fclose(f), 0);
}

/* Lookups check the file at most once per millisecond (a miss) or every
 * 10 ms (a hit). */
static void wait_check_interval(void)
{
    struct timespec ts = {0, 12 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static const char *name_at(uintptr_t addr)
{
    const snapprof__jit_region_t *r = snapprof__jit_region_of(snapprof_module_find(addr));
    return r ? r->name : NULL;
}

static void setup(void)
{
    g_base = (uintptr_t)tj_map(1 << 20);
    char *dir = tu_make_tmpdir("perfmap");
    snprintf(g_path, sizeof g_path, "%s/perf-test.map", dir);
    free(dir);
    write_file("w", "");
    ASSERT_OK(snapprof_jit_perf_map_configure(g_path, NULL));
}

static void test_lines(void)
{
    setup();
    uintptr_t a = g_base;
    write_filef("w",
                "%lx 40 js:one\n"
                "0x%lx 0x40 LazyCompile:*two file.js:12\n"
                "garbage\n"
                "%lx\n"
                "%lx 0 zero-size\n"
                "%lx 40\n"
                "zz 40 bad-hex\n"
                "ffffffffffffffff 10 wraps\n"
                "12345678901234567 10 too-long-a-number\n"
                "%lx 4g0 bad-size\n"
                "\n"
                "%lx 40 js:three\r\n",
                (unsigned long)a, (unsigned long)(a + 0x40), (unsigned long)(a + 0x80),
                (unsigned long)(a + 0x80), (unsigned long)(a + 0x80), (unsigned long)(a + 0x80),
                (unsigned long)(a + 0x80));
    ASSERT_STR_EQ(name_at(a + 1), "js:one");
    ASSERT_STR_EQ(name_at(a + 0x40), "LazyCompile:*two file.js:12");
    ASSERT_STR_EQ(name_at(a + 0xbf), "js:three");
    ASSERT_NULL(name_at(a + 0xc0));
    const snapprof_module_t *m = snapprof_module_find(a + 1);
    ASSERT_EQ(m->kind, SNAPPROF_MODULE_JIT);
    ASSERT_STR_EQ(m->path, g_path);
    ASSERT_UEQ(m->start, a);
    ASSERT_UEQ(m->limit, a + 0x40);
    ASSERT_EQ(snapprof__jit_region_of(m)->layout.kind, SNAPPROF_JIT_LAYOUT_FRAME_POINTER);
    snapprof_jit_stats_t st = tj_stats();
    ASSERT_UEQ(st.perf_map_lines, 3);
    ASSERT_UEQ(st.perf_map_bad_lines, 9);
    ASSERT_UEQ(st.perf_map_regions, 3);
    ASSERT_UEQ(st.perf_map_reads, 1);
    printf("3 good lines, %llu bad lines skipped\n", (unsigned long long)st.perf_map_bad_lines);
}

static void test_grows(void)
{
    setup();
    uintptr_t a = g_base;
    char line[128];
    snprintf(line, sizeof line, "%lx 10 first\n", (unsigned long)a);
    write_file("w", line);
    ASSERT_STR_EQ(name_at(a), "first");
    /* A line still being written is not read... */
    snprintf(line, sizeof line, "%lx 10 sec", (unsigned long)(a + 0x10));
    write_file("a", line);
    wait_check_interval();
    ASSERT_NULL(name_at(a + 0x10));
    /* ... until it is complete. */
    write_file("a", "ond\n");
    wait_check_interval();
    ASSERT_STR_EQ(name_at(a + 0x10), "second");
    ASSERT_STR_EQ(name_at(a), "first");
    snprintf(line, sizeof line, "%lx 10 third\n", (unsigned long)(a + 0x20));
    write_file("a", line);
    wait_check_interval();
    ASSERT_STR_EQ(name_at(a + 0x20), "third");
    snapprof_jit_stats_t st = tj_stats();
    ASSERT_UEQ(st.perf_map_lines, 3);
    ASSERT_UEQ(st.perf_map_bad_lines, 0);
    ASSERT_UEQ(st.perf_map_reads, 3);
}

/* A JIT that reuses memory writes a new line for it: the newest wins, also
 * when the old name is still found (a hit looks at the file, too). */
static void test_replaced(void)
{
    setup();
    uintptr_t a = g_base;
    write_filef("w", "%lx 100 old-a\n%lx 100 old-b\n", (unsigned long)a,
                (unsigned long)(a + 0x100));
    const snapprof_module_t *old = snapprof_module_find(a + 0x10);
    ASSERT_STR_EQ(snapprof__jit_region_of(old)->name, "old-a");
    /* Lines are dated from the last look that found nothing new: one at
     * "before" would not say whether the next line came before or after. */
    uint64_t before = tu_mono_ns();
    wait_check_interval();
    ASSERT_STR_EQ(name_at(a + 0x10), "old-a");
    wait_check_interval();
    /* One line over the end of old-a and the start of old-b. */
    write_filef("a", "%lx 100 new-ab\n", (unsigned long)(a + 0x80));
    wait_check_interval();
    ASSERT_STR_EQ(name_at(a + 0x90), "new-ab");
    ASSERT_NULL(name_at(a + 0x10)); /* old-a went with it, whole */
    ASSERT_NULL(name_at(a + 0x1f0));
    ASSERT_EQ(old->is_loaded, 0);
    ASSERT_STR_EQ(snapprof__jit_region_of(old)->name, "old-a");
    /* A stack copied before the line was read still names old-a. */
    const snapprof__jit_region_t *then =
        snapprof__jit_region_of(snapprof__module_find_at(a + 0x10, before));
    ASSERT_NOT_NULL(then);
    ASSERT_STR_EQ(then->name, "old-a");
    /* Lines replacing each other in one read: the last one stays. */
    write_filef("a", "%lx 10 v1\n%lx 10 v2\n%lx 10 v3\n", (unsigned long)(a + 0x400),
                (unsigned long)(a + 0x400), (unsigned long)(a + 0x410));
    wait_check_interval();
    ASSERT_STR_EQ(name_at(a + 0x400), "v2");
    ASSERT_STR_EQ(name_at(a + 0x410), "v3");
    snapprof_jit_stats_t st = tj_stats();
    ASSERT_UEQ(st.perf_map_replaced, 3); /* old-a, old-b, v1 */
    ASSERT_UEQ(st.perf_map_regions, 3);
}

/* A perf map rewritten from scratch (a new file, or truncated). */
static void test_rewritten(void)
{
    setup();
    uintptr_t a = g_base;
    write_filef("w", "%lx 10 one\n%lx 10 two\n", (unsigned long)a, (unsigned long)(a + 0x10));
    ASSERT_STR_EQ(name_at(a), "one");
    write_filef("w", "%lx 8 uno\n",
                (unsigned long)(a + 0x20)); /* shorter: truncated and rewritten */
    wait_check_interval();
    ASSERT_STR_EQ(name_at(a + 0x20), "uno");
    ASSERT_NULL(name_at(a));
    ASSERT_NULL(name_at(a + 0x10));
    /* Replaced by rename, longer this time. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", g_path);
    FILE *f = fopen(tmp, "w");
    ASSERT_NOT_NULL(f);
    fprintf(f, "%lx 8 eins\n%lx 8 zwei with a long name to make it longer\n", (unsigned long)a,
            (unsigned long)(a + 0x8));
    ASSERT_EQ(fclose(f), 0);
    ASSERT_EQ(rename(tmp, g_path), 0);
    wait_check_interval();
    ASSERT_STR_EQ(name_at(a), "eins");
    ASSERT_NULL(name_at(a + 0x20));
    ASSERT_UEQ(tj_stats().perf_map_regions, 2);
}

static void test_overlong_line(void)
{
    setup();
    uintptr_t a = g_base;
    size_t big = 100 * 1024;
    char *text = malloc(big + 256);
    ASSERT_NOT_NULL(text);
    int n = snprintf(text, 256, "%lx 10 ", (unsigned long)a);
    memset(text + n, 'x', big);
    snprintf(text + n + big, 256, "\n%lx 10 after\n", (unsigned long)(a + 0x10));
    write_file("w", text);
    free(text);
    ASSERT_NULL(name_at(a));
    ASSERT_STR_EQ(name_at(a + 0x10), "after");
    /* An overlong line whose end is not written yet is skipped across
     * reads. */
    text = malloc(big + 1);
    ASSERT_NOT_NULL(text);
    memset(text, 'y', big);
    text[big] = '\0';
    write_file("a", text);
    wait_check_interval();
    ASSERT_NULL(name_at(a + 0x20));
    char tail[128];
    snprintf(tail, sizeof tail, "yyy\n%lx 10 later\n", (unsigned long)(a + 0x20));
    write_file("a", tail);
    wait_check_interval();
    ASSERT_STR_EQ(name_at(a + 0x20), "later");
    free(text);
    ASSERT_UEQ(tj_stats().perf_map_bad_lines, 2);
    ASSERT_UEQ(tj_stats().perf_map_lines, 2);
}

static void test_layout_and_off(void)
{
    setup();
    snapprof_jit_layout_t fixed = tj_fixed_layout();
    ASSERT_OK(snapprof_jit_perf_map_configure(g_path, &fixed));
    char text[128];
    snprintf(text, sizeof text, "%lx 10 fixed-code\n", (unsigned long)g_base);
    write_file("w", text);
    const snapprof__jit_region_t *r = snapprof__jit_region_of(snapprof_module_find(g_base));
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(r->layout.kind, SNAPPROF_JIT_LAYOUT_FIXED_FRAME);
    ASSERT_EQ(r->layout.saved_fp_offset, 16);
    /* Off: what was read goes, and nothing more is read. */
    ASSERT_OK(snapprof_jit_perf_map_configure("", NULL));
    ASSERT_NULL(name_at(g_base));
    ASSERT_UEQ(tj_stats().perf_map_regions, 0);
    /* The default path is /tmp/perf-<pid>.map. */
    ASSERT_OK(snapprof_jit_perf_map_configure(NULL, NULL));
    snprintf(g_path, sizeof g_path, "/tmp/perf-%d.map", (int)getpid());
    write_file("w", text);
    ASSERT_STR_EQ(name_at(g_base), "fixed-code");
    ASSERT_STR_EQ(snapprof_module_find(g_base)->path, g_path);
    unlink(g_path);
}

static snapprof_jit_layout_kind_t kind_at(uintptr_t addr)
{
    const snapprof__jit_region_t *r = snapprof__jit_region_of(snapprof_module_find(addr));
    ASSERT_NOT_NULL(r);
    return r->layout.kind;
}

/* Layouts by name prefix: "py::" lines of a CPython trampoline's size are
 * CPython trampolines with no setting, other lines get the default; rules
 * added, replaced and removed apply to lines read before them too. */
static void test_prefix_rules(void)
{
    setup();
    uintptr_t a = g_base;
    write_filef("w",
                "%lx b py::f:a.py\n"
                "%lx 40 py::big:b.py\n"
                "%lx b js:x\n"
                "%lx f py::g:c.py\n",
                (unsigned long)a, (unsigned long)(a + 0x40), (unsigned long)(a + 0x80),
                (unsigned long)(a + 0xc0));
    ASSERT_EQ(kind_at(a), SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE);
    ASSERT_EQ(kind_at(a + 0xc0), SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE); /* with endbr64 */
    ASSERT_EQ(kind_at(a + 0x40), SNAPPROF_JIT_LAYOUT_FRAME_POINTER);      /* no trampoline's size */
    ASSERT_EQ(kind_at(a + 0x80), SNAPPROF_JIT_LAYOUT_FRAME_POINTER);

    snapprof_jit_layout_t fixed = tj_fixed_layout(), cpython, fp;
    snapprof_jit_layout_init_cpython(&cpython);
    snapprof_jit_layout_init_frame_pointer(&fp);
    ASSERT_OK(snapprof_jit_perf_map_set_layout("js:", &fixed));
    ASSERT_EQ(kind_at(a + 0x80), SNAPPROF_JIT_LAYOUT_FIXED_FRAME);
    ASSERT_EQ(kind_at(a), SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE);
    /* The longest prefix wins. */
    ASSERT_OK(snapprof_jit_perf_map_set_layout("py::", &fp));
    ASSERT_OK(snapprof_jit_perf_map_set_layout("py::g", &cpython));
    ASSERT_EQ(kind_at(a), SNAPPROF_JIT_LAYOUT_FRAME_POINTER);
    ASSERT_EQ(kind_at(a + 0xc0), SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE);
    /* Rules removed: the default, here the CPython layout, which lines of
     * another size do not get. */
    ASSERT_OK(snapprof_jit_perf_map_set_layout("py::", NULL));
    ASSERT_OK(snapprof_jit_perf_map_set_layout("py::g", NULL));
    ASSERT_OK(snapprof_jit_perf_map_set_layout("py::nothing", NULL));
    ASSERT_OK(snapprof_jit_perf_map_set_layout("", &cpython));
    ASSERT_EQ(kind_at(a), SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE);
    ASSERT_EQ(kind_at(a + 0x40), SNAPPROF_JIT_LAYOUT_FRAME_POINTER);
    ASSERT_EQ(kind_at(a + 0x80), SNAPPROF_JIT_LAYOUT_FIXED_FRAME);
    /* configure() sets the default and keeps the rules. */
    ASSERT_OK(snapprof_jit_perf_map_configure(g_path, NULL));
    ASSERT_EQ(kind_at(a), SNAPPROF_JIT_LAYOUT_FRAME_POINTER);
    ASSERT_EQ(kind_at(a + 0x80), SNAPPROF_JIT_LAYOUT_FIXED_FRAME);
    ASSERT_STR_EQ(name_at(a + 0xc0), "py::g:c.py");

    ASSERT_EQ(snapprof_jit_perf_map_set_layout(NULL, &fp), -EINVAL);
    char longest[65];
    memset(longest, 'x', 64);
    longest[64] = '\0';
    ASSERT_EQ(snapprof_jit_perf_map_set_layout(longest, &fp), -EINVAL);
    longest[63] = '\0';
    ASSERT_OK(snapprof_jit_perf_map_set_layout(longest, &fp));
    snapprof_jit_layout_t bad = fixed;
    bad.frame_size = 12;
    ASSERT_EQ(snapprof_jit_perf_map_set_layout("js:", &bad), -EINVAL);
    /* js: and the 63 x's; room for 14 more. */
    for (int i = 0; i < SNAPPROF_JIT_PERF_MAP_RULES_MAX - 2; i++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "r%d:", i);
        ASSERT_OK(snapprof_jit_perf_map_set_layout(prefix, &fp));
    }
    ASSERT_EQ(snapprof_jit_perf_map_set_layout("one-more:", &fp), -ENOSPC);
    ASSERT_OK(snapprof_jit_perf_map_set_layout("js:", &cpython)); /* a replacement fits */
    ASSERT_EQ(kind_at(a + 0x80), SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"lines", test_lines},
        {"grows", test_grows},
        {"replaced", test_replaced},
        {"rewritten", test_rewritten},
        {"overlong_line", test_overlong_line},
        {"layout_and_off", test_layout_and_off},
        {"prefix_rules", test_prefix_rules},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
