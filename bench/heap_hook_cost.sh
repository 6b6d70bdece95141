#!/bin/sh
# Instructions the heap hooks add to a malloc+free pair (issue 27: the
# target is 20), by callgrind, in main only (--toggle-collect=main, so the
# sampling thread and start-up do not count): a loop of N pairs of 32-159
# bytes, run at N and 2N, the difference divided by N, for glibc alone, the
# hooks preloaded alone (they only forward), and the hooks with the
# sampler on at the default interval (SNAPPROF_HEAP=1); beside them the
# same loop's CPU time per pair, natively, the three cases alternated in
# each of ROUNDS rounds (default 5) of TIME_N pairs (default 20000000),
# median. Not a ctest: run by hand, e.g. `nice -n 19 bench/heap_hook_cost.sh
# build`.
# usage: [ROUNDS=R] [TIME_N=M] [BEFORE=BUILD_DIR2] heap_hook_cost.sh BUILD_DIR [N]
set -eu
build=$(cd "$1" && pwd)
n=${2:-100000}
command -v valgrind >/dev/null || { echo "valgrind not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/loop.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}
int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    double t0 = cpu_ns();
    for (int i = 0; i < n; i++) {
        void *volatile p = malloc(32 + (i & 127));
        free(p);
    }
    double t = cpu_ns() - t0;
    if (argc > 2)
        printf("%.2f\n", t / n);
    return 0;
}
C
${CC:-cc} -O2 -fno-builtin -o "$tmp/loop" "$tmp/loop.c"
heap=$build/preload_heap/libsnapprof-heap.so
preload=$build/preload/libsnapprof-preload.so
ir() { # ir N ENV... : main's instructions
  count=$1; shift
  env "$@" valgrind --tool=callgrind --toggle-collect=main \
    --callgrind-out-file="$tmp/cg.out" "$tmp/loop" "$count" >/dev/null 2>&1
  awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg.out"
}
per_pair() { # per_pair ENV...
  a=$(ir "$n" "$@"); b=$(ir $((2 * n)) "$@")
  echo "scale=1; ($b - $a) / $n" | bc
}
base=$(per_pair X=1)
hooks=$(per_pair LD_PRELOAD="$heap")
on=$(per_pair LD_PRELOAD="$heap $preload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz")
# CPU time of the loop's thread per pair, natively: ROUNDS rounds of
# TIME_N pairs, the three cases in turn in each round, the median.
rounds=${ROUNDS:-5}
time_n=${TIME_N:-20000000}
ns() { # ns ENV... : the loop's thread CPU ns per pair, one run
  env "$@" "$tmp/loop" "$time_n" t
}
# BEFORE=OTHER_BUILD_DIR: that build's hooks measured too, in the same
# rounds (its instruction counts as well).
if [ -n "${BEFORE:-}" ]; then
  before=$(cd "$BEFORE" && pwd)
  bheap=$before/preload_heap/libsnapprof-heap.so
  bpreload=$before/preload/libsnapprof-preload.so
fi
: >"$tmp/t_base"; : >"$tmp/t_hooks"; : >"$tmp/t_on"; : >"$tmp/b_hooks"; : >"$tmp/b_on"
i=0
while [ "$i" -lt "$rounds" ]; do
  ns X=1 >>"$tmp/t_base"
  ns LD_PRELOAD="$heap" >>"$tmp/t_hooks"
  ns LD_PRELOAD="$heap $preload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz" >>"$tmp/t_on"
  if [ -n "${BEFORE:-}" ]; then
    ns LD_PRELOAD="$bheap" >>"$tmp/b_hooks"
    ns LD_PRELOAD="$bheap $bpreload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz" >>"$tmp/b_on"
  fi
  i=$((i + 1))
done
median() { sort -n "$1" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
tb=$(median "$tmp/t_base"); th=$(median "$tmp/t_hooks"); to=$(median "$tmp/t_on")
echo "per malloc+free pair: instructions (callgrind, main only, $n and $((2 * n)) pairs),"
echo "and the loop thread's CPU ns (median of $rounds rounds of $time_n pairs, cases alternated):"
echo "                               instructions         ns"
printf '  glibc alone:                 %6.1f           %6.2f\n' "$base" "$tb"
printf '  hooks preloaded, no sampler: %6.1f (%+5.1f)   %6.2f (%+.2f)\n' "$hooks" \
  "$(echo "$hooks - $base" | bc)" "$th" "$(echo "$th - $tb" | bc)"
printf '  hooks + sampler (512 KiB):   %6.1f (%+5.1f)   %6.2f (%+.2f)\n' "$on" \
  "$(echo "$on - $base" | bc)" "$to" "$(echo "$to - $tb" | bc)"
if [ -n "${BEFORE:-}" ]; then
  bh=$(per_pair LD_PRELOAD="$bheap")
  bo=$(per_pair LD_PRELOAD="$bheap $bpreload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz")
  tbh=$(median "$tmp/b_hooks"); tbo=$(median "$tmp/b_on")
  echo "  $BEFORE:"
  printf '  hooks preloaded, no sampler: %6.1f (%+5.1f)   %6.2f (%+.2f)\n' "$bh" \
    "$(echo "$bh - $base" | bc)" "$tbh" "$(echo "$tbh - $tb" | bc)"
  printf '  hooks + sampler (512 KiB):   %6.1f (%+5.1f)   %6.2f (%+.2f)\n' "$bo" \
    "$(echo "$bo - $base" | bc)" "$tbo" "$(echo "$tbo - $tb" | bc)"
fi
