/* Timeline builder: every sample with its time and thread, written as
 * Chrome trace-event JSON for Perfetto (ui.perfetto.dev) and
 * chrome://tracing: a flame chart over time per thread, like the ones V8's
 * CPU profiler and frame profilers draw.
 *
 * What the file holds (Trace Event Format):
 *   - "M" events naming the process and each thread;
 *   - one "P" (sample) event per sample: ts, pid, tid, "sf" (its stack in
 *     the "stackFrames" dictionary), "weight" (microseconds, as in the
 *     format's "samples" array) and its labels as args;
 *   - "X" (complete) slices per thread: each sample is a stretch of the
 *     thread's track as long as its weight (the CPU time it stands for in
 *     CPU mode, the wall time in wall mode), ending where it was taken
 *     (the time before a sample is what it stands for); consecutive
 *     samples that share the outer part of their stacks extend the same
 *     slices, so the slices nest perfectly (which Perfetto requires), read
 *     as a flame chart, and give each function the same share of the
 *     time as the pprof profile and the folded file of the same run do.
 *     A stretch that would start less than one period after the previous
 *     one ended follows it directly (the gap is the signal's latency or a
 *     short wait for a core), one that would overlap it starts where it
 *     ended; after a longer gap (idle in CPU mode) the slices close and
 *     open again. A thread's "[kernel and unsampled]" remainder is one
 *     stretch as long as the CPU time no sample placed, where it was
 *     delivered (when the thread left or the profile ended). Samples that
 *     weigh nothing (a wall-mode capture of CPU time) are "P" events only;
 *   - when the program marked app frames, one "X" slice per frame on an
 *     "app frames" track (tid 0), hitches named as such, with the time
 *     each zone took within the frame in its args ("zones_ms");
 *   - zones (snapprof_zone_begin/_end) as exact nested "X" slices on a
 *     track of their own per thread ("<thread> zones", tid ZONE_TID + tid:
 *     sampled and exact slices do not nest with each other), instants as
 *     "i" events on that track, and one "C" event per counter set (a
 *     track per counter);
 *   - timed functions (snapprof_func_enter/_exit, -finstrument-functions)
 *     as exact nested "X" slices on a "<thread> functions" track (tid
 *     FUNC_TID + tid), named by symbolizing their addresses.
 * Samples are kept compactly (stack id, time, thread, labels id) while the
 * profile runs, and symbolized and written when it completes, so the
 * sampling thread never waits for DWARF or the disk. */
#include "common/array.h"
#include "profile_builder/profile_builder_internal.h"
#include "profile_builder/profile_builder_trace_json.h"
#include "profile_builder/stack_table.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct trace_sample {
    int64_t stack;
    uint64_t timestamp_ns;
    uint64_t weight_ns[2]; /* [0] cpu_ns, [1] wall_ns; the mode picks one */
    pid_t tid;
    int32_t labels; /* id of the interned JSON args text, -1 for none */
    unsigned flags;
} trace_sample_t;

typedef struct trace_thread {
    pid_t tid;
    uint32_t name; /* interned */
} trace_thread_t;

