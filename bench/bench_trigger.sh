#!/usr/bin/env bash
# bench_trigger.sh: issue 10's benchmark. Runs the workloads of
# bench_trigger.c under `perf record -e cpu-clock`, gperftools' libprofiler
# and `snapprof record` (each trigger) side by side in one run, prints the
# table and writes it, with the machine, the command and a plot, to
# docs/BENCHMARKS.md and docs/bench_attribution.png. It prints figures and
# never judges them; bench/README.md says how to read them.
#
# usage: bench/bench_trigger.sh [--quick] [--build DIR] [--no-docs]
#   --quick    seconds instead of a quarter of an hour; figures not meaningful
#   --build    the CMake build tree (default: build)
#   --no-docs  print the table only
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
command_line="bash bench/bench_trigger.sh${*:+ $*}"
bench_parse_args "[--quick] [--build DIR] [--no-docs]" "$@"

W=$build/bench/bench_trigger
SNAP=$build/cli/snapprof
bench_require bench_trigger "$W" "$SNAP"

ncpu=$(nproc)
hz_attr=1000                 # attribution and the EINTR/churn comparisons' main rate
rates=(100 1000 4000)        # delivered/requested and EINTR
hz_cost=4000                 # CPU per sample: the highest rate, for the largest signal
if [ "$quick" = 1 ]; then
  attr_cpu=0.6   attr_target=0     attr_min_runs=1 attr_max_runs=1
  rate_cpu=0.4   rate_runs=1
  cost_cpu=0.3   cost_runs=1
  eintr_cpu=0.3  eintr_runs=1
  churn_threads=500 churn_runs=1
else
  # Attribution: each run is 10 CPU-seconds of the program; runs are added,
  # round-robin over the profilers, until each has 20 000 samples (one
  # standard error of a 50 % share is then 0.35 pp) or has had 20 runs
  # (gperftools gets about 140 samples per CPU-second whatever it is asked).
  attr_cpu=10    attr_target=20000 attr_min_runs=2 attr_max_runs=20
  rate_cpu=5     rate_runs=3
  cost_cpu=3     cost_runs=5
  eintr_cpu=2    eintr_runs=2
  churn_threads=20000 churn_runs=5
fi

bench_workdir bench_trigger

# ---------------------------------------------------------------------------
# The profilers
# ---------------------------------------------------------------------------

# Each profiler has a name, and a note on why it is not available (empty when
# it is). snapprof's triggers are asked for with `record --trigger X`; a
# refusal (exit 2, a usage error) means that trigger has not landed yet.
profilers=(perf gperftools snap-perf snap-timer snap-handshake)
declare -A why_na=() label=() snap_flag=() said=()
label[none]="no profiler"
label[floor]="floor"
label[perf]="perf"
label[gperftools]="gperftools"
label[snap-perf]="snapprof/perf"
label[snap-timer]="snapprof/timer"
label[snap-handshake]="snapprof/handshake"

libprofiler=$(bench_libprofiler)
if ! command -v perf >/dev/null; then
  why_na[perf]="perf is not installed (bash bench/setup.sh)"
elif ! perf record -q -e cpu-clock:u -c 1000000 -o "$work/probe.data" -- "$W" calibrate \
    >/dev/null 2>"$work/probe.err"; then
  why_na[perf]="perf record failed: $(head -c 200 "$work/probe.err" | tr '\n' ' ')"
fi
[ -n "$libprofiler" ] || why_na[gperftools]="libprofiler.so.0 not found (bash bench/setup.sh)"
for t in perf timer handshake; do
  if "$SNAP" record -q --trigger "$t" -o "$work/probe.pb.gz" -- "$W" calibrate \
      >/dev/null 2>"$work/probe.err"; then
    snap_flag[snap-$t]="--trigger $t"
  else
    rc=$?
    if [ "$t" = handshake ] && grep -q "unknown option '--trigger'" "$work/probe.err"; then
      # Before --trigger exists the handshake is the only trigger there is.
      snap_flag[snap-$t]=""
      said[snap-$t]="record has no --trigger yet: today's only trigger, the handshake"
    else
      why_na[snap-$t]="record --trigger $t: exit $rc: $(head -n 1 "$work/probe.err")"
    fi
  fi
