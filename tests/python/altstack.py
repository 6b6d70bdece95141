"""Workload of python_frames_altstack: gives the main thread an alternate
signal stack of SIZE bytes (a guard page below it), painted, as CPython's
faulthandler does with a smaller one, then either raises a signal whose
handler is CPython's own C trampoline (mode "trivial": what the kernel's
signal frame takes) or runs recursion.py's chain (mode "chain": what our
handler takes on top), and prints the most of the stack any handler used:
"altstack high water: N". argv: SIZE MODE [CPU seconds, depth]."""
import ctypes
import os
import runpy
import signal
import sys

size, mode = int(sys.argv[1]), sys.argv[2]
PAGE = os.sysconf("SC_PAGE_SIZE")
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
# Never unmapped: a signal may land on it until the process ends.
base = libc.mmap(None, size + PAGE, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
if base in (None, ctypes.c_void_p(-1).value) or libc.mprotect(base, PAGE, 0) != 0:
    raise OSError(ctypes.get_errno(), "mmap/mprotect")
ctypes.memset(base + PAGE, 0xA5, size)


class StackT(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


if libc.sigaltstack(ctypes.byref(StackT(base + PAGE, 0, size)), None) != 0:
    raise OSError(ctypes.get_errno(), "sigaltstack")

if mode == "trivial":
    signal.signal(signal.SIGUSR1, lambda s, f: None)
    for _ in range(100):
        os.kill(os.getpid(), signal.SIGUSR1)
else:
    sys.argv = [os.path.join(os.path.dirname(__file__), "recursion.py"), *sys.argv[3:5]]
    runpy.run_path(sys.argv[0], run_name="__main__")

data = ctypes.string_at(base + PAGE, size)
low = len(data) - len(data.lstrip(b"\xa5"))
print(f"altstack high water: {size - low}", file=sys.stderr, flush=True)
