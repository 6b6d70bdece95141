# Tests of the profiler and the sampling thread.
snapprof_add_test_cases(EXE profiler SOURCES test_profiler.c TIMEOUT 600)
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
