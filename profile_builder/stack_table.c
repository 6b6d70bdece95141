/* Stack table for the text builders (folded stacks, trace JSON): interns
 * the stacks of samples as they arrive, without symbolizing, and at
 * completion turns every stack into a path in a tree of function names
 * (inlined calls expanded), so that builders can count, print and compare
 * stacks by name. See stack_table.h. */
#include "common/arena.h"
#include "common/hash.h"
#include "common/index.h"
#include "profile_builder/stack_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Hashing and growable arrays                                              */
/* ------------------------------------------------------------------------ */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 32);
}

static uint64_t hash_str(const char *s)
{
    return mix(snapprof__fnv1a64(SNAPPROF_FNV1A64_BASIS, s), 0);
}

/* Grows *v (elements of size elem) to hold need; 0 or -ENOMEM. */
static int grow(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*v, n * elem);
    if (p == NULL)
        return -ENOMEM;
    *v = p;
    *cap = n;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The table                                                                */
/* ------------------------------------------------------------------------ */

typedef struct frame_rec {
    snapprof_frame_kind_t kind;
    uintptr_t pc;
    const snapprof_module_t *module;
    const char *name;   /* JIT and marker frames: our copy; native: NULL */
    uint32_t names_off; /* after resolve: outermost-first name ids in name_pool */
    uint32_t names_len;
} frame_rec_t;

typedef struct stack_rec {
    uint32_t off, len; /* frame ids in frame_pool, innermost first */
    uint32_t leaf;     /* after resolve: the node of the innermost name */
} stack_rec_t;

typedef struct node_rec {
    uint32_t parent, name, depth;
} node_rec_t;

struct snapprof__stack_table {
    frame_rec_t *frames;
    size_t n_frames, cap_frames, resolved_frames;
    snapprof__index_t frame_idx;

    uint32_t *frame_pool;
    size_t n_frame_pool, cap_frame_pool;
    stack_rec_t *stacks;
    size_t n_stacks, cap_stacks, resolved_stacks;
    snapprof__index_t stack_idx;

    const char **names;
    size_t n_names, cap_names;
    snapprof__index_t name_idx;
    uint32_t *name_pool;
    size_t n_name_pool, cap_name_pool;

    node_rec_t *nodes;
    size_t n_nodes, cap_nodes;
    snapprof__index_t node_idx;

    snapprof__arena_t strings; /* copied names and frame names */
};

int snapprof__stack_table_create(snapprof__stack_table_t **out)
{
    snapprof__stack_table_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return -ENOMEM;
    /* Node 0 is the root: no name, depth 0. */
    if (grow((void **)&t->nodes, &t->cap_nodes, 1, sizeof *t->nodes) != 0) {
        free(t);
        return -ENOMEM;
    }
    t->nodes[0] = (node_rec_t){0, UINT32_MAX, 0};
    t->n_nodes = 1;
    *out = t;
    return 0;
}

void snapprof__stack_table_destroy(snapprof__stack_table_t *t)
{
    if (t == NULL)
        return;
    snapprof__index_free(&t->frame_idx);
    snapprof__index_free(&t->stack_idx);
    snapprof__index_free(&t->name_idx);
    snapprof__index_free(&t->node_idx);
    free(t->frames);
    free(t->frame_pool);
    free(t->stacks);
    free(t->names);
    free(t->name_pool);
    free(t->nodes);
    snapprof__arena_release(&t->strings);
    free(t);
}

/* JIT frames are told apart by (name, module), markers by name, native
 * frames by (pc, module): the same rule as the pprof builder's locations. */
static int frame_eq(const void *owner, uint32_t i, const void *key)
{
    const snapprof__stack_table_t *t = owner;
    const frame_rec_t *a = &t->frames[i], *b = key;
    if (a->kind != b->kind || a->module != b->module)
        return 0;
    if (a->kind == SNAPPROF_FRAME_NATIVE)
        return a->pc == b->pc;
    return strcmp(a->name, b->name) == 0;
}

static int intern_frame(snapprof__stack_table_t *t, const snapprof_frame_t *f, uint32_t *id)
{
    frame_rec_t key = {.kind = f->kind, .module = f->module};
    uint64_t h = mix(f->kind, 0);
    if (f->kind == SNAPPROF_FRAME_NATIVE) {
        key.pc = f->pc;
        h = mix(mix(h, f->pc), (uintptr_t)f->module);
    } else {
        if (f->kind != SNAPPROF_FRAME_JIT) {
            key.kind = SNAPPROF_FRAME_MARKER;
            key.module = NULL;
        }
        key.name = f->name && f->name[0] ? f->name
                   : key.kind == SNAPPROF_FRAME_JIT && f->module && f->module->path
                       ? f->module->path
                       : "[unknown]";
        h = mix(mix(mix(0, key.kind), hash_str(key.name)), (uintptr_t)key.module);
    }
    uint32_t found = snapprof__index_find(&t->frame_idx, h, frame_eq, t, &key);
    if (found) {
        *id = found - 1;
        return 0;
    }
    if (snapprof__index_reserve(&t->frame_idx) != 0 ||
        grow((void **)&t->frames, &t->cap_frames, t->n_frames + 1, sizeof *t->frames) != 0)
        return -ENOMEM;
    if (key.name != NULL && (key.name = snapprof__arena_strdup(&t->strings, key.name)) == NULL)
        return -ENOMEM;
    t->frames[t->n_frames] = key;
    snapprof__index_insert(&t->frame_idx, h, (uint32_t)t->n_frames);
    *id = (uint32_t)t->n_frames++;
    return 0;
}

