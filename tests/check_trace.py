#!/usr/bin/env python3
"""Checks a snapprof trace-event JSON file the way a viewer would read it.

usage: check_trace.py FILE [TID:COUNT ...] [--frames N]

Parses the file with the json module and checks that every sample ("P"
event) has a timestamp and thread, that timestamps never go backwards
within a thread, that every stack reference resolves in "stackFrames"
(parents included), and that the "X" slices of each thread nest perfectly
(Perfetto's rule). With TID:COUNT arguments, each thread must have exactly
COUNT samples and no other thread any; with --frames N, exactly N app
frames. Prints a summary; exits 1 on the first failure.
"""
import json
import sys


def fail(msg):
    print("check_trace: " + msg)
    sys.exit(1)


def main(argv):
    path = argv[1]
    want = {}
    want_frames = None
    args = argv[2:]
    while args:
        a = args.pop(0)
        if a == "--frames":
            want_frames = int(args.pop(0))
        else:
            tid, count = a.split(":")
            want[int(tid)] = int(count)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    frames = doc.get("stackFrames", {})
    for key, fr in frames.items():
        if "name" not in fr:
            fail("stack frame %s has no name" % key)
        if "parent" in fr and fr["parent"] not in frames:
            fail("stack frame %s has an unknown parent %s" % (key, fr["parent"]))
    counts, last_ts, slices = {}, {}, {}
    app_frames = 0
    names = {}
    for e in events:
        ph = e.get("ph")
        if ph == "M":
            if e.get("name") == "thread_name":
                names[e["tid"]] = e["args"]["name"]
            continue
        if "ts" not in e or "pid" not in e or "tid" not in e:
            fail("event without ts/pid/tid: %r" % e)
        tid, ts = e["tid"], float(e["ts"])
        if ph == "P":
            counts[tid] = counts.get(tid, 0) + 1
            if ts < last_ts.get(tid, float("-inf")):
                fail("thread %d: sample at %.3f after one at %.3f" % (tid, ts, last_ts[tid]))
            last_ts[tid] = ts
            if "sf" in e and e["sf"] not in frames:
                fail("sample refers to unknown stack frame %s" % e["sf"])
        elif ph == "X":
            if e.get("cat") == "app_frame":
                app_frames += 1
            if float(e["dur"]) < 0:
                fail("negative duration: %r" % e)
            slices.setdefault(tid, []).append((ts, ts + float(e["dur"]), e["name"]))
        else:
            fail("unexpected phase %r" % ph)
    # Nesting: sorted by start (longer first on ties), every slice lies
    # inside the enclosing open one or starts after it ended.
    n_slices = 0
    for tid, ss in slices.items():
        ss.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for start, end, name in ss:
            # ts + dur is summed in floating point: a slice that starts
            # where the last one ended may find that end a few 1e-10 us
            # past its start (times are written to the ns, 1e-3 us).
            while stack and stack[-1][1] <= start + 1e-6:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-6:
                fail("thread %d: slice %s [%.3f, %.3f] overlaps %s [%.3f, %.3f]"
                     % (tid, name, start, end, stack[-1][2], stack[-1][0], stack[-1][1]))
            stack.append((start, end, name))
            n_slices += 1
    if want:
        if counts != want:
            fail("samples per thread %r, expected %r" % (counts, want))
    if want_frames is not None and app_frames != want_frames:
        fail("%d app frames, expected %d" % (app_frames, want_frames))
    print("trace ok: %d samples on %d threads %s, %d slices, %d stack frames, %d app frames"
          % (sum(counts.values()), len(counts), sorted(names.values()), n_slices, len(frames),
             app_frames))


if __name__ == "__main__":
    main(sys.argv)
