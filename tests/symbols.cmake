# Tests of symbolization (module_cache/symbols_*.c).

# A library split into a stripped object and a separate debug file, found
# by .gnu_debuglink (libsymbols_test_debuglink.so) or by build-id
# (libsymbols_test_buildid.so, the test makes the .build-id directory). A
# MODULE has no SONAME, so copies of it load side by side.
set(SYMBOLS_DEBUG_DIR ${CMAKE_CURRENT_BINARY_DIR}/symbols_debug)
add_library(symbols_test_lib MODULE symbols_test_lib.c)
target_compile_options(symbols_test_lib PRIVATE ${SNAPPROF_WARNINGS} -O2 -g)
set_target_properties(symbols_test_lib PROPERTIES PREFIX lib C_VISIBILITY_PRESET default)
add_custom_command(TARGET symbols_test_lib POST_BUILD
  COMMAND ${CMAKE_COMMAND} -E make_directory ${SYMBOLS_DEBUG_DIR}
  COMMAND ${CMAKE_OBJCOPY} --only-keep-debug $<TARGET_FILE:symbols_test_lib>
          ${SYMBOLS_DEBUG_DIR}/libsymbols_test_lib.so.debug
  COMMAND ${CMAKE_OBJCOPY} --strip-all
          --add-gnu-debuglink=${SYMBOLS_DEBUG_DIR}/libsymbols_test_lib.so.debug
          $<TARGET_FILE:symbols_test_lib> ${SYMBOLS_DEBUG_DIR}/libsymbols_test_debuglink.so
  COMMAND ${CMAKE_OBJCOPY} --strip-all $<TARGET_FILE:symbols_test_lib>
          ${SYMBOLS_DEBUG_DIR}/libsymbols_test_buildid.so
  COMMENT "Splitting libsymbols_test_lib.so into stripped objects and a debug file")
# The same code without any debug information.
add_library(symbols_test_nodebug MODULE symbols_test_lib.c)
target_compile_options(symbols_test_nodebug PRIVATE ${SNAPPROF_WARNINGS} -O2 -g0)
set_target_properties(symbols_test_nodebug PROPERTIES PREFIX lib C_VISIBILITY_PRESET default)

# C++ functions for the demangling case (C++ warnings: -Wstrict-prototypes
# is C only).
set(SNAPPROF_CXX_WARNINGS -Wall -Wextra)
if(SNAPPROF_WERROR)
  list(APPEND SNAPPROF_CXX_WARNINGS -Werror)
endif()
add_library(symbols_test_cxx STATIC test_symbols_cxx.cpp)
target_compile_options(symbols_test_cxx PRIVATE ${SNAPPROF_CXX_WARNINGS} -O2 -g)

snapprof_add_test_cases(EXE symbols
  SOURCES test_symbols.c ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_builder_util.c
  LIBS symbols_test_cxx ${CMAKE_DL_LIBS})
# -O2 whatever the build type, so that the always-inline helper is inlined
# code with DWARF inline records.
target_compile_options(symbols PRIVATE -O2 -g)
add_dependencies(symbols symbols_test_lib symbols_test_nodebug)

# Programs the end-to-end cases copy, run and delete: a -O2 -g C program
# with an always-inline hot loop, and a C++ one.
add_executable(symbols_inline_prog symbols_inline_prog.c)
target_compile_options(symbols_inline_prog PRIVATE ${SNAPPROF_WARNINGS} -O2 -g)
target_link_libraries(symbols_inline_prog PRIVATE snapprof)
add_executable(symbols_cxx_prog symbols_cxx_prog.cpp)
target_compile_options(symbols_cxx_prog PRIVATE ${SNAPPROF_CXX_WARNINGS} -O2 -g)
target_link_libraries(symbols_cxx_prog PRIVATE snapprof)
snapprof_add_test_cases(EXE symbols_e2e SOURCES test_symbols_end_to_end.c TIMEOUT 300)
add_dependencies(symbols_e2e symbols_inline_prog symbols_cxx_prog)
target_compile_definitions(symbols_e2e PRIVATE
  SNAPPROF_TEST_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}"
  SYMBOLS_INLINE_PROG="$<TARGET_FILE:symbols_inline_prog>"
  SYMBOLS_CXX_PROG="$<TARGET_FILE:symbols_cxx_prog>")
