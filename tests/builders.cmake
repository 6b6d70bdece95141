# Tests of the folded-stacks and timeline builders (profile_builder/).
snapprof_add_test_cases(EXE builders
  SOURCES test_builders.c ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_builder_util.c TIMEOUT 300)
# -O2 whatever the build type, so that bt_inlined really is inlined code
# with DWARF inline records (sanitizer builds are Debug).
target_compile_options(builders PRIVATE -O2 -g)
target_compile_definitions(builders PRIVATE
  SNAPPROF_TEST_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
# The custom builder example (docs/custom_builder.md) runs and names both
# of its workloads. Under TSan one of them is enough: TSan holds an
# asynchronous signal until a point of its own (an interceptor, a blocking
# call), so a CPU-clock trigger's captures land there, not where the time
# went (CI's TSan run once saw 301 of 302 samples in work_sum).
add_test(NAME builders_custom_builder_example COMMAND custom_builder)
if(SNAPPROF_SANITIZE MATCHES "thread")
  set(custom_builder_regex "[0-9]+  work_(sum|hash)")
else()
  set(custom_builder_regex "work_sum[^\n]*\n.*work_hash|work_hash[^\n]*\n.*work_sum")
endif()
set_tests_properties(builders_custom_builder_example PROPERTIES
  PASS_REGULAR_EXPRESSION "${custom_builder_regex}" TIMEOUT 120)
