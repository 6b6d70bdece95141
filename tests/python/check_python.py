#!/usr/bin/env python3
"""ctest driver of the python_frames_* tests: runs a workload under
`snapprof record` with /usr/bin/python3.11 and reads the profile back with
`go tool pprof -traces`.

usage: check_python.py SNAPPROF_CLI MODE [plain|sanitized]
  shares     the three functions' shares of CPU time against
             time.thread_time(); zlib's frames under the Python caller
  heldout    the same on another work mix, not the one tuned on
  young      threads that live ~40 ms of CPU: Python frames from their
             first samples, and in zlib, with the GIL released
  recursion  a 500-deep chain of uniquely named functions: whole chains
  churn      the same 30 deep, remade every ~40 ms of CPU: each chain's code
             objects are freed long before the next periodic drain (200 ms)
  faulthandler  a 100-deep chain under -X faulthandler (its small alternate
             signal stack) runs to its end
  altstack   the handler's use of a painted alternate signal stack, 100 deep
  callback   a C thread first native, then calling back into Python (ctypes):
             Python frames as soon as it takes the GIL
  callback_refresh  the same as with a libpython that may be unloaded: Python
             frames after the next refresh
  unknown    an interpreter version the layout table lacks: native only
  refused    under a seccomp filter that fails process_vm_readv with EPERM
             (tests/seccomp_exec.c): native frames only, and the summary
             says why
  off        without --python nothing of Python's is in the profile
  wall       --wall: threads waiting in time.sleep, a lock and a socket recv
             show the Python function that waits
  heap       --heap: each sampled allocation names the Python function that
             asked for it; the three functions' shares of alloc_space
             against the bytes they asked for
Exit 77 (skipped) when /usr/bin/python3.11 or go is missing, or in a
sanitizer build ("sanitized"), as the other record tests
(pl_skip_if_sanitized): the sanitized preload library cannot load into
python3.11, whose process has no sanitizer runtime."""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

PY = "/usr/bin/python3.11"
HERE = os.path.dirname(os.path.abspath(__file__))


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


def fail(why):
    print("FAIL:", why)
    sys.exit(1)


def record(cli, tmp, script_args, extra=(), env=None, hz=1000):
    out = os.path.join(tmp, "p.pb.gz")
    cmd = [cli, "record", "-F", str(hz), "-o", out, *extra, "--", PY, *script_args]
    e = dict(os.environ)
    e.pop("SNAPPROF_PYTHON", None)
    if env:
        e.update(env)
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)
    print(r.stderr[-3000:])
    if r.returncode != 0:
        fail(f"{cmd} exited {r.returncode}")
    return out, r.stderr


# go tool pprof -traces prints each stack's value with a unit: time in a
# CPU profile, bytes in a heap profile. To ms of CPU, or to bytes.
TIME_UNITS = {"s": 1000.0, "ms": 1.0, "us": 0.001, "ns": 1e-6, "": 1.0}
BYTE_UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "": 1}


def traces(prof, index="cpu", units=TIME_UNITS):
    """[(weight (ms of CPU, samples, or bytes with BYTE_UNITS), [frame names,
    leaf first])], one per distinct stack."""
    txt = subprocess.run(["go", "tool", "pprof", "-sample_index=" + index, "-traces", prof],
                         capture_output=True, text=True, check=True).stdout
    unit_re = "|".join(u for u in units if u)
    out = []
    for block in txt.split("-----------+-------------------------------------------------------"):
        frames, weight = [], None
        for line in block.splitlines():
            m = re.match(r"^\s+([0-9.]+)(" + unit_re + r"|)\s+(.*)$", line)
            if m and weight is None:
                weight = float(m.group(1)) * units[m.group(2)]
                frames.append(m.group(3).strip())
            elif weight is not None and line.startswith("             "):
                frames.append(line.strip())
        if weight is not None:
            out.append((weight, frames))
    return out


