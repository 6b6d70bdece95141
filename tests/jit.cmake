# Tests of JIT support: code regions, perf maps, the JIT unwinder, and
# profiles of a tiny JIT read back through go tool pprof.
add_library(snapprof_jit_testutil STATIC test_jit_util.c)
target_compile_options(snapprof_jit_testutil PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(snapprof_jit_testutil PUBLIC snapprof_testutil)

snapprof_add_test_cases(EXE jit_regions SOURCES test_jit_regions.c LIBS snapprof_jit_testutil
  CASES register_lookup bad_args unregister_keeps_entry lookup_by_time graveyard_cap concurrent)
snapprof_add_test_cases(EXE jit_perf_map SOURCES test_jit_perf_map.c LIBS snapprof_jit_testutil
  CASES lines grows replaced rewritten overlong_line layout_and_off)
snapprof_add_test_cases(EXE jit_unwinder SOURCES test_jit_unwinder.c LIBS snapprof_jit_testutil
  CASES interleaved without_jit_unwinder bad_frames depth_cap unwound_late)
# Real profiles: they sample at up to 5 kHz and read the result with pprof.
snapprof_add_test_cases(EXE jit_profile SOURCES test_jit_profile.c LIBS snapprof_jit_testutil
  CASES interleaved_api interleaved_perf_map default_chain interleaved_hybrid fixed_frame
        fixed_frame_default_chain fixed_frame_hybrid reuse_while_sampling
  TIMEOUT 300)
