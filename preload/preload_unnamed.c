/* Which modules the samples' leaves fall in without a name, for the
 * summary of `snapprof record`: a builder of its own, added only when the
 * command asked for a summary, so a program profiled alone pays nothing.
 *
 * A stripped module (Debian's python3.11, liblzma, libsqlite3, perl) shows
 * up in every profile as a wall of frames named after the file
 * ("[python3.11]" in pprof, "python3.11+0x..." in folded stacks). What the
 * user sees of it is self time (pprof -top): so the share counted here is
 * the weight of the samples whose innermost frame is a native frame the
 * symbolizer found no name for, per module file, over the weight of all
 * samples (the same weights the other builders use). xOnSample only adds a
 * weight to its (pc, module) slot; the names are looked up once per
 * distinct leaf when the profile completes, as the other builders do.
 * The command names the file's package and where its debug files are
 * (cli/debug_hint.c); nothing of that runs in the profiled program. */
#include "preload/preload_process.h"

#include <snapprof/profile_builder.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Distinct leaves kept; later new ones are not counted (their share
 * then only looks smaller). */
#define LEAVES_MAX (1u << 18)
#define MODULES_MAX 256

typedef struct leaf {
    uintptr_t pc;
    const snapprof_module_t *module; /* NULL: free slot */
    uint64_t weight;
} leaf_t;

struct snapprof__unnamed {
    leaf_t *slots;
    size_t cap, n;
    uint64_t total;
    int wall;
    snapprof__unnamed_module_t top[SNAPPROF__UNNAMED_MAX];
    size_t n_top;
};

static size_t slot_of(uintptr_t pc, const snapprof_module_t *m, size_t cap)
{
    uint64_t h = (uint64_t)pc * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)m;
    h ^= h >> 29;
    return (size_t)(h * 0xbf58476d1ce4e5b9ull >> 7) & (cap - 1);
}

static int grow(snapprof__unnamed_t *u)
{
    size_t cap = u->cap ? u->cap * 2 : 1024;
    leaf_t *s = calloc(cap, sizeof *s);
    if (!s)
        return -ENOMEM;
    for (size_t i = 0; i < u->cap; i++) {
        if (!u->slots[i].module)
            continue;
        size_t j = slot_of(u->slots[i].pc, u->slots[i].module, cap);
        while (s[j].module)
            j = (j + 1) & (cap - 1);
        s[j] = u->slots[i];
    }
    free(u->slots);
    u->slots = s;
    u->cap = cap;
    return 0;
}

static int on_started(void *arg, const snapprof_profile_info_t *info)
{
    snapprof__unnamed_t *u = arg;
    if (u->slots)
        memset(u->slots, 0, u->cap * sizeof *u->slots);
    u->n = 0;
    u->total = 0;
    u->n_top = 0;
    u->wall = info->mode == SNAPPROF_MODE_WALL;
    return 0;
}

static int on_sample(void *arg, const snapprof_sample_t *s)
{
    snapprof__unnamed_t *u = arg;
    uint64_t w = u->wall ? s->wall_ns : s->cpu_ns;
    u->total += w;
    if (s->frame_count == 0 || w == 0)
        return 0;
    const snapprof_frame_t *f = &s->frames[0];
    const snapprof_module_t *m = f->module;
    if (f->kind != SNAPPROF_FRAME_NATIVE || !m || m->kind != SNAPPROF_MODULE_NATIVE || !m->path ||
        m->path[0] != '/')
        return 0;
    if ((u->n + 1) * 2 > u->cap && (u->n >= LEAVES_MAX || grow(u) != 0))
        return 0; /* full: this leaf goes uncounted rather than fail a sample */
    size_t j = slot_of(f->pc, m, u->cap);
    while (u->slots[j].module && (u->slots[j].pc != f->pc || u->slots[j].module != m))
        j = (j + 1) & (u->cap - 1);
    if (!u->slots[j].module) {
        u->slots[j] = (leaf_t){.pc = f->pc, .module = m};
        u->n++;
    }
    u->slots[j].weight += w;
    return 0;
}

static int on_completed(void *arg, const snapprof_profile_info_t *info)
{
    (void)info;
    snapprof__unnamed_t *u = arg;
    /* Per file: the module cache has an entry per executable range. */
    static struct {
        const char *path;
        uint64_t weight;
    } mods[MODULES_MAX]; /* only the one builder's completion uses it */
    size_t n_mods = 0;
    for (size_t i = 0; i < u->cap; i++) {
        const leaf_t *l = &u->slots[i];
        if (!l->module)
            continue;
        snapprof_frame_t frame = {.pc = l->pc, .module = l->module, .kind = SNAPPROF_FRAME_NATIVE};
        snapprof_symbol_t sym;
        if (snapprof_symbolize(&frame, &sym, 1) > 0)
            continue;
        size_t k = 0;
        while (k < n_mods && strcmp(mods[k].path, l->module->path) != 0)
            k++;
        if (k == n_mods) {
            if (n_mods == MODULES_MAX)
                continue;
            mods[n_mods].path = l->module->path;
            mods[n_mods++].weight = 0;
        }
        mods[k].weight += l->weight;
    }
    /* The biggest shares at or above the threshold, biggest first. */
    u->n_top = 0;
    for (size_t k = 0; k < n_mods && u->total > 0; k++) {
        double share = (double)mods[k].weight / (double)u->total;
        if (share < SNAPPROF__UNNAMED_NOTE)
            continue;
        size_t at = u->n_top;
        while (at > 0 && u->top[at - 1].share < share)
            at--;
        if (at >= SNAPPROF__UNNAMED_MAX)
            continue;
        size_t move = u->n_top - at - (u->n_top == SNAPPROF__UNNAMED_MAX);
        memmove(&u->top[at + 1], &u->top[at], move * sizeof u->top[0]);
        u->top[at] = (snapprof__unnamed_module_t){.path = mods[k].path, .share = share};
        if (u->n_top < SNAPPROF__UNNAMED_MAX)
            u->n_top++;
    }
    return 0;
}

static void destroy(void *arg)
{
    snapprof__unnamed_t *u = arg;
    free(u->slots);
    free(u);
}

static const snapprof_builder_ops_t k_ops = {
    .version = 1, /* receives time samples only */
    .name = "unnamed-leaves",
    .xOnProfileStarted = on_started,
    .xOnSample = on_sample,
    .xOnProfileCompleted = on_completed,
    .xDestroy = destroy,
};

int snapprof__unnamed_builder_create(snapprof__unnamed_t **state, snapprof_builder_t **out)
{
    snapprof__unnamed_t *u = calloc(1, sizeof *u);
    if (!u)
        return -ENOMEM;
    int rc = snapprof_builder_create(&k_ops, u, out);
    if (rc != 0) {
        free(u);
        return rc;
    }
    *state = u;
    return 0;
}

size_t snapprof__unnamed_modules(const snapprof__unnamed_t *u,
                                 const snapprof__unnamed_module_t **out)
{
    *out = u->top;
    return u->n_top;
}
