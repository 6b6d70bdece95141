#!/usr/bin/env bash
# `snapprof record --http` (cli/snapprof_http.c, preload/preload_serve.c):
# a real program (http_prog.c) run under record, its endpoint asked with
# the real clients, curl and go tool pprof. One case per ctest test:
#   test_http.sh CASE SNAPPROF_CLI HTTP_PROG SANITIZED HAVE_MHD
# Exit 77: skipped (a sanitizer build, whose preload cannot be preloaded
# into an uninstrumented program; no libmicrohttpd, curl or go).
set -u
case=$1 cli=$2 prog=$3 sanitized=$4 have_mhd=$5
HTTP_DIR_NAME=snapprof-http-test
# shellcheck source=tests/http_lib.sh
. "$(dirname "$0")/http_lib.sh"

# Starts record on a free port (127.0.0.1:0; record prints the port);
# sets url, base, token. $REC_OPTS: more options of record's (--heap,
# --wall, --http-token T); with one of its own the token is not checked
# for 32 digits.
start() {
  # shellcheck disable=SC2086
  "$cli" record -q -o "$dir/whole.pb.gz" ${REC_OPTS:-} --http 127.0.0.1:0 -- "$prog" "$@" \
    >"$dir/out" 2>"$dir/err" &
  rec=$!
  await_url
  case ${REC_OPTS:-} in *--http-token*) ;; *)
    [ ${#token} -eq 32 ] || fail "no 32-digit token in $url" ;;
  esac
}

# Waits for the program's line (http_prog heap prints "allocated").
await_line() {
  for _ in $(seq 600); do grep -qx "$1" "$dir/out" && return 0; sleep 0.1; done
  fail "the program did not print $1"
}

# pprof URL_OR_FILE [pprof args...]: go tool pprof -top into $dir/top.
pprof_top() {
  local what=$1; shift
  PPROF_TMPDIR=$dir HOME=$dir go tool pprof -top -timeout 120 "$@" "$what" >"$dir/top" 2>&1 ||
    { cat "$dir/top"; fail "go tool pprof $* $what failed"; }
}

# flat NAME: the flat value of NAME in $dir/top (-unit=B: bytes, no unit).
flat() { awk -v f="$1" '$NF == f { v = $1; sub(/B$/, "", v); print v }' "$dir/top"; }

# code URL [curl args...]: the HTTP code; the body in $OUT (default
# $dir/body), the headers in $OUT.headers.
code() {
  local u=$1 out=${OUT:-$dir/body}; shift
  curl -s --max-time 120 -o "$out" -D "$out.headers" -w '%{http_code}' "$@" "$u"
}

is_gzip() { [ "$(head -c2 "$1" | od -An -tx1 | tr -d ' ')" = 1f8b ]; }

# fill_bound: 8 CPU profiles of 60 s in flight, as many as are served at
# once; their codes go to $dir/c1..c8, their bodies to $dir/p1..p8.
fill_bound() {
  for i in 1 2 3 4 5 6 7 8; do
    OUT=$dir/p$i code "$base/debug/pprof/profile?seconds=60&token=$token" >"$dir/c$i" &
  done
  sleep 3
}

# refused WHAT URL: past the bound, URL is answered 503 with Retry-After.
refused() {
  c=$(code "$2")
  [ "$c" = 503 ] || fail "$1: $c"
  grep -qi '^retry-after: [0-9]' "$dir/body.headers" || fail "no Retry-After"
}

# served_in_flight [gzip]: after finish, each of fill_bound's requests got
# 200 (what it collected until the program ended); with gzip, a profile.
served_in_flight() {
  wait
  for i in 1 2 3 4 5 6 7 8; do
    [ "$(cat "$dir/c$i")" = 200 ] || fail "request $i in flight at exit: $(cat "$dir/c$i")"
    [ "${1:-}" != gzip ] || is_gzip "$dir/p$i" || fail "request $i: not a profile"
  done
}

case $case in
go_pprof)
  # A profile taken over HTTP by go tool pprof names the function that
  # burns. -timeout: pprof's own is 1.5 x seconds, too short on a loaded
  # machine.
  command -v go >/dev/null || skip "no go (tools/setup.sh installs golang-go)"
  start "$dir/stop"
  PPROF_TMPDIR=$dir HOME=$dir go tool pprof -top -timeout 120 \
    "$base/debug/pprof/profile?seconds=2&token=$token" >"$dir/top" 2>&1 ||
    { cat "$dir/top"; fail "go tool pprof failed"; }
  grep -q 'http_burn' "$dir/top" || { cat "$dir/top"; fail "http_burn is not in the profile"; }
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  [ "$(cat "$dir/out")" = burned ] || fail "the program's output changed"
  [ -s "$dir/whole.pb.gz" ] || fail "-o's whole-run profile was not written"
  ;;