done
# run_one PROFILER HZ TAG ARGS...: runs the workload with ARGS under PROFILER
# at HZ; leaves TAG.out (its line), TAG.err and the profile in $work.
# Returns nonzero when the program failed or wrote no line.
run_one() {
  local prof=$1 hz=$2 tag=$work/$3
  shift 3
  local rc=0
  case $prof in
    none | floor)
      "$W" "$@" >"$tag.out" 2>"$tag.err" || rc=$? ;;
    perf)
      perf record -q -e cpu-clock:u -c $((1000000000 / hz)) -o "$tag.data" -- "$W" "$@" \
        >"$tag.out" 2>"$tag.err" || rc=$? ;;
    gperftools)
      # env is the last hop: LD_PRELOAD must reach only the workload (a
      # profiled wrapper's ITIMER_PROF survives exec and kills the program).
      env LD_PRELOAD="$libprofiler" CPUPROFILE="$tag.prof" CPUPROFILE_FREQUENCY="$hz" \
        "$W" "$@" >"$tag.out" 2>"$tag.err" || rc=$? ;;
    snap-*)
      # shellcheck disable=SC2086 # the flag is one word pair or nothing
      "$SNAP" record -F "$hz" -o "$tag.pb.gz" ${snap_flag[$prof]} -- "$W" "$@" \
        >"$tag.out" 2>"$tag.err" || rc=$? ;;
  esac
  bench_check_run bench_trigger BENCH_TRIGGER "$prof" "$rc" "$tag" "$@" || return 1
  if [ "${prof#snap-}" != "$prof" ] && [ -z "${said[$prof]:-}" ]; then
    # The summary names the trigger that ran (and why a better one did not)
    # once triggers land; keep its first word on it for the header.
    said[$prof]=$(grep -io 'trigger[^;]*' "$tag.err" | sed -n 1p)
  fi
}

mapfile -t available < <(bench_available "${profilers[@]}")

# kv TAG: the workload's line as shell-safe key=value words.
# The truth's hot_X_ns become truth_X, apart from the profile's hot_X_ns.
kv() { sed -n '/^BENCH_TRIGGER /{s/^BENCH_TRIGGER [a-z]* //; s/hot_\([abc]\)_ns=/truth_\1=/g; p;}' "$work/$1.out"; }

# profile_of PROF TAG: "samples=N total_ns=T hot_a_ns=A hot_b_ns=B hot_c_ns=C"
# from the profile: each function's own (flat) time, inlined frames folded
# into the function they were inlined into, so every profiler is read alike.
profile_of() {
  local prof=$1 tag=$work/$2
  case $prof in
    perf)
      perf report -i "$tag.data" --stdio --no-children -n --sort sym 2>/dev/null |
        awk -v period="$3" '
          $1 ~ /%$/ && $3 == "[.]" { n += $2; c[$4] += $2 }
          END { printf "samples=%d total_ns=%.0f hot_a_ns=%.0f hot_b_ns=%.0f hot_c_ns=%.0f\n",
                       n, n * period, c["hot_a"] * period, c["hot_b"] * period, c["hot_c"] * period }' ;;
    gperftools | snap-*)
      local file=$tag.pb.gz bin=()
      [ "$prof" = gperftools ] && file=$tag.prof bin=("$W")
      local top count
      top=$(go tool pprof -top -noinlines -nodefraction=0 -nodecount=1000000 -unit=ns \
        "${bin[@]}" "$file" 2>/dev/null) || return 1
      count=$(go tool pprof -top -noinlines -sample_index=samples -nodecount=1 \
        "${bin[@]}" "$file" 2>/dev/null) || return 1
      {
        printf '%s\n' "$count" | sed -n 's/^Showing nodes accounting for .* of \([0-9]*\) total$/samples \1/p'
        printf '%s\n' "$top" | sed -n 's/^Showing nodes accounting for .* of \([0-9.]*\)ns total$/total \1/p'
        printf '%s\n' "$top" | awk 'NF == 6 && $6 ~ /^hot_[abc]$/ { sub(/ns$/, "", $1); print $6, $1 }'
      } | awk '{ v[$1] = $2 }
               END { printf "samples=%d total_ns=%.0f hot_a_ns=%.0f hot_b_ns=%.0f hot_c_ns=%.0f\n",
                            v["samples"], v["total"], v["hot_a"], v["hot_b"], v["hot_c"] }' ;;
  esac
}

