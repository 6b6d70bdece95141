# Sourced by the bench scripts (all but the standalone bench_nginx_kernel.sh,
# heap_hook_cost.sh, gperftools_unittest.sh and setup.sh): what they share.
# Strict mode with a word on a failed command, their options, the programs
# they need, the machine's figures around a run, the awk helpers of their
# tables, and their section of docs/BENCHMARKS.md, written leaving the other
# benchmarks' sections alone.
# The caller sets here (its own folder) before sourcing this file, and work
# and results before the runs (bench_workdir makes both); this file sets
# root (the source tree).

# set -e ends the script on a failed command; say which, so it never ends
# without a word.
set -Eeuo pipefail
trap 'echo "${0##*/}: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR
root=$(cd "$here/.." && pwd)

say() { printf '%s\n' "$*" >&2; }

# bench_workdir NAME: a private folder, work (NAME.XXXXXX under TMPDIR),
# with an empty results file in it, results. At exit the processes the
# script left in bench_pids (its background runs) are killed and work is
# removed.
bench_workdir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  results=$work/results
  : >"$results"
  bench_pids=()
  trap bench_cleanup EXIT
}
bench_cleanup() {
  local p
  for p in "${bench_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}

# record SECTION KEY=VALUE...: one line of the results file (an argument may
# hold several words: they are joined with spaces either way).
record() { printf '%s\n' "$*" >>"$results"; }

# bench_parse_args USAGE ARGS...: --quick, --build DIR, --no-docs into quick,
# build and docs; an option the function bench_option (when the script
# defines it) does not take is a usage error.
bench_parse_args() {
  local usage="usage: $0 $1"
  shift
  quick=0 build=$root/build docs=1
  while [ $# -gt 0 ]; do
    case $1 in
      --quick) quick=1 ;;
      --build) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
               build=$(cd "$2" && pwd); shift ;;
      --no-docs) docs=0 ;;
      *) if ! declare -F bench_option >/dev/null || ! bench_option "$1"; then
           echo "$usage" >&2; exit 2
         fi ;;
    esac
    shift
  done
}

# bench_require NAME PROGRAM...: ends the script unless each program is built
# and go (go tool pprof) is installed.
bench_require() {
  local name=$1 f
  shift
  for f in "$@"; do
    [ -x "$f" ] || { echo "$name: $f is missing: build first (cmake --build $build)" >&2; exit 1; }
  done
  command -v go >/dev/null || { echo "$name: go (go tool pprof) is missing: bash tools/setup.sh" >&2; exit 1; }
}

# bench_libprofiler: the path of gperftools' libprofiler.so.0, or nothing.
# No early exit in a reader of a pipe: under pipefail the writer's SIGPIPE
# would fail the assignment, and set -e would end the script without a word.
bench_libprofiler() {
  ldconfig -p 2>/dev/null | awk '$1 == "libprofiler.so.0" && !found { print $NF; found = 1 }'
}

# bench_check_run NAME MARK PROF RC TAG ARGS...: whether the run of PROF
# with ARGS exited 0 and wrote its MARK line to TAG.out; says why not.
bench_check_run() {
  local name=$1 mark=$2 prof=$3 rc=$4 tag=$5
  shift 5
  if [ "$rc" != 0 ] || ! grep -q "^$mark " "$tag.out"; then
    say "$name: $prof $*: exit $rc; stderr: $(tail -n 3 "$tag.err" | tr '\n' ' ')"
    return 1
  fi
}

# bench_machine_start: the machine before the runs (stat_before, started,
# t_start, cpu_model, kernel, commit, load); bench_machine_end: after them
# (elapsed, machine_line: busy, idle and steal of all CPUs meanwhile).
bench_read_stat() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $5 + $6, $9; exit }' /proc/stat; }
bench_machine_start() {
  stat_before=$(bench_read_stat)
  started=$(date -u '+%Y-%m-%d %H:%M UTC')
  t_start=$(date +%s)
  cpu_model=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  [ -n "$cpu_model" ] || cpu_model=$(lscpu 2>/dev/null | awk -F': *' '/Model name/ && !m { m = $2 } END { print m }')
  kernel=$(uname -r)
  commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "?")
  git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit+changes"
  load=$(cut -d' ' -f1-3 /proc/loadavg)
}
bench_machine_end() {
  local stat_after
  stat_after=$(bench_read_stat)
  elapsed=$(($(date +%s) - t_start))
  machine_line=$(awk -v a="$stat_before" -v b="$stat_after" 'BEGIN {
    split(a, x, " "); split(b, y, " ");
    busy = y[1] - x[1]; idle = y[2] - x[2]; steal = y[3] - x[3]; t = busy + idle + steal;
    if (t > 0) printf "busy %.0f%%, idle %.0f%%, steal %.0f%% of all CPUs", 100 * busy / t, 100 * idle / t, 100 * steal / t }')
}

