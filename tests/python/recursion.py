"""Workload of python_frames_recursion: a chain of DEPTH functions with
unique names, each with exactly one caller (f_0 <- f_1 <- ... <- f_N),
made with exec, run CALLS times (200: about a quarter of a CPU second),
thrown away and made again in a loop; the deepest one spins. argv[1]: CPU
seconds to run; argv[2]: depth; argv[3]: CALLS (default 200)."""
import gc
import sys
import time

budget, depth = float(sys.argv[1]), int(sys.argv[2])
calls = int(sys.argv[3]) if len(sys.argv) > 3 else 200


def make_chain():
    ns = {}
    src = []
    for i in range(depth - 1):
        src.append(f"def f_{i}(n):\n    return f_{i + 1}(n)\n")
    src.append(f"def f_{depth - 1}(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n")
    exec("".join(src), ns)
    return ns["f_0"]


def main():
    start = time.process_time()
    while time.process_time() - start < budget:
        f = make_chain()
        for _ in range(calls):
            f(20000)
        # Freed at once (f_0 and its globals are a cycle: collected here),
        # while captures of the round's last milliseconds may still wait for
        # the sampling thread: they must be named all the same, never
        # "<code object freed>" or a name read from freed memory.
        f = None
        gc.collect()

main()