typedef struct stack_key {
    const uint32_t *ids;
    uint32_t len;
} stack_key_t;

static int stack_eq(const void *owner, uint32_t i, const void *key)
{
    const snapprof__stack_table_t *t = owner;
    const stack_rec_t *s = &t->stacks[i];
    const stack_key_t *k = key;
    return s->len == k->len &&
           (k->len == 0 || memcmp(t->frame_pool + s->off, k->ids, k->len * sizeof *k->ids) == 0);
}

int64_t snapprof__stack_table_add(snapprof__stack_table_t *t, const snapprof_frame_t *frames,
                                  size_t count)
{
    if (count > UINT32_MAX / 2)
        return -EINVAL;
    /* The frame ids go at the end of the pool; they stay there only when
     * the stack is new. The pool always gets a slot: an empty stack as the
     * first sample would otherwise point into a pool not yet allocated
     * (NULL + 0 is undefined; found by fuzz_pprof). */
    if (grow((void **)&t->frame_pool, &t->cap_frame_pool, t->n_frame_pool + (count ? count : 1),
             sizeof *t->frame_pool) != 0)
        return -ENOMEM;
    uint32_t *ids = t->frame_pool + t->n_frame_pool;
    uint64_t h = mix(0, count);
    for (size_t i = 0; i < count; i++) {
        int err = intern_frame(t, &frames[i], &ids[i]);
        if (err != 0)
            return err;
        h = mix(h, ids[i]);
    }
    stack_key_t key = {ids, (uint32_t)count};
    uint32_t found = snapprof__index_find(&t->stack_idx, h, stack_eq, t, &key);
    if (found)
        return (int64_t)found - 1;
    if (snapprof__index_reserve(&t->stack_idx) != 0 ||
        grow((void **)&t->stacks, &t->cap_stacks, t->n_stacks + 1, sizeof *t->stacks) != 0)
        return -ENOMEM;
    t->stacks[t->n_stacks] =
        (stack_rec_t){.off = (uint32_t)t->n_frame_pool, .len = (uint32_t)count, .leaf = 0};
    t->n_frame_pool += count;
    snapprof__index_insert(&t->stack_idx, h, (uint32_t)t->n_stacks);
    return (int64_t)t->n_stacks++;
}

/* ------------------------------------------------------------------------ */
/* Resolving names                                                          */
/* ------------------------------------------------------------------------ */

static int name_eq(const void *owner, uint32_t i, const void *key)
{
    const snapprof__stack_table_t *t = owner;
    return strcmp(t->names[i], key) == 0;
}

/* Interns a name that lives at least as long as t (the module cache's
 * strings live as long as the process; others are copied by the caller). */
static int intern_name(snapprof__stack_table_t *t, const char *s, int copy, uint32_t *id)
{
    uint64_t h = hash_str(s);
    uint32_t found = snapprof__index_find(&t->name_idx, h, name_eq, t, s);
    if (found) {
        *id = found - 1;
        return 0;
    }
    if (snapprof__index_reserve(&t->name_idx) != 0 ||
        grow((void **)&t->names, &t->cap_names, t->n_names + 1, sizeof *t->names) != 0)
        return -ENOMEM;
    if (copy && (s = snapprof__arena_strdup(&t->strings, s)) == NULL)
        return -ENOMEM;
    t->names[t->n_names] = s;
    snapprof__index_insert(&t->name_idx, h, (uint32_t)t->n_names);
    *id = (uint32_t)t->n_names++;
    return 0;
}

static int node_eq(const void *owner, uint32_t i, const void *key)
{
    const snapprof__stack_table_t *t = owner;
    const node_rec_t *n = &t->nodes[i], *k = key;
    return n->parent == k->parent && n->name == k->name;
}

static int child(snapprof__stack_table_t *t, uint32_t parent, uint32_t name, uint32_t *out)
{
    node_rec_t key = {parent, name, t->nodes[parent].depth + 1};
    uint64_t h = mix(mix(0, parent), name);
    uint32_t found = snapprof__index_find(&t->node_idx, h, node_eq, t, &key);
    if (found) {
        *out = found - 1;
        return 0;
    }
    if (snapprof__index_reserve(&t->node_idx) != 0 ||
        grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes + 1, sizeof *t->nodes) != 0)
        return -ENOMEM;
    t->nodes[t->n_nodes] = key;
    snapprof__index_insert(&t->node_idx, h, (uint32_t)t->n_nodes);
    *out = (uint32_t)t->n_nodes++;
    return 0;
}

