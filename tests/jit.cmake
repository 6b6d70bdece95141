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

# CPython's perf trampolines under `snapprof record` and the preload
# library: jit_cpython_prog copies trampolines of CPython's shapes into
# executable memory and names them in its perf map, as `python -X perf`
# does; its C code has no frame pointers, like the interpreter's.
add_executable(jit_cpython_prog jit_cpython_prog.c)
target_compile_options(jit_cpython_prog PRIVATE ${SNAPPROF_WARNINGS} -O2 -fomit-frame-pointer)
snapprof_add_test_cases(EXE jit_cpython SOURCES test_jit_cpython.c test_preload_util.c
  LIBS snapprof_jit_testutil LABELS preload TIMEOUT 240)
target_compile_definitions(jit_cpython PRIVATE
  SNAPPROF_CLI="$<TARGET_FILE:snapprof_cli>"
  SNAPPROF_PRELOAD_LIB="$<TARGET_FILE:snapprof_preload>"
  JIT_CPYTHON_PROG="$<TARGET_FILE:jit_cpython_prog>")
add_dependencies(jit_cpython snapprof_cli snapprof_preload jit_cpython_prog)