# pause_of TAG: "pause_p50_us=X pause_p99_us=Y" from snapprof's summary on
# stderr (this tree has no `snapprof stats`).
pause_of() {
  sed -n 's/.*target pause p50 \([0-9.]*\) us, p99 \([0-9.]*\) us.*/pause_p50_us=\1 pause_p99_us=\2/p' \
    "$work/$1.err" | sed -n 1p
}

# ---------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------

bench_machine_start
paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo "?")
unit_ns=$("$W" calibrate | sed -n 's/.*unit_ns=\([0-9.]*\).*/\1/p')
say "bench_trigger: $ncpu CPUs, $cpu_model, kernel $kernel; one unit of work = $unit_ns ns"
say "bench_trigger: profilers: ${available[*]}"

start_spinners() {
  local i
  for ((i = 0; i < $1; i++)); do
    "$W" spin &
    bench_pids+=($!)
  done
}
stop_spinners() {
  local p
  for p in "${bench_pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  bench_pids=()
}

# ---------------------------------------------------------------------------
# 1. Attribution, and 2. delivered/requested at 1 kHz (the 4x runs)
# ---------------------------------------------------------------------------

cases=("1x:$ncpu:0" "2x:$((2 * ncpu)):0" "4x:$((4 * ncpu)):0" "busy:2:2")
for c in "${cases[@]}"; do
  IFS=: read -r name threads spin <<<"$c"
  per_thread=$(awk -v c="$attr_cpu" -v n="$threads" 'BEGIN { printf "%.3f", c / n }')
  start_spinners "$spin"
  declare -A got=()
  for ((round = 1; round <= attr_max_runs; round++)); do
    for p in "${available[@]}"; do
      n=${got[$p]:-0}
      if [ "$round" -gt "$attr_min_runs" ] && [ "$n" -ge "$attr_target" ]; then continue; fi
      tag=attr-$name-$p-$round
      say "1. attribution $name ($threads threads, $spin busy processes): ${label[$p]} run $round ($n samples so far)"
      if run_one "$p" "$hz_attr" "$tag" ratio --threads "$threads" --cpu-seconds "$per_thread" &&
        prof=$(profile_of "$p" "$tag" $((1000000000 / hz_attr))); then
        record attr case="$name" threads="$threads" prof="$p" run="$round" hz="$hz_attr" \
          "$(kv "$tag")" "$prof"
        got[$p]=$((n + $(printf '%s\n' "$prof" | sed 's/.*samples=\([0-9]*\).*/\1/')))
      else
        record attr case="$name" threads="$threads" prof="$p" run="$round" failed=1
      fi
      rm -f "$work/$tag".*
    done
  done
  unset got
  stop_spinners
done

# ---------------------------------------------------------------------------
# 2. Delivered/requested per thread CPU-second under 4x oversubscription
# ---------------------------------------------------------------------------

threads4=$((4 * ncpu))
per_thread=$(awk -v c="$rate_cpu" -v n="$threads4" 'BEGIN { printf "%.3f", c / n }')
for hz in "${rates[@]}"; do
  [ "$hz" = "$hz_attr" ] && continue # the 4x attribution runs
  for ((r = 1; r <= rate_runs; r++)); do
    for p in "${available[@]}"; do
      tag=rate-$hz-$p-$r
      say "2. rate $hz Hz, 4x: ${label[$p]} run $r"
      if run_one "$p" "$hz" "$tag" ratio --threads "$threads4" --cpu-seconds "$per_thread" &&
        prof=$(profile_of "$p" "$tag" $((1000000000 / hz))); then
        record rate hz="$hz" prof="$p" run="$r" "$(kv "$tag")" "$prof"
      fi
      rm -f "$work/$tag".*
    done
  done
