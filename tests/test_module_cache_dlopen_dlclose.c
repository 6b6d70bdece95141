/* module_cache_dlopen_dlclose: a library that comes and goes keeps a valid
 * entry marked unloaded, and a reload gets a new one.
 * module_cache_hit_old_copy: a lookup for a stack copied before the last
 * refresh does not rescan when the loader changed since. */
#include "test.h"
#include "test_util.h"
#include "module_cache/module_cache.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void expect_name(const snapprof_module_t *m, uintptr_t fn, const char *name)
{
    snapprof_frame_t frame = {.pc = fn + 2, .module = m, .kind = SNAPPROF_FRAME_NATIVE};
    snapprof_symbol_t sym;
    int n = snapprof_symbolize(&frame, &sym, 1);
    if (n != 1)
        TEST_FAIL("symbolize(%s + 2) returned %d", name, n);
    ASSERT_STR_EQ(sym.name, name);
    ASSERT_UEQ(sym.start, fn);
}

static int is_listed(const snapprof_module_t *m)
{
    size_t n = snapprof__module_cache_list(NULL, 0);
    const snapprof_module_t **all = calloc(n, sizeof *all);
    ASSERT_NOT_NULL(all);
    n = snapprof__module_cache_list(all, n);
    int found = 0;
    for (size_t i = 0; i < n; i++)
        found |= all[i] == m;
    free(all);
    return found;
}

