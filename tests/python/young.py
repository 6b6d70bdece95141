"""Workload of python_frames_young: short-lived threads, two at a time,
each spending argv[2] CPU seconds (time.thread_time()) in one Python
function, py_young, that alternates pure-Python arithmetic with zlib (which
releases the GIL around deflate), then exiting. argv[1]: how many threads.
A thread's samples from its first moments must carry its Python frames,
before the sampler has read the interpreter's thread list again."""
import random
import sys
import threading
import time
import zlib

count, budget = int(sys.argv[1]), float(sys.argv[2])
DATA = bytes(random.Random(7).randrange(256) for _ in range(1 << 14))


def py_young(budget):
    comp = zlib.compressobj(6)
    start = time.thread_time()
    s = 0
    while time.thread_time() - start < budget:
        for i in range(2000):
            s += (i * i) % 7
        comp.compress(DATA)
        comp.flush(zlib.Z_FULL_FLUSH)
    return s


for k in range(0, count, 2):
    pair = [threading.Thread(target=py_young, args=(budget,)) for _ in range(2)]
    for t in pair:
        t.start()
    for t in pair:
        t.join()
