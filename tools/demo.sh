#!/usr/bin/env bash
# README command (a): set up, build, profile the bundled demo, print its top
# functions with `go tool pprof -top`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
./build/examples/demo build/demo.pb.gz
go tool pprof -top -nodecount=15 build/demo.pb.gz
