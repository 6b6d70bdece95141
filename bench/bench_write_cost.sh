#!/usr/bin/env bash
# bench_write_cost.sh: issue 28's "writing a profile must get cheap". What a
# preloaded profiler costs a short program in CPU time, its start, its
# samples and its write at exit included, side by side in one run:
#   none         bench/write_cost_prog work MS, alone
#   snapprof     LD_PRELOAD=libsnapprof-preload.so SNAPPROF_OUTPUT=... (the
#                default, SNAPPROF_LINES=program: no DWARF of the system
#                libraries' debug files such as libc6-dbg's; they still name
#                functions)
#   snapprof all the same with SNAPPROF_LINES=all (lines from every debug file)
#   snapprof own the same with SNAPPROF_LINES=own (no DWARF of any separate
#                debug file)
#   gperftools   LD_PRELOAD=libprofiler.so CPUPROFILE=... (bench/setup.sh)
# each at 100 Hz, for a short (0.3 CPU-s) and a long (3 CPU-s) run of the
# same work. The CPU time is the program's process's own (wait4(): user +
# system), the median of ROUNDS alternating runs. Columns:
#   short, long     CPU ms above none's median
#   fixed           short - (long - short) / 9: the cost that does not grow
#                   with the run (start and write), the samples' own cost
#                   taken out
# and one row for rolling profiles: snapprof with SNAPPROF_LOOP=1s over a
# 10 CPU-s run against the same without, per interval written.
# It prints figures and never judges them.
#
# usage: bench/bench_write_cost.sh [--build DIR] [--rounds R] [--quick] [--no-docs]
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

rounds=5
bench_option() {
  case $1 in
    --rounds=*) rounds=${1#--rounds=} ;;
    *) return 1 ;;
  esac
}
bench_parse_args "[--build DIR] [--rounds=R] [--quick] [--no-docs]" "$@"
command_line="bench/bench_write_cost.sh $*"
[ "$quick" = 1 ] && rounds=1
prog=$build/bench/write_cost_prog
preload=$build/preload/libsnapprof-preload.so
bench_require bench_write_cost "$prog" "$preload"
libprofiler=$(bench_libprofiler)
work=$(mktemp -d)
results=$work/results
trap 'rm -rf "$work"' EXIT
short_ms=300 long_ms=3000 loop_ms=10000
[ "$quick" = 1 ] && long_ms=600 loop_ms=2000

# cpu_of TAG ENV... : runs the work under env ENV, prints its CPU us.
cpu_of() {
  local tag=$1 ms=$2
  shift 2
  "$prog" measure env "$@" "$prog" work "$ms" 2>"$work/$tag.err" >"$work/$tag.out" || {
    say "bench_write_cost: $tag failed: $(tail -n 3 "$work/$tag.err" | tr '\n' ' ')"
    return 1
  }
  sed -n 's/^cpu_us=//p' "$work/$tag.err" | tail -1
}
median() { sort -n | awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : 0)}'; }

declare -A cpu
run_row() { # NAME MS ENV...
  local name=$1 ms=$2 v
  shift 2
  v=$(cpu_of "$name.$ms" "$ms" "$@") || return 0
  cpu[$name.$ms]+="$v "
}

bench_machine_start
for r in $(seq "$rounds"); do
  say "bench_write_cost: round $r of $rounds"
  for ms in $short_ms $long_ms; do
    run_row none "$ms" X=1
    run_row snapprof "$ms" LD_PRELOAD="$preload" SNAPPROF_OUTPUT="$work/s.pb.gz"
    run_row all "$ms" LD_PRELOAD="$preload" SNAPPROF_LINES=all SNAPPROF_OUTPUT="$work/a.pb.gz"
    run_row own "$ms" LD_PRELOAD="$preload" SNAPPROF_LINES=own SNAPPROF_OUTPUT="$work/o.pb.gz"
    [ -z "$libprofiler" ] ||
      run_row gperftools "$ms" LD_PRELOAD="$libprofiler" CPUPROFILE="$work/g.prof" CPUPROFILE_FREQUENCY=100
  done
  run_row noloop "$loop_ms" LD_PRELOAD="$preload" SNAPPROF_OUTPUT="$work/n.pb.gz"
  run_row loop "$loop_ms" LD_PRELOAD="$preload" SNAPPROF_LOOP=1s SNAPPROF_OUTPUT="$work/l.pb.gz"
done
bench_machine_end

med() { printf '%s\n' ${cpu[$1]:-} | median; }
table=$work/table
{
  printf 'bench_write_cost: snapprof %s, %s CPUs (%s), kernel %s, load %s%s\n' "$commit" "$(nproc)" \
    "$cpu_model" "$kernel" "$load" "$([ "$quick" = 1 ] && echo ' (--quick: figures are not meaningful)')"
  printf '100 Hz, %s rounds, CPU ms of the process above no profiler (median)\n\n' "$rounds"
  printf '%-14s %10s %10s %10s\n' profiler "short" "long" "fixed"
  none_s=$(med none.$short_ms) none_l=$(med none.$long_ms)
  printf '%-14s %10.1f %10.1f %10s\n' "none (CPU ms)" "$(awk -v a="$none_s" 'BEGIN {print a / 1000}')" \
    "$(awk -v a="$none_l" 'BEGIN {print a / 1000}')" "-"
  for p in snapprof all own gperftools; do
    if [ -z "${cpu[$p.$short_ms]:-}" ]; then
      printf '%-14s %10s\n' "$p" "n/a (not installed: bash bench/setup.sh)"
      continue
    fi
    awk -v name="$p" -v s="$(med $p.$short_ms)" -v l="$(med $p.$long_ms)" -v ns="$none_s" -v nl="$none_l" \
      -v k="$(awk -v a=$long_ms -v b=$short_ms 'BEGIN {print (a - b) / b}')" 'BEGIN {
        ds = (s - ns) / 1000; dl = (l - nl) / 1000
        printf "%-14s %10.1f %10.1f %10.1f\n", (name == "own" || name == "all" ? "snapprof " name : name), ds, dl, ds - (dl - ds) / k }'
  done
  awk -v n="$(med noloop.$loop_ms)" -v l="$(med loop.$loop_ms)" -v secs="$((loop_ms / 1000))" 'BEGIN {
    printf "\nrolling profiles (SNAPPROF_LOOP=1s, %d CPU-s): %.1f CPU ms above the same run without, %.2f ms per interval\n",
      secs, (l - n) / 1000, (l - n) / 1000 / secs }'
  printf '\nshort = %d CPU ms of work, long = %d; fixed = short - (long - short) / %s\n' "$short_ms" "$long_ms" \
    "$(awk -v a=$long_ms -v b=$short_ms 'BEGIN {print (a - b) / b}')"
} >"$table"
bench_finish_table "$table"

section() {
  bench_section_made_by
  echo "- what: the CPU time a preloaded profiler adds to a short program (its start, samples and"
  echo "  write at exit), against gperftools, and what each rolling interval costs; issue 28's"
  echo "  targets: the first profile <= 15 ms above the samples' own cost (the \"fixed\" column),"
  echo "  each later interval <= 5 ms"
  echo
  bench_section_table "$table"
}
bench_write_section "## Writing a profile (issue 28)" section
