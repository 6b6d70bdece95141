/* pprof profile builder, writing: what was collected becomes one
 * perftools.profiles.Profile message (with the run's comments and hidden
 * stats entry), packed, gzipped and put in place atomically. */
#include "profile_builder/profile_builder_pprof.h"

#include "common/stats_text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ZLIB_CONST
#include <zlib.h>

#define GZIP_CHUNK ((size_t)64 * 1024)

/* Where gzip_to() puts the compressed bytes: a file (fd) or memory. */
typedef struct gzip_sink {
    int fd;       /* >= 0: write there */
    uint8_t *mem; /* else: append here (malloc'd) */
    size_t len, cap;
} gzip_sink_t;

static int sink_put(gzip_sink_t *s, const uint8_t *data, size_t n)
{
    if (s->fd >= 0)
        return snapprof__output_write_all(s->fd, data, n);
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : GZIP_CHUNK;
        while (cap < s->len + n)
            cap *= 2;
        uint8_t *m = realloc(s->mem, cap);
        if (m == NULL)
            return -ENOMEM;
        s->mem = m;
        s->cap = cap;
    }
    memcpy(s->mem + s->len, data, n);
    s->len += n;
    return 0;
}

/* Compresses data into sink as one gzip member (what pprof expects on
 * disk, and what /debug/pprof/profile serves). */
static int gzip_to(gzip_sink_t *sink, const uint8_t *data, size_t len)
{
    unsigned char *out = malloc(GZIP_CHUNK);
    if (out == NULL)
        return -ENOMEM;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    /* windowBits 15 + 16 asks zlib for a gzip header and trailer. */
    int zr = deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    if (zr != Z_OK) {
        free(out);
        return zr == Z_MEM_ERROR ? -ENOMEM : SNAPPROF_EENCODE;
    }
    int err = 0;
    int flush;
    do {
        /* avail_in is 32 bits wide: feed large profiles in pieces. */
        size_t take = len > GZIP_CHUNK ? GZIP_CHUNK : len;
        zs.next_in = data;
        zs.avail_in = (uInt)take;
        data += take;
        len -= take;
        flush = len == 0 ? Z_FINISH : Z_NO_FLUSH;
        do {
            zs.next_out = out;
            zs.avail_out = (uInt)GZIP_CHUNK;
            if (deflate(&zs, flush) == Z_STREAM_ERROR) {
                err = SNAPPROF_EENCODE;
                break;
            }
            err = sink_put(sink, out, GZIP_CHUNK - zs.avail_out);
        } while (err == 0 && zs.avail_out == 0);
    } while (err == 0 && flush != Z_FINISH);
    deflateEnd(&zs);
    free(out);
    return err;
}

/* Writes data, gzip-compressed, to the output path atomically (see
 * snapprof__output_commit), or for an in-memory builder into b->mem. On
 * failure no temporary file is left behind, and the bytes of an earlier
 * completion stay. */
static int write_atomically(pprof_builder_t *b, const uint8_t *data, size_t len)
{
    if (b->in_memory) {
        /* The bytes replace the last completion's only once whole. */
        gzip_sink_t sink = {.fd = -1};
        int err = gzip_to(&sink, data, len);
        if (err != 0) {
            free(sink.mem);
            return err;
        }
        free(b->mem);
        b->mem = sink.mem;
        b->mem_len = sink.len;
        return 0;
    }
    char *tmp;
    int fd = snapprof__output_open_temp(&b->out, &tmp);
    if (fd < 0)
        return fd;
    gzip_sink_t sink = {.fd = fd};
    return snapprof__output_commit(&b->out, fd, tmp, gzip_to(&sink, data, len));
}

/* Sets has_functions, has_filenames, has_line_numbers and has_inline_frames
 * of each mapping: true when any of its locations carries that, which is
 * how pprof's own symbolizer sets them. pprof symbolizes a mapping itself
 * (from the binary on disk) only when the first three are all false, and
 * then replaces every Line of it: so they must be true wherever we gave
 * names (or one address without a symbol, a PLT stub, would cost all the
 * others theirs), and false where we had nothing, so that pprof can try. */