static void test_dlopen_dlclose(void)
{
    /* Fill the cache before the library exists, so that finding it below
     * needs the refresh-on-miss path. */
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);

    void *h = dlopen(MC_TESTLIB_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        TEST_FAIL("dlopen(%s): %s", MC_TESTLIB_PATH, dlerror());
    uintptr_t fn = (uintptr_t)dlsym(h, "mc_testlib_fn");
    uintptr_t other = (uintptr_t)dlsym(h, "mc_testlib_other");
    ASSERT(fn != 0 && other != 0);

    const snapprof_module_t *m = snapprof_module_find(fn + 2);
    ASSERT_NOT_NULL(m);
    char want[PATH_MAX];
    ASSERT_NOT_NULL(realpath(MC_TESTLIB_PATH, want));
    ASSERT_STR_EQ(m->path, want);
    ASSERT_EQ(m->is_loaded, 1);
    ASSERT_EQ(m->is_main_executable, 0);
    ASSERT_EQ(m->kind, SNAPPROF_MODULE_NATIVE);
    ASSERT_GT(strlen(m->build_id), 0);
    ASSERT_PTR_EQ(snapprof_module_find(other), m);
    expect_name(m, fn, "mc_testlib_fn");
    ASSERT(is_listed(m));
    snapprof_module_t copy = *m;
    /* A stack copied now and unwound after the unload. */
    uint64_t copied_ns = tu_mono_ns();

    ASSERT_EQ(dlclose(h), 0);
    void *still = dlopen(MC_TESTLIB_PATH, RTLD_NOW | RTLD_NOLOAD);
    if (still != NULL) {
        dlclose(still);
        TEST_FAIL("the library did not unload");
    }

    /* A lookup of its old address notices the unload by itself: hits ask
     * the loader for changes at most every 10 ms. */
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    const snapprof_module_t *after = snapprof_module_find(fn + 2);
    ASSERT(after == NULL || after != m);
    ASSERT_EQ(__atomic_load_n(&m->is_loaded, __ATOMIC_RELAXED), 0);
    /* The old entry is intact and still listed. */
    ASSERT_UEQ(m->start, copy.start);
    ASSERT_UEQ(m->limit, copy.limit);
    ASSERT_PTR_EQ(m->path, copy.path);
    ASSERT_STR_EQ(m->path, want);
    ASSERT_STR_EQ(m->build_id, copy.build_id);
    ASSERT(is_listed(m));
    /* A frame of a copy taken while it was loaded still finds it, however
     * late it is unwound: the sampler unwinds copies after the update that
     * found the library gone (frame 0 used to get no module then). A copy
     * taken after the unload was noticed does not. */
    ASSERT_PTR_EQ(snapprof__module_find_at(fn + 2, copied_ns), m);
    ASSERT_PTR_EQ(snapprof__module_find_at(other, copied_ns), m);
    after = snapprof__module_find_at(fn + 2, tu_mono_ns());
    ASSERT(after == NULL || after != m);
    /* Frames that point at it still symbolize, also for functions not
     * looked up while it was loaded. */
    expect_name(m, fn, "mc_testlib_fn");
    expect_name(m, other, "mc_testlib_other");

    /* An explicit refresh changes nothing for it. */
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    ASSERT_EQ(m->is_loaded, 0);
    ASSERT_EQ(snapprof__module_cache_update(), 0);

    /* Loading it again (often at the same place) makes a new entry. */
    h = dlopen(MC_TESTLIB_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NOT_NULL(h);
    uintptr_t fn2 = (uintptr_t)dlsym(h, "mc_testlib_fn");
    const snapprof_module_t *m2 = snapprof_module_find(fn2 + 2);
    ASSERT_NOT_NULL(m2);
    ASSERT_PTR_NE(m2, m);
    ASSERT_EQ(m2->is_loaded, 1);
    ASSERT_EQ(m->is_loaded, 0);
    ASSERT_STR_EQ(m2->path, want);
    printf("first load at %#lx, reload at %#lx (%s place)\n", (unsigned long)copy.start,
           (unsigned long)m2->start, copy.start == m2->start ? "same" : "another");
    expect_name(m2, fn2, "mc_testlib_fn");
    /* The old copy's frames keep the old entry even where the new one
     * lies, since the new one was not known to be mapped yet then; a new
     * copy's get the new one. */
    if (copy.start == m2->start)
        ASSERT_PTR_EQ(snapprof__module_find_at(fn2 + 2, copied_ns), m);
    ASSERT_PTR_EQ(snapprof__module_find_at(fn2 + 2, tu_mono_ns()), m2);
    /* The update the sampling thread runs notices an unload at once. */
    ASSERT_EQ(dlclose(h), 0);
    ASSERT_EQ(snapprof__module_cache_update(), 0);
    ASSERT_EQ(m2->is_loaded, 0);
    after = snapprof_module_find(fn2 + 2);
    ASSERT(after == NULL || after != m2);
}

/* A lookup that hits, for a stack copied before the last refresh began,
 * does not rescan even when the loader changed since and the hit check is
 * due: that refresh saw every module the copy can point into. Under TSan,
 * with a library dlopen()ed and dlclose()d in a loop, such rescans were
 * most of the sampler's CPU time (soak finding 9). A copy taken after it
 * still gets the check. */
static void test_hit_old_copy(void)
{
    uintptr_t here = (uintptr_t)&test_hit_old_copy;
    uint64_t copied_ns = tu_mono_ns();
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    const snapprof_module_t *m = snapprof__module_find_at(here, copied_ns);
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(m->is_main_executable, 1);

    /* The loader changes, and the hit check falls due (every 10 ms). */
    void *h = dlopen(MC_TESTLIB_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        TEST_FAIL("dlopen(%s): %s", MC_TESTLIB_PATH, dlerror());
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);

    unsigned before = snapprof__module_cache_refreshes();
    ASSERT_PTR_EQ(snapprof__module_find_at(here, copied_ns), m);
    ASSERT_UEQ(snapprof__module_cache_refreshes(), before);
    /* A copy taken now: the check finds the loader changed and rescans. */
    ASSERT_PTR_EQ(snapprof__module_find_at(here, tu_mono_ns()), m);
    ASSERT_UEQ(snapprof__module_cache_refreshes(), before + 1);
    ASSERT_EQ(dlclose(h), 0);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"dlopen_dlclose", test_dlopen_dlclose},
        {"hit_old_copy", test_hit_old_copy},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