status_codes)
  start "$dir/stop"
  c=$(code "$base/debug/pprof/profile?seconds=1")
  [ "$c" = 401 ] && grep -q token "$dir/body" || fail "no token: $c $(cat "$dir/body")"
  c=$(code "$base/debug/pprof/profile?seconds=1&token=0123456789abcdef0123456789abcdef")
  [ "$c" = 401 ] || fail "bad token: $c"
  c=$(code "$base/debug/pprof/profile?seconds=1" -H "Authorization: Bearer nope")
  [ "$c" = 401 ] || fail "bad bearer token: $c"
  c=$(code "$base/debug/pprof/profile?seconds=1" -H "Authorization: Bearer $token")
  [ "$c" = 200 ] || fail "bearer token: $c $(cat "$dir/body")"
  is_gzip "$dir/body" || fail "the profile is not gzip"
  grep -qi '^content-type: application/octet-stream' "$dir/body.headers" || fail "content type"
  c=$(code "$base/debug/pprof/?token=$token")
  [ "$c" = 200 ] && grep -q '/debug/pprof/profile' "$dir/body" || fail "index: $c"
  c=$(code "$base/debug/pprof/goroutine?token=$token")
  [ "$c" = 404 ] || fail "unknown path: $c"
  c=$(code "$base/?token=$token")
  [ "$c" = 404 ] || fail "/: $c"
  for s in 0 3601 abc -1 1.5 ''; do
    c=$(code "$base/debug/pprof/profile?seconds=$s&token=$token")
    [ "$c" = 400 ] && grep -q seconds "$dir/body" || fail "seconds=$s: $c $(cat "$dir/body")"
    [ "$(wc -l <"$dir/body")" = 1 ] || fail "seconds=$s: not a one-line reason"
  done
  c=$(code "$base/debug/pprof/profile?token=$token" -X POST -d x)
  [ "$c" = 405 ] || fail "POST: $c"
  # HEAD answers at once and starts nothing: with seconds=30 a profile it
  # started would hold the answer 30 s.
  c=$(code "$base/debug/pprof/profile?seconds=30&token=$token" -I --max-time 10)
  [ "$c" = 200 ] || fail "HEAD: $c"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  [ "$(cat "$dir/out")" = burned ] || fail "the program's output changed"
  ;;
concurrency_bound)
  # 8 profiles at once are served; a 9th is 503 with Retry-After; those
  # in flight when the program ends get what they collected (200).
  start "$dir/stop"
  fill_bound
  refused "9th request" "$base/debug/pprof/profile?seconds=1&token=$token"
  finish
  served_in_flight gzip
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
program_closes_fds)
  # The program closes every fd above 2 and opens others at those
  # numbers: the endpoint answers 503 with the reason; the program's
  # output and exit status are its own.
  start closefds "$dir/stop"
  c=$(code "$base/debug/pprof/profile?seconds=1&token=$token")
  [ "$c" = 200 ] || fail "before the close: $c"
  touch "$dir/stop.close"
  for _ in $(seq 600); do grep -q closed "$dir/out" && break; sleep 0.1; done
  grep -q closed "$dir/out" || fail "the program did not close its fds"
  for i in 1 2; do
    c=$(code "$base/debug/pprof/profile?seconds=1&token=$token")
    [ "$c" = 503 ] && grep -q 'closed' "$dir/body" || fail "after the close ($i): $c $(cat "$dir/body")"
  done
  finish
  [ "$status" = 3 ] || fail "exit status $status, not 3"
  [ "$(cat "$dir/out")" = "$(printf 'closed\nburned')" ] || fail "the program's output changed"
  ;;
