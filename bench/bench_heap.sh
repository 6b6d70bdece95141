#!/usr/bin/env bash
# bench_heap.sh: issue 27's benchmark. Runs the heap workloads (heap_truth:
# known shares of bytes on three call paths; heap_cost: two threads of small
# mallocs, most freed at once) with no profiler (glibc malloc), under
# `snapprof record --heap`, snapprof's GOT hooks (heap_cost_got: heap_cost
# linked against libsnapprof, calling snapprof_heap_hooks_install(); alone,
# and sampled by the CPU preload's profiler with SNAPPROF_HEAP=1), jemalloc's
# profiler (and jemalloc alone),
# tcmalloc sampling (and tcmalloc alone), tcmalloc's HEAPPROFILE and
# heaptrack, side by side in one run; prints the tables and writes them, with
# the machine and the command, as a section of docs/BENCHMARKS.md and a plot
# (docs/bench_heap.png). It prints figures and never judges them;
# bench/README.md says how to read them.
#
# usage: bench/bench_heap.sh [--quick] [--build DIR] [--no-docs] [--note TEXT]
#   --quick    a few minutes less; figures not meaningful
#   --build    the CMake build tree (default: build)
#   --no-docs  print the tables only
#   --note     a line for the section of docs/BENCHMARKS.md (how busy, why)
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
note=""
pending_note=0
# Quoted, so that the line in docs/BENCHMARKS.md runs as shown (--note TEXT).
command_line="bash bench/bench_heap.sh$([ $# -eq 0 ] || printf ' %q' "$@")"
bench_option() {
  case $1 in
    --note) pending_note=1 ;;
    *) if [ "$pending_note" = 1 ]; then note=$1 pending_note=0; else return 1; fi ;;
  esac
}
bench_parse_args "[--quick] [--build DIR] [--no-docs] [--note TEXT]" "$@"

T=$build/bench/heap_truth
C=$build/bench/heap_cost
CG=$build/bench/heap_cost_got
SNAP=$build/cli/snapprof
PRELOAD=$build/preload/libsnapprof-preload.so
bench_require bench_heap "$T" "$C" "$SNAP"

interval=524288 # 512 KiB: snapprof's default, jemalloc's lg_prof_sample:19, Go's
if [ "$quick" = 1 ]; then
  truth_args=(--mib 256) rounds=2 cost_iters=2000000 iters_heaptrack=200000 iters_heapprof=50000
else
  truth_args=() rounds=5 cost_iters=40000000 iters_heaptrack=1000000 iters_heapprof=200000
fi
paths=(path_malloc path_calloc_realloc path_memalign)

work=$(mktemp -d "${TMPDIR:-/tmp}/bench_heap.XXXXXX")
trap 'rm -rf "$work"' EXIT
results=$work/results
: >"$results"

# ---------------------------------------------------------------------------
# The profilers
# ---------------------------------------------------------------------------

# none: glibc malloc. snap-cpu: `snapprof record` without --heap, the
# baseline of snap-heap and snap-got. snap-got-hooks: heap_cost_got, the GOT
# hooks installed and no profiler (they count down and forward: the hooks'
# own cost, against glibc). snap-got: heap_cost_got under the CPU preload
# with SNAPPROF_HEAP=1 (no libsnapprof-heap.so): the GOT way in, sampled at
# the default interval, against the same CPU profiler without the heap
# (snap-cpu; the program differs only by its link and the install).
# snap-got-cpu: heap_cost_got under the CPU preload without SNAPPROF_HEAP:
# the hooks with the CPU profiler and no heap sampling, which splits
# snap-got's cost into the hooks' and the sampling's. Only on heap_cost (2.).
# je: jemalloc alone, the baseline of je-prof. tc:
# tcmalloc alone (sampling off), the baseline of tc-sample and tc-heapprof.
# tc-heapprof and heaptrack record every call: they run the cost workload
# with fewer iterations (iters_heapprof, iters_heaptrack; 1 to 20 us a
# pair here against about 15 ns), compared per malloc+free pair.
profilers=(none snap-cpu snap-heap snap-got-hooks snap-got-cpu snap-got je je-prof tc tc-sample tc-heapprof heaptrack)
declare -A why_na=() label=() base=()
label[none]="glibc (none)"
label[snap-cpu]="snapprof record"
label[snap-heap]="snapprof --heap"
label[snap-got-hooks]="snapprof GOT"
label[snap-got-cpu]="snapprof GOT cpu"
label[snap-got]="snapprof GOT heap"
label[je]="jemalloc"
label[je-prof]="jemalloc prof"
label[tc]="tcmalloc"
label[tc-sample]="tcmalloc sample"
label[tc-heapprof]="tcmalloc HEAPPROF"
label[heaptrack]="heaptrack"
base=([none]=none [snap-cpu]=none [snap-heap]=snap-cpu [snap-got-hooks]=none [snap-got-cpu]=snap-cpu [snap-got]=snap-cpu
      [je]=none [je-prof]=je [tc]=none
      [tc-sample]=tc [tc-heapprof]=tc [heaptrack]=none)
# The profilers whose profile is read against the truth.
accuracy_profs=(snap-heap je-prof tc-heapprof heaptrack)

