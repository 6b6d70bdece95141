# Tests of the profiler and the sampling thread.
snapprof_add_test_cases(EXE profiler SOURCES test_profiler.c
  CASES stop_without_start start_twice start_failure_undone bad_params defaults destroy_while_running two_concurrent sampler_behind stop_while_completing_behind two_on_one_thread_perf two_on_one_thread_timer two_on_one_thread_mixed three_on_one_thread handshake_beside_trigger
        thread_exits thread_exits_auto add_exited_thread join_leave_between_ticks blocked_signal idle_nanosleep_wall idle_poll_wall idle_nanosleep_cpu
        register_tid register_tid_unanswered register_tid_signal threads_and_builder_errors duration start_in_fork_child fork_with_waiter
        error_names params_size stats_size TIMEOUT 600)
# Through the real client, go tool pprof.
snapprof_add_test_cases(EXE pprof_e2e SOURCES test_pprof_end_to_end.c
  CASES known_ratio demo_binary_moved LABELS accuracy TIMEOUT 600)
add_dependencies(pprof_e2e demo)
