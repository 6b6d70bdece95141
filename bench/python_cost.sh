#!/usr/bin/env bash
# python_cost.sh: issue 29's cost of the Python unwinder. Runs
# bench/python_cost.py (a fixed amount of work at the bottom of a chain of
# DEPTH distinct Python functions) with /usr/bin/python3.11 without a
# profiler, under `snapprof record -F 1000` and under `snapprof record -F
# 1000 --python`, ROUNDS times each, the modes interleaved, for DEPTH 50 and
# 500. Per mode it prints medians over the rounds: samples; the target's
# pause in the handler at p50 and p99 (snapprof stats: histogram bucket
# bounds); the sampling thread's CPU per sample (sampler_cpu_ns / samples:
# unwinding, splicing, naming); and their sum, the CPU a sample costs. The
# process's CPU against a run without a profiler would hold both too, but
# on a shared 2-CPU machine its noise (tens of percent of the run) is
# larger than the whole profiler's cost, so it is not used. It prints
# figures and never judges them; the section "Python unwinder cost (issue
# 29)" of docs/BENCHMARKS.md is written from it.
#
# usage: bench/python_cost.sh [--quick] [--build DIR] [--no-docs] [--rounds=N] [--base=DIR]
#                             [--depths="50 500"]
#   --quick     one round, depth 50 only, a third of the work
#   --depths=L  the chain depths to run (default "50 500")
#   --base=DIR  also the snapprof built in DIR (another commit's build tree),
#               its modes base-native and base-python interleaved with ours in
#               each round: before and after side by side in one run
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
command_line="bash bench/python_cost.sh${*:+ $*}"
rounds=3
base=
depths="50 500"
bench_option() {
  case $1 in
    --rounds=*) rounds=${1#--rounds=} ;;
    --base=*) base=$(cd "${1#--base=}" && pwd) ;;
    --depths=*) depths=${1#--depths=} ;;
    *) return 1 ;;
  esac
}
bench_parse_args "[--quick] [--build DIR] [--no-docs] [--rounds=N] [--base=DIR] [--depths=LIST]" "$@"
work_rounds=6000 # calls of the chain: about 3.5 CPU seconds
[ "$quick" = 1 ] && rounds=1 depths=50 work_rounds=2000
py=/usr/bin/python3.11
SNAP=$build/cli/snapprof
bench_require python_cost "$SNAP" "$py"
modes="native python"
if [ -n "$base" ]; then
  bench_require python_cost "$base/cli/snapprof"
  modes="base-native base-python native python"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results
: >"$results"
bench_machine_start

stat() { "$SNAP" stats --raw "$1" | awk -v k="$2" '$1 == k { print $2 }'; }

for d in $depths; do
  for r in $(seq 1 "$rounds"); do
    say "python_cost: depth $d round $r"
    for mode in $modes; do
      flag= snap=$SNAP
      case $mode in *python) flag=--python ;; esac
      case $mode in base-*) snap=$base/cli/snapprof ;; esac
      out=$work/$d.$r.$mode.pb.gz
      "$snap" record -q -F 1000 $flag -o "$out" -- "$py" "$here/python_cost.py" \
        "$work_rounds" "$d" >/dev/null
      echo "$d $mode $r $(stat "$out" samples) $(stat "$out" pause_p50_ns)" \
        "$(stat "$out" pause_p99_ns) $(stat "$out" sampler_cpu_ns)" >>"$results"
    done
  done
done
bench_machine_end

table=$work/table
{
  echo "python_cost: snapprof $commit, $py ($("$py" -V 2>&1)), $rounds rounds, $work_rounds calls, load $load"
  echo "record -F 1000 without and with --python, same workload; medians over the rounds."
  [ -n "$base" ] && echo "base-*: the snapprof built in $base, in the same rounds."
  echo "pause: the target thread's time in the handler; sampler: the sampling thread's"
  echo "CPU per sample; sum: pause p50 + sampler, the CPU a sample costs."
  printf '%-6s %-12s %8s %10s %10s %12s %10s\n' depth mode samples "pause p50" "pause p99" "sampler/smp" "sum"
  sort -k1,1n -k2,2 -k3,3n "$results" | awk '
    function med(a, n,    i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
      return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
    function flush() {
      if (n == 0) return
      a = med(p50, n) / 1e3; b = med(smp, n) / 1e3
      printf "%-6s %-12s %8d %7.1f us %7.1f us %9.1f us %7.1f us\n", key1, key2, med(s, n), a,
        med(p99, n) / 1e3, b, a + b }
    { k = $1 " " $2
      if (k != key) { flush(); key = k; key1 = $1; key2 = $2; n = 0 }
      n++; s[n] = $4; p50[n] = $5; p99[n] = $6; smp[n] = $7 / $4 }
    END { flush() }'
} >"$table"
bench_finish_table "$table"

bench_write_table_section "## Python unwinder cost (issue 29)" "$table"
