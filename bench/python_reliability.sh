#!/usr/bin/env bash
# python_reliability.sh: issue 29's reliability runs. Runs modules of
# CPython's own test suite that stress the interpreter (Debian's
# libpython3.11-testsuite, installed by tools/setup.sh) with
# /usr/bin/python3.11, without a profiler and under `snapprof record -F 1000
# --python`, ROUNDS times each, one module per run, and prints per module
# and mode: the test suite's verdict of each round ("Tests result: ..."),
# record's exit status, and whether the profile names a Python function of
# the module's own test files (go tool pprof -top -lines). A run that does not end
# within the time limit is killed and shown as HANG. It prints figures and
# never judges them; the section "Python's own test suite under record
# --python" of docs/BENCHMARKS.md is written from it.
#
# usage: bench/python_reliability.sh [--quick] [--build DIR] [--no-docs]
#        [--rounds N] [--modules "test_a test_b"]
#   --quick  one round of test_json only
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
command_line="bash bench/python_reliability.sh${*:+ $*}"
rounds=3
modules="test_threading test_json test_generators test_sys_settrace"
bench_option() {
  case $1 in
    --rounds=*) rounds=${1#--rounds=} ;;
    --modules=*) modules=${1#--modules=} ;;
    *) return 1 ;;
  esac
}
bench_parse_args "[--quick] [--build DIR] [--no-docs] [--rounds=N] [--modules='test_a test_b']" "$@"
[ "$quick" = 1 ] && rounds=1 modules=test_json
py=/usr/bin/python3.11
SNAP=$build/cli/snapprof
bench_require python_reliability "$SNAP" "$py"
"$py" -c 'import test.support' 2>/dev/null ||
  { echo "python_reliability: libpython3.11-testsuite is missing: bash tools/setup.sh" >&2; exit 1; }
limit=900 # seconds a run may take
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results
: >"$results"
bench_machine_start

# verdict LOG RC: the test suite's verdict, or HANG / CRASH(signal) / rc=N.
verdict() {
  local v
  v=$(sed -n 's/^Tests result: //p' "$1" | tail -n 1)
  if [ "$2" = 124 ] || [ "$2" = 137 ]; then echo HANG
  elif [ -n "$v" ]; then echo "${v%% *}"
  elif [ "$2" -gt 128 ]; then echo "CRASH(sig $(($2 - 128)))"
  else echo "rc=$2"; fi
}

for m in $modules; do
  for r in $(seq 1 "$rounds"); do
    say "python_reliability: $m round $r: without a profiler"
    rc=0
    timeout -k 10 "$limit" "$py" -m test "$m" >"$work/$m.$r.none.log" 2>&1 || rc=$?
    record "$m none $r $(verdict "$work/$m.$r.none.log" "$rc")"
    say "python_reliability: $m round $r: under snapprof record -F 1000 --python"
    rc=0
    timeout -k 10 "$limit" "$SNAP" record -q -F 1000 --python -o "$work/$m.$r.pb.gz" -- \
      "$py" -m test "$m" >"$work/$m.$r.snap.log" 2>&1 || rc=$?
    # The profile names a function of the module's test file: the Python
    # frames were read, not only the interpreter's C frames.
    named=no
    for f in "$work/$m.$r".pb.gz*; do
      [ -f "$f" ] || continue
      if go tool pprof -top -lines -nodecount=100000 "$f" 2>/dev/null | grep -q "/test/$m[/.]"; then
        named=yes
      fi
    done
    record "$m snap $r $(verdict "$work/$m.$r.snap.log" "$rc") record_rc=$rc py_names=$named"
  done
done
bench_machine_end

table=$work/table
{
  echo "python_reliability: snapprof $commit, $py ($("$py" -V 2>&1)), $rounds rounds, load $load"
  echo "Each module of CPython's test suite alone, without a profiler and under"
  echo "\`snapprof record -F 1000 --python\`: the suite's verdict per round; for record"
  echo "also its exit status and whether the profile names functions of the test file."
  printf '%-20s %-40s %s\n' module "without a profiler" "snapprof record -F 1000 --python"
  for m in $modules; do
    none=$(awk -v m="$m" '$1 == m && $2 == "none" { printf "%s%s", s, $4; s = " " }' "$results")
    snap=$(awk -v m="$m" '$1 == m && $2 == "snap" { printf "%s%s (%s, %s)", s, $4, $5, $6; s = " " }' "$results")
    printf '%-20s %-40s %s\n' "$m" "$none" "$snap"
  done
} >"$table"
bench_finish_table "$table"

bench_write_table_section "## Python's own test suite under record --python (issue 29)" "$table"
