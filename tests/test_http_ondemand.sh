#!/usr/bin/env bash
# `snapprof record --http` without -o (issue 28): nothing is armed until a
# request comes (SNAPPROF_ARM=demand, snapprof_params_t.arm_on_demand).
# http_prog.c burns CPU all the time; between requests its threads get no
# signal and the sampling thread in it wakes at most once a second.
#   test_http_ondemand.sh CASE SNAPPROF_CLI HTTP_PROG SANITIZED HAVE_MHD
# Exit 77: skipped (a sanitizer build, whose preload cannot be preloaded
# into an uninstrumented program; no libmicrohttpd or curl).
set -u
case=$1 cli=$2 prog=$3 sanitized=$4 have_mhd=$5
HTTP_DIR_NAME=snapprof-http-ondemand
# shellcheck source=tests/http_lib.sh
. "$(dirname "$0")/http_lib.sh"
tck=$(getconf CLK_TCK)

# Starts record in $dir (where a default snapprof.pb.gz would go) with
# "$@" before --http; sets url, base, token, pid (the program's) and
# sampler (the tid of its sampling thread, named "snapprof": it must be
# there before any request).
start() {
  (cd "$dir" && exec "$cli" record "$@" --http 127.0.0.1:0 -- "$prog" "$dir/stop") \
    >"$dir/out" 2>"$dir/err" &
  rec=$!
  await_url
  pid=$(pgrep -P "$rec" | head -1)
  [ -n "$pid" ] || fail "no program under record"
  sampler=
  for t in /proc/"$pid"/task/*; do
    [ "$(cat "$t/comm" 2>/dev/null)" = snapprof ] && sampler=${t##*/}
  done
  [ -n "$sampler" ] || fail "no sampling thread in the program"
}

# The program's CPU time in clock ticks (utime + stime; the comm field
# has no spaces: http_prog).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
# The voluntary context switches (wake-ups from a sleep) of each thread of
# the program but its own (http_prog has one: the main thread), "tid n".
wakeups() {
  for t in /proc/"$pid"/task/*; do
    [ "${t##*/}" = "$pid" ] && continue
    echo "${t##*/} $(awk '/^voluntary_ctxt_switches/ { print $2 }' "$t/status" 2>/dev/null)"
  done
}

# idle WHEN [THREADS]: while the program burns 2 CPU-seconds (judged by
# its CPU clock, not by wall time: the machine is loaded) with nothing
# requested, no thread of ours in it (the sampling thread, the helper, the
# one that serves; or only those whose name matches the regex THREADS)
# wakes more than once a second of wall time (+2).
idle() {
  local c0 t0 t1 secs tid k0 k1 comm seen=0
  c0=$(cpu_ticks) t0=$(date +%s%N)
  wakeups >"$dir/k0"
  for _ in $(seq 1200); do
    [ $(($(cpu_ticks) - c0)) -ge $((2 * tck)) ] && break
    sleep 0.1
  done
  [ $(($(cpu_ticks) - c0)) -ge $((2 * tck)) ] || fail "$1: the program did not burn 2 CPU-seconds"
  wakeups >"$dir/k1"
  t1=$(date +%s%N)
  secs=$(((t1 - t0) / 1000000000))
  while read -r tid k1; do
    k0=$(awk -v t="$tid" '$1 == t { print $2 }' "$dir/k0")
    [ -n "$k0" ] || continue
    comm=$(cat "/proc/$pid/task/$tid/comm" 2>/dev/null) || continue
    [[ $comm =~ ^(${2:-.*})$ ]] || continue
    seen=$((seen + 1))
    echo "$1: $comm ($tid): $((k1 - k0)) wake-ups in $secs s of" \
      "wall time (2 CPU-seconds of the program)"
    [ $((k1 - k0)) -le $((secs + 2)) ] || fail "$1: thread $tid woke $((k1 - k0)) times in ${secs} s"
  done <"$dir/k1"
  [ "$seen" -ge 1 ] || fail "$1: no thread of ours in the program"
}

# The "N samples" of the program's line in record's summary.
run_samples() {
  sed -n 's/^snapprof: http_prog (pid [0-9]*): \([0-9]*\) samples\{0,1\} .*/\1/p' "$dir/err"
}

