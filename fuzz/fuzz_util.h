/* Shared by the libFuzzer harnesses: a check that turns a broken promise
 * into a crash libFuzzer records (with its input), and a reader of the
 * fuzzer's bytes. */
#ifndef SNAPPROF_FUZZ_UTIL_H
#define SNAPPROF_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

/* libFuzzer's entry points. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(expr)                                                                           \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Where harnesses keep their scratch files: tmpfs when there is one, for
 * the library fsyncs what it writes (profiles are written atomically) and
 * a disk's fsync costs more than the code under test. */
static inline const char *fuzz_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    if (t != NULL && t[0] == '/')
        return t;
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static inline int fuzz_rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

/* Makes a fresh scratch directory named after tag into dir (size bytes)
 * and removes it, with what is left in it, when the process exits. */
static char g_fuzz_scratch[512];
static inline void fuzz_rm_scratch(void)
{
    nftw(g_fuzz_scratch, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
static inline void fuzz_scratch_dir(const char *tag, char *dir, size_t size)
{
    snprintf(dir, size, "%s/%s.XXXXXX", fuzz_tmpdir(), tag);
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        abort();
    }
    snprintf(g_fuzz_scratch, sizeof g_fuzz_scratch, "%s", dir);
    atexit(fuzz_rm_scratch);
}

/* Writes size bytes of data to path, opened with O_WRONLY | O_CREAT | flags
 * (O_TRUNC or O_APPEND), mode 0600; any failure is a crash. */
static inline void fuzz_write_file(const char *path, int flags, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0600);
    FUZZ_CHECK(fd >= 0);
    while (size > 0) {
        ssize_t w = write(fd, data, size);
        FUZZ_CHECK(w > 0);
        data += w;
        size -= (size_t)w;
    }
    FUZZ_CHECK(close(fd) == 0);
}

/* The input, consumed from the front; reads past its end give zeros. */
typedef struct fuzz_in {
    const uint8_t *p;
    size_t n;
} fuzz_in_t;

static inline uint8_t fuzz_u8(fuzz_in_t *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint64_t fuzz_u64(fuzz_in_t *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)fuzz_u8(in) << (8 * i);
    return v;
}

/* A NUL-terminated string of the next bytes up to a NUL (or the end),
 * malloc'd so that ASan sees reads past it. */
static inline char *fuzz_str(fuzz_in_t *in)
{
    const uint8_t *nul = memchr(in->p, 0, in->n);
    size_t len = nul ? (size_t)(nul - in->p) : in->n;
    char *s = malloc(len + 1);
    if (s == NULL)
        abort();
    memcpy(s, in->p, len);
    s[len] = '\0';
    in->p += len + (nul != NULL);
    in->n -= len + (nul != NULL);
    return s;
}

#endif
