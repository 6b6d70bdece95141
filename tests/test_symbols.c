/* Tests of symbolization with DWARF: file:line, inline frames, C++ names,
 * separate debug files (by .gnu_debuglink and by build-id), the ELF
 * fallback, the per-address cache, and the pprof mappings' has_* flags. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include "module_cache/module_cache.h"
#include "module_cache/symbols_dwarf.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static int symbolize(uintptr_t pc, snapprof_symbol_t *out, size_t max)
{
    snapprof_frame_t f = {pc, snapprof_module_find(pc), SNAPPROF_FRAME_NATIVE, NULL};
    ASSERT_NOT_NULL(f.module);
    return snapprof_symbolize(&f, out, max);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = s ? strlen(s) : 0, b = strlen(suffix);
    return s != NULL && a >= b && strcmp(s + a - b, suffix) == 0;
}

/* ------------------------------------------------------------------------ */
/* This binary's own code (built -O2 -g)                                    */
/* ------------------------------------------------------------------------ */

volatile unsigned sink;

static const int plain_first_line = __LINE__ + 1;
__attribute__((noinline)) void sym_plain(int n)
{
    for (int i = 0; i < n; i++)
        sink = sink * 3 + (unsigned)i;
}
static const int plain_last_line = __LINE__ - 1;

static const int step_first_line = __LINE__ + 1;
static inline __attribute__((always_inline)) void sym_inlined_step(int i)
{
    sink = sink * 31 + (unsigned)i;
    sink ^= sink >> 3;
}
static const int step_last_line = __LINE__ - 1;

static const int with_first_line = __LINE__ + 1;
__attribute__((noinline)) void sym_with_inline(int n)
{
    for (int i = 0; i < n; i++)
        sym_inlined_step(i); /* the call site */
}
static const int call_line = __LINE__ - 2;

/* Every pc of sym_plain has sym_plain's name, this file and a line inside
 * the function. */
static void test_file_line(void)
{
    sym_plain(3);
    int checked = 0;
    for (uintptr_t pc = (uintptr_t)sym_plain; pc < (uintptr_t)sym_plain + 16; pc++) {
        snapprof_symbol_t s[4];
        int n = symbolize(pc, s, 4);
        ASSERT_EQ(n, 1);
        ASSERT_STR_EQ(s[0].name, "sym_plain");
        ASSERT_STR_EQ(s[0].system_name, "sym_plain");
        if (!ends_with(s[0].file, "tests/test_symbols.c"))
            TEST_FAIL("file %s", s[0].file ? s[0].file : "(null)");
        ASSERT_GE(s[0].line, plain_first_line);
        ASSERT_LE(s[0].line, plain_last_line);
        ASSERT_UEQ(s[0].start, (uintptr_t)sym_plain);
        checked++;
    }
    printf("sym_plain: %s:%d..%d\n", "test_symbols.c", plain_first_line, plain_last_line);
    ASSERT_GT(checked, 0);
}

/* Inlined code comes out as two symbols: the inlined function (innermost,
 * with a line inside it) and its caller (with the line of the call). */
static void test_inline_frames(void)
{
    sym_with_inline(3);
    int found = 0;
    for (uintptr_t pc = (uintptr_t)sym_with_inline; pc < (uintptr_t)sym_with_inline + 256; pc++) {
        snapprof_symbol_t s[4];
        int n = symbolize(pc, s, 4);
        if (n < 1 || strcmp(s[n - 1].name, "sym_with_inline") != 0)
            break; /* past the end of the function */
        if (n < 2)
            continue;
        ASSERT_EQ(n, 2);
        ASSERT_STR_EQ(s[0].name, "sym_inlined_step");
        /* clang's line table gives some of the inlined code (the loop's
         * own instructions, moved inside it) lines of the caller. */
        if (s[0].line < with_first_line || s[0].line > call_line) {
            ASSERT_GE(s[0].line, step_first_line);
            ASSERT_LE(s[0].line, step_last_line);
        }
        ASSERT(ends_with(s[0].file, "tests/test_symbols.c"));
        ASSERT_EQ(s[1].line, call_line);
        ASSERT(ends_with(s[1].file, "tests/test_symbols.c"));
        ASSERT_UEQ(s[1].start, (uintptr_t)sym_with_inline);
        if (found++ == 0)
            printf("pc %#lx: %s %s:%d, inlined into %s %s:%d\n", (unsigned long)pc, s[0].name,
                   s[0].file, s[0].line, s[1].name, s[1].file, s[1].line);
        /* Asking for fewer keeps the innermost. */
        snapprof_symbol_t one;
        ASSERT_EQ(symbolize(pc, &one, 1), 1);
        ASSERT_STR_EQ(one.name, "sym_inlined_step");
    }
    ASSERT_GT(found, 0);
}

