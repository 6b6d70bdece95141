#!/usr/bin/env python3
"""Every external symbol the built libraries define carries our prefix
(ctest library_no_unprefixed_globals).

usage: check_symbols.py NAME=FILE[;FILE...] ...

NAME is one of the libraries in ALLOWED; each FILE is a static archive or
object file (its global symbols, what a program that links it sees: the
hidden ones too, which a static link still resolves by name) or a shared
library (its dynamic symbols, what it exports). Every defined symbol must
start with snapprof_ (the public API) or snapprof__ (internal), or be one
that the library exists to define, listed for it below: the calls the
preload libraries interpose, the gperftools API, the hooks the compiler's
-finstrument-functions calls. Anything else is a name that can collide
with a program's own: the preload once shared its state through globals
named g, lock and reg_drop, and libsnapprof.a exported protobuf-c's
perftools__profiles__* functions, which a program with its own pprof code
also defines. Prints each offender; exits 1 if there is one.
"""
import re
import subprocess
import sys

# The compiler's own, in any object: the personality routine's reference
# (weak, hidden, one per object that has cleanups).
COMPILER = [r"DW\.ref\..*"]
# ASan's one-definition-rule indicator of each global: the global's own
# name after this, checked as the global is.
ASAN_ODR = "__odr_asan."

INTERPOSED_LIBC = [
    # preload_interpose.c, preload_signals.c, preload_held.c
    "_Exit", "_exit", "fork", "pthread_create", "pthread_exit", "pthread_setname_np",
    "sigaction", "signal", "pipe2", "initgroups", "setgroups", "setuid", "setgid",
    "seteuid", "setegid", "setreuid", "setregid", "setresuid", "setresgid",
    "prctl", "syscall",
]

ALLOWED = {
    "snapprof": [],
    "snapprof_static": [],
    # gperftools_compat.c: the API of gperftools' <gperftools/profiler.h>.
    "snapprof_preload": INTERPOSED_LIBC + [r"Profil(er|ing)[A-Za-z]+"],
    # preload_heap/: the allocator's entry points and C++'s operators new
    # and delete (_Znwm, _ZdlPv, ... : the mangled operator names).
    "snapprof_heap": [
        "malloc", "free", "calloc", "realloc", "reallocarray", "memalign",
        "posix_memalign", "aligned_alloc", "valloc", "pvalloc", r"_Z(nw|na|dl|da)[A-Za-z0-9_]+",
    ],
    # -finstrument-functions' hooks.
    "snapprof_instrument": ["__cyg_profile_func_enter", "__cyg_profile_func_exit"],
}


def defined_symbols(path):
    """The defined external symbols of path."""
    if path.endswith(".so") or ".so." in path:
        cmd = ["nm", "-D", "--defined-only", path]
    else:
        cmd = ["nm", "-g", "--defined-only", path]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        # "value type name"; archive member headers ("x.o:") and blank
        # lines have fewer fields.
        if len(parts) == 3 and parts[1].isupper():
            syms.add(parts[2].split("@")[0])
    return syms


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    bad = 0
    checked = 0
    for spec in argv[1:]:
        name, _, files = spec.partition("=")
        if name not in ALLOWED:
            print("unknown library %s (add it to ALLOWED)" % name)
            return 2
        allowed = re.compile("|".join("(?:%s)" % p for p in ALLOWED[name] + COMPILER) + "$")
        for path in [f for f in files.split(";") if f]:
            for sym in sorted(defined_symbols(path)):
                checked += 1
                if sym.startswith(ASAN_ODR):
                    sym = sym[len(ASAN_ODR):]
                if sym.startswith("snapprof_") or allowed.match(sym):
                    continue
                print("%s: %s defines %s, which has no snapprof_ prefix" % (name, path, sym))
                bad += 1
    if checked == 0:
        print("no symbols read: nothing was checked")
        return 1
    print("%d symbols, %d without the prefix" % (checked, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
