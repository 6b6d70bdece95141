#!/usr/bin/env bash
# Installs the Debian 12 packages that only the benchmarks need (the peers
# bench_trigger measures snapprof against, and gnuplot for its plot), on top
# of tools/setup.sh, skipping the ones already there. Runs as root, without
# a prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
# linux-perf: perf record -e cpu-clock; libgoogle-perftools-dev: gperftools'
# libprofiler.so (LD_PRELOAD, CPUPROFILE); gnuplot-nox: the plot in
# docs/BENCHMARKS.md.
pkgs=(linux-perf libgoogle-perftools-dev gnuplot-nox)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench/setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
