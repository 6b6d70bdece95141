#!/usr/bin/env bash
# bench_callgrind.sh: instruction counts (valgrind --tool=callgrind, Ir) of
# two revisions side by side: issue 26's check that the structure pass left
# the unwinding and the drain as cheap as they were. Each revision is
# exported (git archive) and built in turn at the same path, RelWithDebInfo
# with the same compiler, and runs under callgrind:
#   bench_unwind --quick   every unwinder on the same stack copies (its
#                          timing loops run a fixed number of times);
#   bench_drain            a fixed drain: the same stack copy in 64 capture
#                          slots, drained 100 times through the default
#                          unwinder chain, the module cache and a pprof
#                          builder (bench/bench_drain.c, this tree's copy,
#                          built against each revision's internal headers).
# Only the main thread is counted (callgrind --separate-threads=yes): the
# sampling thread and the targets' spin loops run for as long as the clock
# says, the main thread's work is fixed; of bench_unwind, only what comes
# before its deep-recursion profile (--dump-before=snapprof_profiler_create),
# whose stop drains as many captures as the clock let the threads take. Prints, for each program, the main
# thread's total Ir and the inclusive Ir of the functions of the unwind and
# drain path, before, after and after/before; with --diff N, the N
# functions whose own (exclusive) Ir changed most, by name, so that a file
# split or a rename does not show as a change. Prints figures and judges
# none; bench/README.md says how to read them. Not a ctest test: valgrind
# is not among the packages tools/setup.sh installs.
#
# usage: bench/bench_callgrind.sh [--diff N] [--keep DIR] [BEFORE [AFTER]]
#   BEFORE, AFTER  git revisions (default b588df0, before issue 26's
#                  structure pass, and HEAD)
#   --diff N       also the N largest changes of exclusive Ir per program
#   --keep DIR     keep the callgrind outputs (and the build logs) in DIR
# Environment: CC (default cc), JOBS (make jobs, default 2).
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

usage="usage: $0 [--diff N] [--keep DIR] [BEFORE [AFTER]]"
diff_n=0 keep="" revs=()
while [ $# -gt 0 ]; do
  case $1 in
    --diff) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; diff_n=$2; shift ;;
    --keep) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; keep=$2; shift ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) revs+=("$1") ;;
  esac
  shift
