# Builders attached to a running profiler for a stretch, and rolling
# profiles (snapprof record --loop): issue 28.
snapprof_add_test_cases(EXE profiler_attach SOURCES test_profiler_attach.c TIMEOUT 300)
