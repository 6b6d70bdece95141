# Sourced by the --http test scripts (test_http.sh, test_http_ondemand.sh)
# after they set case, cli, prog, sanitized and have_mhd from their
# arguments: skip and fail, the checks every case needs, a private dir
# ($dir, named after $HTTP_DIR_NAME) and its cleanup, which ends record
# ($rec) if a case left it running.
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
