# Tests of the profiler and the sampling thread.
snapprof_add_test_cases(EXE profiler SOURCES test_profiler.c TIMEOUT 600)
# A thread that blocks the signal for 3 ms of CPU at a time: the handshake
# may wait no longer than that for it, so a second busy test beside it on a
# 2-core machine makes its requests time out (2-94 timeouts for a limit of 2
# at load averages of 15 and above; none on a quiet machine). Alone.
snapprof_set_case_properties(EXE profiler CASES handshake_beside_trigger
  PROPERTIES RUN_SERIAL TRUE)
# Through the real client, go tool pprof.
snapprof_add_test_cases(EXE pprof_e2e SOURCES test_pprof_end_to_end.c LABELS accuracy TIMEOUT 600)
add_dependencies(pprof_e2e demo)
# dlclose() of libsnapprof.so by a host that goes on running (-z nodelete).
# Not a case table: it must not link the library it dlopens.
add_executable(library_dlclose_prog test_library_dlclose.c)
target_compile_options(library_dlclose_prog PRIVATE ${SNAPPROF_WARNINGS})
target_include_directories(library_dlclose_prog PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(library_dlclose_prog PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_dependencies(library_dlclose_prog snapprof)
add_test(NAME library_dlclose COMMAND library_dlclose_prog $<TARGET_FILE:snapprof>)
set_tests_properties(library_dlclose PROPERTIES TIMEOUT 120 LABELS "nosan")
# Fork children that find the labels', events' and JIT tables' locks held
# by a thread of the parent (common/fork_resets.h).
snapprof_add_test_cases(EXE fork_child SOURCES test_fork_child.c TIMEOUT 300)
# A tick's drain within its budget, the rest delivered by the next ticks
# (soak finding 9). Busy threads and a slow builder: alone.
snapprof_add_test_cases(EXE profiler_drain_budget SOURCES test_profiler_drain_budget.c)
snapprof_set_case_properties(EXE profiler_drain_budget CASES deep_backlog exit_backlog
  PROPERTIES RUN_SERIAL TRUE)
