# Sourced by the bench scripts: writes one benchmark's section of
# docs/BENCHMARKS.md, leaving the other benchmarks' sections alone.

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
