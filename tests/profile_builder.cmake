# Tests of the profile_builder component.
set(PBT_UTIL ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_builder_util.c)
# One executable per file, each with one case named after the file's last
# words: test profile_builder_pprof_oom runs "profile_builder_pprof_oom oom"
# (the oom one interposes malloc, so they stay apart).
snapprof_add_test_cases(EXE profile_builder_create SOURCES test_profile_builder_create.c
  PREFIX profile_builder_)
foreach(t roundtrip validity aggregation bad_path write_failure scale native)
  snapprof_add_test_cases(EXE profile_builder_pprof_${t}
    SOURCES test_profile_builder_pprof_${t}.c ${PBT_UTIL} PREFIX profile_builder_pprof_)
endforeach()
snapprof_add_test_cases(EXE profile_builder_pprof_oom
  SOURCES test_profile_builder_pprof_oom.c ${PBT_UTIL} ${CMAKE_CURRENT_SOURCE_DIR}/test_builder_oom.c
  PREFIX profile_builder_pprof_)
# The comment lines and the hidden counters of a pprof profile.
snapprof_add_test_cases(EXE profile_builder_pprof_stats
  SOURCES test_profile_builder_pprof_stats.c ${PBT_UTIL})
# The flight builder: the last minutes of a profile, replayed on demand.
snapprof_add_test_cases(EXE profile_builder_flight SOURCES test_profile_builder_flight.c
  PREFIX profile_builder_flight_ TIMEOUT 300)
