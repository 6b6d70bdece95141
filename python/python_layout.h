/* The per-version facts about CPython's internals that the Python-frame
 * reader needs: one table (python_layout.c), one entry per minor version.
 * Internal.
 *
 * Every offset is in bytes from the start of its struct, as laid out by
 * an x86-64 build of that version's Include/internal headers. A version
 * whose entry is not known means native frames only. */
#ifndef SNAPPROF_PYTHON_LAYOUT_H
#define SNAPPROF_PYTHON_LAYOUT_H

#include <stdint.h>

typedef struct snapprof__py_layout {
    uint32_t version; /* PY_VERSION_HEX of the major.minor, 0x030b0000 for 3.11 */
    const char *name; /* "3.11" */
    int known;        /* 0: an entry to fill; native frames only */
    /* _PyRuntimeState: interpreters.head; the thread state that holds the
     * GIL (gilstate.tstate_current, 0: none in this version's layout); the
     * thread-specific key of each thread's own thread state
     * (gilstate.autoTSSkey, a Py_tss_t: int _is_initialized, then the
     * pthread_key_t; 0: none in this version's layout). */
    uint16_t runtime_interpreters_head, runtime_tstate_current, runtime_autotss;
    /* PyInterpreterState: the first thread state (threads.head). */
    uint16_t interp_threads_head;
    /* PyThreadState. */
    uint16_t ts_next, ts_interp, ts_cframe, ts_native_thread_id;
    uint16_t ts_datastack_chunk, ts_datastack_top, ts_datastack_limit;
    uint16_t ts_size; /* bytes read of a thread state: past the last field above */
    /* _PyCFrame. */
    uint16_t cframe_current_frame;
    /* _PyInterpreterFrame. */
    uint16_t frame_code, frame_previous, frame_prev_instr, frame_is_entry, frame_owner;
    uint16_t frame_size; /* up to localsplus: what a walk reads of a frame */
    /* PyCodeObject. */
    uint16_t code_type, code_size, code_firstlineno, code_filename, code_name, code_qualname,
        code_linetable, code_code;
    /* _PyStackChunk. */
    uint16_t chunk_previous, chunk_size, chunk_data;
    /* Unicode (compact forms) and bytes objects. */
    uint16_t unicode_length, unicode_state, unicode_ascii_data, unicode_compact_data;
    uint16_t bytes_size, bytes_data;
} snapprof__py_layout_t;

/* The layout of the interpreter whose Py_Version (or PY_VERSION_HEX) is
 * version, or NULL when the table has no known entry for its major.minor.
 * Any thread. */
const snapprof__py_layout_t *snapprof__py_layout_for(uint32_t version);

/* The table's entry for version's major.minor, known or not (NULL when it
 * has none): for the summary's wording and the tests. Any thread. */
const snapprof__py_layout_t *snapprof__py_layout_entry(uint32_t version);

#endif
