/* python/python_capture.c's checked read of code objects
 * (snapprof__py_read_codes) on our own memory, no interpreter needed: code
 * objects close together are read as merged ranges with the bytes between
 * them dropped, and a range that runs into memory that cannot be read
 * loses only what cannot be read. */
#include "python/python_internal.h"
#include "test.h"
#include "test_util.h"

#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SPAN 128
#define OFF 8 /* 3.11's code_type: the read starts 8 bytes into the object */

/* Three pages, the middle one not readable; every byte of the others
 * holds its offset's low byte mixed with its page, so a copy from the
 * wrong place shows. */
static uint8_t *three_pages(void)
{
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *m =
        mmap(NULL, 3 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(m != MAP_FAILED);
    for (long i = 0; i < 3 * page; i++)
        m[i] = (uint8_t)(i * 7 + i / page);
    ASSERT_EQ(mprotect(m + page, (size_t)page, PROT_NONE), 0);
    atomic_store(&snapprof__py.pid, getpid());
    return m;
}

/* Dense code objects, 224 bytes apart as 3.11's pymalloc blocks are, and
 * one far off, met in an order that is not the addresses': each f[k] is
 * the span at its own code object. Catches a sink or offset sum that
 * shifts what lands in f[k] when ranges are merged. */
static void test_merged_ranges(void)
{
    uint8_t *m = three_pages();
    long page = sysconf(_SC_PAGESIZE);
    static snapprof__py_scratch_t s;
    memset(&s, 0, sizeof s);
    size_t n = 0;
    for (int i = 10; i >= 0; i--)
        s.codes[n++] = (uintptr_t)m + 64 + 224 * (uintptr_t)i;
    s.codes[n++] = (uintptr_t)m + 2 * (uintptr_t)page + 512;
    snapprof__py_read_codes(&s, n, OFF, SPAN);
    for (size_t k = 0; k < n; k++) {
        ASSERT_EQ(s.ok[k], 1);
        ASSERT(memcmp(s.fields[k], (const void *)(s.codes[k] + OFF), SPAN) == 0);
    }
    munmap(m, 3 * (size_t)page);
}

/* A code pointer whose span runs into the unreadable page, merged with a
 * readable one before it, and a readable one in another range after it
 * that the walk met first: only the unreadable one fails. Catches a read
 * that stops at the hole and drops the code objects after it (the walk
 * would end at a frame that was readable). */
static void test_hole_loses_only_unreadable(void)
{
    uint8_t *m = three_pages();
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t far = (uintptr_t)m + 2 * (uintptr_t)page + 200;
    uintptr_t before = (uintptr_t)m + (uintptr_t)page - 300;
    uintptr_t bad = (uintptr_t)m + (uintptr_t)page - 60; /* runs into the hole */
    static snapprof__py_scratch_t s;
    s.codes[0] = far;
    s.codes[1] = bad;
    s.codes[2] = before;
    snapprof__py_read_codes(&s, 3, OFF, SPAN);
    ASSERT_EQ(s.ok[0], 1);
    ASSERT_EQ(s.ok[1], 0);
    ASSERT_EQ(s.ok[2], 1);
    ASSERT(memcmp(s.fields[0], (const void *)(far + OFF), SPAN) == 0);
    ASSERT(memcmp(s.fields[2], (const void *)(before + OFF), SPAN) == 0);
    /* Inside the hole itself, and a null one: nothing read, no fault. */
    s.codes[0] = (uintptr_t)m + (uintptr_t)page + 64;
    s.codes[1] = 0;
    s.codes[2] = far;
    snapprof__py_read_codes(&s, 3, OFF, SPAN);
    ASSERT_EQ(s.ok[0], 0);
    ASSERT_EQ(s.ok[1], 0);
    munmap(m, 3 * (size_t)page);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"merged_ranges", test_merged_ranges},
        {"hole_loses_only_unreadable", test_hole_loses_only_unreadable},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
