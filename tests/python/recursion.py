"""Workload of python_frames_recursion: a chain of DEPTH functions with
unique names, each with exactly one caller (f_0 <- f_1 <- ... <- f_N),
made with exec, thrown away and made again in a loop; the deepest one
spins. argv[1]: CPU seconds to run; argv[2]: depth."""
import sys
import time

budget, depth = float(sys.argv[1]), int(sys.argv[2])


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
    f = None
    while time.process_time() - start < budget:
        # New code objects every round; the last round's chain is freed a
        # round later, once its captures have been named (a capture drained
        # after its code object was freed shows "<code object freed>").
        prev, f = f, make_chain()
        for _ in range(500):
            f(20000)


main()
