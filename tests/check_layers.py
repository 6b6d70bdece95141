#!/usr/bin/env python3
"""Checks the library's layering from its sources (ctest library_follows_layers).

usage: check_layers.py [SOURCE_DIR]   (default: the tree this script is in)

The library's folders form layers, lowest first. A file may use:
  - anything of its own folder (but see SUBLAYERS);
  - the interface headers (INTERFACE) of a folder of a LOWER layer;
  - the public headers (<snapprof/...>, include/snapprof/) and the
    generated protobuf header, from anywhere.
So nothing includes a header of a layer above it, nor of another folder
of its own layer, nor a private header of another folder. In particular
the sampler (sampling_thread/) reaches trigger/, stack_copier/, unwinder/
and profile_builder/ only through their interface headers, and those reach
only module_cache/, events/ and common/ (and stack_copier/ for trigger/).

Inside a folder listed in SUBLAYERS the files form layers too: a .c file
may not call a function defined in a .c file of a higher sublayer, nor
use a variable one defines (the uses are found by name: every non-static
snapprof_* function or file-scope variable a file defines, looked up in
the other files' code), and the files of a folder do not call each other
in a circle, not even inside one sublayer. The preload (preload/) is such
a folder: its entry points (what the program calls) at the top, the
preload lock and its flags at the bottom (preload/preload_process.h,
"Calls run one way").

No header of the layers includes, directly or through others, a header
that includes it back (an include cycle).

Each violation is printed, one a line; the exit status is 1 when there is
one that ALLOWED does not list. ALLOWED listed the violations in the tree
when this checker was written; the structure pass of issue 26 removed
them, and it is empty: keep it so. An entry that no longer matches is
printed as a note, not an error.

No .c file of the layers (the library, the preload, the snapprof
command) is longer than MAX_LINES (issue 26: one room, one job; a file
past it holds more than one job and is split along them).

tests/, fuzz/, bench/, examples/, tools/ and docs/ are outside the layers
(tests may include anything); a folder with C sources that the table does
not place is an error, so that a new folder gets a layer."""

import os
import re
import sys

# Layers, lowest first. A folder may use lower layers' interface headers.
LAYERS = [
    # 0: shared helpers: clock, arena, hash, fds, fault injection.
    ["common"],
    # 1: services with no dependencies but common/: which module holds an
    # address and its symbols; zones, counters and events.
    ["module_cache", "events"],
    # 2: labels (its capture copies the event zone: above events/); the
    # stack copier (the handshake, the capture slots the triggers fill).
    ["labels", "stack_copier"],
    # 3: the sampler's parts: when to capture (trigger/, which captures
    # into stack_copier/'s slots), how to walk a copy (unwinder/, which
    # asks module_cache/), what to write (profile_builder/, which reads
    # module_cache/ and events/).
    ["trigger", "unwinder", "profile_builder", "heap", "python"],
    # 4: the sampler: the profiler object and the sampling thread.
    ["sampling_thread"],
    # 5: what runs the sampler in a program: the preload library, the
    # -finstrument-functions hooks, the allocation hooks (preload_heap/).
    ["preload", "instrument", "preload_heap"],
    # 6: GOT patching (part of libsnapprof): the preload's hooks' fast path
    # (preload_heap/heap_hook_core.h) over the heap sampler; the sampling
    # thread reaches it only through heap/'s tick hook.
    ["heap_got"],
    # 7: the snapprof command (it reads the preload's settings and names).
    ["cli"],
]

# The headers a folder offers to the layers above it; any other header of
# the folder is private to it. common/: every header.
INTERFACE = {
    "common": None,  # None: every header
    "module_cache": ["module_cache.h", "jit_regions.h", "symbols_dwarf.h"],
    "events": ["events.h"],
    "labels": ["labels.h"],
    "stack_copier": ["stack_copier.h", "stack_copier_slots.h", "registers_x86_64.h"],
    "trigger": ["trigger.h"],
    # The unwinders as the profiler core sees them, the chaining loop, and
    # the frame-pointer rescue over the chain.
    "unwinder": ["unwinder_internal.h", "unwinder_fp_guess.h"],
    # The builders' callbacks as the sampler calls them.
    "profile_builder": ["profile_builder_calls.h"],
    # Heap sampling as the profiler drives it.
    "heap": ["heap_sampler.h", "heap_hook_abi.h"],
    # CPython frames: the capture, the refresh and the splice.
    "python": ["python.h"],
    # The defaults the preload shares with snapprof_params_init().
    "sampling_thread": ["profiler_defaults.h"],
    "preload": ["preload_config.h", "file_names.h"],
    "instrument": [],
    # The hooks' fast path, shared with the GOT hooks (heap_got/).
    "preload_heap": ["heap_hook_core.h"],
    "heap_got": ["heap_got.h"],
    "cli": [],
}

