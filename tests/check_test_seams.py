#!/usr/bin/env python3
"""The environment variables that only tests may set are read by a build
configured with SNAPPROF_TEST_SEAMS=ON, and by no other (ctest
library_test_seams_match_build; tools/test.sh runs it on a build
configured without the option too).

usage: check_test_seams.py ON|SOME|OFF SOURCE_DIR FILE...

The names are the "SNAPPROF_TEST_*" string literals in the library's,
the preload libraries' and the CLI's sources (tests, benchmarks and fuzz
harnesses aside), so a seam added later is checked without a change here.
ON: each name is in one of the built FILEs (else this check could not see
one: it would pass OFF builds that read them). SOME: at least one is (a
sanitizer build, whose preload arms no crash handler and so reads no crash
wait). OFF: no FILE holds any
"SNAPPROF_TEST_" text, so an installed library cannot be bent by a
program's environment. Prints what it found; exits 1 on a failure.
"""
import os
import re
import sys

SKIP_DIRS = {"tests", "bench", "fuzz", "examples", "tools", ".git"}
LITERAL = re.compile(rb'"(SNAPPROF_TEST_[A-Z0-9_]+)"')


def seam_names(src):
    names = set()
    for top, dirs, files in os.walk(src):
        rel = os.path.relpath(top, src)
        first = rel.split(os.sep)[0]
        if first in SKIP_DIRS or first.startswith("build"):
            dirs[:] = []
            continue
        for f in files:
            if f.endswith((".c", ".h")):
                with open(os.path.join(top, f), "rb") as fh:
                    names.update(m.group(1).decode() for m in LITERAL.finditer(fh.read()))
    return names


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("ON", "SOME", "OFF"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    mode, src, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    names = seam_names(src)
    if not names:
        print("no SNAPPROF_TEST_* literal found under %s: wrong SOURCE_DIR?" % src)
        return 1
    found = {}
    for path in files:
        with open(path, "rb") as fh:
            data = fh.read()
        found[path] = sorted(set(m.decode() for m in re.findall(rb"SNAPPROF_TEST_[A-Z0-9_]*", data)))
        print("%s: %s" % (path, " ".join(found[path]) or "none"))
    if mode == "OFF":
        bad = [p for p in files if found[p]]
        for p in bad:
            print("FAIL: %s, built without SNAPPROF_TEST_SEAMS, holds %s" % (p, " ".join(found[p])))
        return 1 if bad else 0
    seen = set(n for p in files for n in found[p])
    if mode == "SOME":
        if not seen & names:
            print("FAIL: none of %s is in the files built with SNAPPROF_TEST_SEAMS=ON"
                  % " ".join(sorted(names)))
        return 0 if seen & names else 1
    missing = sorted(names - seen)
    for n in missing:
        print("FAIL: %s is read by the sources but in none of the files built with "
              "SNAPPROF_TEST_SEAMS=ON" % n)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
