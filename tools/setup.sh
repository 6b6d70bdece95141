#!/usr/bin/env bash
# Installs the Debian 12 packages snapprof needs to build, test and read its
# profiles, and any packages named as arguments (bench/setup.sh names the
# benchmark's), skipping the ones already there. Runs as root, without a
# prompt.
# libc6-dbg is libc's separate debug file (/usr/lib/debug/.build-id): with it
# thread roots (start_thread, clone3) and libc's internal functions have
# names in profiles instead of [libc.so.6]. The tests pass with or without it.
# libmicrohttpd-dev: `snapprof record --http` (without it --http says so);
# curl: the tests of --http ask the endpoint with it.
set -euo pipefail
pkgs=(cmake make gcc g++ pkg-config git
      libunwind-dev libprotobuf-c-dev protobuf-c-compiler zlib1g-dev
      libdw-dev libelf-dev golang-go python3 binutils libc6-dbg
      python3.11 libpython3.11-dev libpython3.11-testsuite
      libmicrohttpd-dev curl
      "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
