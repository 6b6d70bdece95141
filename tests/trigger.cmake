# Tests of the CPU-clock triggers (trigger/, stack_copier/stack_copier_slots.c).
snapprof_add_test_cases(EXE trigger SOURCES test_trigger.c
  CASES perf_forced timer_forced timer_first_period handshake_forced fallback_when_perf_refused sleepers_no_eintr
        handshake_skips_sleeping blocked_signal
        churn_perf churn_timer short_threads_unarmed fork_child full_slots deep_stack TIMEOUT 600)
# Shares of CPU with more threads than cores: run alone, in the plain build.
snapprof_add_test_cases(EXE trigger_accuracy SOURCES test_trigger.c
  CASES oversubscribed_shares LABELS accuracy TIMEOUT 600)
