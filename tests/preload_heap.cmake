# Tests of the heap hooks (preload_heap/): real programs run with
# LD_PRELOAD of libsnapprof-heap.so and of a test consumer that stands in
# for the heap sampler (test_preload_heap_consumer.c: defines
# snapprof_heap_note_alloc/free, counts what it is told). The programs keep
# their own tally and compare. Sanitizer builds skip them (77): the
# sanitizer runtimes own malloc and must load first.

add_library(preload_heap_consumer SHARED test_preload_heap_consumer.c)
target_compile_options(preload_heap_consumer PRIVATE ${SNAPPROF_WARNINGS})
set_target_properties(preload_heap_consumer PROPERTIES C_VISIBILITY_PRESET hidden)

# A stand-in for the sampler that attaches to the hooks' fast path
# (heap/heap_hook_abi.h) with a fixed countdown, and the program that
# checks what the hooks ask of it.
add_library(preload_heap_attach SHARED test_preload_heap_attach.c)
target_compile_options(preload_heap_attach PRIVATE ${SNAPPROF_WARNINGS})
target_include_directories(preload_heap_attach PRIVATE ${PROJECT_SOURCE_DIR})
set_target_properties(preload_heap_attach PROPERTIES C_VISIBILITY_PRESET hidden)
add_executable(preload_heap_fast_prog test_preload_heap_fast_prog.c)
target_compile_options(preload_heap_fast_prog PRIVATE ${SNAPPROF_WARNINGS} -fno-builtin)
target_link_libraries(preload_heap_fast_prog PRIVATE Threads::Threads ${CMAKE_DL_LIBS})

# Preloaded after the hooks: its constructor allocates before theirs runs.
add_library(preload_heap_early SHARED test_preload_heap_early.c)
target_compile_options(preload_heap_early PRIVATE ${SNAPPROF_WARNINGS})
set_target_properties(preload_heap_early PROPERTIES C_VISIBILITY_PRESET hidden)
target_link_libraries(preload_heap_early PRIVATE ${CMAKE_DL_LIBS})

# A dlsym that allocates, preloaded after the hooks.
add_library(preload_heap_dlsym SHARED test_preload_heap_dlsym.c)
target_compile_options(preload_heap_dlsym PRIVATE ${SNAPPROF_WARNINGS})
set_target_properties(preload_heap_dlsym PROPERTIES C_VISIBILITY_PRESET hidden)
target_link_libraries(preload_heap_dlsym PRIVATE ${CMAKE_DL_LIBS})

# -fno-builtin in the programs: they check what the allocator does, which
# a compiler that knows malloc (clang assumes it never sets errno, and may
# leave out an allocation freed at once) would answer for it.
add_executable(preload_heap_prog test_preload_heap_prog.c)
target_compile_options(preload_heap_prog PRIVATE ${SNAPPROF_WARNINGS} -fno-builtin)
target_link_libraries(preload_heap_prog PRIVATE Threads::Threads ${CMAKE_DL_LIBS})

add_executable(preload_heap_prog_cxx test_preload_heap_prog_cxx.cpp)
# Sized operator delete is declared by clang only with -fsized-deallocation.
set(PRELOAD_HEAP_CXX_FLAGS -Wall -Wextra $<$<BOOL:${SNAPPROF_WERROR}>:-Werror> -fno-builtin
  $<$<CXX_COMPILER_ID:Clang>:-fsized-deallocation>)
target_compile_options(preload_heap_prog_cxx PRIVATE ${PRELOAD_HEAP_CXX_FLAGS})
set_target_properties(preload_heap_prog_cxx PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
target_link_libraries(preload_heap_prog_cxx PRIVATE ${CMAKE_DL_LIBS})

snapprof_add_test_cases(EXE preload_heap SOURCES test_preload_heap_hooks.c test_preload_util.c
  PREFIX preload_heap_ LABELS preload TIMEOUT 120)
target_compile_definitions(preload_heap PRIVATE
  HEAP_LIB="$<TARGET_FILE:snapprof_heap>"
  HEAP_CONSUMER="$<TARGET_FILE:preload_heap_consumer>"
  HEAP_EARLY="$<TARGET_FILE:preload_heap_early>"
  HEAP_DLSYM="$<TARGET_FILE:preload_heap_dlsym>"
  HEAP_PROG="$<TARGET_FILE:preload_heap_prog>"
  HEAP_PROG_CXX="$<TARGET_FILE:preload_heap_prog_cxx>"
  HEAP_ATTACH="$<TARGET_FILE:preload_heap_attach>"
  HEAP_FAST_PROG="$<TARGET_FILE:preload_heap_fast_prog>"
  )
add_dependencies(preload_heap snapprof_heap preload_heap_consumer preload_heap_early preload_heap_dlsym
  preload_heap_prog preload_heap_prog_cxx preload_heap_attach preload_heap_fast_prog)
