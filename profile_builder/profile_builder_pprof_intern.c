/* pprof profile builder, interning: strings, mappings, functions and
 * locations, each stored once in the builder's arena and found again
 * through an index (see profile_builder_pprof.h). */
#include "profile_builder/profile_builder_pprof.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Interning                                                                */
/* ------------------------------------------------------------------------ */

/* Each intern_* function returns an existing entry or adds a new one. A new
 * entry is added only once everything it needs has been allocated, so a
 * failure (-ENOMEM) never leaves a half-made entry behind. */

static int string_eq(const void *owner, uint32_t index, const void *key)
{
    const pprof_builder_t *b = owner;
    return strcmp(b->strings[index], key) == 0;
}

int64_t snapprof__pprof_find_string(const pprof_builder_t *b, const char *s)
{
    uint32_t found = snapprof__index_find(&b->string_index, hash_string(s), string_eq, b, s);
    return (int64_t)found - 1;
}

/* Returns the string's index in the string table, or -ENOMEM. */
int64_t snapprof__pprof_intern_string(pprof_builder_t *b, const char *s)
{
    if (s == NULL)
        s = "";
    uint64_t h = hash_string(s);
    uint32_t found = snapprof__index_find(&b->string_index, h, string_eq, b, s);
    if (found)
        return (int64_t)found - 1;
    if (snapprof__index_reserve(&b->string_index) < 0)
        return -ENOMEM;
    char **strings = reserve(b->strings, &b->cap_strings, b->n_strings + 1, sizeof *strings);
    if (strings == NULL)
        return -ENOMEM;
    b->strings = strings;
    char *copy = snapprof__arena_strdup(&b->arena, s);
    if (copy == NULL)
        return -ENOMEM;
    b->strings[b->n_strings] = copy;
    snapprof__index_insert(&b->string_index, h, b->n_strings);
    return (int64_t)b->n_strings++;
}

static int mapping_eq(const void *owner, uint32_t index, const void *key)
{
    const pprof_builder_t *b = owner;
    const Snapprof__Pprof__Mapping *m = &b->mappings[index]->msg;
    const Snapprof__Pprof__Mapping *k = key;
    return m->memory_start == k->memory_start && m->memory_limit == k->memory_limit &&
           m->file_offset == k->file_offset && m->filename == k->filename &&
           m->build_id == k->build_id;
}

/* Mappings are keyed by what pprof sees of them (range, offset, file,
 * build-id) rather than by the module pointer, so two descriptions of one
 * module never become two mappings. */
int snapprof__pprof_intern_mapping(pprof_builder_t *b, const snapprof_module_t *module,
                                   mapping_entry_t **out)
{
    int64_t filename = snapprof__pprof_intern_string(b, module->path);
    if (filename < 0)
        return (int)filename;
    int64_t build_id = snapprof__pprof_intern_string(b, module->build_id);
    if (build_id < 0)
        return (int)build_id;
    Snapprof__Pprof__Mapping key = SNAPPROF__PPROF__MAPPING__INIT;
    key.memory_start = module->start;
    key.memory_limit = module->limit;
    key.file_offset = module->file_offset;
    key.filename = filename;
    key.build_id = build_id;
    uint64_t h = hash_word(0, key.memory_start);
    h = hash_word(h, key.memory_limit);
    h = hash_word(h, key.file_offset);
    h = hash_word(h, (uint64_t)filename);
    h = hash_finish(hash_word(h, (uint64_t)build_id));
    uint32_t found = snapprof__index_find(&b->mapping_index, h, mapping_eq, b, &key);
    if (found) {
        *out = b->mappings[found - 1];
        return 0;
    }
    if (snapprof__index_reserve(&b->mapping_index) < 0)
        return -ENOMEM;
    mapping_entry_t **mappings =
        reserve(b->mappings, &b->cap_mappings, b->n_mappings + 1, sizeof *mappings);
    if (mappings == NULL)
        return -ENOMEM;
    b->mappings = mappings;
    mapping_entry_t *e = arena_alloc(&b->arena, sizeof *e);
    if (e == NULL)
        return -ENOMEM;
    e->msg = key;
    e->msg.id = b->n_mappings + 1;
    b->mappings[b->n_mappings] = e;
    snapprof__index_insert(&b->mapping_index, h, b->n_mappings);
    b->n_mappings++;
    *out = e;
    return 0;
}

