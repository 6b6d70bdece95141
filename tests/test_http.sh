#!/usr/bin/env bash
# `snapprof record --http` (cli/snapprof_http.c, preload/preload_serve.c):
# a real program (http_prog.c) run under record, its endpoint asked with
# the real clients, curl and go tool pprof. One case per ctest test:
#   test_http.sh CASE SNAPPROF_CLI HTTP_PROG SANITIZED HAVE_MHD
# Exit 77: skipped (a sanitizer build, whose preload cannot be preloaded
# into an uninstrumented program; no libmicrohttpd, curl or go).
set -u
case=$1 cli=$2 prog=$3 sanitized=$4 have_mhd=$5
skip() { echo "SKIP: $*"; exit 77; }
fail() {
  echo "FAIL ($case): $*"
  echo "--- record's stderr:"; cat "$dir/err" 2>/dev/null
  echo "--- program's stdout:"; cat "$dir/out" 2>/dev/null
  exit 1
}
[ "$sanitized" = 1 ] && skip "preload tests do not run under sanitizers"
[ "$have_mhd" = 1 ] || skip "snapprof was built without libmicrohttpd (tools/setup.sh installs it)"
command -v curl >/dev/null || skip "no curl (tools/setup.sh installs it)"

dir=$(mktemp -d "${TMPDIR:-/tmp}/snapprof-http-test.XXXXXX")
rec=
cleanup() {
  touch "$dir/stop" "$dir/stop.close"
  if [ -n "$rec" ] && kill -0 "$rec" 2>/dev/null; then
    sleep 5; kill "$rec" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

# Starts record on a free port (127.0.0.1:0; record prints the port),
# with the options in REC_EXTRA too; sets url, base, token.
start() {
  # shellcheck disable=SC2086
  "$cli" record -q -o "$dir/whole.pb.gz" --http 127.0.0.1:0 ${REC_EXTRA:-} -- "$prog" "$@" \
    >"$dir/out" 2>"$dir/err" &
  rec=$!
  url=
  for _ in $(seq 600); do
    url=$(grep -o 'http://[^ ]*' "$dir/err" | head -1)
    [ -n "$url" ] && break
    kill -0 "$rec" 2>/dev/null || fail "record ended without serving"
    sleep 0.1
  done
  [ -n "$url" ] || fail "record printed no URL"
  base=${url%%/debug/*}
  token=${url##*token=}
  [ ${#token} -eq 32 ] || fail "no 32-digit token in $url"
}

# Ends the program; sets status (record's, which is the program's).
finish() {
  touch "$dir/stop"
  wait "$rec"
  status=$?
  rec=
}

# code URL [curl args...]: the HTTP code; the body in $OUT (default
# $dir/body), the headers in $OUT.headers.
code() {
  local u=$1 out=${OUT:-$dir/body}; shift
  curl -s --max-time 120 -o "$out" -D "$out.headers" -w '%{http_code}' "$@" "$u"
}

is_gzip() { [ "$(head -c2 "$1" | od -An -tx1 | tr -d ' ')" = 1f8b ]; }

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
  c=$(code "$base/debug/pprof/heap?token=$token")
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
  for i in 1 2 3 4 5 6 7 8; do
    OUT=$dir/p$i code "$base/debug/pprof/profile?seconds=60&token=$token" >"$dir/c$i" &
  done
  sleep 3
  c=$(code "$base/debug/pprof/profile?seconds=1&token=$token")
  [ "$c" = 503 ] || fail "9th request: $c"
  grep -qi '^retry-after: [0-9]' "$dir/body.headers" || fail "no Retry-After"
  finish
  wait
  for i in 1 2 3 4 5 6 7 8; do
    [ "$(cat "$dir/c$i")" = 200 ] || fail "request $i in flight at exit: $(cat "$dir/c$i")"
    is_gzip "$dir/p$i" || fail "request $i: not a profile"
  done
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
  for i in 1 2 3 4 5 6; do
    OUT=$dir/p$i code "$base/debug/pprof/profile?seconds=1&token=$token" >"$dir/c$i" &
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
    c=$(cat "$dir/c$i")
    case $c in
    200) is_gzip "$dir/p$i" || fail "request $i: 200 without a profile" ;;
    503) grep -q 'ended\|stopped' "$dir/p$i" || fail "request $i: 503 with $(cat "$dir/p$i")" ;;
    *) fail "request $i: code $c" ;;
    esac
  done
  [ "$(cat "$dir/c0")" = 200 ] || fail "the request in flight at exit: $(cat "$dir/c0")"
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
  REC_EXTRA="--flight 5m" start "$dir/stop"
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
  # No --flight: 400 saying what to do.
  start "$dir/stop2"
  c=$(code "$base/debug/pprof/profile?since=60s&token=$token")
  [ "$c" = 400 ] && grep -q -- "--flight" "$dir/body" || fail "since without --flight: $c $(cat "$dir/body")"
  touch "$dir/stop2"
  wait "$rec"
  rec=
  ;;
*) fail "unknown case" ;;
esac
echo "PASS: $case"
