# Tests of zones, counters and instant events (events/).
snapprof_add_test_cases(EXE events SOURCES test_events.c test_sample_log.c)
target_compile_definitions(events PRIVATE
  SNAPPROF_TEST_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
# Through the real client, go tool pprof (-tags, -tagfocus=zone=...).
snapprof_add_test_cases(EXE events_e2e SOURCES test_events_end_to_end.c
  LABELS accuracy TIMEOUT 300)
# Exact function timing: this test is built with -finstrument-functions
# and linked with libsnapprof-instrument. calls_excluded_burn and the case
# runner test_run_case* are marked no_instrument_function in the source
# (the unbalanced case counts the timed frames from main down); gcc's
# -finstrument-functions-exclude-function-list would break the clang build.
snapprof_add_test_cases(EXE calls SOURCES test_calls.c LIBS snapprof_instrument)
target_compile_options(calls PRIVATE -finstrument-functions)
target_compile_definitions(calls PRIVATE SNAPPROF_TEST_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
