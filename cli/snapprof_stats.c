/* `snapprof stats FILE`: prints what a snapprof pprof profile says about
 * its own run: its comment lines, then every counter from its hidden stats
 * entry (profile_builder/stats_text.h), one "key value" line each, read
 * with the same table that wrote them. */
#include "cli/cli.h"
#include "profile_builder/stats_text.h"

#include "profile.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define EXIT_NO_STATS 1

const char snapprof__stats_usage[] =
    "usage: snapprof stats FILE\n"
    "\n"
    "Prints what a pprof profile written by snapprof says about its run: its\n"
    "comments as '# ' lines, then every counter (the fields of snapprof_stats_t),\n"
    "one 'key value' line each. FILE may be gzip-compressed or not.\n"
    "\n"
    "Exit status: 0; 1 when the profile carries no counters (not written by\n"
    "snapprof, or rewritten by pprof, as -proto does when it merges: pprof keeps\n"
    "only the comments); 2 when FILE cannot be read as a profile.\n";

static int fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("snapprof: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return status;
}

/* Reads the whole file, inflating it when it is gzip-compressed (zlib
 * reads other files as they are). Returns 0, or -1 with a reason. */
static int read_profile(const char *path, uint8_t **out, size_t *out_len, char *why,
                        size_t why_size)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_size, "%s", strerror(errno));
        return -1;
    }
    gzFile gz = gzdopen(fd, "rb");
    if (gz == NULL) {
        close(fd);
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    int n = 0;
    while (buf != NULL) {
        if (cap - len < (1 << 15)) {
            uint8_t *more = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (more == NULL)
                break;
            buf = more;
            cap *= 2;
        }
        n = gzread(gz, buf + len, (unsigned)(cap - len));
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    int errnum = Z_OK;
    const char *zmsg = buf == NULL || n > 0 ? "out of memory" : n < 0 ? gzerror(gz, &errnum) : NULL;
    if (zmsg != NULL)
        snprintf(why, why_size, "%s", errnum == Z_ERRNO ? strerror(errno) : zmsg);
    /* A gzip stream that ends early reads as far as it goes; closing says
     * so. */
    int close_rc = gzclose_r(gz);
    if (zmsg == NULL && close_rc == Z_BUF_ERROR) {
        zmsg = "the gzip stream is cut short";
        snprintf(why, why_size, "%s", zmsg);
    }
    if (zmsg != NULL) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

static int print_pair(void *arg, const char *key, const char *value)
{
    (void)arg;
    return printf("%s %s\n", key, value) < 0;
}

int snapprof__cli_stats(int argc, char **argv)
{
    if (argc >= 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        fputs(snapprof__stats_usage, stdout);
        return 0;
    }
    if (argc != 1 || argv[0][0] == '\0' || (argv[0][0] == '-' && argv[0][1] != '\0'))
        return fail(SNAPPROF_EXIT_USAGE, "%s (snapprof stats FILE; see snapprof stats --help)",
                    argc == 0 ? "no profile to read" : "stats takes one profile");
    const char *path = argv[0];
    uint8_t *data;
    size_t len;
    char why[256];
    if (read_profile(path, &data, &len, why, sizeof why) != 0)
        return fail(SNAPPROF_EXIT_USAGE, "cannot read %s: %s", path, why);
    Perftools__Profiles__Profile *p = perftools__profiles__profile__unpack(NULL, len, data);
    free(data);
    /* An empty or foreign file can decode as an empty message: a profile
     * has a string table that starts with "". */
    if (p == NULL || p->n_string_table == 0 || p->string_table[0][0] != '\0') {
        if (p != NULL)
            perftools__profiles__profile__free_unpacked(p, NULL);
        return fail(SNAPPROF_EXIT_USAGE, "%s is not a pprof profile", path);
    }
    int status = 0;
    const char *entry = NULL;
    for (size_t i = 0; i < p->n_comment; i++) {
        if (p->comment[i] < 0 || (uint64_t)p->comment[i] >= p->n_string_table) {
            status = fail(SNAPPROF_EXIT_USAGE,
                          "%s is not a valid pprof profile (comment %zu "
                          "names no string)",
                          path, i);
            goto out;
        }
    }
    for (size_t i = 0; i < p->n_comment; i++)
        printf("# %s\n", p->string_table[p->comment[i]]);
    /* Ours is the last one; a symbol could look like one too. */
    for (size_t i = p->n_string_table; i-- > 0 && entry == NULL;)
        if (snapprof__stats_is_entry(p->string_table[i]))
            entry = p->string_table[i];
    if (entry == NULL) {
        fflush(stdout);
        status = fail(EXIT_NO_STATS,
                      "%s carries no snapprof counters (not written by snapprof, or rewritten "
                      "by pprof, which keeps only the comments)",
                      path);
        goto out;
    }
    snapprof_stats_t st;
    int rc = snapprof__stats_decode(entry, &st, NULL, NULL);
    if (rc == -EPROTONOSUPPORT) {
        status = fail(SNAPPROF_EXIT_USAGE,
                      "%s: its counters are in a format newer than this snapprof reads "
                      "(%.*s; this one reads %s%d)",
                      path, (int)strcspn(entry, " "), entry, SNAPPROF__STATS_PREFIX,
                      SNAPPROF__STATS_VERSION);
        goto out;
    }
    if (rc != 0) {
        status = fail(SNAPPROF_EXIT_USAGE, "%s: its snapprof counters are malformed", path);
        goto out;
    }
    snapprof__stats_for_each(&st, print_pair, NULL);
    /* Counters of a newer snapprof that this one has no field for. */
    snapprof__stats_decode(entry, &st, print_pair, NULL);
    if (fflush(stdout) != 0 || ferror(stdout))
        status = fail(SNAPPROF_EXIT_USAGE, "cannot write the counters: %s", strerror(errno));
out:
    perftools__profiles__profile__free_unpacked(p, NULL);
    return status;
}
