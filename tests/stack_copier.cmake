# Tests of the stack_copier component.
snapprof_add_test_cases(EXE stack_copier SOURCES test_stack_copier.c
  CASES sentinels truncated exited_thread blocked_signal
        late_signal_serves_next_request late_signal_other_thread sp_out_of_range recycled_tid exiting_thread capture_in_exiting_thread
        chains_foreign_signals handler_replaced other_signals_wait chained_handler_mask)
# Sanitizers interpose malloc themselves, so this one runs in the plain build.
snapprof_add_test(NAME stack_copier_no_malloc_in_handler SOURCES test_handler_no_malloc.c
  LABELS nosan)
# The same with the thread capturing itself on its CPU-clock trigger.
foreach(trigger perf timer)
  add_test(NAME stack_copier_no_malloc_in_handler_${trigger}
           COMMAND stack_copier_no_malloc_in_handler ${trigger})
  set_tests_properties(stack_copier_no_malloc_in_handler_${trigger} PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT ${SNAPPROF_TEST_TIMEOUT} LABELS nosan)
endforeach()
