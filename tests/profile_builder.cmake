# Tests of the profile_builder component.
set(PBT_UTIL ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_builder_util.c)
snapprof_add_test(NAME profile_builder_pprof_roundtrip
  SOURCES test_profile_builder_pprof_roundtrip.c ${PBT_UTIL})