typedef struct trace_builder {
    snapprof__stack_builder_t base; /* first: snapprof__stack_builder_create() fills it */
    trace_sample_t *samples;
    size_t n_samples, cap_samples;
    trace_thread_t *threads;
    size_t n_threads, cap_threads;
    uint64_t start_mono_ns;
    int have_start;
} trace_builder_t;

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
    snapprof__json_text_t t = {.fd = -1};
    for (size_t i = 0; i < s->label_count; i++) {
        const snapprof_label_t *l = &s->labels[i];
        if (i > 0)
            snapprof__json_put(&t, ",", 1);
        snapprof__json_str(&t, l->key ? l->key : "");
        snapprof__json_put(&t, ":", 1);
        if (l->str != NULL)
            snapprof__json_str(&t, l->str);
        else
            snapprof__json_printf(&t, "%" PRId64, l->num);
    }
    if (s->flags & SNAPPROF_SAMPLE_REUSED)
        snapprof__json_puts(&t, s->label_count ? ",\"reused\":true" : "\"reused\":true");
    int64_t id = t.err ? t.err : snapprof__stack_table_intern(b->base.stacks, t.p ? t.p : "");
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
    trace_thread_t *n =
        snapprof__array_room(b->threads, &b->cap_threads, b->n_threads, sizeof *n, 16);
    if (n == NULL)
        return -ENOMEM;
    b->threads = n;
    int64_t id = snapprof__stack_table_intern(b->base.stacks, name ? name : "");
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
    trace_sample_t *n =
        snapprof__array_room(b->samples, &b->cap_samples, b->n_samples, sizeof *n, 1024);
    if (n == NULL)
        return -ENOMEM;
    b->samples = n;
    int64_t stack = snapprof__stack_table_add(b->base.stacks, s->frames, s->frame_count);
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
        .weight_ns = {s->cpu_ns, s->wall_ns},
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
    snapprof__json_text_t *t;
    pid_t pid;
    uint64_t base_ns;
    int weight; /* index into trace_sample_t.weight_ns: 1 in wall mode */
    int first;  /* no event written yet */
} writer_t;

static void begin_event(writer_t *w)
{
    snapprof__json_puts(w->t, w->first ? "\n" : ",\n");
    w->first = 0;
}

static uint64_t rel(const writer_t *w, uint64_t ns)
{
    return ns > w->base_ns ? ns - w->base_ns : 0;
}

static void slice(writer_t *w, pid_t tid, uint32_t node, uint64_t start_ns, uint64_t end_ns)
{
    begin_event(w);
    snapprof__json_puts(w->t, "{\"ph\":\"X\",\"cat\":\"stack\",\"name\":");
    snapprof__json_str(w->t, snapprof__stack_table_name(w->b->base.stacks, node));
    snapprof__json_printf(w->t, ",\"pid\":%d,\"tid\":%d,\"ts\":", (int)w->pid, (int)tid);
    snapprof__json_us(w->t, rel(w, start_ns));
    snapprof__json_puts(w->t, ",\"dur\":");
    snapprof__json_us(w->t, end_ns > start_ns ? end_ns - start_ns : 0);
    snapprof__json_puts(w->t, "}");
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

/* The slices of one thread's samples (sorted by time): each sample a
 * stretch as long as its weight, ending when it was taken, after the
 * previous one (see the top of the file). open[] and open_start[] are
 * scratch of node_count entries. */
static void thread_slices(writer_t *w, trace_sample_t *const *s, size_t n, uint64_t period,
                          uint32_t *path, uint32_t *open, uint64_t *open_start)
{
    size_t depth_open = 0;
    uint64_t cursor = 0; /* where the previous stretch ended */
    for (size_t i = 0; i < n; i++) {
        uint64_t weight = s[i]->weight_ns[w->weight];
        if (weight == 0)
            continue;
        uint64_t ts = s[i]->timestamp_ns;
        uint64_t start = ts > weight ? ts - weight : 0;
        /* Never before the profile started, where times are cut to 0 (the
         * remainder of the threads that came and went between two ticks
         * can weigh more than the time since the start). */
        if (start < w->base_ns)
            start = w->base_ns;
        if (depth_open > 0 && start > cursor + period) {
            /* Not running for a while (idle, or waiting for a core). */
            while (depth_open > 0) {
                depth_open--;
                slice(w, s[i]->tid, open[depth_open], open_start[depth_open], cursor);
            }
        }
        if (depth_open > 0 || start < cursor)
            start = cursor;
        uint32_t leaf = snapprof__stack_table_leaf(w->b->base.stacks, s[i]->stack);
        size_t depth = snapprof__stack_table_depth(w->b->base.stacks, leaf);
        uint32_t node = leaf;
        for (size_t d = depth; d-- > 0;) {
            path[d] = node;
            node = snapprof__stack_table_parent(w->b->base.stacks, node);
        }
        size_t common = 0;
        while (common < depth_open && common < depth && open[common] == path[common])
            common++;
        while (depth_open > common) {
            depth_open--;
            slice(w, s[i]->tid, open[depth_open], open_start[depth_open], start);
        }
        for (; depth_open < depth; depth_open++) {
            open[depth_open] = path[depth_open];
            open_start[depth_open] = start;
        }
        cursor = start + weight;
    }
    while (depth_open > 0) {
        depth_open--;
        slice(w, s[n - 1]->tid, open[depth_open], open_start[depth_open], cursor);
    }
}

static void write_samples(writer_t *w, trace_sample_t *const *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        begin_event(w);
        snapprof__json_printf(
            w->t, "{\"ph\":\"P\",\"name\":\"sample\",\"pid\":%d,\"tid\":%d,\"ts\":", (int)w->pid,
            (int)s[i]->tid);
        snapprof__json_us(w->t, rel(w, s[i]->timestamp_ns));
        snapprof__json_puts(w->t, ",\"weight\":");
        snapprof__json_us(w->t, s[i]->weight_ns[w->weight]);
        uint32_t leaf = snapprof__stack_table_leaf(w->b->base.stacks, s[i]->stack);
        if (leaf != 0)
            snapprof__json_printf(w->t, ",\"sf\":\"%u\"", leaf);
        if (s[i]->labels >= 0) {
            snapprof__json_puts(w->t, ",\"args\":{");
            snapprof__json_puts(
                w->t, snapprof__stack_table_string(w->b->base.stacks, (uint32_t)s[i]->labels));
            snapprof__json_puts(w->t, "}");
        }
        snapprof__json_puts(w->t, "}");
    }
}

