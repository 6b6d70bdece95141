# Sourced by the --http test scripts (test_http.sh, test_http_ondemand.sh)
# after they set case, cli, prog, sanitized and have_mhd from their
# arguments: skip and fail, the checks every case needs, a private dir
# ($dir, named after $HTTP_DIR_NAME) and its cleanup, which ends record
# ($rec) if a case left it running; await_url and finish, which every
# case's start and end share.
# shellcheck shell=bash
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

dir=$(mktemp -d "${TMPDIR:-/tmp}/$HTTP_DIR_NAME.XXXXXX")
rec=
cleanup() {
  touch "$dir/stop" "$dir/stop.close"
  if [ -n "$rec" ] && kill -0 "$rec" 2>/dev/null; then
    sleep 5; kill "$rec" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

# After a start put record in the background ($rec, its stderr in
# $dir/err): waits up to 60 s for the URL record prints; sets url, base
# (the scheme and host:port) and token.
await_url() {
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
}

# Ends the program (http_prog ends when $dir/stop appears); sets status
# (record's, which is the program's).
finish() {
  touch "$dir/stop"
  wait "$rec"
  status=$?
  rec=
}
