# Tests of the module_cache component.

# A small library the tests dlopen and dlclose. It is only loaded at run
# time, never linked, so the tests can watch it come and go.
add_library(module_cache_testlib SHARED test_module_cache_lib.c)
target_compile_options(module_cache_testlib PRIVATE ${SNAPPROF_WARNINGS})
set_target_properties(module_cache_testlib PROPERTIES C_VISIBILITY_PRESET default)
target_link_libraries(module_cache_testlib PRIVATE ${CMAKE_DL_LIBS})

# One executable per file, each with one case named after the file's last
# words: test module_cache_build_id runs "module_cache_build_id build_id".
# They stay apart because the cache is per process and what each finds
# depends on what the process loaded (module_cache_concurrent exports a
# hook that the test library's constructor looks for).
foreach(t matches_proc_maps build_id symbolize dlopen_dlclose anon_exec half_loaded)
  snapprof_add_test_cases(EXE module_cache_${t} SOURCES test_module_cache_${t}.c
    PREFIX module_cache_)
endforeach()
snapprof_add_test_cases(EXE module_cache_concurrent SOURCES test_module_cache_concurrent.c
  PREFIX module_cache_ TIMEOUT 60)
foreach(t module_cache_dlopen_dlclose module_cache_half_loaded module_cache_concurrent)
  add_dependencies(${t} module_cache_testlib)
  target_compile_definitions(${t} PRIVATE
    MC_TESTLIB_PATH="$<TARGET_FILE:module_cache_testlib>")
endforeach()
# The library's constructor finds mc_testlib_ctor_hook in the test binary.
set_target_properties(module_cache_concurrent PROPERTIES ENABLE_EXPORTS ON)
