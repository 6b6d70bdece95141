/* module_cache_symbolize: addresses inside known functions get their names. */
#include "test.h"
#include "test_util.h"
#include "module_cache/module_cache.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

/* Functions of the test binary; noinline and with some body so that
 * &fn + 5 is still inside them. */
__attribute__((noinline)) int mc_alpha(int x)
{
    for (int i = 0; i < 5; i++)
        x = x * 31 + i;
    return x;
}

__attribute__((noinline)) int mc_beta(int x)
{
    return mc_alpha(x) ^ mc_alpha(x + 1);
}

/* A local symbol: only .symtab names it. */
__attribute__((noinline)) static int mc_local_gamma(int x)
{
    return mc_beta(x) + mc_beta(x * 3);
}

int (*volatile keep_gamma)(int) = mc_local_gamma;

static void expect_name(uintptr_t fn, const char *name, const snapprof_module_t *module)
{
    snapprof_frame_t frame = {.pc = fn + 5, .module = module, .kind = SNAPPROF_FRAME_NATIVE};
    snapprof_symbol_t sym[4];
    memset(sym, 0, sizeof sym);
    int n = snapprof_symbolize(&frame, sym, 4);
    /* More than one symbol only where fn + 5 is in code inlined into fn
     * (clang inlines the case runner into main): the last is fn itself. */
    if (n < 1)
        TEST_FAIL("symbolize(%s + 5) returned %d", name, n);
    for (int i = 0; i < n - 1; i++)
        ASSERT_NOT_NULL(sym[i].name);
    const snapprof_symbol_t *outer = &sym[n - 1];
    ASSERT_STR_EQ(outer->name, name);
    ASSERT_STR_EQ(outer->system_name, name);
    ASSERT_UEQ(outer->start, fn);
    /* With DWARF (this binary is built with -g; libc when its debug file
     * is installed) the symbol also has file:line; without, neither. */
    ASSERT((outer->file == NULL) == (outer->line == 0));
    const snapprof_module_t *m = module ? module : snapprof_module_find(fn);
    if (m != NULL && m->is_main_executable) {
        ASSERT_NOT_NULL(outer->file);
        ASSERT_CONTAINS(outer->file, "test_module_cache_symbolize.c");
    }
}

/* The case symbolizes main itself. */
int main(int argc, char **argv);

static void test_symbolize(void)
{
    const snapprof_module_t *main_mod = snapprof__module_cache_main();
    ASSERT_NOT_NULL(main_mod);

    /* Our own functions, with the module given and looked up. */
    expect_name((uintptr_t)&mc_alpha, "mc_alpha", main_mod);
    expect_name((uintptr_t)&mc_beta, "mc_beta", NULL);
    expect_name((uintptr_t)keep_gamma, "mc_local_gamma", main_mod);
    expect_name((uintptr_t)&main, "main", NULL);

    /* libc, whose symbols come from .dynsym. Its own qsort, not one a
     * sanitizer runtime interposes. */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NOT_NULL(libc);
    uintptr_t qsort_addr = (uintptr_t)dlsym(libc, "qsort");
    uintptr_t getpid_addr = (uintptr_t)dlsym(libc, "getpid");
    ASSERT(qsort_addr != 0 && getpid_addr != 0);
    const snapprof_module_t *libc_mod = snapprof_module_find(qsort_addr);
    ASSERT_NOT_NULL(libc_mod);
    uint64_t t0 = tu_mono_ns();
    expect_name(qsort_addr, "qsort", libc_mod);
    uint64_t load_ns = tu_mono_ns() - t0;
    t0 = tu_mono_ns();
    for (int i = 0; i < 1000; i++)
        expect_name(qsort_addr, "qsort", libc_mod);
    uint64_t lookup_ns = (tu_mono_ns() - t0) / 1000;
    printf("%s: first symbolize (table load) %.1f us, then %.0f ns per lookup\n", libc_mod->path,
           load_ns / 1e3, (double)lookup_ns);
    expect_name(getpid_addr, "getpid", NULL);
    dlclose(libc);

    /* The vdso, read from memory. */
    void *vdso = dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (vdso != NULL) {
        uintptr_t cgt = (uintptr_t)dlsym(vdso, "__vdso_clock_gettime");
        if (cgt != 0) {
            snapprof_frame_t frame = {.pc = cgt + 2, .kind = SNAPPROF_FRAME_NATIVE};
            snapprof_symbol_t sym;
            ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 1);
            printf("vdso: %s\n", sym.name);
            ASSERT_CONTAINS(sym.name, "clock_gettime");
            ASSERT_UEQ(sym.start, cgt);
        }
        dlclose(vdso);
    } else {
        printf("note: dlopen(linux-vdso.so.1) failed; vdso symbols not checked\n");
    }

    /* Addresses in the middle of nothing. */
    snapprof_symbol_t sym;
    char *heap = malloc(64);
    ASSERT_NOT_NULL(heap);
    snapprof_frame_t frame = {.pc = (uintptr_t)heap + 8, .kind = SNAPPROF_FRAME_NATIVE};
    ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 0);
    frame.pc = (uintptr_t)&sym;
    ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 0);
    frame.pc = 16;
    ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 0);
    free(heap);
    /* Below the first function of the main executable's file. */
    frame.module = main_mod;
    frame.pc = main_mod->load_bias + 1;
    ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 0);

    /* JIT and marker frames carry their own name. */
    snapprof_frame_t jit = {.pc = 0x1234, .kind = SNAPPROF_FRAME_JIT, .name = "js:foo"};
    ASSERT_EQ(snapprof_symbolize(&jit, &sym, 1), 1);
    ASSERT_STR_EQ(sym.name, "js:foo");
    snapprof_frame_t marker = {.kind = SNAPPROF_FRAME_MARKER, .name = "[truncated]"};
    ASSERT_EQ(snapprof_symbolize(&marker, &sym, 1), 1);
    ASSERT_STR_EQ(sym.name, "[truncated]");
    marker.name = NULL;
    ASSERT_EQ(snapprof_symbolize(&marker, &sym, 1), 0);

    /* Argument checks. */
    ASSERT_EQ(snapprof_symbolize(NULL, &sym, 1), -EINVAL);
    ASSERT_EQ(snapprof_symbolize(&jit, NULL, 1), -EINVAL);
    ASSERT_EQ(snapprof_symbolize(&jit, &sym, 0), 0);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"symbolize", test_symbolize},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
