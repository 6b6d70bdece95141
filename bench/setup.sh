#!/usr/bin/env bash
# Installs the Debian 12 packages that only the benchmarks need (the peers
# bench_trigger measures snapprof against, and gnuplot for its plot), on top
# of tools/setup.sh, skipping the ones already there. Runs as root, without
# a prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
# linux-perf: perf record -e cpu-clock; libgoogle-perftools-dev: gperftools'
# libprofiler.so (LD_PRELOAD, CPUPROFILE); google-perftools: its google-pprof,
# for bench/gperftools_unittest.sh and bench_heap.sh's tcmalloc rows
# (libtcmalloc.so.4, HEAPPROFILE); gnuplot-nox: the plots in
# docs/BENCHMARKS.md. bench_heap.sh's peers: libjemalloc2 (jemalloc, built
# with profiling) and libjemalloc-dev (its jeprof), heaptrack (traces every
# allocation; heaptrack_print).
bash tools/setup.sh linux-perf libgoogle-perftools-dev google-perftools gnuplot-nox \
  libjemalloc2 libjemalloc-dev heaptrack
