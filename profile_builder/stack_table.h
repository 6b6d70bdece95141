/* Stack table shared by the folded-stacks and trace builders. Internal.
 *
 * While samples arrive, snapprof__stack_table_add() interns each stack by
 * its frames (native frames by (pc, module), JIT frames by (name, module),
 * markers by name), copying what it must and symbolizing nothing, so the
 * sampling thread never waits for DWARF. When the profile completes,
 * snapprof__stack_table_resolve() symbolizes each distinct frame once and
 * maps every stack to a node of a tree of function names: node 0 is the
 * root, each node has a parent and a name, and a stack's leaf node is the
 * path root -> outermost function -> ... -> innermost function, inlined
 * calls expanded (outermost caller first). Two stacks that differ only in
 * pcs within the same functions share their leaf node.
 *
 * Not thread-safe: one builder's callbacks never run concurrently. */
#ifndef SNAPPROF_STACK_TABLE_H
#define SNAPPROF_STACK_TABLE_H

#include "profile_builder/profile_builder_internal.h"

#include <snapprof/snapprof.h>

typedef struct snapprof__stack_table snapprof__stack_table_t;

int snapprof__stack_table_create(snapprof__stack_table_t **out);
void snapprof__stack_table_destroy(snapprof__stack_table_t *t);

/* Interns a stack (innermost frame first). Returns its id (>= 0), or
 * -ENOMEM / -EINVAL. Strings the frames point to may die after the call. */
int64_t snapprof__stack_table_add(snapprof__stack_table_t *t, const snapprof_frame_t *frames,
                                  size_t count);

/* Names every stack added since the last call. Returns 0 or -ENOMEM (call
 * again to finish). */
int snapprof__stack_table_resolve(snapprof__stack_table_t *t);

/* Interns any other string the builder wants to keep once (copied).
 * Returns its id (>= 0) or -ENOMEM. */
int64_t snapprof__stack_table_intern(snapprof__stack_table_t *t, const char *s);
const char *snapprof__stack_table_string(const snapprof__stack_table_t *t, uint32_t id);

/* Nodes of the name tree, valid after resolve; node 0 is the root. */
size_t snapprof__stack_table_node_count(const snapprof__stack_table_t *t);
uint32_t snapprof__stack_table_leaf(const snapprof__stack_table_t *t, int64_t stack);
uint32_t snapprof__stack_table_parent(const snapprof__stack_table_t *t, uint32_t node);
uint32_t snapprof__stack_table_depth(const snapprof__stack_table_t *t, uint32_t node);
/* The function name of a node ("" for the root); lives as long as t. */
const char *snapprof__stack_table_name(const snapprof__stack_table_t *t, uint32_t node);

/* What the folded and trace builders' states start with: where they write
 * and the stacks they have seen. */
typedef struct snapprof__stack_builder {
    snapprof__output_t out;
    snapprof__stack_table_t *stacks;
} snapprof__stack_builder_t;

/* Makes a builder whose state is size zeroed bytes starting with a
 * snapprof__stack_builder_t: checks path, creates the stack table and wraps
 * the state with ops (whose xDestroy frees it, also on failure here). The
 * public create functions of those builders. */
int snapprof__stack_builder_create(const char *path, size_t size, const snapprof_builder_ops_t *ops,
                                   snapprof_builder_t **out);
/* Frees what snapprof__stack_builder_create() put in b, not b itself. */
void snapprof__stack_builder_free(snapprof__stack_builder_t *b);

#endif
