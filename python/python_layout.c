/* The one table of per-version CPython layouts (python_layout.h). 3.11 is
 * checked field by field against Debian 12's libpython3.11-dev headers by
 * the test python_layout_matches_headers; 3.12 (entry frames marked by a
 * shim frame owned by the C stack) and 3.13 (_Py_DebugOffsets at the start
 * of _PyRuntime) are entries still to fill: known = 0, native frames only. */
#include "python/python_layout.h"

#include <stddef.h>

static const snapprof__py_layout_t layouts[] = {
    {
        .version = 0x030b0000,
        .name = "3.11",
        .known = 1,
        .runtime_interpreters_head = 40,
        .runtime_tstate_current = 576,
        .runtime_autotss = 592,
        .interp_threads_head = 16,
        .ts_next = 8,
        .ts_interp = 16,
        .ts_cframe = 56,
        .ts_native_thread_id = 160,
        .ts_datastack_chunk = 296,
        .ts_datastack_top = 304,
        .ts_datastack_limit = 312,
        .ts_size = 320,
        .cframe_current_frame = 8,
        .frame_code = 32,
        .frame_previous = 48,
        .frame_prev_instr = 56,
        .frame_is_entry = 68,
        .frame_owner = 69,
        .frame_size = 72,
        .code_type = 8,
        .code_size = 16,
        .code_firstlineno = 72,
        .code_filename = 112,
        .code_name = 120,
        .code_qualname = 128,
        .code_linetable = 136,
        .code_code = 184,
        .chunk_previous = 0,
        .chunk_size = 8,
        .chunk_data = 24,
        .unicode_length = 16,
        .unicode_state = 32,
        .unicode_ascii_data = 48,
        .unicode_compact_data = 72,
        .bytes_size = 16,
        .bytes_data = 32,
    },
    {.version = 0x030c0000, .name = "3.12", .known = 0},
    {.version = 0x030d0000, .name = "3.13", .known = 0},
};

const snapprof__py_layout_t *snapprof__py_layout_entry(uint32_t version)
{
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if ((layouts[i].version >> 16) == (version >> 16))
            return &layouts[i];
    return NULL;
}

const snapprof__py_layout_t *snapprof__py_layout_for(uint32_t version)
{
    const snapprof__py_layout_t *l = snapprof__py_layout_entry(version);
    return l != NULL && l->known ? l : NULL;
}