def mappings(prof):
    return subprocess.run(["go", "tool", "pprof", "-raw", prof], capture_output=True, text=True,
                          check=True).stdout.split("Mappings", 1)[-1]


def shares(cli, tmp, seed):
    # SNAPPROF_KERNEL=1: the truth, time.thread_time(), counts kernel time
    # too, and user-time samples cannot see it. py_strings' page faults
    # cost more on a busier machine: without the kernel share its profile
    # share fell 2-3 pp below the truth and py_zlib's rose 3 pp above it
    # (CI run 18, clang: +0.033 against a tolerance of 0.029); with it
    # each thread's kernel time is on the stack that made it.
    truth_file = os.path.join(tmp, "truth.json")
    prof, _ = record(cli, tmp, [os.path.join(HERE, "shares.py"), truth_file, "2.5", str(seed)],
                     ["--python"], env={"SNAPPROF_KERNEL": "1"})
    truth = json.load(open(truth_file))
    funcs = sorted(truth)
    got = {f: 0.0 for f in funcs}
    for w, frames in traces(prof):
        hit = [f for f in frames if f in got]
        if hit:
            got[hit[0]] += w
    n = 0
    zlib_samples = zlib_under = 0
    for w, frames in traces(prof, "samples"):
        # A capture's kernel time is a second sample of its stack under
        # "[kernel]": one draw, counted once.
        if frames and frames[0] == "[kernel]":
            continue
        n += w if any(f in got for f in frames) else 0
        zi = [i for i, f in enumerate(frames) if "libz" in f or f.startswith("deflate")]
        if zi:
            zlib_samples += w
            above = frames[max(zi) + 1:]
            # Python -> C: the first Python frame above libz is py_zlib.
            py = [f for f in above if f in got]
            zlib_under += w if py and py[0] == "py_zlib" else 0
    total_t, total_g = sum(truth.values()), sum(got.values())
    if n < 1000 or total_g == 0:
        fail(f"only {n} samples in the three functions")
    tol = max(0.02, 4 * 0.5 / math.sqrt(n))
    print(f"samples in the functions: {n}, tolerance {tol:.3f}")
    bad = []
    for f in funcs:
        t, g = truth[f] / total_t, got[f] / total_g
        print(f"{f:12s} truth {t:.3f} profile {g:.3f} diff {g - t:+.3f}")
        if abs(g - t) > tol:
            bad.append(f)
    print(f"zlib samples {zlib_samples}, under py_zlib {zlib_under}")
    if zlib_samples < 50 or zlib_under < 0.99 * zlib_samples:
        fail("libz frames are not under the Python frame that called them")
    if bad:
        fail(f"shares off: {bad}")


