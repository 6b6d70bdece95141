/* Timeline builder: every sample with its time and thread, written as
 * Chrome trace-event JSON for Perfetto (ui.perfetto.dev) and
 * chrome://tracing: a flame chart over time per thread, like the ones V8's
 * CPU profiler and frame profilers draw.
 *
 * What the file holds (Trace Event Format):
 *   - "M" events naming the process and each thread;
 *   - one "P" (sample) event per sample: ts, pid, tid, "sf" (its stack in
 *     the "stackFrames" dictionary) and its labels as args;
 *   - "X" (complete) slices per thread: consecutive samples that share the
 *     outer part of their stacks extend the same slices, so the slices
 *     nest perfectly (which Perfetto requires) and read as a flame chart.
 *     A sample stands for one sampling period: a thread that goes
 *     unsampled for more than two periods (idle in CPU mode) closes its
 *     slices one period after its last sample;
 *   - when the program marked app frames, one "X" slice per frame on an
 *     "app frames" track (tid 0), hitches named as such.
 * Samples are kept compactly (stack id, time, thread, labels id) while the
 * profile runs, and symbolized and written when it completes, so the
 * sampling thread never waits for DWARF or the disk. */
#include "profile_builder/profile_builder_internal.h"
#include "profile_builder/stack_table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct trace_sample {
    int64_t stack;
    uint64_t timestamp_ns;
    pid_t tid;
    int32_t labels; /* id of the interned JSON args text, -1 for none */
    unsigned flags;
} trace_sample_t;

typedef struct trace_thread {
    pid_t tid;
    uint32_t name; /* interned */
} trace_thread_t;

typedef struct trace_builder {
    snapprof__output_t out;
    snapprof__stack_table_t *stacks;
    trace_sample_t *samples;
    size_t n_samples, cap_samples;
    trace_thread_t *threads;
    size_t n_threads, cap_threads;
    uint64_t start_mono_ns;
    int have_start;
} trace_builder_t;

/* ------------------------------------------------------------------------ */
/* JSON text                                                                */
/* ------------------------------------------------------------------------ */

/* Text being made: in memory (fd < 0), or streamed to fd in chunks so a
 * long profile never needs its whole file in memory. */
typedef struct text {
    char *p;
    size_t len, cap;
    int err;
    int fd;
} text_t;

#define TEXT_FLUSH_AT ((size_t)256 * 1024)

static void flush_text(text_t *t)
{
    if (t->err == 0 && t->fd >= 0 && t->len > 0) {
        t->err = snapprof__output_write_all(t->fd, t->p, t->len);
        t->len = 0;
    }
}

