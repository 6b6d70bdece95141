#!/usr/bin/env bash
# bench_wall.sh: issue 11's benchmark. Runs the workloads of bench_wall.c
# under gperftools' wall mode (CPUPROFILE_REALTIME=1), `snapprof record
# --wall --wall-blocked signal` (the handshake signals every thread that ran
# since its last sample) and `snapprof record --wall --wall-blocked proc`
# (blocked threads are read from /proc and process_vm_readv, never
# signalled), and that with `--trigger perf` (running threads captured by
# their own perf events: no signal from the sampler at all) side by side in
# one run, prints the table and writes it, with
# the machine and the command, as a section of docs/BENCHMARKS.md. It prints
# figures and never judges them; bench/README.md says how to read them.
#
# usage: bench/bench_wall.sh [--quick] [--cost-only] [--build DIR] [--no-docs]
#   --quick    about a minute instead of ten; figures not meaningful
#   --cost-only  only part 4's cost runs (about a minute; implies --no-docs)
#   --build    the CMake build tree (default: build)
#   --no-docs  print the table only
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
cost_only=0
command_line="bash bench/bench_wall.sh${*:+ $*}"
bench_option() {
  case $1 in
    --cost-only) cost_only=1 docs=0 ;;
    *) return 1 ;;
  esac
}
bench_parse_args "[--quick] [--cost-only] [--build DIR] [--no-docs]" "$@"

W=$build/bench/bench_wall
SNAP=$build/cli/snapprof
bench_require bench_wall "$W" "$SNAP"

ncpu=$(nproc)
rates=(100 1000 4000)  # early returns
hz_main=1000           # completeness, wall totals, the cost runs
wait_us=2000 work_us=300
cost_big=16            # threads in the cost runs (and 1, to take the tick's own cost off)
stack_kib=16           # the frame below each cost thread's wait
if [ "$quick" = 1 ]; then
  seconds=1   runs=2
  cost_seconds=1
else
  seconds=3   runs=10
  cost_seconds=3
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/bench_wall.XXXXXX")
trap 'rm -rf "$work"' EXIT
results=$work/results
: >"$results"

# ---------------------------------------------------------------------------
# The profilers
# ---------------------------------------------------------------------------

profilers=(gperftools snap-signal snap-proc snap-proc-perf)
declare -A why_na=() label=() snap_args=()
label[gperftools]="gperftools"
label[snap-signal]="snapprof/signal"
label[snap-proc]="snapprof/proc"
label[snap-proc-perf]="snapprof/proc+perf"
# snapprof's record options for each: the handshake's ticks (for running
# threads too with proc), or (proc+perf, the default where perf events are
# allowed) per-thread perf events timing the running threads' captures.
snap_args[snap-signal]="--wall-blocked signal --trigger handshake"
snap_args[snap-proc]="--wall-blocked proc --trigger handshake"
snap_args[snap-proc-perf]="--wall-blocked proc --trigger perf"

libprofiler=$(bench_libprofiler)
[ -n "$libprofiler" ] || why_na[gperftools]="libprofiler.so.0 not found (bash bench/setup.sh)"
for p in snap-signal snap-proc snap-proc-perf; do
  # shellcheck disable=SC2086 # the options are words
  if ! "$SNAP" record -q --wall ${snap_args[$p]} -o "$work/probe.pb.gz" -- \
      "$W" sleepers --seconds 0.05 >/dev/null 2>"$work/probe.err"; then
    why_na[$p]="record --wall ${snap_args[$p]}: $(head -n 1 "$work/probe.err")"
  fi
done
mapfile -t available < <(bench_available "${profilers[@]}")

