/* The perf map reader for the JIT regions (jit_regions.c): reads
 * /tmp/perf-PID.map (or the configured file) as it grows, a few lines at a
 * time, and puts its lines into the perf map table, a line replacing every
 * older region it overlaps. It feeds a table of jit_regions.c and answers
 * jit_lookup.c; jit_regions.c never calls it. */
#include "common/arena.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/fork_resets.h"
#include "common/hex.h"
#include "module_cache/jit_perf_map.h"
#include "module_cache/jit_regions.h"
#include "module_cache/jit_regions_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Longer perf map lines are skipped and counted as bad. */
#define PERF_MAP_MAX_LINE (64u * 1024)

/* The perf map is read in pieces of at most this many bytes, each published
 * as one snapshot. */
#define PERF_MAP_CHUNK (16u * 1024 * 1024)

/* A lookup of an address no module holds checks whether the perf map grew
 * at most this often; one that found a perf map region (whose line a JIT
 * reusing the memory may have superseded) less often, as that is every
 * sample of a JIT that names its code this way. A check is one stat(). */
#define PERF_MAP_MISS_CHECK_NS (1000ull * 1000)
#define PERF_MAP_HIT_CHECK_NS (10ull * 1000 * 1000)

/* The table of perf map regions; its lock is held by the reader. */
static table_t g_perf_table = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Atomic uint64_t g_perf_reads, g_perf_lines, g_perf_bad, g_perf_replaced;

/* ------------------------------------------------------------------------ */
/* Perf maps                                                                */
/* ------------------------------------------------------------------------ */

/* A layout for the lines whose name starts with prefix. */
typedef struct pm_rule {
    char prefix[64];
    size_t len;
    snapprof_jit_layout_t layout;
} pm_rule_t;

/* All of it under g_perf_table.lock, except g_perf_checked_ns. */
static struct {
    int configured;               /* set up: by the first look, or by the API */
    int enabled;                  /* 0 after configure("") */
    char *path;                   /* configured path (malloc'd), NULL: the default */
    snapprof_jit_layout_t layout; /* for lines no rule matches */
    pm_rule_t rules[SNAPPROF_JIT_PERF_MAP_RULES_MAX];
    size_t n_rules;
    const char *module_path; /* path of the file in use, in g_perf_table.arena */
    pid_t pid;               /* getpid() when the default path was made */
    int have_file;
    dev_t dev;
    ino_t ino;
    uint64_t offset;  /* bytes consumed: up to the last newline read */
    int skipping;     /* inside an overlong line */
    uint64_t seen_ns; /* when the file last held nothing unread */
} g_pm;
static _Atomic uint64_t g_perf_checked_ns; /* last check, mono ns; 0: check at once */

static void pm_fork_reset(void);

static pthread_once_t g_watch_once = PTHREAD_ONCE_INIT;

static void watch_once(void)
{
    snapprof__jit_table_watch(&g_perf_table, SNAPPROF__FORK_JIT_PERF_MAP, pm_fork_reset);
}

/* Has the fork() child handler of jit_regions.c watch the perf table (and
 * the reader's state, pm_fork_reset()); called before the table's lock is
 * taken. */
static void pm_watch(void)
{
    pthread_once(&g_watch_once, watch_once);
}

typedef struct pm_line {
    uintptr_t start, limit;
    const char *name;
    size_t name_len;
    size_t seq; /* 0 for a region already in the table, else the line's order */
    snapprof__jit_region_t *old;
    int dead;
} pm_line_t;

typedef struct pm_vec {
    pm_line_t *v;
    size_t n, cap;
} pm_vec_t;

static int pm_push(pm_vec_t *pv, const pm_line_t *l)
{
    pm_line_t *v = snapprof__array_room(pv->v, &pv->cap, pv->n, sizeof *v, 256);
    if (v == NULL)
        return -ENOMEM;
    pv->v = v;
    pv->v[pv->n++] = *l;
    return 0;
}