libdir_of() { ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n && !found { print $NF; found = 1 }'; }
libje=$(libdir_of libjemalloc.so.2)
libtc=$(libdir_of libtcmalloc.so.4)
je_conf_prof="prof:true,lg_prof_sample:19,prof_accum:true,prof_final:true"

bench_machine_start
say "bench_heap: $(nproc) CPUs, $cpu_model, kernel $kernel, load $load"

# snapprof: --heap is issue 27's; a record that lacks it refuses the
# option (usage error), and the row says so.
if ! "$SNAP" record -q -o "$work/probe.pb.gz" -- "$T" --mib 1 >/dev/null 2>"$work/probe.err"; then
  why_na[snap-cpu]="record: $(head -n 1 "$work/probe.err")"
fi
if ! "$SNAP" record -q --heap -o "$work/probe.pb.gz" -- "$T" --mib 1 >/dev/null 2>"$work/probe.err"; then
  why_na[snap-heap]="not built: record --heap: $(head -n 1 "$work/probe.err")"
fi
# The GOT rows: heap_cost_got must patch its own malloc and free.
if [ ! -x "$CG" ]; then
  why_na[snap-got-hooks]="not built: $CG"
elif ! "$CG" --iters 1000 >"$work/probe.out" 2>"$work/probe.err" ||
  ! grep -q ' got_entries=[1-9]' "$work/probe.out"; then
  why_na[snap-got-hooks]="snapprof_heap_hooks_install(): $(grep -o 'got_entries=[-0-9]*' "$work/probe.out" || head -n 1 "$work/probe.err")"
fi
why_na[snap-got]=${why_na[snap-got-hooks]:-}
if [ -z "${why_na[snap-got]}" ] && [ ! -f "$PRELOAD" ]; then
  why_na[snap-got]="not built: $PRELOAD"
fi
why_na[snap-got-cpu]=${why_na[snap-got]}
if [ -z "$libje" ]; then
  why_na[je]="libjemalloc.so.2 not found (bash bench/setup.sh)"
  why_na[je-prof]=${why_na[je]}
else
  # A jemalloc built without profiling says "Invalid conf pair: prof:true".
  env LD_PRELOAD="$libje" MALLOC_CONF="prof:true,lg_prof_sample:19" "$T" --mib 1 \
    >/dev/null 2>"$work/probe.err" || true
  if grep -qi 'invalid conf' "$work/probe.err"; then
    why_na[je-prof]="libjemalloc2 is built without profiling: prof:true rejected ($(head -n 1 "$work/probe.err"))"
  elif ! command -v jeprof >/dev/null; then
    why_na[je-prof]="jeprof not found (libjemalloc-dev; bash bench/setup.sh)"
  fi
fi
if [ -z "$libtc" ]; then
  why_na[tc]="libtcmalloc.so.4 not found (bash bench/setup.sh)"
  why_na[tc-sample]=${why_na[tc]} why_na[tc-heapprof]=${why_na[tc]}
elif ! command -v google-pprof >/dev/null; then
  why_na[tc-heapprof]="google-pprof not found (google-perftools; bash bench/setup.sh)"
fi
command -v heaptrack >/dev/null && command -v heaptrack_print >/dev/null ||
  why_na[heaptrack]="heaptrack not found (bash bench/setup.sh)"
mapfile -t available < <(bench_available "${profilers[@]}")
say "bench_heap: profilers: ${available[*]}"

# run_one PROFILER TAG PROGRAM ARGS...: runs PROGRAM under PROFILER; leaves
# TAG.out (its lines), TAG.err, TAG.time (user and system CPU seconds and
# the largest RSS in KiB of every process of the run, from /usr/bin/time or
# bash) and the profile under TAG.* in $work. Returns nonzero when the
# program failed or printed nothing.
run_one() {
  local prof=$1 tag=$work/$2
  shift 2
  local rc=0 cmd=()
  case $prof in
    none) cmd=("$@") ;;
    snap-cpu) cmd=("$SNAP" record -o "$tag.pb.gz" -- "$@") ;;
    snap-heap) cmd=("$SNAP" record --heap -o "$tag.pb.gz" -- "$@") ;;
    # heap_cost_got in place of heap_cost (the only program they run).
    snap-got-hooks) cmd=("$CG" "${@:2}") ;;
    snap-got-cpu) cmd=(env LD_PRELOAD="$PRELOAD" SNAPPROF_OUTPUT="$tag.pb.gz" "$CG" "${@:2}") ;;
    snap-got) cmd=(env LD_PRELOAD="$PRELOAD" SNAPPROF_HEAP=1 SNAPPROF_OUTPUT="$tag.pb.gz" "$CG" "${@:2}") ;;
    je) cmd=(env LD_PRELOAD="$libje" "$@") ;;
    je-prof) cmd=(env LD_PRELOAD="$libje" MALLOC_CONF="$je_conf_prof,prof_prefix:$tag.je" "$@") ;;
    tc) cmd=(env LD_PRELOAD="$libtc" TCMALLOC_SAMPLE_PARAMETER=0 "$@") ;;
    tc-sample) cmd=(env LD_PRELOAD="$libtc" TCMALLOC_SAMPLE_PARAMETER="$interval" "$@") ;;
    tc-heapprof) cmd=(env LD_PRELOAD="$libtc" TCMALLOC_SAMPLE_PARAMETER=0 HEAPPROFILE="$tag.tc" "$@") ;;
    heaptrack) cmd=(heaptrack -o "$tag.ht" "$@") ;;
  esac
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f '%U %S %M' -o "$tag.time" "${cmd[@]}" >"$tag.out" 2>"$tag.err" || rc=$?
  else
    local TIMEFORMAT='%U %S 0'
    { time "${cmd[@]}" >"$tag.out" 2>"$tag.err" || rc=$?; } 2>"$tag.time"
  fi
  if [ "$rc" != 0 ] || ! grep -Eq '^(truth run|heap_cost) ' "$tag.out"; then
    say "bench_heap: ${label[$prof]} $*: exit $rc; stderr: $(tail -n 3 "$tag.err" | tr '\n' ' ')"
    return 1
  fi
  case $prof in
    snap-got*)
      if ! grep -q ' got_entries=[1-9]' "$tag.out"; then
        say "bench_heap: ${label[$prof]}: install patched nothing ($(grep -o 'got_entries=[-0-9]*' "$tag.out"))"
        return 1
      fi ;;
  esac
}

