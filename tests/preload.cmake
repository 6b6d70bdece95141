# Tests of the preload library, the `snapprof` command and the gperftools
# API: real programs run under `snapprof record` or LD_PRELOAD, their
# profiles read back through `go tool pprof`. Cases that LD_PRELOAD a
# library into a program are labelled nosan: a sanitizer runtime must come
# first in a process, which LD_PRELOAD of a sanitized library breaks.

# The program the tests profile; it knows nothing of snapprof.
add_executable(preload_prog test_preload_prog.c)
target_compile_options(preload_prog PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(preload_prog PRIVATE Threads::Threads)

# The same program linked against the preload library instead of preloaded
# with it: the library's constructor reads the same environment. This is
# how the preload logic runs under the sanitizers.
add_executable(preload_prog_linked test_preload_prog.c)
target_compile_options(preload_prog_linked PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(preload_prog_linked PRIVATE snapprof_preload Threads::Threads)

# A program written for gperftools, built unchanged against snapprof's
# <gperftools/profiler.h> and the preload library.
add_executable(preload_gperftools_prog test_preload_gperftools_prog.c)
target_compile_options(preload_gperftools_prog PRIVATE ${SNAPPROF_WARNINGS})
target_include_directories(preload_gperftools_prog PRIVATE ${PROJECT_SOURCE_DIR}/preload)
target_link_libraries(preload_gperftools_prog PRIVATE snapprof_preload Threads::Threads)

# A program that closes or replaces every fd it did not open, and one that
# opens files up to near its fd limit beside many threads (fds_prog.c).
add_executable(fds_prog fds_prog.c)
target_compile_options(fds_prog PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(fds_prog PRIVATE Threads::Threads)

# Frame pointers on: its wait's frame needs a guessed rbp (wall_stale_records).
add_executable(wall_stale_prog wall_stale_prog.c)
target_compile_options(wall_stale_prog PRIVATE ${SNAPPROF_WARNINGS} -fno-omit-frame-pointer)
target_link_libraries(wall_stale_prog PRIVATE Threads::Threads)

# A cgo program for the Go cases of `snapprof record`, built with the
# Debian Go toolchain (golang-go) when there is one: the standard library
# only, GOPATH mode, its cache in the build tree (no network, no $HOME).
find_program(SNAPPROF_GO go)
set(GO_CGO_SPIN "")
if(SNAPPROF_GO)
  set(GO_CGO_SPIN ${CMAKE_CURRENT_BINARY_DIR}/go_cgo_spin)
  add_custom_command(OUTPUT ${GO_CGO_SPIN}
    COMMAND ${CMAKE_COMMAND} -E env GO111MODULE=off CGO_ENABLED=1 GOFLAGS=
            GOCACHE=${CMAKE_CURRENT_BINARY_DIR}/go-cache GOPATH=${CMAKE_CURRENT_BINARY_DIR}/go-path
            CC=${CMAKE_C_COMPILER} ${SNAPPROF_GO} build -o ${GO_CGO_SPIN} main.go
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/go_cgo_spin
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/go_cgo_spin/main.go
    COMMENT "Building the cgo test program go_cgo_spin")
  add_custom_target(go_cgo_spin ALL DEPENDS ${GO_CGO_SPIN})
endif()

# A program whose hot loop is in a shared library linked with -s (no
# .symtab): `snapprof record` names the module, its share and its package.
add_library(preload_stripped_lib SHARED test_preload_stripped_lib.c)
target_compile_options(preload_stripped_lib PRIVATE ${SNAPPROF_WARNINGS} -O1)
set_target_properties(preload_stripped_lib PROPERTIES C_VISIBILITY_PRESET hidden)
target_link_options(preload_stripped_lib PRIVATE -s)
add_executable(preload_stripped_prog test_preload_stripped_prog.c)
target_compile_options(preload_stripped_prog PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(preload_stripped_prog PRIVATE preload_stripped_lib)
# The same linked against the preload library, for the sanitizers.
add_executable(preload_stripped_prog_linked test_preload_stripped_prog.c)
target_compile_options(preload_stripped_prog_linked PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(preload_stripped_prog_linked PRIVATE preload_stripped_lib snapprof_preload)
# It calls nothing of the preload: keep the library from --as-needed.
target_link_options(preload_stripped_prog_linked PRIVATE -Wl,--no-as-needed)

set(SNAPPROF_PRELOAD_TEST_DEFS
  SNAPPROF_CLI="$<TARGET_FILE:snapprof_cli>"
  SNAPPROF_PRELOAD_LIB="$<TARGET_FILE:snapprof_preload>"
  PRELOAD_PROG="$<TARGET_FILE:preload_prog>"
  FDS_PROG="$<TARGET_FILE:fds_prog>"
  WALL_STALE_PROG="$<TARGET_FILE:wall_stale_prog>"
  PRELOAD_PROG_LINKED="$<TARGET_FILE:preload_prog_linked>"
  GPERFTOOLS_PROG="$<TARGET_FILE:preload_gperftools_prog>"
  GO_CGO_SPIN_PROG="${GO_CGO_SPIN}"
  STRIPPED_PROG="$<TARGET_FILE:preload_stripped_prog>"
  STRIPPED_PROG_LINKED="$<TARGET_FILE:preload_stripped_prog_linked>"
  STRIPPED_LIB="$<TARGET_FILE_NAME:preload_stripped_lib>"
  SNAPPROF_TEST_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")

# snapprof_add_preload_tests(EXE <exe> SOURCES <files...>)
function(snapprof_add_preload_tests)
  cmake_parse_arguments(T "" "EXE" "SOURCES" ${ARGN})
  snapprof_add_test_cases(EXE ${T_EXE} SOURCES ${T_SOURCES} test_preload_util.c
    LABELS preload TIMEOUT 240)
  target_compile_definitions(${T_EXE} PRIVATE ${SNAPPROF_PRELOAD_TEST_DEFS})
  add_dependencies(${T_EXE} snapprof_cli snapprof_preload preload_prog preload_prog_linked
    preload_gperftools_prog fds_prog wall_stale_prog preload_stripped_prog preload_stripped_prog_linked)
endfunction()

# `snapprof record`: programs, signals, fork and exec, and bad input.
snapprof_add_preload_tests(EXE record SOURCES test_preload_record.c)
# `snapprof record --lines` and SNAPPROF_LINES.
snapprof_add_preload_tests(EXE record_lines SOURCES test_record_lines.c)
# `snapprof record` of a program started under a seccomp filter that kills
# for perf_event_open and process_vm_readv (common/seccomp.h). Its launcher
# is linked statically, so that LD_PRELOAD does not profile it: only the
# program it execs, as under systemd's SystemCallFilter=. Not in sanitizer
# builds (a static link with a sanitizer runtime; preload tests skip there).
if(NOT SNAPPROF_SANITIZE)
  add_executable(seccomp_exec seccomp_exec.c)
  target_compile_options(seccomp_exec PRIVATE ${SNAPPROF_WARNINGS})
  target_link_options(seccomp_exec PRIVATE -static)
  snapprof_add_preload_tests(EXE record_seccomp SOURCES test_record_seccomp.c)
  target_compile_definitions(record_seccomp PRIVATE SECCOMP_EXEC="$<TARGET_FILE:seccomp_exec>")
  add_dependencies(record_seccomp seccomp_exec)
endif()
if(TARGET go_cgo_spin)
  add_dependencies(record go_cgo_spin)
endif()

# `snapprof stats`: the counters of a real profile read back, bad files
# refused. No LD_PRELOAD: it runs under the sanitizers too.
snapprof_add_test_cases(EXE stats SOURCES test_cli_stats.c test_profile_builder_util.c test_preload_util.c
  TIMEOUT 120)
target_compile_definitions(stats PRIVATE SNAPPROF_CLI="$<TARGET_FILE:snapprof_cli>")
add_dependencies(stats snapprof_cli)

# What `record` says of a stripped module: the -dbg table and the dpkg
# lookup, on their own.
snapprof_add_test_cases(EXE cli_debug_hint SOURCES test_cli_debug_hint.c
  ${PROJECT_SOURCE_DIR}/cli/debug_hint.c TIMEOUT 60)
target_include_directories(cli_debug_hint PRIVATE ${PROJECT_SOURCE_DIR})

# The one grammar of durations (common/duration.h) and the bounds and
# reasons of --loop/--flight/SNAPPROF_LOOP (snapprof__parse_loop), on their own.
snapprof_add_test_cases(EXE duration PREFIX common_duration_ SOURCES test_duration.c
  ${PROJECT_SOURCE_DIR}/preload/preload_config.c
  ${PROJECT_SOURCE_DIR}/preload/file_names.c TIMEOUT 60)
target_include_directories(duration PRIVATE ${PROJECT_SOURCE_DIR})

# The names of the files a run writes (preload/file_names.c), on their own.
snapprof_add_test_cases(EXE file_names SOURCES test_file_names.c
  ${PROJECT_SOURCE_DIR}/preload/file_names.c TIMEOUT 60)
target_include_directories(file_names PRIVATE ${PROJECT_SOURCE_DIR})

# The preload library with LD_PRELOAD and the environment alone.
snapprof_add_preload_tests(EXE preload SOURCES test_preload_env.c)

# The gperftools API.
snapprof_add_preload_tests(EXE gperftools SOURCES test_preload_gperftools.c)

# The library calls the preload needed, tested on their own.
snapprof_add_test_cases(EXE profiler_api SOURCES test_preload_library.c test_preload_util.c)

# cmake --install into a temporary prefix, then build against it with
# pkg-config and with find_package(snapprof). A sanitized install cannot be
# linked by a plain compiler line: nosan.
add_test(NAME install_pkgconfig_cmake_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_preload_install.sh ${PROJECT_BINARY_DIR}
          ${CMAKE_C_COMPILER})
set_tests_properties(install_pkgconfig_cmake_cli PROPERTIES LABELS "nosan;preload" TIMEOUT 300)

# Four busy threads on a 2-core machine: with another test beside them the
# sampler gets a few dozen ticks a run and a thread can go unsampled.
snapprof_set_case_properties(EXE record CASES threads PROPERTIES RUN_SERIAL TRUE)
snapprof_set_case_properties(EXE preload CASES linked_threads PROPERTIES RUN_SERIAL TRUE)

# Programs that crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT), with and
# without handlers of their own, under `snapprof record`. LD_PRELOAD: the
# cases skip themselves in sanitizer builds, whose runtimes own the fault
# signals anyway.
add_executable(preload_crash_prog test_preload_crash_prog.c)
target_compile_options(preload_crash_prog PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(preload_crash_prog PRIVATE ${CMAKE_DL_LIBS})
snapprof_add_preload_tests(EXE crash SOURCES test_preload_crash.c)
target_compile_definitions(crash PRIVATE CRASH_PROG="$<TARGET_FILE:preload_crash_prog>")
add_dependencies(crash preload_crash_prog)

# The fd tests: the program's own alarm ends a hang (exit 142) well before
# this; the budget cases start 2000 threads each run, three runs a case.
snapprof_set_case_properties(EXE record CASES fds_closeall fds_closeall_short_threads fds_dup2
  fds_dup2_wall PROPERTIES TIMEOUT 150)
snapprof_set_case_properties(EXE record CASES fds_budget_cpu fds_budget_wall
  fds_budget_5000_cpu fds_budget_5000_wall PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
# 5000 threads sampled in wall mode: 22 s a run on a quiet machine, 138 s
# at a load average of 15, and past the program's 360 s alarm beside the
# whole suite (not yet known why; CPU mode takes 13 s). Labelled slow:
# tools/test.sh leaves it out until that is understood; run it with
# `ctest -L slow`.
snapprof_set_case_properties(EXE record CASES fds_budget_5000_wall
  PROPERTIES LABELS slow)

# dlclose() of libsnapprof-preload.so by a host that dlopen()ed it and goes
# on running with signals arriving (-z nodelete, as libsnapprof.so).
# Not a case table: it must not link the library it dlopens. nosan: the
# preload leaves a sanitized process unprofiled.
add_executable(preload_dlclose_prog test_preload_dlclose.c)
target_compile_options(preload_dlclose_prog PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(preload_dlclose_prog PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_dependencies(preload_dlclose_prog snapprof_preload)
add_test(NAME preload_dlclose COMMAND preload_dlclose_prog $<TARGET_FILE:snapprof_preload>)
set_tests_properties(preload_dlclose PROPERTIES TIMEOUT 120 LABELS "nosan;preload")

# Kernel time and processes that drop their privileges (kernel_prog.c),
# under `snapprof record`.
add_executable(kernel_prog kernel_prog.c)
target_compile_options(kernel_prog PRIVATE ${SNAPPROF_WARNINGS})
snapprof_add_preload_tests(EXE kernel SOURCES test_preload_kernel.c)
target_compile_definitions(kernel PRIVATE KERNEL_PROG="$<TARGET_FILE:kernel_prog>"
  SNAPPROF_LIB="$<TARGET_FILE:snapprof>")
add_dependencies(kernel kernel_prog)

# The README's embedding example (examples/whole_process.c): a host that
# starts one whole-process profile from code, with a thread from before the
# start and one from after it. Each thread does a fixed amount of work, so
# the profile must name all three threads' functions.
# TSan delivers a signal only when a thread enters its runtime, which the
# example's busy loops never do (see preload linked_threads): there only
# the profile's being written is checked.
if(SNAPPROF_SANITIZE MATCHES "thread")
  set(whole_process_check file)
else()
  set(whole_process_check functions)
endif()
add_test(NAME preload_whole_process_example
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_whole_process_example.sh $<TARGET_FILE:whole_process>
          ${whole_process_check})
set_tests_properties(preload_whole_process_example PROPERTIES LABELS "preload" TIMEOUT 120)

# Short-lived threads (issue 25, item 4): a thread-per-task program whose
# threads each use less than one sampling period, under `snapprof record`
# (tests record_short_threads_1khz, record_short_threads_100hz,
# record_short_threads_one_in_4, record_short_threads_default,
# record_short_threads_off,
# record_short_threads_timer_1khz, _timer_100hz and, alone,
# record_accuracy_short_threads_share). bench/bench_churn.sh runs the same
# program beside perf and gperftools.
add_executable(churn_prog churn_prog.c)
target_compile_options(churn_prog PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(churn_prog PRIVATE Threads::Threads)
snapprof_add_test_cases(EXE record_churn PREFIX record_
  SOURCES test_churn.c test_preload_util.c LABELS preload TIMEOUT 600)
target_compile_definitions(record_churn PRIVATE ${SNAPPROF_PRELOAD_TEST_DEFS}
  CHURN_PROG="$<TARGET_FILE:churn_prog>")
add_dependencies(record_churn snapprof_cli snapprof_preload churn_prog)
target_link_libraries(record_churn PRIVATE m)
# The accuracy case judges churn_work's CPU time in the profile against the
# threads' own measure, within 3.5 standard errors of its sample count
# (test_churn.c says why not the issue's 90 % of the whole profile): alone,
# in the plain suite, as the other attribution tests.
snapprof_set_case_properties(EXE record_churn CASES accuracy_short_threads_share
  PROPERTIES LABELS accuracy RUN_SERIAL TRUE TIMEOUT 900)