done

# ---------------------------------------------------------------------------
# 3. CPU per sample: the same fixed work with no profiler, the floor, and
#    each in-process profiler
# ---------------------------------------------------------------------------

# One a-b-c round is 10 x 200 units of work.
cost_iters=$(awk -v c="$cost_cpu" -v u="$unit_ns" 'BEGIN { n = int(c * 1e9 / (2000 * u)); print (n > 0 ? n : 1) }')
cost_profs=(none floor)
for p in "${available[@]}"; do
  [ "$p" = perf ] || cost_profs+=("$p") # perf's work is mostly outside the process
done
for ((r = 1; r <= cost_runs; r++)); do
  for p in "${cost_profs[@]}"; do
    tag=cost-$p-$r
    say "3. CPU per sample, $hz_cost Hz, 1x: ${label[$p]} run $r"
    extra=()
    [ "$p" = floor ] && extra=(--floor "$hz_cost")
    if run_one "$p" "$hz_cost" "$tag" ratio --threads "$ncpu" --iters "$cost_iters" "${extra[@]}"; then
      prof=""
      case $p in
        gperftools | snap-*) prof=$(profile_of "$p" "$tag" $((1000000000 / hz_cost))) || prof="" ;;
      esac
      record cost prof="$p" run="$r" "$(kv "$tag")" "$prof" "$(pause_of "$tag")"
    fi
    rm -f "$work/$tag".*
  done
done

# ---------------------------------------------------------------------------
# 4. EINTR of sleeping threads beside busy ones
# ---------------------------------------------------------------------------

for hz in "${rates[@]}"; do
  for ((r = 1; r <= eintr_runs; r++)); do
    for p in "${available[@]}"; do
      tag=eintr-$hz-$p-$r
      say "4. EINTR $hz Hz: ${label[$p]} run $r"
      if run_one "$p" "$hz" "$tag" eintr --busy "$ncpu" --cpu-seconds "$eintr_cpu"; then
        record eintr hz="$hz" prof="$p" run="$r" "$(kv "$tag")"
      fi
      rm -f "$work/$tag".*
    done
  done
done

# ---------------------------------------------------------------------------
# 5. Thread churn at 100 Hz
# ---------------------------------------------------------------------------

churn_units=$(awk -v u="$unit_ns" 'BEGIN { n = int(100000 / u + 0.5); print (n < 2 ? 2 : n) }')
for ((r = 1; r <= churn_runs; r++)); do
  for p in none "${available[@]}"; do
    tag=churn-$p-$r
    say "5. churn: ${label[$p]} run $r"
    if run_one "$p" 100 "$tag" churn --threads-total "$churn_threads" --creators "$ncpu" \
      --units "$churn_units"; then
      record churn prof="$p" run="$r" "$(kv "$tag")"
    fi
    rm -f "$work/$tag".*
  done
done

# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------

bench_machine_end