/* The zone and function tracks of thread tid. Linux tids stay below 2^22. */
#define ZONE_TID 1000000000
#define FUNC_TID 2000000000

typedef struct zone_slice {
    const char *name;
    uint64_t begin_ns, end_ns;
    int outermost; /* no enclosing zone of the same name: counts for frames */
} zone_slice_t;

typedef struct open_zone {
    const char *name;
    uint64_t begin_ns;
    int valid;
} open_zone_t;

typedef struct open_fn {
    uintptr_t address;
    uint64_t begin_ns;
    int valid;
} open_fn_t;

typedef struct zone_time {
    size_t frame;
    const char *name;
    uint64_t ns;
} zone_time_t;

static void write_app_frames(writer_t *w, const snapprof_profile_info_t *info,
                             const zone_time_t *zt, size_t n_zt)
{
    if (info->app_frame_count == 0 || info->app_frames == NULL)
        return;
    begin_event(w);
    snapprof__json_printf(w->t,
                          "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,"
                          "\"args\":{\"name\":\"app frames\"}}",
                          (int)w->pid);
    for (size_t i = 0; i < info->app_frame_count; i++) {
        const snapprof_app_frame_t *f = &info->app_frames[i];
        begin_event(w);
        snapprof__json_printf(w->t,
                              "{\"ph\":\"X\",\"cat\":\"app_frame\",\"name\":\"%s %" PRIu64 "\",",
                              f->hitch ? "hitch" : "frame", f->id);
        snapprof__json_printf(w->t, "\"pid\":%d,\"tid\":0,\"ts\":", (int)w->pid);
        snapprof__json_us(w->t, rel(w, f->begin_ns));
        snapprof__json_puts(w->t, ",\"dur\":");
        snapprof__json_us(w->t, f->end_ns > f->begin_ns ? f->end_ns - f->begin_ns : 0);
        snapprof__json_printf(w->t, ",\"args\":{\"frame\":%" PRIu64 ",\"hitch\":%s", f->id,
                              f->hitch ? "true" : "false");
        /* How long each zone took within the frame: the one that grew
         * explains a hitch. */
        while (n_zt > 0 && zt->frame < i) {
            zt++;
            n_zt--;
        }
        if (n_zt > 0 && zt->frame == i) {
            snapprof__json_puts(w->t, ",\"zones_ms\":{");
            for (int first = 1; n_zt > 0 && zt->frame == i; zt++, n_zt--, first = 0) {
                if (!first)
                    snapprof__json_puts(w->t, ",");
                snapprof__json_str(w->t, zt->name);
                snapprof__json_printf(w->t, ":%.3f", (double)zt->ns / 1e6);
            }
            snapprof__json_puts(w->t, "}");
        }
        snapprof__json_puts(w->t, "}}");
    }
}

