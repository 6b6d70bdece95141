/* snapprof_stats_t as text, all of it made from SNAPPROF__STATS_TABLE (see
 * stats_text.h): the hidden entry of a pprof profile, the summary lines
 * of `snapprof record`, and the short comment lines. */
#include "common/stats_text.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The table                                                                */
/* ------------------------------------------------------------------------ */

typedef enum { KIND_U64, KIND_FAIL, KIND_TRIGGERS, KIND_TRIGGER, KIND_INT } kind_t;

typedef struct field {
    const char *name;
    kind_t kind;
    size_t offset;
} field_t;

#define FIELD(kind, field) {#field, KIND_##kind, offsetof(snapprof_stats_t, field)},
static const field_t g_fields[] = {SNAPPROF__STATS_TABLE(FIELD)};
#undef FIELD

/* Each field has the size its kind says, and together they are the whole
 * struct: a field added to snapprof_stats_t but not to the table, or given
 * the wrong kind, stops the build here. */
#define SIZE_U64 sizeof(uint64_t)
#define SIZE_FAIL (sizeof(uint64_t) * SNAPPROF_FAIL_COUNT)
#define SIZE_TRIGGERS (sizeof(uint64_t) * SNAPPROF_TRIGGER_COUNT)
#define SIZE_TRIGGER sizeof(snapprof_trigger_t)
#define SIZE_INT sizeof(int)
#define CHECK_KIND(kind, field)                                                                    \
    _Static_assert(sizeof(((snapprof_stats_t *)0)->field) == SIZE_##kind,                          \
                   "snapprof_stats_t." #field " is not of kind " #kind);
SNAPPROF__STATS_TABLE(CHECK_KIND)
#undef CHECK_KIND
#define ADD_SIZE(kind, field) +SIZE_##kind
/* size (not a counter) and the table, rounded up to the struct's 8-byte
 * alignment: an int may end it. */
_Static_assert((sizeof(size_t) SNAPPROF__STATS_TABLE(ADD_SIZE) + 7) / 8 * 8 ==
                   sizeof(snapprof_stats_t),
               "a field of snapprof_stats_t is missing from SNAPPROF__STATS_TABLE "
               "(common/stats_text.h)");
#undef ADD_SIZE

static uint64_t *u64_at(snapprof_stats_t *st, const field_t *f)
{
    return (uint64_t *)((char *)st + f->offset);
}

static const uint64_t *u64_at_const(const snapprof_stats_t *st, const field_t *f)
{
    return (const uint64_t *)((const char *)st + f->offset);
}

/* The name of element i of an array field; NULL for an element that has
 * no key. */
static const char *element_name(kind_t kind, int i)
{
    if (kind == KIND_FAIL)
        return snapprof_fail_reason_name((snapprof_fail_reason_t)i);
    if (i == SNAPPROF_TRIGGER_AUTO)
        return NULL;
    return snapprof_trigger_name((snapprof_trigger_t)i);
}

static int element_count(kind_t kind)
{
    return kind == KIND_FAIL ? SNAPPROF_FAIL_COUNT : SNAPPROF_TRIGGER_COUNT;
}

static const char *fallback_name(snapprof_trigger_t t)
{
    return t == SNAPPROF_TRIGGER_AUTO ? "none" : snapprof_trigger_name(t);
}

/* ------------------------------------------------------------------------ */
/* Pairs                                                                    */
/* ------------------------------------------------------------------------ */

int snapprof__stats_for_each(const snapprof_stats_t *st, snapprof__stats_pair_cb fn, void *arg)
{
    char key[SNAPPROF__STATS_KEY_MAX], value[SNAPPROF__STATS_VALUE_MAX];
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof g_fields / sizeof g_fields[0]; i++) {
        const field_t *f = &g_fields[i];
        const char *p = (const char *)st + f->offset;
        switch (f->kind) {
        case KIND_U64:
            snprintf(value, sizeof value, "%" PRIu64, *u64_at_const(st, f));
            rc = fn(arg, f->name, value);
            break;
        case KIND_FAIL:
        case KIND_TRIGGERS:
            for (int e = 0; rc == 0 && e < element_count(f->kind); e++) {
                const char *name = element_name(f->kind, e);
                if (name == NULL)
                    continue;
                snprintf(key, sizeof key, "%s.%s", f->name, name);
                snprintf(value, sizeof value, "%" PRIu64, u64_at_const(st, f)[e]);
                rc = fn(arg, key, value);
            }
            break;
        case KIND_TRIGGER: {
            snapprof_trigger_t t;
            memcpy(&t, p, sizeof t);
            rc = fn(arg, f->name, fallback_name(t));
            break;
        }
        case KIND_INT: {
            int v;
            memcpy(&v, p, sizeof v);
            snprintf(value, sizeof value, "%d", v);
            rc = fn(arg, f->name, value);
            break;
        }
        }
    }
    return rc;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (s[0] < '0' || s[0] > '9')
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno != 0)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_int(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || errno != 0 || v < -2147483647L - 1 || v > 2147483647L)
        return -EINVAL;
    *out = (int)v;
    return 0;
}

