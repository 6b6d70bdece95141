# The heap benchmark's accuracy workload (bench/heap_truth.c, issue 27):
# its small mode's truth adds up and its blocks in use at exit are live.
# No profiler runs here (the benchmark's peers are not test dependencies).
add_test(NAME heap_truth_consistent
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_heap_truth.sh $<TARGET_FILE:heap_truth>)
set_tests_properties(heap_truth_consistent PROPERTIES TIMEOUT 120)
