"""Workload of python_frames_callback: a C thread (test_python_callback_lib.c,
argv[1]) spins argv[2] CPU seconds in native code, then calls py_callback
through a ctypes callback, which spins argv[3] CPU seconds in Python. The
main thread waits in the C call (ctypes releases the GIL)."""
import ctypes
import sys
import time

lib = ctypes.CDLL(sys.argv[1])
native_s, python_s = float(sys.argv[2]), float(sys.argv[3])


def py_callback():
    end = time.thread_time() + python_s
    n = 0
    while time.thread_time() < end:
        for i in range(1000):
            n += i * i


CB = ctypes.CFUNCTYPE(None)
cb = CB(py_callback)
lib.callback_thread_run.argtypes = [ctypes.c_double, CB]
if lib.callback_thread_run(native_s, cb) != 0:
    sys.exit("pthread_create failed")