/* ------------------------------------------------------------------------ */
/* Zones, instants, counters                                                */
/* ------------------------------------------------------------------------ */

static int event_cmp(const void *a, const void *b)
{
    const snapprof_event_t *x = *(const snapprof_event_t *const *)a;
    const snapprof_event_t *y = *(const snapprof_event_t *const *)b;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->time_ns != y->time_ns)
        return x->time_ns < y->time_ns ? -1 : 1;
    return x < y ? -1 : x > y; /* stable: each thread's order */
}

static int zone_time_cmp(const void *a, const void *b)
{
    const zone_time_t *x = a, *y = b;
    if (x->frame != y->frame)
        return x->frame < y->frame ? -1 : 1;
    return strcmp(x->name, y->name);
}

static const char *thread_name_of(const trace_builder_t *b, pid_t tid)
{
    for (size_t i = 0; i < b->n_threads; i++)
        if (b->threads[i].tid == tid)
            return snapprof__stack_table_string(b->base.stacks, b->threads[i].name);
    return NULL;
}

/* Function names by address, symbolized like sampled frames. A small
 * direct-mapped cache: symbolize() caches per module behind it. */
#define FN_CACHE 4096
typedef struct fn_cache {
    uintptr_t addr[FN_CACHE];
    const char *name[FN_CACHE];
} fn_cache_t;

static const char *fn_name(const trace_builder_t *b, fn_cache_t *c, uintptr_t addr)
{
    size_t i = (size_t)((addr * 0x9e3779b97f4a7c15u) >> 52) & (FN_CACHE - 1);
    if (c->addr[i] == addr && c->name[i] != NULL)
        return c->name[i];
    snapprof_frame_t f = {
        .pc = addr, .module = snapprof_module_find(addr), .kind = SNAPPROF_FRAME_NATIVE};
    snapprof_symbol_t syms[8];
    const char *name = NULL;
    if (snapprof_symbolize(&f, syms, 8) > 0)
        name = syms[0].name;
    if (name == NULL) {
        char hex[32];
        snprintf(hex, sizeof hex, "0x%" PRIxPTR, addr);
        int64_t id = snapprof__stack_table_intern(b->base.stacks, hex);
        name = id >= 0 ? snapprof__stack_table_string(b->base.stacks, (uint32_t)id) : "?";
    }
    c->addr[i] = addr;
    c->name[i] = name;
    return name;
}

static void func_slice_event(writer_t *w, pid_t tid, const char *name, uint64_t begin_ns,
                             uint64_t end_ns, int open)
{
    begin_event(w);
    snapprof__json_puts(w->t, "{\"ph\":\"X\",\"cat\":\"function\",\"name\":");
    snapprof__json_str(w->t, name);
    snapprof__json_printf(w->t, ",\"pid\":%d,\"tid\":%d,\"ts\":", (int)w->pid, FUNC_TID + (int)tid);
    snapprof__json_us(w->t, rel(w, begin_ns));
    snapprof__json_puts(w->t, ",\"dur\":");
    snapprof__json_us(w->t, end_ns > begin_ns ? end_ns - begin_ns : 0);
    snapprof__json_printf(w->t, ",\"args\":{\"thread\":%d%s}}", (int)tid,
                          open ? ",\"open\":true" : "");
}

