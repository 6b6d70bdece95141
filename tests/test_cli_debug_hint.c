/* What `snapprof record` says of a module without names
 * (cli/debug_hint.c): the table of Debian 12 -dbg packages, the sentence
 * for a package without one, and the dpkg lookup. */
#include "cli/debug_hint.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_python(void)
{
    char hint[512];
    ASSERT_STR_EQ(snapprof__debug_package("python3.11-minimal"), "python3.11-dbg");
    ASSERT_STR_EQ(snapprof__debug_package("python3.11"), "python3.11-dbg");
    snapprof__debug_hint("python3.11-minimal", hint, sizeof hint);
    printf("%s\n", hint);
    ASSERT_CONTAINS(hint, "apt-get install python3.11-dbg");
    ASSERT_CONTAINS(hint, "same version");
}

static void test_libc(void)
{
    char hint[512];
    snapprof__debug_hint("libc6", hint, sizeof hint);
    printf("%s\n", hint);
    ASSERT_CONTAINS(hint, "apt-get install libc6-dbg");
}

/* The others have no -dbg in Debian 12 main: no command that would
 * fail, the -dbgsym package and where it is instead. */
static void test_dbgsym_only(void)
{
    const char *pkgs[] = {"liblzma5", "libsqlite3-0", "perl-base", "perl", "bash"};
    for (size_t i = 0; i < sizeof pkgs / sizeof pkgs[0]; i++) {
        char hint[512], want[64];
        ASSERT_NULL(snapprof__debug_package(pkgs[i]));
        snapprof__debug_hint(pkgs[i], hint, sizeof hint);
        printf("%s\n", hint);
        snprintf(want, sizeof want, "(%s-dbgsym)", pkgs[i]);
        ASSERT_CONTAINS(hint, want);
        ASSERT_CONTAINS(hint, "debug archive");
        if (strstr(hint, "apt-get"))
            TEST_FAIL("a command for %s: %s", pkgs[i], hint);
    }
}

static void need_dpkg(void)
{
    if (system("dpkg --version >/dev/null 2>&1") != 0) {
        printf("skipped: no dpkg here\n");
        exit(TEST_SKIP);
    }
}

/* A file of our own belongs to no package; dpkg's own binary to dpkg,
 * also by its /usr path on a merged-/usr system. */
static void test_dpkg_owner(void)
{
    need_dpkg();
    char pkg[128] = "";
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT_GT(n, 0);
    self[n] = '\0';
    ASSERT_EQ(snapprof__dpkg_owner(self, NULL, 10000, pkg, sizeof pkg), 0);
    if (access("/usr/bin/dpkg", X_OK) == 0) {
        ASSERT_EQ(snapprof__dpkg_owner("/usr/bin/dpkg", NULL, 10000, pkg, sizeof pkg), 1);
        ASSERT_STR_EQ(pkg, "dpkg");
    }
    /* libc, where the loader maps it from /usr/lib but dpkg lists /lib. */
    const char *libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    if (access(libc, R_OK) == 0) {
        ASSERT_EQ(snapprof__dpkg_owner(libc, NULL, 10000, pkg, sizeof pkg), 1);
        ASSERT_STR_EQ(pkg, "libc6");
    }
}

/* dpkg that is not there: "cannot say", not "no package". */
static void test_dpkg_absent(void)
{
    char pkg[128];
    setenv("PATH", "/nonexistent", 1);
    ASSERT_EQ(snapprof__dpkg_owner("/usr/bin/dpkg", NULL, 10000, pkg, sizeof pkg), -1);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"python", test_python},           {"libc", test_libc},
        {"dbgsym_only", test_dbgsym_only}, {"dpkg_owner", test_dpkg_owner},
        {"dpkg_absent", test_dpkg_absent},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