# run_kv TAG: the run's own figures and its /usr/bin/time figures as
# key=value words: cpu_s maxrss_kib (the workload process) all_cpu_s
# all_maxrss_kib (every process of the run).
run_kv() {
  local tag=$work/$1
  sed -n 's/^truth run //p; s/^heap_cost //p' "$tag.out" | tr '\n' ' '
  awk 'NF >= 3 && $1 ~ /^[0-9.]+$/ { printf "all_cpu_s=%.3f all_maxrss_kib=%d", $1 + $2, $3 }' "$tag.time"
}

# ---------------------------------------------------------------------------
# Reading each profile: "acc prof=P idx=I total=T path_...=V ..." lines
# ---------------------------------------------------------------------------

indices=(alloc_space alloc_objects inuse_space inuse_objects)

# pptext TOOL ARGS...: the perl pprof's --text --cum output (jeprof,
# google-pprof) as "total=T path=V..." for the sample index in ARGS.
pptext() {
  "$@" 2>/dev/null | awk -v paths="${paths[*]}" '
    BEGIN { n = split(paths, P, " "); for (i = 1; i <= n; i++) v[P[i]] = 0 }
    /^Total: / { total = $2 }
    NF >= 6 && ($6 in v) { v[$6] += $4 }
    END { printf "total=%s", total + 0; for (i = 1; i <= n; i++) printf " %s=%s", P[i], v[P[i]]; print "" }'
}

# gopprof FILE INDEX: go tool pprof -top -cum of FILE at INDEX, the same way.
gopprof() {
  go tool pprof -top -cum -nodecount=100000 -unit=B -sample_index="$2" -show='^path_' "$1" 2>/dev/null |
    awk -v paths="${paths[*]}" '
      BEGIN { n = split(paths, P, " "); for (i = 1; i <= n; i++) v[P[i]] = 0 }
      /^Showing nodes/ { match($0, /of [0-9.]+B total/); total = substr($0, RSTART + 3, RLENGTH - 10) }
      NF >= 6 && ($6 in v) { x = $4; sub(/B$/, "", x); v[$6] += x }
      END { printf "total=%s", total + 0; for (i = 1; i <= n; i++) printf " %s=%s", P[i], v[P[i]]; print "" }'
}

# heaptrack_cost FILE TYPE: heaptrack_print's flame-graph stacks of cost TYPE
# (allocations, leaked), summed per path and over all stacks.
heaptrack_cost() {
  heaptrack_print -f "$1" -a 0 -p 0 -T 0 --flamegraph-cost-type "$2" -F "$work/ht.stacks" >/dev/null 2>&1 || true
  awk -v paths="${paths[*]}" '
    BEGIN { n = split(paths, P, " "); for (i = 1; i <= n; i++) v[P[i]] = 0 }
    { c = $NF; total += c
      for (i = 1; i <= n; i++) if (index($0, ";" P[i] " (") || index($0, ";" P[i] ";")) { v[P[i]] += c; break } }
    END { printf "total=%s", total + 0; for (i = 1; i <= n; i++) printf " %s=%s", P[i], v[P[i]]; print "" }' "$work/ht.stacks"
  rm -f "$work/ht.stacks"
}

# files_of GLOB...: the files the globs matched, sorted, a line each.
files_of() {
  local f
  for f in "$@"; do [ -e "$f" ] && printf '%s\n' "$f"; done
  return 0
}