static void finish_mappings(pprof_builder_t *b)
{
    for (size_t i = 0; i < b->n_mappings; i++) {
        mapping_entry_t *m = b->mappings[i];
        m->msg.has_functions = m->msg.has_filenames = m->msg.has_line_numbers = 0;
        m->msg.has_inline_frames = 0;
    }
    for (size_t i = 0; i < b->n_locations; i++) {
        const location_entry_t *e = b->locations[i];
        mapping_entry_t *m = e->mapping;
        if (m == NULL)
            continue;
        size_t n_lines = e->msg.n_line;
        for (size_t k = 0; k < n_lines; k++) {
            const Snapprof__Pprof__Function *f = b->functions[e->msg.line[k]->function_id - 1];
            m->msg.has_functions |= f->name != 0;
            m->msg.has_filenames |= f->filename != 0;
            m->msg.has_line_numbers |= e->msg.line[k]->line > 0;
        }
        m->msg.has_inline_frames |= n_lines > 1;
    }
}

/* The strings a completion adds after the interned ones: the comment
 * lines and the hidden stats entry. They are made afresh for every
 * completion and never interned, so a flush with newer counters leaves no
 * stale copies in the table. */
typedef struct run_strings {
    char lines[SNAPPROF__COMMENTS_MAX][SNAPPROF__COMMENT_MAX];
    int n_lines;
    char *stats; /* malloc'd "snapprof-stats/1 ...", or NULL */
} run_strings_t;

/* A few short comment lines (pprof prints every comment above every
 * report), and every counter in the hidden entry: a string-table entry no
 * message refers to, which pprof accepts and never shows (stats_text.h
 * has the format; `snapprof stats FILE` reads it). Returns 0 or -ENOMEM. */
static int make_run_strings(const snapprof_profile_info_t *info, run_strings_t *out)
{
    out->n_lines = 0;
    out->stats = NULL;
    if (info->stats == NULL)
        return 0;
    out->n_lines = snapprof__stats_comments(info->stats, info->period_ns,
                                            info->mode == SNAPPROF_MODE_WALL, out->lines);
    out->stats = snapprof__stats_encode(info->stats);
    return out->stats != NULL ? 0 : -ENOMEM;
}

int snapprof__pprof_on_profile_completed(void *user_data, const snapprof_profile_info_t *info)
{
    pprof_builder_t *b = user_data;
    if (info == NULL)
        return -EINVAL;
    int wall = info->mode == SNAPPROF_MODE_WALL;
    /* The order and names are the Go runtime's CPU convention plus wall
     * time; profiles only merge when these stay the same, so never
     * reorder them. A CPU profile carries only what it measured, samples
     * and CPU time: its samples' wall value would be their count times the
     * period, a "wall" time no clock measured (0.6.0 dropped it). */
    pprof_layout_t layout = {
        .n_types = wall ? 3 : 2,
        .type_names = {b->s_samples, b->s_cpu, b->s_wall},
        .type_units = {b->s_count, b->s_nanoseconds, b->s_nanoseconds},
        .period_type = wall ? b->s_wall : b->s_cpu,
        .period_unit = b->s_nanoseconds,
        .period = (int64_t)info->period_ns,
        .default_type = wall ? b->s_wall : b->s_cpu,
    };
    if (b->calls) {
        /* Function timing: calls and self time per call path. */
        layout.n_types = 2;
        layout.type_names[0] = b->s_calls;
        layout.type_names[1] = b->s_time;
        layout.period_type = layout.default_type = b->s_time;
        layout.period = 1;
    }
    return snapprof__pprof_write(b, info, &layout);
}

