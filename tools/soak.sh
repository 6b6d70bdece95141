#!/usr/bin/env bash
# The full soak of issue 14 (tests/soak/README.md): soak_prog for 60 s
# (or $1 seconds) at 4 kHz in the ASan+UBSan build and in the TSan build,
# with the options CI uses, judged as ctest's soak_short judges its 12 s.
# Not part of ctest: it takes minutes and the whole machine.
# SOAK_HEAP=1: with heap profiling too (soak_prog --heap, soak_heap's
# checks; tests/soak/README.md).
#   [SOAK_HEAP=1] bash tools/soak.sh [SECONDS] [asan|tsan ...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(asan tsan)
status=0
case=full
[ "${SOAK_HEAP:-0}" = 1 ] && case=fullheap
for b in "${builds[@]}"; do
  case $b in
    asan) dir=build-asan; san=address,undefined; build_type=Debug ;;
    tsan) dir=build-tsan; san=thread; build_type=Debug ;;
    *) echo "unknown build $b (asan or tsan)" >&2; exit 2 ;;
  esac
  cmake -S . -B "$dir" -DSNAPPROF_WERROR=ON -DCMAKE_BUILD_TYPE=$build_type \
    -DSNAPPROF_SANITIZE=$san >/dev/null
  nice -n 10 cmake --build "$dir" -j2 --target soak >/dev/null
  echo "== $b: ${seconds} s ($case) ==" >&2
  start=$(date +%s)
  if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
     TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
     "$dir/tests/soak/soak" "$case" "$seconds"; then
    echo "== $b: passed in $(( $(date +%s) - start )) s ==" >&2
  else
    echo "== $b: FAILED after $(( $(date +%s) - start )) s ==" >&2
    status=1
  fi
done
exit $status