static void track_name(writer_t *w, pid_t tid, int base, const char *what)
{
    const char *tn = thread_name_of(w->b, tid);
    char name[96];
    if (tn != NULL && tn[0] != '\0')
        snprintf(name, sizeof name, "%s %s", tn, what);
    else
        snprintf(name, sizeof name, "thread %d %s", (int)tid, what);
    begin_event(w);
    snapprof__json_printf(
        w->t, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
        (int)w->pid, base + (int)tid);
    snapprof__json_str(w->t, name);
    snapprof__json_puts(w->t, "}}");
}

static void zone_slice_event(writer_t *w, pid_t tid, const zone_slice_t *z, int open)
{
    begin_event(w);
    snapprof__json_puts(w->t, "{\"ph\":\"X\",\"cat\":\"zone\",\"name\":");
    snapprof__json_str(w->t, z->name);
    snapprof__json_printf(w->t, ",\"pid\":%d,\"tid\":%d,\"ts\":", (int)w->pid, ZONE_TID + (int)tid);
    snapprof__json_us(w->t, rel(w, z->begin_ns));
    snapprof__json_puts(w->t, ",\"dur\":");
    snapprof__json_us(w->t, z->end_ns > z->begin_ns ? z->end_ns - z->begin_ns : 0);
    snapprof__json_printf(w->t, ",\"args\":{\"thread\":%d%s}}", (int)tid,
                          open ? ",\"open\":true" : "");
}

/* Writes the zones, instants and counters of info->events, and collects
 * the zone slices into *zs (for the frames' zone times). end_ns closes
 * zones still open. Returns 0 or -ENOMEM. */
