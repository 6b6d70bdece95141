# Tests of the unwinder component.
snapprof_add_test_cases(EXE unwinder_fp SOURCES test_unwinder_fp.c
  CASES good_chain outside_stack points_to_itself cycle overflow misaligned below_sp depth_cap
        unknown_pc)