def young(cli, tmp):
    """Threads that live ~40 ms of CPU each: their samples in the evaluation
    loop carry their Python frames from the first one, and so do their
    samples in zlib, taken while they have released the GIL: the handler
    finds a thread by its own key (CPython's gilstate.autoTSSkey), or at
    the GIL. Without either, a thread had no Python frames until the
    sampler next read the interpreter's thread list (at a drain)."""
    prof, _ = record(cli, tmp, [os.path.join(HERE, "young.py"), "80", "0.04"], ["--python"])
    ev = ev_py = zl = zl_py = 0
    for w, frames in traces(prof, "samples"):
        if "clone3" not in frames:  # the main thread: not a young one
            continue
        py = "Thread._bootstrap" in frames
        if py or "_PyEval_EvalFrameDefault" in frames:
            ev += w
            ev_py += w if py and "_PyEval_EvalFrameDefault" not in frames else 0
        zi = [i for i, f in enumerate(frames) if "libz" in f or f.startswith("deflate")]
        if zi:
            zl += w
            zl_py += w if "py_young" in frames[max(zi) + 1:] else 0
    print(f"young threads: {ev} samples in the evaluation loop, {ev_py} with Python frames; "
          f"{zl} in zlib, {zl_py} under py_young")
    # ~1500 and ~1000 samples: one standard error of a share near 0.99 is
    # under 0.5 %, of one near 0.95 under 0.7 %.
    if ev < 800 or zl < 400:
        fail("too few samples in the young threads")
    # Found only at the GIL, a thread whose first samples fell in deflate
    # (GIL released) had no Python frames: zlib 0.959-0.985 in 20 runs
    # (mean 0.973, sd 0.0075). Since the handler finds a thread by its own
    # key (CPython's gilstate.autoTSSkey) from its first sample, 20 runs
    # (stop 45, load ~12 on 2 CPUs, 2946-3394 and 1004-1329 samples) gave
    # the evaluation loop 1.000 every time and zlib 0.998-1.000 (3 samples
    # missed in 23 621). So 0.99 and 0.98: at the old figures either fails
    # (0.985 at best). The unit test python_capture_own_key_without_gil
    # guards the lookup itself. Without the GIL lookup: 0.82 (20 ms
    # drains), 0.38-0.44 (200 ms drains).
    if ev_py < 0.99 * ev:
        fail("young threads' evaluation loop samples without their Python frames")
    if zl_py < 0.98 * zl:
        fail("young threads' zlib samples not under py_young")


def recursion(cli, tmp, depth=500, calls=200, whole_min=0.99):
    """whole_min: churn's chains live ~40 ms of CPU, so a round whose
    early drain comes too late (the sampling thread starved that long: load
    ~20 on 2 CPUs, or the host stalling its vCPU) loses its ~40 samples,
    1.5 % (in 26 runs: 97.16 % and 98.59 % once each, the others
    99.09-99.96 %); with names read only at the periodic drain it was
    36-82 %. churn's bound is 0.90, between the two: clean-clone CI runs
    gave 73.8 % and 93.4 % beside other tests, and 94.9 % alone (run 22:
    143 of 2817 samples, a few rounds' worth); alone here 99.8-99.96 %."""
    prof, _ = record(cli, tmp, [os.path.join(HERE, "recursion.py"), "3", str(depth), str(calls)],
                     ["--python"])
    n = whole = deepest = bad_pairs = 0
    for w, frames in traces(prof, "samples"):
        idx = [i for i, f in enumerate(frames) if re.fullmatch(r"f_\d+", f)]
        # A sample whose every chain frame lost its name counts against
        # wholeness too.
        if not idx and "<code object freed>" not in frames:
            continue
        n += w
        if not idx:
            continue
        ks = [int(frames[i][2:]) for i in idx]
        # Each f_k's caller must be f_{k-1}, all in one run, then main and <module>.
        chain = ks == list(range(ks[0], -1, -1)) and idx == list(range(idx[0], idx[0] + len(ks)))
        tail = frames[idx[-1] + 1:idx[-1] + 3]
        # Pairs of adjacent frames both named f_*: the caller must be the
        # one the workload has (a "<code object freed>" between them is a
        # lost name, not a wrong one, and fails the sample's wholeness).
        pairs = sum(1 for i in range(len(frames) - 1)
                    if re.fullmatch(r"f_\d+", frames[i]) and re.fullmatch(r"f_\d+", frames[i + 1])
                    and int(frames[i + 1][2:]) != int(frames[i][2:]) - 1)
        bad_pairs += pairs * w
        if chain and tail == ["main", "<module>"]:
            whole += w
            deepest += w if ks[0] == depth - 1 else 0
    print(f"samples with the chain: {n}, whole {whole} ({100.0 * whole / max(n, 1):.2f} %), "
          f"at the deepest function {deepest}, impossible caller pairs {bad_pairs}")
    if n < 500 or deepest < n / 2:
        fail("too few samples in the chain")
    if whole < whole_min * n or bad_pairs:
        fail("chains not whole")


