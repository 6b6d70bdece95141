/* Python frames: CPython 3.11's interpreter frames read while the thread
 * is stopped and spliced into its native stack in place of the evaluation
 * loop's frames. Internal; the interface the sampler uses (python/README.md
 * has the whole story).
 *
 *   python_layout.c   the one table of per-version layouts
 *   python_runtime.c  which interpreter (out of band): _PyRuntime, the
 *                     version, the evaluation loop's code ranges, and the
 *                     thread states, matched to threads by native_thread_id
 *   python_capture.c  the walk in the signal handler (async-signal-safe)
 *   python_symbols.c  names, files and lines per code object (out of band),
 *                     the "[python]" pseudo module they are symbolized in
 *   python_splice.c   the splice of a capture into a native stack
 *
 * Off unless snapprof_params_t.python is set. */
#ifndef SNAPPROF_PYTHON_H
#define SNAPPROF_PYTHON_H

#include <snapprof/snapprof.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* The most interpreter frames one capture holds: CPython's default
 * recursion limit (1000) and some. A deeper chain is cut here and marked
 * SNAPPROF__PY_TRUNCATED. */
#define SNAPPROF__PY_FRAMES_MAX 1024

/* One interpreter frame as the handler copied it. */
typedef struct snapprof__py_frame_rec {
    uintptr_t code;      /* the code object's address, SNAPPROF__PY_REC_* flags in its low bits */
    uint64_t names;      /* a check of the code object's name and filename pointers */
    int32_t instr;       /* prev_instr - _PyCode_CODE(code), in code units; -1: not started */
    int32_t firstlineno; /* co_firstlineno as read */
} snapprof__py_frame_rec_t;

#define SNAPPROF__PY_REC_ENTRY 1u /* is_entry: the first frame of one evaluation loop call */
#define SNAPPROF__PY_REC_FLAGS 7u

/* What a capture found (snapprof__py_capture_t.status). */
#define SNAPPROF__PY_TRUNCATED 0x1u /* more than SNAPPROF__PY_FRAMES_MAX frames */
#define SNAPPROF__PY_BROKEN 0x2u    /* a half-linked or unreadable frame ended the walk */
#define SNAPPROF__PY_NO_STATE 0x4u  /* no thread state known for the thread (not Python) */
#define SNAPPROF__PY_OFF 0x8u       /* no interpreter, or a layout we do not know */

/* Distinct code objects the walk reads in one system call. 64 holds a
 * 50-deep stack of distinct functions in one call. */
#define SNAPPROF__PY_CODE_BATCH 64
/* What is read of one code object: its fields from code_type to the end of
 * code_qualname, in one piece (128 bytes in 3.11). */
#define SNAPPROF__PY_CODE_SPAN_MAX 128
/* Where a batch's code objects are copied to, merged ranges and the bytes
 * between them (python_capture.c, CODE_GAP_MAX): room for a batch of
 * 64 spans with gaps, since a batch is merged only as far as it fits. */
#define SNAPPROF__PY_CODE_STAGE (16 * 1024)
/* Data-stack chunks the walk keeps the used part of. */
#define SNAPPROF__PY_CHUNKS_MAX 64

/* The walk's working memory, in the capture slot beside its result rather
 * than on the handler's stack: the handler may run on a small alternate
 * signal stack (CPython's faulthandler gives the main thread SIGSTKSZ +
 * AT_MINSIGSTKSZ bytes, shared with the kernel's signal frame). A capture
 * claims one of a few that captures share (in the cache from the last
 * capture: python_capture.c) and uses its slot's own only when all are
 * taken; two captures never use one at once (the signal handler, a heap
 * sample's capture on the same thread and wall mode's blocked-thread walk
 * included). Not part of the result: the drain never reads it. */
typedef struct snapprof__py_scratch {
    struct {
        uintptr_t lo, hi; /* the used part of one chunk: frames lie in [lo, hi) */
    } chunks[SNAPPROF__PY_CHUNKS_MAX];
    uintptr_t codes[SNAPPROF__PY_CODE_BATCH]; /* a batch's distinct code objects */
    /* Where each of codes is: 1 + its index, by a hash of its address
     * (python_capture.c, find_code()); 0 for a free slot. */
    uint8_t code_index[2 * SNAPPROF__PY_CODE_BATCH];
    /* snapprof__py_read_codes(): what it read, codes[k]'s span ending at
     * stage + end[k], whether whole, and its system call's vectors. */
    uint8_t stage[SNAPPROF__PY_CODE_STAGE];
    uint8_t ok[SNAPPROF__PY_CODE_BATCH];
    uint8_t order[SNAPPROF__PY_CODE_BATCH];
    size_t end[SNAPPROF__PY_CODE_BATCH];
    struct iovec local[SNAPPROF__PY_CODE_BATCH], remote[SNAPPROF__PY_CODE_BATCH];
} snapprof__py_scratch_t;

