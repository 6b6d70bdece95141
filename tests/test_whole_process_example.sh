#!/bin/sh
# Runs examples/whole_process.c, the README's "Embedding" example: one
# ProfilerStart() must profile a thread from before the start, one from
# after it and the main thread. Each does a fixed amount of work, so each
# one's function must be named in the profile.
# usage: test_whole_process_example.sh WHOLE_PROCESS_BINARY functions|file
# (file: only that a profile was written, for TSan, which defers signals.)
set -eu
work=$(mktemp -d "${TMPDIR:-/tmp}/snapprof-whole-XXXXXX")
trap 'rm -rf "$work"' EXIT
# Our pprof (SNAPPROF_FORMAT), which names the functions in the file;
# ProfilerStart() alone writes gperftools' format (gperftools_* tests).
SNAPPROF_FORMAT=pprof "$1" "$work/w.pb.gz"
gzip -dc "$work/w.pb.gz" > "$work/w.pb"
test -s "$work/w.pb"
[ "${2:-functions}" = file ] && exit 0
rc=0
for f in work_before work_after work_main; do
  grep -aq "$f" "$work/w.pb" || { echo "no $f in the profile"; rc=1; }
done
exit $rc
