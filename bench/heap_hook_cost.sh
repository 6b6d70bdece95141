#!/bin/sh
# Instructions the heap hooks add to a malloc+free pair (issue 27: the
# target is 20), by callgrind, in main only (--toggle-collect=main, so the
# sampling thread and start-up do not count): a loop of N pairs of 32-159
# bytes, run at N and 2N, the difference divided by N, for glibc alone, the
# hooks preloaded alone (they only forward), the hooks with the sampler on
# at the default interval (SNAPPROF_HEAP=1), and the same two for the GOT
# hooks (the loop linked against libsnapprof, calling
# snapprof_heap_hooks_install() first; the sampler is the CPU preload's,
# SNAPPROF_HEAP=1, without libsnapprof-heap.so). Then, per hooked case
# with the sampler on, the instructions of each function of ours (callgrind
# self cost of the functions whose source is in this tree: the hooks'
# malloc and free), per pair. Beside them the same loop's CPU time per
# pair, natively, the cases alternated in each of ROUNDS rounds (default 5;
# 0: no timing) of TIME_N pairs (default 20000000), median. Not a ctest:
# run by hand, e.g. `nice -n 19 bench/heap_hook_cost.sh build`.
# usage: [ROUNDS=R] [TIME_N=M] [BEFORE=BUILD_DIR2] heap_hook_cost.sh BUILD_DIR [N]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
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
#if defined(GOT)
#include <snapprof/heap.h>
#endif
int main(int argc, char **argv)
{
#if defined(GOT)
    if (snapprof_heap_hooks_install() <= 0) {
        fprintf(stderr, "snapprof_heap_hooks_install() patched nothing\n");
        return 1;
    }
#endif
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
${CC:-cc} -O2 -fno-builtin -DGOT -I"$root/include" -o "$tmp/loop_got" "$tmp/loop.c" \
  -L"$build" -lsnapprof -Wl,-rpath,"$build"
heap=$build/preload_heap/libsnapprof-heap.so
preload=$build/preload/libsnapprof-preload.so
prog=loop
ir() { # ir N ENV... : main's instructions; leaves $tmp/cg.N
  count=$1; shift
  env "$@" valgrind --tool=callgrind --toggle-collect=main \
    --callgrind-out-file="$tmp/cg.$count" "$tmp/$prog" "$count" >/dev/null 2>&1
  awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg.$count"
}
# own_fns N: "function instructions" for each function whose source file is
# in this tree (callgrind self cost; inlined code counts where its file
# is, so the hooks' inlined helpers are summed into their function), and
# the GOT hooks (hg_*: their section has no line table callgrind reads).
# Run from $tmp: callgrind_annotate shortens paths under the current
# directory.
own_fns() {
  (cd "$tmp" && callgrind_annotate --inclusive=no --threshold=100 --auto=no "cg.$1" 2>/dev/null) |
    awk -v root="$root/" '
      /^ *[0-9,]+ +\( *[0-9.]+%\) +/ && (index($0, root) || /\?\?\?:hg_/) {
        x = $1; gsub(/,/, "", x); s = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", s)
        sub(/ \[[^]]*\]$/, "", s); sub(/.*:/, "", s); v[s] += x }
      END { for (k in v) print k, v[k] }'
}
per_pair() { # per_pair ENV... : instructions per pair; own functions in $tmp/fns
  a=$(ir "$n" "$@"); own_fns "$n" >"$tmp/fns.a"
  b=$(ir $((2 * n)) "$@"); own_fns $((2 * n)) >"$tmp/fns.b"
  awk -v n="$n" 'NR == FNR { a[$1] = $2; next } { d = ($2 - a[$1]) / n; if (d >= 0.05) printf "%s %.1f\n", $1, d }' \
    "$tmp/fns.a" "$tmp/fns.b" | sort >"$tmp/fns"
  echo "scale=1; ($b - $a) / $n" | bc
}
fns() { awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }' "$tmp/fns"; }
base=$(per_pair X=1)
hooks=$(per_pair LD_PRELOAD="$heap")
on=$(per_pair LD_PRELOAD="$heap $preload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz")
on_fns=$(fns)
prog=loop_got
got=$(per_pair X=1)
got_on=$(per_pair LD_PRELOAD="$preload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz")
got_fns=$(fns)
prog=loop
# CPU time of the loop's thread per pair, natively: ROUNDS rounds of
# TIME_N pairs, the three cases in turn in each round, the median.
rounds=${ROUNDS:-5}
time_n=${TIME_N:-20000000}
ns() { # ns ENV... : the loop's thread CPU ns per pair, one run
  env "$@" "$tmp/$prog" "$time_n" t
}
# BEFORE=OTHER_BUILD_DIR: that build's hooks measured too, in the same
# rounds (its instruction counts as well).
if [ -n "${BEFORE:-}" ]; then
  before=$(cd "$BEFORE" && pwd)
  bheap=$before/preload_heap/libsnapprof-heap.so
  bpreload=$before/preload/libsnapprof-preload.so