request_at_exit)
  # A request in flight when the program exits, and requests that come
  # as it exits, are answered (200 or 503), never reset (curl's code 000).
  start "$dir/stop"
  OUT=$dir/p0 code "$base/debug/pprof/profile?seconds=30&token=$token" >"$dir/c0" &
  sleep 1.5
  touch "$dir/stop"
  # (Each also gets curl's exit status: under load a client can start
  # after record stopped listening and is refused, 7, which is no reset.)
  for i in 1 2 3 4 5 6; do
    (OUT=$dir/p$i code "$base/debug/pprof/profile?seconds=1&token=$token" >"$dir/c$i"
     echo " $?" >>"$dir/c$i") &
  done
  # Clients that keep asking across the end: each gets an answer, or is
  # refused once record stopped listening (curl exit 7), never reset
  # after it connected (52, 56: a connection queued or accepted, then
  # closed unanswered).
  # They stop 3 requests after the program's last line, so that record's
  # wait for quiet ends.
  for l in 1 2 3 4; do
    (n=3
     while [ "$n" -gt 0 ] && kill -0 "$rec" 2>/dev/null; do
       curl -s --max-time 60 -o /dev/null -w '%{http_code}' "$base/debug/pprof/?token=$token"
       echo " $?"
       grep -q burned "$dir/out" && n=$((n - 1))
     done >"$dir/loop$l") &
  done
  finish
  wait
  cat "$dir"/loop* | while read -r c e; do
    [ "$e" = 7 ] || { [ "$e" = 0 ] && [ "$c" != 000 ]; } || fail "a client across the end: code $c, curl exit $e"
  done || exit 1
  for i in 0 1 2 3 4 5 6; do
    read -r c e <"$dir/c$i"
    [ "$i" != 0 ] && [ "$c" = 000 ] && [ "${e:-}" = 7 ] && continue
    case $c in
    200) is_gzip "$dir/p$i" || fail "request $i: 200 without a profile" ;;
    503) grep -q 'ended\|stopped' "$dir/p$i" || fail "request $i: 503 with $(cat "$dir/p$i")" ;;
    *) fail "request $i: code $c" ;;
    esac
  done
  read -r c _ <"$dir/c0"
  [ "$c" = 200 ] || fail "the request in flight at exit: $c"
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
port_in_use)
  # A port in use is one clear line, and the program runs anyway.
  start "$dir/stop"
  port=${base##*:}
  touch "$dir/stop2"
  "$cli" record -q -o "$dir/second.pb.gz" --http "127.0.0.1:$port" -- "$prog" "$dir/stop2" \
    >"$dir/out2" 2>"$dir/err2"
  s2=$?
  grep -q "cannot listen: Address already in use; the program runs" "$dir/err2" ||
    fail "no clear line: $(cat "$dir/err2")"
  [ "$s2" = 0 ] && [ "$(cat "$dir/out2")" = burned ] || fail "the second program: $s2"
  c=$(code "$base/debug/pprof/?token=$token")
  [ "$c" = 200 ] || fail "the first record stopped serving: $c"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
flight)
  # --flight: ?since=S answers at once with the last S the program ran,
  # from memory (a seconds=60 request would take a minute); it names the
  # function that burns, and opens in go tool pprof. Without --flight,
  # ?since= is 400 with the reason; bad values 400; --flight without
  # --http is a usage error.
  command -v go >/dev/null || skip "no go (tools/setup.sh installs golang-go)"
  "$cli" record --flight 5m -- true >"$dir/usage" 2>&1
  [ $? = 2 ] && grep -q -- "--flight needs --http" "$dir/usage" || fail "--flight alone: $(cat "$dir/usage")"
  REC_OPTS="--flight 5m" start "$dir/stop"
  sleep 3
  t0=$(date +%s)
  c=$(code "$base/debug/pprof/profile?since=60s&token=$token")
  took=$(($(date +%s) - t0))
  [ "$c" = 200 ] || fail "since=60s: $c $(cat "$dir/body")"
  [ "$took" -lt 30 ] || fail "since=60s took $took s: not answered from memory"
  is_gzip "$dir/body" || fail "since=60s: not a gzipped profile"
  cp "$dir/body" "$dir/since.pb.gz"
  HOME=$dir go tool pprof -top "$dir/since.pb.gz" >"$dir/top" 2>&1 || { cat "$dir/top"; fail "pprof cannot open it"; }
  grep -q http_burn "$dir/top" || { cat "$dir/top"; fail "http_burn is not in the flight profile"; }
  # A window of the last 2 s holds less than one of the last 60 s.
  c=$(OUT=$dir/short code "$base/debug/pprof/profile?since=2&token=$token")
  [ "$c" = 200 ] || fail "since=2: $c"
  HOME=$dir go tool pprof -top "$dir/short" >"$dir/top2" 2>&1 || fail "pprof cannot open since=2"
  HOME=$dir go tool pprof -raw "$dir/since.pb.gz" >"$dir/raw60" 2>&1 || fail "pprof -raw"
  # -top prints Go durations (972.5ms, 1s, 25.7s); -raw cuts them to 4
  # characters.
  secs() { grep -o '^Duration: [0-9.]*[mun]*s' "$1" | head -1 | awk '{ v = $2; u = v; sub(/[0-9.]+/, "", u)
    sub(/[a-z]+$/, "", v); print v * (u == "ms" ? 0.001 : u == "us" ? 1e-6 : u == "ns" ? 1e-9 : 1) }'; }
  d2=$(secs "$dir/top2") d60=$(secs "$dir/top")
  echo "since=2: ${d2}s; since=60s: ${d60}s"
  awk -v a="$d2" -v b="$d60" 'BEGIN { exit !(a > 0 && a <= 2.5 && b > a) }' ||
    fail "windows: since=2 gave ${d2}s, since=60s ${d60}s"
  # The flight recorder's rate without -F: 19 Hz (a period of 1/19 s).
  grep -q '^Period: 52631578$' "$dir/raw60" || fail "not 19 Hz: $(grep Period "$dir/raw60")"
  for bad in 0 abc 25h 1.5s -1 "5m&seconds=3"; do
    c=$(code "$base/debug/pprof/profile?since=$bad&token=$token")
    [ "$c" = 400 ] || fail "since=$bad: $c, not 400"
  done
  c=$(code -I "$base/debug/pprof/profile?since=60&token=$token")
  [ "$c" = 200 ] || fail "HEAD since=60: $c"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  # At 19 Hz by default each thread's CPU-time timer, not a perf event
  # (SNAPPROF_FLIGHT_TRIGGER): a perf event costs a server at every context
  # switch.
  "$cli" stats "$dir/whole.pb.gz" >"$dir/stats" 2>&1 || fail "snapprof stats: $(cat "$dir/stats")"
  grep -q '^trigger  *timer ' "$dir/stats" || fail "not the timer trigger: $(grep '^trigger' "$dir/stats")"
  # No --flight: 400 saying what to do.
  start "$dir/stop2"
  c=$(code "$base/debug/pprof/profile?since=60s&token=$token")
  [ "$c" = 400 ] && grep -q -- "--flight" "$dir/body" || fail "since without --flight: $c $(cat "$dir/body")"
  touch "$dir/stop2"
  wait "$rec"
  rec=
  ;;
