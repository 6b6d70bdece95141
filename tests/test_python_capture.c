/* python/python_capture.c's checked read of code objects
 * (snapprof__py_read_codes) on our own memory, no interpreter needed: code
 * objects close together are read as merged ranges into one staging
 * buffer, no more of them merged than fits it, and a range that runs into
 * memory that cannot be read loses only what cannot be read. And the
 * handler's lookup of a thread state (snapprof__py_tstate_find) against a
 * fake _PyRuntime. */
#include "python/python_internal.h"
#include "stack_copier/stack_copier.h"
#include "test.h"
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SPAN 128
#define OFF 8 /* 3.11's code_type: the read starts 8 bytes into the object */

/* Three pages, the middle one not readable; every byte of the others
 * holds its offset's low byte mixed with its page, so a copy from the
 * wrong place shows. */
static uint8_t *three_pages(void)
{
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *m =
        mmap(NULL, 3 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(m != MAP_FAILED);
    for (long i = 0; i < 3 * page; i++)
        m[i] = (uint8_t)(i * 7 + i / page);
    ASSERT_EQ(mprotect(m + page, (size_t)page, PROT_NONE), 0);
    atomic_store(&snapprof__py.pid, getpid());
    return m;
}

/* Dense code objects, 224 bytes apart as 3.11's pymalloc blocks are, and
 * one far off, met in an order that is not the addresses': each f[k] is
 * the span at its own code object. Catches a sink or offset sum that
 * shifts what lands in f[k] when ranges are merged. */
static void test_merged_ranges(void)
{
    uint8_t *m = three_pages();
    long page = sysconf(_SC_PAGESIZE);
    static snapprof__py_scratch_t s;
    memset(&s, 0, sizeof s);
    size_t n = 0;
    for (int i = 10; i >= 0; i--)
        s.codes[n++] = (uintptr_t)m + 64 + 224 * (uintptr_t)i;
    s.codes[n++] = (uintptr_t)m + 2 * (uintptr_t)page + 512;
    /* The dense eleven in one range, the far one in another: two ranges,
     * in s.remote, for the thread's next capture. */
    ASSERT_EQ(snapprof__py_read_codes(&s, n, OFF, SPAN), 2);
    ASSERT_EQ((uintptr_t)s.remote[0].iov_base, (uintptr_t)m + 64 + OFF);
    ASSERT_EQ(s.remote[0].iov_len, 224 * 10 + SPAN);
    ASSERT_EQ((uintptr_t)s.remote[1].iov_base, (uintptr_t)m + 2 * (uintptr_t)page + 512 + OFF);
    for (size_t k = 0; k < n; k++) {
        ASSERT_EQ(s.ok[k], 1);
        ASSERT(memcmp(snapprof__py_code_fields(&s, k, SPAN), (const void *)(s.codes[k] + OFF),
                      SPAN) == 0);
    }
    munmap(m, 3 * (size_t)page);
}

/* A full batch of code objects 1000 bytes apart: merged with their gaps
 * they would take 63 KiB, four times the stage, so the read must start new
 * ranges (gaps not copied) once the spans still to come would not fit
 * behind another gap; every one is read whole and lands where
 * snapprof__py_code_fields() says, and no byte is written past the stage
 * (the guard after it keeps its pattern). Catches a merge that ignores the
 * stage's size (a write past it, into the next capture's memory) or
 * offsets that drift when gaps are merged for some code objects and not
 * for others. */
static void test_stage_bounds_merging(void)
{
    enum { STRIDE = 1000 };
    size_t len = (size_t)SNAPPROF__PY_CODE_BATCH * STRIDE + 4096;
    uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(m != MAP_FAILED);
    for (size_t i = 0; i < len; i++)
        m[i] = (uint8_t)(i * 7 + i / 4096);
    atomic_store(&snapprof__py.pid, getpid());
    static struct {
        snapprof__py_scratch_t s;
        uint8_t guard[256];
    } g;
    memset(&g, 0, sizeof g);
    memset(g.guard, 0xa5, sizeof g.guard);
    size_t n = SNAPPROF__PY_CODE_BATCH;
    for (size_t k = 0; k < n; k++) /* met innermost first: not in address order */
        g.s.codes[k] = (uintptr_t)m + 64 + STRIDE * ((k * 37) % n);
    snapprof__py_read_codes(&g.s, n, OFF, SPAN);
    for (size_t k = 0; k < n; k++) {
        ASSERT_EQ(g.s.ok[k], 1);
        ASSERT(g.s.end[k] <= sizeof g.s.stage);
        ASSERT(memcmp(snapprof__py_code_fields(&g.s, k, SPAN), (const void *)(g.s.codes[k] + OFF),
                      SPAN) == 0);
    }
    for (size_t i = 0; i < sizeof g.guard; i++)
        ASSERT_EQ(g.guard[i], 0xa5);
    munmap(m, len);
}

/* A code pointer whose span runs into the unreadable page, merged with a
 * readable one before it, and a readable one in another range after it
 * that the walk met first: only the unreadable one fails. Catches a read
 * that stops at the hole and drops the code objects after it (the walk
 * would end at a frame that was readable). */
static void test_hole_loses_only_unreadable(void)
{
    uint8_t *m = three_pages();
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t far = (uintptr_t)m + 2 * (uintptr_t)page + 200;
    uintptr_t before = (uintptr_t)m + (uintptr_t)page - 300;
    uintptr_t bad = (uintptr_t)m + (uintptr_t)page - 60; /* runs into the hole */
    static snapprof__py_scratch_t s;
    s.codes[0] = far;
    s.codes[1] = bad;
    s.codes[2] = before;
    ASSERT_EQ(snapprof__py_read_codes(&s, 3, OFF, SPAN), 0); /* not all read: no ranges */
    ASSERT_EQ(s.ok[0], 1);
    ASSERT_EQ(s.ok[1], 0);
    ASSERT_EQ(s.ok[2], 1);
    ASSERT(memcmp(snapprof__py_code_fields(&s, 0, SPAN), (const void *)(far + OFF), SPAN) == 0);
    ASSERT(memcmp(snapprof__py_code_fields(&s, 2, SPAN), (const void *)(before + OFF), SPAN) == 0);
    /* Inside the hole itself, and a null one: nothing read, no fault. */
    s.codes[0] = (uintptr_t)m + (uintptr_t)page + 64;
    s.codes[1] = 0;
    s.codes[2] = far;
    snapprof__py_read_codes(&s, 3, OFF, SPAN);
    ASSERT_EQ(s.ok[0], 0);
    ASSERT_EQ(s.ok[1], 0);
    munmap(m, 3 * (size_t)page);
}

/* A fake interpreter on our own memory for snapprof__py_tstate_find():
 * the 3.11 layout, a _PyRuntime with no interpreters (a refresh publishes
 * no thread) whose GIL holder the test sets, and thread states that name
 * the tids the test gives them. */
static _Alignas(64) uint8_t fake_runtime[4096];
static _Alignas(64) uint8_t fake_states[300][512];

static const snapprof__py_layout_t *fake_python(int holder_plain)
{
    const snapprof__py_layout_t *l = snapprof__py_layout_for(0x030b02f0);
    ASSERT(l != NULL);
    ASSERT(l->runtime_tstate_current + sizeof(uintptr_t) <= sizeof fake_runtime);
    ASSERT(l->ts_size <= sizeof fake_states[0]);
    memset(fake_runtime, 0, sizeof fake_runtime);
    snapprof__py.layout = l;
    snapprof__py.runtime = (uintptr_t)fake_runtime;
    snapprof__py.holder_plain = holder_plain;
    atomic_store(&snapprof__py.pid, getpid());
    atomic_store(&snapprof__py.ready, 1);
    snapprof__python_refresh(1); /* empties both tables */
    return l;
}

/* Thread state i, naming tid. */
static uintptr_t fake_state(const snapprof__py_layout_t *l, size_t i, pid_t tid)
{
    unsigned long native = (unsigned long)tid;
    memcpy(fake_states[i] + l->ts_native_thread_id, &native, sizeof native);
    return (uintptr_t)fake_states[i];
}

static void set_holder(const snapprof__py_layout_t *l, uintptr_t ts)
{
    memcpy(fake_runtime + l->runtime_tstate_current, &ts, sizeof ts);
}

static uintptr_t find(pid_t tid, int self)
{
    uint8_t tsb[512];
    return snapprof__py_tstate_find(tid, tsb, sizeof tsb, self, NULL);
}

/* The calling thread, found in neither table and not holding the GIL, is
 * marked: while _PyRuntime may be unmapped (holder_plain 0) its samples
 * look nowhere until the next refresh, which clears the mark, so that a
 * thread that has since called into Python (a ctypes callback) is found.
 * Catches a mark that outlives the refresh (the thread would never get
 * Python frames) and one that is never set (every sample pays both scans
 * and a system call). */
static void test_native_mark_until_refresh(void)
{
    const snapprof__py_layout_t *l = fake_python(0);
    pid_t me = snapprof__gettid_cached();
    uintptr_t mine = fake_state(l, 0, me), other = fake_state(l, 1, me + 1);
    set_holder(l, other);
    ASSERT_EQ(find(me, 1), 0);
    set_holder(l, mine);       /* it calls into Python: holds the GIL */
    ASSERT_EQ(find(me, 1), 0); /* marked until the next refresh */
    snapprof__python_refresh(1);
    ASSERT_EQ(find(me, 1), mine);
    set_holder(l, other); /* learned at the GIL: found with it released */
    ASSERT_EQ(find(me, 1), mine);
}

/* With _PyRuntime in the main program (holder_plain), a marked thread is
 * looked at again as soon as the GIL holder changes: a Python thread whose
 * first sample fell while it had released the GIL, or a C thread calling
 * back, is found when it takes the GIL, before any refresh. Catches a mark
 * that ignores a new holder. */
static void test_native_mark_new_holder(void)
{
    const snapprof__py_layout_t *l = fake_python(1);
    pid_t me = snapprof__gettid_cached();
    uintptr_t mine = fake_state(l, 0, me), other = fake_state(l, 1, me + 1);
    set_holder(l, other);
    ASSERT_EQ(find(me, 1), 0);
    ASSERT_EQ(find(me, 1), 0);
    set_holder(l, mine);
    ASSERT_EQ(find(me, 1), mine);
    /* Not the caller (wall mode's walk of a blocked thread): no mark. */
    snapprof__python_refresh(1);
    set_holder(l, other);
    ASSERT_EQ(find(me + 2, 0), 0);
    set_holder(l, fake_state(l, 2, me + 2));
    ASSERT_EQ(find(me + 2, 0), (uintptr_t)fake_states[2]);
}

/* A thread found in neither table and not holding the GIL (its first
 * sample fell in zlib, which released it) is found at its own thread
 * state, the value of CPython's thread-specific key
 * (_PyRuntime.gilstate.autoTSSkey), with _PyRuntime in the main program
 * or not, and learned: found with the key cleared too. A key not marked
 * initialized, or whose value names another thread, is not taken. Catches
 * the lookup that knew only the tables and the GIL holder: a thread's
 * first deflate call had no Python frames (python_frames_shares failed
 * its 99 % bound on a loaded CI run, 98.3 %). */
static void test_own_key_without_gil(void)
{
    for (int plain = 0; plain <= 1; plain++) {
        const snapprof__py_layout_t *l = fake_python(plain);
        ASSERT(l->runtime_autotss != 0);
        ASSERT(l->runtime_autotss + sizeof(int) + sizeof(pthread_key_t) <= sizeof fake_runtime);
        pid_t me = snapprof__gettid_cached();
        uintptr_t mine = fake_state(l, 0, me), other = fake_state(l, 1, me + 1);
        pthread_key_t key;
        ASSERT_EQ(pthread_key_create(&key, NULL), 0);
        int initialized = 0;
        memcpy(fake_runtime + l->runtime_autotss + sizeof(int), &key, sizeof key);
        memcpy(fake_runtime + l->runtime_autotss, &initialized, sizeof initialized);
        set_holder(l, other);
        ASSERT_EQ(pthread_setspecific(key, (void *)mine), 0);
        ASSERT_EQ(find(me, 1), 0); /* the key is not initialized */
        initialized = 1;
        memcpy(fake_runtime + l->runtime_autotss, &initialized, sizeof initialized);
        snapprof__python_refresh(1); /* clears the mark */
        ASSERT_EQ(pthread_setspecific(key, (void *)other), 0);
        ASSERT_EQ(find(me, 1), 0); /* another thread's state */
        snapprof__python_refresh(1);
        ASSERT_EQ(pthread_setspecific(key, (void *)mine), 0);
        ASSERT_EQ(find(me, 1), mine);
        ASSERT_EQ(pthread_setspecific(key, NULL), 0);
        ASSERT_EQ(find(me, 1), mine); /* learned */
        ASSERT_EQ(pthread_key_delete(key), 0);
    }
}

/* 300 threads started since the last refresh, each seen holding the GIL:
 * the learned table (256) keeps the first 256, which are found with the
 * GIL elsewhere; the other 44 are counted (python_learned_full) and found
 * only while they hold it; the next refresh empties the table. Catches a
 * full table that goes uncounted, or that overwrites a slot in use. */
static void test_learned_full_counted(void)
{
    const snapprof__py_layout_t *l = fake_python(1);
    pid_t base = snapprof__gettid_cached() + 1000;
    (void)snapprof__py_learned_full_take();
    for (size_t i = 0; i < 300; i++) {
        uintptr_t ts = fake_state(l, i, base + (pid_t)i);
        set_holder(l, ts);
        ASSERT_EQ(find(base + (pid_t)i, 0), ts);
    }
    ASSERT_EQ(snapprof__py_learned_full_take(), 300 - 256);
    ASSERT_EQ(snapprof__py_learned_full_take(), 0);
    set_holder(l, 0);
    for (size_t i = 0; i < 256; i++)
        ASSERT_EQ(find(base + (pid_t)i, 0), (uintptr_t)fake_states[i]);
    for (size_t i = 256; i < 300; i++)
        ASSERT_EQ(find(base + (pid_t)i, 0), 0);
    snapprof__python_refresh(1);
    set_holder(l, (uintptr_t)fake_states[299]);
    ASSERT_EQ(find(base + 299, 0), (uintptr_t)fake_states[299]);
    ASSERT_EQ(snapprof__py_learned_full_take(), 0);
    set_holder(l, 0);
    ASSERT_EQ(find(base + 299, 0), (uintptr_t)fake_states[299]); /* learned now */
    ASSERT_EQ(find(base, 0), 0);                                 /* forgotten */
}

/* A fake thread of 300 interpreter frames for the handler's walk
 * (snapprof__python_capture, plain loads inside chunks, and
 * snapprof__python_capture_blocked, every read checked): the inner 150 in
 * the current data-stack chunk, the outer 150 in the one before it, 200
 * distinct code objects met in an order unrelated to their addresses (the
 * outer 200 frames two by two on a pair of code objects, as a mutual
 * recursion), so the walk reads four batches of code objects. Each frame must come back with
 * its own code object's first line, names check and instruction offset,
 * and its entry mark. Catches a walk that loses its place at the chunk
 * boundary, a code object's index in its batch that points at another's
 * fields (find_code, a batch started afresh), and a sort of the batch
 * that mixes up the ranges read. */
enum { WALK_FRAMES = 300, WALK_CODES = 200, FRAME_STRIDE = 80, CODE_BYTES = 256 };
static _Alignas(64) uint8_t walk_codes[WALK_CODES][CODE_BYTES];
static _Alignas(64) uint8_t walk_chunks[2][24 + 150 * FRAME_STRIDE + 64];
static _Alignas(64) uint8_t walk_cframe[64];
static uint8_t walk_type[64];
static snapprof__py_capture_t walk_cap;

static void put(uint8_t *base, size_t off, uintptr_t v)
{
    memcpy(base + off, &v, sizeof v);
}

static size_t walk_code_of(size_t i)
{
    return i < 100 ? i : 100 + (i - 100) / 4 * 2 + i % 2; /* then a, b, a, b, c, d, ... */
}

static uint8_t *walk_frame[WALK_FRAMES];

/* Builds the fake thread above (thread state 0, naming the caller, which
 * holds the GIL). */
static const snapprof__py_layout_t *walk_setup(void)
{
    const snapprof__py_layout_t *l = fake_python(1);
    ASSERT(l->frame_size <= FRAME_STRIDE && l->chunk_data == 24);
    snapprof__py.code_type = (uintptr_t)walk_type;
    memset(walk_codes, 0, sizeof walk_codes);
    memset(walk_chunks, 0, sizeof walk_chunks);
    for (size_t c = 0; c < WALK_CODES; c++) {
        uint8_t *code = walk_codes[(c * 37) % WALK_CODES]; /* addresses shuffled */
        put(code, l->code_type, (uintptr_t)walk_type);
        put(code, l->code_size, 100);
        int32_t line = 1000 + (int32_t)c;
        memcpy(code + l->code_firstlineno, &line, sizeof line);
        put(code, l->code_filename, 0x5000);
        put(code, l->code_qualname, 0x10000 + 16 * c);
    }
    /* Frame i: chunk 1 (current) holds i < 150, innermost highest; chunk
     * 0 the rest. */
    uint8_t **frame = walk_frame;
    for (size_t i = 0; i < WALK_FRAMES; i++) {
        size_t in = i < 150 ? 149 - i : 299 - i; /* position from the chunk's data */
        frame[i] = walk_chunks[i < 150 ? 1 : 0] + l->chunk_data + in * FRAME_STRIDE;
    }
    for (size_t i = 0; i < WALK_FRAMES; i++) {
        uintptr_t code = (uintptr_t)walk_codes[(walk_code_of(i) * 37) % WALK_CODES];
        put(frame[i], l->frame_code, code);
        put(frame[i], l->frame_previous, i + 1 < WALK_FRAMES ? (uintptr_t)frame[i + 1] : 0);
        put(frame[i], l->frame_prev_instr, code + l->code_code + 2 * (i % 40));
        frame[i][l->frame_is_entry] = i == 120 || i == WALK_FRAMES - 1;
    }
    put(walk_chunks[0], l->chunk_previous, 0);
    put(walk_chunks[0], l->chunk_size, sizeof walk_chunks[0]);
    put(walk_chunks[0], 16, 150 * FRAME_STRIDE / sizeof(uintptr_t)); /* top, in words */
    put(walk_chunks[1], l->chunk_previous, (uintptr_t)walk_chunks[0]);
    put(walk_chunks[1], l->chunk_size, sizeof walk_chunks[1]);
    put(walk_cframe, l->cframe_current_frame, (uintptr_t)frame[0]);
    pid_t me = snapprof__gettid_cached();
    uintptr_t ts = fake_state(l, 0, me);
    put(fake_states[0], l->ts_cframe, (uintptr_t)walk_cframe);
    put(fake_states[0], l->ts_datastack_chunk, (uintptr_t)walk_chunks[1]);
    put(fake_states[0], l->ts_datastack_top, (uintptr_t)frame[0] + FRAME_STRIDE);
    set_holder(l, ts);
    return l;
}

/* Captures the fake thread (blocked: as wall mode's walk of a blocked
 * thread) and checks every frame. */
static void walk_check(int blocked)
{
    memset(&walk_cap, 0xee, sizeof walk_cap);
    if (blocked)
        snapprof__python_capture_blocked(&walk_cap, snapprof__gettid_cached());
    else
        snapprof__python_capture(&walk_cap);
    ASSERT_EQ(walk_cap.status, 0);
    ASSERT_EQ(walk_cap.count, WALK_FRAMES);
    for (size_t i = 0; i < WALK_FRAMES; i++) {
        const snapprof__py_frame_rec_t *r = &walk_cap.frames[i];
        size_t c = walk_code_of(i);
        uintptr_t code = (uintptr_t)walk_codes[(c * 37) % WALK_CODES];
        ASSERT_EQ(r->code & ~(uintptr_t)SNAPPROF__PY_REC_FLAGS, code);
        ASSERT_EQ((r->code & SNAPPROF__PY_REC_ENTRY) != 0, i == 120 || i == WALK_FRAMES - 1);
        ASSERT_EQ(r->instr, (int32_t)(i % 40));
        ASSERT_EQ(r->firstlineno, 1000 + (int32_t)c);
        ASSERT_EQ(r->names, snapprof__py_names_check(0x5000, 0x10000 + 16 * c, 100));
    }
}

static void test_walk_batches_two_chunks(void)
{
    walk_setup();
    for (int blocked = 0; blocked <= 1; blocked++)
        walk_check(blocked);
}

/* One page of its own, mapped readable, for a cframe or a chunk header the
 * test unmaps later. */
static uint8_t *own_page(void)
{
    uint8_t *m = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(m != MAP_FAILED);
    memset(m, 0, (size_t)sysconf(_SC_PAGESIZE));
    return m;
}

/* The handler reads the current frame word and the chunk header at the
 * addresses the thread's last sample found, in the system call that reads
 * the thread state (one read of three ranges). Here the last sample's
 * cframe, then its chunk, were unmapped since (a C-level evaluation call
 * returned, a chunk was freed), so one of the ranges cannot be read: the
 * thread state must still be found and the frames read where it now says.
 * Then the guess right (two captures with the same state) and the thread
 * state naming the guess that cannot be read (the walk ends, counted,
 * no fault). Catches a lookup that takes a short read of the riders for a
 * thread state that cannot be read (no Python frames until the next
 * sample that misses the guess), or a walk that uses the riders' words
 * from a read that stopped before them. */
static void test_walk_guess_unreadable(void)
{
    const snapprof__py_layout_t *l = walk_setup();
    long page = sysconf(_SC_PAGESIZE);
    walk_check(0);
    walk_check(0); /* the guess right */
    /* A cframe that is gone. */
    uint8_t *cf = own_page();
    put(cf, l->cframe_current_frame, (uintptr_t)walk_frame[0]);
    put(fake_states[0], l->ts_cframe, (uintptr_t)cf);
    walk_check(0);
    ASSERT_EQ(munmap(cf, (size_t)page), 0);
    put(fake_states[0], l->ts_cframe, (uintptr_t)walk_cframe);
    walk_check(0);
    /* A chunk that is gone: an empty chunk of its own page, then the one
     * that holds the frames. */
    uint8_t *ch = own_page();
    put(ch, l->chunk_previous, (uintptr_t)walk_chunks[1]);
    put(ch, l->chunk_size, (uintptr_t)page);
    put(fake_states[0], l->ts_datastack_chunk, (uintptr_t)ch);
    put(fake_states[0], l->ts_datastack_top, (uintptr_t)ch + l->chunk_data);
    walk_check(0);
    ASSERT_EQ(munmap(ch, (size_t)page), 0);
    put(fake_states[0], l->ts_datastack_chunk, (uintptr_t)walk_chunks[1]);
    put(fake_states[0], l->ts_datastack_top, (uintptr_t)walk_frame[0] + FRAME_STRIDE);
    walk_check(0);
    walk_check(1);
    /* The thread state names a cframe that cannot be read, the guess too:
     * no frames, BROKEN. */
    cf = own_page();
    put(cf, l->cframe_current_frame, (uintptr_t)walk_frame[0]);
    put(fake_states[0], l->ts_cframe, (uintptr_t)cf);
    walk_check(0);
    ASSERT_EQ(munmap(cf, (size_t)page), 0);
    memset(&walk_cap, 0xee, sizeof walk_cap);
    snapprof__python_capture(&walk_cap);
    ASSERT_EQ(walk_cap.status, SNAPPROF__PY_BROKEN);
    ASSERT_EQ(walk_cap.count, 0);
    put(fake_states[0], l->ts_cframe, (uintptr_t)walk_cframe);
    walk_check(0);
}

/* snapprof__py_tstate_find() with riders: a rider that cannot be read (the
 * second of two) costs only itself and those after it, never the thread
 * state; got counts what was read. Catches a lookup that demands the
 * whole read (a stale guess would hide the thread). */
static void test_rider_partial(void)
{
    const snapprof__py_layout_t *l = fake_python(1);
    long page = sysconf(_SC_PAGESIZE);
    pid_t me = snapprof__gettid_cached();
    uintptr_t mine = fake_state(l, 0, me);
    set_holder(l, mine);
    uint8_t *m = three_pages(); /* the middle page not readable */
    uint64_t a = 0, b = 0;
    struct iovec local[3], remote[3];
    snapprof__py_rider_t rider = {.local = local, .remote = remote, .nlocal = 3, .nremote = 3};
    local[1] = (struct iovec){&a, sizeof a};
    remote[1] = (struct iovec){m + 16, sizeof a};
    local[2] = (struct iovec){&b, sizeof b};
    remote[2] = (struct iovec){m + page + 16, sizeof b};
    uint8_t tsb[512];
    ASSERT_EQ(snapprof__py_tstate_find(me, tsb, sizeof tsb, 1, &rider), mine);
    ASSERT_EQ(rider.got, sizeof a);
    ASSERT(memcmp(&a, m + 16, sizeof a) == 0);
    remote[1] = (struct iovec){m + page, sizeof a}; /* the first one bad */
    remote[2] = (struct iovec){m + 2 * page, sizeof b};
    ASSERT_EQ(snapprof__py_tstate_find(me, tsb, sizeof tsb, 1, &rider), mine);
    ASSERT_EQ(rider.got, 0);
    remote[1] = (struct iovec){m + 8, sizeof a}; /* both good */
    ASSERT_EQ(snapprof__py_tstate_find(me, tsb, sizeof tsb, 1, &rider), mine);
    ASSERT_EQ(rider.got, sizeof a + sizeof b);
    ASSERT(memcmp(&b, m + 2 * page, sizeof b) == 0);
    set_holder(l, fake_state(l, 1, me + 1)); /* no thread state: got 0 */
    snapprof__python_refresh(1);
    ASSERT_EQ(snapprof__py_tstate_find(me, tsb, sizeof tsb, 1, &rider), 0);
    ASSERT_EQ(rider.got, 0);
    munmap(m, 3 * (size_t)page);
}

/* A short fake thread: frames 0 to n - 1 in the current chunk
 * (walk_chunks[1]), frame i running code[i], whose fields are its own:
 * first line line[i], qualname 0x10000 + 16 * i. Every frame its own
 * instruction 2 * i. */
static void small_walk(const snapprof__py_layout_t *l, uint8_t *const *code, const int32_t *line,
                       size_t n)
{
    memset(walk_chunks[1], 0, sizeof walk_chunks[1]);
    for (size_t i = 0; i < n; i++) {
        put(code[i], l->code_type, (uintptr_t)walk_type);
        put(code[i], l->code_size, 100);
        memcpy(code[i] + l->code_firstlineno, &line[i], sizeof line[i]);
        put(code[i], l->code_filename, 0x5000);
        put(code[i], l->code_qualname, 0x10000 + 16 * i);
        uint8_t *f = walk_chunks[1] + l->chunk_data + (n - 1 - i) * FRAME_STRIDE;
        walk_frame[i] = f;
        put(f, l->frame_code, (uintptr_t)code[i]);
        put(f, l->frame_prev_instr, (uintptr_t)code[i] + l->code_code + 2 * i);
    }
    for (size_t i = 0; i < n; i++)
        put(walk_frame[i], l->frame_previous, i + 1 < n ? (uintptr_t)walk_frame[i + 1] : 0);
    put(walk_chunks[1], l->chunk_previous, 0);
    put(walk_chunks[1], l->chunk_size, sizeof walk_chunks[1]);
    put(walk_cframe, l->cframe_current_frame, (uintptr_t)walk_frame[0]);
    put(fake_states[0], l->ts_cframe, (uintptr_t)walk_cframe);
    put(fake_states[0], l->ts_datastack_chunk, (uintptr_t)walk_chunks[1]);
    put(fake_states[0], l->ts_datastack_top, (uintptr_t)walk_frame[0] + FRAME_STRIDE);
}

/* Captures the short fake thread and checks its n frames against code
 * and line. */
static void small_check(uint8_t *const *code, const int32_t *line, size_t n)
{
    memset(&walk_cap, 0xee, sizeof walk_cap);
    snapprof__python_capture(&walk_cap);
    ASSERT_EQ(walk_cap.status, 0);
    ASSERT_EQ(walk_cap.count, n);
    for (size_t i = 0; i < n; i++) {
        const snapprof__py_frame_rec_t *r = &walk_cap.frames[i];
        ASSERT_EQ(r->code & ~(uintptr_t)SNAPPROF__PY_REC_FLAGS, (uintptr_t)code[i]);
        ASSERT_EQ(r->instr, (int32_t)i);
        ASSERT_EQ(r->firstlineno, line[i]);
        ASSERT_EQ(r->names, snapprof__py_names_check(0x5000, 0x10000 + 16 * i, 100));
    }
}

/* The code objects' fields are read with the thread state, in the ranges
 * the thread's last capture read them in (when its first batch was at
 * most 8 ranges read whole), and used when every code object lies inside
 * them; else read as before. Here: the guess right (a code object's
 * first line changed between captures: the capture must see the new one,
 * the ranges are read afresh, never kept); a code object outside the
 * ranges; and the last sample's ranges two, the first unmapped since
 * (a freed arena), while every code object now lies in the second: the
 * read stops short before it, so the thread state must still be found and
 * the code objects read where they are, never taken from a range the read
 * did not reach. Then a code object inside a guessed range
 * that is no longer a code object (freed): the walk ends there, BROKEN.
 * Catches a capture that takes code fields from ranges it did not read
 * whole, or from the last sample, or that loses the thread for a stale
 * guess. */
static void test_walk_guess_codes(void)
{
    const snapprof__py_layout_t *l = walk_setup();
    long page = sysconf(_SC_PAGESIZE);
    enum { N = 6 };
    uint8_t *three =
        mmap(NULL, 3 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(three != MAP_FAILED);
    memset(three, 0, 3 * (size_t)page);
    uint8_t *code[N];
    int32_t line[N];
    for (size_t i = 0; i < N; i++) {
        code[i] = walk_codes[i]; /* one range */
        line[i] = 10 + (int32_t)i;
    }
    small_walk(l, code, line, N);
    small_check(code, line, N);
    small_check(code, line, N); /* the guess right */
    line[3] = 77;
    small_walk(l, code, line, N);
    small_check(code, line, N);
    code[2] = walk_codes[150]; /* outside the range */
    small_walk(l, code, line, N);
    small_check(code, line, N);
    small_check(code, line, N);
    /* Two ranges, code 2 alone on page 0 of three, the others on page 2;
     * then page 0 unmapped, code 2 moved among the others and another's
     * first line changed: the read of the guessed ranges stops at the
     * first, before the second, which covers every code object now. */
    for (size_t i = 0; i < N; i++)
        code[i] = i == 2 ? three + 64 : three + 2 * page + 256 * i;
    small_walk(l, code, line, N);
    small_check(code, line, N);
    small_check(code, line, N);
    ASSERT_EQ(munmap(three, (size_t)page), 0);
    code[2] = three + 2 * page + 256 * 2;
    line[4] = 99;
    small_walk(l, code, line, N);
    small_check(code, line, N);
    small_check(code, line, N);
    /* Freed inside the range: its type word gone. */
    put(code[4], l->code_type, 0);
    memset(&walk_cap, 0xee, sizeof walk_cap);
    snapprof__python_capture(&walk_cap);
    ASSERT_EQ(walk_cap.status, SNAPPROF__PY_BROKEN);
    ASSERT_EQ(walk_cap.count, 4);
    munmap(three + page, 2 * (size_t)page);
}

/* Captures use one of a few shared scratch areas, each claimed by one
 * capture at a time; with every one taken (more threads in their handlers
 * at once, a nested capture) a capture uses its slot's own, and walks the
 * same. Catches a claim that hands out an area in use (two captures
 * writing one stage) and a capture that gives up, or misreads, when none
 * is free. */
static void test_scratch_all_taken(void)
{
    walk_setup();
    snapprof__py_scratch_t *taken[16];
    size_t n = 0;
    while (n < 16 && (taken[n] = snapprof__py_scratch_claim()) != NULL)
        n++;
    ASSERT(n >= 1 && n < 16);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            ASSERT(taken[i] != taken[j]);
    walk_check(0);
    walk_check(1);
    snapprof__py_scratch_release(taken[n - 1]);
    walk_check(0);
    ASSERT(snapprof__py_scratch_claim() == taken[n - 1]); /* given back by the capture */
    for (size_t i = 0; i < n; i++)
        snapprof__py_scratch_release(taken[i]);
    walk_check(0);
    walk_check(1);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"merged_ranges", test_merged_ranges},
        {"hole_loses_only_unreadable", test_hole_loses_only_unreadable},
        {"stage_bounds_merging", test_stage_bounds_merging},
        {"native_mark_until_refresh", test_native_mark_until_refresh},
        {"native_mark_new_holder", test_native_mark_new_holder},
        {"learned_full_counted", test_learned_full_counted},
        {"own_key_without_gil", test_own_key_without_gil},
        {"walk_batches_two_chunks", test_walk_batches_two_chunks},
        {"walk_guess_unreadable", test_walk_guess_unreadable},
        {"rider_partial", test_rider_partial},
        {"walk_guess_codes", test_walk_guess_codes},
        {"scratch_all_taken", test_scratch_all_taken},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
