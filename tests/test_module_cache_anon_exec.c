/* module_cache_anon_exec: executable memory the loader does not know
 * (anonymous JIT-style memory, a memfd) becomes an ANON module, misses
 * re-read /proc/self/maps at most every 100 ms, and an unmapped region's
 * entry is kept but marked unloaded. */
#include "test.h"
#include "test_util.h"
#include "module_cache/module_cache.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_anon_exec(void)
{
    long page = sysconf(_SC_PAGESIZE);
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);

    uint64_t t0 = tu_mono_ns();
    char *anon =
        mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(anon != MAP_FAILED);
    /* Right after a refresh, with no library loaded since, a miss does not
     * read /proc/self/maps again. Only checked when this thread was not
     * held up for most of the interval. */
    const snapprof_module_t *m = snapprof_module_find((uintptr_t)anon + 10);
    if (tu_mono_ns() - t0 < 50ull * 1000 * 1000)
        ASSERT_NULL(m);
    /* Later, the miss rescans and finds it. */
    sleep_ms(120);
    m = snapprof_module_find((uintptr_t)anon + 10);
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(m->kind, SNAPPROF_MODULE_ANON);
    ASSERT_STR_EQ(m->path, "[anon]");
    ASSERT_STR_EQ(m->build_id, "");
    ASSERT_EQ(m->is_main_executable, 0);
    ASSERT(m->start <= (uintptr_t)anon && (uintptr_t)anon + 2 * page <= m->limit);
    snapprof_frame_t frame = {.pc = (uintptr_t)anon + 10, .module = m};
    snapprof_symbol_t sym;
    ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 0);

    /* A memfd mapped executable: named after the memfd. */
    int fd = memfd_create("mc-jit", 0);
    ASSERT(fd >= 0);
    ASSERT_EQ(ftruncate(fd, page), 0);
    char *mem = mmap(NULL, (size_t)page, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
    ASSERT(mem != MAP_FAILED);
    close(fd);
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    const snapprof_module_t *mm = snapprof_module_find((uintptr_t)mem);
    ASSERT_NOT_NULL(mm);
    printf("memfd module: %s\n", mm->path);
    ASSERT_EQ(mm->kind, SNAPPROF_MODULE_ANON);
    ASSERT_CONTAINS(mm->path, "memfd:mc-jit");
    ASSERT_UEQ(mm->file_offset, 0);

    /* Unmapped: the entry stays valid and is marked unloaded. */
    ASSERT_EQ(munmap(anon, 2 * (size_t)page), 0);
    ASSERT_EQ(munmap(mem, (size_t)page), 0);
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    ASSERT_EQ(m->is_loaded, 0);
    ASSERT_EQ(mm->is_loaded, 0);
    ASSERT_STR_EQ(m->path, "[anon]");
    const snapprof_module_t *again = snapprof_module_find((uintptr_t)anon + 10);
    ASSERT(again == NULL || again != m);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"anon_exec", test_anon_exec},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
