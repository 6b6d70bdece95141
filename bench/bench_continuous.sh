#!/usr/bin/env bash
# bench_continuous.sh: issue 28's "Measured", for the continuous-profiling
# pieces that exist today (`record --http`, `record --loop`), on a
# server-like workload (bench/bench_server: workers blocked on sockets,
# bursts of fixed work at a fixed rate). Side by side in one run:
#   1. idle   `record --http` with no request, next to the same program
#             without a profiler, over the same IDLE seconds: signals
#             delivered to the program (perf stat -e signal:signal_deliver
#             -p), wakeups of our threads in it (voluntary + nonvoluntary
#             context switches of the threads named snapprof*, from
#             /proc/PID/task/TID/status) and their system calls (perf stat
#             -e raw_syscalls:sys_enter --per-thread -t on those threads)
#   2. cpu    the program's CPU time (getrusage in the program: every thread,
#             ours included, before exit) without a profiler, under
#             `record --http` with no request, during one profile request
#             of most of the run (100 Hz), and under `record --http
#             --flight 5m` at its default 19 Hz with one ?since= request at
#             the end (how long the answer took, its samples); the four
#             side by side (at the same time) in each round, medians of the
#             rounds, ratios per CPU-second of the same fixed work
#   3. load   50 concurrent curl clients on `record --heap --http` for LOAD
#             seconds (35 ask /debug/pprof/profile?seconds=1, 5 /heap, 5
#             bad URLs, 5 read at 2 KiB/s): statuses, curl exit codes, every
#             200 body through `go tool pprof -top`, fds of the program and
#             of record before and after, the program's output against a run
#             without profiler; again with record from --asan-build DIR and
#             from --tsan-build DIR if given
#   4. memory `record --loop 10s -o F` at 100 Hz for MEM seconds: the
#             program's RSS every 10 s, growth and its per-hour
#             extrapolation, and the intervals' sample sums against the
#             whole-run profile F of the same run; beside it, at the same
#             time, `record --http --flight 2m` at 19 Hz: its RSS every 10 s
#             (the window fills in 2 minutes, then memory should stay flat)
#             and a ?since=2m request at the end
# It prints figures and never judges them; bench/README.md says how to read
# them. Needs perf (tracepoints: root or perf_event_paranoid -1), curl, go.
#
# usage: bench/bench_continuous.sh [--quick] [--build DIR] [--no-docs]
#                                  [--asan-build DIR] [--tsan-build DIR]
#                                  [--note TEXT]
#   --quick       idle 30 s, cpu runs of 12 s (1 round), load 20 s, memory
#                 2 minutes; figures not meaningful
#   --asan-build  a build tree with -DSNAPPROF_SANITIZE=address,undefined:
#                 its record (cli/snapprof) serves the load run once more
#                 (the program keeps the plain build's preload)
#   --tsan-build  the same with a -DSNAPPROF_SANITIZE=thread build tree
#   --note        a line for the section of docs/BENCHMARKS.md (how busy)
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
note="" asan_build="" tsan_build="" pending=""
# Quoted, so that the line in docs/BENCHMARKS.md runs as shown.
command_line="bash bench/bench_continuous.sh$([ $# -eq 0 ] || printf ' %q' "$@")"
bench_option() {
  case $pending in
    note) note=$1 pending="" ; return 0 ;;
    asan) asan_build=$(cd "$1" && pwd) pending="" ; return 0 ;;
    tsan) tsan_build=$(cd "$1" && pwd) pending="" ; return 0 ;;
  esac
  case $1 in
    --note) pending=note ;;
    --asan-build) pending=asan ;;
    --tsan-build) pending=tsan ;;
    *) return 1 ;;
  esac
}
bench_parse_args "[--quick] [--build DIR] [--no-docs] [--asan-build DIR] [--tsan-build DIR] [--note TEXT]" "$@"

SERVER=$build/bench/bench_server
SNAP=$build/cli/snapprof
PRELOAD=$build/preload/libsnapprof-preload.so
bench_require bench_continuous "$SERVER" "$SNAP" "$PRELOAD"
for p in curl perf; do
  command -v $p >/dev/null || { echo "bench_continuous: $p is missing" >&2; exit 1; }
