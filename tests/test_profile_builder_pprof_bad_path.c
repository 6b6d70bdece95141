/* profile_builder_pprof_bad_path: bad paths fail at create; a symlink is replaced, not followed. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int create_error(const char *path)
{
    static snapprof_builder_t dummy;
    snapprof_builder_t *b = &dummy; /* a failed create must reset it to NULL */
    int err = snapprof_pprof_builder_create(path, &b);
    ASSERT_NULL(b);
    return err;
}

static void feed_one(snapprof_builder_t *b)
{
    snapprof_frame_t f = {0, NULL, SNAPPROF_FRAME_MARKER, "[unknown]"};
    snapprof_sample_t s = {
        .frames = &f, .frame_count = 1, .cpu_ns = 1, .wall_ns = 1, .tid = 1, .thread_name = "t"};
    pbt_sample(b, &s);
}

static char *join(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    ASSERT_NOT_NULL(p);
    snprintf(p, len, "%s/%s", dir, name);
    return p;
}

/* Number of entries in dir other than . and .. */
static void write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void check_readable_by_pprof(const char *path)
{
    char *out = tu_pprof_ok("-top", path);
    ASSERT_CONTAINS(out, "[unknown]");
    free(out);
}

static void test_bad_path(void)
{
    /* Arguments that cannot name a file. */
    ASSERT_EQ(create_error(NULL), -EINVAL);
    ASSERT_EQ(create_error(""), -EINVAL);
    ASSERT_EQ(snapprof_pprof_builder_create("/tmp/x.pb.gz", NULL), -EINVAL);
    char *dir = tu_make_tmpdir("pb-badpath");
    char *slash = join(dir, "");
    ASSERT_EQ(create_error(slash), -EISDIR);
    free(slash);
    /* A path that names an existing directory fails at create, not at the
     * write after a whole run's samples were collected. */
    ASSERT_EQ(create_error(dir), -EISDIR);
    char *sub = join(dir, "sub");
    ASSERT_OK(mkdir(sub, 0755));
    ASSERT_EQ(create_error(sub), -EISDIR);
    ASSERT_OK(rmdir(sub));
    free(sub);

    /* The directory must exist, be a directory, and be writable. */
    ASSERT_EQ(create_error("/nonexistent-snapprof-dir/sub/x.pb.gz"), -ENOENT);
    ASSERT_EQ(create_error("/etc/passwd/x.pb.gz"), -ENOTDIR);
    if (geteuid() != 0) {
        char *ro = join(dir, "readonly");
        ASSERT_OK(mkdir(ro, 0555));
        char *in_ro = join(ro, "x.pb.gz");
        ASSERT_EQ(create_error(in_ro), -EACCES);
        free(in_ro);
        rmdir(ro);
        free(ro);
    } else {
        printf("note: running as root; permission bits do not stop root, checked /proc instead\n");
    }
    /* /proc takes no new files, even from root: the failure comes at create
     * or, when root passes the access() check, at write time. Either way it
     * is a negative errno and no file appears. */
    snapprof_builder_t *b = NULL;
    int err = snapprof_pprof_builder_create("/proc/snapprof-test.pb.gz", &b);
    if (err == 0) {
        feed_one(b);
        err = pbt_complete(b, SNAPPROF_MODE_CPU, NULL);
        snapprof_builder_destroy(b);
    }
    ASSERT_LT(err, 0);
    ASSERT_NE(access("/proc/snapprof-test.pb.gz", F_OK), 0);

    /* A relative path is resolved against the working directory of the
     * create call, and later chdir() does not move the output. */
    char *cwd = getcwd(NULL, 0);
    ASSERT_NOT_NULL(cwd);
    ASSERT_OK(chdir(dir));
    b = pbt_create("relative.pb.gz");
    ASSERT_OK(chdir("/"));
    feed_one(b);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    ASSERT_OK(chdir(cwd));
    free(cwd);
    char *relative = join(dir, "relative.pb.gz");
    check_readable_by_pprof(relative);
    ASSERT_OK(unlink(relative));
    free(relative);

    /* A symlink at the destination is replaced by the profile; the file it
     * pointed to is left alone. */
    char *target = join(dir, "target.txt");
    char *link = join(dir, "out.pb.gz");
    write_text(target, "keep me\n");
    ASSERT_OK(symlink(target, link));
    mode_t old_mask = umask(027);
    b = pbt_create(link);
    feed_one(b);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    umask(old_mask);
    struct stat st;
    ASSERT_OK(lstat(link, &st));
    ASSERT(S_ISREG(st.st_mode));
    /* The mode an ordinary creat(0644) would get under that umask. */
    ASSERT_EQ(st.st_mode & 07777, 0640);
    char buf[64] = {0};
    int fd = open(target, O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(read(fd, buf, sizeof buf - 1), 8);
    close(fd);
    ASSERT_STR_EQ(buf, "keep me\n");
    check_readable_by_pprof(link);

    /* An existing profile is replaced whole; no temporary file stays. */
    b = pbt_create(link);
    feed_one(b);
    feed_one(b);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    Snapprof__Pprof__Profile *p = pbt_load(link);
    pbt_check_valid(p);
    ASSERT_EQ(p->n_sample, 1);
    ASSERT_EQ(p->sample[0]->value[0], 2);
    snapprof__pprof__profile__free_unpacked(p, NULL);
    ASSERT_EQ(tu_count_entries(dir), 2); /* target.txt and out.pb.gz */

    unlink(link);
    unlink(target);
    rmdir(dir);
    free(link);
    free(target);
    free(dir);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"bad_path", test_bad_path},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
