/* python/'s layout table against Debian 12's libpython3.11-dev headers:
 * every offset of the 3.11 entry is compared with offsetof() on the real
 * structs (Py_BUILD_CORE for the internal ones), and the selection by
 * version: 3.11.x known, 3.12/3.13 entries present but unknown, others
 * absent. Built only where the headers are (tests/python.cmake). */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>

#include "python/python_layout.h"
#include "test.h"
#include "test_util.h"

#include <stddef.h>

static void test_matches_headers(void)
{
    const snapprof__py_layout_t *l = snapprof__py_layout_for(PY_VERSION_HEX);
    ASSERT(l != NULL);
    ASSERT_EQ(l->version >> 16, PY_VERSION_HEX >> 16);
    ASSERT_EQ(l->runtime_interpreters_head, offsetof(_PyRuntimeState, interpreters.head));
    ASSERT_EQ(l->runtime_tstate_current, offsetof(_PyRuntimeState, gilstate.tstate_current));
    ASSERT_EQ(l->runtime_autotss, offsetof(_PyRuntimeState, gilstate.autoTSSkey));
    ASSERT_EQ(offsetof(Py_tss_t, _key), sizeof(int)); /* own_tstate() reads the key there */
    ASSERT_EQ(sizeof(((Py_tss_t *)0)->_key), sizeof(pthread_key_t));
    ASSERT_EQ(l->interp_threads_head, offsetof(PyInterpreterState, threads.head));
    ASSERT_EQ(offsetof(PyInterpreterState, next), 0); /* the refresh reads it at 0 */
    ASSERT_EQ(l->ts_next, offsetof(PyThreadState, next));
    ASSERT_EQ(l->ts_interp, offsetof(PyThreadState, interp));
    ASSERT_EQ(l->ts_cframe, offsetof(PyThreadState, cframe));
    ASSERT_EQ(l->ts_native_thread_id, offsetof(PyThreadState, native_thread_id));
    ASSERT_EQ(l->ts_datastack_chunk, offsetof(PyThreadState, datastack_chunk));
    ASSERT_EQ(l->ts_datastack_top, offsetof(PyThreadState, datastack_top));
    ASSERT_EQ(l->ts_datastack_limit, offsetof(PyThreadState, datastack_limit));
    ASSERT(l->ts_size >= offsetof(PyThreadState, datastack_limit) + sizeof(void *));
    ASSERT(l->ts_size <= sizeof(PyThreadState));
    ASSERT_EQ(l->cframe_current_frame, offsetof(_PyCFrame, current_frame));
    ASSERT_EQ(l->frame_code, offsetof(_PyInterpreterFrame, f_code));
    ASSERT_EQ(l->frame_previous, offsetof(_PyInterpreterFrame, previous));
    ASSERT_EQ(l->frame_prev_instr, offsetof(_PyInterpreterFrame, prev_instr));
    ASSERT_EQ(l->frame_is_entry, offsetof(_PyInterpreterFrame, is_entry));
    ASSERT_EQ(l->frame_owner, offsetof(_PyInterpreterFrame, owner));
    ASSERT_EQ(l->frame_size, offsetof(_PyInterpreterFrame, localsplus));
    ASSERT_EQ(l->code_type, offsetof(PyObject, ob_type));
    ASSERT_EQ(l->code_size, offsetof(PyVarObject, ob_size));
    ASSERT_EQ(l->code_firstlineno, offsetof(PyCodeObject, co_firstlineno));
    ASSERT_EQ(l->code_filename, offsetof(PyCodeObject, co_filename));
    ASSERT_EQ(l->code_name, offsetof(PyCodeObject, co_name));
    ASSERT_EQ(l->code_qualname, offsetof(PyCodeObject, co_qualname));
    /* The handler reads filename, name and qualname as one block. */
    ASSERT_EQ(l->code_name, l->code_filename + 8);
    ASSERT_EQ(l->code_qualname, l->code_filename + 16);
    ASSERT_EQ(l->code_linetable, offsetof(PyCodeObject, co_linetable));
    ASSERT_EQ(l->code_code, offsetof(PyCodeObject, co_code_adaptive));
    ASSERT_EQ(l->chunk_previous, offsetof(_PyStackChunk, previous));
    ASSERT_EQ(l->chunk_size, offsetof(_PyStackChunk, size));
    ASSERT_EQ(offsetof(_PyStackChunk, top), 16); /* the handler reads the header as 3 words */
    ASSERT_EQ(l->chunk_data, offsetof(_PyStackChunk, data));
    ASSERT_EQ(l->unicode_length, offsetof(PyASCIIObject, length));
    ASSERT_EQ(l->unicode_state, offsetof(PyASCIIObject, state));
    ASSERT_EQ(l->unicode_ascii_data, sizeof(PyASCIIObject));
    ASSERT_EQ(l->unicode_compact_data, sizeof(PyCompactUnicodeObject));
    ASSERT_EQ(l->bytes_size, offsetof(PyVarObject, ob_size));
    ASSERT_EQ(l->bytes_data, offsetof(PyBytesObject, ob_sval));
    ASSERT_EQ(sizeof(_Py_CODEUNIT), 2); /* instr counts code units of 2 bytes */
}

static void test_selection(void)
{
    ASSERT(snapprof__py_layout_for(0x030b02f0) != NULL); /* 3.11.2, Debian 12's */
    ASSERT(snapprof__py_layout_for(0x030b0af0) != NULL); /* any 3.11 */
    /* 3.12 and 3.13 are entries still to fill: unknown, native frames only. */
    ASSERT(snapprof__py_layout_entry(0x030c00f0) != NULL);
    ASSERT(snapprof__py_layout_for(0x030c00f0) == NULL);
    ASSERT(snapprof__py_layout_entry(0x030d00f0) != NULL);
    ASSERT(snapprof__py_layout_for(0x030d00f0) == NULL);
    ASSERT(snapprof__py_layout_entry(0x030a00f0) == NULL);
    ASSERT(snapprof__py_layout_for(0x030a00f0) == NULL);
    ASSERT(snapprof__py_layout_for(0) == NULL);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"matches_headers", test_matches_headers},
        {"selection", test_selection},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
