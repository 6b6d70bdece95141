#!/usr/bin/env bash
# The bounded fuzz step (fuzz/README.md): installs clang and libFuzzer if
# missing, builds the harnesses in build-fuzz with clang, libFuzzer, ASan
# and UBSan, and runs each for SECONDS (default 40) from its seed corpus as
# a ctest test labelled "fuzz", two at a time. Fails on any crash, leak,
# timeout or sanitizer report; the input that caused it is left in
# build-fuzz/fuzz/ as fuzz_<name>-crash-* (or -leak-, -timeout-, -oom-).
# tools/test.sh --sanitizers (and so .ci/run) runs it last.
#   bash tools/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-40}
# clang: the compiler; libclang-rt-14-dev: libFuzzer and the sanitizer
# runtimes for clang; llvm-14: llvm-symbolizer, for readable reports.
bash tools/setup.sh clang libclang-rt-14-dev llvm-14
jobs=$(nproc)
[ "$jobs" -gt 2 ] && jobs=2
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSNAPPROF_FUZZ=ON -DBUILD_TESTING=OFF \
  -DSNAPPROF_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSNAPPROF_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_all 2>&1 | grep -E "error|warning" || true
cmake --build build-fuzz -j"$jobs" --target fuzz_all >/dev/null
(cd build-fuzz && ctest --output-on-failure -j"$jobs" -L fuzz)