# read_profile PROFILER TAG: the acc lines of the run TAG, and a samples line.
read_profile() {
  local prof=$1 tag=$work/$2 f i line
  case $prof in
    snap-heap)
      f=$tag.heap.pb.gz
      [ -f "$f" ] || f=$(files_of "$tag".*heap*.pb.gz | head -n 1)
      [ -f "$f" ] || { say "bench_heap: no heap profile next to $tag.pb.gz"; return 1; }
      for i in "${indices[@]}"; do record acc prof="$prof" idx="$i" "$(gopprof "$f" "$i")"; done
      # The samples the profile holds, when its stats say (heap_samples).
      line=$("$SNAP" stats --raw "$f" 2>/dev/null | awk '$1 ~ /^heap[._]?samples$/ || $1 == "samples_heap" { print $2; exit }')
      record samples prof="$prof" n="${line:-?}" ;;
    je-prof)
      f=$(files_of "$tag".je.*.f.heap | head -n 1)
      [ -n "$f" ] || f=$(files_of "$tag".je.*.heap | tail -n 1)
      [ -n "$f" ] || { say "bench_heap: jemalloc wrote no final dump ($tag.je.*.heap)"; return 1; }
      for i in "${indices[@]}"; do
        record acc prof="$prof" idx="$i" "$(pptext jeprof --text --cum --show_bytes --"$i" "$T" "$f")"
      done
      # Samples: the accumulated object counts of the dump's stacks, before
      # jeprof scales them.
      record samples prof="$prof" n="$(awk '/^@/ { s = 1; next } s && /^ *t\*:/ { x = $4; sub(/\[/, "", x); sub(/:/, "", x); n += x; s = 0 } END { print n + 0 }' "$f")" ;;
    tc-heapprof)
      # The last dump is the one written at exit.
      f=$(files_of "$tag".tc.*.heap | tail -n 1)
      [ -n "$f" ] || { say "bench_heap: tcmalloc wrote no HEAPPROFILE dump"; return 1; }
      for i in "${indices[@]}"; do
        record acc prof="$prof" idx="$i" "$(pptext google-pprof --text --cum --show_bytes --"$i" "$T" "$f")"
      done
      record samples prof="$prof" n=all ;;
    heaptrack)
      f=""
      for i in "$tag".ht.zst "$tag".ht.gz "$tag".ht; do [ -f "$i" ] && { f=$i; break; }; done
      [ -n "$f" ] || { say "bench_heap: heaptrack wrote no data file"; return 1; }
      # heaptrack_print 1.4 has no allocated-bytes cost: alloc_space and
      # inuse_objects are not there; leaked bytes are in use at exit.
      record acc prof="$prof" idx=alloc_objects "$(heaptrack_cost "$f" allocations)"
      record acc prof="$prof" idx=inuse_space "$(heaptrack_cost "$f" leaked)"
      record samples prof="$prof" n=all ;;
  esac
}

# ---------------------------------------------------------------------------
# 1. Accuracy and memory on heap_truth: one run each
# ---------------------------------------------------------------------------

for p in "${available[@]}"; do
  case $p in snap-cpu | snap-got*) continue ;; esac
  say "1. heap_truth ${truth_args[*]}: ${label[$p]}"
  tag=truth-$p
  if run_one "$p" "$tag" "$T" "${truth_args[@]}"; then
    record truthrun prof="$p" "$(run_kv "$tag")"
    if [ "$p" = none ]; then
      sed -n 's/^truth \(path_[a-z_]*\|total\) /truth path=\1 /p' "$work/$tag.out" >>"$results"
    fi
    case " ${accuracy_profs[*]} " in *" $p "*) read_profile "$p" "$tag" || true ;; esac
  fi
  rm -rf "$work/$tag".*
done

# ---------------------------------------------------------------------------
# 2. Cost on heap_cost: rounds, each running every profiler once, in an
#    order that turns by one each round
# ---------------------------------------------------------------------------

n=${#available[@]}
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < n; k++)); do
    p=${available[$(((k + r) % n))]}
    iters=$cost_iters
    case $p in tc-heapprof) iters=$iters_heapprof ;; heaptrack) iters=$iters_heaptrack ;; esac
    say "2. heap_cost round $((r + 1)) of $rounds: ${label[$p]} ($iters per thread)"
    tag=cost-$p-$r
    if run_one "$p" "$tag" "$C" --iters "$iters"; then
      record cost prof="$p" round="$r" "$(run_kv "$tag")"
    fi
    rm -rf "$work/$tag".*
  done
done

# ---------------------------------------------------------------------------
# 4. What the hooks add to an unsampled pair, in instructions (callgrind; not
#    timed work: the load around it does not matter)
# ---------------------------------------------------------------------------

hookcost=$work/hookcost.txt
if command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null; then
  say "4. heap_hook_cost.sh: instructions per malloc+free pair (callgrind)"
  ROUNDS=0 sh "$here/heap_hook_cost.sh" "$build" >"$hookcost" 2>"$work/hookcost.err" ||
    { say "bench_heap: heap_hook_cost.sh failed: $(tail -n 2 "$work/hookcost.err" | tr '\n' ' ')"; rm -f "$hookcost"; }
else
  say "bench_heap: no valgrind (bash bench/setup.sh): no instruction counts"
fi

# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------

bench_machine_end
cp "$results" "${TMPDIR:-/tmp}/bench_heap.results.$$" 2>/dev/null && say "bench_heap: raw results in ${TMPDIR:-/tmp}/bench_heap.results.$$"
labels=$(bench_labels "${profilers[@]}")
bases=""
for p in "${profilers[@]}"; do bases="$bases$p=${base[$p]};"; done

