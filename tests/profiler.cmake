# Tests of the profiler and the sampling thread.
snapprof_add_test_cases(EXE profiler SOURCES test_profiler.c TIMEOUT 600)
# Through the real client, go tool pprof.
snapprof_add_test_cases(EXE pprof_e2e SOURCES test_pprof_end_to_end.c LABELS accuracy TIMEOUT 600)
add_dependencies(pprof_e2e demo)
