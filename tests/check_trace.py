#!/usr/bin/env python3
"""Checks a snapprof trace-event JSON file the way a viewer would read it.

usage: check_trace.py FILE [TID:COUNT ...] [--frames N] [--zones N]
                       [--instants N] [--counter NAME:N] [--zones-in-frames]
                       [--hitch-zone NAME:K] [--shares NAME,NAME...]

Parses the file with the json module and checks that every sample ("P"
event) has a timestamp and thread, that timestamps never go backwards
within a thread, that every stack reference resolves in "stackFrames"
(parents included), and that the "X" slices of each thread nest perfectly
(Perfetto's rule). With TID:COUNT arguments, each thread must have exactly
COUNT samples and no other thread any; with --frames N, exactly N app
frames. Zones ("X" slices of category "zone") must sit on zone tracks of
their own (no sampled slice on the same tid) and nest there too; --zones N
wants exactly N of them, --instants N exactly N instants ("i"), --counter
NAME:N exactly N points ("C") of counter NAME, and --zones-in-frames that
every zone lies within an app frame; --hitch-zone NAME:K that in at
least K hitch frames' zone times ("zones_ms") NAME took more than twice
its median in the other frames and no zone grew much more (a host stall
can make a hitch of its own). --shares prints, for each NAME, one line
"share NAME SLICES SAMPLES": its self time in the sampled "X" slices as a
fraction of all their time (what a flame chart of the file shows), and
the "weight" of the samples whose leaf it is as a fraction of all
samples' weight. Prints a summary; exits 1 on the first failure.
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
    want_zones = want_instants = None
    want_counters = {}
    zones_in_frames = False
    hitch_zone = None
    share_names = None
    args = argv[2:]
    while args:
        a = args.pop(0)
        if a == "--frames":
            want_frames = int(args.pop(0))
        elif a == "--zones":
            want_zones = int(args.pop(0))
        elif a == "--instants":
            want_instants = int(args.pop(0))
        elif a == "--counter":
            name, n = args.pop(0).rsplit(":", 1)
            want_counters[name] = int(n)
        elif a == "--hitch-zone":
            hitch_zone, hitch_min = args.pop(0).rsplit(":", 1)
            hitch_min = int(hitch_min)
        elif a == "--shares":
            share_names = args.pop(0).split(",")
        elif a == "--zones-in-frames":
            zones_in_frames = True
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
    zones, frame_spans, instants, counters = [], [], 0, {}
    frame_zone_ms = []  # (hitch, {zone: ms})
    stack_tids, zone_tids = set(), set()
    sample_tids = set()  # tracks of sampled stacks ("X" of category "stack")
    p_weight = {}  # leaf name -> summed sample weight
    order = []  # "X" events in file order
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
            if "weight" not in e or float(e["weight"]) < 0:
                fail("sample without a weight: %r" % e)
            leaf = frames[e["sf"]]["name"] if "sf" in e else ""
            p_weight[leaf] = p_weight.get(leaf, 0.0) + float(e["weight"])
        elif ph == "X":
            if float(e["dur"]) < 0:
                fail("negative duration: %r" % e)
            if e.get("cat") == "app_frame":
                app_frames += 1
                frame_spans.append((ts, ts + float(e["dur"])))
                frame_zone_ms.append((e["args"]["hitch"], e["args"].get("zones_ms", {})))
            elif e.get("cat") == "zone":
                zones.append((ts, ts + float(e["dur"]), e["name"]))
                zone_tids.add(tid)
            else:
                stack_tids.add(tid)
                if e.get("cat") == "stack":
                    sample_tids.add(tid)
            slices.setdefault(tid, []).append((ts, ts + float(e["dur"]), e["name"], len(order)))
            order.append(e)
        elif ph == "i":
            instants += 1
            if tid not in zone_tids and tid in stack_tids:
                fail("instant on a sampled track: %r" % e)
        elif ph == "C":
            v = e.get("args", {}).get("value")
            if not isinstance(v, (int, float)):
                fail("counter without a numeric value: %r" % e)
            counters[e["name"]] = counters.get(e["name"], 0) + 1
        else:
            fail("unexpected phase %r" % ph)
    # Nesting: sorted by start (longer first on ties), every slice lies
    # inside the enclosing open one or starts after it ended.
    n_slices = 0
    self_time = {}  # name -> self time in the sampled slices
    for tid, ss in slices.items():
        # Equal spans: the builder writes the inner slice first (it closes
        # the deepest open one first), so the later one encloses.
        ss.sort(key=lambda s: (s[0], -s[1], -s[3]))
        stack = []
        sampled = tid in sample_tids
        for start, end, name, _ in ss:
            # ts + dur is summed in floating point: a slice that starts
            # where the last one ended may find that end a few 1e-10 us
            # past its start (times are written to the ns, 1e-3 us).
            while stack and stack[-1][1] <= start + 1e-6:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-6:
                fail("thread %d: slice %s [%.3f, %.3f] overlaps %s [%.3f, %.3f]"
                     % (tid, name, start, end, stack[-1][2], stack[-1][0], stack[-1][1]))
            if sampled:
                self_time[name] = self_time.get(name, 0.0) + (end - start)
                if stack:
                    parent = stack[-1][2]
                    self_time[parent] = self_time.get(parent, 0.0) - (end - start)
            stack.append((start, end, name))
            n_slices += 1
    mixed = zone_tids & stack_tids
    if mixed:
        fail("zones and sampled slices share tracks %r" % sorted(mixed))
    if want_zones is not None and len(zones) != want_zones:
        fail("%d zones, expected %d" % (len(zones), want_zones))
    if want_instants is not None and instants != want_instants:
        fail("%d instants, expected %d" % (instants, want_instants))
    for name, n in want_counters.items():
        if counters.get(name, 0) != n:
            fail("counter %s has %d points, expected %d" % (name, counters.get(name, 0), n))
    if zones_in_frames:
        frame_spans.sort()
        for start, end, name in zones:
            if not any(fs - 1e-3 <= start and end <= fe + 1e-3 for fs, fe in frame_spans):
                fail("zone %s [%.3f, %.3f] lies in no app frame" % (name, start, end))
    if hitch_zone is not None:
        hitches = [z for h, z in frame_zone_ms if h]
        if not hitches or len(hitches) == len(frame_zone_ms):
            fail("no hitch frames or no other frames to compare")
        def median(name):
            v = sorted(z.get(name, 0.0) for h, z in frame_zone_ms if not h)
            return v[len(v) // 2]
        explained = 0
        for z in hitches:
            grew = z.get(hitch_zone, 0.0) - median(hitch_zone)
            # Zones that enclose it grew as much; none grew much more.
            others = [n for n in z if z[n] - median(n) > 1.2 * grew + 1.0]
            if z.get(hitch_zone, 0.0) > 2 * median(hitch_zone) and not others:
                explained += 1
            else:
                print("hitch not explained by %s: %r" % (hitch_zone, z))
        if explained < hitch_min:
            fail("%d hitch frames point at %s, expected at least %d (median %.3f ms)"
                 % (explained, hitch_zone, hitch_min, median(hitch_zone)))
    if share_names is not None:
        total_self = sum(self_time.values())
        total_p = sum(p_weight.values())
        for name in share_names:
            print("share %s %.6f %.6f" % (name, self_time.get(name, 0.0) / total_self if total_self else 0.0,
                                          p_weight.get(name, 0.0) / total_p if total_p else 0.0))
    if want:
        if counts != want:
            fail("samples per thread %r, expected %r" % (counts, want))
    if want_frames is not None and app_frames != want_frames:
        fail("%d app frames, expected %d" % (app_frames, want_frames))
    print("trace ok: %d samples on %d threads %s, %d slices, %d stack frames, %d app frames, "
          "%d zones, %d instants, counters %r"
          % (sum(counts.values()), len(counts), sorted(names.values()), n_slices, len(frames),
             app_frames, len(zones), instants, counters))


if __name__ == "__main__":
    main(sys.argv)