table=$work/table.txt
{
  bench_table_head bench_heap "$(nproc)"
  printf 'peers: jemalloc %s (MALLOC_CONF=%s,prof_prefix:...; jeprof),\n' \
    "$(dpkg-query -W -f='${Version}' libjemalloc2 2>/dev/null || echo '?')" "$je_conf_prof"
  printf '  tcmalloc %s (TCMALLOC_SAMPLE_PARAMETER=%s; HEAPPROFILE records every call; google-pprof),\n' \
    "$(dpkg-query -W -f='${Version}' libgoogle-perftools4 2>/dev/null || echo '?')" "$interval"
  printf '  heaptrack %s (heaptrack_print), snapprof record --heap (go tool pprof)\n' \
    "$(dpkg-query -W -f='${Version}' heaptrack 2>/dev/null || echo '?')"

  awk -v labels="$labels" -v prof_list="${accuracy_profs[*]}" -v path_list="${paths[*]}" \
      -v interval="$interval" "$bench_awk_lib"'
    BEGIN { labels_init(); np = split(path_list, P, " "); nprof = split(prof_list, A, " ") }
    $1 == "truth" { parse(); tr[f["path"]] = 1
      ta[f["path"], "alloc_space"] = f["alloc_bytes"]; ta[f["path"], "alloc_objects"] = f["alloc_objects"]
      ta[f["path"], "inuse_space"] = f["inuse_bytes"]; ta[f["path"], "inuse_objects"] = f["inuse_objects"] }
    $1 == "acc" { parse(); have[f["prof"], f["idx"]] = 1; tot[f["prof"], f["idx"]] = f["total"]
      for (i = 1; i <= np; i++) v[f["prof"], f["idx"], P[i]] = f[P[i]] }
    $1 == "samples" { parse(); samp[f["prof"]] = f["n"] }
    function share_cell(p, idx, i,    t, s, ad) {
      if (!have[p, idx] || tot[p, idx] <= 0) return sprintf("%7s", "-")
      s = 100 * v[p, idx, P[i]] / tot[p, idx]; t = 100 * ta[P[i], idx] / ta["total", idx]
      d = s - t; ad = d < 0 ? -d : d; if (ad > worst) worst = ad
      return sprintf("%+7.2f", d) }
    function total_cell(p, idx) {
      if (!have[p, idx]) return sprintf("%8s", "-")
      return sprintf("%+7.1f%%", 100 * (tot[p, idx] / ta["total", idx] - 1)) }
    END {
      if (!tr["total"]) { print "\n1. Accuracy: no truth (the plain run failed)"; exit }
      printf "\n1. Accuracy on heap_truth (one run each): each path'"'"'s share of the profile'"'"'s\n"
      printf "   alloc_space and inuse_space, pp off the truth'"'"'s share; worst = the largest |pp|;\n"
      printf "   the profile'"'"'s totals, %% off the bytes and objects the program asked for.\n"
      printf "   Truth: %.0f MiB in %d allocations, %.0f MiB in %d blocks in use at exit;\n", ta["total", "alloc_space"] / 1048576, ta["total", "alloc_objects"], ta["total", "inuse_space"] / 1048576, ta["total", "inuse_objects"]
      printf "   samples expected at a %d KiB mean interval: about %d.\n", interval / 1024, ta["total", "alloc_space"] / interval
      printf "%-18s %7s | %-23s | %-23s | %6s | %8s %8s %8s %8s\n", "", "", "alloc_space share", "inuse_space share", "", "alloc", "alloc", "inuse", "inuse"
      printf "%-18s %7s | %7s %7s %7s | %7s %7s %7s | %6s | %8s %8s %8s %8s\n", "profiler", "samples", "malloc", "calloc", "memalgn", "malloc", "calloc", "memalgn", "worst", "space", "objects", "space", "objects"
      printf "%-18s %7s |", "truth (share %)", ""
      for (k = 1; k <= 2; k++) { idx = k == 1 ? "alloc_space" : "inuse_space"
        for (i = 1; i <= np; i++) printf " %7.2f", 100 * ta[P[i], idx] / ta["total", idx]; printf " |" }
      printf "\n"
      for (a = 1; a <= nprof; a++) { p = A[a]
        if (!have[p, "alloc_objects"] && !have[p, "inuse_space"]) { printf "%-18s n/a\n", lab[p]; continue }
        worst = 0
        printf "%-18s %7s |", lab[p], samp[p]
        for (i = 1; i <= np; i++) printf " %s", share_cell(p, "alloc_space", i); printf " |"
        for (i = 1; i <= np; i++) printf " %s", share_cell(p, "inuse_space", i); printf " |"
        printf " %6.2f | %s %s %s %s\n", worst, total_cell(p, "alloc_space"), total_cell(p, "alloc_objects"), total_cell(p, "inuse_space"), total_cell(p, "inuse_objects") }
    }' "$results"

  awk -v labels="$labels" -v bases="$bases" -v prof_list="${profilers[*]}" "$bench_awk_lib"'
    BEGIN { labels_init(); nprof = split(prof_list, A, " ")
      nb = split(bases, B, ";"); for (i = 1; i <= nb; i++) { k = index(B[i], "="); bs[substr(B[i], 1, k - 1)] = substr(B[i], k + 1) } }
    $1 == "truthrun" { parse(); trss[f["prof"]] = f["maxrss_kib"]; tcpu[f["prof"]] = f["cpu_s"]; tall[f["prof"]] = f["all_cpu_s"]; tallrss[f["prof"]] = f["all_maxrss_kib"]; tran[f["prof"]] = 1 }
    $1 == "cost" { parse(); p = f["prof"]; n[p]++
      ns[p, n[p]] = f["ns_per_pair"]; nsall[p, n[p]] = 1e9 * f["all_cpu_s"] / (f["iters"] * f["threads"])
      rss[p, n[p]] = f["maxrss_kib"]; it[p] = f["iters"] }
    function median(arr, p, cnt,    i, j, t, x) {
      for (i = 1; i <= cnt; i++) x[i] = arr[p, i]
      for (i = 2; i <= cnt; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
      return cnt % 2 ? x[(cnt + 1) / 2] : (x[cnt / 2] + x[cnt / 2 + 1]) / 2 }
    END {
      printf "\n2. Cost on heap_cost (2 threads, blocks of 16-256 B, 15 of 16 freed at once):\n"
      printf "   process CPU per malloc+free pair, median of the rounds (own: the workload'"'"'s\n"
      printf "   CLOCK_PROCESS_CPUTIME_ID; all: every process of the run, /usr/bin/time), and\n"
      printf "   the ratio to the same allocator without profiling (base); RSS: the workload'"'"'s\n"
      printf "   max RSS, median, and over the base'"'"'s\n"
      printf "%-18s %-16s %9s %5s | %8s %8s %7s %7s | %8s %8s\n", "profiler", "base", "iters/thr", "runs", "own ns", "all ns", "x base", "x glibc", "RSS MiB", "+MiB"
      for (a = 1; a <= nprof; a++) { p = A[a]
        if (!n[p]) { printf "%-18s n/a\n", lab[p]; continue }
        b = bs[p]; m = median(ns, p, n[p]); mall = median(nsall, p, n[p]); r = median(rss, p, n[p])
        xb = (n[b] && p != b) ? sprintf("%7.3f", m / median(ns, b, n[b])) : sprintf("%7s", "-")
        xg = (n["none"] && p != "none") ? sprintf("%7.3f", m / median(ns, "none", n["none"])) : sprintf("%7s", "-")
        db = (n[b] && p != b) ? sprintf("%+8.1f", (r - median(rss, b, n[b])) / 1024) : sprintf("%8s", "-")
        printf "%-18s %-16s %9d %5d | %8.1f %8.1f %s %s | %8.1f %s\n", lab[p], p == b ? "-" : lab[b], it[p], n[p], m, mall, xb, xg, r / 1024, db }

      printf "\n3. Memory and CPU on heap_truth (the runs of 1.): the workload'"'"'s max RSS and\n"
      printf "   over its base'"'"'s; process CPU (own, and all processes of the run)\n"
      printf "%-18s %-16s | %8s %8s %9s | %8s %8s\n", "profiler", "base", "RSS MiB", "+MiB", "all MiB", "own s", "all s"
      for (a = 1; a <= nprof; a++) { p = A[a]
        if (!tran[p]) { if (p !~ /^snap-(cpu|got)/) printf "%-18s n/a\n", lab[p]; continue }
        b = bs[p]; if (b == "snap-cpu") b = "none"
        db = (tran[b] && p != b) ? sprintf("%+8.1f", (trss[p] - trss[b]) / 1024) : sprintf("%8s", "-")
        printf "%-18s %-16s | %8.1f %s %9.1f | %8.2f %8.2f\n", lab[p], p == b ? "-" : lab[b], trss[p] / 1024, db, tallrss[p] / 1024, tcpu[p], tall[p] }
    }' "$results"
} >"$table"

# The plot: cost per malloc+free pair against its base, and the worst share
# error, one bar per profiler.
plot_data=$work/plot.dat
awk -v labels="$labels" -v bases="$bases" "$bench_awk_lib"'
  BEGIN { labels_init() }
  $1 == "cost" { parse(); p = f["prof"]; s[p] = s[p] " " f["ns_per_pair"] }
  END { for (p in s) { n = split(s[p], x, " ")
      for (i = 2; i <= n; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
      m = n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
      lb = lab[p]; gsub(/ /, "_", lb); printf "%s %.2f\n", lb, m } }' "$results" | sort -k2 -n >"$plot_data"

bench_finish_table "$table"

plot=$root/docs/bench_heap.png
if command -v gnuplot >/dev/null && [ -s "$plot_data" ]; then
  gnuplot <<EOF || say "bench_heap: gnuplot failed; no plot"
set terminal pngcairo size 800,420 noenhanced
set output "$plot"
set title "heap_cost: process CPU per malloc+free pair (median of $rounds), 2 threads"
set style data histogram
set style fill solid 0.7
set boxwidth 0.8
set logscale y
set ylabel "ns per pair (log)"
set xtics rotate by -30
set grid ytics
unset key
plot "$plot_data" using 2:xtic(1)
EOF
  [ -f "$plot" ] || gnuplot <<EOF || true
set terminal png size 800,420
set output "$plot"
set style data histogram
set style fill solid 0.7
set logscale y
set xtics rotate by -30
unset key
plot "$plot_data" using 2:xtic(1)
EOF
fi

# The summary as a markdown table: per row, the worst share and the totals
# of 1., the CPU ratios and RSS of 2., the RSS of 3.
summary=$work/summary.md
awk -v labels="$labels" -v bases="$bases" -v prof_list="${profilers[*]}" -v path_list="${paths[*]}" \
    -v acc_list="${accuracy_profs[*]}" "$bench_awk_lib"'
BEGIN { labels_init(); nprof = split(prof_list, A, " "); np = split(path_list, P, " ")
  nb = split(bases, B, ";"); for (i = 1; i <= nb; i++) { k = index(B[i], "="); bs[substr(B[i], 1, k - 1)] = substr(B[i], k + 1) } }
$1 == "truth" { parse(); ta[f["path"], "alloc_space"] = f["alloc_bytes"]; ta[f["path"], "inuse_space"] = f["inuse_bytes"] }
$1 == "acc" { parse(); have[f["prof"], f["idx"]] = 1; tot[f["prof"], f["idx"]] = f["total"]
  for (i = 1; i <= np; i++) v[f["prof"], f["idx"], P[i]] = f[P[i]] }
$1 == "samples" { parse(); samp[f["prof"]] = f["n"] }
$1 == "truthrun" { parse(); trss[f["prof"]] = f["maxrss_kib"]; tran[f["prof"]] = 1 }
$1 == "cost" { parse(); p = f["prof"]; n[p]++; ns[p, n[p]] = f["ns_per_pair"]; rss[p, n[p]] = f["maxrss_kib"] }
function median(arr, p, cnt,    i, j, t, x) {
  for (i = 1; i <= cnt; i++) x[i] = arr[p, i]
  for (i = 2; i <= cnt; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
  return cnt % 2 ? x[(cnt + 1) / 2] : (x[cnt / 2] + x[cnt / 2 + 1]) / 2 }
function worst_of(p, idx,    i, d, w) {
  if (!have[p, idx] || tot[p, idx] <= 0 || ta["total", idx] <= 0) return "-"
  w = 0; for (i = 1; i <= np; i++) { d = 100 * v[p, idx, P[i]] / tot[p, idx] - 100 * ta[P[i], idx] / ta["total", idx]; if (d < 0) d = -d; if (d > w) w = d }
  return sprintf("%.2f", w) }
function total_of(p, idx) { return (have[p, idx] && ta["total", idx] > 0) ? sprintf("%+.1f %%", 100 * (tot[p, idx] / ta["total", idx] - 1)) : "-" }
END {
  print "| profiler | base | samples | worst share, alloc_space (pp) | worst share, inuse_space (pp) | alloc_space total | inuse_space total | CPU x base | CPU x glibc | RSS + MiB (heap_cost) | RSS + MiB (heap_truth) |"
  print "|---|---|---|---|---|---|---|---|---|---|---|"
  for (a = 1; a <= nprof; a++) { p = A[a]; b = bs[p]
    if (!n[p] && !tran[p]) { printf "| %s | n/a | | | | | | | | | |\n", lab[p]; continue }
    acc = 0; if (index(" " acc_list " ", " " p " ")) acc = 1
    xb = (n[p] && n[b] && p != b) ? sprintf("%.3f", median(ns, p, n[p]) / median(ns, b, n[b])) : "-"
    xg = (n[p] && n["none"] && p != "none") ? sprintf("%.3f", median(ns, p, n[p]) / median(ns, "none", n["none"])) : "-"
    rb = (n[p] && n[b] && p != b) ? sprintf("%+.1f", (median(rss, p, n[p]) - median(rss, b, n[b])) / 1024) : "-"
    tb = b == "snap-cpu" ? "none" : b
    rt = (tran[p] && tran[tb] && p != tb) ? sprintf("%+.1f", (trss[p] - trss[tb]) / 1024) : "-"
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lab[p], p == b ? "-" : lab[b],
      acc ? samp[p] : "", acc ? worst_of(p, "alloc_space") : "", acc ? worst_of(p, "inuse_space") : "",
      acc ? total_of(p, "alloc_space") : "", acc ? total_of(p, "inuse_space") : "", xb, xg, rb, rt }
}
' "$results" >"$summary"

# The issue's CPU target for snapprof's two ways in: each median against its
# base's, met or missed by how much (with the rounds' spread), and the GOT
# way's cost split in two: the hooks (snapprof GOT cpu against snapprof
# record) and what sampling adds on top of them (snapprof GOT heap against
# snapprof GOT cpu), per pair and per sampled allocation (heap_cost's blocks
# average 136 B: a sample every interval/136 pairs).
target_lines() {
  awk -v bases="$bases" -v labels="$labels" -v interval="$interval" "$bench_awk_lib"'
    BEGIN { labels_init(); nb = split(bases, B, ";")
      for (i = 1; i <= nb; i++) { k = index(B[i], "="); bs[substr(B[i], 1, k - 1)] = substr(B[i], k + 1) } }
    $1 == "cost" { parse(); p = f["prof"]; n[p]++; ns[p, n[p]] = f["ns_per_pair"] }
    function median(arr, p, cnt,    i, j, t, x) {
      for (i = 1; i <= cnt; i++) x[i] = arr[p, i]
      for (i = 2; i <= cnt; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
      return cnt % 2 ? x[(cnt + 1) / 2] : (x[cnt / 2] + x[cnt / 2 + 1]) / 2 }
    function spread(p,    i, lo, hi) { lo = hi = ns[p, 1]
      for (i = 2; i <= n[p]; i++) { if (ns[p, i] < lo) lo = ns[p, i]; if (ns[p, i] > hi) hi = ns[p, i] }
      return sprintf("%.1f-%.1f", lo, hi) }
    END {
      split("snap-heap snap-got", W, " ")
      for (w = 1; w <= 2; w++) { p = W[w]; b = bs[p]
        if (!n[p] || !n[b]) continue
        m = median(ns, p, n[p]); mb = median(ns, b, n[b]); r = m / mb
        printf "  - %s: x%.3f of %s (%.1f ns a pair over %.1f; rounds %s and %s): %s\n", lab[p], r, lab[b],
          m - mb, mb, spread(p), spread(b),
          r <= 1.03 ? "target met" : sprintf("target 1.03 missed by %.1f %% of the base", 100 * (r - 1.03)) }
      if (n["snap-got-cpu"] && n["snap-got"] && n["snap-cpu"]) {
        mc = median(ns, "snap-cpu", n["snap-cpu"]); mh = median(ns, "snap-got-cpu", n["snap-got-cpu"])
        mg = median(ns, "snap-got", n["snap-got"])
        printf "  - the GOT way'"'"'s %+.1f ns split: the hooks (snapprof GOT cpu, the same CPU profiler, heap\n", mg - mc
        printf "    off) %+.1f ns a pair (rounds %s); sampling on top of them %+.1f ns a pair, about\n", \
          mh - mc, spread("snap-got-cpu"), mg - mh
        printf "    %.1f us of process CPU per sampled allocation (one every %d pairs of 136 B on\n", \
          (mg - mh) * interval / 136 / 1000, interval / 136
        printf "    average). Medians of 5 on this machine: the rounds'"'"' spread is wider than the split.\n" }
      if (n["snap-got-hooks"] && n["none"])
        printf "  - the GOT hooks with no profiler (snapprof GOT): x%.3f of glibc, %+.1f ns a pair\n", \
          median(ns, "snap-got-hooks", n["snap-got-hooks"]) / median(ns, "none", n["none"]), \
          median(ns, "snap-got-hooks", n["snap-got-hooks"]) - median(ns, "none", n["none"]) }' "$results"
}

section_body() {
  echo "- machine: $(nproc) CPUs ($cpu_model), kernel $kernel; load $load when it started;"
  echo "  $machine_line"
  [ -n "$note" ] && echo "- note: $note"
  bench_section_made_by
  echo "- targets (issue 27): with >= 5000 samples each path's alloc_space and inuse_space"
  echo "  share within 2 pp, the scaled totals within 5 %; CPU at the default interval <= 1.03x"
  echo "  its base (median of 5, process CPU); RSS <= 16 MiB over its base, plus about 1 KiB per"
  echo "  unique stack and per live sampled block"
  echo
  cat "$summary"
  echo
  echo "- the CPU target, at the default interval (median of the rounds, process CPU):"
  target_lines
  echo "- where the cost is, in two parts (the lines above split it). The hooks: section 4"
  echo "  counts what they add to an unsampled malloc+free pair, 18 instructions over glibc's"
  echo "  142: malloc 10 (the countdown's TLS offset, a load from the GOT as initial-exec TLS"
  echo "  in a shared library needs; the session's gen, a load, compared with the thread's gen"
  echo "  and depth counter in one 64-bit compare and a branch; the countdown loaded, compared"
  echo "  with n, a branch, subtracted and stored; the jump to the allocator through memory),"
  echo "  free 8 (the pointer copied, the filter's address, a shift and a zero-extend to its"
  echo "  16-bit bucket, the bucket's load, test and branch, the jump). The sampled"
  echo "  allocations: each one's capture on the allocating thread (its registers, its stack"
  echo "  copied into a capture slot, the thread's name by prctl, the live set), its free"
  echo "  looked up and queued, and the sampling thread's unwind and pprof work for both, all"
  echo "  in the process's CPU. tcmalloc's and jemalloc's sampling (the tcmalloc sample and"
  echo "  jemalloc prof rows) pays no hook: the countdown sits in the thread cache their malloc"
  echo "  has in hand, and a sampled block is marked where their free looks anyway (tcmalloc:"
  echo "  its span, in the pagemap), so no TLS of their own, no session word, no filter, no"
  echo "  jump in front of the allocator; their per-sample work (a stack walk in the"
  echo "  allocating thread, a record in their own table) is still paid."
  echo
  bench_section_table "$table"
  if [ -s "$hookcost" ]; then
    echo "4. Instructions the hooks add to an unsampled pair (\`bench/heap_hook_cost.sh\` with ROUNDS=0):"
    echo
    echo '```'
    cat "$hookcost"
    echo '```'
    echo
  fi
  [ -f "$plot" ] && { echo '![heap_cost: CPU per malloc+free pair](bench_heap.png)'; echo; }
  echo "How each row is measured, and how to read it: [bench/README.md](../bench/README.md#bench_heap)."
}
bench_write_section "## Heap profiles (issue 27)" section_body
say "bench_heap: wrote docs/BENCHMARKS.md and docs/bench_heap.png"
