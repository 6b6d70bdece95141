/* profile_builder_pprof_write_failure: a failed write returns -errno and leaves no temp file. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Number of entries in dir other than . and .. */
static void test_write_failure(void)
{
    char *dir = tu_make_tmpdir("pb-writefail");
    size_t len = strlen(dir) + 32;
    char *path = malloc(len);
    ASSERT_NOT_NULL(path);
    snprintf(path, len, "%s/p.pb.gz", dir);

    snapprof_builder_t *b = pbt_create(path);
    snapprof_frame_t frames[] = {{0, NULL, SNAPPROF_FRAME_MARKER, "kept_leaf"},
                                 {0, NULL, SNAPPROF_FRAME_MARKER, "kept_root"}};
    pbt_feed(b, frames, 2, 9, "w", NULL, 0, 1000, 2000, 7);

    /* A directory sits where the file should go: rename() fails after the
     * temporary file was written, which must then be removed. */
    ASSERT_OK(mkdir(path, 0755));
    ASSERT_EQ(pbt_complete(b, SNAPPROF_MODE_CPU, NULL), -EISDIR);
    ASSERT_EQ(tu_count_entries(dir), 1);
    ASSERT_EQ(tu_count_entries(path), 0);

    /* The directory vanished after create: the temporary file cannot even
     * be made. */
    ASSERT_OK(rmdir(path));
    ASSERT_OK(rmdir(dir));
    ASSERT_EQ(pbt_complete(b, SNAPPROF_MODE_CPU, NULL), -ENOENT);

    /* The builder kept everything: once the problem is gone, completing
     * again writes the whole profile. */
    ASSERT_OK(mkdir(dir, 0755));
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    ASSERT_EQ(tu_count_entries(dir), 1);
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    ASSERT_EQ(p->n_sample, 1);
    ASSERT_EQ(p->sample[0]->value[0], 7);
    ASSERT_EQ(p->sample[0]->value[1], 7000);
    ASSERT_EQ(p->sample[0]->n_value, 2); /* a CPU profile: no wall value */
    ASSERT_STR_EQ(pbt_location_name(p, p->sample[0]->location_id[0]), "kept_leaf");
    snapprof__pprof__profile__free_unpacked(p, NULL);

    pbt_remove(path); /* and dir */
    free(dir);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"write_failure", test_write_failure},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
