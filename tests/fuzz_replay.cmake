# The libFuzzer harnesses of fuzz/ built without libFuzzer (fuzz/replay_main.c
# gives them a main): each replays its seed corpus, and with it every input
# that once crashed it (fuzz/corpus/<name>/regress-*), in the plain and the
# sanitizer suites, whose compiler need not be clang.
function(snapprof_add_fuzz_replay name)
  set(exe fuzz_replay_${name})
  add_executable(${exe} ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${name}.c
    ${PROJECT_SOURCE_DIR}/fuzz/replay_main.c ${ARGN})
  target_compile_options(${exe} PRIVATE ${SNAPPROF_WARNINGS})
  target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/fuzz)
  target_link_libraries(${exe} PRIVATE snapprof_testutil)
  add_test(NAME ${exe} COMMAND ${exe} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name}
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(${exe} PROPERTIES TIMEOUT 300)
endfunction()

snapprof_add_fuzz_replay(unwind ${PROJECT_SOURCE_DIR}/fuzz/fuzz_unwind_dframe.c)
set_source_files_properties(${PROJECT_SOURCE_DIR}/fuzz/fuzz_unwind_dframe.c PROPERTIES
  COMPILE_OPTIONS "-g;-fno-asynchronous-unwind-tables;-fno-unwind-tables")
snapprof_add_fuzz_replay(pprof ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_builder_util.c)
snapprof_add_fuzz_replay(symbols)
snapprof_add_fuzz_replay(perf_map)
snapprof_add_fuzz_replay(env ${PROJECT_SOURCE_DIR}/preload/preload_config.c ${PROJECT_SOURCE_DIR}/preload/file_names.c)
snapprof_add_fuzz_replay(record_options ${PROJECT_SOURCE_DIR}/preload/preload_config.c ${PROJECT_SOURCE_DIR}/preload/file_names.c
  ${PROJECT_SOURCE_DIR}/cli/debug_hint.c ${PROJECT_SOURCE_DIR}/cli/snapprof_record_summary.c
  ${PROJECT_SOURCE_DIR}/cli/snapprof_http.c)