static int function_eq(const void *owner, uint32_t index, const void *key)
{
    const pprof_builder_t *b = owner;
    const Snapprof__Pprof__Function *f = b->functions[index];
    const function_key_t *k = key;
    return f->name == k->name && f->system_name == k->system_name && f->filename == k->filename;
}

/* Returns the id of the function (name, system_name, filename) in *id. */
static int intern_function(pprof_builder_t *b, const char *name, const char *system_name,
                           const char *filename, uint64_t *id)
{
    function_key_t key;
    key.name = snapprof__pprof_intern_string(b, name);
    key.system_name = snapprof__pprof_intern_string(b, system_name);
    key.filename = snapprof__pprof_intern_string(b, filename);
    if (key.name < 0 || key.system_name < 0 || key.filename < 0)
        return -ENOMEM;
    uint64_t h = hash_word(0, (uint64_t)key.name);
    h = hash_word(h, (uint64_t)key.system_name);
    h = hash_finish(hash_word(h, (uint64_t)key.filename));
    uint32_t found = snapprof__index_find(&b->function_index, h, function_eq, b, &key);
    if (found) {
        *id = b->functions[found - 1]->id;
        return 0;
    }
    if (snapprof__index_reserve(&b->function_index) < 0)
        return -ENOMEM;
    Snapprof__Pprof__Function **functions =
        reserve(b->functions, &b->cap_functions, b->n_functions + 1, sizeof *functions);
    if (functions == NULL)
        return -ENOMEM;
    b->functions = functions;
    Snapprof__Pprof__Function *f = arena_alloc(&b->arena, sizeof *f);
    if (f == NULL)
        return -ENOMEM;
    snapprof__pprof__function__init(f);
    f->id = b->n_functions + 1;
    f->name = key.name;
    f->system_name = key.system_name;
    f->filename = key.filename;
    b->functions[b->n_functions] = f;
    snapprof__index_insert(&b->function_index, h, b->n_functions);
    b->n_functions++;
    *id = f->id;
    return 0;
}

static int location_eq(const void *owner, uint32_t index, const void *key)
{
    const pprof_builder_t *b = owner;
    const location_key_t *have = &b->locations[index]->key;
    const location_key_t *k = key;
    return have->kind == k->kind && have->a == k->a && have->module == k->module;
}

/* Allocates the Lines of a native location by symbolizing its frame, once.
 * Returns the number of lines (0 when the address has no known function)
 * or a negative errno. */
static int symbolize_lines(pprof_builder_t *b, const snapprof_frame_t *frame,
                           Snapprof__Pprof__Line ***out)
{
    snapprof_symbol_t syms[MAX_INLINE_SYMBOLS];
    int n = snapprof_symbolize(frame, syms, MAX_INLINE_SYMBOLS);
    *out = NULL;
    /* A symbolizer error only costs the names: pprof still shows the
     * address, so the sample is kept. */
    if (n <= 0)
        return 0;
    if (n > MAX_INLINE_SYMBOLS)
        n = MAX_INLINE_SYMBOLS;
    Snapprof__Pprof__Line **lines = arena_alloc(&b->arena, (size_t)n * sizeof *lines);
    Snapprof__Pprof__Line *storage = arena_alloc(&b->arena, (size_t)n * sizeof *storage);
    if (lines == NULL || storage == NULL)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        const snapprof_symbol_t *sym = &syms[i];
        const char *name = sym->name ? sym->name : sym->system_name ? sym->system_name : "";
        const char *system_name = sym->system_name ? sym->system_name : name;
        snapprof__pprof__line__init(&storage[i]);
        int err = intern_function(b, name, system_name, sym->file, &storage[i].function_id);
        if (err < 0)
            return err;
        storage[i].line = sym->line > 0 ? sym->line : 0;
        lines[i] = &storage[i];
    }
    *out = lines;
    return n;
}

/* Allocates the single Line of a JIT or marker location. */
static int named_line(pprof_builder_t *b, const char *name, Snapprof__Pprof__Line ***out)
{
    Snapprof__Pprof__Line **lines = arena_alloc(&b->arena, sizeof *lines);
    Snapprof__Pprof__Line *line = arena_alloc(&b->arena, sizeof *line);
    if (lines == NULL || line == NULL)
        return -ENOMEM;
    snapprof__pprof__line__init(line);
    int err = intern_function(b, name, name, NULL, &line->function_id);
    if (err < 0)
        return err;
    lines[0] = line;
    *out = lines;
    return 1;
}