static int write_events(writer_t *w, const snapprof_profile_info_t *info, uint64_t end_ns,
                        zone_slice_t **zs, size_t *n_zs)
{
    *zs = NULL;
    *n_zs = 0;
    size_t n = info->events ? info->event_count : 0;
    if (n == 0)
        return 0;
    const snapprof_event_t **ev = malloc(n * sizeof *ev);
    zone_slice_t *slices = malloc(n * sizeof *slices); /* at most one per begin */
    open_fn_t *open_fn = malloc((SNAPPROF_CALL_DEPTH_MAX + 1) * sizeof *open_fn);
    fn_cache_t *fns = calloc(1, sizeof *fns);
    if (ev == NULL || slices == NULL || open_fn == NULL || fns == NULL) {
        free(ev);
        free(slices);
        free(open_fn);
        free(fns);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        ev[i] = &info->events[i];
    qsort(ev, n, sizeof *ev, event_cmp);
    /* The open zones of the thread at hand, by depth (1-based). */
    open_zone_t open[SNAPPROF_ZONE_DEPTH_MAX + 1];
    size_t n_slices = 0;
    for (size_t i = 0; i < n;) {
        pid_t tid = ev[i]->tid;
        size_t j = i;
        while (j < n && ev[j]->tid == tid)
            j++;
        int has_zones = 0, has_funcs = 0;
        for (size_t k = i; k < j; k++) {
            has_zones |= ev[k]->kind <= SNAPPROF_EVENT_INSTANT;
            has_funcs |= ev[k]->kind == SNAPPROF_EVENT_FUNC_ENTER;
        }
        if (has_zones)
            track_name(w, tid, ZONE_TID, "zones");
        if (has_funcs)
            track_name(w, tid, FUNC_TID, "functions");
        memset(open, 0, sizeof open);
        memset(open_fn, 0, (SNAPPROF_CALL_DEPTH_MAX + 1) * sizeof *open_fn);
        for (size_t k = i; k < j; k++) {
            const snapprof_event_t *e = ev[k];
            uint32_t d = e->depth;
            switch (e->kind) {
            case SNAPPROF_EVENT_ZONE_BEGIN:
            case SNAPPROF_EVENT_ZONE_END:
                if (d == 0 || d > SNAPPROF_ZONE_DEPTH_MAX)
                    break;
                if (e->kind == SNAPPROF_EVENT_ZONE_END && open[d].valid &&
                    strcmp(open[d].name, e->name) == 0) {
                    zone_slice_t *z = &slices[n_slices++];
                    *z = (zone_slice_t){open[d].name, open[d].begin_ns, e->time_ns, 1};
                    for (uint32_t a = 1; a < d && z->outermost; a++)
                        z->outermost = !(open[a].valid && strcmp(open[a].name, z->name) == 0);
                    zone_slice_event(w, tid, z, 0);
                }
                /* A begin replaces, and an end closes, this level and any
                 * deeper one whose end was lost. */
                for (uint32_t a = d; a <= SNAPPROF_ZONE_DEPTH_MAX; a++)
                    open[a].valid = 0;
                if (e->kind == SNAPPROF_EVENT_ZONE_BEGIN)
                    open[d] = (open_zone_t){e->name, e->time_ns, 1};
                break;
            case SNAPPROF_EVENT_FUNC_ENTER:
            case SNAPPROF_EVENT_FUNC_EXIT:
                if (d == 0 || d > SNAPPROF_CALL_DEPTH_MAX)
                    break;
                if (e->kind == SNAPPROF_EVENT_FUNC_EXIT && open_fn[d].valid &&
                    open_fn[d].address == e->address)
                    func_slice_event(w, tid, fn_name(w->b, fns, e->address), open_fn[d].begin_ns,
                                     e->time_ns, 0);
                for (uint32_t a = d; a <= SNAPPROF_CALL_DEPTH_MAX; a++)
                    open_fn[a].valid = 0;
                if (e->kind == SNAPPROF_EVENT_FUNC_ENTER)
                    open_fn[d] = (open_fn_t){e->address, e->time_ns, 1};
                break;
            case SNAPPROF_EVENT_INSTANT:
                begin_event(w);
                snapprof__json_puts(w->t,
                                    "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"instant\",\"name\":");
                snapprof__json_str(w->t, e->name);
                snapprof__json_printf(w->t, ",\"pid\":%d,\"tid\":%d,\"ts\":", (int)w->pid,
                                      ZONE_TID + (int)tid);
                snapprof__json_us(w->t, rel(w, e->time_ns));
                snapprof__json_printf(w->t, ",\"args\":{\"thread\":%d}}", (int)tid);
                break;
            case SNAPPROF_EVENT_COUNTER:
                begin_event(w);
                snapprof__json_puts(w->t, "{\"ph\":\"C\",\"cat\":\"counter\",\"name\":");
                snapprof__json_str(w->t, e->name);
                snapprof__json_printf(w->t, ",\"pid\":%d,\"tid\":%d,\"ts\":", (int)w->pid,
                                      (int)tid);
                snapprof__json_us(w->t, rel(w, e->time_ns));
                snapprof__json_printf(w->t, ",\"args\":{\"value\":%.17g}}", e->value);
                break;
            }
        }
        for (uint32_t d = 1; d <= SNAPPROF_CALL_DEPTH_MAX; d++)
            if (open_fn[d].valid)
                func_slice_event(w, tid, fn_name(w->b, fns, open_fn[d].address),
                                 open_fn[d].begin_ns,
                                 end_ns > open_fn[d].begin_ns ? end_ns : open_fn[d].begin_ns, 1);
        /* Zones open when the profile ended end there, marked open. */
        for (uint32_t d = 1; d <= SNAPPROF_ZONE_DEPTH_MAX; d++) {
            if (!open[d].valid)
                continue;
            zone_slice_t *z = &slices[n_slices++];
            uint64_t end = end_ns > open[d].begin_ns ? end_ns : open[d].begin_ns;
            *z = (zone_slice_t){open[d].name, open[d].begin_ns, end, 1};
            for (uint32_t a = 1; a < d && z->outermost; a++)
                z->outermost = !(open[a].valid && strcmp(open[a].name, z->name) == 0);
            zone_slice_event(w, tid, z, 1);
        }
        i = j;
    }
    free(ev);
    free(open_fn);
    free(fns);
    *zs = slices;
    *n_zs = n_slices;
    return 0;
}

/* The time each zone name took within each app frame (summed over
 * threads; a zone inside one of its own name counts once), sorted by
 * frame and name. Frames are oldest first and do not overlap. */
static int frame_zone_times(const snapprof_profile_info_t *info, const zone_slice_t *zs,
                            size_t n_zs, zone_time_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t nf = info->app_frames ? info->app_frame_count : 0;
    if (nf == 0 || n_zs == 0)
        return 0;
    zone_time_t *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < n_zs; i++) {
        if (!zs[i].outermost)
            continue;
        /* The first frame that ends after the zone begins. */
        size_t lo = 0, hi = nf;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (info->app_frames[mid].end_ns <= zs[i].begin_ns)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t f = lo; f < nf && info->app_frames[f].begin_ns < zs[i].end_ns; f++) {
            const snapprof_app_frame_t *fr = &info->app_frames[f];
            uint64_t b = fr->begin_ns > zs[i].begin_ns ? fr->begin_ns : zs[i].begin_ns;
            uint64_t e = fr->end_ns < zs[i].end_ns ? fr->end_ns : zs[i].end_ns;
            if (e <= b)
                continue;
            zone_time_t *nv = snapprof__array_room(v, &cap, n, sizeof *nv, 256);
            if (nv == NULL) {
                free(v);
                return -ENOMEM;
            }
            v = nv;
            v[n++] = (zone_time_t){f, zs[i].name, e - b};
        }
    }
    if (n > 0)
        qsort(v, n, sizeof *v, zone_time_cmp);
    /* Sums entries of the same frame and name. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && v[m - 1].frame == v[i].frame && strcmp(v[m - 1].name, v[i].name) == 0)
            v[m - 1].ns += v[i].ns;
        else
            v[m++] = v[i];
    }
    *out = v;
    *n_out = m;
    return 0;
}

static void write_stack_frames(writer_t *w)
{
    snapprof__json_puts(w->t, "\n],\n\"stackFrames\":{");
    size_t n = snapprof__stack_table_node_count(w->b->base.stacks);
    for (uint32_t node = 1; node < n; node++) {
        snapprof__json_printf(w->t, "%s\n\"%u\":{\"name\":", node > 1 ? "," : "", node);
        snapprof__json_str(w->t, snapprof__stack_table_name(w->b->base.stacks, node));
        uint32_t parent = snapprof__stack_table_parent(w->b->base.stacks, node);
        if (parent != 0)
            snapprof__json_printf(w->t, ",\"parent\":\"%u\"", parent);
        snapprof__json_puts(w->t, "}");
    }
    snapprof__json_puts(w->t, "\n}}\n");
}

/* The name of the program, for the process's track: the base name it was
 * started as (program_invocation_short_name: what ps and top show before
 * the main thread renames itself), else its comm, else "snapprof". */