done
for b in "$asan_build" "$tsan_build"; do
  [ -z "$b" ] || [ -x "$b/cli/snapprof" ] || { echo "bench_continuous: $b/cli/snapprof is missing" >&2; exit 1; }
done

if [ "$quick" = 1 ]; then
  idle_s=30 cpu_s=12 req_s=10 rounds=1 load_s=20 mem_s=120
else
  idle_s=60 cpu_s=32 req_s=30 rounds=7 load_s=60 mem_s=600
fi
hz=100
bench_workdir bench_continuous

# ---------------------------------------------------------------------------
# Running the program
# ---------------------------------------------------------------------------

# start TAG SECONDS [RECORD_BIN RECORD_ARGS...]: the workload for SECONDS,
# alone or under RECORD_BIN record RECORD_ARGS, in the background, with cwd
# $work (record's default output lands there); stdout TAG.out, stderr
# TAG.err. Sets top_pid (record's, or the program's), then waits until the
# program says it is ready: prog_pid, and with --http base (http://H:P)
# and token. start_env: VAR=VALUE words for record's environment; start_hz:
# the rate, when not $hz ("default": no -F, record's own default).
start_env=()
start_hz=""
# flight_ask TAG SINCE: asks the run started last for ?since=SINCE; the
# answer into TAG.pb.gz; sets code (HTTP status or curl_rc=N), took_ms and
# samples (go tool pprof's total).
flight_ask() {
  local t
  t=$(curl -sS -o "$work/$1.pb.gz" -w '%{http_code} %{time_total}' --max-time 30 \
    "$base/debug/pprof/profile?since=$2&token=$token" 2>>"$work/$1.curl") || t="curl_rc=$? 0"
  code=${t%% *}
  took_ms=$(awk -v s="${t##* }" 'BEGIN { printf "%.0f", s * 1000 }')
  samples=$(go tool pprof -sample_index=samples -top "$work/$1.pb.gz" 2>/dev/null |
    sed -n 's/.* of \([0-9]*\) total.*/\1/p')
}
start() {
  local tag=$1 secs=$2 i
  shift 2
  # Made here: the background job opens them only once it runs, and the
  # wait below may look first (a loaded machine did, and strict mode ended
  # the run).
  : >"$work/$tag.out"
  : >"$work/$tag.err"
  if [ $# -eq 0 ]; then
    (cd "$work" && exec "$SERVER" serve --seconds "$secs") >"$work/$tag.out" 2>"$work/$tag.err" &
  else
    local bin=$1
    shift
    local rate=(-F "${start_hz:-$hz}")
    [ "$start_hz" != default ] || rate=()
    (cd "$work" && exec env "${start_env[@]}" "$bin" record "${rate[@]}" "$@" -- "$SERVER" serve --seconds "$secs") \
      >"$work/$tag.out" 2>"$work/$tag.err" &
  fi
  top_pid=$!
  bench_pids+=("$top_pid")
  prog_pid="" base="" token=""
  for i in $(seq 300); do
    prog_pid=$(sed -n 's/^bench_server: pid \([0-9]*\) ready$/\1/p' "$work/$tag.err")
    [ -z "$prog_pid" ] || break
    kill -0 "$top_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$prog_pid" ] || { say "bench_continuous: $tag did not start: $(tail -n 3 "$work/$tag.err" | tr '\n' ' ')"; exit 1; }
  local url
  url=$(sed -n 's/^snapprof: serving \(http[^ ]*\)$/\1/p' "$work/$tag.err" | head -1)
  if [ -n "$url" ]; then
    base=${url%%/debug/*}
    token=${url##*token=}
  fi
}

# finish TAG: waits for the run started last; its exit status in rc.
finish() {
  rc=0
  wait "$top_pid" || rc=$?
}

cpu_us() { sed -n 's/^cpu_us=//p' "$work/$1.err" | tail -1; }

# expected_output SECONDS: what the program prints on stdout for a run of
# SECONDS, without pacing (the same lines, at once).
expected_output() { "$SERVER" serve --seconds "$1" --no-pace 2>/dev/null; }

# our_tids PID: the threads of ours in PID (named snapprof*), "tid name" a line.
our_tids() {
  local t c
  for t in /proc/"$1"/task/*; do
    c=$(cat "$t/comm" 2>/dev/null) || continue
    case $c in snapprof*) echo "${t##*/} $c" ;; esac
  done
}
# ctxt TID: voluntary + nonvoluntary context switches of a thread of prog_pid.
ctxt() {
  awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ { s += $2 } END { print s + 0 }' \
    "/proc/$prog_pid/task/$1/status" 2>/dev/null || echo 0
}
# proc_cpu_ms PID: user + system time of the process so far, ms (/proc/PID/stat).
proc_cpu_ms() {
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print int(($12 + $13) * 1000 / hz) }' "/proc/$1/stat" 2>/dev/null || echo 0
}
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# perf_count FILE: the count of perf stat -x, output (one event, one target).
perf_count() { awk -F, 'NF > 3 && $1 ~ /^[0-9]+$/ { s += $1 } END { print s + 0 }' "$1"; }

