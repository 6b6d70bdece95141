# Tests of the stack_copier component.
snapprof_add_test_cases(EXE stack_copier SOURCES test_stack_copier.c)
# Sanitizers interpose malloc themselves, so this one runs in the plain build.
# Its cases in_handler, in_handler_perf and in_handler_timer (the thread
# capturing itself on its CPU-clock trigger) are the tests
# stack_copier_no_malloc_in_handler[_perf|_timer].
snapprof_add_test_cases(EXE stack_copier_no_malloc_in_handler SOURCES test_handler_no_malloc.c
  PREFIX stack_copier_no_malloc_ LABELS nosan)