/* ------------------------------------------------------------------------ */
/* C++                                                                      */
/* ------------------------------------------------------------------------ */

struct cxx_fn {
    uintptr_t address;
    const char *demangled;
    const char *mangled;
};
int symbols_cxx_functions(struct cxx_fn *out);

/* C++ names are demangled for display; the linkage name is kept. */
static void test_demangle(void)
{
    struct cxx_fn fns[2];
    int n = symbols_cxx_functions(fns);
    for (int i = 0; i < n; i++) {
        snapprof_symbol_t s[4];
        int k = symbolize(fns[i].address + 2, s, 4);
        ASSERT_EQ(k, 1);
        printf("%s  <-  %s  (%s:%d)\n", s[0].name, s[0].system_name, s[0].file, s[0].line);
        ASSERT_STR_EQ(s[0].name, fns[i].demangled);
        ASSERT_STR_EQ(s[0].system_name, fns[i].mangled);
        ASSERT(ends_with(s[0].file, "tests/test_symbols_cxx.cpp"));
    }
}

/* ------------------------------------------------------------------------ */
/* Separate debug files                                                     */
/* ------------------------------------------------------------------------ */

typedef unsigned (*entry_fn)(unsigned);
typedef void *(*addr_fn)(void);

/* Loads a copy of the test library and checks that both its exported and
 * its static function get names and file:line (want_lines) or names only. */
static void check_library(const char *path, int want_lines)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        TEST_FAIL("dlopen(%s): %s", path, dlerror());
    entry_fn entry = (entry_fn)(uintptr_t)dlsym(h, "dl_public_entry");
    addr_fn local = (addr_fn)(uintptr_t)dlsym(h, "dl_local_helper_address");
    ASSERT(entry != NULL && local != NULL);
    entry(1);
    const char *names[2] = {"dl_public_entry", "dl_local_helper"};
    uintptr_t pcs[2] = {(uintptr_t)entry + 4, (uintptr_t)local() + 4};
    uint64_t t0 = tu_mono_ns();
    for (int i = 0; i < 2; i++) {
        snapprof_symbol_t s[4];
        int n = symbolize(pcs[i], s, 4);
        ASSERT_EQ(n, 1);
        printf("%s: %s %s:%d\n", path, s[0].name, s[0].file ? s[0].file : "-", s[0].line);
        ASSERT_STR_EQ(s[0].name, names[i]);
        if (want_lines) {
            ASSERT(ends_with(s[0].file, "tests/symbols_test_lib.c"));
            ASSERT_GT(s[0].line, 0);
        } else {
            ASSERT_NULL(s[0].file);
            ASSERT_EQ(s[0].line, 0);
        }
    }
    printf("first symbolization of %s: %.0f us\n", path, (tu_mono_ns() - t0) / 1e3);
    dlclose(h);
}

/* A stripped library (no .symtab, no DWARF) whose .gnu_debuglink names a
 * debug file next to it: names, including the static function only the
 * debug file knows, and file:line come from that file. */
static void test_debuglink(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/symbols_debug/libsymbols_test_debuglink.so",
             SNAPPROF_TEST_BINARY_DIR);
    check_library(path, 1);
}

/* The debuglink library symbolized with lines set: names always, file and
 * line when with_lines. Back to the default (ALL) after. */