heap_endpoints)
  # --heap: /heap and /allocs answer at once with the run's heap profile
  # so far; with --heap-interval 1 every allocation is recorded, so the
  # totals are exact: http_hold keeps 64 x 100000 bytes, http_churn
  # allocates 64 x 50000 and frees them. /heap's default index is
  # inuse_space, /allocs' alloc_space (Go's). Snapshots taken three times
  # leave the run's own heap file exact: nothing lost, nothing counted
  # twice.
  command -v go >/dev/null || skip "no go (tools/setup.sh installs golang-go)"
  REC_OPTS="--heap --heap-interval 1" start heap "$dir/stop"
  await_line allocated
  pprof_top "$base/debug/pprof/heap?token=$token" -sample_index=alloc_space -unit=B
  [ "$(flat http_hold)" = 6400000 ] && [ "$(flat http_churn)" = 3200000 ] ||
    { cat "$dir/top"; fail "/heap alloc_space is not 6400000 and 3200000"; }
  pprof_top "$base/debug/pprof/heap?token=$token" -sample_index=inuse_space -unit=B
  [ "$(flat http_hold)" = 6400000 ] && [ -z "$(flat http_churn)" ] ||
    { cat "$dir/top"; fail "/heap inuse_space: http_hold 6400000 and http_churn none"; }
  pprof_top "$base/debug/pprof/heap?token=$token" -unit=B
  grep -q '^Type: inuse_space' "$dir/top" || { cat "$dir/top"; fail "/heap default index"; }
  pprof_top "$base/debug/pprof/allocs?token=$token" -unit=B
  grep -q '^Type: alloc_space' "$dir/top" || { cat "$dir/top"; fail "/allocs default index"; }
  [ "$(flat http_churn)" = 3200000 ] || { cat "$dir/top"; fail "/allocs: http_churn"; }
  # Sample types in Go's order.
  PPROF_TMPDIR=$dir HOME=$dir go tool pprof -raw "$base/debug/pprof/allocs?token=$token" \
    >"$dir/raw" 2>&1 || fail "pprof -raw"
  grep -A1 '^Samples:' "$dir/raw" | tail -1 | grep -qx \
    'alloc_objects/count alloc_space/bytes\[dflt\] inuse_objects/count inuse_space/bytes' ||
    { cat "$dir/raw"; fail "sample types"; }
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  [ "$(cat "$dir/out")" = "$(printf 'allocated\nburned')" ] || fail "the program's output changed"
  pprof_top "$dir/whole.heap.pb.gz" -sample_index=alloc_space -unit=B
  [ "$(flat http_hold)" = 6400000 ] && [ "$(flat http_churn)" = 3200000 ] ||
    { cat "$dir/top"; fail "the run's own heap file is not exact after the snapshots"; }
  ;;