# Files of one folder in layers, lowest first: a file may not call a
# function defined in a higher one.
SUBLAYERS = {
    "module_cache": [
        # DWARF lines and inline frames, then the ELF symbolizer on them.
        ["symbols_dwarf.c"],
        ["symbols_elf.c"],
        # The JIT region table, then the perf map reader that fills it.
        ["jit_regions.c"],
        ["jit_perf_map.c"],
        # JIT lookups over both.
        ["jit_lookup.c"],
        # The module cache proper: the scan of what is mapped, the table it
        # fills, and the lookups by address over the table and all above.
        ["module_scan.c"],
        ["module_table.c"],
        ["module_lookup.c"],
    ],
    "preload": [
        # The preload lock and the flags read without it; file names.
        ["preload_process.c", "preload_real.c", "file_names.c"],
        # Services over them: settings, requests to the helper thread,
        # held files (and libunwind's pipe), the thread registry, unnamed
        # leaves.
        ["preload_config.c", "preload_helper.c", "preload_held.c", "preload_threads.c",
         "preload_unnamed.c"],
        # What a profile runs or writes besides its samples: the crash
        # handler, rolling profiles, profiles on request, the summary.
        ["preload_crash.c", "preload_loop.c", "preload_serve.c", "preload_summary.c"],
        # Signals shared with the program (it arms nothing of its own).
        ["preload_signals.c"],
        # Start, stop, flush: the profile's state.
        ["preload_control.c"],
        # fork(): a child's profile starts through the control code.
        ["preload_fork.c"],
        # The entry points: the constructor, the interposed calls, the
        # gperftools API. Nothing of the preload calls them.
        ["preload_main.c", "preload_interpose.c", "gperftools_compat.c"],
    ],
}

# Violations allowed for now: (file, what it uses). Empty since issue 26.
ALLOWED = [
]