# The awk helpers of the tables: parse() reads a results line's key=value
# fields into f; labels_init() reads labels ("p=label;...") into lab.
# shellcheck disable=SC2016 # awk's own $i, not the shell's
bench_awk_lib='
function parse(    i, k) { delete f; for (i = 2; i <= NF; i++) { k = index($i, "="); f[substr($i, 1, k - 1)] = substr($i, k + 1) } }
function labels_init(    nl, L, i, k) { nl = split(labels, L, ";")
  for (i = 1; i <= nl; i++) { k = index(L[i], "="); lab[substr(L[i], 1, k - 1)] = substr(L[i], k + 1) } }
'

# bench_available PROFILER...: those available (no why_na), a line each;
# bench_labels PROFILER...: "p=label;" for each (from the array label);
# bench_na PROFILER...: those not available (why_na), space-separated.
bench_labels() {
  local p out=""
  for p in "$@"; do out="$out$p=${label[$p]};"; done
  printf '%s' "$out"
}
bench_available() {
  local p
  for p in "$@"; do [ -n "${why_na[$p]:-}" ] || printf '%s\n' "$p"; done
}
bench_na() {
  local p out=""
  for p in "$@"; do [ -n "${why_na[$p]:-}" ] && out="$out $p"; done
  printf '%s' "$out"
}

# bench_finish_table TABLE: ends the table with the machine's line and
# prints it; then, without --no-docs, returns (else ends the script).
bench_finish_table() {
  printf '\nmachine during the run: %s; the run took %d s\n' "$machine_line" "$elapsed" >>"$1"
  sed -i 's/ *$//' "$1" # padding of empty cells
  cat "$1"
  [ "$docs" = 1 ] || exit 0
}

# bench_section_made_by: the section's lines on how the table was made;
# bench_section_table TABLE: the table as a code block.
bench_section_made_by() {
  echo "- made by: \`$command_line\` (after \`bash bench/setup.sh\` and a RelWithDebInfo build),"
  echo "  at snapprof \`$commit\`, $started, in $elapsed s"
}
bench_section_table() {
  echo '```'
  cat "$1"
  echo '```'
  echo
}

# bench_write_section HEADING BODY: HEADING, a blank line and what the
# function BODY prints become the section HEADING of docs/BENCHMARKS.md (from
# the heading to the next "## " heading); the rest of the file stays.
bench_write_section() {
  local section=$work/section.md
  { echo "$1"; echo; "$2"; } >"$section"
  replace_section "$root/docs/BENCHMARKS.md" "$1" "$section" "$work"
}

# bench_write_table_section HEADING TABLE: the section HEADING of
# docs/BENCHMARKS.md made of the machine, how the table was made, TABLE, and
# a pointer to the calling script's head for what is run; says so on stderr.
bench_write_table_section() {
  section_table=$2
  bench_write_section "$1" bench_section_plain_body
  local name=${0##*/}
  say "${name%.sh}: wrote $root/docs/BENCHMARKS.md"
}
bench_section_plain_body() {
  echo "- machine: $(nproc) CPUs ($cpu_model), kernel $kernel; $machine_line"
  bench_section_made_by
  echo
  bench_section_table "$section_table"
  echo "What is run and how to read it: the head of \`bench/${0##*/}\`."
  echo
}

# replace_section MD HEADING SECTION_FILE WORKDIR: the lines from HEADING to
# the next "## " heading of MD become SECTION_FILE (which starts with
# HEADING); a section MD lacks is appended; a missing MD is made.
replace_section() {
  local md=$1 heading=$2 section=$3 work=$4
  if [ -f "$md" ]; then
    awk -v heading="$heading" -v section="$section" '
      function put(    l) { while ((getline l < section) > 0) print l; done = 1 }
      $0 == heading { put(); skip = 1; next }
      skip && /^## / { skip = 0 }
      !skip { print }
      END { if (!done) { print ""; put() } }' "$md" >"$work/md"
    # No trailing blank lines.
    sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' "$work/md" >"$md"
  else
    { echo "# Benchmarks"; echo; cat "$section"; } >"$md"
  fi
}

# bench_table_head NAME CPUS: the table's first lines: what ran on which
# machine, and each profiler that could not run, with why.
bench_table_head() {
  printf '%s: snapprof %s, %s CPUs (%s), kernel %s, load %s%s\n' \
    "$1" "$commit" "$2" "$cpu_model" "$kernel" "$load" \
    "$([ "$quick" = 1 ] && echo ' (--quick: figures are not meaningful)')"
  local p
  for p in "${profilers[@]}"; do
    [ -z "${why_na[$p]:-}" ] || printf '  %-18s n/a: %s\n' "${label[$p]}" "${why_na[$p]}"
  done
}