# run_one PROFILER HZ TAG ARGS...: runs the workload with ARGS under PROFILER
# at HZ; leaves TAG.out (its line), TAG.err and the profile in $work.
# Returns nonzero when the program failed or wrote no line.
run_one() {
  local prof=$1 hz=$2 tag=$work/$3
  shift 3
  local rc=0
  case $prof in
    gperftools)
      # env is the last hop: LD_PRELOAD must reach only the workload.
      # CPUPROFILE_REALTIME=1: ITIMER_REAL and SIGALRM, its wall mode.
      env LD_PRELOAD="$libprofiler" CPUPROFILE="$tag.prof" CPUPROFILE_REALTIME=1 \
        CPUPROFILE_FREQUENCY="$hz" "$W" "$@" >"$tag.out" 2>"$tag.err" || rc=$? ;;
    snap-*)
      # shellcheck disable=SC2086 # the options are words
      "$SNAP" record -F "$hz" --wall ${snap_args[$prof]} -o "$tag.pb.gz" -- "$W" "$@" \
        >"$tag.out" 2>"$tag.err" || rc=$? ;;
  esac
  bench_check_run bench_wall BENCH_WALL "$prof" "$rc" "$tag" "$@"
}

# kv TAG: the workload's line as key=value words.
kv() { sed -n '/^BENCH_WALL /{s/^BENCH_WALL [a-z]* //; p;}' "$work/$1.out"; }

# stats_of TAG: snapprof's stats of the run as key=value words (s_KEY).
stats_of() {
  "$SNAP" stats --raw "$work/$1.pb.gz" 2>/dev/null |
    awk '$1 ~ /^(samples|samples_signalled|samples_reused|samples_blocked|wall_copy_raced|sampler_cpu_ns|ticks|ticks_missed|failed_total|failed\.thread_exited|failed\.tid_recycled|failed\.timeout)$/ {
           k = $1; sub(/\./, "_", k); printf " s_%s=%s", k, $2 }'
}

