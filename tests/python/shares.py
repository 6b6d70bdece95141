"""Workload of python_frames_shares: threads that spend CPU time in three
Python functions, one of them in zlib (C), each call timed with
time.thread_time(). Writes the truth (CPU seconds per function, summed over
threads) as JSON to argv[1]. argv[2]: CPU seconds each thread runs for;
argv[3]: the seed of the work mix (the held-out variant uses another)."""
import json
import random
import sys
import threading
import time
import zlib

out, budget, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
DATA = bytes(random.Random(7).randrange(256) for _ in range(1 << 14)) * 4


def py_arith(n):
    s = 0
    for i in range(n):
        s += (i * i) % 7
    return s


# One compressor for the run: zlib.compress() sets up its 256 KiB of
# state on every call, and glibc gives it back to the kernel each time, so
# that a third of its time is page faults (kernel time, which
# time.thread_time() counts and user-time samples cannot see).
COMP = zlib.compressobj(6)


def py_zlib(reps):
    for _ in range(reps):
        COMP.compress(DATA)
        COMP.flush(zlib.Z_FULL_FLUSH)


def py_strings(n):
    acc = []
    for i in range(n):
        acc.append(str(i).rjust(8, "0")[::-1])
    return len("".join(acc))


truth = {"py_arith": 0.0, "py_zlib": 0.0, "py_strings": 0.0}
lock = threading.Lock()
turn = threading.Lock()


def worker(k):
    rng = random.Random(seed * 100 + k)
    # Each thread its own mix, so that shares differ between threads.
    weights = [rng.uniform(1, 3), rng.uniform(1, 3), rng.uniform(1, 3)]
    mine = {"py_arith": 0.0, "py_zlib": 0.0, "py_strings": 0.0}
    start = time.thread_time()
    while time.thread_time() - start < budget:
        # One thread's round at a time: a thread that takes the GIL back
        # from another one (after zlib released it) spends kernel time in
        # the handoff, which time.thread_time() counts but user-time
        # samples cannot see; the other thread waits here, outside the
        # timed calls, without the GIL.
        turn.acquire()
        t = time.thread_time()
        py_arith(int(4000 * weights[0]))
        mine["py_arith"] += time.thread_time() - t
        t = time.thread_time()
        py_zlib(int(1 * weights[1] + 0.5))
        mine["py_zlib"] += time.thread_time() - t
        t = time.thread_time()
        py_strings(int(1500 * weights[2]))
        mine["py_strings"] += time.thread_time() - t
        turn.release()
    with lock:
        for f in mine:
            truth[f] += mine[f]


threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(out, "w") as f:
    json.dump(truth, f)