static void check_debuglink_lines(snapprof_lines_t lines, int with_lines)
{
    ASSERT_OK(snapprof_symbols_set_lines(lines));
    char path[1024];
    snprintf(path, sizeof path, "%s/symbols_debug/libsymbols_test_debuglink.so",
             SNAPPROF_TEST_BINARY_DIR);
    check_library(path, with_lines);
    ASSERT_OK(snapprof_symbols_set_lines(SNAPPROF_LINES_ALL));
}

/* SNAPPROF_LINES_OWN: the same library's debug file still names both
 * functions (the static one is in its .symtab only), but its DWARF is not
 * read: no file, no line. Would catch the names-only path losing the debug
 * file's symbols (dl_local_helper unnamed) or still reading its lines. */
static void test_lines_own_debuglink(void)
{
    check_debuglink_lines(SNAPPROF_LINES_OWN, 0);
}

/* SNAPPROF_LINES_PROGRAM (the preload's default): a library outside the
 * system's library directories keeps the lines of its separate debug
 * file. Would catch PROGRAM reading no separate lines at all (a user's
 * split debug info losing its file:line), as OWN does. */
static void test_lines_program_debuglink(void)
{
    check_debuglink_lines(SNAPPROF_LINES_PROGRAM, 1);
}

/* Which objects SNAPPROF_LINES_PROGRAM takes for system libraries: the
 * library directories and below, by whole path component. Would catch a
 * prefix test without the slash (/library, /usr/libexec) or a missed
 * directory (Debian's /usr/lib/x86_64-linux-gnu, /lib64's loader). */
static void test_lines_program_system_dirs(void)
{
    ASSERT(snapprof__dwarf_system_library("/usr/lib/x86_64-linux-gnu/libc.so.6"));
    ASSERT(snapprof__dwarf_system_library("/lib/x86_64-linux-gnu/libm.so.6"));
    ASSERT(snapprof__dwarf_system_library("/lib64/ld-linux-x86-64.so.2"));
    ASSERT(snapprof__dwarf_system_library("/usr/lib64/libz.so.1"));
    ASSERT(snapprof__dwarf_system_library("/usr/lib/python3.11/lib-dynload/_json.so"));
    ASSERT(!snapprof__dwarf_system_library("/usr/libexec/helper"));
    ASSERT(!snapprof__dwarf_system_library("/library/libx.so"));
    ASSERT(!snapprof__dwarf_system_library("/usr/local/lib/libfoo.so"));
    ASSERT(!snapprof__dwarf_system_library("/usr/bin/python3.11"));
    ASSERT(!snapprof__dwarf_system_library("/home/u/build/libx.so"));
    ASSERT(!snapprof__dwarf_system_library("[vdso]"));
    ASSERT(!snapprof__dwarf_system_library(""));
    ASSERT(!snapprof__dwarf_system_library(NULL));
}

/* SNAPPROF_LINES_OWN keeps the lines of DWARF in the object itself (this
 * binary, -O2 -g), inlined frames included; other values are refused and
 * change nothing. */
static void test_lines_own_keeps_own(void)
{
    ASSERT_EQ(snapprof_symbols_set_lines((snapprof_lines_t)3), -EINVAL);
    ASSERT_EQ(snapprof_symbols_set_lines((snapprof_lines_t)-1), -EINVAL);
    ASSERT_OK(snapprof_symbols_set_lines(SNAPPROF_LINES_OWN));
    sym_plain(3);
    snapprof_symbol_t s[4];
    int n = symbolize((uintptr_t)sym_plain + 4, s, 4);
    ASSERT_GE(n, 1);
    ASSERT_STR_EQ(s[n - 1].name, "sym_plain");
    ASSERT(ends_with(s[n - 1].file, "tests/test_symbols.c"));
    ASSERT_GE(s[n - 1].line, plain_first_line);
    ASSERT_LE(s[n - 1].line, plain_last_line);
    /* Back to the default for modules loaded afterwards. */
    ASSERT_OK(snapprof_symbols_set_lines(SNAPPROF_LINES_ALL));
    char path[1024];
    snprintf(path, sizeof path, "%s/symbols_debug/libsymbols_test_debuglink.so",
             SNAPPROF_TEST_BINARY_DIR);
    check_library(path, 1);
}

