#!/bin/sh
# Installs the build into a fresh prefix and uses it the three ways a user
# would: a program built with pkg-config (snapprof), a gperftools program
# built with pkg-config (snapprof-gperftools), a CMake project with
# find_package(snapprof); and the installed `snapprof record`, which must
# find the installed preload library by itself.
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

mkdir "$work/proj"
cat > "$work/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(uses_snapprof C)
find_package(snapprof 0.6 REQUIRED)
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
echo "install: pkg-config, CMake package and the installed command all work"
