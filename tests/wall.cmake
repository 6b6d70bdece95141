# Tests of wall mode without signals to blocked threads
# (stack_copier/stack_copier_proc.c, sampling_thread/profiler.c).
snapprof_add_test_cases(EXE wall SOURCES test_wall.c
  CASES sleepers sleepers_timer sleepers_perf runnable preempted_in_syscall blocks_all_signals woken_during_copy woken_during_copy_perf capture_older_than_wait
        proc_refused moved_wait TIMEOUT 300)