int snapprof__pprof_write(pprof_builder_t *b, const snapprof_profile_info_t *info,
                          const pprof_layout_t *layout)
{
    if (info == NULL || layout->n_types < 1 || layout->n_types > VALUE_COUNT ||
        layout->n_comments < 0 || layout->n_comments > SNAPPROF__COMMENTS_MAX)
        return -EINVAL;
    int err = snapprof__pprof_symbolize_locations(b);
    if (err == 0)
        err = snapprof__pprof_apply_hitches(b, info);
    if (err < 0)
        return err;
    run_strings_t run;
    err = make_run_strings(info, &run);
    if (err < 0)
        return err;
    if (layout->comments != NULL)
        run.n_lines = 0; /* the layout's lines instead */
    finish_mappings(b);

    int n_types = layout->n_types;
    Snapprof__Pprof__ValueType types[VALUE_COUNT], period_type;
    Snapprof__Pprof__ValueType *type_ptrs[VALUE_COUNT];
    for (int i = 0; i < n_types; i++) {
        snapprof__pprof__value_type__init(&types[i]);
        types[i].type = layout->type_names[i];
        types[i].unit = layout->type_units[i];
        type_ptrs[i] = &types[i];
    }
    snapprof__pprof__value_type__init(&period_type);
    period_type.type = layout->period_type;
    period_type.unit = layout->period_unit;

    Snapprof__Pprof__Profile profile = SNAPPROF__PPROF__PROFILE__INIT;
    profile.n_sample_type = (size_t)n_types;
    profile.sample_type = type_ptrs;
    /* The entries start with their messages; protobuf-c wants arrays of
     * message pointers, made here for this one pack. */
    Snapprof__Pprof__Sample **samples = malloc((b->n_samples + 1) * sizeof *samples);
    Snapprof__Pprof__Mapping **mappings = malloc((b->n_mappings + 1) * sizeof *mappings);
    Snapprof__Pprof__Location **locations = malloc((b->n_locations + 1) * sizeof *locations);
    size_t n_run = (size_t)run.n_lines + (size_t)layout->n_comments + (run.stats != NULL);
    char **strings = malloc((b->n_strings + n_run) * sizeof *strings);
    int64_t comments[SNAPPROF__COMMENTS_MAX];
    uint8_t *buf = NULL;
    if (samples == NULL || mappings == NULL || locations == NULL || strings == NULL) {
        err = -ENOMEM;
        goto out;
    }
    size_t n_samples = 0;
    for (size_t i = 0; i < b->n_samples; i++) {
        sample_entry_t *e = b->samples[i];
        int empty = 1;
        for (int k = 0; k < n_types; k++)
            empty &= e->values[k] == 0;
        if (layout->skip_empty && empty)
            continue;
        e->msg.n_value = (size_t)n_types;
        samples[n_samples++] = &e->msg;
    }
    for (size_t i = 0; i < b->n_mappings; i++)
        mappings[i] = &b->mappings[i]->msg;
    for (size_t i = 0; i < b->n_locations; i++)
        locations[i] = &b->locations[i]->msg;
    profile.n_sample = n_samples;
    profile.sample = samples;
    profile.n_mapping = b->n_mappings;
    profile.mapping = mappings;
    profile.n_location = b->n_locations;
    profile.location = locations;
    profile.n_function = b->n_functions;
    profile.function = b->functions;
    memcpy(strings, b->strings, b->n_strings * sizeof *strings);
    size_t n_strings = b->n_strings;
    int n_comments = 0;
    for (int i = 0; i < run.n_lines; i++) {
        comments[n_comments++] = (int64_t)n_strings;
        strings[n_strings++] = run.lines[i];
    }
    for (int i = 0; layout->comments != NULL && i < layout->n_comments; i++) {
        comments[n_comments++] = (int64_t)n_strings;
        strings[n_strings++] = (char *)layout->comments[i];
    }
    if (run.stats != NULL)
        strings[n_strings++] = run.stats;
    profile.n_string_table = n_strings;
    profile.string_table = strings;
    profile.time_nanos = (int64_t)info->start_time_ns;
    profile.duration_nanos = (int64_t)info->duration_ns;
    profile.period_type = &period_type;
    profile.period = layout->period;
    profile.n_comment = (size_t)n_comments;
    profile.comment = comments;
    profile.default_sample_type = layout->default_type;

    size_t len = snapprof__pprof__profile__get_packed_size(&profile);
    buf = malloc(len ? len : 1);
    if (buf == NULL) {
        err = -ENOMEM;
        goto out;
    }
    if (snapprof__pprof__profile__pack(&profile, buf) != len)
        err = SNAPPROF_EENCODE;
    if (err == 0)
        err = write_atomically(b, buf, len);
out:
    free(buf);
    free(strings);
    free(run.stats);
    free(samples);
    free(mappings);
    free(locations);
    return err;
}