static void put(text_t *t, const char *s, size_t n)
{
    if (t->err)
        return;
    if (t->fd >= 0 && t->len + n > TEXT_FLUSH_AT)
        flush_text(t);
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (p == NULL) {
            t->err = -ENOMEM;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void puts_(text_t *t, const char *s)
{
    put(t, s, strlen(s));
}

static void printf_(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void printf_(text_t *t, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(t, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = (s[0] & 0xe0) == 0xc0   ? 2
               : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* A JSON string: quotes, escapes, and '?' for bytes that are not UTF-8
 * (JSON readers reject them). */
static void put_str(text_t *t, const char *s)
{
    put(t, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            put(t, e, 2);
            p++;
        } else if (*p < 0x20) {
            printf_(t, "\\u%04x", *p);
            p++;
        } else {
            size_t n = utf8_len(p);
            if (n == 0) {
                put(t, "?", 1);
                p++;
            } else {
                put(t, (const char *)p, n);
                p += n;
            }
        }
    }
    put(t, "\"", 1);
}

/* Microseconds since the profile started, exact to the nanosecond. */
static void put_us(text_t *t, uint64_t ns)
{
    printf_(t, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

/* ------------------------------------------------------------------------ */
/* Collecting                                                               */
/* ------------------------------------------------------------------------ */

static int trace_on_profile_started(void *user_data, const snapprof_profile_info_t *info)
{
    trace_builder_t *b = user_data;
    if (info != NULL) {
        b->start_mono_ns = info->start_mono_ns;
        b->have_start = 1;
    }
    return 0;
}

/* The labels as the args of a JSON object, interned: "k":"v","n":1 */
static int intern_labels(trace_builder_t *b, const snapprof_sample_t *s, int32_t *out)
{
    *out = -1;
    if (s->label_count == 0 && !(s->flags & SNAPPROF_SAMPLE_REUSED))
        return 0;
    text_t t = {.fd = -1};
    for (size_t i = 0; i < s->label_count; i++) {
        const snapprof_label_t *l = &s->labels[i];
        if (i > 0)
            put(&t, ",", 1);
        put_str(&t, l->key ? l->key : "");
        put(&t, ":", 1);
        if (l->str != NULL)
            put_str(&t, l->str);
        else
            printf_(&t, "%" PRId64, l->num);
    }
    if (s->flags & SNAPPROF_SAMPLE_REUSED)
        puts_(&t, s->label_count ? ",\"reused\":true" : "\"reused\":true");
    int64_t id = t.err ? t.err : snapprof__stack_table_intern(b->stacks, t.p ? t.p : "");
    free(t.p);
    if (id < 0)
        return (int)id;
    *out = (int32_t)id;
    return 0;
}

static int note_thread(trace_builder_t *b, pid_t tid, const char *name)
{
    for (size_t i = 0; i < b->n_threads; i++)
        if (b->threads[i].tid == tid)
            return 0;
    if (b->n_threads == b->cap_threads) {
        size_t cap = b->cap_threads ? b->cap_threads * 2 : 16;
        trace_thread_t *n = realloc(b->threads, cap * sizeof *n);
        if (n == NULL)
            return -ENOMEM;
        b->threads = n;
        b->cap_threads = cap;
    }
    int64_t id = snapprof__stack_table_intern(b->stacks, name ? name : "");
    if (id < 0)
        return (int)id;
    b->threads[b->n_threads++] = (trace_thread_t){tid, (uint32_t)id};
    return 0;
}

static int trace_on_sample(void *user_data, const snapprof_sample_t *s)
{
    trace_builder_t *b = user_data;
    if (s == NULL || (s->frame_count != 0 && s->frames == NULL) ||
        (s->label_count != 0 && s->labels == NULL))
        return -EINVAL;
    if (b->n_samples == b->cap_samples) {
        size_t cap = b->cap_samples ? b->cap_samples * 2 : 1024;
        trace_sample_t *n = realloc(b->samples, cap * sizeof *n);
        if (n == NULL)
            return -ENOMEM;
        b->samples = n;
        b->cap_samples = cap;
    }
    int64_t stack = snapprof__stack_table_add(b->stacks, s->frames, s->frame_count);
    if (stack < 0)
        return (int)stack;
    int32_t labels;
    int err = intern_labels(b, s, &labels);
    if (err == 0)
        err = note_thread(b, s->tid, s->thread_name);
    if (err != 0)
        return err;
    b->samples[b->n_samples++] = (trace_sample_t){
        .stack = stack,
        .timestamp_ns = s->timestamp_ns,
        .tid = s->tid,
        .labels = labels,
        .flags = s->flags,
    };
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct writer {
    const trace_builder_t *b;
    text_t *t;
    pid_t pid;
    uint64_t base_ns;
    int first; /* no event written yet */
} writer_t;

static void begin_event(writer_t *w)
{
    puts_(w->t, w->first ? "\n" : ",\n");
    w->first = 0;
}

static uint64_t rel(const writer_t *w, uint64_t ns)
{
    return ns > w->base_ns ? ns - w->base_ns : 0;
}

static void slice(writer_t *w, pid_t tid, uint32_t node, uint64_t start_ns, uint64_t end_ns)
{
    begin_event(w);
    puts_(w->t, "{\"ph\":\"X\",\"cat\":\"stack\",\"name\":");
    put_str(w->t, snapprof__stack_table_name(w->b->stacks, node));
    printf_(w->t, ",\"pid\":%d,\"tid\":%d,\"ts\":", (int)w->pid, (int)tid);
    put_us(w->t, rel(w, start_ns));
    puts_(w->t, ",\"dur\":");
    put_us(w->t, end_ns > start_ns ? end_ns - start_ns : 0);
    puts_(w->t, "}");
}

static int sample_cmp(const void *a, const void *b)
{
    const trace_sample_t *x = *(trace_sample_t *const *)a, *y = *(trace_sample_t *const *)b;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->timestamp_ns != y->timestamp_ns)
        return x->timestamp_ns < y->timestamp_ns ? -1 : 1;
    return x < y ? -1 : x > y; /* stable: arrival order */
}

/* The slices of one thread's samples (sorted by time). open[] and
 * open_start[] are scratch of node_count entries. */
static void thread_slices(writer_t *w, trace_sample_t *const *s, size_t n, uint64_t period,
                          uint32_t *path, uint32_t *open, uint64_t *open_start)
{
    size_t depth_open = 0;
    uint64_t prev_ns = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t ts = s[i]->timestamp_ns;
        if (depth_open > 0 && ts - prev_ns > 2 * period) {
            /* Not sampled for a while (idle): what ran last ends one
             * period after it was seen. */
            while (depth_open > 0) {
                depth_open--;
                slice(w, s[i]->tid, open[depth_open], open_start[depth_open], prev_ns + period);
            }
        }
        uint32_t leaf = snapprof__stack_table_leaf(w->b->stacks, s[i]->stack);
        size_t depth = snapprof__stack_table_depth(w->b->stacks, leaf);
        uint32_t node = leaf;
        for (size_t d = depth; d-- > 0;) {
            path[d] = node;
            node = snapprof__stack_table_parent(w->b->stacks, node);
        }
        size_t common = 0;
        while (common < depth_open && common < depth && open[common] == path[common])
            common++;
        while (depth_open > common) {
            depth_open--;
            slice(w, s[i]->tid, open[depth_open], open_start[depth_open], ts);
        }
        for (; depth_open < depth; depth_open++) {
            open[depth_open] = path[depth_open];
            open_start[depth_open] = ts;
        }
        prev_ns = ts;
    }
    while (depth_open > 0) {
        depth_open--;
        slice(w, s[n - 1]->tid, open[depth_open], open_start[depth_open], prev_ns + period);
    }
}

static void write_samples(writer_t *w, trace_sample_t *const *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        begin_event(w);
        printf_(w->t,
                "{\"ph\":\"P\",\"name\":\"sample\",\"pid\":%d,\"tid\":%d,\"ts\":", (int)w->pid,
                (int)s[i]->tid);
        put_us(w->t, rel(w, s[i]->timestamp_ns));
        uint32_t leaf = snapprof__stack_table_leaf(w->b->stacks, s[i]->stack);
        if (leaf != 0)
            printf_(w->t, ",\"sf\":\"%u\"", leaf);
        if (s[i]->labels >= 0) {
            puts_(w->t, ",\"args\":{");
            puts_(w->t, snapprof__stack_table_string(w->b->stacks, (uint32_t)s[i]->labels));
            puts_(w->t, "}");
        }
        puts_(w->t, "}");
    }
}

static void write_app_frames(writer_t *w, const snapprof_profile_info_t *info)
{
    if (info->app_frame_count == 0 || info->app_frames == NULL)
        return;
    begin_event(w);
    printf_(w->t,
            "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"name\":\"app frames\"}}",
            (int)w->pid);
    for (size_t i = 0; i < info->app_frame_count; i++) {
        const snapprof_app_frame_t *f = &info->app_frames[i];
        begin_event(w);
        printf_(w->t, "{\"ph\":\"X\",\"cat\":\"app_frame\",\"name\":\"%s %" PRIu64 "\",",
                f->hitch ? "hitch" : "frame", f->id);
        printf_(w->t, "\"pid\":%d,\"tid\":0,\"ts\":", (int)w->pid);
        put_us(w->t, rel(w, f->begin_ns));
        puts_(w->t, ",\"dur\":");
        put_us(w->t, f->end_ns > f->begin_ns ? f->end_ns - f->begin_ns : 0);
        printf_(w->t, ",\"args\":{\"frame\":%" PRIu64 ",\"hitch\":%s}}", f->id,
                f->hitch ? "true" : "false");
    }
}

static void write_stack_frames(writer_t *w)
{
    puts_(w->t, "\n],\n\"stackFrames\":{");
    size_t n = snapprof__stack_table_node_count(w->b->stacks);
    for (uint32_t node = 1; node < n; node++) {
        printf_(w->t, "%s\n\"%u\":{\"name\":", node > 1 ? "," : "", node);
        put_str(w->t, snapprof__stack_table_name(w->b->stacks, node));
        uint32_t parent = snapprof__stack_table_parent(w->b->stacks, node);
        if (parent != 0)
            printf_(w->t, ",\"parent\":\"%u\"", parent);
        puts_(w->t, "}");
    }
    puts_(w->t, "\n}}\n");
}

static int trace_on_profile_completed(void *user_data, const snapprof_profile_info_t *info)
{
    trace_builder_t *b = user_data;
    if (info == NULL)
        return -EINVAL;
    int err = snapprof__stack_table_resolve(b->stacks);
    if (err != 0)
        return err;
    size_t n_nodes = snapprof__stack_table_node_count(b->stacks);
    trace_sample_t **sorted = malloc((b->n_samples + 1) * sizeof *sorted);
    uint32_t *path = malloc(n_nodes * sizeof *path);
    uint32_t *open = malloc(n_nodes * sizeof *open);
    uint64_t *open_start = malloc(n_nodes * sizeof *open_start);
    text_t t = {.fd = -1};
    char *tmp = NULL;
    if (sorted == NULL || path == NULL || open == NULL || open_start == NULL) {
        err = -ENOMEM;
        goto out;
    }
    t.fd = snapprof__output_open_temp(&b->out, &tmp);
    if (t.fd < 0) {
        err = t.fd;
        goto out;
    }
    for (size_t i = 0; i < b->n_samples; i++)
        sorted[i] = &b->samples[i];
    qsort(sorted, b->n_samples, sizeof *sorted, sample_cmp);

    writer_t w = {
        .b = b,
        .t = &t,
        .pid = getpid(),
        .base_ns = b->have_start  ? b->start_mono_ns
                   : b->n_samples ? sorted[0]->timestamp_ns
                                  : 0,
        .first = 1,
    };
    uint64_t period = info->period_ns ? info->period_ns : 10000000u;
    printf_(&t,
            "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"snapprof\","
            "\"period_ns\":%" PRIu64 ",\"mode\":\"%s\"},\n\"traceEvents\":[",
            period, info->mode == SNAPPROF_MODE_WALL ? "wall" : "cpu");
    begin_event(&w);
    printf_(&t,
            "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"name\":\"snapprof\"}}",
            (int)w.pid, (int)w.pid);
    for (size_t i = 0; i < b->n_threads; i++) {
        begin_event(&w);
        printf_(&t,
                "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                (int)w.pid, (int)b->threads[i].tid);
        put_str(&t, snapprof__stack_table_string(b->stacks, b->threads[i].name));
        puts_(&t, "}}");
    }
    write_samples(&w, sorted, b->n_samples);
    for (size_t i = 0; i < b->n_samples;) {
        size_t j = i;
        while (j < b->n_samples && sorted[j]->tid == sorted[i]->tid)
            j++;
        thread_slices(&w, sorted + i, j - i, period, path, open, open_start);
        i = j;
    }
    write_app_frames(&w, info);
    write_stack_frames(&w);
    flush_text(&t);
    err = snapprof__output_commit(&b->out, t.fd, tmp, t.err);
out:
    free(sorted);
    free(path);
    free(open);
    free(open_start);
    free(t.p);
    return err;
}

static void trace_destroy(void *user_data)
{
    trace_builder_t *b = user_data;
    if (b == NULL)
        return;
    snapprof__stack_table_destroy(b->stacks);
    snapprof__output_free(&b->out);
    free(b->samples);
    free(b->threads);
    free(b);
}

static const snapprof_builder_ops_t trace_ops = {
    .version = SNAPPROF_BUILDER_OPS_VERSION,
    .name = "trace",
    .xOnProfileStarted = trace_on_profile_started,
    .xOnSample = trace_on_sample,
    .xOnProfileCompleted = trace_on_profile_completed,
    .xDestroy = trace_destroy,
};

int snapprof_trace_builder_create(const char *path, snapprof_builder_t **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    trace_builder_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return -ENOMEM;
    int err = snapprof__output_resolve(path, &b->out);
    if (err == 0)
        err = snapprof__stack_table_create(&b->stacks);
    if (err == 0)
        err = snapprof_builder_create(&trace_ops, b, out);
    if (err == 0)
        (*out)->output = &b->out;
    if (err != 0)
        trace_destroy(b);
    return err;
}
