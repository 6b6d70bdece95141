/* `snapprof stats FILE`: prints what a snapprof pprof profile says about
 * its own run, read from its hidden stats entry
 * (common/stats_text.h) with the same table that wrote it: first
 * a headline (samples and rate, trigger, what was lost or cut short, the
 * CPU time in no sample, the target's pause), then every counter as
 * "key value" under the heading of its group (snapprof__stats_group_of();
 * a counter no group claims, or one of a newer snapprof, under "other").
 * `--raw` prints the comments as "# " lines, then every counter as one
 * "key value" line in the table's order, for scripts. */
#include "cli/cli.h"
#include "common/stats_text.h"

#include "profile.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define EXIT_NO_STATS 1

const char snapprof__stats_usage[] =
    "usage: snapprof stats [--raw] FILE\n"
    "\n"
    "Prints what a pprof profile written by snapprof says about its run: a\n"
    "headline (samples and rate, trigger, what was lost or cut short, the CPU time\n"
    "in no sample, the target's pause), then every counter (the fields of\n"
    "snapprof_stats_t) as 'key value' under the heading of its group. The pause\n"
    "percentiles are histogram bucket upper bounds (at most 1/16 above the true\n"
    "value); the maximum is exact. FILE may be gzip-compressed or not.\n"
    "\n"
    "  --raw   the profile's comments as '# ' lines, then every counter as one\n"
    "          'key value' line in snapprof_stats_t's order (for scripts)\n"
    "\n"
    "Exit status: 0; 1 when the profile carries no counters (not written by\n"
    "snapprof, or rewritten by pprof, as -proto does when it merges: pprof keeps\n"
    "only the comments, which are printed); 2 when FILE cannot be read as a profile.\n";

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

/* The counters as read, to print by group. */
typedef struct pairs {
    struct pair {
        char key[SNAPPROF__STATS_KEY_MAX], value[SNAPPROF__STATS_VALUE_MAX];
    } * p;
    size_t n, cap;
} pairs_t;

static int keep_pair(void *arg, const char *key, const char *value)
{
    pairs_t *ps = arg;
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 128;
        struct pair *p = realloc(ps->p, cap * sizeof *p);
        if (p == NULL)
            return 1;
        ps->p = p;
        ps->cap = cap;
    }
    snprintf(ps->p[ps->n].key, sizeof ps->p[0].key, "%s", key);
    snprintf(ps->p[ps->n].value, sizeof ps->p[0].value, "%s", value);
    ps->n++;
    return 0;
}

#define LABEL "%-11s"

/* Says what the percentiles are, under the pause and in the headings. */
#define SNAPPROF__STATS_BUCKET_NOTE                                                                \
    "p50 and p99 (here and below) are histogram bucket upper bounds, at most 1/16 above the "      \
    "true value; max is exact"

/* x as a share of of: "2.5%", "<0.1%" (not 0 when x is not). */
static void pct(char *buf, size_t size, uint64_t x, uint64_t of)
{
    double p = of ? 100.0 * (double)x / (double)of : 0;
    if (x != 0 && p < 0.05)
        snprintf(buf, size, "<0.1%%");
    else
        snprintf(buf, size, "%.1f%%", p);
}

typedef struct part {
    const char *name;
    uint64_t value;
} part_t;

/* "LABEL name 1 (0.8% of samples), name 2 (1.7%)": the parts that are
 * not 0, each with its share of of when of is not 0; nothing when all
 * are 0. */
static void print_parts(const char *label, const part_t *parts, size_t n, uint64_t of,
                        const char *of_what)
{
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        if (parts[i].value == 0)
            continue;
        printf(first ? LABEL "%s %" PRIu64 : ", %s%s %" PRIu64, first ? label : "", parts[i].name,
               parts[i].value);
        if (of != 0) {
            char share[16];
            pct(share, sizeof share, parts[i].value, of);
            printf(" (%s%s%s)", share, first ? " " : "", first ? of_what : "");
        }
        first = 0;
    }
    if (!first)
        printf("\n");
}

/* What matters first: samples and rate, trigger, losses with their shares,
 * the CPU time in no sample, the pause. period_ns and mode from the
 * profile (0 and "" when it has none). */