static const char *program_name(char *buf, size_t size)
{
    if (program_invocation_short_name != NULL && program_invocation_short_name[0] != '\0')
        return program_invocation_short_name;
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;
    if (fd >= 0)
        close(fd);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\0'))
        n--;
    if (n <= 0)
        return "snapprof";
    buf[n] = '\0';
    return buf;
}

static int trace_on_profile_completed(void *user_data, const snapprof_profile_info_t *info)
{
    trace_builder_t *b = user_data;
    if (info == NULL)
        return -EINVAL;
    int err = snapprof__stack_table_resolve(b->base.stacks);
    if (err != 0)
        return err;
    size_t n_nodes = snapprof__stack_table_node_count(b->base.stacks);
    trace_sample_t **sorted = malloc((b->n_samples + 1) * sizeof *sorted);
    uint32_t *path = malloc(n_nodes * sizeof *path);
    uint32_t *open = malloc(n_nodes * sizeof *open);
    uint64_t *open_start = malloc(n_nodes * sizeof *open_start);
    snapprof__json_text_t t = {.fd = -1};
    char *tmp = NULL;
    if (sorted == NULL || path == NULL || open == NULL || open_start == NULL) {
        err = -ENOMEM;
        goto out;
    }
    t.fd = snapprof__output_open_temp(&b->base.out, &tmp);
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
        .weight = info->mode == SNAPPROF_MODE_WALL,
    };
    uint64_t period = info->period_ns ? info->period_ns : 10000000u;
    snapprof__json_printf(&t,
                          "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"snapprof\","
                          "\"period_ns\":%" PRIu64 ",\"mode\":\"%s\"",
                          period, info->mode == SNAPPROF_MODE_WALL ? "wall" : "cpu");
    /* Zones, counters and instants the trace lacks: say so in the file. */
    if (info->stats != NULL)
        snapprof__json_printf(&t, ",\"events_dropped\":%" PRIu64 ",\"events_lost\":%" PRIu64,
                              info->stats->events_dropped, info->stats->events_lost);
    snapprof__json_puts(&t, "},\n\"traceEvents\":[");
    begin_event(&w);
    snapprof__json_printf(&t,
                          "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":%d,"
                          "\"args\":{\"name\":",
                          (int)w.pid, (int)w.pid);
    char comm[64];
    snapprof__json_str(&t, program_name(comm, sizeof comm));
    snapprof__json_puts(&t, "}}");
    for (size_t i = 0; i < b->n_threads; i++) {
        begin_event(&w);
        snapprof__json_printf(
            &t, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
            (int)w.pid, (int)b->threads[i].tid);
        snapprof__json_str(&t, snapprof__stack_table_string(b->base.stacks, b->threads[i].name));
        snapprof__json_puts(&t, "}}");
    }
    write_samples(&w, sorted, b->n_samples);
    for (size_t i = 0; i < b->n_samples;) {
        size_t j = i;
        while (j < b->n_samples && sorted[j]->tid == sorted[i]->tid)
            j++;
        thread_slices(&w, sorted + i, j - i, period, path, open, open_start);
        i = j;
    }
    zone_slice_t *zs = NULL;
    zone_time_t *zt = NULL;
    size_t n_zs = 0, n_zt = 0;
    err = write_events(&w, info, b->have_start ? b->start_mono_ns + info->duration_ns : 0, &zs,
                       &n_zs);
    if (err == 0)
        err = frame_zone_times(info, zs, n_zs, &zt, &n_zt);
    write_app_frames(&w, info, zt, n_zt);
    free(zs);
    free(zt);
    if (err != 0 && t.err == 0)
        t.err = err;
    write_stack_frames(&w);
    snapprof__json_flush(&t);
    err = snapprof__output_commit(&b->base.out, t.fd, tmp, t.err);
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
    snapprof__stack_builder_free(&b->base);
    free(b->samples);
    free(b->threads);
    free(b);
}

static const snapprof_builder_ops_t trace_ops = {
    .version = 1, /* receives time samples only */
    .name = "trace",
    .xOnProfileStarted = trace_on_profile_started,
    .xOnSample = trace_on_sample,
    .xOnProfileCompleted = trace_on_profile_completed,
    .xDestroy = trace_destroy,
};

int snapprof_trace_builder_create(const char *path, snapprof_builder_t **out)
{
    return snapprof__stack_builder_create(path, sizeof(trace_builder_t), &trace_ops, out);
}