int snapprof__stats_set(snapprof_stats_t *st, const char *key, const char *value)
{
    const char *dot = strchr(key, '.');
    size_t len = dot ? (size_t)(dot - key) : strlen(key);
    for (size_t i = 0; i < sizeof g_fields / sizeof g_fields[0]; i++) {
        const field_t *f = &g_fields[i];
        if (strlen(f->name) != len || strncmp(f->name, key, len) != 0)
            continue;
        char *p = (char *)st + f->offset;
        int array = f->kind == KIND_FAIL || f->kind == KIND_TRIGGERS;
        if (array != (dot != NULL))
            return -ENOENT;
        switch (f->kind) {
        case KIND_U64:
            return parse_u64(value, u64_at(st, f));
        case KIND_FAIL:
        case KIND_TRIGGERS:
            for (int e = 0; e < element_count(f->kind); e++) {
                const char *name = element_name(f->kind, e);
                if (name != NULL && strcmp(name, dot + 1) == 0)
                    return parse_u64(value, &u64_at(st, f)[e]);
            }
            return -ENOENT;
        case KIND_TRIGGER:
            for (int t = 0; t < SNAPPROF_TRIGGER_COUNT; t++) {
                if (strcmp(value, fallback_name((snapprof_trigger_t)t)) == 0) {
                    snapprof_trigger_t v = (snapprof_trigger_t)t;
                    memcpy(p, &v, sizeof v);
                    return 0;
                }
            }
            return -EINVAL;
        case KIND_INT: {
            int v;
            if (parse_int(value, &v) != 0)
                return -EINVAL;
            memcpy(p, &v, sizeof v);
            return 0;
        }
        }
    }
    return -ENOENT;
}

/* ------------------------------------------------------------------------ */
/* The hidden entry                                                         */
/* ------------------------------------------------------------------------ */

typedef struct text {
    char *p;
    size_t len, cap;
    int oom;
} text_t;

