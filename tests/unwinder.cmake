# Tests of the unwinder component.
snapprof_add_test_cases(EXE unwinder_fp SOURCES test_unwinder_fp.c)

# Workloads for the CFI tests are built like most code on a distribution:
# -O2 without frame pointers (the later flags win over the project's
# -fno-omit-frame-pointer). Sibling calls stay calls so that expected
# stacks are exact; -rdynamic lets any symbolizer name the test functions.
set(SNAPPROF_NOFP_FLAGS -O2 -fomit-frame-pointer -momit-leaf-frame-pointer
    -fno-optimize-sibling-calls)

add_library(snapprof_unwind_testutil STATIC unwind_test_util.c)
target_compile_options(snapprof_unwind_testutil PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(snapprof_unwind_testutil PUBLIC snapprof_testutil ${CMAKE_DL_LIBS})

# A second shared library without frame pointers, linked in; and one that
# the dlclose test loads and unloads.
add_library(unwinder_testlib SHARED unwinder_testlib.c)
target_compile_options(unwinder_testlib PRIVATE ${SNAPPROF_WARNINGS} ${SNAPPROF_NOFP_FLAGS})
add_library(unwinder_dllib MODULE unwinder_dllib.c)
target_compile_options(unwinder_dllib PRIVATE ${SNAPPROF_WARNINGS} ${SNAPPROF_NOFP_FLAGS})

snapprof_add_test_cases(EXE unwinder_cfi SOURCES test_unwinder_cfi.c unwind_fuzz.c
  LIBS snapprof_unwind_testutil unwinder_testlib ${CMAKE_DL_LIBS})
target_compile_options(unwinder_cfi PRIVATE ${SNAPPROF_NOFP_FLAGS})
target_compile_definitions(unwinder_cfi PRIVATE
  SNAPPROF_TEST_DLLIB="$<TARGET_FILE:unwinder_dllib>")
set_target_properties(unwinder_cfi PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(unwinder_cfi unwinder_dllib)
# Attribution and rates need undisturbed signal timing (see CMakeLists.txt).
snapprof_set_case_properties(EXE unwinder_cfi CASES ratio rates
  PROPERTIES LABELS accuracy RUN_SERIAL TRUE TIMEOUT 600)

# The same questions on a frame-pointer build, where the hybrid must keep
# the leaf's caller that frame-pointer walking loses.
snapprof_add_test_cases(EXE unwinder_hybrid SOURCES test_unwinder_hybrid.c
  LABELS accuracy TIMEOUT 300 LIBS snapprof_unwind_testutil)
target_compile_options(unwinder_hybrid PRIVATE -O2 -fno-omit-frame-pointer
  -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls)
set_target_properties(unwinder_hybrid PROPERTIES ENABLE_EXPORTS ON)

# The .debug_frame unwinder: a library whose CFI is only in .debug_frame
# (no .eh_frame FDE), linked in; a copy of it loaded with dlopen whose
# .debug_frame was moved into a separate file that .gnu_debuglink names;
# and a copy compiled into the test executable (which has .eh_frame_hdr).
set(SNAPPROF_DEBUG_FRAME_ONLY_FLAGS -g -fno-asynchronous-unwind-tables -fno-unwind-tables)
add_library(unwinder_dflib SHARED unwinder_dflib.c)
target_compile_options(unwinder_dflib PRIVATE ${SNAPPROF_WARNINGS} ${SNAPPROF_NOFP_FLAGS}
  ${SNAPPROF_DEBUG_FRAME_ONLY_FLAGS})
add_library(unwinder_dflib_split MODULE unwinder_dflib_split.c)
target_compile_options(unwinder_dflib_split PRIVATE ${SNAPPROF_WARNINGS} ${SNAPPROF_NOFP_FLAGS}
  ${SNAPPROF_DEBUG_FRAME_ONLY_FLAGS})
add_custom_command(TARGET unwinder_dflib_split POST_BUILD
  COMMAND ${CMAKE_OBJCOPY} --only-keep-debug $<TARGET_FILE_NAME:unwinder_dflib_split>
          $<TARGET_FILE_NAME:unwinder_dflib_split>.debug
  COMMAND ${CMAKE_STRIP} --strip-debug $<TARGET_FILE_NAME:unwinder_dflib_split>
  COMMAND ${CMAKE_OBJCOPY} --add-gnu-debuglink=$<TARGET_FILE_NAME:unwinder_dflib_split>.debug
          $<TARGET_FILE_NAME:unwinder_dflib_split>
  WORKING_DIRECTORY $<TARGET_FILE_DIR:unwinder_dflib_split>
  VERBATIM)

snapprof_add_test_cases(EXE unwinder_debug_frame
  SOURCES test_unwinder_debug_frame.c unwinder_dfexe.c unwind_fuzz.c
  LIBS snapprof_unwind_testutil unwinder_dflib ${CMAKE_DL_LIBS})
target_compile_options(unwinder_debug_frame PRIVATE ${SNAPPROF_NOFP_FLAGS})
set_source_files_properties(unwinder_dfexe.c PROPERTIES
  COMPILE_OPTIONS "${SNAPPROF_DEBUG_FRAME_ONLY_FLAGS}")
target_compile_definitions(unwinder_debug_frame PRIVATE
  SNAPPROF_TEST_DFLIB_SPLIT="$<TARGET_FILE:unwinder_dflib_split>")
set_target_properties(unwinder_debug_frame PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(unwinder_debug_frame unwinder_dflib_split)

# The CFI table unwinder (issue 16): the cases above that the default chain
# runs, again with the tables in front of libunwind (see uw_profile()).
foreach(c qsort_bsearch shared_lib alloca_vla deep_recursion depth_cap signal_handler dlclose)
  add_test(NAME unwinder_cfi_table_${c} COMMAND unwinder_cfi ${c})
  set_tests_properties(unwinder_cfi_table_${c} PROPERTIES SKIP_RETURN_CODE 77
    TIMEOUT ${SNAPPROF_TEST_TIMEOUT} ENVIRONMENT SNAPPROF_TEST_UNWINDER=cfi_table)
endforeach()
foreach(c no_eh_frame default_chain separate_debug_file executable)
  add_test(NAME unwinder_cfi_table_df_${c} COMMAND unwinder_debug_frame ${c})
  set_tests_properties(unwinder_cfi_table_df_${c} PROPERTIES SKIP_RETURN_CODE 77
    TIMEOUT ${SNAPPROF_TEST_TIMEOUT} ENVIRONMENT SNAPPROF_TEST_UNWINDER=cfi_table)
endforeach()

# The CFI tables against libunwind on the same copies, one step from every
# pc of a set of functions, per-FDE against whole tables, and dlclose.
snapprof_add_test_cases(EXE unwinder_cfi_table SOURCES test_unwinder_cfi_table.c
  LIBS snapprof_unwind_testutil unwinder_testlib unwinder_dflib ${CMAKE_DL_LIBS})
target_compile_options(unwinder_cfi_table PRIVATE ${SNAPPROF_NOFP_FLAGS})
target_compile_definitions(unwinder_cfi_table PRIVATE
  SNAPPROF_TEST_DLLIB="$<TARGET_FILE:unwinder_dllib>")
set_target_properties(unwinder_cfi_table PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(unwinder_cfi_table unwinder_dllib)