def faulthandler(cli, tmp):
    # CPython's faulthandler gives the main thread an alternate signal
    # stack of SIGSTKSZ + AT_MINSIGSTKSZ bytes, and our handler runs there
    # (SA_ONSTACK): a handler that needs more stack crashes the program.
    # pytest enables faulthandler by default. 100 deep: the handler reads
    # the most code objects it can at once.
    prof, _ = record(cli, tmp, ["-X", "faulthandler", os.path.join(HERE, "recursion.py"), "3",
                                "100"], ["--python"])
    n = sum(w for w, frames in traces(prof, "samples") if "f_99" in frames)
    print(f"samples at the deepest function: {n}")
    if n < 100:
        fail("too few samples at the deepest function")


def altstack(cli, tmp):
    # The handler's own use of a painted alternate signal stack: the most
    # of it used while recording a 100-deep chain with --python (every
    # capture reads two batches of code objects), less the most used by
    # CPython's own C signal trampoline (the kernel's signal frame). Under
    # 2 KiB: 1.3 KiB measured, against 7.8 KiB before the Python walk kept
    # its buffers in the capture slot and 14 KiB with the merged read's
    # staging buffer on the stack, which overflowed faulthandler's stack.
    script, size = os.path.join(HERE, "altstack.py"), "65536"
    r = subprocess.run([PY, script, size, "trivial"], capture_output=True, text=True, timeout=60)
    m = re.search(r"altstack high water: (\d+)", r.stderr)
    if r.returncode != 0 or not m:
        fail(f"altstack.py trivial: {r.returncode} {r.stderr[-2000:]}")
    kernel = int(m.group(1))
    prof, err = record(cli, tmp, [script, size, "chain", "2", "100"], ["--python"])
    m = re.search(r"altstack high water: (\d+)", err)
    if not m:
        fail("altstack.py chain did not report its high water")
    ours = int(m.group(1)) - kernel
    n = sum(w for w, frames in traces(prof, "samples") if "f_99" in frames)
    print(f"signal frame and trampoline {kernel} bytes; our handler {ours} bytes; "
          f"samples at the deepest function {n}")
    if n < 100:
        fail("too few samples at the deepest function")
    if ours > 2048:
        fail(f"the handler used {ours} bytes of the alternate signal stack")


def unknown(cli, tmp):
    prof, err = record(cli, tmp, [os.path.join(HERE, "recursion.py"), "0.5", "50"], ["--python"],
                       env={"SNAPPROF_PYTHON_VERSION_FOR_TEST": "0x030c00f0"}, hz=500)
    if err.count("frame layout unknown") != 1:
        fail("the summary does not say once that the layout is unknown")
    native_only(prof)


def refused(cli, tmp):
    """Python frames are read with process_vm_readv, which a seccomp filter
    may refuse (Docker's default profile does, without CAP_SYS_PTRACE): the
    profile is then native, and the summary says so (it said nothing)."""
    launcher = os.environ.get("SNAPPROF_TEST_SECCOMP_EXEC", "")
    if not os.access(launcher, os.X_OK):
        skip("no seccomp_exec launcher (SNAPPROF_TEST_SECCOMP_EXEC)")
    out = os.path.join(tmp, "p.pb.gz")
    script = os.path.join(HERE, "recursion.py")
    # Through a shell: record runs only programs the preload can load into,
    # and the launcher is static; it installs the filter and execs python.
    cmd = [cli, "record", "-F", "500", "-o", out, "--python", "--", "/bin/sh", "-c",
           f"exec {launcher} errno process_vm_readv {PY} {script} 0.5 50"]
    e = dict(os.environ)
    e.pop("SNAPPROF_PYTHON", None)
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)
    print(r.stderr[-3000:])
    if r.returncode != 0:
        fail(f"{cmd} exited {r.returncode}")
    want = ("--python: process_vm_readv on our own memory was refused (Operation not permitted: "
            "a seccomp filter?), native frames only")
    if r.stderr.count(want) != 1:
        fail(f"the summary does not say once: {want}")
    native_only(out)