case $case in
idle_request_idle)
  # Idle, a 2-second request, idle again: the run's samples (the summary's
  # counters of the whole run) are the request's, and the sampling thread
  # slept between.
  start
  idle "before the request"
  c=$(curl -s --max-time 120 -o "$dir/cpu.pb.gz" -w '%{http_code}' \
    "$base/debug/pprof/profile?seconds=2&token=$token")
  [ "$c" = 200 ] || fail "the request: $c $(cat "$dir/cpu.pb.gz")"
  req=$("$cli" stats "$dir/cpu.pb.gz" | awk '$1 == "samples" && NF == 2 { print $2 }')
  # seconds=2 is wall time, as Go's endpoint has it: a loaded machine gave
  # the program 0.09 CPU-seconds of it once (9 samples). So the request's
  # rate per CPU-second is judged, once there are enough samples for it.
  req_hz=$("$cli" stats "$dir/cpu.pb.gz" | sed -n 's/^samples *[0-9]*, \([0-9.]*\) Hz per CPU-second.*/\1/p')
  echo "the request: ${req:-?} samples, ${req_hz:-?} Hz per CPU-second"
  [ -n "$req" ] && [ "$req" -ge 1 ] || fail "the request's profile has ${req:-no} samples"
  [ "$req" -lt 10 ] || awk -v h="${req_hz:-0}" 'BEGIN { exit !(h >= 60) }' ||
    fail "the request's rate: ${req_hz:-no} Hz per CPU-second, not >= 60"
  if command -v go >/dev/null; then
    PPROF_TMPDIR=$dir HOME=$dir go tool pprof -top "$dir/cpu.pb.gz" >"$dir/top" 2>&1 ||
      { cat "$dir/top"; fail "go tool pprof failed"; }
    grep -q 'http_burn' "$dir/top" || { cat "$dir/top"; fail "http_burn is not in the profile"; }
  else
    echo "no go: the profile's functions are not checked"
  fi
  # Armed only for requests, at 100 Hz and without --trigger: each
  # thread's CPU-time timer (SNAPPROF_DEMAND_TIMER_MAX_HZ), not a perf
  # event, which costs a server at every context switch.
  "$cli" stats "$dir/cpu.pb.gz" >"$dir/stats" 2>&1 || fail "snapprof stats: $(cat "$dir/stats")"
  grep -q '^trigger  *timer ' "$dir/stats" || fail "not the timer trigger: $(grep '^trigger' "$dir/stats")"
  idle "after the request"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  n=$(run_samples)
  echo "the run: ${n:-?} samples; the request: $req"
  [ -n "$n" ] || fail "no samples count in the summary"
  # 4+ CPU-seconds burned outside the request would be 400 samples at
  # 100 Hz; a capture in flight at each boundary may come in.
  [ "$n" -le $((req + 4)) ] || fail "$n samples in the run, $req in the request"
  grep -q 'no whole-run CPU profile' "$dir/err" || fail "the summary does not say it"
  [ ! -e "$dir/snapprof.pb.gz" ] || fail "a whole-run profile was written"
  # The run's rate is per CPU-second while armed: over the whole run's
  # CPU time (4+ CPU-seconds idle, 2 requested) it read about a third of
  # the requested 100 Hz.
  hz=$(sed -n 's/^snapprof: http_prog (pid [0-9]*): .* \([0-9.]*\) Hz per CPU-second of 100 Hz requested.*/\1/p' "$dir/err")
  echo "the run's rate: ${hz:-?} Hz per CPU-second"
  [ -n "$hz" ] || { cat "$dir/err"; fail "no rate in the summary"; }
  awk -v h="$hz" 'BEGIN { exit !(h >= 60) }' || fail "the run's rate $hz Hz per armed CPU-second, not >= 60"
  ;;
flight_quiet)
  # With --flight the profile is armed all the time and the sampling
  # thread drains at its pace, but the helper and the thread that serves
  # have nothing to do: they wake at most once a second too. The helper
  # woke ten times a second to look whether the program's first thread had
  # ended (about 90 us of the program's CPU time each on these VMs: 1 % of a
  # server's at 0.1 CPU, bench_continuous.sh's --flight row).
  start -F 19 --flight 1m
  # From the program's second CPU-second: the first drains meet the
  # program's modules and compile each one's CFI once (with
  # common/fd_private.h on, a file each opened by a hand-off to another
  # thread, so a wake-up of the sampling thread each). Not what recurs.
  c0=$(cpu_ticks)
  for _ in $(seq 600); do
    [ $(($(cpu_ticks) - c0)) -ge "$tck" ] && break
    sleep 0.1
  done
  idle "under --flight" 'snapprof|snapprof-helper|snapprof-serve'
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
trigger_given)
  # A trigger given, or a rate above 100 Hz, keeps the default chain (perf
  # events first) for requests too.
  for opts in "--trigger perf" "-F 200"; do
    rm -f "$dir/stop"
    # shellcheck disable=SC2086
    start $opts
    c=$(curl -s --max-time 120 -o "$dir/cpu.pb.gz" -w '%{http_code}' \
      "$base/debug/pprof/profile?seconds=1&token=$token")
    [ "$c" = 200 ] || fail "$opts: the request: $c $(cat "$dir/cpu.pb.gz")"
    "$cli" stats "$dir/cpu.pb.gz" >"$dir/stats" 2>&1 || fail "snapprof stats: $(cat "$dir/stats")"
    grep -q '^trigger  *perf ' "$dir/stats" || fail "$opts: not perf: $(grep '^trigger' "$dir/stats")"
    finish
    [ "$status" = 0 ] || fail "$opts: exit status $status, not 0"
  done
  ;;
with_output)
  # With -o nothing changes: the run is sampled from start to end and its
  # file written.
  start -o "$dir/whole.pb.gz"
  c0=$(cpu_ticks)
  for _ in $(seq 1200); do
    [ $(($(cpu_ticks) - c0)) -ge "$tck" ] && break
    sleep 0.1
  done
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  n=$(run_samples)
  echo "the run: ${n:-?} samples"
  [ -n "$n" ] && [ "$n" -ge 50 ] || fail "${n:-no} samples in a run of 1+ CPU-second"
  [ -s "$dir/whole.pb.gz" ] || fail "-o's whole-run profile was not written"
  ! grep -q 'no whole-run CPU profile' "$dir/err" || fail "the summary says no profile"
  # Armed for the whole run: the default chain, perf events first.
  "$cli" stats "$dir/whole.pb.gz" >"$dir/stats" 2>&1 || fail "snapprof stats: $(cat "$dir/stats")"
  grep -q '^trigger  *perf ' "$dir/stats" || fail "not perf: $(grep '^trigger' "$dir/stats")"
  ;;
*)
  echo "unknown case $case"
  exit 2
  ;;
esac
echo "ok $case"
