# GOT patching (heap_got/, issue 27 (b)): a program linked against the
# library (and against heap_got_lib, whose allocations go through its own
# GOT) calls snapprof_heap_hooks_install() and profiles its heap. Runs in
# the sanitizer builds too: there the GOT way is the only one.
add_library(heap_got_lib SHARED test_heap_got_lib.c)
add_library(heap_got_dl SHARED test_heap_got_dl.c)
foreach(lib heap_got_lib heap_got_dl)
  # -fno-builtin: the allocations stay calls of malloc through the GOT.
  target_compile_options(${lib} PRIVATE ${SNAPPROF_WARNINGS} -fno-builtin)
endforeach()
add_library(heap_got_cxx SHARED test_heap_got_cxx.cpp)
target_compile_options(heap_got_cxx PRIVATE -Wall -Wextra -fno-builtin)
snapprof_add_test_cases(EXE heap_got SOURCES test_heap_got.c
  LIBS heap_got_lib heap_got_cxx Threads::Threads ${CMAKE_DL_LIBS})
target_compile_options(heap_got PRIVATE -fno-builtin)
add_dependencies(heap_got heap_got_dl snapprof_heap)
target_compile_definitions(heap_got PRIVATE
  HEAP_GOT_DL="$<TARGET_FILE:heap_got_dl>"
  HEAP_GOT_PRELOAD="$<TARGET_FILE:snapprof_heap>")
# The preload's hooks find the sampler's note functions in the program (the
# library is linked statically into the tests).
set_target_properties(heap_got PROPERTIES ENABLE_EXPORTS ON)