def native_only(prof):
    if "[python]" in mappings(prof):
        fail("a [python] mapping in a profile that should have native frames only")
    tr = traces(prof)
    if not any("_PyEval_EvalFrameDefault" in fr for _, fr in tr):
        fail("no _PyEval_EvalFrameDefault frame: not a native profile of Python")
    if any(re.fullmatch(r"f_\d+", f) for _, fr in tr for f in fr):
        fail("Python function names in a native profile")


def off(cli, tmp):
    prof, err = record(cli, tmp, [os.path.join(HERE, "recursion.py"), "0.5", "50"], hz=500)
    if "Python" in err:
        fail("the summary talks of Python without --python")
    native_only(prof)


def wall(cli, tmp):
    """--wall --python: each waiting thread's samples name the Python function
    it waits in (read through /proc, no signal), above the native wait."""
    prof, _ = record(cli, tmp, [os.path.join(HERE, "waits.py"), "1.5"], ["--python", "--wall"],
                     hz=100)
    tr = traces(prof, "samples")
    want = {"waits_in_sleep": "sleeper", "waits_on_lock": "locker", "waits_in_recv": "reader"}
    for fn in list(want) + ["works_in_main"]:
        n = sum(w for w, fr in tr if fn in fr)
        # Each Python function appears above native frames (the wait) and
        # below <module>'s thread bootstrap: never as the leaf of a wait
        # that lost its native part.
        print(f"{fn}: {n:.0f} samples")
        if n < 20:
            fail(f"{fn}: {n:.0f} samples; a thread that waits 1.5 s at 100 Hz should give ~150")
    for fn in want:
        natives = [fr for w, fr in tr if fn in fr and fr.index(fn) > 0]
        if not natives:
            fail(f"{fn}: no native frame under it (the wait itself)")
    # The waits are read through /proc: the blocked samples are most of the
    # waiting threads' samples (sleeper wakes every 50 ms, so some of its
    # samples are signalled).
    if "_PyEval_EvalFrameDefault" in " ".join(f for _, fr in tr for f in fr if "waits_on_lock" in fr):
        fail("an evaluation loop frame left in a waiting thread's stack")


def heap(cli, tmp):
    """--heap --python: a sampled allocation's stack has the Python frames of
    the thread that allocated, so alloc_space splits by Python function as
    the bytes asked for do."""
    truth_file = os.path.join(tmp, "truth.json")
    # 512 MiB at 256 KiB: ~2000 samples, ~2 s of CPU (2 ms after each
    # round of ~420 KiB), ~1000 sampled allocations per CPU-second.
    interval = 262144
    record(cli, tmp, [os.path.join(HERE, "allocs.py"), truth_file, "512", "3", "2"],
           ["--python", "--heap", "--heap-interval", str(interval)],
           env={"PYTHONMALLOC": "malloc"}, hz=100)
    prof = os.path.join(tmp, "p.heap.pb.gz")
    truth = json.load(open(truth_file))
    got = {f: 0.0 for f in truth}
    total = python_total = 0.0
    no_slot = 0.0
    for w, frames in traces(prof, "alloc_space", BYTE_UNITS):
        if frames == ["[heap: no capture slot]"]:
            # Allocations faster than the drain (heap/README.md): their
            # bytes count, their stacks are not taken, in every function
            # alike (the rounds interleave them).
            no_slot += w
            continue
        total += w
        hit = [f for f in frames if f in got]
        if hit:
            got[hit[0]] += w
        if "<module>" in frames:
            python_total += w
            if "_PyEval_EvalFrameDefault" in frames:
                fail("an evaluation loop frame left in a Python allocation's stack: " +
                     ";".join(frames))
    n = total / interval  # about how many samples with a stack
    print(f"alloc_space {total / 1e6:.1f} MB with a stack, {no_slot / 1e6:.1f} MB without, "
          f"under <module> {python_total / 1e6:.1f} MB, ~{n:.0f} samples")
    if n < 500:
        fail(f"only ~{n:.0f} samples with a stack")
    if python_total < 0.9 * total:
        fail("less than 90 % of the bytes allocated under a Python frame")
    tol = max(0.02, 4 * 0.5 / math.sqrt(n))
    t_all, g_all = sum(truth.values()), sum(got.values())
    bad = []
    for f in sorted(truth):
        t, g = truth[f] / t_all, got[f] / g_all if g_all else 0
        print(f"{f:12s} truth {t:.3f} profile {g:.3f} diff {g - t:+.3f} (tolerance {tol:.3f})")
        if abs(g - t) > tol:
            bad.append(f)
    if bad:
        fail(f"shares off: {bad}")