/* Parses hex at *p (0x optional) up to a blank; advances *p. */
static int parse_hex(const char **p, const char *end, uintptr_t *out)
{
    const char *s = *p;
    if (end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    uintptr_t v = 0;
    const char *digits = s;
    for (; s < end && snapprof__hex_digit(*s) >= 0; s++) {
        if (v > (UINTPTR_MAX >> 4))
            return -1;
        v = (v << 4) | (uintptr_t)snapprof__hex_digit(*s);
    }
    if (s == digits || (s < end && *s != ' ' && *s != '\t'))
        return -1;
    *p = s;
    *out = v;
    return 0;
}

/* Parses one line (without its newline) "START SIZE name". */
static int parse_line(const char *s, size_t len, pm_line_t *out)
{
    const char *end = s + len;
    if (len > 0 && end[-1] == '\r')
        end--;
    if (memchr(s, '\0', (size_t)(end - s)) != NULL)
        return -1;
    uintptr_t start, size;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    if (parse_hex(&s, end, &start) != 0)
        return -1;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    if (parse_hex(&s, end, &size) != 0 || size == 0 || start > UINTPTR_MAX - size)
        return -1;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (s == end)
        return -1;
    memset(out, 0, sizeof *out);
    out->start = start;
    out->limit = start + size;
    out->name = s;
    out->name_len = (size_t)(end - s);
    return 0;
}

/* Sets up what nobody configured: the default perf map, frame pointers,
 * and CPython's perf trampolines known by their names. */
static void pm_init_locked(void)
{
    if (g_pm.configured)
        return;
    g_pm.configured = 1;
    g_pm.enabled = 1;
    snapprof_jit_layout_init_frame_pointer(&g_pm.layout);
    pm_rule_t *py = &g_pm.rules[0];
    snprintf(py->prefix, sizeof py->prefix, "py::");
    py->len = strlen(py->prefix);
    snapprof_jit_layout_init_cpython(&py->layout);
    g_pm.n_rules = 1;
}

/* The layout of a line: the longest prefix rule's that matches its name,
 * else the default. A CPython trampoline rule holds only for lines of a
 * trampoline's size: the name was a guess at who wrote the line, the
 * size confirms it (or not, and the line is walked as without the rule). */
static const snapprof_jit_layout_t *pm_layout_for(const char *name, size_t len, uintptr_t size)
{
    static const snapprof_jit_layout_t frame_pointer = {
        .kind = SNAPPROF_JIT_LAYOUT_FRAME_POINTER, .saved_fp_offset = SNAPPROF_JIT_FP_UNCHANGED};
    const pm_rule_t *best = NULL;
    for (size_t i = 0; i < g_pm.n_rules; i++) {
        const pm_rule_t *r = &g_pm.rules[i];
        if (r->len <= len && memcmp(r->prefix, name, r->len) == 0 &&
            (best == NULL || r->len > best->len))
            best = r;
    }
    const snapprof_jit_layout_t *lay = best ? &best->layout : &g_pm.layout;
    if (lay->kind == SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE &&
        snapprof__jit_trampoline_shape(size) == NULL)
        lay = g_pm.layout.kind == SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE ? &frame_pointer
                                                                         : &g_pm.layout;
    return lay;
}

static int cmp_line(const void *a, const void *b)
{
    const pm_line_t *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Puts the parsed lines into the table: a line replaces every older region
 * or line it overlaps (what a JIT that reuses memory means by writing it).
 * With reset, every region in the table goes. Under g_perf_table.lock. */
static int pm_apply(pm_vec_t *lines, int reset, uint64_t boundary)
{
    snapshot_t *old = atomic_load(&g_perf_table.current);
    size_t n_new = lines->n;
    if (!reset && old != NULL) {
        for (size_t i = 0; i < old->n_live; i++) {
            snapprof__jit_region_t *r = old->live[i];
            pm_line_t l = {.start = r->module.start, .limit = r->module.limit, .old = r};
            if (pm_push(lines, &l) != 0)
                return -ENOMEM;
        }
    }
    pm_line_t *v = lines->v;
    size_t n = lines->n;
    if (n > 0) /* v is NULL then, which qsort must not be given */
        qsort(v, n, sizeof *v, cmp_line);
    /* The regions overlapping v[i] from above start below its limit; of
     * every overlapping pair the older one goes. Overlaps are rare, so this
     * is linear in practice. */
    uint64_t replaced = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n && v[j].start < v[i].limit; j++) {
            pm_line_t *older = v[i].seq < v[j].seq ? &v[i] : &v[j];
            replaced += !older->dead;
            older->dead = 1;
        }
    }
    size_t n_gone = 0, n_born = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].old != NULL)
            n_gone += v[i].dead;
        else
            n_born += !v[i].dead;
    }
    if (reset && old != NULL)
        n_gone = old->n_live;
    snapprof__jit_region_t **gone = malloc((n_gone + n_born + 1) * sizeof *gone);
    if (gone == NULL)
        return -ENOMEM;
    snapprof__jit_region_t **born = gone + n_gone;
    size_t g = 0, b = 0;
    if (reset && old != NULL)
        for (; g < old->n_live; g++)
            gone[g] = old->live[g];
    for (size_t i = 0; i < n; i++) {
        if (v[i].old != NULL) {
            if (v[i].dead)
                gone[g++] = v[i].old;
        } else if (!v[i].dead) {
            born[b] = snapprof__jit_region_new(
                &g_perf_table, v[i].start, v[i].limit, v[i].name, v[i].name_len, g_pm.module_path,
                pm_layout_for(v[i].name, v[i].name_len, v[i].limit - v[i].start), boundary);
            if (born[b] == NULL) {
                free(gone);
                return -ENOMEM;
            }
            b++;
        }
    }
    /* Predecessors once every region going away is known (gone is in start
     * order, as the old regions came in v). */
    for (size_t k = 0; k < n_born; k++)
        born[k]->prev = snapprof__jit_predecessor(old, gone, n_gone, born[k]->module.start,
                                                  born[k]->module.limit);
    snapshot_t *next = snapprof__jit_snapshot_next(old, gone, n_gone, born, n_born);
    if (next == NULL) {
        free(gone);
        return -ENOMEM;
    }
    for (size_t k = 0; k < n_gone; k++)
        snapprof__jit_region_kill(gone[k], boundary);
    free(gone);
    snapprof__jit_publish(&g_perf_table, next);
    atomic_fetch_add(&g_perf_lines, n_new);
    atomic_fetch_add(&g_perf_replaced, replaced);
    return 0;
}

