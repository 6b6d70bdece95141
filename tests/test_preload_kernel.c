/* Kernel time and privileges under `snapprof record` (kernel_prog.c):
 * workers that setuid() to nobody still get their profiles and summaries
 * where they were asked for. Judged on files and sample counts, never on
 * wall time. */
#include "test_preload_util.h"

#include <sys/stat.h>
#include <unistd.h>

#define CLI SNAPPROF_CLI
#define PROG KERNEL_PROG

static char g_dir[512];

static void setup(const char *tag)
{
    char *d = tu_make_tmpdir(tag);
    snprintf(g_dir, sizeof g_dir, "%s", d);
    free(d);
}

/* A server's workers drop to another user after fork() (nginx's to
 * www-data): in a root-owned 0755 directory they can no longer create
 * files. Each worker's profile is there all the same, at FILE.<pid>, and
 * the summary lists it; nothing is left in the fallback directory. */
static void test_drop_privileges(void)
{
    pl_skip_if_sanitized();
    if (geteuid() != 0) {
        printf("skipped: needs root (the workers setuid() to nobody)\n");
        exit(TEST_SKIP);
    }
    setup("kern-drop");
    ASSERT_EQ(chmod(g_dir, 0755), 0);
    char *fallback = tu_make_tmpdir("kern-drop-tmp");
    ASSERT_EQ(chmod(fallback, 01777), 0);
    int st;
    char *text =
        pl_run(&st, "cd %s && TMPDIR=%s %s record -F 1000 -o d.pb.gz -- %s dropworkers 300", g_dir,
               fallback, CLI, PROG);
    if (st != 0)
        TEST_FAIL("status %d:\n%s", st, text);
    int w[2];
    const char *c = strstr(text, "workers ");
    ASSERT_NOT_NULL(c);
    ASSERT_EQ(sscanf(c, "workers %d %d", &w[0], &w[1]), 2);
    ASSERT_CONTAINS(text, "3 processes");
    for (int i = 0; i < 2; i++) {
        char p[1024], line[1200];
        snprintf(p, sizeof p, "%s/d.pb.gz.%d", g_dir, w[i]);
        if (!pl_exists(p))
            TEST_FAIL("no profile %s:\n%s", p, text);
        snprintf(line, sizeof line, "(pid %d): ", w[i]);
        ASSERT_CONTAINS(text, line);
        snprintf(line, sizeof line, "-> %s\n", p);
        ASSERT_CONTAINS(text, line);
        pl_require_under(p, "user_heavy", 1);
        pl_require_under(p, "sys_heavy", 1);
    }
    ASSERT_EQ(pl_count_prefix(fallback, "snapprof."), 0);
    free(fallback);
    free(text);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"drop_privileges", test_drop_privileges},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
