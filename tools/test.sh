#!/usr/bin/env bash
# README command (b): set up, build with -Werror, run the whole ctest suite.
# With --sanitizers it then also builds the tree with clang and runs the
# suite there (but the accuracy tests, which gcc's run covers), runs the
# suite under ASan+UBSan and under TSan, and runs the bounded fuzz step
# (tools/fuzz.sh). Those install clang; the plain run needs no clang. That
# is what .ci/run does. Every build here has the test seams on
# (-DSNAPPROF_TEST_SEAMS=ON, tests/README.md), so that no case that needs
# one skips.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
jobs=$(nproc)

run_suite() { # dir, extra cmake args..., then -- ctest args...
  local dir=$1; shift
  local cmake_args=() ctest_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmake_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  ctest_args=("$@")
  cmake -S . -B "$dir" -DSNAPPROF_WERROR=ON -DSNAPPROF_TEST_SEAMS=ON "${cmake_args[@]}" >/dev/null
  cmake --build "$dir" -j"$jobs" 2>&1 | grep -E "error|warning" || true
  cmake --build "$dir" -j"$jobs" >/dev/null
  (cd "$dir" && ctest --output-on-failure -j"$jobs" "${ctest_args[@]}")
}

# "slow": record_fds_budget_5000_wall,
# run by hand (tests/preload.cmake says why).
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo -- -LE slow
if [ "${1:-}" = "--sanitizers" ]; then
  # Every C file as .clang-format lays it out (third-party sources aside).
  echo "== clang-format ==" >&2
  bash tools/setup.sh clang-format
  git ls-files -z '*.c' '*.h' ':!bench/third_party' | xargs -0 clang-format --dry-run --Werror
  # What a user installs: configured without SNAPPROF_TEST_SEAMS, whose
  # shipped files read no test-only environment variable.
  echo "== without test seams ==" >&2
  cmake -S . -B build-noseams -DSNAPPROF_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-noseams -j"$jobs" --target snapprof snapprof_preload snapprof_heap \
    snapprof_cli >/dev/null
  python3 tests/check_test_seams.py OFF . build-noseams/libsnapprof.so \
    build-noseams/preload/libsnapprof-preload.so build-noseams/preload_heap/libsnapprof-heap.so \
    build-noseams/cli/snapprof
  # The tree must build with clang as well as gcc (tests on, -Werror), and
  # the plain suite must pass with it. clang comes from tools/setup.sh,
  # as for the fuzz step below.
  echo "== clang ==" >&2
  bash tools/setup.sh clang libclang-rt-14-dev llvm-14
  CC=clang CXX=clang++ run_suite build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -- -LE "accuracy|slow"
  echo "== ASan + UBSan ==" >&2
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DSNAPPROF_SANITIZE=address,undefined -- -LE "accuracy|nosan"
  echo "== TSan ==" >&2
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_suite build-tsan -DCMAKE_BUILD_TYPE=Debug -DSNAPPROF_SANITIZE=thread -- -LE "accuracy|nosan"
  echo "== fuzz (libFuzzer, bounded) ==" >&2
  bash tools/fuzz.sh
fi
