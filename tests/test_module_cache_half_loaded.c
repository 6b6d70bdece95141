/* module_cache_half_loaded: a refresh that reads /proc/self/maps while
 * dlopen() is half-way (the file mapped, the loader not yet listing it)
 * makes a maps-only entry for the library's code, with no symbols and no
 * load bias. Once the loader lists the library, its entry answers for
 * stacks copied since that early sighting, not the maps-only one. CI saw
 * the maps-only entry answer instead: about 6 % of unwinder_cfi_dlclose's
 * stacks through its library stopped at the first frame, with no symbol.
 *
 * The half-way state is made by hand: the library's code segment is mapped
 * from its file where the loader put it the first time, the cache is
 * refreshed then, and the mapping is replaced by a real dlopen(). */
#include "test.h"
#include "test_util.h"
#include "module_cache/module_cache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void test_half_loaded(void)
{
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    void *h = dlopen(MC_TESTLIB_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        TEST_FAIL("dlopen(%s): %s", MC_TESTLIB_PATH, dlerror());
    uintptr_t fn = (uintptr_t)dlsym(h, "mc_testlib_fn");
    ASSERT(fn != 0);
    const snapprof_module_t *m1 = snapprof_module_find(fn + 2);
    ASSERT_NOT_NULL(m1);
    ASSERT_EQ(m1->kind, SNAPPROF_MODULE_NATIVE);
    snapprof_module_t first = *m1;
    ASSERT_EQ(dlclose(h), 0);
    ASSERT_EQ(snapprof__module_cache_update(), 0);
    ASSERT_EQ(m1->is_loaded, 0);

    /* The loader half-way: the code segment mapped from the file, where
     * the loader put it, and not listed. */
    int fd = open(MC_TESTLIB_PATH, O_RDONLY | O_CLOEXEC);
    ASSERT(fd >= 0);
    size_t len = first.limit - first.start;
    void *at = mmap((void *)first.start, len, PROT_READ | PROT_EXEC,
                    MAP_PRIVATE | MAP_FIXED_NOREPLACE, fd, (off_t)first.file_offset);
    ASSERT(at == (void *)first.start);
    close(fd);
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    const snapprof_module_t *half = snapprof_module_find(fn + 2);
    ASSERT_NOT_NULL(half);
    ASSERT_EQ(half->kind, SNAPPROF_MODULE_ANON);
    ASSERT_EQ(half->is_loaded, 1);
    /* A stack copied now, after the early sighting. */
    uint64_t copied_ns = tu_mono_ns();
    ASSERT_EQ(munmap(at, len), 0);

    /* The loader finishes: the library at the same place. Freed address
     * space is reused first, so a few tries are plenty. */
    uintptr_t fn2 = 0;
    for (int tries = 0; tries < 20; tries++) {
        h = dlopen(MC_TESTLIB_PATH, RTLD_NOW | RTLD_LOCAL);
        ASSERT_NOT_NULL(h);
        fn2 = (uintptr_t)dlsym(h, "mc_testlib_fn");
        if (fn2 == fn)
            break;
        ASSERT_EQ(dlclose(h), 0);
    }
    if (fn2 != fn)
        TEST_FAIL("the library never came back to %#lx (last at %#lx)", (unsigned long)fn,
                  (unsigned long)fn2);

    /* The copy's frame, unwound after the cache learns of the load: the
     * library's own entry, with its load bias and symbols. */
    const snapprof_module_t *m = snapprof__module_find_at(fn + 2, copied_ns);
    ASSERT_NOT_NULL(m);
    printf("frame of a copy taken after the early sighting: %s, kind %d, bias %#lx\n", m->path,
           (int)m->kind, (unsigned long)m->load_bias);
    ASSERT_EQ(m->kind, SNAPPROF_MODULE_NATIVE);
    ASSERT_EQ(m->is_loaded, 1);
    ASSERT_UEQ(m->load_bias, first.load_bias);
    snapprof_frame_t frame = {.pc = fn + 2, .module = m, .kind = SNAPPROF_FRAME_NATIVE};
    snapprof_symbol_t sym;
    ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 1);
    ASSERT_STR_EQ(sym.name, "mc_testlib_fn");
    /* A new copy's frame too. */
    ASSERT_PTR_EQ(snapprof__module_find_at(fn + 2, tu_mono_ns()), m);
    ASSERT_EQ(dlclose(h), 0);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"half_loaded", test_half_loaded},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
