/* Folded-stacks builder: one "root;caller;callee count" line per distinct
 * stack, the text flamegraph.pl, speedscope and inferno read. The count is
 * the stack's weight in microseconds (the CPU time its samples stand for
 * in CPU mode, the wall time in wall mode), not its number of samples: a
 * CPU-clock trigger's periods vary, and a thread's "[kernel and
 * unsampled]" remainder stands for many periods, so counting samples
 * would give other shares than the pprof profile of the same run. */
#include "profile_builder/profile_builder_internal.h"
#include "profile_builder/stack_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct folded_builder {
    snapprof__stack_builder_t base; /* first: snapprof__stack_builder_create() fills it */
    /* Per stack id, the nanoseconds its samples stand for: [0] CPU time
     * (snapprof_sample_t.cpu_ns), [1] wall time (wall_ns). The profile's
     * mode picks one at completion. */
    uint64_t (*weights)[2];
    size_t cap_counts;
} folded_builder_t;

/* a + b, or UINT64_MAX where that would wrap (a builder fed nonsense). */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static int folded_on_sample(void *user_data, const snapprof_sample_t *sample)
{
    folded_builder_t *b = user_data;
    if (sample == NULL || (sample->frame_count != 0 && sample->frames == NULL))
        return -EINVAL;
    int64_t id = snapprof__stack_table_add(b->base.stacks, sample->frames, sample->frame_count);
    if (id < 0)
        return (int)id;
    if ((size_t)id >= b->cap_counts) {
        size_t cap = b->cap_counts ? b->cap_counts * 2 : 256;
        uint64_t(*c)[2] = realloc(b->weights, cap * sizeof *c);
        if (c == NULL)
            return -ENOMEM;
        memset(c + b->cap_counts, 0, (cap - b->cap_counts) * sizeof *c);
        b->weights = c;
        b->cap_counts = cap;
    }
    b->weights[id][0] = sat_add(b->weights[id][0], sample->cpu_ns);
    b->weights[id][1] = sat_add(b->weights[id][1], sample->wall_ns);
    return 0;
}

/* A growable text buffer. */
typedef struct text {
    char *p;
    size_t len, cap;
} text_t;

static int text_put(text_t *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (p == NULL)
            return -ENOMEM;
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
    return 0;
}

/* Appends a function name: ';' separates frames and the last space the
 * count, so ';' and line breaks in a name become ':' and ' '. */
static int put_name(text_t *t, const char *name)
{
    size_t start = t->len;
    int err = text_put(t, name, strlen(name));
    for (size_t i = start; err == 0 && i < t->len; i++) {
        if (t->p[i] == ';')
            t->p[i] = ':';
        else if (t->p[i] == '\n' || t->p[i] == '\r')
            t->p[i] = ' ';
    }
    return err;
}

static int line_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Symbolizes, merges stacks that name the same functions, and writes the
 * lines sorted (so that equal profiles give equal files). */
static int folded_on_profile_completed(void *user_data, const snapprof_profile_info_t *info)
{
    folded_builder_t *b = user_data;
    int mode = info != NULL && info->mode == SNAPPROF_MODE_WALL ? 1 : 0;
    int err = snapprof__stack_table_resolve(b->base.stacks);
    if (err != 0)
        return err;
    size_t n_nodes = snapprof__stack_table_node_count(b->base.stacks);
    uint64_t *per_node = calloc(n_nodes, sizeof *per_node);
    uint32_t *path = malloc(n_nodes * sizeof *path);
    size_t n_lines = 0;
    size_t *offsets = NULL;
    char **lines = NULL;
    text_t text = {0};
    if (per_node == NULL || path == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (size_t id = 0; id < b->cap_counts; id++)
        if (b->weights[id][mode] != 0) {
            uint64_t *w = &per_node[snapprof__stack_table_leaf(b->base.stacks, (int64_t)id)];
            *w = sat_add(*w, b->weights[id][mode]);
        }
    /* Whole microseconds, rounded per line: each line is off by at most
     * half a microsecond, against periods of milliseconds. A line that
     * rounds to 0 (less than 0.5 us: a weightless sample, such as a
     * wall-mode capture that stands for CPU time only) is left out, as
     * flame graphs leave out what weighs nothing. */
    for (size_t node = 0; node < n_nodes; node++) {
        per_node[node] = per_node[node] / 1000 + (per_node[node] % 1000 >= 500);
        n_lines += per_node[node] != 0;
    }
    offsets = malloc((n_lines ? n_lines : 1) * sizeof *offsets);
    lines = malloc((n_lines ? n_lines : 1) * sizeof *lines);
    if (offsets == NULL || lines == NULL) {
        err = -ENOMEM;
        goto out;
    }
    /* Lines go into one buffer, NUL-separated; offsets are kept while it
     * may still move, pointers made once it is complete. */
    size_t k = 0;
    for (size_t node = 0; node < n_nodes && err == 0; node++) {
        if (per_node[node] == 0)
            continue;
        size_t depth = 0;
        for (uint32_t n = (uint32_t)node; n != 0;
             n = snapprof__stack_table_parent(b->base.stacks, n))
            path[depth++] = n;
        size_t start = text.len;
        if (depth == 0)
            err = put_name(&text, "[no frames]");
        for (size_t d = depth; err == 0 && d-- > 0;) {
            err = put_name(&text, snapprof__stack_table_name(b->base.stacks, path[d]));
            if (err == 0 && d > 0)
                err = text_put(&text, ";", 1);
        }
        char count[32];
        int len = snprintf(count, sizeof count, " %llu", (unsigned long long)per_node[node]);
        if (err == 0)
            err = text_put(&text, count, (size_t)len);
        if (err == 0)
            err = text_put(&text, "", 1); /* keeps the NUL between lines */
        offsets[k++] = start;
    }
    if (err != 0)
        goto out;
    for (size_t i = 0; i < n_lines; i++)
        lines[i] = text.p + offsets[i];
    qsort(lines, n_lines, sizeof *lines, line_cmp);
    text_t file = {0};
    for (size_t i = 0; i < n_lines && err == 0; i++) {
        err = text_put(&file, lines[i], strlen(lines[i]));
        if (err == 0)
            err = text_put(&file, "\n", 1);
    }
    if (err == 0)
        err = snapprof__output_write(&b->base.out, file.p ? file.p : "", file.len);
    free(file.p);
out:
    free(per_node);
    free(path);
    free(offsets);
    free(lines);
    free(text.p);
    return err;
}

static void folded_destroy(void *user_data)
{
    folded_builder_t *b = user_data;
    if (b == NULL)
        return;
    snapprof__stack_builder_free(&b->base);
    free(b->weights);
    free(b);
}

static const snapprof_builder_ops_t folded_ops = {
    .version = 1, /* receives time samples only */
    .name = "folded",
    .xOnSample = folded_on_sample,
    .xOnProfileCompleted = folded_on_profile_completed,
    .xDestroy = folded_destroy,
};

int snapprof_folded_builder_create(const char *path, snapprof_builder_t **out)
{
    return snapprof__stack_builder_create(path, sizeof(folded_builder_t), &folded_ops, out);
}
