#!/bin/sh
# Instructions the heap hooks add to a malloc+free pair (issue 27: the
# target is 20), by callgrind, in main only (--toggle-collect=main, so the
# sampling thread and start-up do not count): a loop of N pairs of 32-159
# bytes, run at N and 2N, the difference divided by N, for glibc alone, the
# hooks preloaded alone (they only forward), and the hooks with the
# sampler on at the default interval (SNAPPROF_HEAP=1). Not a ctest: run by
# hand, e.g. `nice -n 19 bench/heap_hook_cost.sh build`.
# usage: heap_hook_cost.sh BUILD_DIR [N]
set -eu
build=$(cd "$1" && pwd)
n=${2:-100000}
command -v valgrind >/dev/null || { echo "valgrind not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/loop.c" <<'C'
#include <stdlib.h>
int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    for (int i = 0; i < n; i++) {
        void *volatile p = malloc(32 + (i & 127));
        free(p);
    }
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
echo "instructions per malloc+free pair (callgrind, main only, $n and $((2 * n)) pairs):"
echo "  glibc alone:                 $base"
echo "  hooks preloaded, no sampler: $hooks (+$(echo "$hooks - $base" | bc))"
echo "  hooks + sampler (512 KiB):   $on (+$(echo "$on - $base" | bc))"
