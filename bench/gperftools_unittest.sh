#!/usr/bin/env bash
# gperftools' own CPU profiler test (bench/third_party/gperftools/:
# profiler_unittest.cc and profiler_unittest.sh, unchanged) built against
# snapprof's gperftools-compatible library and, for comparison, against
# Debian's libprofiler; the test's script run with Debian's google-pprof and with
# `go tool pprof`. Prints, per library and reader, the script's verdict
# ("Tests finished with N failures") and what google-pprof says of one of
# the files. Not a ctest test: it needs google-perftools and
# libgoogle-perftools-dev (bench/setup.sh) and takes a minute or two.
#
#   bench/gperftools_unittest.sh [BUILD_DIR]     default: build
#
# BUILD_DIR holds libsnapprof-preload.so (preload/) as cmake builds it.
# SNAPPROF_FORMAT and the other settings pass through to the runs.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$(cd "${1:-build}" && pwd)
PRELOAD_DIR=$BUILD/preload
[ -e "$PRELOAD_DIR/libsnapprof-preload.so" ] || {
    echo "no $PRELOAD_DIR/libsnapprof-preload.so: build first" >&2
    exit 2
}
command -v google-pprof >/dev/null || {
    echo "google-pprof missing: bench/setup.sh installs google-perftools" >&2
    exit 2
}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gperftools-unittest.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The sources, and a variant whose loops count ticks with
# ProfilerGetCurrentState() instead of gperftools' private pointer
# (Debian's 2.10 has none).
mkdir -p "$WORK/src/tests"
cp bench/third_party/gperftools/tests/* "$WORK/src/tests/"
cp bench/third_party/gperftools/config_for_unittests.h "$WORK/src/"
printf '#define HAVE_UNISTD_H 1\n' >"$WORK/src/config.h"
sed -e 's|^static int volatile\* g_ticks_count = (\[\]() {|static int ticks_now() {|' \
    -e 's|sizeof(g_ticks_count)|sizeof(void*)|' \
    -e 's|^  int volatile\* ptr;|  return state.samples_gathered;|' \
    -e '/^  memcpy(&ptr, state.profile_name + sz + 1, sizeof(ptr));/d' \
    -e '/^  return ptr;/d' \
    -e 's|^})();|}|' \
    -e 's|\*g_ticks_count|ticks_now()|g' \
    "$WORK/src/tests/profiler_unittest.cc" >"$WORK/src/tests/profiler_unittest_state.cc"
grep -q 'ticks_now()' "$WORK/src/tests/profiler_unittest_state.cc" || {
    echo "could not make the ProfilerGetCurrentState variant" >&2
    exit 2
}

CXX=${CXX:-g++}
build() { # build DIR SOURCE INCLUDE LIBS...
    local dir=$1 src=$2 inc=$3
    shift 3
    mkdir -p "$dir"
    "$CXX" -std=c++17 -O2 -g -pthread -I"$inc" -I"$WORK/src" \
        "$WORK/src/tests/$src" "$WORK/src/tests/testutil.cc" -o "$dir/profiler_unittest" "$@"
}
ours=(-L"$PRELOAD_DIR" -lsnapprof-preload -Wl,-rpath,"$PRELOAD_DIR" -Wl,-rpath,"$BUILD")
build "$WORK/ours" profiler_unittest.cc "$ROOT/preload" "${ours[@]}" || exit 2
build "$WORK/ours_state" profiler_unittest_state.cc "$ROOT/preload" "${ours[@]}" || exit 2
build "$WORK/debian_state" profiler_unittest_state.cc /usr/include -lprofiler || exit 2

# The readers as the script calls them: `$PPROF --unit=ms --text FILE`.
# google-pprof (gperftools 2.10's Perl pprof) wants the program before the
# file and knows no --unit: its first column is then whole samples.
cat >"$WORK/google-pprof" <<EOF
#!/bin/sh
for a; do f=\$a; done
exec google-pprof --text "\$PROGRAM" "\$f" 2>&1
EOF
cat >"$WORK/go-pprof" <<'EOF'
#!/bin/sh
exec go tool pprof "$@" 2>/dev/null
EOF
chmod +x "$WORK/google-pprof" "$WORK/go-pprof"

printf 'machine: %s, load %s\n' "$(nproc) cores" "$(cut -d' ' -f1-3 /proc/loadavg)"
for variant in ours ours_state debian_state; do
    dir=$WORK/$variant
    for reader in google-pprof go-pprof; do
        log=$WORK/$variant-$reader.log
        t0=$(date +%s.%N)
        PROGRAM=$dir/profiler_unittest timeout 600 \
            sh "$WORK/src/tests/profiler_unittest.sh" "$dir" "$WORK/$reader" >"$log" 2>&1
        rc=$?
        t1=$(date +%s.%N)
        printf '%-13s %-13s exit %-3s %6.1f s  %s\n' "$variant" "$reader" "$rc" \
            "$(echo "$t1 - $t0" | bc)" "$(grep -a 'Tests finished' "$log" || echo '(no verdict)')"
        grep -a '>>>\|Actual times\|FAILED' "$log" | head -6 | sed 's/^/    /'
    done
    # One file of each kind as the readers see it.
    f=$WORK/one-$variant
    CPUPROFILE=$f "$dir/profiler_unittest" 20 2 >/dev/null 2>&1
    [ -e "$f" ] || f=$(ls "$f"* 2>/dev/null | head -1)
    printf '    file %s: %s bytes, head %s\n' "${f##*/}" "$(stat -c %s "$f" 2>/dev/null)" \
        "$(od -An -tx8 -N40 "$f" 2>/dev/null | tr -s ' ' | head -2 | tr '\n' ' ')"
    printf '    google-pprof: %s\n' \
        "$(google-pprof --text "$dir/profiler_unittest" "$f" 2>&1 | grep -a -m3 -i 'not a profile\|Total\|test_main_thread' | tr '\n' '|')"
    printf '    go tool pprof: %s\n' \
        "$(go tool pprof --unit=ms --text "$f" 2>&1 | grep -a -m2 'Total\|test_main_thread' | tr '\n' '|')"
    ls "$WORK"/one-"$variant"* >/dev/null 2>&1 && rm -f "$WORK"/one-"$variant"*
done
