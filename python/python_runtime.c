/* Which interpreter, and its threads (out of band): finds _PyRuntime, the
 * version and its layout, the evaluation loop's code ranges, and, on each
 * refresh, every PyThreadState of the process with its native_thread_id,
 * published in a small table the signal handler reads; and the handler's
 * lookup, which falls back on the thread that holds the GIL. */

#include "python/python_internal.h"

#include "common/seccomp.h"
#include "module_cache/module_cache.h"

#include <dlfcn.h>
#include <elf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <libelf.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

snapprof__py_state_t snapprof__py;

static int tried;      /* snapprof__python_enable() ran */
static int unknown;    /* an interpreter whose layout the table does not know */
static int read_errno; /* process_vm_readv on our memory refused: its errno */
static char status[160] = "not looked for";

/* ------------------------------------------------------------------------ */
/* Checked reads                                                            */
/* ------------------------------------------------------------------------ */

int snapprof__py_read(uintptr_t addr, void *dst, size_t n)
{
    struct iovec local = {.iov_base = dst, .iov_len = n};
    struct iovec remote = {.iov_base = (void *)addr, .iov_len = n};
    /* Async-signal-safe: two system calls, no libc state. */
    pid_t pid = atomic_load_explicit(&snapprof__py.pid, memory_order_relaxed);
    ssize_t got = snapprof__process_vm_readv(pid, &local, 1, &remote, 1);
    return got == (ssize_t)n ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* Thread states: tid -> PyThreadState, for the handler                     */
/* ------------------------------------------------------------------------ */

#define PY_THREADS_MAX 512

/* One (tid, PyThreadState) of either table below. */
typedef struct py_thread {
    _Atomic pid_t tid;
    _Atomic uintptr_t tstate;
} py_thread_t;

/* An entry is published tstate first, then tid (release), and withdrawn
 * tid first; the handler checks what it finds anyway (native_thread_id). */
static py_thread_t threads[PY_THREADS_MAX];

/* Thread states the handler found itself, at the thread that holds the
 * GIL, for threads the table does not have yet (started since the last
 * refresh): a slot is claimed by a compare-and-swap of its tid from 0,
 * then written tstate last (release). Each is stamped with the refresh
 * generation it was found in, and the next refresh, whose table has every
 * thread state that existed before it began, clears those of older
 * generations: a slot lives until the next refresh, and a thread state
 * freed since (its address reused) is not kept past it. Races between a
 * handler and a refresh at most lose an entry, found again at the next
 * sample that holds the GIL; every use checks native_thread_id anyway. */
#define PY_LEARNED_MAX 256

static _Atomic uint32_t refresh_gen = 1;
static py_thread_t learned[PY_LEARNED_MAX];
static _Atomic uint32_t learned_gen[PY_LEARNED_MAX]; /* the generation each was found in */

/* The tables the handler looks in, in order. */
static const struct {
    py_thread_t *t;
    size_t n;
} tables[] = {{threads, PY_THREADS_MAX}, {learned, PY_LEARNED_MAX}};

/* Whether ts is readable and names thread tid; its first ts_size bytes
 * land in tsb, and rider (may be NULL) is read in the same system call.
 * Async-signal-safe. */
static int names_thread(const snapprof__py_layout_t *l, uintptr_t ts, pid_t tid, uint8_t *tsb,
                        snapprof__py_rider_t *rider)
{
    unsigned long native;
    size_t more = 0; /* bytes of the riders read */
    if (rider)
        rider->got = 0;
    if (ts == 0 || (ts & 7))
        return 0;
    if (rider && rider->nremote > 1) {
        rider->local[0] = (struct iovec){tsb, l->ts_size};
        rider->remote[0] = (struct iovec){(void *)ts, l->ts_size};
        pid_t pid = atomic_load_explicit(&snapprof__py.pid, memory_order_relaxed);
        ssize_t got = snapprof__process_vm_readv(pid, rider->local, rider->nlocal, rider->remote,
                                                 rider->nremote);
        if (got < (ssize_t)l->ts_size)
            return 0;
        more = (size_t)got - l->ts_size;
    } else if (snapprof__py_read(ts, tsb, l->ts_size) < 0) {
        return 0;
    }
    memcpy(&native, tsb + l->ts_native_thread_id, sizeof native);
    if (native != (unsigned long)tid)
        return 0;
    if (rider)
        rider->got = more;
    return 1;
}

static _Atomic uint64_t learned_full; /* learn() found no free slot */

uint64_t snapprof__py_learned_full_take(void)
{
    if (atomic_load_explicit(&learned_full, memory_order_relaxed) == 0)
        return 0;
    return atomic_exchange_explicit(&learned_full, 0, memory_order_relaxed);
}

/* Remembers ts for tid until the next refresh. Async-signal-safe. */
static void learn(pid_t tid, uintptr_t ts)
{
    uint32_t gen = atomic_load_explicit(&refresh_gen, memory_order_acquire);
    size_t i = 0;
    while (i < PY_LEARNED_MAX && atomic_load_explicit(&learned[i].tid, memory_order_relaxed) != tid)
        i++;
    for (size_t k = 0; i == PY_LEARNED_MAX && k < PY_LEARNED_MAX; k++) {
        pid_t none = 0;
        if (atomic_load_explicit(&learned[k].tid, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong_explicit(&learned[k].tid, &none, tid,
                                                    memory_order_acquire, memory_order_relaxed))
            i = k;
    }
    if (i == PY_LEARNED_MAX) {
        /* Full (256 threads started since the last refresh and found):
         * looked up again at its next sample, by its own key
         * (own_tstate()) or at the GIL. Counted (python_learned_full). */
        atomic_fetch_add_explicit(&learned_full, 1, memory_order_relaxed);
        return;
    }
    atomic_store_explicit(&learned_gen[i], gen, memory_order_relaxed);
    atomic_store_explicit(&learned[i].tstate, ts, memory_order_release);
}

/* The mark of a thread found in neither table, nor by its own key, and
 * not holding the GIL, for its own later samples: the refresh generation
 * it was found in and the GIL holder then
 * (_PyRuntime.gilstate.tstate_current). Until the next refresh (which has
 * the thread in its table if it has a thread state by then), a sample of
 * the thread skips both tables, and looks at the GIL holder again only
 * when it has changed: a native thread in a Python process pays a plain
 * load a sample instead of two table scans and a system call, and a
 * thread that starts running Python code (a C thread calling back into
 * Python, a Python thread whose key was not yet set) is found when it
 * takes the GIL. The holder is read with a plain load only when
 * _PyRuntime is in the main executable, which is never unmapped
 * (holder_plain); in a library (dlclose could unmap it) a marked thread
 * is not looked at again until the next refresh. */
static __thread struct {
    uint32_t gen;
    uintptr_t holder;
} tls_mark __attribute__((tls_model("initial-exec")));

/* The calling thread's own thread state as CPython keeps it for
 * PyGILState_GetThisThreadState(): the value of its thread-specific key
 * _PyRuntime.gilstate.autoTSSkey, set when a thread state is bound to its
 * thread (a threading thread's at its start, before it first takes the
 * GIL; a C thread's at PyGILState_Ensure()), 0 for a thread that never
 * had one. So a thread found in neither table is found while it has
 * released the GIL too, from its first sample: before, a thread whose
 * first samples fell in zlib (GIL released) had no Python frames until it
 * was next sampled holding the GIL (python_frames_shares: up to a whole
 * deflate call's samples, 1-2 % of libz's). The key is read with plain
 * loads only when _PyRuntime is in the main executable (holder_plain),
 * else checked. glibc's pthread_getspecific() takes no lock and makes no
 * system call: loads from the calling thread's own key blocks and a
 * compare with the key's sequence number (NULL for a key out of range).
 * Async-signal-safe (on glibc). */
static uintptr_t own_tstate(const snapprof__py_layout_t *l)
{
    if (l->runtime_autotss == 0)
        return 0;
    uintptr_t at = snapprof__py.runtime + l->runtime_autotss;
    struct {
        int initialized;
        pthread_key_t key;
    } tss;
    if (snapprof__py.holder_plain) {
        tss.initialized = atomic_load_explicit((_Atomic int *)at, memory_order_relaxed);
        tss.key =
            atomic_load_explicit((_Atomic pthread_key_t *)(at + sizeof(int)), memory_order_relaxed);
    } else if (snapprof__py_read(at, &tss, sizeof tss) < 0) {
        return 0;
    }
    if (!tss.initialized)
        return 0;
    return (uintptr_t)pthread_getspecific(tss.key);
}

uintptr_t snapprof__py_tstate_find(pid_t tid, uint8_t *tsb, size_t size, int self,
                                   snapprof__py_rider_t *rider)
{
    const snapprof__py_layout_t *l = snapprof__py.layout;
    if (rider)
        rider->got = 0;
    if (l->ts_size > size)
        return 0;
    uint32_t gen = atomic_load_explicit(&refresh_gen, memory_order_acquire);
    uintptr_t holder_at = snapprof__py.runtime + l->runtime_tstate_current;
    uintptr_t ts = 0;
    if (self && tls_mark.gen == gen) {
        if (!snapprof__py.holder_plain || l->runtime_tstate_current == 0)
            return 0;
        ts = atomic_load_explicit((_Atomic uintptr_t *)holder_at, memory_order_relaxed);
        if (ts == tls_mark.holder)
            return 0;
    } else {
        /* Acquire on both: the refresh publishes tid last, a handler's
         * learn() tstate last. */
        for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++) {
            py_thread_t *t = tables[k].t;
            for (size_t i = 0; i < tables[k].n; i++)
                if (atomic_load_explicit(&t[i].tid, memory_order_acquire) == tid) {
                    ts = atomic_load_explicit(&t[i].tstate, memory_order_acquire);
                    if (names_thread(l, ts, tid, tsb, rider))
                        return ts;
                    break;
                }
        }
        /* The thread's own key first (plain loads), then the GIL holder
         * (a checked read): from another thread (wall mode's blocked
         * threads) only the holder can be looked at. */
        ts = self ? own_tstate(l) : 0;
        if (ts != 0 && names_thread(l, ts, tid, tsb, rider)) {
            tls_mark.gen = 0;
            learn(tid, ts);
            return ts;
        }
        if (l->runtime_tstate_current == 0 || snapprof__py_read(holder_at, &ts, sizeof ts) < 0)
            ts = 0;
    }
    /* A thread that runs Python code holds the GIL: the interpreter's
     * current thread state is then its own. */
    if (!names_thread(l, ts, tid, tsb, rider)) {
        if (self) {
            tls_mark.gen = gen;
            tls_mark.holder = ts;
        }
        return 0;
    }
    if (self)
        tls_mark.gen = 0;
    learn(tid, ts);
    return ts;
}

static uint64_t last_refresh_ns;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void snapprof__python_refresh(int force)
{
    if (!atomic_load_explicit(&snapprof__py.ready, memory_order_acquire))
        return;
    uint64_t now = mono_ns();
    if (!force && now - last_refresh_ns < 10000000u)
        return;
    last_refresh_ns = now;
    /* Thread states learned from here on are kept past this refresh. */
    uint32_t gen = atomic_fetch_add_explicit(&refresh_gen, 1, memory_order_acq_rel) + 1;
    atomic_store_explicit(&snapprof__py.pid, getpid(), memory_order_relaxed);
    const snapprof__py_layout_t *l = snapprof__py.layout;
    pid_t tids[PY_THREADS_MAX];
    uintptr_t states[PY_THREADS_MAX];
    size_t n = 0;
    uintptr_t interp = 0;
    if (snapprof__py_read(snapprof__py.runtime + l->runtime_interpreters_head, &interp,
                          sizeof interp) < 0)
        return;
    /* Every interpreter's threads (subinterpreters' frames are read like
     * the main one's; the docs say they are not a supported case). Caps
     * end a list that a concurrent change made circular. */
    for (int ni = 0; interp != 0 && ni < 64; ni++) {
        uintptr_t ts = 0;
        if (snapprof__py_read(interp + l->interp_threads_head, &ts, sizeof ts) < 0)
            break;
        for (int nt = 0; ts != 0 && nt < 4096 && n < PY_THREADS_MAX; nt++) {
            uintptr_t next = 0;
            unsigned long native = 0;
            if (snapprof__py_read(ts + l->ts_next, &next, sizeof next) < 0 ||
                snapprof__py_read(ts + l->ts_native_thread_id, &native, sizeof native) < 0)
                break;
            if (native != 0) {
                tids[n] = (pid_t)native;
                states[n] = ts;
                n++;
            }
            ts = next;
        }
        uintptr_t next_interp = 0;
        /* PyInterpreterState.next is its first member. */
        if (snapprof__py_read(interp, &next_interp, sizeof next_interp) < 0)
            break;
        interp = next_interp;
    }
    /* Withdraw the threads that are gone, update the others, add the new. */
    for (size_t i = 0; i < PY_THREADS_MAX; i++) {
        pid_t tid = atomic_load_explicit(&threads[i].tid, memory_order_relaxed);
        if (tid == 0)
            continue;
        size_t k = 0;
        while (k < n && tids[k] != tid)
            k++;
        if (k == n) {
            atomic_store_explicit(&threads[i].tid, 0, memory_order_release);
            atomic_store_explicit(&threads[i].tstate, 0, memory_order_relaxed);
        } else {
            atomic_store_explicit(&threads[i].tstate, states[k], memory_order_relaxed);
            tids[k] = 0; /* placed */
        }
    }
    for (size_t k = 0, i = 0; k < n; k++) {
        if (tids[k] == 0)
            continue;
        while (i < PY_THREADS_MAX && atomic_load_explicit(&threads[i].tid, memory_order_relaxed))
            i++;
        if (i == PY_THREADS_MAX)
            break;
        atomic_store_explicit(&threads[i].tstate, states[k], memory_order_relaxed);
        atomic_store_explicit(&threads[i].tid, tids[k], memory_order_release);
    }
    /* The table now has every thread state that the handlers learned
     * before this refresh began, or it is gone. */
    for (size_t i = 0; i < PY_LEARNED_MAX; i++) {
        if (atomic_load_explicit(&learned[i].tid, memory_order_relaxed) == 0 ||
            atomic_load_explicit(&learned_gen[i], memory_order_relaxed) == gen)
            continue;
        atomic_store_explicit(&learned[i].tstate, 0, memory_order_relaxed);
        atomic_store_explicit(&learned[i].tid, 0, memory_order_release);
    }
}

/* ------------------------------------------------------------------------ */
/* The evaluation loop's .cold part                                         */
/* ------------------------------------------------------------------------ */

/* Debian's stripped interpreter exports _PyEval_EvalFrameDefault but not
 * the .cold part GCC split from it (its unlikely paths), which is a
 * function of its own in .eh_frame. The hot part jumps into it from many
 * places: decode every jmp/jcc rel32 the hot part's bytes could hold, and
 * take the CFI range (FDE) that most of the targets outside the hot part
 * fall in. Bytes that only look like jumps land anywhere, one each; the
 * cold part collects hundreds (254 in 3.11.2). */
static int by_addr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

static void find_cold(void)
{
    const snapprof_module_t *m = snapprof_module_find(snapprof__py.eval_lo);
    if (m == NULL || m->path == NULL || m->path[0] != '/')
        return;
    size_t cap = 4096, n = 0;
    uintptr_t *targets = malloc(cap * sizeof *targets);
    if (targets == NULL)
        return;
    const uint8_t *code = (const uint8_t *)snapprof__py.eval_lo;
    size_t size = snapprof__py.eval_hi - snapprof__py.eval_lo;
    for (size_t i = 0; i + 6 <= size && n < cap; i++) {
        size_t len;
        if (code[i] == 0xe9)
            len = 5;
        else if (code[i] == 0x0f && (code[i + 1] & 0xf0) == 0x80)
            len = 6;
        else
            continue;
        int32_t rel;
        memcpy(&rel, code + i + len - 4, 4);
        uintptr_t to = snapprof__py.eval_lo + i + len + (intptr_t)rel;
        if ((to < snapprof__py.eval_lo || to >= snapprof__py.eval_hi) && to >= m->start &&
            to < m->limit)
            targets[n++] = to;
    }
    qsort(targets, n, sizeof *targets, by_addr);
    elf_version(EV_CURRENT);
    int fd = open(m->path, O_RDONLY | O_CLOEXEC);
    Elf *elf = fd >= 0 ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
    Dwarf_CFI *cfi = elf ? dwarf_getcfi_elf(elf) : NULL;
    uintptr_t best_lo = 0, best_hi = 0, lo = 0, hi = 0;
    size_t best = 0, count = 0;
    for (size_t i = 0; cfi != NULL && i < n; i++) {
        if (targets[i] >= lo && targets[i] < hi) {
            count++;
        } else {
            Dwarf_Frame *frame = NULL;
            Dwarf_Addr s, e;
            if (dwarf_cfi_addrframe(cfi, targets[i] - m->load_bias, &frame) != 0)
                continue;
            int ok = dwarf_frame_info(frame, &s, &e, NULL) >= 0;
            free(frame);
            if (!ok)
                continue;
            lo = (uintptr_t)s + m->load_bias;
            hi = (uintptr_t)e + m->load_bias;
            count = 1;
        }
        if (count > best) {
            best = count;
            best_lo = lo;
            best_hi = hi;
        }
    }
    if (best >= 16 && !(best_lo < snapprof__py.eval_hi && best_hi > snapprof__py.eval_lo)) {
        snapprof__py.cold_lo = best_lo;
        snapprof__py.cold_hi = best_hi;
    }
    if (cfi)
        dwarf_cfi_end(cfi);
    if (elf)
        elf_end(elf);
    if (fd >= 0)
        close(fd);
    free(targets);
}

int snapprof__python_is_eval_pc(uintptr_t pc)
{
    return (pc >= snapprof__py.eval_lo && pc < snapprof__py.eval_hi) ||
           (pc >= snapprof__py.cold_lo && pc < snapprof__py.cold_hi);
}

/* ------------------------------------------------------------------------ */
/* Which interpreter                                                        */
/* ------------------------------------------------------------------------ */

/* Test seam: SNAPPROF_PYTHON_VERSION_FOR_TEST=0x030c0000 makes the
 * interpreter say another version, so that the unknown-layout path runs on
 * this machine's 3.11. */
static uint32_t version_override(void)
{
    const char *s = getenv("SNAPPROF_PYTHON_VERSION_FOR_TEST");
    return s && *s ? (uint32_t)strtoul(s, NULL, 0) : 0;
}

/* Whether p is in the main program's image (the link map's first entry,
 * whose name is empty), which stays mapped for the life of the process,
 * unlike a library's (dlclose). Test seam:
 * SNAPPROF_PYTHON_RUNTIME_IN_LIBRARY_FOR_TEST=1 says no, so that
 * /usr/bin/python3.11 runs the path of a libpython loaded as a library. */
static int in_main_program(void *p)
{
    const char *s = getenv("SNAPPROF_PYTHON_RUNTIME_IN_LIBRARY_FOR_TEST");
    if (s && *s == '1')
        return 0;
    Dl_info info;
    struct link_map *lm = NULL;
    return dladdr1(p, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm != NULL && lm->l_name != NULL &&
           lm->l_name[0] == '\0';
}

int snapprof__python_enable(void)
{
    if (tried)
        return atomic_load_explicit(&snapprof__py.ready, memory_order_relaxed);
    tried = 1;
    void *runtime = dlsym(RTLD_DEFAULT, "_PyRuntime");
    if (runtime == NULL) {
        snprintf(status, sizeof status, "no Python interpreter in the process");
        return 0;
    }
    const unsigned long *pv = dlsym(RTLD_DEFAULT, "Py_Version");
    uint32_t version = pv ? (uint32_t)*pv : 0;
    uint32_t forced = version_override();
    if (forced)
        version = forced;
    const snapprof__py_layout_t *l = snapprof__py_layout_for(version);
    if (l == NULL) {
        unknown = version ? version : 1;
        if (version)
            snprintf(status, sizeof status,
                     "Python %u.%u: frame layout unknown, native frames only", version >> 24,
                     (version >> 16) & 0xff);
        else
            snprintf(
                status, sizeof status,
                "Python before 3.11 (no Py_Version): frame layout unknown, native frames only");
        return 0;
    }
    void *eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    void *code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (eval == NULL || code_type == NULL || !dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) ||
        sym == NULL || sym->st_size == 0) {
        unknown = 1;
        snprintf(status, sizeof status,
                 "Python %s: _PyEval_EvalFrameDefault or PyCode_Type not found, native frames only",
                 l->name);
        return 0;
    }
    uintptr_t probe = 0;
    atomic_store_explicit(&snapprof__py.pid, getpid(), memory_order_relaxed);
    if (snapprof__py_read((uintptr_t)runtime, &probe, sizeof probe) < 0) {
        read_errno = errno ? errno : EPERM;
        snprintf(status, sizeof status, "Python %s: process_vm_readv refused, native frames only",
                 l->name);
        return 0;
    }
    snapprof__py.layout = l;
    snapprof__py.runtime = (uintptr_t)runtime;
    snapprof__py.holder_plain = in_main_program(runtime);
    snapprof__py.code_type = (uintptr_t)code_type;
    snapprof__py.eval_lo = (uintptr_t)eval;
    snapprof__py.eval_hi = (uintptr_t)eval + sym->st_size;
    find_cold();
    snprintf(status, sizeof status, "Python %s frames%s", l->name,
             snapprof__py.cold_lo ? "" : " (evaluation loop's .cold part not found)");
    atomic_store_explicit(&snapprof__py.ready, 1, memory_order_release);
    snapprof__python_refresh(1);
    return 1;
}

const char *snapprof__python_status(void)
{
    return status;
}

int snapprof__python_read_errno(void)
{
    return read_errno;
}

uint32_t snapprof__python_layout_unknown(void)
{
    return unknown;
}
