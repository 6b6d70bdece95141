/* The pprof builder's state and what its files share. Internal.
 *
 * profile_builder_pprof_intern.c interns strings, mappings, functions and
 * locations (and symbolizes native locations at completion);
 * profile_builder_pprof_aggregate.c adds samples up by stack and labels;
 * profile_builder_pprof_write.c writes the profile; profile_builder_pprof.c
 * holds the builder's life cycle (and the calls builder's). The heap
 * builders (profile_builder_heap.c) embed this state and reuse all of it,
 * with values of their own. */
#ifndef SNAPPROF_PROFILE_BUILDER_PPROF_H
#define SNAPPROF_PROFILE_BUILDER_PPROF_H

#include "common/arena.h"
#include "common/hash.h"
#include "common/index.h"
#include "profile.pb-c.h"
#include "profile_builder/profile_builder_internal.h"

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Arena                                                                    */
/* ------------------------------------------------------------------------ */

/* Every message, line, label and interned string lives in one arena
 * (common/arena.h), so a profile costs a handful of large allocations
 * instead of one per message, and destroying the builder frees it all at
 * once. The arena's memory is zeroed, so whatever a caller does not set
 * reads as 0. */

static_assert(alignof(max_align_t) <= 16, "the arena aligns to at most 16");

/* Returns n zeroed bytes aligned for any type, or NULL when out of memory. */
static inline void *arena_alloc(snapprof__arena_t *arena, size_t n)
{
    return snapprof__arena_alloc(arena, n, alignof(max_align_t));
}

/* ------------------------------------------------------------------------ */
/* Growable arrays and hashing                                              */
/* ------------------------------------------------------------------------ */

/* Makes room for need elements of size elem. Returns the (possibly moved)
 * array, or NULL with the old array and *cap untouched. */
static inline void *reserve(void *items, size_t *cap, size_t need, size_t elem)
{
    /* Asking for nothing still yields an array, so NULL always means
     * failure. */
    if (need == 0)
        need = 1;
    if (need <= *cap)
        return items;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem)
            return NULL;
        ncap *= 2;
    }
    void *p = realloc(items, ncap * elem);
    if (p != NULL)
        *cap = ncap;
    return p;
}

/* The finalizer of MurmurHash3: spreads every input bit over the low bits
 * that the tables index with. */
static inline uint64_t hash_finish(uint64_t h)
{
    return snapprof__murmur3_fmix64(h);
}

