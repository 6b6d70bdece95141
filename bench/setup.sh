#!/usr/bin/env bash
# Installs the Debian 12 packages that only the benchmarks need (the peers
# bench_trigger measures snapprof against, and gnuplot for its plot), on top
# of tools/setup.sh, skipping the ones already there. Runs as root, without
# a prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
# linux-perf: perf record -e cpu-clock; libgoogle-perftools-dev: gperftools'
# libprofiler.so (LD_PRELOAD, CPUPROFILE); google-perftools: its google-pprof,
# for bench/gperftools_unittest.sh; gnuplot-nox: the plot in
# docs/BENCHMARKS.md.
bash tools/setup.sh linux-perf libgoogle-perftools-dev google-perftools gnuplot-nox