def callback(cli, tmp, refresh_only):
    """A C thread spins 0.5 CPU-s in native code (the handler marks it: no
    thread state, not the GIL holder), then calls back into Python for 1.5
    CPU-s: its samples there must carry py_callback. With _PyRuntime in the
    main program the mark gives way as soon as the thread takes the GIL (95
    %); with refresh_only (the seam that makes it look like a library's,
    where the mark holds until the next refresh) after the next refresh,
    which comes at the next drain (at most 200 ms: 50 %). A mark that
    outlives the refresh leaves the callback with no Python frames."""
    lib = os.environ.get("SNAPPROF_TEST_CALLBACK_LIB")
    if not lib or not os.path.exists(lib):
        skip("SNAPPROF_TEST_CALLBACK_LIB (the test's C library) is not built")
    env = {"SNAPPROF_PYTHON_RUNTIME_IN_LIBRARY_FOR_TEST": "1"} if refresh_only else None
    prof, _ = record(cli, tmp, [os.path.join(HERE, "callback.py"), lib, "0.5", "1.5"],
                     ["--python"], env=env)
    native = py = eval_only = 0
    for w, frames in traces(prof, "samples"):
        if "callback_native_spin" in frames:
            native += w
        elif "callback_call_python" in frames:
            if "py_callback" in frames:
                py += w
            elif "_PyEval_EvalFrameDefault" in frames:
                eval_only += w
    share = py / max(py + eval_only, 1)
    print(f"native {native}, callback with Python frames {py}, without {eval_only} "
          f"({100.0 * share:.1f} % with)")
    if native < 200:
        fail("too few samples in the native phase (the mark was not exercised)")
    if py + eval_only < 700:
        fail("too few samples in the callback")
    if share < (0.5 if refresh_only else 0.95):
        fail("the callback's samples lack its Python frames")


def main():
    cli, mode = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3] == "sanitized":
        skip("LD_PRELOAD of a sanitized library into another program cannot work "
             "(the sanitizer runtime must load first)")
    if not os.access(PY, os.X_OK):
        skip(f"{PY} is not installed (tools/setup.sh installs python3.11)")
    if shutil.which("go") is None:
        skip("go is not installed")
    with tempfile.TemporaryDirectory(prefix="snapprof-py-") as tmp:
        {"shares": lambda: shares(cli, tmp, 1), "heldout": lambda: shares(cli, tmp, 2),
         "recursion": lambda: recursion(cli, tmp),
         "churn": lambda: recursion(cli, tmp, depth=30, calls=40, whole_min=0.90),
         "young": lambda: young(cli, tmp),
         "faulthandler": lambda: faulthandler(cli, tmp), "altstack": lambda: altstack(cli, tmp),
         "unknown": lambda: unknown(cli, tmp), "refused": lambda: refused(cli, tmp),
         "callback": lambda: callback(cli, tmp, False),
         "callback_refresh": lambda: callback(cli, tmp, True),
         "off": lambda: off(cli, tmp), "wall": lambda: wall(cli, tmp),
         "heap": lambda: heap(cli, tmp)}[mode]()
    print("PASS")


main()