heap_params)
  # Parameters of /heap: seconds= (Go's delta) is refused with a reason,
  # gc=0/1 and debug=0 are accepted, other values 400 with one line.
  REC_OPTS="--heap" start heap "$dir/stop"
  await_line allocated
  for q in seconds=5 seconds=abc gc=2 gc=x debug=1; do
    for p in heap allocs; do
      c=$(code "$base/debug/pprof/$p?$q&token=$token")
      [ "$c" = 400 ] || fail "/$p?$q: $c $(cat "$dir/body")"
      [ "$(wc -l <"$dir/body")" = 1 ] || fail "/$p?$q: not a one-line reason"
    done
  done
  grep -q 'delta' <(curl -s "$base/debug/pprof/heap?seconds=5&token=$token") ||
    fail "seconds= on /heap: no reason"
  for q in gc=1 gc=0 debug=0; do
    c=$(code "$base/debug/pprof/heap?$q&token=$token")
    [ "$c" = 200 ] && is_gzip "$dir/body" || fail "/heap?$q: $c"
  done
  c=$(code "$base/debug/pprof/heap")
  [ "$c" = 401 ] || fail "/heap without the token: $c"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
heap_bound)
  # Heap requests count against the same bound as CPU ones: with 8 CPU
  # profiles in flight /heap is 503 with Retry-After; HEAD of /heap and
  # /allocs starts nothing, so it is answered 200 (no body) all the same.
  REC_OPTS="--heap" start heap "$dir/stop"
  await_line allocated
  fill_bound
  refused "/heap past the bound" "$base/debug/pprof/heap?token=$token"
  for p in heap allocs; do
    c=$(code "$base/debug/pprof/$p?token=$token" -I --max-time 10)
    [ "$c" = 200 ] || fail "HEAD /$p: $c"
  done
  finish
  served_in_flight
  ;;