/* Drops every perf map region. Under g_perf_table.lock. */
static void pm_drop_all(uint64_t now)
{
    pm_vec_t none = {0};
    if (atomic_load(&g_perf_table.current) != NULL)
        pm_apply(&none, 1, now);
    free(none.v);
    g_pm.have_file = 0;
    g_pm.offset = 0;
    g_pm.skipping = 0;
}

/* Parses the complete lines of buf[0, len) into lines; returns how many
 * bytes it consumed (through the last newline, or all of an overlong line
 * being skipped). */
static size_t pm_parse(const char *buf, size_t len, pm_vec_t *lines, uint64_t *bad, int *nomem)
{
    size_t at = 0;
    while (at < len) {
        const char *nl = memchr(buf + at, '\n', len - at);
        if (g_pm.skipping) {
            if (nl == NULL)
                return len;
            g_pm.skipping = 0;
            at = (size_t)(nl - buf) + 1;
            continue;
        }
        if (nl == NULL) {
            if (len - at > PERF_MAP_MAX_LINE) {
                (*bad)++;
                g_pm.skipping = 1;
                return len;
            }
            break; /* a line still being written */
        }
        size_t line_len = (size_t)(nl - (buf + at));
        pm_line_t l;
        if (line_len > PERF_MAP_MAX_LINE || parse_line(buf + at, line_len, &l) != 0) {
            (*bad)++;
        } else {
            l.seq = lines->n + 1;
            if (pm_push(lines, &l) != 0) {
                *nomem = 1;
                return at;
            }
        }
        at = (size_t)(nl - buf) + 1;
    }
    return at;
}

/* Reads what the perf map gained since it was last read. Under
 * g_perf_table.lock. */
