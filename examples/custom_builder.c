/* Example: a custom profile builder that sums the CPU time of the samples
 * by leaf function and prints the top ten when the profile completes.
 * docs/custom_builder.md walks through it. Run: ./custom_builder */
#include <snapprof/profile_builder.h>
#include <snapprof/snapprof.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the builder --------------------------------------------------------- */

#define MAX_LEAVES 4096

typedef struct leaf_counter {
    snapprof_frame_t leaf[MAX_LEAVES]; /* distinct innermost frames */
    uint64_t count[MAX_LEAVES];        /* their CPU time, in ns */
    size_t n;
    uint64_t dropped; /* samples whose leaf did not fit */
} leaf_counter_t;

/* On the sampling thread, once per sample: keep it cheap, no symbolizing
 * (the first lookup in a module may load its DWARF). A sample weighs its
 * cpu_ns (a CPU profile; wall_ns in wall mode): the perf trigger's periods
 * vary, so counting samples would give other shares than the pprof file. */
static int leaf_on_sample(void *user_data, const snapprof_sample_t *sample)
{
    leaf_counter_t *c = user_data;
    if (sample->frame_count == 0)
        return 0;
    const snapprof_frame_t *f = &sample->frames[0];
    for (size_t i = 0; i < c->n; i++) {
        if (c->leaf[i].pc == f->pc && c->leaf[i].kind == f->kind) {
            c->count[i] += sample->cpu_ns;
            return 0;
        }
    }
    if (c->n == MAX_LEAVES || f->kind != SNAPPROF_FRAME_NATIVE) {
        c->dropped++; /* JIT and marker names die with the sample; not kept here */
        return 0;
    }
    c->leaf[c->n] = *f;
    c->count[c->n++] = sample->cpu_ns;
    return 0;
}

typedef struct named {
    const char *name;
    uint64_t count;
} named_t;

static int by_count(const void *a, const void *b)
{
    const named_t *x = a, *y = b;
    return x->count < y->count ? 1 : x->count > y->count ? -1 : 0;
}

/* When the profile completes: symbolize once per distinct pc, merge pcs of
 * the same function, print the top ten. */
static int leaf_on_completed(void *user_data, const snapprof_profile_info_t *info)
{
    leaf_counter_t *c = user_data;
    named_t *by_name = calloc(c->n + 1, sizeof *by_name);
    if (by_name == NULL)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++) {
        snapprof_symbol_t sym;
        const char *name = snapprof_symbolize(&c->leaf[i], &sym, 1) > 0 ? sym.name : "[unknown]";
        size_t k = 0;
        while (k < n && strcmp(by_name[k].name, name) != 0)
            k++;
        if (k == n)
            by_name[n++] = (named_t){name, 0};
        by_name[k].count += c->count[i];
    }
    qsort(by_name, n, sizeof *by_name, by_count);
    printf("top leaf functions by CPU time (us) over %.1f s (%llu samples):\n",
           info->duration_ns / 1e9, (unsigned long long)info->stats->samples);
    for (size_t i = 0; i < n && i < 10; i++)
        printf("  %8llu  %s\n", (unsigned long long)(by_name[i].count / 1000), by_name[i].name);
    free(by_name);
    return 0;
}

static const snapprof_builder_ops_t leaf_ops = {
    .version = 1, /* receives time samples only */
    .name = "leaf-counter",
    .xOnSample = leaf_on_sample,
    .xOnProfileCompleted = leaf_on_completed,
    .xDestroy = free,
};

/* ---- a program to profile ------------------------------------------------ */

__attribute__((noinline)) uint64_t work_hash(uint64_t x)
{
    for (int i = 0; i < 100000; i++)
        x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull + (uint64_t)i;
    return x;
}

__attribute__((noinline)) double work_sum(int n)
{
    double s = 0;
    for (int i = 1; i < n; i++)
        s += 1.0 / i;
    return s;
}

int main(void)
{
    snapprof_thread_t *me;
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000; /* 1 kHz */
    snapprof_profiler_t *prof;
    snapprof_builder_t *builder;
    leaf_counter_t *counter = calloc(1, sizeof *counter);
    if (counter == NULL || snapprof_thread_register(&me) != 0 ||
        snapprof_profiler_create(&params, &me, 1, &prof) != 0)
        return 1;
    if (snapprof_builder_create(&leaf_ops, counter, &builder) != 0 ||
        snapprof_profiler_add_builder(prof, builder) != 0 || snapprof_profiler_start(prof) != 0)
        return 1;
    volatile double sink = 0;
    snapprof_stats_t st;
    int round = 0;
    do {
        /* Arguments that change, so the compiler cannot hoist these pure
         * functions out of the loop. */
        sink += (double)work_hash((uint64_t)round);
        sink += work_sum(300000 + (round++ & 7));
        snapprof_profiler_get_stats(prof, &st);
    } while (st.samples < 300);
    (void)sink; /* read once: clang warns of a volatile only ever set */

    int rc = snapprof_profiler_stop(prof); /* prints the top ten */
    snapprof_profiler_destroy(prof);       /* frees counter through xDestroy */
    snapprof_thread_release(me);
    return rc == 0 ? 0 : 1;
}