not_served)
  # Without --heap and --wall: /heap, /allocs and /wall are 501 with a
  # one-line reason naming the option; the index lists none of them.
  start "$dir/stop"
  for p in heap allocs; do
    c=$(code "$base/debug/pprof/$p?token=$token")
    [ "$c" = 501 ] && grep -q -- '--heap' "$dir/body" || fail "/$p: $c $(cat "$dir/body")"
    [ "$(wc -l <"$dir/body")" = 1 ] || fail "/$p: not a one-line reason"
  done
  c=$(code "$base/debug/pprof/wall?seconds=1&token=$token")
  [ "$c" = 501 ] && grep -q -- '--wall' "$dir/body" || fail "/wall: $c $(cat "$dir/body")"
  c=$(code "$base/debug/pprof/?token=$token")
  [ "$c" = 200 ] && grep -q /debug/pprof/profile "$dir/body" || fail "index: $c"
  ! grep -q 'pprof/heap\|pprof/allocs\|pprof/wall' "$dir/body" || fail "the index lists what is not served"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
wall)
  # --wall: /wall gives a wall-time profile, so the thread asleep in
  # http_block is in it; the index lists /wall; bad seconds 400; HEAD
  # with seconds=30 answers at once.
  command -v go >/dev/null || skip "no go (tools/setup.sh installs golang-go)"
  REC_OPTS="--wall" start block "$dir/stop"
  pprof_top "$base/debug/pprof/wall?seconds=2&token=$token"
  grep -q '^Type: wall' "$dir/top" && grep -q 'http_block' "$dir/top" ||
    { cat "$dir/top"; fail "http_block is not in the /wall profile"; }
  c=$(code "$base/debug/pprof/?token=$token")
  grep -q 'pprof/wall' "$dir/body" && ! grep -q 'pprof/heap' "$dir/body" || fail "index"
  c=$(code "$base/debug/pprof/wall?seconds=0&token=$token")
  [ "$c" = 400 ] || fail "/wall?seconds=0: $c"
  c=$(code "$base/debug/pprof/wall?seconds=30&token=$token" -I --max-time 10)
  [ "$c" = 200 ] || fail "HEAD /wall: $c"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
user_token)
  # --http-token T: requests carry T (parameter or bearer); others 401.
  # Bad tokens stop record before the program runs; none: no token.
  t=snapprof-Test_token.0123~x
  REC_OPTS="--http-token $t" start "$dir/stop"
  [ "$token" = "$t" ] || fail "the URL carries $token, not $t"
  c=$(code "$base/debug/pprof/?token=$t")
  [ "$c" = 200 ] || fail "the user's token: $c"
  c=$(code "$base/debug/pprof/" -H "Authorization: Bearer $t")
  [ "$c" = 200 ] || fail "the user's token as bearer: $c"
  c=$(code "$base/debug/pprof/?token=${t}x")
  [ "$c" = 401 ] || fail "another token: $c"
  c=$(code "$base/debug/pprof/")
  [ "$c" = 401 ] || fail "no token: $c"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  for bad in short0123456789 'has space 0123456789' 'slash/0123456789abc' 'amp&0123456789abcd' \
    "$(printf 'x%.0s' $(seq 129))" ''; do
    "$cli" record -q --http 127.0.0.1:0 --http-token "$bad" -- "$prog" "$dir/never" \
      >"$dir/out2" 2>"$dir/err2"
    s2=$?
    [ "$s2" = 2 ] && grep -q 'bad --http-token' "$dir/err2" && [ "$(wc -l <"$dir/err2")" = 1 ] ||
      fail "token '$bad': exit $s2, $(cat "$dir/err2")"
    [ ! -s "$dir/out2" ] || fail "token '$bad': the program ran"
  done
  REC_OPTS="--http-token none" start "$dir/stop2"
  c=$(code "$base/debug/pprof/")
  [ "$c" = 200 ] || fail "--http-token none: $c"
  touch "$dir/stop2"
  wait "$rec"
  rec=
  ;;
