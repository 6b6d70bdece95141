# Tests of the heap profile builders (issue 27): synthetic heap samples,
# checked by go tool pprof.
snapprof_add_test_cases(EXE profile_builder_heap
  SOURCES test_profile_builder_heap.c ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_builder_util.c
  PREFIX profile_builder_heap_)
# Interposes malloc, so it is an executable of its own.
snapprof_add_test_cases(EXE profile_builder_heap_oom
  SOURCES test_profile_builder_heap_oom.c ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_builder_util.c
    ${CMAKE_CURRENT_SOURCE_DIR}/test_builder_oom.c
  PREFIX profile_builder_heap_)
