/* The flight builder (<snapprof/flight.h>): keeps the last minutes of a
 * profile's time samples in memory, in pieces, and replays a window of
 * them into another builder on demand.
 *
 * Each sample is copied into the newest piece's byte buffer as one record:
 * a fixed head, its frames, its labels, then its strings (the thread's
 * name, JIT and marker frame names, label keys, values and units), each
 * NUL-terminated, in that order. Module pointers are kept as they are:
 * the module cache keeps every module for the life of the process. A
 * piece is dropped whole, when the next one starts span_ns before the
 * newest sample, or, past max_bytes, oldest first. */
#include "profile_builder_internal.h"

#include <snapprof/flight.h>

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One sample's record in a piece; 8-byte aligned, len bytes long. */
typedef struct rec_head {
    uint64_t timestamp_ns, cpu_ns, wall_ns;
    int32_t tid;
    uint32_t flags;
    uint32_t frame_count, label_count;
    uint32_t len; /* the whole record, head and strings included */
    uint32_t pad;
} rec_head_t;

typedef struct rec_frame {
    uintptr_t pc;
    const snapprof_module_t *module;
    uint32_t kind;
    uint32_t has_name;
} rec_frame_t;

typedef struct rec_label {
    int64_t num;
    uint8_t has_str, has_unit;
    uint8_t pad[6];
} rec_label_t;

typedef struct piece {
    uint8_t *buf;
    size_t len, cap;
    uint64_t first_ns; /* timestamp that opened it */
    uint64_t oldest_ns, newest_ns;
    uint64_t samples;
} piece_t;

typedef struct flight {
    pthread_mutex_t lock;
    uint64_t span_ns, piece_ns;
    size_t max_bytes;
    piece_t *pieces; /* oldest first */
    size_t n_pieces, pieces_cap;
    size_t bytes; /* sum of the pieces' cap */
    int started;
    snapprof_profile_info_t info; /* of the profile that started it: times, mode, period */
    uint64_t dropped, failed;
} flight_t;

static const snapprof_builder_ops_t flight_ops;

