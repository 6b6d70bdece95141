/* A main() for a harness built without libFuzzer: runs
 * LLVMFuzzerTestOneInput() once on each file named on the command line (a
 * directory: on each file in it). The ctest suites (plain, ASan+UBSan, TSan,
 * built with gcc) replay the seed corpora and every input that once
 * crashed a harness through it, so those stay fixed in every build. */
#include "fuzz_util.h"

#include <dirent.h>
#include <sys/stat.h>

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    FUZZ_CHECK(buf != NULL);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            FUZZ_CHECK(buf != NULL);
        }
    }
    fclose(f);
    /* Exactly the input's size, as libFuzzer hands it over. */
    uint8_t *data = malloc(n ? n : 1);
    FUZZ_CHECK(data != NULL);
    memcpy(data, buf, n);
    free(buf);
    printf("%s: %zu bytes\n", path, n);
    LLVMFuzzerTestOneInput(data, n);
    free(data);
    return 0;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "cannot stat %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i]) != 0)
                return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        FUZZ_CHECK(d != NULL);
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (replay_file(path) != 0)
                return 1;
            files++;
        }
        closedir(d);
    }
    printf("replayed %d inputs\n", files);
    return files > 0 ? 0 : 1;
}
