#!/bin/sh
# Installs the build into a fresh prefix and uses it the ways a user
# would: a program built with pkg-config (snapprof), a gperftools program
# built with pkg-config (snapprof-gperftools), an -finstrument-functions
# program linked with libsnapprof-instrument.a, a CMake project with
# find_package(snapprof); and the installed `snapprof record`, which must
# find the installed preload library by itself. Then the build tree in
# place, through its snapprof-uninstalled.pc, as the README says.
# usage: test_preload_install.sh BUILD_DIR C_COMPILER
set -eu
build=$1
cc=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/snapprof-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
libdir=$(dirname "$(find "$prefix" -name libsnapprof.so -print -quit)")
test -x "$prefix/bin/snapprof"
test -f "$libdir/libsnapprof-preload.so"
test -f "$prefix/include/snapprof/snapprof.h"
test -f "$prefix/include/snapprof/compat/gperftools/profiler.h"
test -f "$libdir/cmake/snapprof/snapprofConfig.cmake"
test -f "$libdir/libsnapprof-instrument.a"
# The file is named after the version, the soname after the ABI (README).
version=$(sed -n 's/^Version: //p' "$libdir/pkgconfig/snapprof.pc")
test -f "$libdir/libsnapprof.so.$version"
test "$(readlink "$libdir/libsnapprof.so.1")" = "libsnapprof.so.$version"
if command -v readelf > /dev/null; then
  readelf -d "$libdir/libsnapprof.so.$version" | grep -q 'SONAME.*\[libsnapprof.so.1\]'
fi
export PKG_CONFIG_PATH="$libdir/pkgconfig"
export LD_LIBRARY_PATH="$libdir"
echo "installed: $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"

cat > "$work/api.c" <<'C'
#include <snapprof/snapprof.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    snapprof_thread_t *me;
    snapprof_params_t params;
    snapprof_profiler_t *prof;
    snapprof_builder_t *pprof;
    snapprof_params_init(&params);
    if (snapprof_thread_register(&me) || snapprof_profiler_create(&params, &me, 1, &prof) ||
        snapprof_pprof_builder_create(argv[1], &pprof) ||
        snapprof_profiler_add_builder(prof, pprof) || snapprof_profiler_start(prof))
        return 1;
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 100000000ul; i++)
        x += i;
    int rc = snapprof_profiler_stop(prof);
    printf("stop: %s\n", snapprof_strerror(rc));
    snapprof_profiler_destroy(prof);
    snapprof_thread_release(me);
    return rc != 0 || argc < 2;
}
C
# shellcheck disable=SC2046
"$cc" -o "$work/api" "$work/api.c" $(pkg-config --cflags --libs snapprof)
"$work/api" "$work/api.pb.gz"
test -s "$work/api.pb.gz"

cat > "$work/gperf.c" <<'C'
#include <gperftools/profiler.h>
int main(int argc, char **argv)
{
    if (!ProfilerStart(argv[1]))
        return 1;
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 100000000ul; i++)
        x += i;
    ProfilerStop();
    return argc < 2;
}
C
# shellcheck disable=SC2046
"$cc" -o "$work/gperf" "$work/gperf.c" $(pkg-config --cflags --libs snapprof-gperftools)
"$work/gperf" "$work/gperf.prof"
test -s "$work/gperf.prof"

cat > "$work/instr.c" <<'C'
#include <snapprof/snapprof.h>
#include <stdio.h>
static int leaf(int i)
{
    return i * 3;
}
int main(int argc, char **argv)
{
    snapprof_thread_t *me;
    snapprof_params_t params;
    snapprof_profiler_t *prof;
    snapprof_builder_t *calls;
    snapprof_params_init(&params);
    if (snapprof_thread_register(&me) || snapprof_profiler_create(&params, &me, 1, &prof) ||
        snapprof_calls_builder_create(argv[1], &calls) ||
        snapprof_profiler_add_builder(prof, calls) || snapprof_profiler_start(prof))
        return 1;
    volatile int x = 0;
    for (int i = 0; i < 1000; i++)
        x += leaf(i);
    int rc = snapprof_profiler_stop(prof);
    printf("instrumented stop: %s\n", snapprof_strerror(rc));
    snapprof_profiler_destroy(prof);
    snapprof_thread_release(me);
    return rc != 0 || argc < 2;
}
C
# The README's line for -finstrument-functions programs, on the installed
# library; the calls profile is written only when the hooks called in.
# shellcheck disable=SC2046
"$cc" -O0 -finstrument-functions -o "$work/instr" "$work/instr.c" -lsnapprof-instrument \
  $(pkg-config --cflags --libs snapprof)