static flight_t *flight_of(snapprof_builder_t *b)
{
    return b != NULL && b->ops == &flight_ops ? b->user_data : NULL;
}

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static size_t str_size(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

static void drop_oldest(flight_t *f)
{
    f->bytes -= f->pieces[0].cap;
    free(f->pieces[0].buf);
    f->n_pieces--;
    memmove(f->pieces, f->pieces + 1, f->n_pieces * sizeof *f->pieces);
}

/* The piece a sample taken at ts goes into: the newest, or a new one when
 * the newest has run its piece_ns. NULL when out of memory. */
static piece_t *piece_for(flight_t *f, uint64_t ts)
{
    if (f->n_pieces > 0) {
        piece_t *last = &f->pieces[f->n_pieces - 1];
        if (ts < last->first_ns + f->piece_ns)
            return last;
    }
    if (f->n_pieces == f->pieces_cap) {
        size_t cap = f->pieces_cap ? f->pieces_cap * 2 : 16;
        piece_t *p = realloc(f->pieces, cap * sizeof *p);
        if (p == NULL)
            return NULL;
        f->pieces = p;
        f->pieces_cap = cap;
    }
    piece_t *p = &f->pieces[f->n_pieces++];
    memset(p, 0, sizeof *p);
    p->first_ns = ts;
    /* Pieces that start span_ns before this one hold nothing the span
     * needs once this one exists. */
    while (f->n_pieces > 1 && f->pieces[1].first_ns + f->span_ns <= ts)
        drop_oldest(f);
    return &f->pieces[f->n_pieces - 1];
}

/* Room for need more bytes in the newest piece p, within max_bytes (by
 * dropping the oldest pieces). 0, or -ENOSPC / -ENOMEM. */
static int reserve(flight_t *f, size_t need)
{
    piece_t *p = &f->pieces[f->n_pieces - 1];
    if (p->len + need <= p->cap)
        return 0;
    size_t cap = p->cap ? p->cap * 2 : 64 * 1024;
    while (cap < p->len + need)
        cap *= 2;
    while (f->bytes - p->cap + cap > f->max_bytes && f->n_pieces > 1) {
        f->dropped += f->pieces[0].samples;
        drop_oldest(f);
        p = &f->pieces[f->n_pieces - 1];
    }
    if (f->bytes - p->cap + cap > f->max_bytes) {
        /* The newest piece alone: at most what max_bytes leaves. */
        cap = f->max_bytes - (f->bytes - p->cap);
        if (cap < p->len + need)
            return -ENOSPC;
    }
    uint8_t *buf = realloc(p->buf, cap);
    if (buf == NULL)
        return -ENOMEM;
    f->bytes = f->bytes - p->cap + cap;
    p->buf = buf;
    p->cap = cap;
    return 0;
}

static uint8_t *put_str(uint8_t *at, const char *s)
{
    if (s == NULL)
        return at;
    size_t n = strlen(s) + 1;
    memcpy(at, s, n);
    return at + n;
}

static int flight_on_started(void *user_data, const snapprof_profile_info_t *info)
{
    flight_t *f = user_data;
    pthread_mutex_lock(&f->lock);
    f->info = (snapprof_profile_info_t){.start_time_ns = info->start_time_ns,
                                        .start_mono_ns = info->start_mono_ns,
                                        .period_ns = info->period_ns,
                                        .mode = info->mode};
    f->started = 1;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int flight_on_sample(void *user_data, const snapprof_sample_t *s)
{
    flight_t *f = user_data;
    size_t need = sizeof(rec_head_t) + s->frame_count * sizeof(rec_frame_t) +
                  s->label_count * sizeof(rec_label_t) + str_size(s->thread_name);
    for (size_t i = 0; i < s->frame_count; i++)
        need += str_size(s->frames[i].name);
    for (size_t i = 0; i < s->label_count; i++)
        need += str_size(s->labels[i].key) + str_size(s->labels[i].str) +
                str_size(s->labels[i].num_unit);
    need = align8(need);
    if (need > UINT32_MAX)
        return -E2BIG;
    pthread_mutex_lock(&f->lock);
    int rc = 0;
    piece_t *p = piece_for(f, s->timestamp_ns);
    if (p == NULL)
        rc = -ENOMEM;
    else
        rc = reserve(f, need);
    if (rc != 0) {
        if (rc == -ENOSPC)
            f->dropped++;
        else
            f->failed++;
        pthread_mutex_unlock(&f->lock);
        return rc;
    }
    p = &f->pieces[f->n_pieces - 1];
    uint8_t *at = p->buf + p->len;
    rec_head_t h = {.timestamp_ns = s->timestamp_ns,
                    .cpu_ns = s->cpu_ns,
                    .wall_ns = s->wall_ns,
                    .tid = (int32_t)s->tid,
                    .flags = s->flags,
                    .frame_count = (uint32_t)s->frame_count,
                    .label_count = (uint32_t)s->label_count,
                    .len = (uint32_t)need};
    memcpy(at, &h, sizeof h);
    at += sizeof h;
    for (size_t i = 0; i < s->frame_count; i++) {
        rec_frame_t fr = {.pc = s->frames[i].pc,
                          .module = s->frames[i].module,
                          .kind = (uint32_t)s->frames[i].kind,
                          .has_name = s->frames[i].name != NULL};
        memcpy(at, &fr, sizeof fr);
        at += sizeof fr;
    }
    for (size_t i = 0; i < s->label_count; i++) {
        rec_label_t l = {.num = s->labels[i].num,
                         .has_str = s->labels[i].str != NULL,
                         .has_unit = s->labels[i].num_unit != NULL};
        memcpy(at, &l, sizeof l);
        at += sizeof l;
    }
    at = put_str(at, s->thread_name ? s->thread_name : "");
    for (size_t i = 0; i < s->frame_count; i++)
        at = put_str(at, s->frames[i].name);
    for (size_t i = 0; i < s->label_count; i++) {
        at = put_str(at, s->labels[i].key ? s->labels[i].key : "");
        at = put_str(at, s->labels[i].str);
        at = put_str(at, s->labels[i].num_unit);
    }
    if (p->samples == 0 || s->timestamp_ns < p->oldest_ns)
        p->oldest_ns = s->timestamp_ns;
    if (s->timestamp_ns > p->newest_ns)
        p->newest_ns = s->timestamp_ns;
    p->samples++;
    p->len += need;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static void flight_destroy(void *user_data)
{
    flight_t *f = user_data;
    for (size_t i = 0; i < f->n_pieces; i++)
        free(f->pieces[i].buf);
    free(f->pieces);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static const snapprof_builder_ops_t flight_ops = {
    .version = 1, /* receives time samples only */
    .name = "flight",
    .xOnProfileStarted = flight_on_started,
    .xOnSample = flight_on_sample,
    .xOnProfileCompleted = NULL, /* what it keeps is given out by replay */
    .xDestroy = flight_destroy,
};

int snapprof_flight_builder_create(const snapprof_flight_params_t *params, snapprof_builder_t **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    snapprof_flight_params_t p = {0};
    if (params != NULL) {
        if (params->size < offsetof(snapprof_flight_params_t, span_ns) + sizeof p.span_ns)
            return -EINVAL;
        memcpy(&p, params, params->size < sizeof p ? params->size : sizeof p);
    }
    p.span_ns = p.span_ns ? p.span_ns : SNAPPROF_FLIGHT_SPAN_NS_DEFAULT;
    p.piece_ns = p.piece_ns ? p.piece_ns : SNAPPROF_FLIGHT_PIECE_NS_DEFAULT;
    p.max_bytes = p.max_bytes ? p.max_bytes : SNAPPROF_FLIGHT_MAX_BYTES_DEFAULT;
    if (p.piece_ns > p.span_ns || p.max_bytes < 64 * 1024)
        return -EINVAL;
    flight_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -ENOMEM;
    pthread_mutex_init(&f->lock, NULL);
    f->span_ns = p.span_ns;
    f->piece_ns = p.piece_ns;
    f->max_bytes = p.max_bytes;
    int rc = snapprof_builder_create(&flight_ops, f, out);
    if (rc != 0)
        flight_destroy(f);
    return rc;
}

static uint64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *take_str(const uint8_t **at)
{
    const char *s = (const char *)*at;
    *at += strlen(s) + 1;
    return s;
}

/* Decodes the record at rec into s, with frames and labels in the arrays
 * given (large enough: see replay_records). */
static void decode(const uint8_t *rec, snapprof_sample_t *s, snapprof_frame_t *frames,
                   snapprof_label_t *labels)
{
    rec_head_t h;
    memcpy(&h, rec, sizeof h);
    const uint8_t *at = rec + sizeof h;
    const uint8_t *rec_frames = at;
    const uint8_t *rec_labels = rec_frames + h.frame_count * sizeof(rec_frame_t);
    at = rec_labels + h.label_count * sizeof(rec_label_t);
    *s = (snapprof_sample_t){.frames = frames,
                             .frame_count = h.frame_count,
                             .timestamp_ns = h.timestamp_ns,
                             .cpu_ns = h.cpu_ns,
                             .wall_ns = h.wall_ns,
                             .tid = (pid_t)h.tid,
                             .labels = labels,
                             .label_count = h.label_count,
                             .flags = h.flags,
                             .size = sizeof(snapprof_sample_t),
                             .kind = SNAPPROF_SAMPLE_KIND_TIME};
    s->thread_name = take_str(&at);
    for (uint32_t i = 0; i < h.frame_count; i++) {
        rec_frame_t fr;
        memcpy(&fr, rec_frames + i * sizeof fr, sizeof fr);
        frames[i] = (snapprof_frame_t){.pc = fr.pc,
                                       .module = fr.module,
                                       .kind = (snapprof_frame_kind_t)fr.kind,
                                       .name = fr.has_name ? take_str(&at) : NULL};
    }
    for (uint32_t i = 0; i < h.label_count; i++) {
        rec_label_t l;
        memcpy(&l, rec_labels + i * sizeof l, sizeof l);
        labels[i].key = take_str(&at);
        labels[i].str = l.has_str ? take_str(&at) : NULL;
        labels[i].num = l.num;
        labels[i].num_unit = l.has_unit ? take_str(&at) : NULL;
    }
}

/* Gives the records of buf[0..len) taken at or after from to into, and
 * counts them in *st as the profiler counts a profile's samples: each
 * sample's CPU time as sampled, remainders and kernel time only in the
 * total. */
static int replay_records(const uint8_t *buf, size_t len, uint64_t from, snapprof_builder_t *into,
                          snapprof_stats_t *st)
{
    size_t max_frames = 0, max_labels = 0;
    for (size_t off = 0; off < len;) {
        rec_head_t h;
        memcpy(&h, buf + off, sizeof h);
        if (h.frame_count > max_frames)
            max_frames = h.frame_count;
        if (h.label_count > max_labels)
            max_labels = h.label_count;
        off += h.len;
    }
    snapprof_frame_t *frames = malloc((max_frames + 1) * sizeof *frames);
    snapprof_label_t *labels = malloc((max_labels + 1) * sizeof *labels);
    int rc = frames && labels ? 0 : -ENOMEM;
    for (size_t off = 0; off < len && rc == 0;) {
        rec_head_t h;
        memcpy(&h, buf + off, sizeof h);
        if (h.timestamp_ns >= from) {
            snapprof_sample_t s;
            decode(buf + off, &s, frames, labels);
            st->cpu_ns_total += s.cpu_ns;
            if (!(s.flags & (SNAPPROF_SAMPLE_REMAINDER | SNAPPROF_SAMPLE_KERNEL))) {
                st->samples++;
                st->cpu_ns_sampled += s.cpu_ns;
            }
            /* A builder's failed sample is its own affair, as in a live
             * profile: the others still go. */
            (void)into->ops->xOnSample(into->user_data, &s);
        }
        off += h.len;
    }
    free(frames);
    free(labels);
    return rc;
}

int snapprof_flight_builder_replay(snapprof_builder_t *flight, uint64_t since_ns,
                                   snapprof_builder_t *into)
{
    flight_t *f = flight_of(flight);
    if (f == NULL || into == NULL || into == flight)
        return -EINVAL;
    uint64_t now = mono_now();
    uint64_t from = since_ns == 0 || since_ns > now ? 0 : now - since_ns;
    /* The window's bytes, copied under the lock; replayed outside it, so
     * the sampling thread waits for a copy, never for a profile's build. */
    pthread_mutex_lock(&f->lock);
    if (!f->started) {
        pthread_mutex_unlock(&f->lock);
        return -ENODATA;
    }
    snapprof_profile_info_t info = f->info;
    size_t len = 0;
    uint64_t oldest = 0;
    for (size_t i = 0; i < f->n_pieces; i++) {
        const piece_t *p = &f->pieces[i];
        if (p->samples == 0 || p->newest_ns < from)
            continue;
        len += p->len;
        if (oldest == 0 || p->oldest_ns < oldest)
            oldest = p->oldest_ns;
    }
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        pthread_mutex_unlock(&f->lock);
        return -ENOMEM;
    }
    size_t at = 0;
    for (size_t i = 0; i < f->n_pieces; i++) {
        const piece_t *p = &f->pieces[i];
        if (p->samples == 0 || p->newest_ns < from)
            continue;
        memcpy(buf + at, p->buf, p->len);
        at += p->len;
    }
    pthread_mutex_unlock(&f->lock);

    /* The window: from its first kept sample (or from, when samples that
     * old are kept) to now, on both clocks. */
    uint64_t start = from;
    if (oldest != 0 && oldest > start)
        start = oldest;
    if (start < info.start_mono_ns)
        start = info.start_mono_ns;
    if (start > now)
        start = now;
    info.start_time_ns += start - info.start_mono_ns;
    info.start_mono_ns = start;
    info.duration_ns = now - start;
    int rc = 0;
    if (into->ops->xOnProfileStarted != NULL)
        rc = into->ops->xOnProfileStarted(into->user_data, &info);
    /* The window's own counters, so that its profile says, as every other
     * profile of ours does, how many samples per CPU-second it holds (the
     * pprof builder's comment and hidden entry). Only what the records
     * tell: the triggers and losses of the run are not kept per sample. */
    snapprof_stats_t st = {.size = sizeof st};
    if (rc == 0)
        rc = replay_records(buf, len, from, into, &st);
    free(buf);
    if (rc != 0)
        return rc;
    info.stats = &st;
    return into->ops->xOnProfileCompleted != NULL
               ? into->ops->xOnProfileCompleted(into->user_data, &info)
               : 0;
}

int snapprof_flight_builder_collect(snapprof_builder_t *flight, uint64_t since_ns, void **bytes,
                                    size_t *size)
{
    if (bytes == NULL || size == NULL || flight_of(flight) == NULL)
        return -EINVAL;
    *bytes = NULL;
    *size = 0;
    snapprof_builder_t *pprof;
    int rc = snapprof_pprof_builder_create_in_memory(&pprof);
    if (rc != 0)
        return rc;
    rc = snapprof_flight_builder_replay(flight, since_ns, pprof);
    if (rc == 0)
        rc = snapprof_pprof_builder_take_bytes(pprof, bytes, size);
    snapprof_builder_destroy(pprof);
    return rc;
}

int snapprof_flight_builder_get_info(snapprof_builder_t *flight, snapprof_flight_info_t *info)
{
    flight_t *f = flight_of(flight);
    if (f == NULL || info == NULL || info->size == 0)
        return -EINVAL;
    snapprof_flight_info_t v = {.size = info->size < sizeof v ? info->size : sizeof v};
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n_pieces; i++) {
        const piece_t *p = &f->pieces[i];
        if (p->samples == 0)
            continue;
        v.samples += p->samples;
        if (v.oldest_ns == 0 || p->oldest_ns < v.oldest_ns)
            v.oldest_ns = p->oldest_ns;
        if (p->newest_ns > v.newest_ns)
            v.newest_ns = p->newest_ns;
    }
    v.bytes = f->bytes;
    v.samples_dropped = f->dropped;
    v.samples_failed = f->failed;
    pthread_mutex_unlock(&f->lock);
    memcpy(info, &v, v.size);
    return 0;
}
