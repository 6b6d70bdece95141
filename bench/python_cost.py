"""Workload of bench/python_cost.sh: a chain of DEPTH functions with unique
names (f_0 calls f_1 ... f_{DEPTH-1}, which spins), called a fixed number of
times, so that every run does the same work whatever samples it; prints the
process's CPU seconds (every thread, the profiler's sampling thread too)
from getrusage at the end. argv[1]: rounds; argv[2]: depth."""
import resource
import sys

rounds, depth = int(sys.argv[1]), int(sys.argv[2])
sys.setrecursionlimit(depth + 100)
ns = {}
src = [f"def f_{i}(n):\n    return f_{i + 1}(n)\n" for i in range(depth - 1)]
src.append(f"def f_{depth - 1}(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n")
exec("".join(src), ns)
f = ns["f_0"]
for _ in range(rounds):
    f(20000)
r = resource.getrusage(resource.RUSAGE_SELF)
print(f"cpu_s {r.ru_utime + r.ru_stime:.6f}")