done
[ ${#revs[@]} -le 2 ] || { echo "$usage" >&2; exit 2; }
before=${revs[0]:-b588df0}
after=${revs[1]:-HEAD}
for t in valgrind callgrind_annotate cmake git; do
  command -v "$t" >/dev/null || { echo "bench_callgrind: $t is missing" >&2; exit 1; }
done
cc=${CC:-cc}
jobs=${JOBS:-2}
# The drain run's arguments: rounds, slots, depth (bench_drain.c).
drain_args=(100 64 64)

bench_workdir bench_callgrind
bench_machine_start
declare -A commit_of
for tag in before after; do
  rev=${!tag}
  commit_of[$tag]=$(git -C "$root" rev-parse --short "$rev^{commit}") ||
    { echo "bench_callgrind: no revision $rev" >&2; exit 1; }
done

# build_and_run TAG: exports revision TAG into $work/tree (the same path for
# both, so that no path in the binaries, and no string compared at run
# time, differs by its length), builds the two programs and runs them under
# callgrind; the main thread's outputs go to $work/TAG.
build_and_run() {
  local tag=$1 out=$work/$1 tree=$work/tree
  mkdir -p "$out" "$tree/src"
  git -C "$root" archive "${commit_of[$tag]}" | tar -x -C "$tree/src"
  # This tree's bench_drain.c, the same program at both revisions.
  cp "$here/bench_drain.c" "$tree/src/bench/bench_drain.c"
  if ! grep -q 'add_executable(bench_drain ' "$tree/src/bench/CMakeLists.txt"; then
    cat >>"$tree/src/bench/CMakeLists.txt" <<'EOF'

# bench_drain, added by bench_callgrind.sh.
add_executable(bench_drain bench_drain.c)
target_compile_options(bench_drain PRIVATE ${SNAPPROF_WARNINGS})
target_include_directories(bench_drain PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(bench_drain PRIVATE snapprof_static Threads::Threads)
EOF
  fi
  say "bench_callgrind: building $tag (${commit_of[$tag]})"
  if ! { cmake -S "$tree/src" -B "$tree/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
           -DCMAKE_C_COMPILER="$cc" &&
         cmake --build "$tree/build" -j"$jobs" --target bench_unwind bench_drain; } \
       >"$out/build.log" 2>&1; then
    say "bench_callgrind: the build of ${commit_of[$tag]} failed; the end of its log:"
    tail -n 20 "$out/build.log" >&2
    exit 1
  fi
  say "bench_callgrind: $tag: bench_unwind --quick under callgrind (about a minute)"
  cg_run "$out/unwind" .1-01 --dump-before=snapprof_profiler_create -- \
    "$tree/build/bench/bench_unwind" --quick
  say "bench_callgrind: $tag: bench_drain ${drain_args[*]} under callgrind"
  cg_run "$out/drain" -01 -- "$tree/build/bench/bench_drain" "${drain_args[@]}"
  rm -rf "$tree"
}

# cg_run PREFIX PART [OPTION...] -- PROGRAM ARGS...: PROGRAM under callgrind
# (with the OPTIONs), one output per thread and dump; PREFIX.cg is the one
# whose name ends in PART (-01: the main thread's; .1-01: its first dump),
# PREFIX.out and .err the run's.
cg_run() {
  local prefix=$1 part=$2 opts=()
  shift 2
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  if ! (cd "$work" && valgrind --tool=callgrind --separate-threads=yes "${opts[@]}" \
          --callgrind-out-file="$prefix.cg.%p" "$@" >"$prefix.out" 2>"$prefix.err"); then
    say "bench_callgrind: $* failed under valgrind: $(tail -n 3 "$prefix.err" | tr '\n' ' ')"
    exit 1
  fi
  local pid
  pid=$(sed -n '1s/^==\([0-9]*\)==.*/\1/p' "$prefix.err") # valgrind's first line
  mv "$prefix.cg.$pid$part" "$prefix.cg"
}

build_and_run before
build_and_run after
bench_machine_end

# annotate FILE INCL: "Ir function" for each function of FILE, inclusive
# (INCL=yes) or exclusive; functions are named without their file, object
# or GCC's clone suffixes, and the Ir of homonyms is summed.
annotate() {
  callgrind_annotate --inclusive="$2" --auto=no --threshold=100 "$1" | awk '
    /PROGRAM TOTALS/ { gsub(",", "", $1); print $1, "TOTAL"; next }
    /^ *[0-9][0-9,]* \(/ {
      ir = $1; gsub(",", "", ir)
      name = $0; sub(/^ *[0-9,]+ \([^)]*\) +/, "", name); sub(/ \[[^]]*\]$/, "", name)
      n = split(name, part, ":"); fn = part[n]
      sub(/\.(constprop|isra|part|cold)\.[0-9.]+$/, "", fn)
      sum[fn] += ir
    }
    END { for (f in sum) printf "%.0f %s\n", sum[f], f }'
}

# The rows of each program after its total: functions of the unwind and
# drain path, each NAME or BEFORE_NAME|AFTER_NAME (static functions that the
# split of sampling_thread/profiler.c made external).
rows_unwind="snapprof__unwind_chain snapprof_unwind_push_frame snapprof__module_find_at"
rows_drain="snapprof__profiler_drain drain_some|drain unwind_and_deliver|snapprof__unwind_and_deliver
snapprof__stack_copier_rebase snapprof__unwind_chain snapprof_unwind_push_frame
snapprof__module_find_at deliver|snapprof__deliver snapprof__pprof_on_sample"

table=$work/table
{
  printf 'bench_callgrind: before %s (%s), after %s (%s); %s, RelWithDebInfo; %s\n' \
    "${commit_of[before]}" "$before" "${commit_of[after]}" "$after" \
    "$("$cc" --version | head -n 1)" "$(valgrind --version)"
  printf 'Ir of the main thread; "incl." is a function with all it calls (- : not called, or inlined)\n\n'
  printf '%-50s %15s %15s %8s\n' "" "before" "after" "ratio"
  for prog in unwind drain; do
    for tag in before after; do
      annotate "$work/$tag/$prog.cg" yes >"$work/$tag/$prog.incl"
      annotate "$work/$tag/$prog.cg" no >"$work/$tag/$prog.self"
    done
    if [ "$prog" = unwind ]; then
      title="bench_unwind --quick (to its profile)" rows=$rows_unwind
    else
      title="bench_drain ${drain_args[*]}" rows=$rows_drain
      grep -h '^bench_drain:' "$work/before/drain.out" "$work/after/drain.out" | sed 's/^/  /' >&2
    fi
    awk -v title="$title" -v rows="$rows" '
      FNR == 1 { file++ }
      { v[file, $2] = $1 }
      function row(label, ka, kb,    a, b, r) {
        a = v[1, ka]; b = v[2, kb]
        r = (a > 0 && b != "") ? sprintf("%8.4f", b / a) : sprintf("%8s", "")
        printf "%-50s %15s %15s %s\n", label, a == "" ? "-" : a, b == "" ? "-" : b, r
      }
      END {
        row(title ": total", "TOTAL", "TOTAL")
        n = split(rows, f, /[ \n]+/)
        for (i = 1; i <= n; i++) {
          if (f[i] == "") continue
          if (split(f[i], k, "|") == 1) k[2] = k[1]
          row("  " f[i] " (incl.)", k[1], k[2])
        }
      }' "$work/before/$prog.incl" "$work/after/$prog.incl"
    if [ "$diff_n" -gt 0 ]; then
      printf '  the %d largest changes of exclusive Ir:\n' "$diff_n"
      awk '
        FNR == 1 { file++ }
        $2 != "TOTAL" { v[file, $2] = $1; seen[$2] = 1 }
        END { for (k in seen) { d = v[2, k] - v[1, k]; if (d != 0) printf "%.0f %.0f %.0f %s\n", d < 0 ? -d : d, v[1, k], v[2, k], k } }' \
        "$work/before/$prog.self" "$work/after/$prog.self" |
        sort -k1,1nr |
        awk -v n="$diff_n" 'NR <= n { printf "    %-40s %15.0f %15.0f %+12.0f\n", $4, $2, $3, $3 - $2 }'
    fi
    echo
  done
  printf 'machine during the run: %s; the run took %d s\n' "$machine_line" "$elapsed"
} >"$table"
cat "$table"
if [ -n "$keep" ]; then
  mkdir -p "$keep"
  for tag in before after; do
    mkdir -p "$keep/$tag"
    cp "$work/$tag"/*.cg "$work/$tag"/*.out "$work/$tag"/build.log "$keep/$tag/"
  done
  cp "$table" "$keep/table"
  say "bench_callgrind: callgrind outputs in $keep (callgrind_annotate $keep/after/drain.cg)"
fi
