/* gperftools' CPU profile builder: the legacy binary file gperftools'
 * profiler writes (gperftools' docs/cpuprofile-fileformat), which its own
 * pprof (Debian's google-pprof) and `go tool pprof` read:
 *
 *   header   0, 3, 0, sampling period in microseconds, 0   (one word each)
 *   records  count, depth, pc[0] (innermost) ... pc[depth-1]
 *   trailer  0, 1, 0
 *   text     /proc/self/maps at completion
 *
 * Words are the native uintptr_t. The readers symbolize the pcs from the
 * files the maps name, and take every caller's address for a return
 * address (they subtract one): so callers are written as our frames' pc
 * plus one (a caller frame's pc is its return address minus one).
 *
 * Counts are whole samples, as gperftools' own: each distinct stack's
 * weight (CPU time, or wall time in a wall profile) in sampling periods,
 * rounded cumulatively over the stacks in the order they were first seen,
 * so the file's total is the total weight in periods, each stack off by
 * less than one. A stack that rounds to 0 is left out. Samples without a
 * pc (a thread's "[kernel and unsampled]" remainder, a stack of markers
 * only) are not samples of gperftools' kind and are left out; a marker
 * ("[truncated]", "[unknown]") ends the stack it is in. */
#include "profile_builder/profile_builder_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct gperf_stack {
    uint64_t hash;
    size_t off;         /* first pc in pcs[] */
    size_t depth;       /* pcs, innermost first */
    uint64_t weight[2]; /* ns: [0] CPU time, [1] wall time */
} gperf_stack_t;

typedef struct gperf_builder {
    snapprof__output_t out;
    uintptr_t *pcs; /* every stack's pcs, one after the other */
    size_t n_pcs, cap_pcs;
    gperf_stack_t *stacks; /* in the order first seen */
    size_t n_stacks, cap_stacks;
    uint32_t *slots; /* open addressing: stack index + 1, 0 free */
    size_t n_slots;  /* a power of two, or 0 */
    uintptr_t *scratch;
    size_t cap_scratch;
} gperf_builder_t;

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t hash_pcs(const uintptr_t *pcs, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15u ^ n;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint64_t)pcs[i];
        h *= 0xff51afd7ed558ccdu;
        h ^= h >> 32;
    }
    return h;
}

static int grow_slots(gperf_builder_t *b)
{
    size_t n = b->n_slots ? b->n_slots * 2 : 1024;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < b->n_stacks; i++) {
        size_t j = (size_t)b->stacks[i].hash & (n - 1);
        while (slots[j] != 0)
            j = (j + 1) & (n - 1);
        slots[j] = (uint32_t)(i + 1);
    }
    free(b->slots);
    b->slots = slots;
    b->n_slots = n;
    return 0;
}

/* The index of the stack pcs[0..n), added when new; or a negative errno. */
static int64_t intern(gperf_builder_t *b, const uintptr_t *pcs, size_t n)
{
    uint64_t h = hash_pcs(pcs, n);
    if (b->n_slots > 0) {
        for (size_t j = (size_t)h & (b->n_slots - 1); b->slots[j] != 0;
             j = (j + 1) & (b->n_slots - 1)) {
            const gperf_stack_t *s = &b->stacks[b->slots[j] - 1];
            if (s->hash == h && s->depth == n && memcmp(b->pcs + s->off, pcs, n * sizeof *pcs) == 0)
                return (int64_t)(b->slots[j] - 1);
        }
    }
    if (b->n_stacks >= UINT32_MAX - 1)
        return -ENOMEM;
    if ((b->n_stacks + 1) * 2 > b->n_slots && grow_slots(b) != 0)
        return -ENOMEM;
    if (b->n_stacks == b->cap_stacks) {
        size_t cap = b->cap_stacks ? b->cap_stacks * 2 : 256;
        gperf_stack_t *s = realloc(b->stacks, cap * sizeof *s);
        if (s == NULL)
            return -ENOMEM;
        b->stacks = s;
        b->cap_stacks = cap;
    }
    if (b->n_pcs + n > b->cap_pcs) {
        size_t cap = b->cap_pcs ? b->cap_pcs : 4096;
        while (cap < b->n_pcs + n)
            cap *= 2;
        uintptr_t *p = realloc(b->pcs, cap * sizeof *p);
        if (p == NULL)
            return -ENOMEM;
        b->pcs = p;
        b->cap_pcs = cap;
    }
    memcpy(b->pcs + b->n_pcs, pcs, n * sizeof *pcs);
    b->stacks[b->n_stacks] = (gperf_stack_t){.hash = h, .off = b->n_pcs, .depth = n};
    b->n_pcs += n;
    size_t j = (size_t)h & (b->n_slots - 1);
    while (b->slots[j] != 0)
        j = (j + 1) & (b->n_slots - 1);
    b->slots[j] = (uint32_t)(b->n_stacks + 1);
    return (int64_t)b->n_stacks++;
}

