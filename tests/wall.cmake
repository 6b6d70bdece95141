# Tests of wall mode without signals to blocked threads
# (stack_copier/stack_copier_proc.c, sampling_thread/profiler.c).
snapprof_add_test_cases(EXE wall SOURCES test_wall.c TIMEOUT 300)
