#!/bin/sh
# One bounded libFuzzer run for ctest: run_bounded.sh EXE SEED_DIR SECONDS [FLAGS...]
# Starts from the seed corpus (read only: new inputs go to a scratch
# directory) with a fixed random seed, so that every run tries the same
# inputs in the same order and CI cannot turn red on a new find that a
# developer's longer run of the same sequence did not make first (finding
# new crashes is the long runs' job, fuzz/README.md); stops after SECONDS, and fails on any crash, leak, timeout,
# out-of-memory or sanitizer report; the input that caused it is left as
# crash-*/leak-*/timeout-*/oom-* in the working directory. ASan's
# quarantine is 64 MB instead of 256: the harnesses free what each input
# allocated, and recycled memory spares page faults that, on a VM, cost
# more than the code under test.
set -eu
exe=$1 seeds=$2 seconds=$3
shift 3
name=$(basename "$exe")
scratch=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:quarantine_size_mb=64} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
"$exe" -seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="./$name-" "$@" "$scratch" "$seeds"