#define MAX_INLINE 32

/* Gives frame f its names, outermost first. */
static int resolve_frame(snapprof__stack_table_t *t, frame_rec_t *f)
{
    uint32_t ids[MAX_INLINE];
    size_t n = 0;
    if (f->kind != SNAPPROF_FRAME_NATIVE) {
        if (intern_name(t, f->name, 0, &ids[0]) != 0)
            return -ENOMEM;
        n = 1;
    } else {
        snapprof_frame_t frame = {.pc = f->pc, .module = f->module, .kind = f->kind};
        snapprof_symbol_t syms[MAX_INLINE];
        int k = snapprof_symbolize(&frame, syms, MAX_INLINE);
        if (k > 0) {
            /* Innermost first from the symbolizer; outermost first here. */
            for (int i = k - 1; i >= 0; i--) {
                if (intern_name(t, syms[i].name ? syms[i].name : "[unknown]", 0, &ids[n]) != 0)
                    return -ENOMEM;
                n++;
            }
        } else {
            /* No name: the module and offset, as perf prints them. */
            char buf[512];
            const snapprof_module_t *m = f->module;
            if (m != NULL && m->path != NULL) {
                const char *base = strrchr(m->path, '/');
                snprintf(buf, sizeof buf, "%s+0x%llx", base ? base + 1 : m->path,
                         (unsigned long long)(f->pc - m->start + m->file_offset));
            } else {
                snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)f->pc);
            }
            if (intern_name(t, buf, 1, &ids[0]) != 0)
                return -ENOMEM;
            n = 1;
        }
    }
    if (grow((void **)&t->name_pool, &t->cap_name_pool, t->n_name_pool + n, sizeof *t->name_pool) !=
        0)
        return -ENOMEM;
    memcpy(t->name_pool + t->n_name_pool, ids, n * sizeof *ids);
    f->names_off = (uint32_t)t->n_name_pool;
    f->names_len = (uint32_t)n;
    t->n_name_pool += n;
    return 0;
}

int snapprof__stack_table_resolve(snapprof__stack_table_t *t)
{
    for (; t->resolved_frames < t->n_frames; t->resolved_frames++) {
        int err = resolve_frame(t, &t->frames[t->resolved_frames]);
        if (err != 0)
            return err;
    }
    for (; t->resolved_stacks < t->n_stacks; t->resolved_stacks++) {
        stack_rec_t *s = &t->stacks[t->resolved_stacks];
        uint32_t node = 0;
        for (uint32_t i = s->len; i-- > 0;) {
            const frame_rec_t *f = &t->frames[t->frame_pool[s->off + i]];
            for (uint32_t k = 0; k < f->names_len; k++) {
                int err = child(t, node, t->name_pool[f->names_off + k], &node);
                if (err != 0)
                    return err;
            }
        }
        s->leaf = node;
    }
    return 0;
}

size_t snapprof__stack_table_node_count(const snapprof__stack_table_t *t)
{
    return t->n_nodes;
}

uint32_t snapprof__stack_table_leaf(const snapprof__stack_table_t *t, int64_t stack)
{
    return stack >= 0 && (size_t)stack < t->resolved_stacks ? t->stacks[stack].leaf : 0;
}

uint32_t snapprof__stack_table_parent(const snapprof__stack_table_t *t, uint32_t node)
{
    return t->nodes[node].parent;
}

uint32_t snapprof__stack_table_depth(const snapprof__stack_table_t *t, uint32_t node)
{
    return t->nodes[node].depth;
}

const char *snapprof__stack_table_name(const snapprof__stack_table_t *t, uint32_t node)
{
    return node == 0 ? "" : t->names[t->nodes[node].name];
}

int64_t snapprof__stack_table_intern(snapprof__stack_table_t *t, const char *s)
{
    uint32_t id;
    int err = intern_name(t, s, 1, &id);
    return err != 0 ? err : (int64_t)id;
}

const char *snapprof__stack_table_string(const snapprof__stack_table_t *t, uint32_t id)
{
    return id < t->n_names ? t->names[id] : "";
}

int snapprof__stack_builder_create(const char *path, size_t size, const snapprof_builder_ops_t *ops,
                                   snapprof_builder_t **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    snapprof__stack_builder_t *b = calloc(1, size);
    if (b == NULL)
        return -ENOMEM;
    int err = snapprof__output_resolve(path, &b->out);
    if (err == 0)
        err = snapprof__stack_table_create(&b->stacks);
    if (err == 0)
        err = snapprof_builder_create(ops, b, out);
    if (err == 0)
        (*out)->output = &b->out;
    if (err != 0)
        ops->xDestroy(b);
    return err;
}

void snapprof__stack_builder_free(snapprof__stack_builder_t *b)
{
    snapprof__stack_table_destroy(b->stacks);
    snapprof__output_free(&b->out);
}