client_gone)
  # Issue 28: a client that goes away while its profile is taken gives
  # its slot back. 8 requests of seconds=60 fill the bound (/heap, which
  # counts against it and answers at once, is then 503); their clients
  # are killed; a request of seconds=1 must then be served (200, a
  # profile) within 30 s, not 503 for the next minute. That also needs
  # the program to have dropped the 8 builders (its own bound is 8).
  # record's fds come back to what they were (the 8 connections are
  # closed), the private directory keeps no file (also when clients give
  # up just as their answers come), and the index counts the cancelled
  # requests. A request line sent half is closed by the idle timeout (10
  # s), not held: its headers never complete, so it never waits.
  REC_OPTS="--heap" TMPDIR=$dir start heap "$dir/stop"
  await_line allocated
  port=${base##*:}
  exec 7<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect"
  printf 'GET /debug/pprof/profile?seco' >&7
  half0=$(date +%s)
  [ "$(readlink "/proc/$rec/exe")" = "$(readlink -f "$cli")" ] || fail "\$rec is not record"
  fd0=$(ls "/proc/$rec/fd" | wc -l)
  # A probe holds a slot for a moment: a request that came then was 503
  # and is sent again; the bound is full when /heap is 503 while the 8
  # still wait.
  declare -A pid
  full=0
  for _ in $(seq 100); do
    for i in 1 2 3 4 5 6 7 8; do
      [ -n "${pid[$i]:-}" ] && kill -0 "${pid[$i]}" 2>/dev/null && continue
      curl -s -o /dev/null "$base/debug/pprof/profile?seconds=60&token=$token" &
      pid[$i]=$!
    done
    sleep 0.5
    c=$(code "$base/debug/pprof/heap?token=$token")
    [ "$c" = 503 ] || continue
    sleep 0.5
    alive=0
    for i in 1 2 3 4 5 6 7 8; do kill -0 "${pid[$i]}" 2>/dev/null && alive=$((alive + 1)); done
    [ "$alive" = 8 ] && { full=1; break; }
  done
  [ "$full" = 1 ] || fail "the 8 requests never filled the bound (/heap: $c)"
  sleep 1
  kill "${pid[@]}"
  wait "${pid[@]}" 2>/dev/null
  t0=$(date +%s)
  for _ in $(seq 60); do
    c=$(code "$base/debug/pprof/profile?seconds=1&token=$token")
    [ "$c" = 503 ] || break
    [ $(($(date +%s) - t0)) -lt 30 ] || break
    sleep 0.5
  done
  took=$(($(date +%s) - t0))
  echo "a request after the 8 clients went: $c after ${took}s"
  [ "$c" = 200 ] || fail "a request after the 8 clients went: $c after ${took}s: $(cat "$dir/body")"
  is_gzip "$dir/body" || fail "a request after the 8 clients went: not a profile"
  # Clients that give up as their answer comes: the answer and the
  # cancel cross (an answer for a request already cancelled, a cancel for
  # one already answered), and no file may be left behind either way.
  late=()
  for t in 0.5 1 1.5 1.8 1.9 2 2.05 2.2; do
    curl -s -o /dev/null --max-time $t "$base/debug/pprof/profile?seconds=2&token=$token" &
    late+=($!)
  done
  wait "${late[@]}"
  sleep 3
  # Slack 1: the last connection, which libmicrohttpd may close a moment
  # after curl has its whole answer. 8 connections held would be 8 more.
  fds=
  for _ in $(seq 100); do
    fds=$(ls "/proc/$rec/fd" | wc -l)
    [ "$fds" -le $((fd0 + 1)) ] && break
    sleep 0.1
  done
  echo "record's fds: $fd0 before, $fds after"
  [ "$fds" -le $((fd0 + 1)) ] || { ls -l "/proc/$rec/fd"; fail "record holds $fds fds, $fd0 before"; }
  left=$(ls "$dir"/snapprof-http.*/ | wc -l)
  [ "$left" = 0 ] || { ls -l "$dir"/snapprof-http.*/; fail "$left files left in the private directory"; }
  c=$(code "$base/debug/pprof/?token=$token")
  n=$(sed -n 's/^\([0-9]*\) requests cancelled: client gone$/\1/p' "$dir/body")
  echo "index: ${n:-0} requests cancelled"
  [ "${n:-0}" -ge 8 ] && [ "$n" -le 16 ] || fail "index: $(cat "$dir/body")"
  timeout 60 cat <&7 >/dev/null
  e=$?
  echo "the half-sent request: closed after $(($(date +%s) - half0)) s"
  [ "$e" = 0 ] || fail "the half-sent request is held: timeout $e"
  exec 7<&-
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
slow_headers)
  # Issue 28: a client that sends its request a byte every 2 s never
  # reaches the 10 s idle timeout, and held its connection (one of 64)
  # for as long as it trickled: a few such clients kept everyone out.
  # Now its headers must be in within 20 s of its connection: it is
  # closed after 20-30 s, not held for the 60 s this case waits; a
  # request sent in three pieces over 4 s is still answered, and so is a
  # 25 s profile (the deadline is the headers', not the answer's); the
  # index counts the closed connection.
  trap '' PIPE # a write to a closed connection fails, not the script
  start "$dir/stop"
  port=${base##*:}
  exec 7<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect"
  slow0=$(date +%s)
  line="GET /debug/pprof/?token=$token HTTP/1.1"
  (for ((i = 0; i < ${#line}; i++)); do
    printf '%s' "${line:i:1}" >&7 2>/dev/null || exit 0
    sleep 2
  done) &
  trickle=$!
  (timeout 60 cat <&7 >/dev/null; echo "$? $(date +%s)" >"$dir/closed") &
  closed=$!
  OUT=$dir/long code "$base/debug/pprof/profile?seconds=25&token=$token" >"$dir/long.code" &
  long=$!
  exec 8<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect"
  printf 'GET /debug/pprof/?tok' >&8
  sleep 2
  printf 'en=%s HTTP/1.1\r\nHost: x\r\n' "$token" >&8
  sleep 2
  printf '\r\n' >&8
  IFS= read -r -t 30 status_line <&8 || fail "no answer to the request sent in pieces"
  case $status_line in "HTTP/1.1 200"*) ;; *) fail "sent in pieces: $status_line" ;; esac
  timeout 2 cat <&8 >/dev/null
  exec 8<&-
  wait "$long"
  c=$(cat "$dir/long.code")
  [ "$c" = 200 ] && is_gzip "$dir/long" || fail "a 25 s profile, longer than the deadline: $c"
  wait "$closed"
  read -r e t1 <"$dir/closed"
  took=$((t1 - slow0))
  kill "$trickle" 2>/dev/null
  wait "$trickle" 2>/dev/null
  exec 7<&-
  echo "a request line sent a byte every 2 s: closed after $took s"
  [ "$e" = 0 ] || fail "a request line sent a byte every 2 s is held: $took s"
  [ "$took" -ge 19 ] && [ "$took" -le 35 ] || fail "closed after $took s, not 20-30"
  c=$(code "$base/debug/pprof/?token=$token")
  grep -q '^1 connection closed: headers not in within 20 s$' "$dir/body" ||
    fail "index: $(cat "$dir/body")"
  finish
  [ "$status" = 0 ] || fail "exit status $status, not 0"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS: $case"