# threads_of TAG: one line per thread of the profile, from `go tool pprof
# -raw` (every sample with its values and labels, then the locations):
# "thread tid=T samples=N full=F blocked=B blocked_full=BF wall_ns=W cpu_ns=C"
# where full counts the samples whose stack holds the thread's own function
# (sleeper_*, busy, main) and start_thread or __libc_start_main, the entry.
threads_of() {
  go tool pprof -raw "$work/$1.pb.gz" 2>/dev/null | awk '
    /^samples\/count/ { insamples = 1; next }
    /^Locations/ { insamples = 0; inloc = 1; next }
    /^Mappings/ { inloc = 0; next }
    insamples && /^ *[0-9]+ +[0-9]+ +[0-9]+:/ {
      n++; cnt[n] = $1; cpu[n] = $2; sub(/:$/, "", $3); wall[n] = $3
      locs[n] = ""; for (i = 4; i <= NF; i++) locs[n] = locs[n] " " $i
      next }
    insamples && /:\[/ {
      if (match($0, /thread_id:\[[0-9]+\]/)) tid[n] = substr($0, RSTART + 11, RLENGTH - 12)
      if (match($0, /state:\[[a-z]+\]/)) state[n] = substr($0, RSTART + 7, RLENGTH - 8)
      next }
    inloc && /^ +[0-9]+: 0x/ { id = $1; sub(/:$/, "", id); fn[id] = " " $4 " "; next }
    inloc && /^ +[^ ]/ && id != "" { fn[id] = fn[id] $1 " " }
    END {
      for (s = 1; s <= n; s++) {
        t = tid[s]; if (t == "") t = "none"
        split(locs[s], L, " "); stack = ""
        for (i in L) stack = stack fn[L[i]]
        own = stack ~ / (sleeper_nanosleep|sleeper_read|sleeper_cond|busy|main) /
        entry = stack ~ / (start_thread|__libc_start_main|__libc_start_call_main) /
        S[t] += cnt[s]; Wn[t] += wall[s]; C[t] += cpu[s]
        if (own && entry) F[t] += cnt[s]
        if (state[s] == "blocked") { B[t] += cnt[s]; if (own && entry) BF[t] += cnt[s] }
      }
      for (t in S)
        printf "thread tid=%s samples=%d full=%d blocked=%d blocked_full=%d wall_ns=%.0f cpu_ns=%.0f\n",
          t, S[t], F[t], B[t], BF[t], Wn[t], C[t]
    }'
}

# ---------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------

bench_machine_start
calib=$("$W" calibrate | sed -n 's/^BENCH_WALL calibrate //p')
say "bench_wall: $ncpu CPUs, $cpu_model, kernel $kernel, load $load"
say "bench_wall: system calls here: $calib"
say "bench_wall: profilers: ${available[*]}"

# ---------------------------------------------------------------------------
# 1-3. The sleeping threads: early returns at each rate; at 1 kHz also the
#      completeness of their stacks and their wall totals
# ---------------------------------------------------------------------------

sleeper_runs=$runs
[ "$cost_only" = 1 ] && sleeper_runs=0
for ((r = 1; r <= sleeper_runs; r++)); do
  for hz in "${rates[@]}"; do
    for p in "${available[@]}"; do
      tag=sl-$hz-$p-$r
      say "1. sleepers $hz Hz: ${label[$p]} run $r of $runs"
      if run_one "$p" "$hz" "$tag" sleepers --seconds "$seconds" --wait-us "$wait_us" \
        --work-us "$work_us"; then
        line=$(kv "$tag")
        if [ "${p#snap-}" != "$p" ]; then
          record sleepers hz="$hz" prof="$p" run="$r" "$line" "$(stats_of "$tag")"
          if [ "$hz" = "$hz_main" ]; then
            threads_of "$tag" | while read -r _ rest; do
              record thread hz="$hz" prof="$p" run="$r" "$rest" "$line"
            done
          fi
        else
          record sleepers hz="$hz" prof="$p" run="$r" "$line"
        fi
      else
        record sleepers hz="$hz" prof="$p" run="$r" failed=1
      fi
      rm -f "$work/$tag".*
    done
  done
done

# ---------------------------------------------------------------------------
# 4. The sampler's CPU per sample: threads that never wake (every sample a
#    reused one) and threads that wake every 300 us (a new copy each tick),
#    with 1 and with $cost_big threads, so that the difference is the cost
#    of the extra threads' samples without the tick's own
# ---------------------------------------------------------------------------

for kind in blocked wakers; do
  for n in 1 "$cost_big"; do
    for p in "${available[@]}"; do
      [ "$p" = gperftools ] && continue # one sample per tick, no per-thread cost
      tag=cost-$kind-$n-$p
      say "4. cost: $kind, $n threads: ${label[$p]}"
      args=(cost --threads "$n" --seconds "$cost_seconds" --stack-kib "$stack_kib")
      if [ "$kind" = blocked ]; then args+=(--blocked); else args+=(--wait-us 300); fi
      if run_one "$p" "$hz_main" "$tag" "${args[@]}"; then
        record cost kind="$kind" n="$n" prof="$p" "$(kv "$tag")" "$(stats_of "$tag")"
      fi
      rm -f "$work/$tag".*
    done
  done
done

# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------

bench_machine_end
awk_lib=$bench_awk_lib
prof_list="${profilers[*]}"
labels=$(bench_labels "${profilers[@]}")
na_list=$(bench_na "${profilers[@]}")

table=$work/table.txt
{
  bench_table_head bench_wall "$ncpu"
  # What a wall sample is made of, priced on this machine with no profiler.
  printf '%s\n' "$calib" | awk '{ for (i = 1; i <= NF; i++) { k = index($i, "="); v[substr($i, 1, k - 1)] = substr($i, k + 1) }
    printf "system calls here, us each (bench_wall calibrate, no profiler): bare %.2f, pread of\n", v["syscall_ns"] / 1e3
    printf "a sleeping thread'"'"'s /proc/self/task/TID/syscall %.2f, its CPU clock %.2f,\n", v["proc_syscall_pread_ns"] / 1e3, v["thread_cpu_clock_ns"] / 1e3
    printf "process_vm_readv of 16 KiB of its stack %.2f\n", v["process_vm_readv_16k_ns"] / 1e3 }'
  printf 'workload: sleeper_nanosleep, sleeper_read (a pipe), sleeper_cond (timedwait), each\n'
  printf '%s us of CPU after every %s us wait, beside one busy thread; %s s a run, %s run(s)\n' \
    "$work_us" "$wait_us" "$seconds" "$runs"

  # 1. Early returns.
  printf '\n1. Early returns of the sleeping threads, all runs: nanosleep/read/cond\n'
  printf '   (EINTR, or a timed wait back before its deadline unsignalled), and the\n'
  printf '   waits they were out of; worst = the most in one run\n'
  printf '%-18s' profiler; for hz in "${rates[@]}"; do printf ' %16s %6s' "$hz Hz" worst; done
  printf ' %8s\n' waits
  awk -v profs="$prof_list" -v labels="$labels" -v na="$na_list" -v rates="${rates[*]}" "$awk_lib"'
    BEGIN { np = split(profs, P, " "); labels_init(); split(na, N, " "); for (i in N) isna[N[i]] = 1
            nr = split(rates, R, " ") }
    $1 == "sleepers" { parse(); k = f["hz"] SUBSEP f["prof"]
      if (f["failed"]) { failed[k]++; next }
      seen[k]++; a[k] += f["nanosleep_early"]; b[k] += f["read_early"]; c[k] += f["cond_early"]
      e = f["nanosleep_early"] + f["read_early"] + f["cond_early"]; if (e > worst[k]) worst[k] = e
      waits[f["prof"]] += f["nanosleep_waits"] + f["read_waits"] + f["cond_waits"] }
    END { for (j = 1; j <= np; j++) { p = P[j]; printf "%-18s", lab[p]
        for (i = 1; i <= nr; i++) { k = R[i] SUBSEP p
          if (isna[p] || !seen[k]) { printf " %16s %6s", "n/a", ""; continue }
          printf " %16s %6d", a[k] "/" b[k] "/" c[k] (failed[k] ? " (" failed[k] " failed)" : ""), worst[k] }
        printf " %8s\n", waits[p] ? waits[p] : "" } }' "$results"

  # 2. Completeness and 3. wall totals, per thread, 1 kHz.
  printf '\n2. Completeness at %s Hz, runs pooled: per thread, the share of its samples\n' "$hz_main"
  printf '   whose stack holds its own function (sleeper_*, busy, main) and the thread\n'
  printf '   entry (start_thread, __libc_start_main); all samples, then those labelled\n'
  printf '   state=blocked. 3. Its wall total over its own elapsed time (the workload'"'"'s\n'
  printf '   clock from its first to its last line): pooled, the worst run, and the runs\n'
  printf '   more than 2 %% off.\n'
  printf '   gperftools: n/a (its profile has no threads)\n'
  printf '%-18s %-10s %8s %8s %8s %8s | %9s %10s %6s\n' profiler thread samples complete blocked complete \
    "wall/elap" "worst run" ">2%"
  awk -v profs="$prof_list" -v labels="$labels" -v na="$na_list" "$awk_lib"'
    BEGIN { np = split(profs, P, " "); labels_init(); split(na, N, " "); for (i in N) isna[N[i]] = 1
            nt = split("nanosleep read cond busy main", T, " ") }
    $1 == "thread" { parse(); p = f["prof"]; role = ""
      for (i = 1; i <= nt; i++) if (f[T[i] "_tid"] == f["tid"]) role = T[i]
      if (role == "") next
      k = p SUBSEP role; S[k] += f["samples"]; F[k] += f["full"]; B[k] += f["blocked"]; BF[k] += f["blocked_full"]
      el = role == "main" ? f["main_elapsed_ns"] : f[role "_elapsed_ns"]
      Wt[k] += f["wall_ns"]; E[k] += el
      d = el > 0 ? 100 * (f["wall_ns"] - el) / el : 0; if (d * d > worst[k] * worst[k] || !(k in worst)) worst[k] = d
      runs[k]++; if (d > 2 || d < -2) off[k]++ }
    function pct(a, b) { return b ? sprintf("%7.2f%%", 100 * a / b) : sprintf("%8s", "-") }
    END { for (j = 1; j <= np; j++) { p = P[j]; if (p == "gperftools") continue
        for (i = 1; i <= nt; i++) { k = p SUBSEP T[i]
          if (isna[p] || !S[k]) { printf "%-18s %-10s %8s\n", lab[p], T[i], "n/a"; continue }
          printf "%-18s %-10s %8d %8s %8d %8s | %8.2f%% %+9.2f%% %6s\n", lab[p], T[i], S[k], pct(F[k], S[k]),
            B[k], pct(BF[k], B[k]), 100 * Wt[k] / E[k], worst[k], (off[k] + 0) "/" runs[k] } } }' "$results"

  # 4. The sampler's CPU.
  printf '\n4. Sampler CPU per sample (stats: sampler_cpu_ns / samples) in the sleepers runs,\n'
  printf '   with what the samples were: blocked = copied without a signal, reused = the\n'
  printf '   last stack again (the thread did not run), signalled = the handshake; raced =\n'
  printf '   copies dropped because the thread ran meanwhile; ticks: done and missed; failed:\n'
  printf '   failed samples, of them exited/recycled (the thread was then dropped) and\n'
  printf '   timeouts; runs pooled\n'
  printf '%-18s %7s %9s %8s %8s %8s %9s %7s %8s %8s %14s\n' profiler rate us/sample samples blocked reused \
    signalled raced ticks missed "failed (e/r/t)"
  awk -v profs="$prof_list" -v labels="$labels" -v rates="${rates[*]}" "$awk_lib"'
    BEGIN { np = split(profs, P, " "); labels_init(); nr = split(rates, R, " ") }
    $1 == "sleepers" { parse(); if (f["failed"] || f["s_samples"] == "") next
      k = f["prof"] SUBSEP f["hz"]; seen[k] = 1; cpu[k] += f["s_sampler_cpu_ns"]; s[k] += f["s_samples"]
      bl[k] += f["s_samples_blocked"]; re[k] += f["s_samples_reused"]; sg[k] += f["s_samples_signalled"]
      ra[k] += f["s_wall_copy_raced"]; ti[k] += f["s_ticks"]; mi[k] += f["s_ticks_missed"]
      fa[k] += f["s_failed_total"]; fe[k] += f["s_failed_thread_exited"]; fr[k] += f["s_failed_tid_recycled"]
      ft[k] += f["s_failed_timeout"] }
    END { for (j = 1; j <= np; j++) { p = P[j]; if (p == "gperftools") continue
        for (i = 1; i <= nr; i++) { k = p SUBSEP R[i]; if (!seen[k]) continue
          printf "%-18s %7s %9.2f %8d %8d %8d %9d %7d %8d %8d %14s\n", lab[p], R[i] " Hz", s[k] ? cpu[k] / s[k] / 1e3 : 0,
            s[k], bl[k], re[k], sg[k], ra[k], ti[k], mi[k], fa[k] " (" fe[k] "/" fr[k] "/" ft[k] ")" } } }' "$results"

  printf '\n   The cost runs, %s Hz, %s s: N threads, each with a %s KiB frame below its wait,\n' \
    "$hz_main" "$cost_seconds" "$stack_kib"
  printf '   that block in a read the whole run (blocked) or wake every 300 us (wakers)\n'
  printf '%-18s %-8s %3s %9s %8s %8s %8s %9s %7s\n' profiler case N us/sample samples blocked reused \
    signalled raced
  awk -v profs="$prof_list" -v labels="$labels" -v big="$cost_big" "$awk_lib"'
    BEGIN { np = split(profs, P, " "); labels_init() }
    $1 == "cost" { parse(); k = f["prof"] SUBSEP f["kind"] SUBSEP f["n"]; seen[k] = 1
      cpu[k] = f["s_sampler_cpu_ns"]; s[k] = f["s_samples"]; bl[k] = f["s_samples_blocked"]
      re[k] = f["s_samples_reused"]; sg[k] = f["s_samples_signalled"]; ra[k] = f["s_wall_copy_raced"] }
    # d(X): the difference between the runs with big threads and with 1.
    function d(arr, p, kind) { return arr[p, kind, big] - arr[p, kind, 1] }
    function have(p, kind) { return seen[p, kind, 1] && seen[p, kind, big] }
    END { for (j = 1; j <= np; j++) { p = P[j]
        for (c = 1; c <= 2; c++) { kind = c == 1 ? "blocked" : "wakers"
          for (m = 1; m <= 2; m++) { n = m == 1 ? 1 : big; k = p SUBSEP kind SUBSEP n; if (!seen[k]) continue
            printf "%-18s %-8s %3d %9.2f %8d %8d %8d %9d %7d\n", lab[p], kind, n, s[k] ? cpu[k] / s[k] / 1e3 : 0,
              s[k], bl[k], re[k], sg[k], ra[k] } } }
      # Per kind of sample, the tick'"'"'s own work taken off by the difference
      # between the runs with big threads and with 1: a reused sample from the
      # blocked runs (all but a few of their samples); a signalled one from
      # the signal mode'"'"'s wakers, less their reused ones; a new copy from
      # the proc mode'"'"'s wakers, less their reused and signalled ones.
      printf "\n   Per sample of each kind, us of sampler CPU (from the differences above; a\n"
      printf "   copy dropped as raced counts in the new copies'"'"' cost):\n"
      printf "%-18s %10s %10s %10s\n", "profiler", "reused", "signalled", "new copy"
      for (j = 1; j <= np; j++) { p = P[j]; if (!have(p, "blocked")) continue
        ds = d(s, p, "blocked"); r[p] = ds > 0 ? d(cpu, p, "blocked") / ds : -1 }
      sig = "snap-signal"
      if (r[sig] > 0 && have(sig, "wakers") && d(sg, sig, "wakers") > 0)
        sgc = (d(cpu, sig, "wakers") - r[sig] * d(re, sig, "wakers")) / d(sg, sig, "wakers")
      else sgc = -1
      for (j = 1; j <= np; j++) { p = P[j]; if (!(p in r)) continue
        one = r[p] >= 0 ? sprintf("%10.2f", r[p] / 1e3) : sprintf("%10s", "-")
        two = p == sig && sgc >= 0 ? sprintf("%10.2f", sgc / 1e3) : sprintf("%10s", "-")
        three = sprintf("%10s", "-")
        if (p != sig && r[p] >= 0 && sgc >= 0 && have(p, "wakers") && d(bl, p, "wakers") > 0)
          three = sprintf("%10.2f", (d(cpu, p, "wakers") - r[p] * d(re, p, "wakers") - sgc * d(sg, p, "wakers")) / d(bl, p, "wakers") / 1e3)
        printf "%-18s %s %s %s\n", lab[p], one, two, three } }' "$results"
} >"$table"
bench_finish_table "$table"

