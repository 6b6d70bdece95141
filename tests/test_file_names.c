/* The names of the files a run writes (preload/file_names.c): one scheme,
 * BASE[.KIND][.INTERVAL][.PID]EXT, for the program's own files, those of
 * other processes, the kinds and intervals still to come, and the
 * fallbacks. */
#include "preload/file_names.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

static const char *name(const char *asked, const char *kind, const char *interval, int pid)
{
    static char out[4][512];
    static int i;
    char *p = out[i++ % 4];
    ASSERT_EQ(snapprof__name_file(asked, kind, interval, pid, p, sizeof out[0]), 0);
    return p;
}

/* The program's own file is the name asked for, unchanged. */
static void test_own_file(void)
{
    ASSERT_STR_EQ(name("/d/prof.pb.gz", NULL, NULL, 0), "/d/prof.pb.gz");
    ASSERT_STR_EQ(name("/d/prof.folded", "", "", 0), "/d/prof.folded");
    ASSERT_STR_EQ(name("/d/prof", NULL, NULL, 0), "/d/prof");
}

/* Another process's file: the pid before the format's extension, which
 * stays last (tools and snapprof itself know the format by it); a name
 * without one (gperftools' CPUPROFILE=/tmp/prof) gets the pid at the end,
 * as before. */
static void test_pid_file(void)
{
    ASSERT_STR_EQ(name("/d/prof.pb.gz", NULL, NULL, 1234), "/d/prof.1234.pb.gz");
    ASSERT_STR_EQ(name("/d/prof.PB.GZ", NULL, NULL, 1234), "/d/prof.1234.PB.GZ");
    ASSERT_STR_EQ(name("/d/prof.folded", NULL, NULL, 7), "/d/prof.7.folded");
    ASSERT_STR_EQ(name("/d/prof.txt", NULL, NULL, 7), "/d/prof.7.txt");
    ASSERT_STR_EQ(name("/d/prof.json", NULL, NULL, 7), "/d/prof.7.json");
    ASSERT_STR_EQ(name("/d/out.prof", NULL, NULL, 7), "/d/out.7.prof");
    ASSERT_STR_EQ(name("/d/prof", NULL, NULL, 7), "/d/prof.7");
    ASSERT_STR_EQ(name("/d/a.b.c", NULL, NULL, 7), "/d/a.b.c.7");
}

/* Kinds and intervals (heap profiles, periodic profiles) take their
 * places between BASE and PID. */
static void test_kind_interval(void)
{
    ASSERT_STR_EQ(name("/d/prof.pb.gz", "heap", NULL, 0), "/d/prof.heap.pb.gz");
    ASSERT_STR_EQ(name("/d/prof.pb.gz", NULL, "20261127T153200Z", 0),
                  "/d/prof.20261127T153200Z.pb.gz");
    ASSERT_STR_EQ(name("/d/prof.pb.gz", "heap", "20261127T153200Z", 42),
                  "/d/prof.heap.20261127T153200Z.42.pb.gz");
}

/* The heap profiles' family beside any output (pprof whatever the CPU
 * profile's format), and a child's name made from it: BASE.KIND.PID EXT. */
static void test_kind_family(void)
{
    char fam[256];
    ASSERT_EQ(snapprof__name_kind_family("/d/prof.folded", "heap", ".pb.gz", fam, sizeof fam), 0);
    ASSERT_STR_EQ(fam, "/d/prof.heap.pb.gz");
    ASSERT_EQ(snapprof__name_kind_family("/d/prof", "heappeak", ".pb.gz", fam, sizeof fam), 0);
    ASSERT_STR_EQ(fam, "/d/prof.heappeak.pb.gz");
    ASSERT_EQ(snapprof__name_kind_family("/d/prof.pb.gz", "heap", ".pb.gz", fam, sizeof fam), 0);
    ASSERT_STR_EQ(name(fam, NULL, NULL, 42), "/d/prof.heap.42.pb.gz");
    char small[12];
    ASSERT_EQ(snapprof__name_kind_family("/d/prof.pb.gz", "heap", ".pb.gz", small, sizeof small),
              -1);
}

static void test_too_long(void)
{
    char out[16];
    ASSERT_EQ(snapprof__name_file("/d/prof.pb.gz", NULL, NULL, 123456, out, sizeof out), -1);
    ASSERT_EQ(snapprof__name_file("/d/p.pb.gz", NULL, NULL, 1, out, sizeof out), 0);
}

static void test_fallback(void)
{
    char out[256];
    ASSERT_EQ(snapprof__name_fallback("/tmp", 0, 1, ".pb.gz", 99, out, sizeof out), 0);
    ASSERT_STR_EQ(out, "/tmp/snapprof.99.pb.gz");
    ASSERT_EQ(snapprof__name_fallback("/tmp", 1, 2, ".pb.gz", 99, out, sizeof out), 0);
    ASSERT_STR_EQ(out, "/tmp/snapprof-1.99.pb.gz");
    ASSERT_EQ(snapprof__name_fallback("/var/tmp", 2, 3, ".folded", 5, out, sizeof out), 0);
    ASSERT_STR_EQ(out, "/var/tmp/snapprof-2.5.folded");
}

/* What `record` names with a pattern: the files of other processes of
 * one output, never the program's own, another kind's or another
 * output's. */
static void test_pid_files(void)
{
    const char *asked = "/d/m.pb.gz";
    ASSERT_EQ(snapprof__name_is_pid_file(asked, "/d/m.123.pb.gz"), 1);
    ASSERT_EQ(snapprof__name_is_pid_file(asked, "/d/m.pb.gz"), 0);
    ASSERT_EQ(snapprof__name_is_pid_file(asked, "/d/m..pb.gz"), 0);
    ASSERT_EQ(snapprof__name_is_pid_file(asked, "/d/m.heap.123.pb.gz"), 0);
    ASSERT_EQ(snapprof__name_is_pid_file(asked, "/d/m.123.folded"), 0);
    ASSERT_EQ(snapprof__name_is_pid_file(asked, "/d/mm.123.pb.gz"), 0);
    ASSERT_EQ(snapprof__name_is_pid_file("/d/prof", "/d/prof.77"), 1);
    char glob[256];
    ASSERT_EQ(snapprof__name_pid_glob(asked, glob, sizeof glob), 0);
    ASSERT_STR_EQ(glob, "'/d/m'.[0-9]*'.pb.gz'");
    ASSERT_EQ(snapprof__name_pid_glob("/d/prof", glob, sizeof glob), 0);
    ASSERT_STR_EQ(glob, "'/d/prof'.[0-9]*");
}

static void test_record_files(void)
{
    char out[256];
    ASSERT_EQ(
        snapprof__name_record_file("/tmp/r", 12, SNAPPROF__RECORD_SUMMARY_EXT, out, sizeof out), 0);
    ASSERT_STR_EQ(out, "/tmp/r/12.summary");
    ASSERT_EQ(snapprof__name_record_file("/tmp/r", 12, SNAPPROF__RECORD_CRASH_EXT, out, sizeof out),
              0);
    ASSERT_STR_EQ(out, "/tmp/r/12.crash");
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"own_file", test_own_file},           {"pid_file", test_pid_file},
        {"kind_interval", test_kind_interval}, {"kind_family", test_kind_family},
        {"too_long", test_too_long},           {"fallback", test_fallback},
        {"pid_files", test_pid_files},         {"record_files", test_record_files},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