static void text_add(text_t *t, const char *s)
{
    size_t n = strlen(s);
    if (t->oom)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 2048;
        while (t->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (p == NULL) {
            t->oom = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n + 1);
    t->len += n;
}

static int add_pair(void *arg, const char *key, const char *value)
{
    text_t *t = arg;
    text_add(t, " ");
    text_add(t, key);
    text_add(t, "=");
    text_add(t, value);
    return 0;
}

char *snapprof__stats_encode(const snapprof_stats_t *st)
{
    text_t t = {0};
    char head[32];
    snprintf(head, sizeof head, "%s%d", SNAPPROF__STATS_PREFIX, SNAPPROF__STATS_VERSION);
    text_add(&t, head);
    snapprof__stats_for_each(st, add_pair, &t);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

int snapprof__stats_is_entry(const char *s)
{
    return s != NULL && strncmp(s, SNAPPROF__STATS_PREFIX, strlen(SNAPPROF__STATS_PREFIX)) == 0;
}

int snapprof__stats_decode(const char *entry, snapprof_stats_t *st, snapprof__stats_pair_cb unknown,
                           void *arg)
{
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    if (!snapprof__stats_is_entry(entry))
        return -EINVAL;
    const char *p = entry + strlen(SNAPPROF__STATS_PREFIX);
    char *end;
    errno = 0;
    long version = strtol(p, &end, 10);
    if (end == p || errno != 0 || (*end != ' ' && *end != '\0'))
        return -EINVAL;
    if (version != SNAPPROF__STATS_VERSION)
        return -EPROTONOSUPPORT;
    p = end;
    while (*p == ' ') {
        p++;
        size_t n = strcspn(p, " ");
        const char *eq = memchr(p, '=', n);
        if (n == 0)
            continue;
        if (eq == NULL || eq == p || (size_t)(eq - p) >= SNAPPROF__STATS_KEY_MAX ||
            n - (size_t)(eq - p) - 1 >= SNAPPROF__STATS_VALUE_MAX)
            return -EINVAL;
        char key[SNAPPROF__STATS_KEY_MAX], value[SNAPPROF__STATS_VALUE_MAX];
        memcpy(key, p, (size_t)(eq - p));
        key[eq - p] = '\0';
        memcpy(value, eq + 1, n - (size_t)(eq - p) - 1);
        value[n - (size_t)(eq - p) - 1] = '\0';
        int rc = snapprof__stats_set(st, key, value);
        if (rc == -ENOENT && unknown != NULL)
            rc = unknown(arg, key, value);
        else if (rc == -ENOENT)
            rc = 0;
        if (rc != 0)
            return rc < 0 ? rc : -EINVAL;
        p += n;
    }
    return *p == '\0' ? 0 : -EINVAL;
}

/* ------------------------------------------------------------------------ */
/* Lines for people                                                         */
/* ------------------------------------------------------------------------ */

/* "100" for a whole number of Hz, else "33.3". */
static void format_hz(double hz, char *buf, size_t size)
{
    double whole = (double)(uint64_t)(hz + 0.5);
    if (hz - whole < 0.05 && whole - hz < 0.05)
        snprintf(buf, size, "%.0f", whole);
    else
        snprintf(buf, size, "%.1f", hz);
}

void snapprof__stats_rate_text(const snapprof_stats_t *st, uint64_t period_ns, int wall, char *buf,
                               size_t size)
{
    char requested[32];
    format_hz(period_ns ? 1e9 / (double)period_ns : 0, requested, sizeof requested);
    if (wall)
        snprintf(buf, size, "%s Hz of wall time requested", requested);
    else if (st->cpu_ns_total == 0)
        snprintf(buf, size, "no CPU time seen, %s Hz requested", requested);
    else if (st->cpu_ns_total < SNAPPROF__RATE_MIN_PERIODS * period_ns)
        snprintf(buf, size, "only %.1f ms of CPU time, %s Hz requested",
                 (double)st->cpu_ns_total / 1e6, requested);
    else {
        double delivered = st->cpu_ns_sampled != 0 ? (double)st->cpu_ns_sampled / (double)period_ns
                                                   : (double)st->samples;
        snprintf(buf, size, "%.1f Hz per CPU-second of %s Hz requested",
                 delivered / ((double)st->cpu_ns_total / 1e9), requested);
    }
}

void snapprof__stats_trigger_text(const snapprof_stats_t *st, char *buf, size_t size)
{
    int order[SNAPPROF_TRIGGER_COUNT], n = 0;
    for (int t = 0; t < SNAPPROF_TRIGGER_COUNT; t++) {
        if (t == SNAPPROF_TRIGGER_AUTO || st->threads_by_trigger[t] == 0)
            continue;
        /* Most threads first; ties in the enum's order (best first). */
        int k = n++;
        while (k > 0 && st->threads_by_trigger[order[k - 1]] < st->threads_by_trigger[t]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = t;
    }
    buf[0] = '\0';
    if (n == 1) {
        snprintf(buf, size, "trigger %s", snapprof_trigger_name((snapprof_trigger_t)order[0]));
        return;
    }
    size_t len = 0;
    for (int i = 0; i < n && len < size; i++) {
        uint64_t c = st->threads_by_trigger[order[i]];
        int w = snprintf(buf + len, size - len, "%s%s (%" PRIu64 "%s)", i ? ", " : "triggers ",
                         snapprof_trigger_name((snapprof_trigger_t)order[i]), c,
                         i        ? ""
                         : c == 1 ? " thread"
                                  : " threads");
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* Appends ", " (unless first) and a formatted part to buf[*len..size). */
static void add_part(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_part(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    if (*len >= size)
        return;
    if (*len > 0) {
        int w = snprintf(buf + *len, size - *len, ", ");
        *len += w > 0 ? (size_t)w : 0;
        if (*len >= size)
            return;
    }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    *len += w > 0 ? (size_t)w : 0;
}

void snapprof__stats_losses_text(const snapprof_stats_t *st, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    if (st->failed_total != 0) {
        char reasons[256];
        size_t rlen = 0;
        reasons[0] = '\0';
        for (int r = 0; r < SNAPPROF_FAIL_COUNT; r++)
            if (st->failed[r] != 0)
                add_part(reasons, sizeof reasons, &rlen, "%s %" PRIu64,
                         snapprof_fail_reason_name((snapprof_fail_reason_t)r), st->failed[r]);
        if (rlen > 0)
            add_part(buf, size, &len, "failed %" PRIu64 " (%s)", st->failed_total, reasons);
        else
            add_part(buf, size, &len, "failed %" PRIu64, st->failed_total);
    }
    const struct {
        const char *name;
        uint64_t value;
    } parts[] = {
        {"samples_dropped", st->samples_dropped}, {"trigger_blocked", st->trigger_blocked},
        {"truncated_copy", st->truncated_copy},   {"truncated_depth", st->truncated_depth},
        {"unwind_aborted", st->unwind_aborted},   {"events_dropped", st->events_dropped},
        {"events_lost", st->events_lost},         {"mmap_failed", st->mmap_failed},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i].value != 0)
            add_part(buf, size, &len, "%s %" PRIu64, parts[i].name, parts[i].value);
}

const char *snapprof__stats_timer_note(const snapprof_stats_t *st, int wall)
{
    if (wall || st->threads_by_trigger[SNAPPROF_TRIGGER_CPU_TIMER] == 0)
        return NULL;
    return "the timer trigger fires at the kernel's tick: at most CONFIG_HZ samples per "
           "CPU-second, each weighing the periods since the last, and code in step with the "
           "tick can get more or fewer samples than its share (the perf trigger has neither "
           "limit)";
}

double snapprof__stats_unplaced_share(const snapprof_stats_t *st, uint64_t period_ns)
{
    if (st->cpu_ns_total == 0 || st->cpu_ns_sampled >= st->cpu_ns_total ||
        st->cpu_ns_total - st->cpu_ns_sampled < SNAPPROF__UNPLACED_PERIODS * period_ns)
        return 0;
    return (double)(st->cpu_ns_total - st->cpu_ns_sampled) / (double)st->cpu_ns_total;
}

int snapprof__stats_comments(const snapprof_stats_t *st, uint64_t period_ns, int wall,
                             char lines[SNAPPROF__COMMENTS_MAX][SNAPPROF__COMMENT_MAX])
{
    char rate[96], trigger[96], losses[SNAPPROF__COMMENT_MAX - 16];
    snapprof__stats_rate_text(st, period_ns, wall, rate, sizeof rate);
    snapprof__stats_trigger_text(st, trigger, sizeof trigger);
    int n = 0;
    snprintf(lines[n++], SNAPPROF__COMMENT_MAX, "snapprof: %" PRIu64 " sample%s, %s%s%s",
             st->samples, st->samples == 1 ? "" : "s", rate, trigger[0] ? ", " : "", trigger);
    const char *timer = snapprof__stats_timer_note(st, wall);
    if (timer)
        snprintf(lines[n++], SNAPPROF__COMMENT_MAX, "snapprof: %s", timer);
    snapprof__stats_losses_text(st, losses, sizeof losses);
    if (losses[0])
        snprintf(lines[n++], SNAPPROF__COMMENT_MAX, "snapprof: %s", losses);
    char unplaced[SNAPPROF__COMMENT_MAX - 16];
    if (snapprof__stats_unplaced_share(st, period_ns) > SNAPPROF__UNPLACED_NOTE) {
        snapprof__stats_unplaced_text(st, unplaced, sizeof unplaced);
        snprintf(lines[n++], SNAPPROF__COMMENT_MAX, "snapprof: %s", unplaced);
    }
    return n;
}

void snapprof__stats_unplaced_text(const snapprof_stats_t *st, char *buf, size_t size)
{
    double share = st->cpu_ns_total == 0 || st->cpu_ns_sampled >= st->cpu_ns_total
                       ? 0
                       : (double)(st->cpu_ns_total - st->cpu_ns_sampled) / (double)st->cpu_ns_total;
    char dropped[48] = "";
    if (st->samples_dropped != 0)
        snprintf(dropped, sizeof dropped, ", %" PRIu64 " dropped capture%s", st->samples_dropped,
                 st->samples_dropped == 1 ? "" : "s");
    snprintf(buf, size,
             "%.*f%% of the threads' CPU time is in no sample: time in the kernel and after "
             "each thread's last sample%s (pprof: [kernel and unsampled])",
             share < 0.1 && share > 0 ? 1 : 0, share * 100, dropped);
}

/* ------------------------------------------------------------------------ */
/* Groups                                                                   */
/* ------------------------------------------------------------------------ */

/* By key prefix, first match wins; order is the order of the groups. */
static const struct {
    const char *prefix, *group;
} g_groups[] = {
    {"ticks", "samples and CPU time"},
    {"samples", "samples and CPU time"},
    {"failed", "samples and CPU time"},
    {"cpu_ns", "samples and CPU time"},
    {"pause_", "capture"},
    {"truncated_copy", "capture"},
    {"copy_bytes", "capture"},
    {"foreign_stack", "capture"},
    {"large_buffer", "capture"},
    {"truncated_depth", "unwind"},
    {"unwind_", "unwind"},
    {"cfi_", "unwind"},
    {"threads_by_trigger", "triggers"},
    {"trigger_", "triggers"},
    {"handler_replaced", "triggers"},
    {"unarmed_timer", "triggers"},
    {"wall_", "wall mode"},
    {"events_", "events and labels"},
    {"labels_", "events and labels"},
    {"app_frames", "events and labels"},
    {"heap_", "heap"},
    {"mmap_", "memory"},
    {"fds_", "the library's fds"},
    {"roundtrip_", "sampler cost"},
    {"sampler_", "sampler cost"},
    {"drain_", "sampler cost"},
    {"python_", "python frames"},
};

const char *snapprof__stats_group(int i)
{
    /* Each group once, in the order it first appears. */
    int n = 0;
    for (size_t k = 0; k < sizeof g_groups / sizeof g_groups[0]; k++) {
        int seen = 0;
        for (size_t j = 0; j < k && !seen; j++)
            seen = strcmp(g_groups[j].group, g_groups[k].group) == 0;
        if (!seen && n++ == i)
            return g_groups[k].group;
    }
    return n == i ? SNAPPROF__STATS_GROUP_OTHER : NULL;
}

const char *snapprof__stats_group_of(const char *key)
{
    for (size_t k = 0; k < sizeof g_groups / sizeof g_groups[0]; k++)
        if (strncmp(key, g_groups[k].prefix, strlen(g_groups[k].prefix)) == 0)
            return g_groups[k].group;
    return SNAPPROF__STATS_GROUP_OTHER;
}