static void copy_file(const char *from, const char *to)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    int status;
    char *out = tu_run(cmd, &status);
    if (status != 0)
        TEST_FAIL("%s: %s", cmd, out);
    free(out);
}

/* A stripped library without a debuglink: its debug file is found by
 * build-id under a debug directory (DIR/.build-id/xx/rest.debug). */
static void test_build_id_dir(void)
{
    char lib[1024], debug[1024];
    snprintf(lib, sizeof lib, "%s/symbols_debug/libsymbols_test_buildid.so",
             SNAPPROF_TEST_BINARY_DIR);
    snprintf(debug, sizeof debug, "%s/symbols_debug/libsymbols_test_lib.so.debug",
             SNAPPROF_TEST_BINARY_DIR);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        TEST_FAIL("dlopen(%s): %s", lib, dlerror());
    const snapprof_module_t *m = snapprof_module_find((uintptr_t)dlsym(h, "dl_public_entry"));
    ASSERT_NOT_NULL(m);
    ASSERT_GT(strlen(m->build_id), 2);
    char *dir = tu_make_tmpdir("debug-dir");
    char sub[1200], file[1400];
    snprintf(sub, sizeof sub, "%s/.build-id", dir);
    ASSERT_EQ(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/.build-id/%.2s", dir, m->build_id);
    ASSERT_EQ(mkdir(sub, 0755), 0);
    snprintf(file, sizeof file, "%s/%s.debug", sub, m->build_id + 2);
    copy_file(debug, file);
    dlclose(h);
    ASSERT_OK(snapprof__symbols_set_debug_dirs(dir));
    check_library(lib, 1);
    unlink(file);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/.build-id", dir);
    rmdir(sub);
    rmdir(dir);
    free(dir);
}

/* Without any debug information, names come from the ELF symbols. */
static void test_elf_fallback(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/libsymbols_test_nodebug.so", SNAPPROF_TEST_BINARY_DIR);
    check_library(path, 0);
}

/* The system's libc, through its separate debug file under /usr/lib/debug
 * when the distribution's debug package is installed. Also reports what
 * loading that DWARF costs once, and a cached lookup. */
static void test_system_debug(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NOT_NULL(libc);
    uintptr_t qsort_addr = (uintptr_t)dlsym(libc, "qsort");
    const snapprof_module_t *m = snapprof_module_find(qsort_addr);
    ASSERT_NOT_NULL(m);
    char debug[512];
    snprintf(debug, sizeof debug, "/usr/lib/debug/.build-id/%.2s/%s.debug", m->build_id,
             m->build_id + 2);
    if (access(debug, R_OK) != 0) {
        printf("skipped: %s not installed (Debian: libc6-dbg)\n", debug);
        dlclose(libc);
        exit(TEST_SKIP);
    }
    snapprof_symbol_t s[8];
    uint64_t t0 = tu_mono_ns();
    int n = symbolize(qsort_addr + 4, s, 8);
    uint64_t first = tu_mono_ns() - t0;
    ASSERT_GE(n, 1);
    printf("%s: %s %s:%d (first lookup, loading the debug file: %.1f ms)\n", m->path, s[n - 1].name,
           s[0].file, s[0].line, first / 1e6);
    ASSERT_STR_EQ(s[n - 1].name, "qsort");
    ASSERT_NOT_NULL(s[0].file);
    ASSERT_GT(s[0].line, 0);
    t0 = tu_mono_ns();
    for (int i = 0; i < 10000; i++)
        symbolize(qsort_addr + 4, s, 8);
    printf("cached lookup: %.0f ns\n", (tu_mono_ns() - t0) / 1e4);
    dlclose(libc);
}

/* ------------------------------------------------------------------------ */
/* pprof mappings                                                           */
/* ------------------------------------------------------------------------ */

/* The pprof builder sets has_filenames/has_line_numbers/has_inline_frames
 * per mapping exactly as its locations carry them: true for this binary
 * (DWARF, and an inlined pc), names only for the library without debug
 * information. */
static void test_mapping_flags(void)
{
    char lib[1024];
    snprintf(lib, sizeof lib, "%s/libsymbols_test_nodebug.so", SNAPPROF_TEST_BINARY_DIR);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NOT_NULL(h);
    uintptr_t lib_pc = (uintptr_t)dlsym(h, "dl_public_entry") + 4;
    uintptr_t inline_pc = 0;
    for (uintptr_t pc = (uintptr_t)sym_with_inline; pc < (uintptr_t)sym_with_inline + 256; pc++) {
        snapprof_symbol_t s[4];
        if (symbolize(pc, s, 4) == 2) {
            inline_pc = pc;
            break;
        }
    }
    ASSERT(inline_pc != 0);
    /* An address of the executable that no symbol covers (its PLT or
     * .init, say), as a profile of any real program has some. */
    const snapprof_module_t *exe = snapprof_module_find((uintptr_t)sym_plain);
    ASSERT_NOT_NULL(exe);
    uintptr_t bare_pc = 0;
    for (uintptr_t pc = exe->start; pc < exe->limit && bare_pc == 0; pc += 4) {
        snapprof_symbol_t s[4];
        if (symbolize(pc, s, 4) == 0)
            bare_pc = pc;
    }
    ASSERT(bare_pc != 0);
    char *path = pbt_tmp_path("sym-flags", "flags.pb.gz");
    snapprof_builder_t *b = pbt_create(path);
    snapprof_frame_t frames[] = {
        {lib_pc, snapprof_module_find(lib_pc), SNAPPROF_FRAME_NATIVE, NULL},
        {inline_pc, snapprof_module_find(inline_pc), SNAPPROF_FRAME_NATIVE, NULL},
        {(uintptr_t)sym_plain + 4, exe, SNAPPROF_FRAME_NATIVE, NULL},
        {bare_pc, exe, SNAPPROF_FRAME_NATIVE, NULL},
    };
    snapprof_sample_t s = {.frames = frames, .frame_count = 4, .tid = 1, .thread_name = "t"};
    pbt_sample(b, &s);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    dlclose(h);
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    int seen = 0;
    for (size_t i = 0; i < p->n_mapping; i++) {
        const Snapprof__Pprof__Mapping *m = p->mapping[i];
        const char *file = pbt_str(p, m->filename);
        printf("mapping %s: functions=%d filenames=%d line_numbers=%d inline_frames=%d\n", file,
               m->has_functions, m->has_filenames, m->has_line_numbers, m->has_inline_frames);
        if (ends_with(file, "libsymbols_test_nodebug.so")) {
            ASSERT(m->has_functions && !m->has_filenames && !m->has_line_numbers &&
                   !m->has_inline_frames);
            seen++;
        } else if (i == 0) {
            ASSERT(m->has_functions && m->has_filenames && m->has_line_numbers &&
                   m->has_inline_frames);
            seen++;
        }
    }
    ASSERT_EQ(seen, 2);
    snapprof__pprof__profile__free_unpacked(p, NULL);
    /* The flags say which mappings we symbolized (pprof's own symbolizer
     * sets them when any location got a name): with them all false
     * because one address had no symbol, pprof re-symbolized the
     * executable from disk and replaced every name with its own, which
     * were empty for python's libpython3.11.so. */
    char args[1200];
    snprintf(args, sizeof args, "-raw '%s'", path);
    int st;
    char *raw = tu_pprof(args, &st);
    ASSERT_EQ(st, 0);
    ASSERT_CONTAINS(raw, " sym_plain ");
    ASSERT_CONTAINS(raw, " sym_with_inline ");
    free(raw);
    pbt_remove(path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"file_line", test_file_line},
        {"inline_frames", test_inline_frames},
        {"demangle", test_demangle},
        {"debuglink", test_debuglink},
        {"build_id_dir", test_build_id_dir},
        {"elf_fallback", test_elf_fallback},
        {"system_debug", test_system_debug},
        {"mapping_flags", test_mapping_flags},
        {"lines_own_debuglink", test_lines_own_debuglink},
        {"lines_own_keeps_own", test_lines_own_keeps_own},
        {"lines_program_debuglink", test_lines_program_debuglink},
        {"lines_program_system_dirs", test_lines_program_system_dirs},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