/* The name a JIT or marker frame is shown under. */
static const char *frame_name(const snapprof_frame_t *frame)
{
    if (frame->name != NULL && frame->name[0] != '\0')
        return frame->name;
    if (frame->kind == SNAPPROF_FRAME_JIT)
        return frame->module && frame->module->path ? frame->module->path : "[jit]";
    return "[unknown]";
}

/* Native frames get one location per (pc, module), symbolized the first
 * time it is seen; JIT frames one per (name, module) and marker frames one
 * per name, since their addresses say nothing pprof could use. */
int snapprof__pprof_intern_location(pprof_builder_t *b, const snapprof_frame_t *frame, uint64_t *id)
{
    location_key_t key;
    key.kind = frame->kind;
    const char *name = NULL;
    if (frame->kind == SNAPPROF_FRAME_NATIVE) {
        key.a = frame->pc;
        key.module = frame->module;
    } else {
        if (frame->kind != SNAPPROF_FRAME_JIT)
            key.kind = SNAPPROF_FRAME_MARKER;
        name = frame_name(frame);
        int64_t s = snapprof__pprof_intern_string(b, name);
        if (s < 0)
            return (int)s;
        key.a = (uint64_t)s;
        key.module = key.kind == SNAPPROF_FRAME_JIT ? frame->module : NULL;
    }
    uint64_t h = hash_word(0, (uint64_t)key.kind);
    h = hash_word(h, key.a);
    h = hash_finish(hash_word(h, (uint64_t)(uintptr_t)key.module));
    uint32_t found = snapprof__index_find(&b->location_index, h, location_eq, b, &key);
    if (found) {
        *id = b->locations[found - 1]->msg.id;
        return 0;
    }

    if (snapprof__index_reserve(&b->location_index) < 0)
        return -ENOMEM;
    location_entry_t **locations =
        reserve(b->locations, &b->cap_locations, b->n_locations + 1, sizeof *locations);
    if (locations == NULL)
        return -ENOMEM;
    b->locations = locations;
    mapping_entry_t *mapping = NULL;
    if (key.module != NULL) {
        int err = snapprof__pprof_intern_mapping(b, key.module, &mapping);
        if (err < 0)
            return err;
    }
    /* Native locations are symbolized when the profile completes: loading
     * an object's DWARF the first time can take most of a second (libc's
     * separate debug file: ~1 s to decompress), which must not stall the
     * sampling thread. */
    Snapprof__Pprof__Line **lines = NULL;
    int n_lines = key.kind == SNAPPROF_FRAME_NATIVE ? 0 : named_line(b, name, &lines);
    if (n_lines < 0)
        return n_lines;
    location_entry_t *e = arena_alloc(&b->arena, sizeof *e);
    if (e == NULL)
        return -ENOMEM;
    snapprof__pprof__location__init(&e->msg);
    e->msg.id = b->n_locations + 1;
    e->msg.mapping_id = mapping ? mapping->msg.id : 0;
    e->msg.address = key.kind == SNAPPROF_FRAME_MARKER ? 0 : frame->pc;
    e->msg.n_line = (size_t)n_lines;
    e->msg.line = lines;
    e->key = key;
    e->mapping = mapping;
    e->symbolized = key.kind != SNAPPROF_FRAME_NATIVE;
    b->locations[b->n_locations] = e;
    snapprof__index_insert(&b->location_index, h, b->n_locations);
    b->n_locations++;
    *id = e->msg.id;
    return 0;
}

/* Gives every native location its Lines. A location whose symbolization
 * ran out of memory is left for the next completion to retry; one the
 * symbolizer has no name for keeps its address alone. Returns 0 or
 * -ENOMEM. */
int snapprof__pprof_symbolize_locations(pprof_builder_t *b)
{
    for (size_t i = 0; i < b->n_locations; i++) {
        location_entry_t *e = b->locations[i];
        if (e->symbolized)
            continue;
        snapprof_frame_t frame = {
            .pc = (uintptr_t)e->key.a, .module = e->key.module, .kind = SNAPPROF_FRAME_NATIVE};
        Snapprof__Pprof__Line **lines;
        int n = symbolize_lines(b, &frame, &lines);
        if (n < 0)
            return n;
        e->msg.n_line = (size_t)n;
        e->msg.line = lines;
        e->symbolized = 1;
    }
    return 0;
}
