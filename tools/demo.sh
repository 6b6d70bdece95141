#!/usr/bin/env bash
# README command (a): set up, build, profile the bundled demo, print its top
# functions with `go tool pprof -top`. `demo.sh frames` runs the frame loop
# example instead (zones, counters, instants; docs/zones.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
if [ "${1:-}" = "frames" ]; then
  # The frame loop with zones, a counter, instants and hitches
  # (docs/zones.md): its labels, the physics zone's functions, and a check
  # of its trace (open build/frame_loop.trace.json in ui.perfetto.dev).
  ./build/examples/frame_loop build/frame_loop
  go tool pprof -tags -tagshow='zone|hitch|draw_calls' build/frame_loop.pb.gz
  go tool pprof -tagfocus=zone=physics -top -nodecount=8 build/frame_loop.pb.gz
  python3 tests/check_trace.py build/frame_loop.trace.json --zones-in-frames
  exit 0
fi
./build/examples/demo build/demo.pb.gz
go tool pprof -top -nodecount=15 build/demo.pb.gz
