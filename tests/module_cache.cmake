# Tests of the module_cache component.

# A small library the tests dlopen and dlclose. It is only loaded at run
# time, never linked, so the tests can watch it come and go.
add_library(module_cache_testlib SHARED test_module_cache_lib.c)
target_compile_options(module_cache_testlib PRIVATE ${SNAPPROF_WARNINGS})
set_target_properties(module_cache_testlib PROPERTIES C_VISIBILITY_PRESET default)
target_link_libraries(module_cache_testlib PRIVATE ${CMAKE_DL_LIBS})

snapprof_add_test(NAME module_cache_matches_proc_maps
                  SOURCES test_module_cache_matches_proc_maps.c)
snapprof_add_test(NAME module_cache_build_id SOURCES test_module_cache_build_id.c)
snapprof_add_test(NAME module_cache_symbolize SOURCES test_module_cache_symbolize.c)
snapprof_add_test(NAME module_cache_dlopen_dlclose SOURCES test_module_cache_dlopen_dlclose.c)
snapprof_add_test(NAME module_cache_anon_exec SOURCES test_module_cache_anon_exec.c)
snapprof_add_test(NAME module_cache_concurrent SOURCES test_module_cache_concurrent.c
                  TIMEOUT 60)
foreach(t module_cache_dlopen_dlclose module_cache_concurrent)
  add_dependencies(${t} module_cache_testlib)
  target_compile_definitions(${t} PRIVATE
    MC_TESTLIB_PATH="$<TARGET_FILE:module_cache_testlib>")
endforeach()
# The library's constructor finds mc_testlib_ctor_hook in the test binary.
set_target_properties(module_cache_concurrent PROPERTIES ENABLE_EXPORTS ON)