OUTSIDE = {"tests", "fuzz", "bench", "examples", "tools", "docs", "include", "proto", "cmake"}
# Headers anyone may include: generated from proto/profile.proto.
GENERATED = {"profile.pb-c.h"}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
DEF_RE = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*?\b(snapprof_\w+)\s*\([^;{]*\)\s*\{", re.M)
# A file-scope variable with external linkage ("atomic_int snapprof__x;").
VAR_RE = re.compile(
    r"^(?!static\b|extern\b|typedef\b)[A-Za-z_][\w \*]*?\b(snapprof_\w+)\s*(?:\[[^\];]*\])?\s*(?:=[^;]*)?;",
    re.M)


def layer_of():
    layer = {}
    for i, folders in enumerate(LAYERS):
        for f in folders:
            layer[f] = i
    return layer


def sources(root):
    """Yields (folder, path relative to root) of every .c and .h outside OUTSIDE."""
    for top in sorted(os.listdir(root)):
        d = os.path.join(root, top)
        if not os.path.isdir(d) or top.startswith(".") or top.startswith("build"):
            continue
        if top in OUTSIDE:
            continue
        for dirpath, dirnames, filenames in os.walk(d):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith((".c", ".h")):
                    yield top, os.path.relpath(os.path.join(dirpath, name), root)


MAX_LINES = 900


def check_sizes(root, problems):
    for folder, rel in sources(root):
        if not rel.endswith(".c"):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            problems.append((rel, "%d lines" % n,
                             "longer than %d lines: split it along its jobs" % MAX_LINES))


def check_includes(root, layer, problems):
    for folder, rel in sources(root):
        if folder not in layer:
            problems.append((rel, folder + "/", "folder %s/ has no layer in LAYERS" % folder))
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = COMMENT_RE.sub("", f.read())
        for inc in INCLUDE_RE.findall(text):
            if inc in GENERATED or inc.startswith("snapprof/"):
                continue
            if "/" not in inc:
                # Relative to the including file ("profile_builder_internal.h").
                inc = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            target = inc.split("/")[0]
            if target == folder:
                continue
            if target not in layer:
                problems.append((rel, inc, "includes %s of a folder with no layer" % inc))
                continue
            if layer[target] > layer[folder]:
                why = "upward: %s/ is layer %d, %s/ layer %d" % (
                    target, layer[target], folder, layer[folder])
            elif layer[target] == layer[folder]:
                why = "sideways: %s/ and %s/ are both layer %d" % (target, folder, layer[folder])
            elif INTERFACE.get(target) is not None and inc[len(target) + 1:] not in INTERFACE[target]:
                why = "private header of %s/ (its interface: %s)" % (
                    target, ", ".join(INTERFACE[target]) or "none")
            else:
                continue
            problems.append((rel, inc, why))


def check_sublayers(root, problems):
    for folder, tiers in SUBLAYERS.items():
        tier = {}
        for i, names in enumerate(tiers):
            for n in names:
                tier[n] = i
        files = sorted(n for n in os.listdir(os.path.join(root, folder)) if n.endswith(".c"))
        code, defs = {}, {}
        for n in files:
            if n not in tier:
                problems.append((folder + "/" + n, folder + "/",
                                 "file has no sublayer in SUBLAYERS[%s]" % folder))
                continue
            with open(os.path.join(root, folder, n), encoding="utf-8", errors="replace") as f:
                code[n] = COMMENT_RE.sub("", f.read())
            for m in list(DEF_RE.finditer(code[n])) + list(VAR_RE.finditer(code[n])):
                defs[m.group(1)] = n
        calls = {n: set() for n in code}
        for n, text in sorted(code.items()):
            called = {}
            for name, where in defs.items():
                if where != n and re.search(r"\b%s\b" % name, text):
                    calls[n].add(where)
                    if tier[where] > tier[n]:
                        called.setdefault(where, []).append(name)
            for where, names in sorted(called.items()):
                problems.append((folder + "/" + n, folder + "/" + where,
                                 "calls up into a higher sublayer: %s" % ", ".join(sorted(names))))
        for cycle, members in cycles(calls):
            problems.append((folder + "/" + cycle[0], folder + "/" + cycle[1],
                             "calls run in a circle: %s; %d files call each other: %s" % (
                                 " -> ".join(cycle + [cycle[0]]), len(members),
                                 ", ".join(members))))


def cycles(graph):
    """(cycle, members) for each strongly connected component of graph
    {node: set of nodes} with more than one node, in sorted order: members
    the sorted nodes of the component, cycle a shortest way round it from
    its smallest node (a list of nodes)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(set(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        # A shortest way round from the smallest node, by breadth first.
        start = min(comp)
        prev, queue, path = {start: None}, [start], None
        while queue and path is None:
            v = queue.pop(0)
            for w in sorted(graph.get(v, ())):
                if w not in comp:
                    continue
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    path.reverse()
                    break
                if w not in prev:
                    prev[w] = v
                    queue.append(w)
        out.append((path, sorted(comp)))
    return sorted(out)


def check_include_cycles(root, problems):
    """No header includes itself through others."""
    graph = {}
    for folder, rel in sources(root):
        if not rel.endswith(".h"):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = COMMENT_RE.sub("", f.read())
        graph[rel] = set()
        for inc in INCLUDE_RE.findall(text):
            if "/" not in inc:
                inc = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            graph[rel].add(inc)
    graph = {h: {i for i in incs if i in graph} for h, incs in graph.items()}
    for cycle, members in cycles(graph):
        problems.append((cycle[0], cycle[1], "include cycle: %s; %d headers include each other" % (
            " -> ".join(cycle + [cycle[0]]), len(members))))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    layer = layer_of()
    problems = []
    check_includes(root, layer, problems)
    check_sublayers(root, problems)
    check_include_cycles(root, problems)
    check_sizes(root, problems)
    allowed = set(ALLOWED)
    seen = set()
    failed = 0
    for rel, what, why in problems:
        if (rel, what) in allowed:
            seen.add((rel, what))
            print("allowed for now: %s -> %s (%s)" % (rel, what, why))
        else:
            failed += 1
            print("VIOLATION: %s -> %s (%s)" % (rel, what, why))
    for rel, what in ALLOWED:
        if (rel, what) not in seen:
            print("note: allow-list entry %s -> %s no longer occurs: remove it" % (rel, what))
    print("%d violation(s), %d allowed for now" % (failed, len(seen)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