static void print_headline(const snapprof_stats_t *st, uint64_t period_ns, const char *mode)
{
    int wall = strcmp(mode, "wall") == 0;
    char text[512];
    if (period_ns != 0 && (wall || strcmp(mode, "cpu") == 0)) {
        snapprof__stats_rate_text(st, period_ns, wall, text, sizeof text);
        printf(LABEL "%" PRIu64 ", %s\n", "samples", st->samples, text);
    } else {
        printf(LABEL "%" PRIu64 "\n", "samples", st->samples);
    }
    snapprof__stats_trigger_text(st, text, sizeof text);
    if (text[0]) {
        char *space = strchr(text, ' ');
        *space = '\0';
        uint64_t threads = 0;
        for (int t = 0; t < SNAPPROF_TRIGGER_COUNT; t++)
            threads += t == SNAPPROF_TRIGGER_AUTO ? 0 : st->threads_by_trigger[t];
        /* One trigger: its text does not count the threads. */
        if (strchr(space + 1, '(') == NULL)
            printf(LABEL "%s (%" PRIu64 " thread%s)\n", text, space + 1, threads,
                   threads == 1 ? "" : "s");
        else
            printf(LABEL "%s\n", text, space + 1);
    }
    if (st->trigger_fallback_errno != 0)
        printf(LABEL "%s refused (%s); threads fell back\n", "",
               snapprof_trigger_name(st->trigger_fallback_from),
               strerror(st->trigger_fallback_errno));
    const char *timer = snapprof__stats_timer_note(st, wall);
    if (timer)
        printf(LABEL "%s\n", "", timer);

    snapprof__stats_losses_text(st, text, sizeof text);
    if (!text[0]) {
        printf(LABEL "none: %s\n", "lost", SNAPPROF__STATS_NO_LOSS);
    } else {
        /* Failures and drops as a share of the captures tried, cuts as a
         * share of the samples. */
        if (st->failed_total == 0 && st->samples_dropped == 0)
            printf(LABEL "none: no sample failed or was dropped\n", "lost");
        if (st->failed_total != 0) {
            char share[16];
            pct(share, sizeof share, st->failed_total, st->samples + st->failed_total);
            printf(LABEL "failed %" PRIu64 " (%s of captures", "lost", st->failed_total, share);
            for (int r = 0, first = 1; r < SNAPPROF_FAIL_COUNT; r++)
                if (st->failed[r] != 0)
                    printf("%s%s %" PRIu64, first-- > 0 ? ": " : ", ",
                           snapprof_fail_reason_name((snapprof_fail_reason_t)r), st->failed[r]);
            printf(")\n");
        }
        if (st->samples_dropped != 0) {
            char share[16];
            pct(share, sizeof share, st->samples_dropped, st->samples + st->samples_dropped);
            printf(LABEL "samples_dropped %" PRIu64 " (%s of captures: no slot free)\n",
                   st->failed_total ? "" : "lost", st->samples_dropped, share);
        }
        const part_t cut[] = {{"truncated_copy", st->truncated_copy},
                              {"truncated_depth", st->truncated_depth},
                              {"unwind_aborted", st->unwind_aborted}},
                     other[] = {{"trigger_blocked", st->trigger_blocked},
                                {"events_dropped", st->events_dropped},
                                {"events_lost", st->events_lost},
                                {"mmap_failed", st->mmap_failed}};
        print_parts("cut short", cut, sizeof cut / sizeof cut[0], st->samples, "of samples");
        print_parts("also lost", other, sizeof other / sizeof other[0], 0, NULL);
    }
    if (!wall && st->cpu_ns_total != 0) {
        snapprof__stats_unplaced_text(st, text, sizeof text);
        printf(LABEL "%s\n", "unsampled", text);
    }
    printf(LABEL "target p50 %.1f us, p99 %.1f us, max %.1f us\n", "pause",
           (double)st->pause_p50_ns / 1e3, (double)st->pause_p99_ns / 1e3,
           (double)st->pause_max_ns / 1e3);
    printf(LABEL "%s\n", "", SNAPPROF__STATS_BUCKET_NOTE);
}