/* The Python part of a capture slot's extra area (after the labels). */
typedef struct snapprof__py_capture {
    uint32_t count;  /* frames[0..count): innermost first */
    uint32_t status; /* SNAPPROF__PY_* */
    snapprof__py_frame_rec_t frames[SNAPPROF__PY_FRAMES_MAX];
    snapprof__py_scratch_t scratch; /* the walk's, not part of the result */
} snapprof__py_capture_t;

/* Finds the interpreter of this process, once (later calls return the
 * first answer): its _PyRuntime, its version and layout, the evaluation
 * loop's code. Returns 1 when Python frames can be read, 0 when not (no
 * interpreter, a layout the table does not know, process_vm_readv
 * refused); snapprof__python_status() says which. Sampling side (dlsym,
 * file reads). */
int snapprof__python_enable(void);

/* One line for the summary: "3.11" when frames are read, else why not
 * ("no Python interpreter in the process", "Python 3.12: layout unknown,
 * native frames only", ...). Any thread, after snapprof__python_enable(). */
const char *snapprof__python_status(void);

/* When an interpreter was found but process_vm_readv() on our own memory
 * was refused (seccomp): its errno; else 0. */
int snapprof__python_read_errno(void);

/* When an interpreter was found but its layout is unknown: its version
 * (Py_Version, 0x030c00f0 for 3.12.0) or 1 when it has none; else 0. */
uint32_t snapprof__python_layout_unknown(void);

/* Reads the interpreter's thread list again (at most every 10 ms unless
 * force) and publishes each thread's PyThreadState for the handler,
 * matched by native_thread_id. Checked reads only. Sampling side, one
 * caller at a time (the sampler lock). */
void snapprof__python_refresh(int force);

/* Walks the calling thread's interpreter frames into cap. RUNS IN THE
 * SIGNAL HANDLER: no allocation, no locks, no calls into libpython; every
 * pointer is checked before it is followed (python_capture.c).
 * Async-signal-safe. */
void snapprof__python_capture(snapprof__py_capture_t *cap);

/* Walks the interpreter frames of thread tid, another thread of this
 * process found blocked in a system call (wall mode's /proc path), into
 * cap, from the sampling side: every read is checked, since the thread may
 * wake meanwhile (the caller checks that it did not, as for its stack).
 * After snapprof__python_refresh(). No allocation, no locks, no calls into
 * libpython. */
void snapprof__python_capture_blocked(snapprof__py_capture_t *cap, pid_t tid);

/* Whether a capture met a code object whose name the sampling side has
 * not read yet since the last snapprof__python_names_taken(): the
 * sampling thread should drain soon, while the code object lives (a
 * program that makes and drops functions frees them). Any thread. */
int snapprof__python_names_wanted(void);

/* Called by the sampling thread before each drain: clears what
 * snapprof__python_names_wanted() says, and gives the handler kick, the
 * futex word that wakes the sampling thread, which the first capture that
 * meets an unnamed code object after it bumps and wakes. Sampling side. */
void snapprof__python_names_taken(uint32_t *kick);

/* Counts of the splice, added to the profiler's stats. */
typedef struct snapprof__py_splice_stats {
    uint64_t samples;      /* samples with Python frames spliced in */
    uint64_t frames;       /* Python frames spliced in */
    uint64_t truncated;    /* captures cut at SNAPPROF__PY_FRAMES_MAX */
    uint64_t broken;       /* captures ended by a half-linked frame */
    uint64_t unmatched;    /* runs of Python frames with no evaluation loop frame to replace */
    uint64_t code_reused;  /* frames whose code object was freed and reused before the drain */
    uint64_t learned_full; /* thread states found at the GIL not remembered: table full */
} snapprof__py_splice_stats_t;

/* Writes in[0..n) to out[0..max) with each native frame of the
 * evaluation loop replaced by the run of Python frames it was running (up
 * to and including its entry frame), innermost first. Returns the number
 * of frames written. Sampling side, one caller at a time (the sampler
 * lock). */
size_t snapprof__python_splice(const snapprof__py_capture_t *cap, const snapprof_frame_t *in,
                               size_t n, snapprof_frame_t *out, size_t max,
                               snapprof__py_splice_stats_t *st);

/* Whether pc (an unwound frame's) lies in the evaluation loop's code. */
int snapprof__python_is_eval_pc(uintptr_t pc);

#endif
