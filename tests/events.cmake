# Tests of zones, counters and instant events (events/).
snapprof_add_test_cases(EXE events SOURCES test_events.c test_sample_log.c)
target_compile_definitions(events PRIVATE
  SNAPPROF_TEST_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
# Through the real client, go tool pprof (-tags, -tagfocus=zone=...).
snapprof_add_test_cases(EXE events_e2e SOURCES test_events_end_to_end.c
  LABELS accuracy TIMEOUT 300)
# Exact function timing: this test is built with -finstrument-functions
# (its own functions only, not the case runner test_run_case*: the
# unbalanced case counts the timed frames from main down) and linked with
# libsnapprof-instrument.
snapprof_add_test_cases(EXE calls SOURCES test_calls.c LIBS snapprof_instrument)
target_compile_options(calls PRIVATE -finstrument-functions
  -finstrument-functions-exclude-function-list=calls_excluded_burn,test_run_case)
target_compile_definitions(calls PRIVATE SNAPPROF_TEST_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
