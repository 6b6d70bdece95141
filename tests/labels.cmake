# Tests of sample labels and app frames (labels/).
snapprof_add_test_cases(EXE labels SOURCES test_labels.c test_sample_log.c)
# Through the real client, go tool pprof (-tags, -tagfocus).
snapprof_add_test_cases(EXE labels_e2e SOURCES test_labels_end_to_end.c test_sample_log.c
  LABELS accuracy TIMEOUT 300)