static inline uint64_t hash_word(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static inline uint64_t hash_string(const char *s)
{
    return hash_finish(snapprof__fnv1a64(SNAPPROF_FNV1A64_BASIS, s));
}

/* ------------------------------------------------------------------------ */
/* Builder state                                                            */
/* ------------------------------------------------------------------------ */

/* A mapping; its has_* flags are set when the profile is written (see
 * finish_mappings). The message comes first: a pointer to the entry is a
 * pointer to the message. */
typedef struct mapping_entry {
    Snapprof__Pprof__Mapping msg;
} mapping_entry_t;

typedef struct location_key {
    snapprof_frame_kind_t kind;
    uint64_t a;         /* native: the pc; JIT and marker: the name's string index */
    const void *module; /* native and JIT: the module; marker: NULL */
} location_key_t;

typedef struct location_entry {
    Snapprof__Pprof__Location msg;
    location_key_t key;
    mapping_entry_t *mapping; /* NULL for mapping 0 */
    int symbolized;           /* native: its Lines have been looked up */
} location_entry_t;

typedef struct function_key {
    int64_t name, system_name, filename;
} function_key_t;

/* The most values a sample has: samples/count, cpu/nanoseconds and
 * wall/nanoseconds in a CPU or wall profile; the heap builder's four
 * (alloc_objects, alloc_space, inuse_objects, inuse_space). A layout
 * (pprof_layout_t) says how many of them its profile writes. */
#define VALUE_COUNT 4

typedef struct sample_entry {
    Snapprof__Pprof__Sample msg;
    int64_t values[VALUE_COUNT];
} sample_entry_t;

/* The deepest inline chain symbolized per location; deeper ones keep their
 * innermost frames. */
#define MAX_INLINE_SYMBOLS 32

typedef struct pprof_builder {
    snapprof__output_t out;
    /* snapprof_pprof_builder_create_in_memory(): no file; each completion
     * leaves its gzipped profile in mem (malloc'd), taken by
     * snapprof_pprof_builder_take_bytes(). */
    int in_memory;
    uint8_t *mem;
    size_t mem_len;
    snapprof__arena_t arena;

    char **strings;
    size_t n_strings, cap_strings;
    snapprof__index_t string_index;

    mapping_entry_t **mappings;
    size_t n_mappings, cap_mappings;
    snapprof__index_t mapping_index;

    location_entry_t **locations;
    size_t n_locations, cap_locations;
    snapprof__index_t location_index;

    Snapprof__Pprof__Function **functions;
    size_t n_functions, cap_functions;
    snapprof__index_t function_index;

    sample_entry_t **samples;
    size_t n_samples, cap_samples;
    snapprof__index_t sample_index;

    /* The sample being added, before it is known to be new. */
    uint64_t *scratch_locations;
    size_t cap_scratch_locations;
    Snapprof__Pprof__Label *scratch_labels;
    size_t cap_scratch_labels;

    /* String indices used for every profile. */
    int64_t s_thread_id, s_thread_name;
    int64_t s_samples, s_count, s_cpu, s_wall, s_nanoseconds;
    /* The calls builder: function timing instead of samples, with the
     * sample types calls/count and time/nanoseconds. */
    int calls;
    int64_t s_calls, s_time;
} pprof_builder_t;

/* ------------------------------------------------------------------------ */
/* Interning (profile_builder_pprof_intern.c)                               */
/* ------------------------------------------------------------------------ */

/* Each returns an existing entry or adds a new one; a failure (-ENOMEM)
 * never leaves a half-made entry behind. */

/* Returns the string's index in the string table (NULL is ""), or
 * -ENOMEM. */
int64_t snapprof__pprof_intern_string(pprof_builder_t *b, const char *s);

/* Returns the index of s in the string table, or -1 when it is not
 * there; adds nothing. */
int64_t snapprof__pprof_find_string(const pprof_builder_t *b, const char *s);

/* The mapping of module in *out; 0 or -ENOMEM. */
int snapprof__pprof_intern_mapping(pprof_builder_t *b, const snapprof_module_t *module,
                                   mapping_entry_t **out);

/* The id of frame's location in *id; 0 or -ENOMEM. Native locations get
 * their Lines from snapprof__pprof_symbolize_locations(). */
int snapprof__pprof_intern_location(pprof_builder_t *b, const snapprof_frame_t *frame,
                                    uint64_t *id);

/* Gives every native location its Lines; 0 or -ENOMEM (call again to
 * finish). */
int snapprof__pprof_symbolize_locations(pprof_builder_t *b);

/* ------------------------------------------------------------------------ */
/* Aggregation (profile_builder_pprof_aggregate.c)                          */
/* ------------------------------------------------------------------------ */

/* What makes two samples one: their locations and labels (interned). */
typedef struct sample_key {
    const uint64_t *locations;
    size_t n_locations;
    const Snapprof__Pprof__Label *labels;
    size_t n_labels;
} sample_key_t;

/* Fills label with key and either a string or a number (with its unit). */
int snapprof__pprof_make_label(pprof_builder_t *b, Snapprof__Pprof__Label *label,
                               const snapprof_label_t *in);

/* Adds values (VALUE_COUNT of them) to the sample with key, making it
 * (the key copied into the arena) when there is none yet. Returns the
 * sample's index in b->samples, or -ENOMEM. */
int snapprof__pprof_count_sample(pprof_builder_t *b, const sample_key_t *key,
                                 const int64_t *values);

/* Interns sample's frames and labels (thread_id and thread_name first,
 * then the sample's own) into the builder's scratch arrays and fills key
 * with them; key is valid until the next call. Returns 0, -EINVAL for a
 * malformed sample, or -ENOMEM. */
int snapprof__pprof_sample_key(pprof_builder_t *b, const snapprof_sample_t *sample,
                               sample_key_t *key);

/* The pprof builder's xOnSample. */
int snapprof__pprof_on_sample(void *user_data, const snapprof_sample_t *sample);

/* Adds hitch=true or hitch=false to every sample whose "frame" label names
 * an app frame the profiler judged (info->app_frames): the verdict is known
 * only once a frame ends, after its samples arrived. Samples of frames that
 * were still open keep no verdict. Idempotent, so a retried completion
 * adds nothing twice. Returns 0 or -ENOMEM. */
int snapprof__pprof_apply_hitches(pprof_builder_t *b, const snapprof_profile_info_t *info);

/* ------------------------------------------------------------------------ */
/* Writing (profile_builder_pprof_write.c)                                  */
/* ------------------------------------------------------------------------ */

/* What a profile says its values are: the sample types (names and units
 * as string indices, the first n_types of each sample's values), the
 * period's type, unit and value, and the default sample type. comments
 * NULL: the run's comment lines made from info->stats (a CPU or wall
 * profile's); otherwise these n_comments lines instead (the hidden stats
 * entry is written either way). skip_empty leaves out samples whose
 * values are all 0. */
typedef struct pprof_layout {
    int n_types;
    int64_t type_names[VALUE_COUNT], type_units[VALUE_COUNT];
    int64_t period_type, period_unit, period;
    int64_t default_type;
    const char *const *comments;
    int n_comments;
    int skip_empty;
} pprof_layout_t;

/* Builds the Profile message from what was collected, laid out as layout
 * says, and writes it. The collected data is left as it was, so a failed
 * write loses nothing and a second call simply tries again. */
int snapprof__pprof_write(pprof_builder_t *b, const snapprof_profile_info_t *info,
                          const pprof_layout_t *layout);

/* The pprof builder's xOnProfileCompleted: snapprof__pprof_write() with
 * the CPU (or wall, or calls) layout. */
int snapprof__pprof_on_profile_completed(void *user_data, const snapprof_profile_info_t *info);

/* ------------------------------------------------------------------------ */
/* Life cycle (profile_builder_pprof.c)                                     */
/* ------------------------------------------------------------------------ */

/* Interns the strings every profile uses, "" first, and the main
 * executable's mapping. b zeroed before. Returns 0 or -ENOMEM. */
int snapprof__pprof_init(pprof_builder_t *b);

/* Frees everything b holds, not b itself. */
void snapprof__pprof_release(pprof_builder_t *b);

#endif
