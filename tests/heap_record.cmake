# Heap profiles from `snapprof record --heap` and SNAPPROF_HEAP=1 with the
# preload (issue 27, "Where users reach it"): a real program that allocates
# known bytes, run with libsnapprof-heap.so and libsnapprof-preload.so, its
# profiles read back through `go tool pprof`. Sanitizers own malloc: every
# case skips there.
add_executable(preload_heap_record_prog test_preload_heap_record_prog.c)
target_compile_options(preload_heap_record_prog PRIVATE ${SNAPPROF_WARNINGS} -fno-builtin)

snapprof_add_preload_tests(EXE heap_record SOURCES test_preload_heap_record.c)
target_compile_definitions(heap_record PRIVATE
  HEAP_RECORD_PROG="$<TARGET_FILE:preload_heap_record_prog>"
  HEAP_LIB="$<TARGET_FILE:snapprof_heap>")
add_dependencies(heap_record preload_heap_record_prog snapprof_heap)