int snapprof__cli_stats(int argc, char **argv)
{
    if (argc >= 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        fputs(snapprof__stats_usage, stdout);
        return 0;
    }
    int raw = argc >= 1 && strcmp(argv[0], "--raw") == 0;
    argc -= raw;
    argv += raw;
    if (argc != 1 || argv[0][0] == '\0' || (argv[0][0] == '-' && argv[0][1] != '\0'))
        return snapprof__cli_fail(SNAPPROF_EXIT_USAGE,
                                  "%s (snapprof stats [--raw] FILE; see snapprof stats --help)",
                                  argc == 0 ? "no profile to read" : "stats takes one profile");
    const char *path = argv[0];
    uint8_t *data;
    size_t len;
    char why[256];
    if (read_profile(path, &data, &len, why, sizeof why) != 0)
        return snapprof__cli_fail(SNAPPROF_EXIT_USAGE, "cannot read %s: %s", path, why);
    Snapprof__Pprof__Profile *p = snapprof__pprof__profile__unpack(NULL, len, data);
    free(data);
    /* An empty or foreign file can decode as an empty message: a profile
     * has a string table that starts with "". */
    if (p == NULL || p->n_string_table == 0 || p->string_table[0][0] != '\0') {
        if (p != NULL)
            snapprof__pprof__profile__free_unpacked(p, NULL);
        return snapprof__cli_fail(SNAPPROF_EXIT_USAGE, "%s is not a pprof profile", path);
    }
    int status = 0;
    const char *entry = NULL;
    for (size_t i = 0; i < p->n_comment; i++) {
        if (p->comment[i] < 0 || (uint64_t)p->comment[i] >= p->n_string_table) {
            status = snapprof__cli_fail(SNAPPROF_EXIT_USAGE,
                                        "%s is not a valid pprof profile (comment %zu "
                                        "names no string)",
                                        path, i);
            goto out;
        }
    }
    /* Ours is the last one; a symbol could look like one too. */
    for (size_t i = p->n_string_table; i-- > 0 && entry == NULL;)
        if (snapprof__stats_is_entry(p->string_table[i]))
            entry = p->string_table[i];
    /* The headline says what the comments say; without counters they are
     * all there is. */
    for (size_t i = 0; i < p->n_comment && (raw || entry == NULL); i++)
        printf("# %s\n", p->string_table[p->comment[i]]);
    if (entry == NULL) {
        fflush(stdout);
        status = snapprof__cli_fail(
            EXIT_NO_STATS,
            "%s carries no snapprof counters (not written by snapprof, or rewritten "
            "by pprof, which keeps only the comments)",
            path);
        goto out;
    }
    snapprof_stats_t st;
    int rc = snapprof__stats_decode(entry, &st, NULL, NULL);
    if (rc == -EPROTONOSUPPORT) {
        status = snapprof__cli_fail(
            SNAPPROF_EXIT_USAGE,
            "%s: its counters are in a format newer than this snapprof reads "
            "(%.*s; this one reads %s%d)",
            path, (int)strcspn(entry, " "), entry, SNAPPROF__STATS_PREFIX, SNAPPROF__STATS_VERSION);
        goto out;
    }
    if (rc != 0) {
        status = snapprof__cli_fail(SNAPPROF_EXIT_USAGE, "%s: its snapprof counters are malformed",
                                    path);
        goto out;
    }
    if (raw) {
        snapprof__stats_for_each(&st, print_pair, NULL);
        /* Counters of a newer snapprof that this one has no field for. */
        snapprof__stats_decode(entry, &st, print_pair, NULL);
    } else {
        /* The period and the mode, as the pprof builder writes them. */
        const char *mode = "";
        if (p->period_type != NULL && p->period_type->type >= 0 &&
            (uint64_t)p->period_type->type < p->n_string_table)
            mode = p->string_table[p->period_type->type];
        print_headline(&st, p->period > 0 ? (uint64_t)p->period : 0, mode);
        pairs_t ps = {0};
        snapprof_stats_t again;
        if (snapprof__stats_for_each(&st, keep_pair, &ps) != 0 ||
            snapprof__stats_decode(entry, &again, keep_pair, &ps) != 0) {
            free(ps.p);
            status = snapprof__cli_fail(SNAPPROF_EXIT_USAGE, "out of memory");
            goto out;
        }
        const char *group;
        for (int g = 0; (group = snapprof__stats_group(g)) != NULL; g++) {
            int heading = 0;
            for (size_t i = 0; i < ps.n; i++) {
                if (strcmp(snapprof__stats_group_of(ps.p[i].key), group) != 0)
                    continue;
                if (!heading++)
                    printf("\n%s:\n", group);
                printf("  %-30s %s\n", ps.p[i].key, ps.p[i].value);
            }
        }
        free(ps.p);
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        status = snapprof__cli_fail(SNAPPROF_EXIT_USAGE, "cannot write the counters: %s",
                                    strerror(errno));
out:
    snapprof__pprof__profile__free_unpacked(p, NULL);
    return status;
}