static int gperf_on_sample(void *user_data, const snapprof_sample_t *sample)
{
    gperf_builder_t *b = user_data;
    if (sample == NULL || (sample->frame_count != 0 && sample->frames == NULL))
        return -EINVAL;
    if (sample->frame_count > b->cap_scratch) {
        uintptr_t *p = realloc(b->scratch, sample->frame_count * sizeof *p);
        if (p == NULL)
            return -ENOMEM;
        b->scratch = p;
        b->cap_scratch = sample->frame_count;
    }
    size_t n = 0;
    for (size_t i = 0; i < sample->frame_count; i++) {
        const snapprof_frame_t *f = &sample->frames[i];
        if (f->kind == SNAPPROF_FRAME_MARKER || f->pc == 0)
            break;
        /* Callers as return addresses, which the readers expect. */
        b->scratch[n++] = i == 0 ? f->pc : f->pc + 1;
    }
    if (n == 0)
        return 0; /* no pc: nothing gperftools would have counted */
    int64_t id = intern(b, b->scratch, n);
    if (id < 0)
        return (int)id;
    gperf_stack_t *s = &b->stacks[id];
    s->weight[0] = sat_add(s->weight[0], sample->cpu_ns);
    s->weight[1] = sat_add(s->weight[1], sample->wall_ns);
    return 0;
}

/* Words buffered before they go to the file. */
typedef struct wbuf {
    int fd;
    int err;
    size_t n;
    uintptr_t w[4096];
} wbuf_t;

static void wb_flush(wbuf_t *w)
{
    if (w->err == 0 && w->n > 0)
        w->err = snapprof__output_write_all(w->fd, w->w, w->n * sizeof w->w[0]);
    w->n = 0;
}

static void wb_put(wbuf_t *w, uintptr_t v)
{
    if (w->n == sizeof w->w / sizeof w->w[0])
        wb_flush(w);
    w->w[w->n++] = v;
}

/* Copies /proc/self/maps to fd. */
static int write_maps(int fd)
{
    int in = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    char buf[8192];
    int err = 0;
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = -errno;
            break;
        }
        if (r == 0)
            break;
        err = snapprof__output_write_all(fd, buf, (size_t)r);
        if (err != 0)
            break;
    }
    close(in);
    return err;
}

static int gperf_on_profile_completed(void *user_data, const snapprof_profile_info_t *info)
{
    gperf_builder_t *b = user_data;
    int mode = info != NULL && info->mode == SNAPPROF_MODE_WALL ? 1 : 0;
    uint64_t period_ns = info != NULL && info->period_ns > 0 ? info->period_ns : 10000000u;
    uint64_t period_us = (period_ns + 500) / 1000;
    if (period_us == 0)
        period_us = 1;
    wbuf_t *w = malloc(sizeof *w);
    if (w == NULL)
        return -ENOMEM;
    char *tmp;
    int fd = snapprof__output_open_temp(&b->out, &tmp);
    if (fd < 0) {
        free(w);
        return fd;
    }
    w->fd = fd;
    w->err = 0;
    w->n = 0;
    wb_put(w, 0);
    wb_put(w, 3);
    wb_put(w, 0);
    wb_put(w, (uintptr_t)period_us);
    wb_put(w, 0);
    /* Cumulative rounding: the counts so far are always the weight so far
     * in periods, rounded. In 128 bits: weights of days in ns times. */
    unsigned __int128 acc = 0;
    uint64_t emitted = 0;
    for (size_t i = 0; i < b->n_stacks; i++) {
        const gperf_stack_t *s = &b->stacks[i];
        acc += s->weight[mode];
        uint64_t total = (uint64_t)((acc + period_ns / 2) / period_ns);
        uint64_t count = total - emitted;
        emitted = total;
        if (count == 0)
            continue;
        wb_put(w, (uintptr_t)count);
        wb_put(w, (uintptr_t)s->depth);
        for (size_t k = 0; k < s->depth; k++)
            wb_put(w, b->pcs[s->off + k]);
    }
    wb_put(w, 0);
    wb_put(w, 1);
    wb_put(w, 0);
    wb_flush(w);
    int err = w->err;
    free(w);
    if (err == 0)
        err = write_maps(fd);
    return snapprof__output_commit(&b->out, fd, tmp, err);
}

static void gperf_destroy(void *user_data)
{
    gperf_builder_t *b = user_data;
    if (b == NULL)
        return;
    snapprof__output_free(&b->out);
    free(b->pcs);
    free(b->stacks);
    free(b->slots);
    free(b->scratch);
    free(b);
}

static const snapprof_builder_ops_t gperf_ops = {
    .version = 1, /* receives time samples only */
    .name = "gperftools",
    .xOnSample = gperf_on_sample,
    .xOnProfileCompleted = gperf_on_profile_completed,
    .xDestroy = gperf_destroy,
};

int snapprof_gperftools_builder_create(const char *path, snapprof_builder_t **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    gperf_builder_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return -ENOMEM;
    int err = snapprof__output_resolve(path, &b->out);
    if (err == 0)
        err = snapprof_builder_create(&gperf_ops, b, out);
    if (err == 0)
        (*out)->output = &b->out;
    else
        gperf_destroy(b);
    return err;
}
