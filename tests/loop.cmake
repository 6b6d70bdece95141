# Builders attached to a running profiler for a stretch, and rolling
# profiles (snapprof record --loop): issue 28.
snapprof_add_test_cases(EXE profiler_attach SOURCES test_profiler_attach.c TIMEOUT 300)
add_executable(loop_prog test_loop_prog.c)
target_compile_options(loop_prog PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(loop_prog PRIVATE Threads::Threads)
snapprof_add_preload_tests(EXE loop SOURCES test_loop_record.c test_profile_builder_util.c)
target_compile_definitions(loop PRIVATE LOOP_PROG="$<TARGET_FILE:loop_prog>")
add_dependencies(loop loop_prog)
