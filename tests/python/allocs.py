"""Workload of python_frames_heap: three functions allocate known numbers
of bytes through malloc (bytes objects of 8-64 KiB, above pymalloc's
512-byte limit, so malloc gives them whatever PYTHONMALLOC says), in
interleaved rounds. Writes {function: bytes asked for} as JSON.

Each round is followed by SPIN_MS of CPU time in pure Python, so that the
sampled allocations come at a pace the drain keeps up with on a loaded
machine (a burst faster than it has no stacks: heap/README.md).

usage: allocs.py TRUTH_FILE MIB SEED [SPIN_MS]"""
import json
import random
import sys
import time

asked = {"alloc_big": 0, "alloc_mid": 0, "alloc_small": 0}
held = []


def alloc_big(rng):
    n = rng.randrange(32768, 65536)
    asked["alloc_big"] += n
    b = bytes(n)
    if rng.random() < 0.05:
        held.append(b)  # some stay in use


def alloc_mid(rng):
    n = rng.randrange(16384, 32768)
    asked["alloc_mid"] += n
    return bytes(n)


def alloc_small(rng):
    n = rng.randrange(8192, 16384)
    asked["alloc_small"] += n
    return bytes(n)


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def main():
    truth_file, mib, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    spin_s = (float(sys.argv[4]) if len(sys.argv) > 4 else 0) / 1000
    rng = random.Random(seed)
    target = mib * 1024 * 1024
    while sum(asked.values()) < target:
        for _ in range(5):
            alloc_big(rng)
        for _ in range(5):
            alloc_mid(rng)
        for _ in range(5):
            alloc_small(rng)
        spin(spin_s)
    # The bytes objects' headers: a bytes object of n bytes asks malloc for
    # n plus its header (33 bytes on CPython 3.11); close enough for shares.
    json.dump(asked, open(truth_file, "w"))


main()