bench_machine_start

# ---------------------------------------------------------------------------
# 1. Idle: --http with no request, next to no profiler, same window
# ---------------------------------------------------------------------------
say "bench_continuous: 1. idle, $idle_s s"
start idle_none $((idle_s + 10))
none_pid=$prog_pid none_top=$top_pid
start idle_http $((idle_s + 10)) "$SNAP" -q --http 127.0.0.1:0
http_pid=$prog_pid http_top=$top_pid
sleep 2 # the preload's threads are up
our_tids "$http_pid" >"$work/idle.tids"
tids=$(awk '{ printf "%s%s", (NR > 1 ? "," : ""), $1 }' "$work/idle.tids")
declare -A ctx0
while read -r tid name; do ctx0[$tid]=$(ctxt "$tid"); done <"$work/idle.tids"
cpu0=$(proc_cpu_ms "$http_pid")
perf stat -x, -o "$work/sig_none" -e signal:signal_deliver -p "$none_pid" -- sleep "$idle_s" &
p1=$!
perf stat -x, -o "$work/sig_http" -e signal:signal_deliver -p "$http_pid" -- sleep "$idle_s" &
p2=$!
perf_ours=ok
if [ -n "$tids" ]; then
  perf stat -x, -o "$work/sys_ours" --per-thread -e raw_syscalls:sys_enter -t "$tids" -- sleep "$idle_s" &
  p3=$!
else
  p3="" perf_ours="no thread of ours"
fi
wait $p1 || perf_ours="perf failed"
wait $p2 || perf_ours="perf failed"
[ -z "$p3" ] || wait "$p3" || perf_ours="perf failed"
prog_pid=$http_pid
while read -r tid name; do
  syscalls=$(awk -F, -v t="$tid" 'NF > 3 { n = split($1, a, "-"); if (a[n] == t) print $2 }' "$work/sys_ours" 2>/dev/null)
  record idle_thread "name=$name" "tid=$tid" "wakeups=$(($(ctxt "$tid") - ctx0[$tid]))" "syscalls=${syscalls:-?}"
done <"$work/idle.tids"
record idle "none_signals=$(perf_count "$work/sig_none")" "http_signals=$(perf_count "$work/sig_http")" \
  "http_cpu_ms=$(($(proc_cpu_ms "$http_pid") - cpu0))" "perf=${perf_ours// /_}"
top_pid=$none_top
finish
top_pid=$http_top
finish
record idle_run "http_rc=$rc"