# The section of docs/BENCHMARKS.md below its heading.
section_body() {
  if [ "$quick" = 1 ]; then
    echo "**A \`--quick\` run: $runs run(s) of $seconds s per cell, so the figures are not"
    echo "meaningful; it shows the table's shape. The full run, \`bash bench/bench_wall.sh\`,"
    echo "replaces it.**"
    echo
  fi
  echo "- machine: $ncpu CPUs ($cpu_model), kernel $kernel; load $load when it started;"
  echo "  $machine_line"
  if awk -v l="${load%% *}" -v n="$ncpu" 'BEGIN { exit !(l > n) }'; then
    echo "- **the machine was loaded by other work** (load ${load%% *} on $ncpu CPUs when the run"
    echo "  started): the threads, the sampler and the peers all waited for a CPU, so"
    echo "  missed ticks and per-sample CPU are those of a busy machine, not an idle one"
  fi
  bench_section_made_by
  echo "- peers: gperftools $(dpkg-query -W -f='${Version}' libgoogle-perftools-dev 2>/dev/null || echo 'n/a')"
  echo "  (\`LD_PRELOAD=libprofiler.so CPUPROFILE=... CPUPROFILE_REALTIME=1 CPUPROFILE_FREQUENCY=...\`);"
  echo "  snapprof profiles read with \`go tool pprof -raw\` and \`snapprof stats\`"
  echo
  bench_section_table "$table"
  echo "How each row is measured, and how to read it: [bench/README.md](../bench/README.md#bench_wall)."
  echo
}
bench_write_section "## Wall mode: sleeping threads (issue 11)" section_body
say "bench_wall: wrote $root/docs/BENCHMARKS.md"
