#!/usr/bin/env bash
# fresh-check: the README's two commands on a clean Debian 12, as a new user
# runs them. Builds a bookworm root with `debootstrap --variant=minbase` from
# this machine's configured Debian mirror (the base is cached under
# /var/cache/snapprof-fresh-check/ and copied afresh for every run), installs
# only git and ca-certificates in it, clones the committed HEAD of this
# checkout into /root/snapprof and runs, as root in the chroot,
# `bash tools/demo.sh` and then `bash tools/test.sh`. Prints each one's exit
# status and wall time (the tail of a failing one's log; full logs in the
# root's /root and in /var/cache/snapprof-fresh-check/last-run/) and exits
# non-zero if either fails.
#
# Usage (as root): tools/fresh-check.sh [--keep] [--root DIR] [--refresh]
#   --keep      keep the root for inspection (default: removed at the end)
#   --root DIR  where to build the root (default: a new /var/tmp/snapprof-fresh-check.XXXXXX)
#   --refresh   debootstrap the cached base again
# The chroot shares this machine's kernel (perf_event_paranoid included).
set -euo pipefail

# Every mount below is made in a private mount namespace: the host never
# sees them, and they go away with this process even if it is killed.
if [ -z "${SNAPPROF_FRESH_CHECK_NS:-}" ] && [ "$(id -u)" = 0 ]; then
  SNAPPROF_FRESH_CHECK_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi

suite=bookworm
cache=/var/cache/snapprof-fresh-check
keep=0 refresh=0 root=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --refresh) refresh=1 ;;
    --root) [ $# -ge 2 ] || { echo "fresh-check: --root needs a directory" >&2; exit 2; }
            root=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "fresh-check: run as root (debootstrap, mount, chroot)" >&2; exit 2; }

log() { echo "fresh-check: $*" >&2; }
die() { log "$*"; exit 1; }

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
head=$(git -C "$repo" rev-parse HEAD)
branch=$(git -C "$repo" symbolic-ref -q --short HEAD || echo "detached")
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  log "note: uncommitted changes in $repo are not part of the check"
fi

# The configured mirror for $suite: one-line sources (deb [opts] URI SUITE ...)
# and deb822 .sources stanzas (Types: deb, URIs:, Suites: with $suite).
find_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '$1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == s) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" 'BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; uris = ""; suites = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          line = $i
          if (line ~ /^#/) continue
          n = index(line, ":"); if (n == 0) continue
          key = tolower(substr(line, 1, n - 1)); val = substr(line, n + 1)
          if (key == "types") types = val
          else if (key == "uris") uris = val
          else if (key == "suites") suites = val
          else if (key == "enabled") enabled = tolower(val)
        }
        gsub(/^[ \t]+|[ \t]+$/, "", enabled)
        if (enabled != "no" && (" " types " ") ~ /[ \t]deb[ \t]/ && (" " suites " ") ~ ("[ \t]" s "[ \t]")) {
          split(uris, u, " "); print u[1]; exit
        }
      }' "$f"
  done
}
mirror=$(find_mirror | awk 'NR == 1')
[ -n "$mirror" ] || die "no Debian mirror for $suite in /etc/apt/sources.list{,.d/}"

mkdir -p "$cache"
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -q && apt-get install -y -q --no-install-recommends debootstrap; } \
    >"$cache/host-apt.log" 2>&1 || { tail -n 20 "$cache/host-apt.log" >&2; die "could not install debootstrap"; }
fi

# The cached base: a plain minbase root, only ever written by debootstrap,
# never entered; each run works on a copy.
arch=$(dpkg --print-architecture)
base="$cache/$suite-minbase-$arch-$(printf %s "$mirror" | md5sum | cut -c1-8)"
exec 9>"$cache/lock"
flock 9
if [ "$refresh" = 1 ] || [ ! -f "$base/.complete" ]; then
  rm -rf --one-file-system "$base" "$base.new"
  log "debootstrap --variant=minbase $suite from $mirror (log: $base.log)"
  t0=$(date +%s)
  if ! debootstrap --variant=minbase --arch="$arch" "$suite" "$base.new" "$mirror" \
      >"$base.log" 2>&1; then
    tail -n 20 "$base.log" >&2
    rm -rf --one-file-system "$base.new"
    die "debootstrap failed"
  fi
  rm -rf "$base.new/var/cache/apt/archives/"*.deb
  touch "$base.new/.complete"
  mv "$base.new" "$base"
  log "base ready in $(($(date +%s) - t0)) s"