# ---------------------------------------------------------------------------
# 2. CPU per fixed work: none, --http idle, --http during one profile
# ---------------------------------------------------------------------------
rows=(none idle request flight)
# The four runs of a round run at the same time, side by side, so that
# whatever else loads the machine loads them alike: run one after another,
# the none rows of one round differed by 5 % on a shared machine, more than
# what is measured. Each round starts them in another order.
say "bench_continuous: 2. cpu, $rounds round(s) of ${#rows[@]} runs of $cpu_s s side by side"
expected_output "$cpu_s" >"$work/cpu.expected"
declare -A row_top row_base row_token
for r in $(seq "$rounds"); do
  for k in $(seq 0 $((${#rows[@]} - 1))); do
    row=${rows[$(((k + r - 1) % ${#rows[@]}))]}
    tag=cpu_${row}_$r
    case $row in
      none) start "$tag" "$cpu_s" ;;
      idle | request) start "$tag" "$cpu_s" "$SNAP" -q --http 127.0.0.1:0 ;;
      flight)
        # --flight's own default rate and trigger (19 Hz, CPU-time timers):
        # -F would make it perf events.
        start_hz=default
        start "$tag" "$cpu_s" "$SNAP" -q --http 127.0.0.1:0 --flight 5m
        start_hz="" ;;
    esac
    row_top[$row]=$top_pid row_base[$row]=$base row_token[$row]=$token
  done
  tag=cpu_request_$r
  curl -sS -o "$work/$tag.pb.gz" -w '%{http_code}' --max-time $((req_s + 30)) \
    "${row_base[request]}/debug/pprof/profile?seconds=$req_s&token=${row_token[request]}" \
    >"$work/$tag.code" 2>>"$work/$tag.curl" &
  curl_pid=$!
  sleep $((cpu_s - 3))
  base=${row_base[flight]} token=${row_token[flight]}
  flight_ask "cpu_flight_$r" "$((cpu_s - 6))s"
  record cpu_flight "round=$r" "code=$code" "took_ms=$took_ms" "samples=$samples"
  if wait "$curl_pid"; then code=$(cat "$work/$tag.code"); else code="curl_rc=$?"; fi
  record cpu_request "round=$r" "code=$code" \
    "samples=$(go tool pprof -sample_index=samples -top "$work/$tag.pb.gz" 2>/dev/null |
      sed -n 's/.* of \([0-9]*\) total.*/\1/p')"
  for row in "${rows[@]}"; do
    tag=cpu_${row}_$r
    top_pid=${row_top[$row]}
    finish
    same=yes
    cmp -s "$work/$tag.out" "$work/cpu.expected" || same=no
    record cpu "row=$row" "round=$r" "cpu_us=$(cpu_us "$tag")" "rc=$rc" "same_output=$same"
  done
done

# ---------------------------------------------------------------------------
# 3. The endpoint under load
# ---------------------------------------------------------------------------
n_good=35 n_heap=5 n_bad=5 n_slow=5
bad_urls=("GET /debug/pprof/nope?token=TOKEN 404" "GET /debug/pprof/profile?seconds=abc&token=TOKEN 400"
  "GET /debug/pprof/profile?seconds=1 401" "GET /debug/pprof/profile?seconds=1&token=wrong 401"
  "GET /debug/pprof/profile?seconds=0&token=TOKEN 400" "POST /debug/pprof/profile?seconds=1&token=TOKEN 405")

# client ID KIND END: asks until END (epoch s); a line "kind code rc" per
# request into load/ID.log; 200 bodies of profiles kept as load/ID.N.pb.gz.
client() {
  local id=$1 kind=$2 end=$3 n=0 code rc method path want body
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$((n + 1))
    body=$work/load/$id.$n.pb.gz
    case $kind in
      good) set -- curl -sS --max-time 30 "$base/debug/pprof/profile?seconds=1&token=$token" ;;
      heap) set -- curl -sS --max-time 30 "$base/debug/pprof/heap?token=$token" ;;
      slow) set -- curl -sS --max-time 60 --limit-rate 2k "$base/debug/pprof/profile?seconds=1&token=$token" ;;
      bad)
        read -r method path want <<<"${bad_urls[$(((id + n) % ${#bad_urls[@]}))]}"
        set -- curl -sS --max-time 30 -X "$method" "$base${path//TOKEN/$token}" ;;
    esac
    rc=0
    code=$("$@" -o "$body" -w '%{http_code}' 2>>"$work/load/$id.curlerr") || rc=$?
    if [ "$kind" = bad ]; then
      echo "bad $code $rc $want" >>"$work/load/$id.log"
      rm -f "$body"
    else
      echo "$kind $code $rc" >>"$work/load/$id.log"
      [ "$code" = 200 ] || rm -f "$body"
    fi
    # A 503 says Retry-After: a scraper waits; 0.2 s keeps 40 clients from
    # spinning the loaded machine's CPUs on curl.
    [ "$code" != 503 ] || sleep 0.2
    # A heap profile is answered at once: 2 a second per client, not a spin.
    [ "$kind" != heap ] || sleep 0.5
  done
}

# load_run TAG RECORD_BIN [ENV...]: one run of the load; its lines into results.
load_run() {
  local tag=$1 bin=$2 i end secs=$((load_s + 20))
  shift 2
  rm -rf "$work/load"
  mkdir -p "$work/load"
  [ -f "$work/load.expected.$secs" ] || expected_output "$secs" >"$work/load.expected.$secs"
  start_env=("$@")
  start "$tag" "$secs" "$bin" -q --heap --http 127.0.0.1:0
  start_env=()
  local rec_pid=$top_pid # env and the subshell exec record
  sleep 2
  local fd_prog0 fd_rec0
  fd_prog0=$(fds "$prog_pid") fd_rec0=$(fds "$rec_pid")
  end=$(($(date +%s) + load_s))
  local cpids=()
  for i in $(seq 0 $((n_good + n_heap + n_bad + n_slow - 1))); do
    if [ "$i" -lt "$n_good" ]; then kind=good
    elif [ "$i" -lt $((n_good + n_heap)) ]; then kind=heap
    elif [ "$i" -lt $((n_good + n_bad)) ]; then kind=bad
    else kind=slow; fi
    client "$i" "$kind" "$end" &
    cpids+=($!)
  done
  wait "${cpids[@]}"
  local done_at
  done_at=$(date +%s)
  sleep 3 # connections closed, request files deleted
  local fd_prog1 fd_rec1
  fd_prog1=$(fds "$prog_pid") fd_rec1=$(fds "$rec_pid")
  finish
  local same=yes
  cmp -s "$work/$tag.out" "$work/load.expected.$secs" || same=no
  # Every 200 body opens in go tool pprof: all at once, one by one if that fails.
  local bodies=("$work"/load/*.pb.gz) bad_bodies=0 n_bodies=0
  [ -e "${bodies[0]}" ] || bodies=()
  n_bodies=${#bodies[@]}
  if [ "$n_bodies" -gt 0 ] && ! go tool pprof -top "${bodies[@]}" >/dev/null 2>"$work/$tag.pprof.err"; then
    for i in "${bodies[@]}"; do go tool pprof -top "$i" >/dev/null 2>&1 || bad_bodies=$((bad_bodies + 1)); done
  fi
  local san
  san=$(grep -c 'ERROR: AddressSanitizer\|runtime error:\|ERROR: LeakSanitizer\|WARNING: ThreadSanitizer' "$work/$tag.err" || true)
  record load "tag=$tag" "prog_fd0=$fd_prog0" "prog_fd1=$fd_prog1" "rec_fd0=$fd_rec0" "rec_fd1=$fd_rec1" \
    "rc=$rc" "same_output=$same" "bodies=$n_bodies" "bad_bodies=$bad_bodies" "sanitizer=$san" \
    "clients_took=$((done_at - end + load_s))"
  cat "$work"/load/*.log | awk -v tag="$tag" '{
      k = $1; n[k]++
      if ($2 == 200) ok[k]++; else if ($2 == 503) busy[k]++
      else if (k == "bad" && $2 == $4) want[k]++; else other[k]++
      if ($3 != 0) { rcs[k] = rcs[k] " rc" $3; fail[k]++ }
    }
    END { for (k in n) printf "load_kind tag=%s kind=%s n=%d s200=%d s503=%d expected4xx=%d other=%d curl_failed=%d\n",
      tag, k, n[k], ok[k], busy[k], want[k], other[k], fail[k] }' >>"$results"
  cat "$work"/load/*.log | awk '$3 != 0 { c[$3]++ } END { for (r in c) printf " rc%s x%d", r, c[r] }' >"$work/$tag.rcs"
  cat "$work"/load/*.log | awk '$1 == "bad" && $2 != $4 { c[$4 "->" $2]++ }
    END { for (r in c) printf " %s x%d", r, c[r] }' >"$work/$tag.badcodes"
  grep -h . "$work"/load/*.curlerr 2>/dev/null | sed 's/[0-9]\+ ms/N ms/; s/[0-9]\+ bytes/N bytes/g' |
    sort | uniq -c | sort -rn | head -5 >"$work/$tag.curlerrs" || true
}

say "bench_continuous: 3. load, $load_s s"
load_run load_plain "$SNAP"
if [ -n "$asan_build" ]; then
  say "bench_continuous: 3. load under ASan+UBSan, $load_s s"
  load_run load_asan "$asan_build/cli/snapprof" SNAPPROF_PRELOAD_LIB="$PRELOAD" \
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
fi
if [ -n "$tsan_build" ]; then
  say "bench_continuous: 3. load under TSan, $load_s s"
  load_run load_tsan "$tsan_build/cli/snapprof" SNAPPROF_PRELOAD_LIB="$PRELOAD" TSAN_OPTIONS=halt_on_error=0
fi

# ---------------------------------------------------------------------------
# 4. Memory and interval sums under --loop 10s
# ---------------------------------------------------------------------------
say "bench_continuous: 4. memory, --loop 10s for $mem_s s"
mkdir -p "$work/mem"
start_hz=default
start memf $((mem_s + 8)) "$SNAP" -q --http 127.0.0.1:0 --flight 2m
start_hz=""
memf_pid=$prog_pid memf_top=$top_pid memf_base=$base memf_token=$token
start mem $((mem_s + 5)) "$SNAP" -q --loop 10s -o "$work/mem/whole.pb.gz"
t0=$(date +%s)
for i in $(seq 0 10 "$mem_s"); do
  while [ "$(date +%s)" -lt $((t0 + i)) ]; do sleep 0.2; done
  record rss "t=$i" "kib=$(rss_kib "$prog_pid")"
  record rss_flight "t=$i" "kib=$(rss_kib "$memf_pid")"
done
finish
record mem_run "rc=$rc"
base=$memf_base token=$memf_token
flight_ask memf 2m
record mem_flight "code=$code" "took_ms=$took_ms" "samples=$samples"
top_pid=$memf_top
finish
record memf_run "rc=$rc"
total_of() { go tool pprof -sample_index=samples -top "$@" 2>/dev/null | sed -n 's/.* of \([0-9]*\) total.*/\1/p'; }
intervals=("$work"/mem/whole.*Z.pb.gz)
[ -e "${intervals[0]}" ] || intervals=()
# duration_of FILE: the profile's duration_nanos, in s (go tool pprof -raw).
duration_of() { go tool pprof -raw "$1" 2>/dev/null | awk '$1 == "Duration:" { print $2; exit }'; }
sums="" durations=""
for f in "${intervals[@]}"; do
  sums="$sums$(total_of "$f"),"
  durations="$durations$(duration_of "$f"),"
done
record mem_sums "intervals=${#intervals[@]}" "whole=$(total_of "$work/mem/whole.pb.gz")" \
  "merged=$([ ${#intervals[@]} -eq 0 ] || total_of "${intervals[@]}")" "each=${sums%,}" \
  "durations=${durations%,}"

bench_machine_end

# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------
table=$work/table
{
  printf 'bench_continuous: snapprof %s, %s CPUs (%s), kernel %s, load %s%s\n' "$commit" "$(nproc)" \
    "$cpu_model" "$kernel" "$load" "$([ "$quick" = 1 ] && echo ' (--quick: figures are not meaningful)')"
  printf 'workload: bench_server serve: 4 workers blocked in read() on sockets, 40 requests/s of fixed work, %d Hz\n' "$hz"
  echo
  echo "1. --http with no request, over $idle_s s (perf stat; target: 0 signals)"
  awk "$bench_awk_lib"'
    $1 == "idle" { parse(); printf "   signals delivered to the program: %s (no profiler: %s, same window)%s\n",
      f["http_signals"], f["none_signals"], (f["perf"] == "ok" ? "" : "; perf: " f["perf"])
      printf "   the program used %.2f CPU-s meanwhile: %.0f signals per CPU-second\n", f["http_cpu_ms"] / 1000,
        (f["http_cpu_ms"] > 0 ? f["http_signals"] * 1000 / f["http_cpu_ms"] : 0) }' "$results"
  printf '   %-18s %8s %10s %10s\n' "thread of ours" tid wakeups syscalls
  awk "$bench_awk_lib"'$1 == "idle_thread" { parse(); printf "   %-18s %8s %10s %10s\n", f["name"], f["tid"], f["wakeups"], f["syscalls"]
    w += f["wakeups"]; s += f["syscalls"] }
    END { printf "   %-18s %8s %10d %10d\n", "all", "", w, s }' "$results"
  echo
  echo "2. CPU of the program per fixed work ($cpu_s s runs, ${req_s} s profile request), median of $rounds rounds of the four side by side"
  printf '   %-28s %10s %8s %15s %12s\n' row "CPU ms" "x none" "rounds' range" "same output"
  awk "$bench_awk_lib"'
    $1 == "cpu" { parse(); v[f["row"]] = v[f["row"]] " " f["cpu_us"]; c[f["row"], f["round"]] = f["cpu_us"]; nr = f["round"] > nr ? f["round"] : nr
      if (f["same_output"] != "yes" || f["rc"] != 0) bad[f["row"]]++ }
    function med(s,    a, n, i, j, t) { n = split(s, a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n ? a[int((n + 1) / 2)] : 0 }
    $1 == "cpu_request" { parse(); codes = codes " " f["code"]; samples = samples " " f["samples"] }
    $1 == "cpu_flight" { parse(); fcodes = fcodes " " f["code"]; fsamples = fsamples " " f["samples"]; ftook = ftook " " f["took_ms"] }
    END { name["none"] = "no profiler"; name["idle"] = "record --http, no request"; name["request"] = "record --http, one request"
      name["flight"] = "--http --flight 5m (19 Hz, timer)"
      for (k = 1; k <= 4; k++) { r = (k == 1 ? "none" : k == 2 ? "idle" : k == 3 ? "request" : "flight"); m = med(v[r])
        # x none: the median of the rounds own ratios (the runs of a round ran side by side)
        q = ""; lo = 1e9; hi = 0
        for (i = 1; i <= nr; i++) if (c["none", i] > 0 && c[r, i] > 0) { x = c[r, i] / c["none", i]; q = q " " x; lo = x < lo ? x : lo; hi = x > hi ? x : hi }
        printf "   %-28s %10.1f %8.3f %15s %12s\n", name[r], m / 1000, med(q), (hi > 0 ? sprintf("%.3f-%.3f", lo, hi) : "-"), (bad[r] ? "no x" bad[r] : "yes") }
      printf "   request statuses:%s; samples in each profile:%s\n", codes, samples
      printf "   --flight: ?since=%ds statuses:%s; answered in ms:%s; samples in each:%s\n", '"$((cpu_s - 6))"', fcodes, ftook, fsamples }' "$results"
  echo
  echo "3. Endpoint of record --heap --http under 50 concurrent clients for $load_s s (35 profile?seconds=1, 5 heap, 5 bad URLs, 5 reading at 2 KiB/s)"
  printf '   %-10s %-5s %6s %6s %6s %9s %6s %8s\n' run kind asked 200 503 "right 4xx" other "curl err"
  awk "$bench_awk_lib"'$1 == "load_kind" { parse(); printf "   %-10s %-5s %6d %6d %6d %9s %6d %8d\n",
      f["tag"], f["kind"], f["n"], f["s200"], f["s503"], (f["kind"] == "bad" ? f["expected4xx"] : "-"), f["other"], f["curl_failed"] }' "$results"
  awk "$bench_awk_lib"'$1 == "load" { parse()
      printf "   %s: fds program %s -> %s, record %s -> %s; 200 bodies %s, not opened by pprof %s; program output same: %s; record exit %s; sanitizer reports %s\n",
        f["tag"], f["prog_fd0"], f["prog_fd1"], f["rec_fd0"], f["rec_fd1"], f["bodies"], f["bad_bodies"], f["same_output"], f["rc"], f["sanitizer"] }' "$results"
  for t in load_plain load_asan load_tsan; do
    [ -f "$work/$t.rcs" ] || continue
    [ ! -s "$work/$t.rcs" ] || echo "   $t: curl exit codes:$(cat "$work/$t.rcs")"
    [ ! -s "$work/$t.badcodes" ] || echo "   $t: bad URLs answered otherwise (wanted->got):$(cat "$work/$t.badcodes")"
    [ ! -s "$work/$t.curlerrs" ] || sed "s/^/   $t: curl: /" "$work/$t.curlerrs"
  done
  [ -n "$asan_build" ] || echo "   (no --asan-build: no ASan run)"
  [ -n "$tsan_build" ] || echo "   (no --tsan-build: no TSan run)"
  echo
  echo "4. record --loop 10s -o F at $hz Hz for $mem_s s: the program's RSS every 10 s, MiB"
  awk "$bench_awk_lib"'$1 == "rss" { parse(); t[n] = f["t"]; k[n++] = f["kib"] }
    END { line = "  "; for (i = 0; i < n; i++) { line = line sprintf(" %.1f", k[i] / 1024); if (i % 12 == 11) { print line; line = "  " } }
      if (line != "  ") print line
      if (n > 1) { g = (k[n - 1] - k[0]) / 1024; secs = t[n - 1] - t[0]
        printf "   growth: %.2f MiB over %d s = %.1f MiB per hour\n", g, secs, g * 3600 / secs }
      if (n > 3) { h = (k[n - 1] - k[2]) / 1024; secs = t[n - 1] - t[2]
        printf "   after the first interval is written (from the %d s sample): %.2f MiB over %d s = %.1f MiB per hour (target <= 5)\n",
          t[2], h, secs, h * 3600 / secs } }' "$results"
  awk "$bench_awk_lib"'$1 == "mem_sums" { parse()
      printf "   samples: %s intervals, merged %s, whole-run profile %s: %s\n   per interval: %s\n",
        f["intervals"], f["merged"], f["whole"], (f["merged"] == f["whole"] ? "equal" : "NOT equal (" f["merged"] - f["whole"] ")"), f["each"]
      printf "   their durations (go tool pprof -raw): %s\n", f["durations"] }' "$results"
  awk "$bench_awk_lib"'$1 == "mem_run" { parse(); if (f["rc"] != 0) print "   record exit " f["rc"] }' "$results"
  echo "   beside it, record --http --flight 2m at 19 Hz: the program's RSS every 10 s, MiB"
  awk "$bench_awk_lib"'$1 == "rss_flight" { parse(); t[n] = f["t"]; k[n++] = f["kib"] }
    END { line = "  "; for (i = 0; i < n; i++) { line = line sprintf(" %.1f", k[i] / 1024); if (i % 12 == 11) { print line; line = "  " } }
      if (line != "  ") print line
      i = 0; while (i < n && t[i] + 0 < 180) i++
      if (i < n - 1) { h = (k[n - 1] - k[i]) / 1024; secs = t[n - 1] - t[i]
        printf "   after the window is full (from the %d s sample): %.2f MiB over %d s = %.1f MiB per hour\n", t[i], h, secs, h * 3600 / secs } }' "$results"
  awk "$bench_awk_lib"'$1 == "mem_flight" { parse(); printf "   ?since=2m at the end: status %s, answered in %s ms, %s samples (19 Hz x 120 s x busy share)\n", f["code"], f["took_ms"], f["samples"] }
    $1 == "memf_run" { parse(); if (f["rc"] != 0) print "   flight record exit " f["rc"] }' "$results"
} >"$table"
bench_finish_table "$table"

section() {
  bench_section_made_by
  echo "- what: issue 28's \"Measured\": \`record --http\` idle (signals, wakeups and"
  echo "  system calls of ours; target 0 signals when idle: threads are armed only while a profile is asked),"
  echo "  the program's CPU per fixed work with \`--http\` idle and during a profile request, the endpoint"
  echo "  under 50 clients, memory and interval sums under \`--loop 10s\`, and \`--flight\`'s CPU, memory"
  echo "  and answer time"
  [ -z "$note" ] || echo "- note: $note"
  echo
  bench_section_table "$table"
}
bench_write_section "## Continuous profiling: --http and --loop (issue 28)" section
