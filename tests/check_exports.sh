#!/bin/sh
# The shared library exports the public API and nothing else: every
# defined dynamic symbol starts with snapprof_ (and not snapprof__, which
# marks internal functions).
set -eu
lib="$1"
syms=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//')
bad=$(printf '%s\n' "$syms" | grep -v '^snapprof_' | grep -v '^_init$' | grep -v '^_fini$' || true)
internal=$(printf '%s\n' "$syms" | grep '^snapprof__' || true)
count=$(printf '%s\n' "$syms" | grep -c '^snapprof_' || true)
if [ -n "$bad$internal" ]; then
  echo "unexpected exports from $lib:"; printf '%s\n' $bad $internal
  exit 1
fi
[ "$count" -ge 20 ] || { echo "only $count public symbols exported"; exit 1; }
echo "$count public symbols exported, nothing else"