fi
: >"$tmp/t_base"; : >"$tmp/t_hooks"; : >"$tmp/t_on"; : >"$tmp/b_hooks"; : >"$tmp/b_on"
: >"$tmp/t_got"; : >"$tmp/t_got_on"
i=0
while [ "$i" -lt "$rounds" ]; do
  ns X=1 >>"$tmp/t_base"
  ns LD_PRELOAD="$heap" >>"$tmp/t_hooks"
  ns LD_PRELOAD="$heap $preload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz" >>"$tmp/t_on"
  prog=loop_got
  ns X=1 >>"$tmp/t_got"
  ns LD_PRELOAD="$preload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz" >>"$tmp/t_got_on"
  prog=loop
  if [ -n "${BEFORE:-}" ]; then
    ns LD_PRELOAD="$bheap" >>"$tmp/b_hooks"
    ns LD_PRELOAD="$bheap $bpreload" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tmp/p.pb.gz" >>"$tmp/b_on"
  fi
  i=$((i + 1))
done
median() { sort -n "$1" | awk '{v[NR] = $1} END {print (NR ? v[int((NR + 1) / 2)] : 0)}'; }
tb=$(median "$tmp/t_base"); th=$(median "$tmp/t_hooks"); to=$(median "$tmp/t_on")
tg=$(median "$tmp/t_got"); tgo=$(median "$tmp/t_got_on")
echo "per malloc+free pair: instructions (callgrind, main only, $n and $((2 * n)) pairs),"
if [ "$rounds" -gt 0 ]; then
  echo "and the loop thread's CPU ns (median of $rounds rounds of $time_n pairs, cases alternated):"
  echo "                               instructions         ns"
else
  echo "                               instructions"
fi
row() { # row LABEL INSTRUCTIONS NS: the ns column only when timed
  if [ "$rounds" -gt 0 ]; then
    if [ "$2" = "$base" ] && [ "$1" = "glibc alone:" ]; then
      printf '  %-28s %6.1f           %6.2f\n' "$1" "$2" "$3"
    else
      printf '  %-28s %6.1f (%+5.1f)   %6.2f (%+.2f)\n' "$1" "$2" "$(echo "$2 - $base" | bc)" \
        "$3" "$(echo "$3 - $tb" | bc)"
    fi
  elif [ "$1" = "glibc alone:" ]; then
    printf '  %-28s %6.1f\n' "$1" "$2"
  else
    printf '  %-28s %6.1f (%+5.1f)\n' "$1" "$2" "$(echo "$2 - $base" | bc)"
  fi
}
row "glibc alone:" "$base" "$tb"
row "hooks preloaded, no sampler:" "$hooks" "$th"
row "hooks + sampler (512 KiB):" "$on" "$to"
row "GOT hooks, no sampler:" "$got" "$tg"
row "GOT hooks + sampler:" "$got_on" "$tgo"
echo "our functions' instructions per pair, sampler on (callgrind self cost):"
echo "  preloaded: $on_fns"
echo "  GOT:       $got_fns"
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
