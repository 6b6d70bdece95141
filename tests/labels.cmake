# Tests of sample labels and app frames (labels/).
snapprof_add_test_cases(EXE labels SOURCES test_labels.c test_sample_log.c
  CASES api set_cost capture_in_handler no_torn_values wall_reuse_keeps_labels app_frame_ids
        thread_exit_frees)
# Through the real client, go tool pprof (-tags, -tagfocus).
snapprof_add_test_cases(EXE labels_e2e SOURCES test_labels_end_to_end.c test_sample_log.c
  CASES tagfocus_threads hitch_frames LABELS accuracy TIMEOUT 300)
