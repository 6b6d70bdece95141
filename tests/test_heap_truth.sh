#!/bin/sh
# heap_truth_consistent: bench/heap_truth's small mode (the heap benchmark's
# accuracy workload) prints a truth that adds up, and the blocks it counts
# in use at exit really are live (its --check: tags intact,
# malloc_usable_size, and glibc's mallinfo2 in-use total drops by at least
# their bytes when they are freed). usage: test_heap_truth.sh HEAP_TRUTH
set -u
rc=0
out=$("$1" --small --check) || rc=$?
[ "$rc" = 0 ] || { printf '%s\n' "$out"; echo "FAIL: heap_truth --small --check exited $rc"; exit 1; }
printf '%s\n' "$out"
printf '%s\n' "$out" | awk '
  function fail(m) { print "FAIL: " m; bad = 1 }
  # Values as numbers where they are numbers (awk compares strings otherwise).
  function num(v) { return v ~ /^[0-9]+$/ ? v + 0 : v }
  function kv(    i, k) { delete f; for (i = 3; i <= NF; i++) { k = index($i, "="); f[substr($i, 1, k - 1)] = num(substr($i, k + 1)) } }
  $1 == "truth" && $2 ~ /^path_/ { kv(); n++; name[n] = $2
    for (k in f) sum[k] += f[k]
    ab[$2] = f["alloc_bytes"]; ao[$2] = f["alloc_objects"]; ib[$2] = f["inuse_bytes"]; io[$2] = f["inuse_objects"]
    if (f["inuse_objects"] < 1 || f["inuse_bytes"] > f["alloc_bytes"] || f["inuse_objects"] > f["alloc_objects"])
      fail($2 ": in use must be > 0 and <= allocated")
    # Blocks of 16 B to 64 KiB: the mean size is between them.
    if (f["alloc_bytes"] < 16 * f["alloc_objects"] || f["alloc_bytes"] > 65536 * f["alloc_objects"])
      fail($2 ": mean block size out of 16 B..64 KiB")
    if (f["inuse_bytes"] < 16 * f["inuse_objects"] || f["inuse_bytes"] > 65536 * f["inuse_objects"])
      fail($2 ": mean block in use out of 16 B..64 KiB") }
  $1 == "truth" && $2 == "total" { kv(); for (k in f) total[k] = f[k]; have_total = 1 }
  $1 == "truth" && $2 == "run" { kv(); mib = f["mib"]; have_run = 1 }
  $1 == "check" { kv0 = $0; have_check = 1
    for (i = 2; i <= NF; i++) { k = index($i, "="); c[substr($i, 1, k - 1)] = num(substr($i, k + 1)) } }
  END {
    if (n != 3) fail("expected 3 paths, got " n)
    if (!have_total || !have_run || !have_check) fail("missing total, run or check line")
    for (k in sum) if (sum[k] != total[k]) fail("total " k "=" total[k] " but the paths add up to " sum[k])
    if (total["alloc_bytes"] < mib * 1048576) fail("allocated less than the " mib " MiB asked for")
    # Each path has its budget: 50, 30 and 20 % of the bytes asked for.
    if (ab["path_malloc"] < 0.50 * mib * 1048576 || ab["path_calloc_realloc"] < 0.30 * mib * 1048576 ||
        ab["path_memalign"] < 0.20 * mib * 1048576) fail("a path allocated less than its share")
    # Kept fractions by count: 10 %, 20 % (of the realloc results, half the
    # allocations) and 25 %, from a fixed seed.
    if (ao["path_malloc"] > 0 && (io["path_malloc"] / ao["path_malloc"] < 0.07 || io["path_malloc"] / ao["path_malloc"] > 0.13)) fail("path_malloc keeps not about 10 %")
    if (ao["path_calloc_realloc"] > 0 && (2 * io["path_calloc_realloc"] / ao["path_calloc_realloc"] < 0.16 || 2 * io["path_calloc_realloc"] / ao["path_calloc_realloc"] > 0.24)) fail("path_calloc_realloc keeps not about 20 %")
    if (ao["path_memalign"] > 0 && (io["path_memalign"] / ao["path_memalign"] < 0.21 || io["path_memalign"] / ao["path_memalign"] > 0.29)) fail("path_memalign keeps not about 25 %")
    if (c["kept"] != total["inuse_objects"]) fail("check saw " c["kept"] " blocks kept, the truth says " total["inuse_objects"])
    if (c["tags_ok"] != c["kept"] || c["usable_ok"] != c["kept"]) fail("blocks in use not intact: " kv0)
    if (c["inuse_bytes"] != total["inuse_bytes"]) fail("check and truth differ on bytes in use")
    if (c["mallinfo"] != "ok" && c["mallinfo"] != "skipped(sanitizer)") fail("mallinfo2: " c["mallinfo"])
    if (c["mallinfo"] == "ok" && c["mallinfo_freed"] < total["inuse_bytes"]) fail("freeing the kept blocks freed less than their bytes")
    if (!bad) print "ok: " n " paths add up; " c["kept"] " blocks in use are live (mallinfo " c["mallinfo"] ")"
    exit bad }'
