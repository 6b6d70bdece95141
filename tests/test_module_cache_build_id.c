/* module_cache_build_id: build-ids read from memory match `readelf -n`. */
#include "test.h"
#include "test_util.h"
#include "module_cache/module_cache.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The "Build ID:" that readelf prints for path, or "" (malloc'd). */
static char *readelf_build_id(const char *path)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "LC_ALL=C readelf -n '%s'", path);
    int status = 0;
    char *out = tu_run(cmd, &status);
    if (status != 0)
        TEST_FAIL("%s failed (%d):\n%s", cmd, status, out);
    char *id = calloc(1, 256);
    ASSERT_NOT_NULL(id);
    const char *p = strstr(out, "Build ID:");
    if (p != NULL)
        sscanf(p + strlen("Build ID:"), " %255[0-9a-fA-F]", id);
    free(out);
    return id;
}

static void check(const snapprof_module_t *m)
{
    ASSERT_NOT_NULL(m);
    char *want = readelf_build_id(m->path);
    printf("%s: cache %s, readelf %s\n", m->path, m->build_id, want);
    ASSERT_GT(strlen(want), 0);
    ASSERT_STR_EQ(m->build_id, want);
    free(want);
}

static void test_build_id(void)
{
    int status = 0;
    free(tu_run("readelf --version", &status));
    if (status != 0) {
        printf("skipped: readelf (binutils) is not installed\n");
        exit(TEST_SKIP);
    }
    check(snapprof__module_cache_main());
    /* libc, found through one of its functions. */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NOT_NULL(libc);
    void *fn = dlsym(libc, "qsort");
    ASSERT_NOT_NULL(fn);
    check(snapprof_module_find((uintptr_t)fn));
    dlclose(libc);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"build_id", test_build_id},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
