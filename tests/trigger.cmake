# Tests of the CPU-clock triggers (trigger/, stack_copier/stack_copier_slots.c).
snapprof_add_test_cases(EXE trigger SOURCES test_trigger.c trigger_deep_work.c TIMEOUT 600)
# The deep recursion of trigger_deep_stacks_two_threads as a distribution
# builds code: no frame pointers (the source's options come after the
# project's -fno-omit-frame-pointer, so they win).
set_source_files_properties(trigger_deep_work.c PROPERTIES COMPILE_OPTIONS
  "-O2;-fomit-frame-pointer;-momit-leaf-frame-pointer;-fno-optimize-sibling-calls")
# Shares of CPU with more threads than cores, and of threads that work in
# step with their CPU clock: run alone, in the plain build (tests
# trigger_accuracy_oversubscribed_shares and trigger_accuracy_phase_locked_shares).
snapprof_set_case_properties(EXE trigger
  CASES accuracy_oversubscribed_shares accuracy_phase_locked_shares
  PROPERTIES LABELS accuracy RUN_SERIAL TRUE TIMEOUT 600)
# Two threads 1.3 MiB deep at 1 kHz: whether the sampling thread keeps up
# (a sanitizer build's unwinding does not: its slots fill and its budget of
# large buffers runs out, as TSan's stacks are larger too), so run alone, in
# the plain build.
snapprof_set_case_properties(EXE trigger CASES deep_stacks_two_threads
  PROPERTIES LABELS accuracy RUN_SERIAL TRUE TIMEOUT 600)
# The perf trigger's periods, on an arm the test makes itself: they keep
# changing, and each capture weighs the one in force (tests
# trigger_period_period_keeps_changing, _keeps_changing_no_page,
# trigger_period_weight_is_period_in_force).
snapprof_add_test_cases(EXE trigger_period SOURCES test_trigger_period.c)
# A trigger's capture of a thread whose sp cannot be read counts
# sp_out_of_range (tests trigger_sp_out_of_range_perf, _timer).
snapprof_add_test_cases(EXE trigger_sp_out_of_range SOURCES test_trigger_sp_out_of_range.c)