fi
flock -u 9

if [ -z "$root" ]; then
  root=$(mktemp -d /var/tmp/snapprof-fresh-check.XXXXXX)
else
  mkdir -p "$root"
  [ -z "$(ls -A "$root")" ] || die "--root $root is not empty"
fi
root=$(cd "$root" && pwd -P)

mounts=()
cleanup() {
  local rc=$? p m i
  # Processes still running inside the root (a test's stray child) are ours.
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null || true
  done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    m=${mounts[i]}
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
  # The logs outlive the root: the last run's are kept beside the base.
  rm -rf "$cache/last-run" && mkdir -p "$cache/last-run"
  cp "$root"/root/*.log "$cache/last-run/" 2>/dev/null || true
  if [ "$keep" = 1 ]; then
    log "kept the root: $root (chroot $root /bin/bash)"
  elif findmnt -rn -o TARGET | grep -q "^$root/"; then
    log "something is still mounted under $root: not removing it"
  else
    rm -rf --one-file-system "$root"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

log "root $root from $(basename "$base")"
cp -a "$base/." "$root/"
rm -f "$root/.complete"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"

mnt() { # mount args..., target last
  mount "$@"
  mounts+=("${!#}")
}
mnt -t proc proc "$root/proc"
mnt -t sysfs sysfs "$root/sys"
mnt --bind /dev "$root/dev"
mnt --bind /dev/pts "$root/dev/pts"
mnt -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"

# What a root login on a fresh machine has: no variables of ours.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "$1" </dev/null
}

log "installing git and ca-certificates in the root (log: /root/apt.log)"
if ! in_root 'export DEBIAN_FRONTEND=noninteractive; apt-get update -q &&
    apt-get install -y -q --no-install-recommends git ca-certificates' >"$root/root/apt.log" 2>&1; then
  tail -n 20 "$root/root/apt.log" >&2
  die "apt-get in the root failed"
fi

# The committed HEAD, cloned inside the root by its own git.
bundle_refs=(HEAD)
[ "$branch" != detached ] && bundle_refs+=("$branch")
git -C "$repo" bundle create "$root/tmp/snapprof.bundle" "${bundle_refs[@]}" >/dev/null 2>&1 ||
  die "git bundle create failed"
in_root 'git clone -q /tmp/snapprof.bundle /root/snapprof && git -C /root/snapprof rev-parse HEAD' \
  >"$root/root/clone.log" 2>&1 || { cat "$root/root/clone.log" >&2; die "git clone in the root failed"; }
[ "$(tail -n1 "$root/root/clone.log")" = "$head" ] || die "the clone is not at $head"
log "checking $(git -C "$repo" log -1 --format='%h %s' "$head" | cut -c1-70) ($branch)"

failed=0
run() { # name, the README command
  local name=$1 cmd=$2 t0 t1 rc=0
  t0=$(date +%s.%N)
  in_root "cd /root/snapprof && $cmd" >"$root/root/$name.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  printf 'fresh-check: %-20s exit %d, %s s\n' "$cmd:" "$rc" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')"
  if [ "$rc" != 0 ]; then
    failed=1
    log "tail of /root/$name.log:"
    tail -n 40 "$root/root/$name.log" | sed 's/^/  | /' >&2
  fi
  return 0
}
run demo 'bash tools/demo.sh'
run test 'bash tools/test.sh'
summary=$(grep -E 'tests passed, [0-9]+ tests failed out of' "$root/root/test.log" | tail -n1 || true)
[ -n "$summary" ] && log "ctest: $summary"
if [ "$failed" = 0 ]; then
  log "passed"
else
  log "FAILED (logs: $cache/last-run/)"
fi
exit "$failed"