static void pm_refresh_locked(void)
{
    uint64_t now = snapprof__monotonic_ns();
    atomic_store(&g_perf_checked_ns, now);
    if (!g_pm.enabled)
        return;
    char def[64];
    const char *path = g_pm.path;
    if (path == NULL) {
        pid_t pid = getpid();
        if (g_pm.have_file && pid != g_pm.pid)
            pm_drop_all(now); /* a forked child: its parent's map is not ours */
        g_pm.pid = pid;
        snprintf(def, sizeof def, "/tmp/perf-%d.map", (int)pid);
        path = def;
    }
    struct stat st;
    if (g_pm.have_file && stat(path, &st) == 0 && st.st_dev == g_pm.dev && st.st_ino == g_pm.ino &&
        (uint64_t)st.st_size == g_pm.offset) {
        g_pm.seen_ns = now; /* the usual case: nothing new, one syscall */
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        /* Not there (yet, or any more): what was read still describes the
         * code that was there. */
        if (fd >= 0)
            close(fd);
        g_pm.seen_ns = now;
        return;
    }
    int reset = 0;
    if (g_pm.have_file &&
        (st.st_dev != g_pm.dev || st.st_ino != g_pm.ino || (uint64_t)st.st_size < g_pm.offset)) {
        /* Replaced or truncated: start over with what it says now. */
        reset = atomic_load(&g_perf_table.current) != NULL;
        g_pm.offset = 0;
        g_pm.skipping = 0;
    }
    if (!g_pm.have_file || g_pm.module_path == NULL || strcmp(g_pm.module_path, path) != 0) {
        const char *mp = snapprof__arena_strdup(&g_perf_table.arena, path);
        if (mp == NULL) {
            close(fd);
            return;
        }
        g_pm.module_path = mp;
    }
    /* Lines read now were written after the last look found nothing new:
     * that is when their code (and the end of what they replace) is dated
     * from. Before the first look, from the start. */
    uint64_t boundary = g_pm.seen_ns;
    g_pm.have_file = 1;
    g_pm.dev = st.st_dev;
    g_pm.ino = st.st_ino;
    if ((uint64_t)st.st_size == g_pm.offset && !reset) {
        close(fd);
        g_pm.seen_ns = now;
        return;
    }
    int did_read = 0;
    char *buf = NULL;
    size_t buf_size = 0;
    for (;;) {
        size_t want = PERF_MAP_CHUNK;
        if ((uint64_t)st.st_size > g_pm.offset && (uint64_t)st.st_size - g_pm.offset < want)
            want = (size_t)((uint64_t)st.st_size - g_pm.offset) + 1;
        /* Only as much as there is to read: a JIT adds a few lines at a
         * time, and a 16 MiB buffer for each look costs a fresh mapping
         * (and, under ASan, 2 MiB of shadow to poison). */
        if (want > buf_size) {
            free(buf);
            if ((buf = malloc(want)) == NULL)
                break;
            buf_size = want;
        }
        size_t got = 0;
        while (got < want) {
            ssize_t r = pread(fd, buf + got, want - got, (off_t)(g_pm.offset + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        pm_vec_t lines = {0};
        uint64_t bad = 0;
        int nomem = 0, skipping = g_pm.skipping;
        size_t used = pm_parse(buf, got, &lines, &bad, &nomem);
        int rc = (lines.n > 0 || reset) ? pm_apply(&lines, reset, boundary) : 0;
        free(lines.v);
        if (rc != 0) {
            /* Nothing consumed: the same lines are read on the next try,
             * and counted then. */
            g_pm.skipping = skipping;
            break;
        }
        atomic_fetch_add(&g_perf_bad, bad);
        reset = 0;
        did_read |= used > 0;
        g_pm.offset += used;
        if (nomem || used == 0 || got < want)
            break;
    }
    free(buf);
    close(fd);
    if (did_read)
        atomic_fetch_add(&g_perf_reads, 1);
    g_pm.seen_ns = now;
}

/* Reads new perf map lines if the last check is older than interval_ns. */
static void pm_maybe_refresh(uint64_t interval_ns)
{
    if (snapprof__monotonic_ns() - atomic_load(&g_perf_checked_ns) < interval_ns)
        return;
    pm_watch();
    pthread_mutex_lock(&g_perf_table.lock);
    pm_init_locked();
    if (snapprof__monotonic_ns() - atomic_load(&g_perf_checked_ns) >= interval_ns)
        pm_refresh_locked();
    pthread_mutex_unlock(&g_perf_table.lock);
}

SNAPPROF_API int snapprof_jit_perf_map_configure(const char *path,
                                                 const snapprof_jit_layout_t *layout)
{
    snapprof_jit_layout_t lay;
    if (snapprof__jit_layout_check(layout, &lay) != 0)
        return -EINVAL;
    char *copy = NULL;
    if (path != NULL && path[0] != '\0' && (copy = strdup(path)) == NULL)
        return -ENOMEM;
    pm_watch();
    pthread_mutex_lock(&g_perf_table.lock);
    pm_init_locked();
    pm_drop_all(snapprof__monotonic_ns());
    /* The old path is freed after the lock is let go, so that g_pm.path
     * names a live string even in a fork() child that found the lock held
     * (pm_fork_reset() keeps it). */
    char *old = g_pm.path;
    g_pm.path = copy;
    g_pm.enabled = path == NULL || path[0] != '\0';
    g_pm.layout = lay;
    g_pm.seen_ns = 0;
    atomic_store(&g_perf_checked_ns, 0);
    pthread_mutex_unlock(&g_perf_table.lock);
    free(old);
    return 0;
}

SNAPPROF_API int snapprof_jit_perf_map_set_layout(const char *prefix,
                                                  const snapprof_jit_layout_t *layout)
{
    snapprof_jit_layout_t lay;
    if (prefix == NULL || strlen(prefix) >= sizeof g_pm.rules[0].prefix ||
        (layout != NULL && snapprof__jit_layout_check(layout, &lay) != 0))
        return -EINVAL;
    size_t len = strlen(prefix);
    int rc = 0;
    pm_watch();
    pthread_mutex_lock(&g_perf_table.lock);
    pm_init_locked();
    if (len == 0) {
        if (layout != NULL)
            g_pm.layout = lay;
        else
            snapprof_jit_layout_init_frame_pointer(&g_pm.layout);
    } else {
        size_t i = 0;
        while (i < g_pm.n_rules && strcmp(g_pm.rules[i].prefix, prefix) != 0)
            i++;
        if (layout == NULL) {
            if (i < g_pm.n_rules)
                g_pm.rules[i] = g_pm.rules[--g_pm.n_rules];
        } else if (i == SNAPPROF_JIT_PERF_MAP_RULES_MAX) {
            rc = -ENOSPC;
        } else {
            memcpy(g_pm.rules[i].prefix, prefix, len + 1);
            g_pm.rules[i].len = len;
            g_pm.rules[i].layout = lay;
            g_pm.n_rules += i == g_pm.n_rules;
        }
    }
    if (rc == 0) {
        /* Lines already read keep the layout they were read with: read
         * them all again. */
        pm_drop_all(snapprof__monotonic_ns());
        g_pm.seen_ns = 0;
        atomic_store(&g_perf_checked_ns, 0);
    }
    pthread_mutex_unlock(&g_perf_table.lock);
    return rc;
}

void snapprof__jit_perf_map_refresh_now(void)
{
    pm_watch();
    pthread_mutex_lock(&g_perf_table.lock);
    pm_refresh_locked();
    pthread_mutex_unlock(&g_perf_table.lock);
}

void snapprof__jit_perf_map_forget(void)
{
    pm_watch();
    pthread_mutex_lock(&g_perf_table.lock);
    free(atomic_exchange(&g_perf_table.current, NULL));
    /* With no reader about, two rounds free every snapshot retired so far. */
    snapprof__jit_retire(NULL);
    snapprof__jit_retire(NULL);
    snapprof__arena_release(&g_perf_table.arena);
    free(g_pm.path);
    memset(&g_pm, 0, sizeof g_pm);
    atomic_store(&g_perf_checked_ns, 0);
    pthread_mutex_unlock(&g_perf_table.lock);
}

const snapprof_module_t *snapprof__jit_perf_map_find(uintptr_t addr, uint64_t when_ns)
{
    const snapprof_module_t *m = snapprof__jit_table_lookup(&g_perf_table, addr, when_ns);
    if (m != NULL &&
        snapprof__monotonic_ns() - atomic_load(&g_perf_checked_ns) >= PERF_MAP_HIT_CHECK_NS) {
        /* A JIT that reuses memory writes a new line for the same address:
         * a hit is worth a look at the file too, now and then. */
        pm_maybe_refresh(PERF_MAP_HIT_CHECK_NS);
        m = snapprof__jit_table_lookup(&g_perf_table, addr, when_ns);
    }
    return m;
}

const snapprof_module_t *snapprof__jit_find_after_miss(uintptr_t addr, uint64_t when_ns)
{
    pm_maybe_refresh(PERF_MAP_MISS_CHECK_NS);
    if (!snapprof__jit_any())
        return NULL;
    return snapprof__jit_table_lookup(&g_perf_table, addr, when_ns);
}

void snapprof__jit_perf_map_stats(snapprof_jit_stats_t *out)
{
    out->perf_map_regions = snapprof__jit_table_live(&g_perf_table);
    out->perf_map_reads = atomic_load(&g_perf_reads);
    out->perf_map_lines = atomic_load(&g_perf_lines);
    out->perf_map_bad_lines = atomic_load(&g_perf_bad);
    out->perf_map_replaced = atomic_load(&g_perf_replaced);
}

/* A fork() child whose parent had g_perf_table.lock held in
 * another thread: g_pm may be half-changed. The child forgets the file it
 * was reading: its next read takes the file as replaced and starts over
 * with what it says (a default path names the child's own pid, where the
 * parent's regions are dropped as for any child), keeping what was
 * configured. Called by the child handler in
 * jit_regions.c, which took the lock anew (pm_watch()). */
static void pm_fork_reset(void)
{
    g_pm.module_path = NULL; /* in the old arena: copied again on the next read */
    g_pm.dev = 0;            /* the file counts as replaced: read again whole */
    g_pm.ino = 0;
    g_pm.offset = 0;
    g_pm.skipping = 0;
    g_pm.seen_ns = 0;
    atomic_store(&g_perf_checked_ns, 0);
}