"$work/instr" "$work/instr.pb.gz"
test -s "$work/instr.pb.gz"
test "$(gzip -dc "$work/instr.pb.gz" | grep -c leaf)" -ge 1

mkdir "$work/proj"
cat > "$work/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(uses_snapprof C)
find_package(snapprof 0.7 REQUIRED)
add_executable(api ../api.c)
target_link_libraries(api PRIVATE snapprof::snapprof)
add_executable(gperf ../gperf.c)
target_link_libraries(gperf PRIVATE snapprof::preload)
CM
cmake -S "$work/proj" -B "$work/proj/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" > "$work/proj.log"
cmake --build "$work/proj/build" > "$work/proj-build.log"
"$work/proj/build/api" "$work/cmake-api.pb.gz"
"$work/proj/build/gperf" "$work/cmake-gperf.prof"
test -s "$work/cmake-api.pb.gz" && test -s "$work/cmake-gperf.prof"

unset LD_LIBRARY_PATH
"$prefix/bin/snapprof" record -o "$work/rec.pb.gz" -- /bin/sh -c 'exit 3' 2> "$work/rec.log" || st=$?
cat "$work/rec.log"
test "${st:-0}" = 3
grep -q "profile written to $work/rec.pb.gz" "$work/rec.log"
test -s "$work/rec.pb.gz"

# The build tree in place: PKG_CONFIG_PATH at the build directory finds
# snapprof-uninstalled.pc (pkg-config prefers it to snapprof.pc), whose
# paths are this build's libraries and the source tree's headers, and whose
# rpath lets the program run without LD_LIBRARY_PATH.
export PKG_CONFIG_PATH="$build"
unset PKG_CONFIG_DISABLE_UNINSTALLED || true
for pc in snapprof snapprof-gperftools; do
  echo "uninstalled $pc: $(pkg-config --cflags --libs "$pc")"
  for dir in $(pkg-config --cflags-only-I --libs-only-L "$pc" | sed 's/-[IL]//g'); do
    test -d "$dir"
    case "$dir" in "$prefix"*) echo "$pc points into the install prefix: $dir"; exit 1 ;; esac
  done
done
found=
for dir in $(pkg-config --cflags-only-I snapprof | sed 's/-I//g'); do
  test -f "$dir/snapprof/snapprof.h" && found=$dir
done
test "$(readlink -f "$found")" = "$(readlink -f "$(dirname "$0")/../include")"
# shellcheck disable=SC2046
"$cc" -o "$work/api-uninst" "$work/api.c" $(pkg-config --cflags --libs snapprof)
"$work/api-uninst" "$work/api-uninst.pb.gz"
test -s "$work/api-uninst.pb.gz"
used=$(ldd "$work/api-uninst" | sed -n 's/.*libsnapprof.so.1 => \([^ ]*\) .*/\1/p')
test "$(readlink -f "$used")" = "$(readlink -f "$build/libsnapprof.so.1")" ||
  { ldd "$work/api-uninst"; echo "api-uninst does not run on the build tree's library"; exit 1; }
# shellcheck disable=SC2046
"$cc" -o "$work/gperf-uninst" "$work/gperf.c" $(pkg-config --cflags --libs snapprof-gperftools)
"$work/gperf-uninst" "$work/gperf-uninst.prof"
test -s "$work/gperf-uninst.prof"
echo "install: pkg-config (installed and uninstalled), instrument, CMake package and the installed command all work"
