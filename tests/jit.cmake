# Tests of JIT support: code regions, perf maps, the JIT unwinder, and
# profiles of a tiny JIT read back through go tool pprof.
add_library(snapprof_jit_testutil STATIC test_jit_util.c)
target_compile_options(snapprof_jit_testutil PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(snapprof_jit_testutil PUBLIC snapprof_testutil)

snapprof_add_test_cases(EXE jit_regions SOURCES test_jit_regions.c LIBS snapprof_jit_testutil)
snapprof_add_test_cases(EXE jit_perf_map SOURCES test_jit_perf_map.c LIBS snapprof_jit_testutil)
snapprof_add_test_cases(EXE jit_unwinder SOURCES test_jit_unwinder.c LIBS snapprof_jit_testutil)
# Real profiles: they sample at up to 5 kHz and read the result with pprof.
snapprof_add_test_cases(EXE jit_profile SOURCES test_jit_profile.c LIBS snapprof_jit_testutil
  TIMEOUT 300)