# The awk helpers every section uses: a median, and lib.sh's.
# shellcheck disable=SC2016 # awk's own $i, not the shell's
awk_lib='
function median(v, n,    i, j, t) {
  for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  if (n == 0) return "";
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
'$bench_awk_lib
prof_list="${profilers[*]}"
labels=$(bench_labels none floor "${profilers[@]}")
na_list=$(bench_na "${profilers[@]}")

table=$work/table.txt
plotdata=$work/attribution.dat
{
  printf 'bench_trigger: snapprof %s, %s CPUs (%s), kernel %s, perf_event_paranoid %s, load %s%s\n' \
    "$commit" "$ncpu" "$cpu_model" "$kernel" "$paranoid" "$load" \
    "$([ "$quick" = 1 ] && echo ' (--quick: figures are not meaningful)')"
  for p in "${profilers[@]}"; do
    if [ -n "${why_na[$p]:-}" ]; then
      printf '  %-19s n/a: %s\n' "${label[$p]}" "${why_na[$p]}"
    elif [ -n "${said[$p]:-}" ]; then
      printf '  %-19s %s\n' "${label[$p]}" "${said[$p]}"
    fi
  done

  # 1. Attribution.
  printf '\n1. Attribution at %s Hz: each function'"'"'s share of the profile (its own samples,\n' "$hz_attr"
  printf '   inlined code folded in) next to the share of CPU the program measured for it\n'
  printf '   with its own thread CPU clocks (truth), and how far off (pp); samples and runs\n'
  printf '   pooled per profiler. Cases: threads per %s cores; busy = 2 threads beside 2\n' "$ncpu"
  printf '   spinning processes. pp: against the truth of the same runs; worst = the\n'
  printf '   largest |pp| of the three.\n'
  printf '%-7s %-19s %8s %4s | %14s %14s %14s | %14s %6s\n' case profiler samples runs \
    "hot_a % (pp)" "hot_b % (pp)" "hot_c % (pp)" "hot sum (pp)" worst
  awk -v profs="$prof_list" -v labels="$labels" -v na="$na_list" -v plot="$plotdata" \
    -v target="$attr_target" -v maxruns="$attr_max_runs" "$awk_lib"'
    BEGIN { np = split(profs, P, " "); labels_init()
            split(na, N, " "); for (i in N) isna[N[i]] = 1
            nc = split("1x 2x 4x busy", C, " ") }
    $1 == "attr" { parse(); c = f["case"]; p = f["prof"]; threads[c] = f["threads"]
      if (f["failed"]) { failed[c, p]++; next }
      if (!f["total_ns"]) { failed[c, p]++; next }
      runs[c, p]++; S[c, p] += f["samples"]; T[c, p] += f["total_ns"]
      A[c, p] += f["hot_a_ns"]; B[c, p] += f["hot_b_ns"]; Cc[c, p] += f["hot_c_ns"]
      # The truth of these same runs, per profiler and for the whole case.
      tA[c, p] += f["truth_a"]; tB[c, p] += f["truth_b"]; tC[c, p] += f["truth_c"]
      tT[c, p] += f["workers_cpu_ns"] + f["main_cpu_ns"]
      tA[c] += f["truth_a"]; tB[c] += f["truth_b"]; tC[c] += f["truth_c"]
      tT[c] += f["workers_cpu_ns"] + f["main_cpu_ns"] }
    function cell(share, truth) { return sprintf("%6.2f (%+5.2f)", share, share - truth) }
    END {
      for (i = 1; i <= nc; i++) { c = C[i]; if (!(c in threads)) continue
        ta = tT[c] ? 100 * tA[c] / tT[c] : 0; tb = tT[c] ? 100 * tB[c] / tT[c] : 0; tc = tT[c] ? 100 * tC[c] / tT[c] : 0
        name = c == "busy" ? "busy" : c
        printf "%-7s %-19s %8s %4s | %14.2f %14.2f %14.2f | %14.2f %6s\n", name " ", "truth (" threads[c] " thr)", "", "", ta, tb, tc, ta + tb + tc, ""
        # A blank line ends the oversubscription curve: busy is a case of its own.
        if (c == "busy") printf "\n" > plot
        printf "%d \"%s\"", i, (c == "busy" ? "2 thr + 2 busy procs" : c " (" threads[c] " thr)") > plot
        for (j = 1; j <= np; j++) { p = P[j]
          if (isna[p] || !runs[c, p]) {
            printf "%-7s %-19s %8s %4s | %14s %14s %14s | %14s %6s\n", "", lab[p], (failed[c, p] ? "failed" : "n/a"), "", "", "", "", "", ""
            printf " NaN" > plot; continue }
          a = 100 * A[c, p] / T[c, p]; b = 100 * B[c, p] / T[c, p]; cc = 100 * Cc[c, p] / T[c, p]
          pa = 100 * tA[c, p] / tT[c, p]; pb = 100 * tB[c, p] / tT[c, p]; pc = 100 * tC[c, p] / tT[c, p]
          w = a - pa; if (w < 0) w = -w; x = b - pb; if (x < 0) x = -x; if (x > w) w = x
          x = cc - pc; if (x < 0) x = -x; if (x > w) w = x
          short = S[c, p] < target; few += short
          printf "%-7s %-19s %8s %4d | %14s %14s %14s | %14s %6.2f\n", "", lab[p], S[c, p] (short ? "*" : ""), runs[c, p],
            cell(a, pa), cell(b, pb), cell(cc, pc), cell(a + b + cc, pa + pb + pc), w
          printf " %.3f", (w < 0.01 ? 0.01 : w) > plot }
        printf "\n" > plot }
      if (few) printf "* fewer than %d samples after %d runs\n", target, maxruns
    }' "$results"

  # 2. Delivered/requested.
  printf '\n2. Delivered / requested samples per thread CPU-second, %s threads on %s cores\n' "$threads4" "$ncpu"
  printf '   (4x): samples / (the threads'"'"' own CPU seconds) / Hz, median of the runs\n'
  printf '%-19s' profiler; for hz in "${rates[@]}"; do printf ' %10s' "$hz Hz"; done; printf '\n'
  awk -v profs="$prof_list" -v labels="$labels" -v na="$na_list" -v rates="${rates[*]}" \
    -v threads4="$threads4" "$awk_lib"'
    BEGIN { np = split(profs, P, " "); labels_init()
            split(na, N, " "); for (i in N) isna[N[i]] = 1; nr = split(rates, R, " ") }
    ($1 == "rate" || ($1 == "attr" && index($0, " case=4x "))) { parse(); if (f["failed"] || !f["workers_cpu_ns"]) next
      k = f["hz"] SUBSEP f["prof"]; v[k, ++n[k]] = f["samples"] / (f["workers_cpu_ns"] / 1e9) / f["hz"] }
    END { for (j = 1; j <= np; j++) { p = P[j]; printf "%-19s", lab[p]
        for (i = 1; i <= nr; i++) { k = R[i] SUBSEP p
          if (isna[p] || !n[k]) { printf " %10s", "n/a"; continue }
          delete m; for (x = 1; x <= n[k]; x++) m[x] = v[k, x]
          printf " %10.3f", median(m, n[k]) }
        printf "\n" } }' "$results"

  # 3. CPU per sample.
  printf '\n3. CPU per sample at %s Hz, %s threads on %s cores, the same fixed work in each run:\n' "$hz_cost" "$ncpu" "$ncpu"
  printf '   (process CPU - process CPU with no profiler) / samples, medians of the runs.\n'
  printf '   floor = a per-thread perf task-clock overflow signal to a handler that only\n'
  printf '   counts; "- floor" is what the profiler adds to that. Pause: snapprof'"'"'s\n'
  printf '   target pause (handler entry to exit) from its summary. perf: not in-process.\n'
  printf '%-19s %9s %10s %11s %9s | %9s %9s\n' profiler samples "CPU (s)" "us/sample" "- floor" "pause p50" "p99"
  awk -v labels="$labels" -v na="$na_list" "$awk_lib"'
    BEGIN { labels_init()
            split(na, N, " "); for (i in N) isna[N[i]] = 1; order = "none floor gperftools snap-perf snap-timer snap-handshake" }
    $1 == "cost" { parse(); p = f["prof"]; k = ++n[p]; cpu[p, k] = f["process_cpu_ns"] / 1e9
      s[p, k] = p == "floor" ? f["floor_signals"] : f["samples"]
      if (f["pause_p50_us"] != "") { p50[p, ++np50[p]] = f["pause_p50_us"]; p99[p, np50[p]] = f["pause_p99_us"] } }
    function med(arr, p, cnt,    x) { delete m; for (x = 1; x <= cnt; x++) m[x] = arr[p, x]; return median(m, cnt) }
    END { no = split(order, O, " "); base = n["none"] ? med(cpu, "none", n["none"]) : ""
      if (n["floor"]) { fl = (med(cpu, "floor", n["floor"]) - base) / med(s, "floor", n["floor"]) * 1e6 }
      for (i = 1; i <= no; i++) { p = O[i]
        if (isna[p] || !n[p]) { if (p != "none") printf "%-19s %9s\n", lab[p], (p == "floor" ? "failed" : "n/a"); continue }
        c = med(cpu, p, n[p]); smp = p == "none" ? 0 : med(s, p, n[p])
        if (p == "none") { printf "%-19s %9s %10.3f %11s %9s |\n", lab[p], "-", c, "-", "-"; continue }
        per = smp > 0 ? (c - base) / smp * 1e6 : 0
        diff = (p == "floor" || !n["floor"]) ? "-" : sprintf("%9.1f", per - fl)
        pa = np50[p] ? sprintf("%9.1f %9.1f", med(p50, p, np50[p]), med(p99, p, np50[p])) : sprintf("%9s %9s", "-", "-")
        printf "%-19s %9d %10.3f %11.1f %9s | %s\n", lab[p], smp, c, per, diff, pa } }' "$results"

  # 4. EINTR.
  printf '\n4. EINTR of sleeping threads (nanosleep, poll, timerfd read; each wakes every\n'
  printf '   ms) beside %s busy threads, CPU mode: early returns in all runs as\n' "$ncpu"
  printf '   nanosleep/poll/read, and the sleeps they were out of\n'
  printf '%-19s' profiler; for hz in "${rates[@]}"; do printf ' %20s' "$hz Hz"; done; printf ' %9s\n' sleeps
  awk -v profs="$prof_list" -v labels="$labels" -v na="$na_list" -v rates="${rates[*]}" "$awk_lib"'
    BEGIN { np = split(profs, P, " "); labels_init()
            split(na, N, " "); for (i in N) isna[N[i]] = 1; nr = split(rates, R, " ") }
    $1 == "eintr" { parse(); k = f["hz"] SUBSEP f["prof"]; seen[k] = 1
      ns[k] += f["nanosleep_eintr"]; po[k] += f["poll_eintr"]; rd[k] += f["read_eintr"]
      calls[f["prof"]] += f["nanosleep_calls"] + f["poll_calls"] + f["read_calls"] }
    END { for (j = 1; j <= np; j++) { p = P[j]; printf "%-19s", lab[p]
        for (i = 1; i <= nr; i++) { k = R[i] SUBSEP p
          printf " %20s", (isna[p] || !seen[k]) ? "n/a" : ns[k] "/" po[k] "/" rd[k] }
        printf " %9s\n", calls[p] ? calls[p] : "" } }' "$results"

  # 5. Churn.
  printf '\n5. Thread churn at 100 Hz: %s creators each starting and joining threads that\n' "$ncpu"
  printf '   do ~100 us of work; threads per process CPU-second, median of the runs\n'
  printf '%-19s %12s %8s %10s\n' profiler threads/CPU-s "x none" "us/thread"
  awk -v profs="none $prof_list" -v labels="$labels" -v na="$na_list" "$awk_lib"'
    BEGIN { np = split(profs, P, " "); labels_init()
            split(na, N, " "); for (i in N) isna[N[i]] = 1 }
    $1 == "churn" { parse(); p = f["prof"]; k = ++n[p]; v[p, k] = f["threads"] / (f["process_cpu_ns"] / 1e9)
      w[p, k] = f["work_cpu_ns"] / f["threads"] / 1e3 }
    END { for (j = 1; j <= np; j++) { p = P[j]; if (isna[p] || !n[p]) { printf "%-19s %12s\n", lab[p], "n/a"; continue }
        delete m; for (x = 1; x <= n[p]; x++) m[x] = v[p, x]; t = median(m, n[p]); if (p == "none") base = t
        delete m; for (x = 1; x <= n[p]; x++) m[x] = w[p, x]
        printf "%-19s %12.0f %8.3f %10.1f\n", lab[p], t, base ? t / base : 0, median(m, n[p]) } }' "$results"
} >"$table"
bench_finish_table "$table"

# ---------------------------------------------------------------------------
# docs/BENCHMARKS.md and its plot
# ---------------------------------------------------------------------------

png=$root/docs/bench_attribution.png
if command -v gnuplot >/dev/null; then
  # One line per profiler that ran: its column is 2 + its place in the list.
  plots=()
  for ((i = 0; i < ${#profilers[@]}; i++)); do
    p=${profilers[$i]}
    [ -z "${why_na[$p]:-}" ] && plots+=("'$plotdata' using 1:$((i + 3)):xtic(2) title '${label[$p]}' lw 2 pt 7 ps 1.2")
  done
  {
    echo "set terminal pngcairo size 900,520 font 'sans,11'"
    echo "set output '$png'"
    echo "set title 'Attribution error against oversubscription (${hz_attr} Hz$([ "$quick" = 1 ] && echo ', --quick run: not meaningful'))'"
    echo "set termoption noenhanced"
    echo "set ylabel 'worst of hot_a, hot_b, hot_c: |profile share - truth| (pp)'"
    echo "set xlabel 'program threads on $ncpu cores (the last point: beside 2 busy processes)'"
    echo "set datafile missing 'NaN'"
    echo "set key outside right top"
    echo "set grid ytics mytics"
    echo "set logscale y"
    echo "set yrange [0.05:100]"
    echo "set xrange [0.7:4.3]"
    echo "set style data linespoints"
    echo "set arrow from 0.7,1 to 4.3,1 nohead dashtype 2 lc rgb 'gray40'"
    echo "set label 'issue 10 target: 1 pp' at 4.25,0.8 right tc rgb 'gray40'"
    (IFS=,; echo "plot ${plots[*]}")
  } >"$work/plot.gp"
  gnuplot "$work/plot.gp"
else
  say "bench_trigger: gnuplot is missing (bash bench/setup.sh): no plot"
fi

# The section of docs/BENCHMARKS.md below its heading.
section_body() {
  if [ "$quick" = 1 ]; then
    echo "**A \`--quick\` run: a fraction of a CPU-second per cell and a few hundred samples,"
    echo "on whatever else the machine was doing, so the figures are not meaningful; it shows"
    echo "the table's shape. The full run, \`bash bench/bench_trigger.sh\` (about 25 minutes on"
    echo "an idle 2-vCPU machine), replaces it.**"
    echo
  fi
  triggers_note="" missing_note=""
  for p in snap-perf snap-timer snap-handshake; do
    if [ -z "${why_na[$p]:-}" ]; then
      triggers_note="$triggers_note ${label[$p]#snapprof/}"
    else
      missing_note="$missing_note ${label[$p]#snapprof/}"
    fi
  done
  if [ -n "$missing_note" ]; then
    echo "**snapprof triggers measured:${triggers_note:- none} only.** Not measured, shown as n/a"
    echo "(\`snapprof record --trigger X\` refused them):$missing_note."
  else
    echo "snapprof triggers measured:$triggers_note."
  fi
  echo
  echo "- machine: $ncpu CPUs ($cpu_model), kernel $kernel, perf_event_paranoid $paranoid;"
  echo "  $machine_line"
  bench_section_made_by
  echo "- peers: $(perf --version 2>/dev/null || echo 'perf n/a'); gperftools $(dpkg-query -W -f='${Version}' libgoogle-perftools-dev 2>/dev/null || echo 'n/a')"
  echo "  (\`LD_PRELOAD=libprofiler.so CPUPROFILE=... CPUPROFILE_FREQUENCY=...\`); profiles read with"
  echo "  \`go tool pprof -top -noinlines\` and \`perf report --no-children --sort sym\`"
  echo
  bench_section_table "$table"
  echo "![attribution error against oversubscription](bench_attribution.png)"
  echo
  echo "How each row is measured, and how to read it: [bench/README.md](../bench/README.md#bench_trigger)."
  echo
}
bench_write_section "## Samples timed by each thread's own CPU clock (issue 10)" section_body
say "bench_trigger: wrote $root/docs/BENCHMARKS.md and $png"
