#!/usr/bin/env bash
# bench_churn.sh: issue 25 item 4's benchmark (short-lived threads). Runs
# tests/churn_prog.c (THREADS threads started 4 at a time, each burning
# about 0.4 ms of CPU in churn_work()) with no profiler, under `snapprof
# record -F HZ`, `perf record -F HZ` and gperftools' libprofiler.so
# (CPUPROFILE, CPUPROFILE_FREQUENCY=HZ), at 100 Hz and 1 kHz, and prints
# for each: the profile's samples, churn_work's share of the profile's CPU
# (perf: of its samples) and the thread churn throughput (threads/s, the
# median of ROUNDS runs) against no profiler's median. A peer that is not
# installed (bench/setup.sh) is skipped. It prints figures and never judges
# them.
#
# snapprof runs with SNAPPROF_SHORT_THREADS=N (one in N threads armed as
# they start; snapprof_params_t.short_threads): N from the environment,
# else 1 (the preload's default is 0).
#
# Run it under nice (the runs themselves are not reniced one by one).
#
# usage: bench/bench_churn.sh [--build DIR] [--threads N] [--rounds R]
here=$(cd "$(dirname "$0")" && pwd)
# Strict mode and the ERR trap, and root (nothing else of it is used).
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
build=$root/build
threads=4000
rounds=3
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift ;;
    --threads) threads=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    *) echo "usage: $0 [--build DIR] [--threads N] [--rounds R]" >&2; exit 2 ;;
  esac
  shift
done
prog=$build/tests/churn_prog
cli=$build/cli/snapprof
[ -x "$prog" ] && [ -x "$cli" ] || { echo "build churn_prog and snapprof in $build first" >&2; exit 2; }
libprofiler=
for l in /usr/lib/x86_64-linux-gnu/libprofiler.so.0 /usr/lib/libprofiler.so.0; do
  [ -e "$l" ] && { libprofiler=$l; break; }
done
have_perf=0
if command -v perf >/dev/null 2>&1 && perf record -F 100 -o /dev/null -- true >/dev/null 2>&1; then
  have_perf=1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# threads/s from churn_prog's line
rate() { sed -n 's/.*ms (\([0-9]*\) threads\/s).*/\1/p' "$1" | tail -1; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : 0)}'; }
# churn_work's share of a pprof profile's CPU, in %, and its sample count
pprof_share() { # profile [binary]
  local top
  top=$(go tool pprof -top -nodecount=200 -sample_index="$3" -unit=ms $2 "$1" 2>/dev/null)
  local total cw
  total=$(printf '%s\n' "$top" | sed -n 's/.* of \([0-9.]*\)ms total.*/\1/p')
  cw=$(printf '%s\n' "$top" | awk '$NF=="churn_work" {v=$4; sub("ms","",v); print v}')
  awk -v t="${total:-0}" -v c="${cw:-0}" 'BEGIN {printf "%.1f", (t > 0 ? 100 * c / t : 0)}'
}
pprof_samples() { # profile [binary] index
  go tool pprof -top -sample_index=samples $2 "$1" 2>/dev/null |
    sed -n 's/.* of \([0-9]*\) total.*/\1/p'
}

declare -A rates share samples
for hz in 100 1000; do
  for r in $(seq "$rounds"); do
    "$prog" "$threads" 4 400 > "$work/none.$hz.$r" 2>&1
    rates[none.$hz]+="$(rate "$work/none.$hz.$r") "
    SNAPPROF_SHORT_THREADS=${SNAPPROF_SHORT_THREADS:-1} "$cli" record -F "$hz" -o "$work/s.$hz.$r.pb.gz" -- "$prog" "$threads" 4 400 > "$work/snap.$hz.$r" 2>&1
    rates[snapprof.$hz]+="$(rate "$work/snap.$hz.$r") "
    share[snapprof.$hz]+="$(pprof_share "$work/s.$hz.$r.pb.gz" "" cpu) "
    samples[snapprof.$hz]+="$(pprof_samples "$work/s.$hz.$r.pb.gz" "") "
    if [ $have_perf = 1 ]; then
      perf record -q -F "$hz" -o "$work/p.$hz.$r.data" -- "$prog" "$threads" 4 400 > "$work/perf.$hz.$r" 2>&1
      rates[perf.$hz]+="$(rate "$work/perf.$hz.$r") "
      rep=$(perf report -i "$work/p.$hz.$r.data" --stdio --no-children --sort sym 2>/dev/null)
      n=$(printf '%s\n' "$rep" | sed -n "s/^# Samples: \([0-9]*\).*/\1/p" | head -1)
      pc=$(printf '%s\n' "$rep" | awk '/churn_work/ {v=$1; sub("%","",v); s+=v} END {printf "%.1f", s}')
      share[perf.$hz]+="$pc "
      samples[perf.$hz]+="${n:-0} "
    fi
    if [ -n "$libprofiler" ]; then
      # Preloaded into the program alone: a `nice` started with it would
      # arm ITIMER_PROF, which its exec keeps, and SIGPROF would kill it.
      LD_PRELOAD=$libprofiler CPUPROFILE="$work/g.$hz.$r.prof" CPUPROFILE_FREQUENCY=$hz \
        "$prog" "$threads" 4 400 > "$work/gperf.$hz.$r" 2>&1
      rates[gperftools.$hz]+="$(rate "$work/gperf.$hz.$r") "
      share[gperftools.$hz]+="$(pprof_share "$work/g.$hz.$r.prof" "$prog" cpu) "
      samples[gperftools.$hz]+="$(pprof_samples "$work/g.$hz.$r.prof" "$prog") "
    fi
  done
done

echo "churn_prog $threads 4 400 (threads of ~0.4 ms CPU in churn_work, 4 at a time), $rounds rounds, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '| %-10s | %5s | %-22s | %-26s | %-22s | %-10s |\n' profiler Hz "samples (per round)" "churn_work % of CPU" "threads/s (median)" "vs none"
printf '|%s|%s|%s|%s|%s|%s|\n' ------------ ------- ------------------------ ---------------------------- ------------------------ ------------
for hz in 100 1000; do
  base=$(echo ${rates[none.$hz]} | tr ' ' '\n' | median)
  printf '| %-10s | %5s | %-22s | %-26s | %-22s | %-10s |\n' none "$hz" - - "$base" 1.00
  for who in snapprof perf gperftools; do
    [ -n "${rates[$who.$hz]:-}" ] || continue
    m=$(echo ${rates[$who.$hz]} | tr ' ' '\n' | median)
    printf '| %-10s | %5s | %-22s | %-26s | %-22s | %-10s |\n' "$who" "$hz" "${samples[$who.$hz]% }" \
      "${share[$who.$hz]% }" "$m (${rates[$who.$hz]% })" "$(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')"
  done
done
