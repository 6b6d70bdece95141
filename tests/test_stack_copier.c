/* Tests of the signal stack copier, driven through its internal interface:
 * what lands in the copy, and every way a copy can fail. */
#include "stack_copier/stack_copier.h"
#include "stack_copier/stack_copier_slots.h"

#include "common/clock.h"
#include "test.h"
#include "test_util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#define SENTINEL 0x5e5e5e5e00000000u

typedef struct target {
    pthread_t th;
    snapprof_thread_t *token;
    pid_t tid;
    atomic_int ready, stop, block_signal, unblock, handled_late;
    size_t locals;                              /* bytes of extra live stack to hold */
    volatile uint64_t *sentinels;               /* published address of the sentinel array */
    volatile uint64_t *volatile *self_ptr_addr; /* a stack slot holding a stack pointer */
} target_t;

static __attribute__((noinline)) void spin_with_sentinels(target_t *t)
{
    volatile uint64_t sentinels[8];
    for (int i = 0; i < 8; i++)
        sentinels[i] = SENTINEL + (uint64_t)i;
    volatile uint64_t *volatile self_ptr = &sentinels[0];
    t->sentinels = sentinels;
    t->self_ptr_addr = &self_ptr;
    if (t->block_signal) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGURG);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
    }
    atomic_store(&t->ready, 1);
    while (!atomic_load(&t->stop)) {
        if (atomic_load(&t->unblock) == 1) {
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGURG);
            pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* a pending signal runs here */
            atomic_store(&t->unblock, 2);
        }
    }
    (void)self_ptr;
}

static __attribute__((noinline)) void hold_stack(target_t *t, size_t bytes)
{
    volatile char pad[4096];
    pad[0] = 1;
    /* The array's address escapes: clang otherwise keeps only the byte it
     * touches (16 bytes of frame, not 4 KiB). */
    __asm__ __volatile__("" : : "r"(pad) : "memory");
    if (bytes > sizeof pad)
        hold_stack(t, bytes - sizeof pad);
    else
        spin_with_sentinels(t);
    (void)pad[0];
}

static void *target_main(void *arg)
{
    target_t *t = arg;
    ASSERT_OK(snapprof_thread_register(&t->token));
    t->tid = snapprof_thread_tid(t->token);
    hold_stack(t, t->locals);
    return NULL;
}

static void start_target(target_t *t)
{
    tu_start_thread(&t->th, target_main, t, &t->ready);
}

static void stop_target(target_t *t)
{
    atomic_store(&t->stop, 1);
    pthread_join(t->th, NULL);
    snapprof_thread_release(t->token);
}

static uint8_t *map_buffer(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(p != MAP_FAILED);
    return p;
}

static int copy(const snapprof_thread_t *token, uint8_t *buf, size_t size, uint64_t timeout_ns,
                snapprof__copy_result_t *res, snapprof_fail_reason_t *reason)
{
    snapprof__copy_request_t req = {.thread = token,
                                    .signo = SIGURG,
                                    .buffer = buf,
                                    .buffer_size = size,
                                    .timeout_ns = timeout_ns};
    ASSERT_OK(snapprof__stack_copier_install(SIGURG));
    return snapprof__stack_copier_copy(&req, res, reason);
}

/* The live stack lands in the copy byte for byte, where its address says,
 * and rebasing makes stack pointers point into the copy. */
static void test_sentinels(void)
{
    target_t t = {0};
    start_target(&t);
    size_t size = 1u << 20;
    uint8_t *buf = map_buffer(size);
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason;
    uint64_t before = tu_mono_ns();
    ASSERT_OK(copy(t.token, buf, size, 1000000000u, &res, &reason));
    uint64_t after = tu_mono_ns();

    /* Timestamp within the bounds of the call. */
    ASSERT_GE(res.timestamp_ns, before);
    ASSERT_LE(res.timestamp_ns, after);
    ASSERT_GT(res.cpu_ns, 0);
    ASSERT_LE(res.pause_ns, res.roundtrip_ns);

    uintptr_t sp = res.regs.r[SNAPPROF_REG_SP];
    ASSERT(sp >= t.token->stack_low && sp < t.token->stack_base);
    ASSERT_UEQ(res.copy_lo, (sp - 128) & ~(uintptr_t)15);
    ASSERT_UEQ(res.copy_lo + res.copy_size, t.token->stack_base);
    ASSERT_EQ(res.truncated, 0);

    uintptr_t s = (uintptr_t)t.sentinels;
    ASSERT(s >= res.copy_lo && s + 64 <= res.copy_lo + res.copy_size);
    const uint64_t *copied = (const uint64_t *)(void *)(buf + (s - res.copy_lo));
    for (int i = 0; i < 8; i++)
        ASSERT_UEQ(copied[i], SENTINEL + (uint64_t)i);

    snapprof_regs_t regs;
    snapprof_stack_copy_t stack;
    snapprof__stack_copier_rebase(&res, buf, &regs, &stack);
    ASSERT_UEQ(stack.bottom, (uintptr_t)buf);
    ASSERT_UEQ(stack.top, (uintptr_t)buf + res.copy_size);
    ASSERT_UEQ(stack.orig_bottom, res.copy_lo);
    ASSERT_UEQ(regs.r[SNAPPROF_REG_SP], (uintptr_t)buf + (sp - res.copy_lo));
    ASSERT_UEQ(regs.r[SNAPPROF_REG_PC], res.regs.r[SNAPPROF_REG_PC]);
    uintptr_t slot = (uintptr_t)t.self_ptr_addr;
    const uintptr_t *rebased = (const uintptr_t *)(buf + (slot - res.copy_lo));
    ASSERT_UEQ(*rebased, (uintptr_t)copied);
    stop_target(&t);
}

/* Whether w lies in [lo, lo + size), in 128-bit arithmetic and without
 * the rebase's modular trick; a range that wraps past the top of the
 * address space goes on from 0. */
static int in_range_ref(uintptr_t w, uintptr_t lo, uintptr_t size)
{
    unsigned __int128 x = w, l = lo, h = (unsigned __int128)lo + size;
    unsigned __int128 wrap = (unsigned __int128)1 << 64;
    return (x >= l && x < h) || x + wrap < h;
}

/* Runs impl over a copy of in (n words, placed off words past a 32-byte
 * boundary) and checks every word against in_range_ref(). Returns 0, or
 * -ENOTSUP when the CPU lacks impl. */
static int check_rebase(const uintptr_t *in, size_t n, size_t off, uintptr_t lo, uintptr_t size,
                        uintptr_t delta, snapprof__rebase_impl_t impl)
{
    static _Alignas(32) uintptr_t buf[64 + 4];
    ASSERT(n + off <= sizeof buf / sizeof buf[0]);
    uintptr_t *w = buf + off;
    memcpy(w, in, n * sizeof *w);
    buf[off + n] = 0x600dcafe; /* the word after the last: left alone */
    int rc = snapprof__rebase_words(w, n, lo, size, delta, impl);
    if (rc != 0) {
        ASSERT_EQ(rc, -ENOTSUP);
        ASSERT_EQ(impl, SNAPPROF__REBASE_AVX2);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        uintptr_t want = in[i] + (in_range_ref(in[i], lo, size) ? delta : 0);
        if (w[i] != want)
            TEST_FAIL("impl %d, lo %#" PRIxPTR " size %#" PRIxPTR ", n %zu off %zu: word %zu "
                      "%#" PRIxPTR " became %#" PRIxPTR ", not %#" PRIxPTR,
                      (int)impl, lo, size, n, off, i, in[i], w[i], want);
    }
    ASSERT_UEQ(buf[off + n], 0x600dcafe);
    return 0;
}

/* How check_stack_rebase() fills the copy's whole words. */
enum { FILL_NEAR_MISSES, FILL_ENDS_IN_RANGE, FILL_EVERY_WORD_IN_RANGE };

/* Rebases a copy of size bytes at copy_lo 0x7ffd00000008 through
 * snapprof__stack_copier_rebase() and checks it against the scalar loop
 * and, word by word, against in_range_ref(). The whole words are near
 * misses of the range at random (FILL_NEAR_MISSES), the same with the
 * first word pointing to the range's highest byte and the last to its
 * lowest (FILL_ENDS_IN_RANGE), or all in range at random
 * (FILL_EVERY_WORD_IN_RANGE). Trailing bytes that are no whole word are
 * left alone. */
static void check_stack_rebase(size_t size, int fill)
{
    uint8_t *scalar = malloc(size), *best = malloc(size);
    ASSERT_NOT_NULL(scalar);
    ASSERT_NOT_NULL(best);
    snapprof__copy_result_t res = {.copy_lo = 0x7ffd00000008u, .copy_size = size};
    res.regs.r[SNAPPROF_REG_SP] = res.copy_lo + (size >= 64 ? 64 : 0);
    res.regs.r[SNAPPROF_REG_PC] = res.copy_lo + 8; /* never rebased */
    size_t words = size / 8, tail = size % 8;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < words; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uintptr_t w = (x & 1 ? res.copy_lo : res.copy_lo + size) + (x >> 1) % 17 - 8;
        if (fill == FILL_EVERY_WORD_IN_RANGE)
            w = res.copy_lo + (x >> 1) % size;
        else if (fill == FILL_ENDS_IN_RANGE && i == 0)
            w = res.copy_lo + size - 1; /* the highest address in range */
        else if (fill == FILL_ENDS_IN_RANGE && i == words - 1)
            w = res.copy_lo; /* the lowest */
        memcpy(scalar + i * 8, &w, sizeof w);
    }
    memset(scalar + words * 8, 0xab, tail);
    uintptr_t delta = (uintptr_t)best - res.copy_lo;
    /* What every word must become, by the definition. */
    uintptr_t *want = malloc(words * sizeof *want + 1);
    ASSERT_NOT_NULL(want);
    size_t in_range = 0;
    for (size_t i = 0; i < words; i++) {
        uintptr_t w;
        memcpy(&w, scalar + i * 8, sizeof w);
        int in = in_range_ref(w, res.copy_lo, size);
        in_range += (size_t)in;
        want[i] = w + (in ? delta : 0);
    }
    /* Not vacuous: the words the fill puts in range are. */
    if (fill == FILL_EVERY_WORD_IN_RANGE)
        ASSERT_UEQ(in_range, words);
    if (fill == FILL_ENDS_IN_RANGE)
        ASSERT(in_range_ref(want[0] - delta, res.copy_lo, size) &&
               in_range_ref(want[words - 1] - delta, res.copy_lo, size));
    memcpy(best, scalar, size);
    ASSERT_OK(snapprof__rebase_words((uintptr_t *)(void *)scalar, words, res.copy_lo, size, delta,
                                     SNAPPROF__REBASE_SCALAR));
    snapprof_regs_t regs;
    snapprof_stack_copy_t stack;
    snapprof__stack_copier_rebase(&res, best, &regs, &stack);
    for (size_t i = 0; i < words; i++) {
        uintptr_t got;
        memcpy(&got, best + i * 8, sizeof got);
        if (got != want[i])
            TEST_FAIL("size %zu fill %d: word %zu of %zu became %#" PRIxPTR ", not %#" PRIxPTR,
                      size, fill, i, words, got, want[i]);
    }
    ASSERT_EQ(memcmp(scalar, best, size), 0);
    for (size_t i = words * 8; i < size; i++)
        ASSERT_EQ(best[i], 0xab);
    ASSERT_UEQ(regs.r[SNAPPROF_REG_SP], (uintptr_t)best + (size >= 64 ? 64 : 0));
    ASSERT_UEQ(regs.r[SNAPPROF_REG_PC], res.copy_lo + 8);
    ASSERT_UEQ(stack.bottom, (uintptr_t)best);
    ASSERT_UEQ(stack.top, (uintptr_t)best + size);
    free(want);
    free(scalar);
    free(best);
}

/* The rebase's vector loop gives the scalar loop's words, bit for bit: a
 * value just inside or outside either end of the range at every word
 * position, for every length up to past two vector strides, at every
 * word alignment, for ranges that straddle the sign bit (where a signed
 * compare goes wrong) or wrap past the top; then whole stacks through
 * snapprof__stack_copier_rebase() (check_stack_rebase()): near misses,
 * the first and last word in range, every word in range, with lengths
 * that are and are not a whole number of words. */
static void test_rebase_every_word(void)
{
    static const struct {
        uintptr_t lo, size;
    } ranges[] = {
        {0x7ffc12340000u, 16384},
        {0x7ffc12340010u, 0x4007}, /* a copy_size that is no multiple of 8 */
        {0, 4096},
        {0x8000000000000000u - 64, 128}, /* across the sign bit */
        {UINTPTR_MAX - 63, 128},         /* wraps past the top */
        {0xffff800000000000u, 1u << 20},
        {0x1000, UINTPTR_MAX}, /* everything but [0x1000 - 1, 0x1000) */
    };
    int avx2 = 1;
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        uintptr_t lo = ranges[r].lo, size = ranges[r].size, hi = lo + size;
        uintptr_t delta = (uintptr_t)0x5555000012345678u - lo;
        const uintptr_t probes[] = {lo - 2,
                                    lo - 1,
                                    lo,
                                    lo + 1,
                                    lo + 7,
                                    lo + 8,
                                    hi - 8,
                                    hi - 1,
                                    hi,
                                    hi + 1,
                                    lo - size,
                                    0,
                                    1,
                                    UINTPTR_MAX,
                                    (uintptr_t)INT64_MAX,
                                    (uintptr_t)INT64_MIN,
                                    lo ^ (uintptr_t)INT64_MIN,
                                    hi ^ (uintptr_t)INT64_MIN};
        size_t np = sizeof probes / sizeof probes[0];
        uintptr_t in[64];
        for (size_t n = 0; n <= 37; n++)
            for (size_t off = 0; off < 4; off++)
                for (size_t pos = 0; pos < n; pos++)
                    for (size_t k = 0; k < np; k++) {
                        /* The other words are probes too, in another order. */
                        for (size_t i = 0; i < n; i++)
                            in[i] = probes[(i * 7 + k + 3) % np];
                        in[pos] = probes[k];
                        ASSERT_OK(
                            check_rebase(in, n, off, lo, size, delta, SNAPPROF__REBASE_SCALAR));
                        ASSERT_OK(check_rebase(in, n, off, lo, size, delta, SNAPPROF__REBASE_BEST));
                        if (avx2 &&
                            check_rebase(in, n, off, lo, size, delta, SNAPPROF__REBASE_AVX2) != 0)
                            avx2 = 0;
                    }
    }
    if (!avx2)
        fprintf(stderr, "no AVX2 here: the scalar loop only\n");

    /* Stacks of pointers around a range, through the rebase the profiler
     * calls: 16 KiB of near misses at random; the same with the first and
     * the last whole word in range; every word in range; each with and
     * without trailing bytes that are no whole word, and one word alone (a
     * rebase that skipped the first or the last word of the copy passed
     * the near misses alone: neither of their ends points into the range). */
    for (int fill = FILL_NEAR_MISSES; fill <= FILL_EVERY_WORD_IN_RANGE; fill++) {
        check_stack_rebase(16384 + 5, fill);
        check_stack_rebase(16384, fill);
        check_stack_rebase(8, fill);
        check_stack_rebase(8 + 5, fill);
    }
}

/* A stack larger than the buffer: the innermost part is copied, and the
 * copy says it is truncated. */
static void test_truncated(void)
{
    target_t t = {.locals = 64 * 1024};
    start_target(&t);
    uint8_t *buf = map_buffer(8192);
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason;
    ASSERT_OK(copy(t.token, buf, 8192, 1000000000u, &res, &reason));
    ASSERT_EQ(res.truncated, 1);
    ASSERT_EQ(res.copy_size, 8192);
    uintptr_t sp = res.regs.r[SNAPPROF_REG_SP];
    ASSERT_UEQ(res.copy_lo, (sp - 128) & ~(uintptr_t)15);
    stop_target(&t);
}

/* A thread that is gone: a counted failure, not a crash or a hang. */
static void test_exited_thread(void)
{
    target_t t = {0};
    start_target(&t);
    snapprof_thread_t *token = t.token;
    snapprof__thread_retain(token);
    stop_target(&t);
    ASSERT_EQ(atomic_load(&token->exited), 1);
    uint8_t *buf = map_buffer(65536);
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason = SNAPPROF_FAIL_COUNT;
    ASSERT_EQ(copy(token, buf, 65536, 100000000u, &res, &reason), -1);
    ASSERT_EQ(reason, SNAPPROF_FAIL_THREAD_EXITED);
    snapprof_thread_release(token);
}

/* A thread that blocks the signal: the wait ends at the timeout, and the
 * late handler, when the thread unblocks, leaves the buffer alone. */
static void test_blocked_signal(void)
{
    target_t t = {.block_signal = 1};
    start_target(&t);
    size_t size = 1u << 20;
    uint8_t *buf = map_buffer(size);
    memset(buf, 0xaa, size);
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason = SNAPPROF_FAIL_COUNT;
    uint64_t t0 = tu_mono_ns();
    ASSERT_EQ(copy(t.token, buf, size, 20000000u, &res, &reason), -1);
    uint64_t waited = tu_mono_ns() - t0;
    ASSERT_EQ(reason, SNAPPROF_FAIL_TIMEOUT);
    ASSERT_GE(waited, 20000000u);
    ASSERT_LT(waited, 10000000000u); /* bounded: host stalls aside, one timeout */

    atomic_store(&t.unblock, 1);
    while (atomic_load(&t.unblock) != 2)
        usleep(1000);
    for (size_t i = 0; i < size; i++)
        if (buf[i] != 0xaa)
            TEST_FAIL("a late handler wrote byte %zu of the buffer", i);
    /* And the thread can be sampled normally afterwards. */
    ASSERT_OK(copy(t.token, buf, size, 1000000000u, &res, &reason));
    stop_target(&t);
}

/* A request made while the previous one's signal is still pending. The
 * kernel keeps one pending instance of a standard signal and drops the
 * second, so the late signal must serve the request for its own thread. */
typedef struct {
    const snapprof_thread_t *token;
    uint8_t *buf;
    size_t size;
    int rc;
    snapprof_fail_reason_t reason;
    snapprof__copy_result_t res;
} async_copy_t;

static void *async_copy_main(void *arg)
{
    async_copy_t *a = arg;
    a->rc = copy(a->token, a->buf, a->size, 30000000000u, &a->res, &a->reason);
    return NULL;
}

/* Starts a copy on another thread and returns once it is waiting for the
 * handler of target tid. */
static pthread_t start_async_copy(async_copy_t *a, pid_t tid)
{
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, async_copy_main, a), 0);
    uint64_t deadline = tu_mono_ns() + 30000000000u;
    while (snapprof__stack_copier_pending_tid() != tid) {
        ASSERT(tu_mono_ns() < deadline);
        usleep(1000);
    }
    return th;
}

/* A copy from a thread that blocks the signal: it times out, and the
 * signal stays pending. */
static void time_out_once(const snapprof_thread_t *token, uint8_t *buf, size_t size)
{
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason = SNAPPROF_FAIL_COUNT;
    ASSERT_EQ(copy(token, buf, size, 20000000u, &res, &reason), -1);
    ASSERT_EQ(reason, SNAPPROF_FAIL_TIMEOUT);
}

/* The copy succeeded, with the stack pointer of its own thread. */
static void assert_copied(const async_copy_t *a)
{
    ASSERT_EQ(a->rc, 0);
    uintptr_t sp = a->res.regs.r[SNAPPROF_REG_SP];
    ASSERT(sp >= a->token->stack_low && sp < a->token->stack_base);
}

static void test_late_signal_serves_next_request(void)
{
    target_t t = {.block_signal = 1};
    start_target(&t);
    size_t size = 1u << 20;
    uint8_t *buf = map_buffer(size);
    time_out_once(t.token, buf, size);

    /* The second request's signal is dropped: the first is still pending. */
    async_copy_t a = {.token = t.token, .buf = buf, .size = size, .rc = 99};
    pthread_t th = start_async_copy(&a, t.tid);
    atomic_store(&t.unblock, 1);
    pthread_join(th, NULL);
    assert_copied(&a);
    ASSERT_EQ(snapprof__stack_copier_pending_tid(), 0);
    stop_target(&t);
}

/* A late signal while a request for another thread waits: not ours to
 * serve, so that request's buffer stays untouched until its own thread
 * answers. */
static void test_late_signal_other_thread(void)
{
    target_t t1 = {.block_signal = 1}, t2 = {.block_signal = 1};
    start_target(&t1);
    start_target(&t2);
    size_t size = 1u << 20;
    uint8_t *buf = map_buffer(size);
    memset(buf, 0xaa, size);
    time_out_once(t1.token, buf, size);

    async_copy_t a = {.token = t2.token, .buf = buf, .size = size, .rc = 99};
    pthread_t th = start_async_copy(&a, t2.tid);
    atomic_store(&t1.unblock, 1); /* t1's late handler runs now */
    while (atomic_load(&t1.unblock) != 2)
        usleep(1000);
    ASSERT_EQ(snapprof__stack_copier_pending_tid(), t2.tid);
    for (size_t i = 0; i < size; i++)
        if (buf[i] != 0xaa)
            TEST_FAIL("t1's late handler wrote byte %zu of t2's buffer", i);
    atomic_store(&t2.unblock, 1);
    pthread_join(th, NULL);
    assert_copied(&a);
    stop_target(&t1);
    stop_target(&t2);
}

/* A thread running on a stack we don't know the bounds of (a fiber here;
 * a goroutine's stack, a sigaltstack): a window of it is copied from sp,
 * as far as it can be read. The fiber's stack ends at the top of its
 * mapping, with an unreadable page above, so the window stops there (a
 * plain copy of 32 KiB from sp would fault). */
#define FIBER_STACK (256u << 10)
static atomic_int g_fiber_running, g_fiber_stop;
static _Atomic uintptr_t g_fiber_sentinel_at;
static void fiber_main(void)
{
    volatile uint64_t sentinel = 0x5eed5eed5eed5eedull;
    atomic_store(&g_fiber_sentinel_at, (uintptr_t)&sentinel);
    atomic_store(&g_fiber_running, 1);
    while (!atomic_load(&g_fiber_stop)) {
    }
}

static ucontext_t g_fiber_ctx, g_fiber_return;
static snapprof_thread_t *g_fiber_token;
static uint8_t *g_fiber_stack; /* FIBER_STACK bytes, then a PROT_NONE page */
static void *fiber_thread(void *arg)
{
    (void)arg;
    ASSERT_OK(snapprof_thread_register(&g_fiber_token));
    getcontext(&g_fiber_ctx);
    g_fiber_ctx.uc_stack.ss_sp = g_fiber_stack;
    g_fiber_ctx.uc_stack.ss_size = FIBER_STACK;
    g_fiber_ctx.uc_link = &g_fiber_return;
    makecontext(&g_fiber_ctx, fiber_main, 0);
    swapcontext(&g_fiber_return, &g_fiber_ctx);
    return NULL;
}

static void test_foreign_stack_window(void)
{
    uint8_t *m =
        mmap(NULL, FIBER_STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(m != MAP_FAILED);
    ASSERT_OK(mprotect(m + FIBER_STACK, 4096, PROT_NONE));
    g_fiber_stack = m;
    pthread_t th;
    tu_start_thread(&th, fiber_thread, NULL, &g_fiber_running);
    uint8_t *buf = map_buffer(65536);
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason = SNAPPROF_FAIL_COUNT;
    ASSERT_EQ(copy(g_fiber_token, buf, 65536, 1000000000u, &res, &reason), 0);
    uintptr_t sp = res.regs.r[SNAPPROF_REG_SP], top = (uintptr_t)m + FIBER_STACK;
    printf("sp %#lx, copied [%#lx, +%zu), stack top %#lx\n", (unsigned long)sp,
           (unsigned long)res.copy_lo, res.copy_size, (unsigned long)top);
    ASSERT_EQ(res.foreign, 1);
    ASSERT_EQ(res.truncated, 0);
    /* Outside the thread's own stack, on the fiber's, near its top. */
    ASSERT(sp < g_fiber_token->stack_low || sp >= g_fiber_token->stack_base);
    ASSERT(sp > (uintptr_t)m && sp < top);
    ASSERT_LE(res.copy_lo, sp);
    ASSERT_GE(res.copy_lo, sp - 128 - 16);
    /* Up to the end of the readable mapping, not past it. */
    ASSERT_UEQ(res.copy_lo + res.copy_size, top);
    uintptr_t at = atomic_load(&g_fiber_sentinel_at);
    ASSERT(at >= res.copy_lo && at + 8 <= top);
    uint64_t word;
    memcpy(&word, buf + (at - res.copy_lo), sizeof word);
    ASSERT_UEQ(word, 0x5eed5eed5eed5eedull);

    /* A smaller buffer bounds the window. */
    ASSERT_EQ(copy(g_fiber_token, buf, 4096, 1000000000u, &res, &reason), 0);
    ASSERT_EQ(res.foreign, 1);
    ASSERT_LE(res.copy_size, 4096);
    atomic_store(&g_fiber_stop, 1);
    pthread_join(th, NULL);
    snapprof_thread_release(g_fiber_token);
    munmap(m, FIBER_STACK + 4096);
}

/* snapprof__copy_readable() in fork children that no atfork handler
 * sees: it reads the child's own memory, not its parent's through a pid
 * cached before the fork. The parent fills g_readable with 'P' and makes
 * a copy first (so the pid is cached), the child fills it with 'C' and
 * copies it: every byte must be 'C'. */
static uint8_t g_readable[3 * 4096], g_readable_dst[3 * 4096];

/* In a child: 0 when the copy read the child's own bytes, else a code. */
static int readable_child_check(uint8_t mark)
{
    memset(g_readable, mark, sizeof g_readable);
    long got = snapprof__copy_readable(g_readable_dst, (uintptr_t)g_readable, sizeof g_readable);
    if (got != (long)sizeof g_readable)
        return 2;
    for (size_t i = 0; i < sizeof g_readable; i++)
        if (g_readable_dst[i] != mark)
            return g_readable_dst[i] == 'P' ? 3 : 4; /* 3: the parent's memory */
    return 0;
}

static void readable_parent_first(void)
{
    memset(g_readable, 'P', sizeof g_readable);
    ASSERT_EQ(snapprof__copy_readable(g_readable_dst, (uintptr_t)g_readable, sizeof g_readable),
              (long)sizeof g_readable);
    ASSERT_EQ(g_readable_dst[0], 'P');
    ASSERT_EQ(snapprof__our_pid(), getpid());
}

static void readable_wait(pid_t pid)
{
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st));
    if (WEXITSTATUS(st) == 3)
        TEST_FAIL("the child's copy read its parent's memory (a stale pid)");
    ASSERT_EQ(WEXITSTATUS(st), 0);
    /* The parent's own copies still read its own. */
    ASSERT_EQ(snapprof__copy_readable(g_readable_dst, (uintptr_t)g_readable, sizeof g_readable),
              (long)sizeof g_readable);
    ASSERT_EQ(g_readable_dst[0], 'P');
}

/* A fork by the raw system call: glibc's atfork handlers do not run.
 * Catches a pid cache refreshed only by an atfork child handler: the
 * child's process_vm_readv() on its parent's pid reads the parent's 'P'
 * (exit 3). */
static void test_readable_raw_fork(void)
{
    readable_parent_first();
    pid_t pid = (pid_t)syscall(SYS_fork);
    ASSERT(pid >= 0);
    if (pid == 0)
        syscall(SYS_exit_group, readable_child_check('C'));
    readable_wait(pid);
}

/* glibc's _Fork(), which runs no atfork handler (what a fork in a signal
 * handler is meant to use). Catches the same stale pid. */
static void test_readable_underscore_fork(void)
{
    readable_parent_first();
    pid_t pid = _Fork();
    ASSERT(pid >= 0);
    if (pid == 0)
        _exit(readable_child_check('C'));
    readable_wait(pid);
}

/* A child made with clone(CLONE_VM) shares its parent's memory and so the
 * pid kept in it; once that parent is gone, process_vm_readv() on its pid
 * fails (ESRCH) and the copy must ask getpid() again. Here a helper
 * process H caches its pid, clones such a child C and exits; C, once
 * reparented to this test (a subreaper), copies. Catches a cached pid used
 * without the retry: C's copy fails (-1, exit 2). */
static int g_vm_pipe[2];
static char g_vm_stack[64 << 10] __attribute__((aligned(16)));

static int vm_child(void *arg)
{
    pid_t h = (pid_t)(intptr_t)arg;
    for (int i = 0; i < 10000 && syscall(SYS_getppid) == h; i++) {
        struct timespec ts = {0, 1000000};
        syscall(SYS_nanosleep, &ts, NULL);
    }
    if (syscall(SYS_getppid) == h)
        syscall(SYS_exit_group, 5); /* H never went */
    syscall(SYS_exit_group, readable_child_check('V'));
    return 0;
}

static void test_readable_vm_child_outlives_parent(void)
{
    if (tu_sanitizer_build()) {
        /* The child runs instrumented code on its dead parent's
         * sanitizer thread state. */
        printf("skipped: a CLONE_VM child without a thread of its own under a sanitizer\n");
        exit(TEST_SKIP);
    }
    ASSERT_OK(prctl(PR_SET_CHILD_SUBREAPER, 1));
    ASSERT_OK(pipe(g_vm_pipe));
    pid_t h = fork();
    ASSERT(h >= 0);
    if (h == 0) {
        memset(g_readable, 'H', sizeof g_readable);
        pid_t me = getpid();
        if (snapprof__our_pid() != me ||
            snapprof__copy_readable(g_readable_dst, (uintptr_t)g_readable, sizeof g_readable) !=
                (long)sizeof g_readable)
            _exit(6);
        int c = clone(vm_child, g_vm_stack + sizeof g_vm_stack, CLONE_VM | SIGCHLD,
                      (void *)(intptr_t)me);
        if (write(g_vm_pipe[1], &c, sizeof c) != (ssize_t)sizeof c)
            _exit(7);
        syscall(SYS_exit_group, c > 0 ? 0 : 8);
    }
    close(g_vm_pipe[1]);
    int c = -1;
    ASSERT_EQ(read(g_vm_pipe[0], &c, sizeof c), (ssize_t)sizeof c);
    int st;
    ASSERT_EQ(waitpid(h, &st, 0), h);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    ASSERT_GT(c, 0);
    ASSERT_EQ(waitpid(c, &st, 0), c);
    ASSERT(WIFEXITED(st));
    if (WEXITSTATUS(st) == 2)
        TEST_FAIL("the CLONE_VM child's copy failed on its gone parent's pid");
    ASSERT_EQ(WEXITSTATUS(st), 0);
}

/* The failure reason of a copy of thread b through a token that is not
 * the one b's TLS names (b registered itself with its own), marked exiting
 * or not. */
static snapprof_fail_reason_t copy_through_foreign_token(int exiting)
{
    target_t a = {0}, b = {0};
    start_target(&a);
    start_target(&b);
    struct snapprof_thread token = {.tid = b.tid,
                                    .stack_low = a.token->stack_low,
                                    .stack_base = a.token->stack_base,
                                    .on_thread = 1};
    atomic_init(&token.refs, 1);
    atomic_init(&token.exiting, exiting);
    uint8_t *buf = map_buffer(65536);
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason = SNAPPROF_FAIL_COUNT;
    ASSERT_EQ(copy(&token, buf, 65536, 1000000000u, &res, &reason), -1);
    stop_target(&a);
    stop_target(&b);
    return reason;
}

/* A token whose tid now names another thread (a recycled tid): the handler
 * sees the thread's own token differ and refuses. */
static void test_recycled_tid(void)
{
    ASSERT_EQ(copy_through_foreign_token(0), SNAPPROF_FAIL_TID_RECYCLED);
}

/* A trigger's capture in a thread whose TLS names no token (its exit
 * destructor let go of it) is dropped with its weight, not a failure; one
 * in a thread whose TLS names another token is a recycled tid. */
typedef struct capture_call {
    snapprof__capture_pool_t *pool;
    snapprof__capture_target_t *target;
    int register_first, rc;
} capture_call_t;

static void *capture_on_thread(void *arg)
{
    capture_call_t *c = arg;
    snapprof_thread_t *me = NULL;
    if (c->register_first)
        ASSERT_OK(snapprof_thread_register(&me));
    c->rc = snapprof__capture_self(c->pool, c->target, NULL, 3000, snapprof__monotonic_ns());
    if (me)
        snapprof_thread_release(me);
    return NULL;
}

static void test_capture_in_exiting_thread(void)
{
    snapprof__capture_pool_t pool;
    memset(&pool, 0, sizeof pool);
    ASSERT_OK(snapprof__capture_pool_init(&pool, 4, 65536, 0, NULL));
    struct snapprof_thread other;
    memset(&other, 0, sizeof other);
    snapprof__capture_target_t target = {.thread = &other, .on_thread = 1};
    capture_call_t call = {.pool = &pool, .target = &target};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, capture_on_thread, &call), 0);
    pthread_join(th, NULL);
    ASSERT_EQ(call.rc, -1);
    ASSERT_UEQ(atomic_load(&pool.dropped), 1);
    ASSERT_UEQ(atomic_load(&pool.dropped_ns), 3000);
    ASSERT_UEQ(atomic_load(&pool.full), 0);
    call.register_first = 1;
    ASSERT_EQ(pthread_create(&th, NULL, capture_on_thread, &call), 0);
    pthread_join(th, NULL);
    ASSERT_EQ(call.rc, -1);
    ASSERT_UEQ(atomic_load(&pool.dropped), 1);
    ASSERT_UEQ(atomic_load(&pool.full), 1); /* a slot that says tid_recycled */
    snapprof__capture_pool_destroy(&pool);
}

/* A signal that reaches a thread in its exit destructor, after its TLS let
 * go of its token: the thread is exiting, not a recycled tid. (CI's
 * profiler_thread_exits once saw thread_exited 0 where 1 was due; a
 * handshake landing there, counted tid_recycled, is one way to get it.) */
static void test_exiting_thread(void)
{
    ASSERT_EQ(copy_through_foreign_token(1), SNAPPROF_FAIL_THREAD_EXITED);
}

/* Signals that are not our requests reach the handler installed before us;
 * for SIGURG, ours do as well (stack_copier_signal.c, pass_on_absorbed). */
static atomic_int g_previous_calls;
static void previous_handler(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)info;
    (void)uc;
    atomic_fetch_add(&g_previous_calls, 1);
}

static void test_chains_foreign_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = previous_handler;
    sa.sa_flags = SA_SIGINFO;
    ASSERT_EQ(sigaction(SIGURG, &sa, NULL), 0);
    ASSERT_OK(snapprof__stack_copier_install(SIGURG));
    ASSERT_OK(snapprof__stack_copier_install(SIGURG)); /* idempotent */

    target_t t = {0};
    start_target(&t);
    syscall(SYS_tgkill, getpid(), t.tid, SIGURG); /* someone else's SIGURG */
    for (int i = 0; i < 1000 && atomic_load(&g_previous_calls) == 0; i++)
        usleep(1000);
    ASSERT_EQ(atomic_load(&g_previous_calls), 1);

    uint8_t *buf = map_buffer(1u << 20);
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason;
    ASSERT_OK(copy(t.token, buf, 1u << 20, 1000000000u, &res, &reason));
    /* Our request's SIGURG is passed on too, once, after the copy (it may
     * have absorbed one of the program's: a standard signal does not
     * queue), so the count reaches 2 just after copy() returns. */
    for (int i = 0; i < 1000 && atomic_load(&g_previous_calls) < 2; i++)
        usleep(1000);
    usleep(10000);
    ASSERT_EQ(atomic_load(&g_previous_calls), 2);
    stop_target(&t);
}

/* If the program replaces our handler, the failure says so. */
static void test_handler_replaced(void)
{
    ASSERT_OK(snapprof__stack_copier_install(SIGURG));
    target_t t = {0};
    start_target(&t);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = previous_handler;
    sa.sa_flags = SA_SIGINFO;
    struct sigaction ours;
    ASSERT_EQ(sigaction(SIGURG, &sa, &ours), 0);
    uint8_t *buf = map_buffer(65536);
    snapprof__copy_result_t res;
    snapprof_fail_reason_t reason = SNAPPROF_FAIL_COUNT;
    ASSERT_EQ(copy(t.token, buf, 65536, 20000000u, &res, &reason), -1);
    ASSERT_EQ(reason, SNAPPROF_FAIL_HANDLER_REPLACED);
    ASSERT_EQ(sigaction(SIGURG, &ours, NULL), 0);
    stop_target(&t);
}

/* Other signals wait for the copy: one that arrives while the handler runs
 * (here, sent from inside it) is delivered after the handshake, not on top
 * of it. A program handler nested inside ours would keep the sampler
 * waiting, and one that waits for the sampler (a profile written on SIGTERM)
 * would never return. */
static atomic_int g_in_capture, g_usr2_calls, g_usr2_nested;

static void usr2_handler(int signo)
{
    (void)signo;
    atomic_fetch_add(&g_usr2_calls, 1);
    if (atomic_load(&g_in_capture))
        atomic_fetch_add(&g_usr2_nested, 1);
}

/* The capture delegate: runs in the signal handler, after the copy. */
static void raise_usr2_in_capture(void *ctx, void *extra)
{
    (void)ctx;
    (void)extra;
    atomic_store(&g_in_capture, 1);
    syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGUSR2);
    atomic_store(&g_in_capture, 0);
}

static void test_other_signals_wait(void)
{
    static const snapprof__capture_delegate_t delegate = {.on_capture = raise_usr2_in_capture};
    signal(SIGUSR2, usr2_handler);
    ASSERT_OK(snapprof__stack_copier_install(SIGURG));
    target_t t = {0};
    start_target(&t);
    uint8_t *buf = map_buffer(65536);
    for (int i = 0; i < 20; i++) {
        snapprof__copy_request_t req = {.thread = t.token,
                                        .signo = SIGURG,
                                        .buffer = buf,
                                        .buffer_size = 65536,
                                        .timeout_ns = 5000000000u,
                                        .delegate = &delegate};
        snapprof__copy_result_t res;
        snapprof_fail_reason_t reason;
        ASSERT_OK(snapprof__stack_copier_copy(&req, &res, &reason));
        /* One at a time: two SIGUSR2 pending at once would be one. */
        for (int j = 0; j < 10000 && atomic_load(&g_usr2_calls) <= i; j++)
            usleep(1000);
        ASSERT_EQ(atomic_load(&g_usr2_calls), i + 1);
    }
    ASSERT_EQ(atomic_load(&g_usr2_nested), 0);
    stop_target(&t);
}

/* A program handler we pass a signal on to runs under the mask the kernel
 * would have given it: its own sa_mask and its signal blocked, nothing
 * more. */
static sigset_t g_chained_mask;
static atomic_int g_chained_calls;

static void mask_reader(int signo)
{
    (void)signo;
    pthread_sigmask(SIG_BLOCK, NULL, &g_chained_mask);
    atomic_fetch_add(&g_chained_calls, 1);
}

static void test_chained_handler_mask(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mask_reader;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR1);
    ASSERT_EQ(sigaction(SIGURG, &sa, NULL), 0);
    ASSERT_OK(snapprof__stack_copier_install(SIGURG));
    target_t t = {0};
    start_target(&t);
    syscall(SYS_tgkill, getpid(), t.tid, SIGURG);
    for (int i = 0; i < 1000 && atomic_load(&g_chained_calls) == 0; i++)
        usleep(1000);
    ASSERT_EQ(atomic_load(&g_chained_calls), 1);
    ASSERT(sigismember(&g_chained_mask, SIGURG));
    ASSERT(sigismember(&g_chained_mask, SIGUSR1));
    ASSERT(!sigismember(&g_chained_mask, SIGUSR2));
    ASSERT(!sigismember(&g_chained_mask, SIGTERM));
    ASSERT(!sigismember(&g_chained_mask, SIGALRM));
    stop_target(&t);
}

/* The bounds a registration gets are those of the thread's own stack. A
 * thread whose stack is a mapping of ours, between guard pages so that no
 * neighbour merges with it: registered by itself, from the mapping's start
 * up to glibc's thread descriptor, which glibc puts at the top of a stack
 * it is given (pthread_attr_getstack); by tid, the mapping that holds its
 * sp, whole. The main thread: the top of "[stack]", a low bound below its
 * sp.
 * (Moving the lookup 1 MiB off sp was caught by no test before this.) */
#define OWN_STACK (4u * 1024u * 1024u) /* TSan wants ~1 MiB of it for its TLS */

static uint8_t *g_own_lo;
static atomic_int g_own_state; /* 1 registered itself, 2 may exit */
static snapprof_thread_t *g_own_self;
static uintptr_t g_own_descriptor, g_own_sp;

static void *own_stack_thread(void *arg)
{
    (void)arg;
    ASSERT_OK(snapprof_thread_register(&g_own_self));
    g_own_descriptor = (uintptr_t)pthread_self();
    g_own_sp = (uintptr_t)__builtin_frame_address(0);
    atomic_store(&g_own_state, 1);
    while (atomic_load(&g_own_state) != 2)
        usleep(1000);
    snapprof_thread_release(g_own_self);
    return NULL;
}

static void test_registration_bounds(void)
{
    uint8_t *m = mmap(NULL, OWN_STACK + 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(m != MAP_FAILED);
    g_own_lo = m + 4096;
    ASSERT_OK(mprotect(g_own_lo, OWN_STACK, PROT_READ | PROT_WRITE));
    pthread_attr_t attr;
    ASSERT_EQ(pthread_attr_init(&attr), 0);
    ASSERT_EQ(pthread_attr_setstack(&attr, g_own_lo, OWN_STACK), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, &attr, own_stack_thread, NULL), 0);
    pthread_attr_destroy(&attr);
    while (atomic_load(&g_own_state) != 1)
        usleep(1000);
    struct snapprof_thread *self = g_own_self;
    printf("own stack [%p, %p): by itself [%#lx, %#lx)\n", (void *)g_own_lo,
           (void *)(g_own_lo + OWN_STACK), (unsigned long)self->stack_low,
           (unsigned long)self->stack_base);
    ASSERT_EQ(self->stack_low, (uintptr_t)g_own_lo);
    ASSERT(g_own_descriptor > g_own_sp && g_own_descriptor < (uintptr_t)(g_own_lo + OWN_STACK));
    ASSERT_EQ(self->stack_base, g_own_descriptor & ~(uintptr_t)15);
    snapprof_thread_t *by_tid = NULL;
    ASSERT_OK(snapprof_thread_register_tid(snapprof_thread_tid(g_own_self), &by_tid));
    struct snapprof_thread *other = by_tid;
    printf("by tid [%#lx, %#lx)\n", (unsigned long)other->stack_low,
           (unsigned long)other->stack_base);
    ASSERT_EQ(other->stack_low, (uintptr_t)g_own_lo);
    ASSERT_EQ(other->stack_base, (uintptr_t)(g_own_lo + OWN_STACK));
    snapprof_thread_release(by_tid);
    atomic_store(&g_own_state, 2);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    munmap(m, OWN_STACK + 2 * 4096);

    /* The main thread: its sp lies inside, the base is the top of the
     * mapping that holds it. */
    snapprof_thread_t *main_tok = NULL;
    ASSERT_OK(snapprof_thread_register(&main_tok));
    struct snapprof_thread *mt = main_tok;
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0), lo, hi;
    ASSERT_OK(snapprof__find_mapping(sp, &lo, &hi));
    printf("main: sp %#lx in [%#lx, %#lx), registered [%#lx, %#lx)\n", (unsigned long)sp,
           (unsigned long)lo, (unsigned long)hi, (unsigned long)mt->stack_low,
           (unsigned long)mt->stack_base);
    ASSERT_EQ(mt->stack_base, hi);
    ASSERT(mt->stack_low <= sp && sp < mt->stack_base);
    snapprof_thread_release(main_tok);
}

/* ------------------------------------------------------------------------ */
/* The pool's large buffers, driven directly: a "stack" in plain memory and */
/* a context whose sp points into it, captured as a trigger's handler does. */
/* ------------------------------------------------------------------------ */

typedef struct fake_stack {
    uint8_t *mem;
    size_t size;
    snapprof__capture_target_t target;
} fake_stack_t;

/* A stack of size bytes with a pattern of its own (seed), whose live part
 * is all of it but its lowest 4 KiB. */
static void fake_stack_init(fake_stack_t *f, size_t size, unsigned seed)
{
    memset(f, 0, sizeof *f);
    f->mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(f->mem != MAP_FAILED);
    f->size = size;
    for (size_t i = 0; i < size; i++)
        f->mem[i] = (uint8_t)(i * 31u + seed);
    f->target.stack_low = (uintptr_t)f->mem;
    f->target.stack_base = (uintptr_t)f->mem + size;
}

static void fake_stack_free(fake_stack_t *f)
{
    munmap(f->mem, f->size);
}

/* Captures f as its handler would and returns the slot it filled. */
static snapprof__capture_slot_t *fake_capture(snapprof__capture_pool_t *pool, fake_stack_t *f)
{
    static uint64_t stamp = 1;
    ucontext_t uc;
    memset(&uc, 0, sizeof uc);
    uc.uc_mcontext.gregs[REG_RSP] = (greg_t)(f->target.stack_low + 4096);
    uint64_t entry = stamp++;
    ASSERT_OK(snapprof__capture_self(pool, &f->target, &uc, 1000, entry));
    for (size_t i = 0; i < pool->slot_count; i++)
        if (atomic_load(&pool->slots[i].state) == SNAPPROF__SLOT_FULL &&
            pool->slots[i].res.timestamp_ns == entry)
            return &pool->slots[i];
    ASSERT(!"no slot holds the capture");
    return NULL;
}

/* Whether slot holds the whole live part of f, as it is in f. */
static int whole_copy_of(const snapprof__capture_slot_t *slot, const fake_stack_t *f)
{
    return !slot->res.truncated &&
           slot->res.copy_lo + slot->res.copy_size == f->target.stack_base &&
           memcmp(slot->buffer, (const void *)slot->res.copy_lo, slot->res.copy_size) == 0;
}

/* Plans for each target given and provisions the pool. */
static void provision(snapprof__capture_pool_t *pool, size_t budget, fake_stack_t **fs, int n)
{
    for (int i = 0; i < n; i++)
        snapprof__capture_target_plan(pool, &fs[i]->target);
    ASSERT_OK(snapprof__capture_pool_provision(pool, budget));
    /* The pool's count of bytes is what its buffers hold. */
    size_t sum = 0;
    for (uint32_t i = 0; i < atomic_load(&pool->large_count); i++)
        sum += pool->large[i].buf ? pool->large[i].size : 0;
    ASSERT_UEQ(sum, pool->large_bytes);
}

/* The size of buffer a target with stack f gets (see
 * snapprof__capture_target_plan). */
static size_t large_size_for(const fake_stack_t *f)
{
    size_t need = f->size - 4096 + 128;
    size_t size = (need + need / 4 + 4095) & ~(size_t)4095;
    return size < f->size ? size : f->size;
}

/* A large buffer given back by the drain is taken again by the next deep
 * capture, of any thread of the pool, and the buffers already written are
 * taken first; provisioning again maps nothing new. Would catch: a release
 * that does not free the buffer (the next copies truncated), per-thread
 * lists (a second deep thread's first capture truncated although the
 * pool's buffers are free), the handler taking never-written buffers first,
 * or a provisioning that maps the buffers anew at every pass. */
static void test_large_buffer_reused(void)
{
    snapprof__capture_pool_t pool;
    ASSERT_OK(snapprof__capture_pool_init(&pool, 8, 65536, 0, NULL));
    fake_stack_t a, b;
    fake_stack_init(&a, 320u << 10, 1);
    fake_stack_init(&b, 320u << 10, 2);
    fake_stack_t *both[] = {&a, &b};
    /* The first capture deeper than a slot is cut, and says how deep. */
    snapprof__capture_slot_t *s = fake_capture(&pool, &a);
    ASSERT_EQ(s->res.truncated, 1);
    ASSERT_NULL(s->large);
    ASSERT_UEQ(atomic_load(&a.target.large_short), 1);
    snapprof__capture_slot_release(&pool, s);
    provision(&pool, 64u << 20, both, 1);
    size_t size = large_size_for(&a);
    ASSERT_UEQ(atomic_load(&pool.large_count), SNAPPROF__TARGET_LARGE_FIRST);
    ASSERT_UEQ(pool.large_bytes, SNAPPROF__TARGET_LARGE_FIRST * size);
    uint8_t *first = pool.large[0].buf;
    /* Then whole, in the first buffer, again and again once released. */
    for (int i = 0; i < 3; i++) {
        s = fake_capture(&pool, &a);
        ASSERT(whole_copy_of(s, &a));
        ASSERT_PTR_EQ(s->large, &pool.large[0]);
        ASSERT_PTR_EQ(s->buffer, first);
        snapprof__capture_slot_release(&pool, s);
        ASSERT_UEQ(atomic_load(&pool.large[0].busy), 0);
    }
    /* Two held at once: the second takes the next one. */
    snapprof__capture_slot_t *s1 = fake_capture(&pool, &a), *s2 = fake_capture(&pool, &a);
    ASSERT_PTR_EQ(s1->large, &pool.large[0]);
    ASSERT_PTR_EQ(s2->large, &pool.large[1]);
    ASSERT(whole_copy_of(s2, &a));
    snapprof__capture_slot_release(&pool, s1);
    snapprof__capture_slot_release(&pool, s2);
    /* Another deep thread, never provisioned for: its first capture is
     * whole, in the buffer a's captures wrote. */
    s = fake_capture(&pool, &b);
    ASSERT(whole_copy_of(s, &b));
    ASSERT_PTR_EQ(s->buffer, first);
    snapprof__capture_slot_release(&pool, s);
    /* Planning for both adds b's share; a's buffers stay as they are. */
    uint8_t *bufs[SNAPPROF__TARGET_LARGE_FIRST];
    for (int i = 0; i < SNAPPROF__TARGET_LARGE_FIRST; i++)
        bufs[i] = pool.large[i].buf;
    provision(&pool, 64u << 20, both, 2);
    ASSERT_UEQ(atomic_load(&pool.large_count), 2 * SNAPPROF__TARGET_LARGE_FIRST);
    for (int i = 0; i < SNAPPROF__TARGET_LARGE_FIRST; i++)
        ASSERT_PTR_EQ(pool.large[i].buf, bufs[i]);
    for (int pass = 0; pass < 3; pass++)
        provision(&pool, 64u << 20, both, 2);
    ASSERT_UEQ(pool.large_bytes_max, 2 * SNAPPROF__TARGET_LARGE_FIRST * size);
    ASSERT_PTR_EQ(pool.large[0].buf, first);
    snapprof__capture_pool_destroy(&pool);
    fake_stack_free(&a);
    fake_stack_free(&b);
}

/* However the threads go deeper and whatever their captures hold, the
 * large buffers never take more than the budget; past it the pool says so
 * (large_refused, which the targets then report) and the copies that find
 * none stay truncated; buffers too small for any thread left are given
 * back to make room. Would catch: a budget check missing when buffers are
 * added for a thread that went deeper, or bytes miscounted when one is
 * given back, or small buffers kept for a thread gone while a deeper one
 * is refused. */
static void test_large_budget_never_exceeded(void)
{
    snapprof__capture_pool_t pool;
    ASSERT_OK(snapprof__capture_pool_init(&pool, 32, 65536, 0, NULL));
    fake_stack_t a, b, deeper;
    fake_stack_init(&a, 320u << 10, 1);
    fake_stack_init(&b, 320u << 10, 2);
    fake_stack_init(&deeper, 1280u << 10, 3);
    size_t size = large_size_for(&a), budget = 5 * size + size / 2;
    fake_stack_t *ts[] = {&a, &b};
    snapprof__capture_slot_release(&pool, fake_capture(&pool, &a));
    snapprof__capture_slot_release(&pool, fake_capture(&pool, &b));
    provision(&pool, budget, ts, 2);
    /* 8 wanted, 5 fit. */
    ASSERT_UEQ(pool.large_bytes, 5 * size);
    ASSERT_EQ(pool.large_refused, 1);
    snapprof__capture_target_plan(&pool, &a.target);
    ASSERT_EQ(a.target.large_refused, 1);
    /* Captures held (a late drainer): the sixth is cut. */
    snapprof__capture_slot_t *held[6];
    for (int i = 0; i < 6; i++)
        held[i] = fake_capture(&pool, i % 2 ? &b : &a);
    for (int i = 0; i < 5; i++)
        ASSERT(held[i]->large != NULL);
    ASSERT_NULL(held[5]->large);
    ASSERT_EQ(held[5]->res.truncated, 1);
    for (int round = 0; round < 6; round++) {
        provision(&pool, budget, ts, 2);
        ASSERT_LE(pool.large_bytes, budget);
    }
    /* b goes deeper: its buffers are replaced by larger ones only as far as
     * the budget lets, those in use not at all. */
    b.target.stack_low = deeper.target.stack_low;
    b.target.stack_base = deeper.target.stack_base;
    snapprof__capture_slot_t *cut = fake_capture(&pool, &b);
    ASSERT_EQ(cut->res.truncated, 1);
    for (int round = 0; round < 6; round++) {
        provision(&pool, budget, ts, 2);
        ASSERT_LE(pool.large_bytes, budget);
        ASSERT_LE(pool.large_bytes_max, budget);
        if (round == 2)
            for (int i = 0; i < 6; i++)
                snapprof__capture_slot_release(&pool, held[i]);
    }
    snapprof__capture_slot_release(&pool, cut);
    /* Every buffer free: a keeps buffers of its size (they are there),
     * and the budget has no room for a larger one for b as well. */
    provision(&pool, budget, ts, 2);
    ASSERT_LE(pool.large_bytes, budget);
    ASSERT_EQ(pool.large_refused, 1);
    snapprof__capture_slot_t *s = fake_capture(&pool, &a);
    ASSERT(whole_copy_of(s, &a));
    snapprof__capture_slot_release(&pool, s);
    s = fake_capture(&pool, &b);
    ASSERT_EQ(s->res.truncated, 1);
    snapprof__capture_slot_release(&pool, s);
    /* a leaves: its buffers, too small for b, are given back, and b gets
     * as many of its size as the budget holds. */
    snapprof__capture_target_free_large(&pool, &a.target);
    fake_stack_t *bonly[] = {&b};
    provision(&pool, budget, bonly, 1);
    size_t larger = large_size_for(&deeper), n_larger = 0;
    for (uint32_t i = 0; i < atomic_load(&pool.large_count); i++)
        n_larger += pool.large[i].buf && pool.large[i].size >= larger;
    ASSERT_UEQ(n_larger, budget / larger);
    ASSERT_UEQ(pool.large_bytes, n_larger * larger);
    ASSERT_EQ(pool.large_refused, 1);
    s = fake_capture(&pool, &b);
    ASSERT(whole_copy_of(s, &deeper));
    snapprof__capture_slot_release(&pool, s);
    ASSERT_LE(pool.large_bytes_max, budget);
    snapprof__capture_pool_destroy(&pool);
    fake_stack_free(&a);
    fake_stack_free(&b);
    fake_stack_free(&deeper);
}

/* Threads of different depths get buffers of their own sizes, so the
 * shallower one's do not take the deepest one's size out of the budget,
 * and a capture takes the smallest free buffer that fits, leaving the
 * large ones to the deeper thread. Would catch: one size for the whole
 * pool (here 8 buffers of 1.25 MiB, past the budget: refused, shown
 * failing), a handler that takes the first free buffer whatever its
 * size. */
static void test_large_buffers_sized_per_depth(void)
{
    snapprof__capture_pool_t pool;
    ASSERT_OK(snapprof__capture_pool_init(&pool, 8, 65536, 0, NULL));
    fake_stack_t a, d;
    fake_stack_init(&a, 320u << 10, 1);
    fake_stack_init(&d, 1280u << 10, 2);
    fake_stack_t *ts[] = {&a, &d};
    size_t sa = large_size_for(&a), sd = large_size_for(&d);
    size_t budget = SNAPPROF__TARGET_LARGE_FIRST * (sa + sd);
    snapprof__capture_slot_release(&pool, fake_capture(&pool, &a));
    snapprof__capture_slot_release(&pool, fake_capture(&pool, &d));
    provision(&pool, budget, ts, 2);
    ASSERT_EQ(pool.large_refused, 0);
    ASSERT_UEQ(pool.large_bytes, budget);
    /* With every buffer free, a's capture takes one of its size, not one
     * of d's (made first, the deepest class first). */
    snapprof__capture_slot_t *s = fake_capture(&pool, &a);
    ASSERT(whole_copy_of(s, &a));
    ASSERT_UEQ(s->large->size, sa);
    snapprof__capture_slot_release(&pool, s);
    /* d's captures hold every buffer of its size; a's still find theirs. */
    snapprof__capture_slot_t *held[SNAPPROF__TARGET_LARGE_FIRST];
    for (int i = 0; i < SNAPPROF__TARGET_LARGE_FIRST; i++) {
        held[i] = fake_capture(&pool, &d);
        ASSERT(whole_copy_of(held[i], &d));
    }
    s = fake_capture(&pool, &a);
    ASSERT(whole_copy_of(s, &a));
    snapprof__capture_slot_release(&pool, s);
    for (int i = 0; i < SNAPPROF__TARGET_LARGE_FIRST; i++)
        snapprof__capture_slot_release(&pool, held[i]);
    /* Nothing changes at the next passes. */
    for (int pass = 0; pass < 3; pass++)
        provision(&pool, budget, ts, 2);
    ASSERT_UEQ(pool.large_bytes_max, budget);
    snapprof__capture_pool_destroy(&pool);
    fake_stack_free(&a);
    fake_stack_free(&d);
}

/* A deep thread that leaves the profile gives its share of the buffers
 * back at the next provisioning, but never one that a capture of another
 * thread still holds; once no thread is deep, nothing is left mapped, and
 * a new deep thread gets buffers afresh. Would catch: buffers kept for a
 * thread gone (memory that only grows with thread churn), or a buffer
 * unmapped under a capture that waits to be unwound (a read of unmapped
 * memory by the unwinder: SIGSEGV here when the held copy is compared). */
static void test_large_returned_on_exit(void)
{
    snapprof__capture_pool_t pool;
    ASSERT_OK(snapprof__capture_pool_init(&pool, 8, 65536, 0, NULL));
    fake_stack_t a, b, c;
    fake_stack_init(&a, 320u << 10, 1);
    fake_stack_init(&b, 320u << 10, 2);
    fake_stack_init(&c, 320u << 10, 3);
    size_t size = large_size_for(&a);
    fake_stack_t *ab[] = {&a, &b}, *bonly[] = {&b}, *conly[] = {&c};
    snapprof__capture_slot_release(&pool, fake_capture(&pool, &a));
    snapprof__capture_slot_release(&pool, fake_capture(&pool, &b));
    provision(&pool, 64u << 20, ab, 2);
    ASSERT_UEQ(pool.large_bytes, 2 * SNAPPROF__TARGET_LARGE_FIRST * size);
    /* b's captures hold the last buffers (the first ones are taken first,
     * so hold them all and give back all but the last). */
    snapprof__capture_slot_t *held[2 * SNAPPROF__TARGET_LARGE_FIRST];
    for (int i = 0; i < 2 * SNAPPROF__TARGET_LARGE_FIRST; i++)
        held[i] = fake_capture(&pool, &b);
    for (int i = 0; i < 2 * SNAPPROF__TARGET_LARGE_FIRST - 1; i++)
        snapprof__capture_slot_release(&pool, held[i]);
    snapprof__capture_slot_t *last = held[2 * SNAPPROF__TARGET_LARGE_FIRST - 1];
    ASSERT_PTR_EQ(last->large, &pool.large[2 * SNAPPROF__TARGET_LARGE_FIRST - 1]);
    /* a leaves: its share goes, the held buffer stays and stays whole. */
    snapprof__capture_target_free_large(&pool, &a.target);
    provision(&pool, 64u << 20, bonly, 1);
    ASSERT_UEQ(pool.large_bytes, SNAPPROF__TARGET_LARGE_FIRST * size);
    ASSERT(whole_copy_of(last, &b));
    snapprof__capture_slot_release(&pool, last);
    /* b leaves too: nothing is left. */
    snapprof__capture_target_free_large(&pool, &b.target);
    provision(&pool, 64u << 20, bonly, 0);
    ASSERT_UEQ(pool.large_bytes, 0);
    for (uint32_t i = 0; i < atomic_load(&pool.large_count); i++)
        ASSERT_NULL(pool.large[i].buf);
    /* A new deep thread: cut once, then whole in buffers made anew, in the
     * entries given back. */
    snapprof__capture_slot_t *s = fake_capture(&pool, &c);
    ASSERT_EQ(s->res.truncated, 1);
    snapprof__capture_slot_release(&pool, s);
    provision(&pool, 64u << 20, conly, 1);
    ASSERT_UEQ(pool.large_bytes, SNAPPROF__TARGET_LARGE_FIRST * size);
    ASSERT_UEQ(atomic_load(&pool.large_count), 2 * SNAPPROF__TARGET_LARGE_FIRST);
    s = fake_capture(&pool, &c);
    ASSERT(whole_copy_of(s, &c));
    snapprof__capture_slot_release(&pool, s);
    snapprof__capture_pool_destroy(&pool);
    fake_stack_free(&a);
    fake_stack_free(&b);
    fake_stack_free(&c);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"sentinels", test_sentinels},
        {"rebase_every_word", test_rebase_every_word},
        {"truncated", test_truncated},
        {"exited_thread", test_exited_thread},
        {"blocked_signal", test_blocked_signal},
        {"late_signal_serves_next_request", test_late_signal_serves_next_request},
        {"late_signal_other_thread", test_late_signal_other_thread},
        {"foreign_stack_window", test_foreign_stack_window},
        {"recycled_tid", test_recycled_tid},
        {"exiting_thread", test_exiting_thread},
        {"capture_in_exiting_thread", test_capture_in_exiting_thread},
        {"chains_foreign_signals", test_chains_foreign_signals},
        {"handler_replaced", test_handler_replaced},
        {"other_signals_wait", test_other_signals_wait},
        {"chained_handler_mask", test_chained_handler_mask},
        {"registration_bounds", test_registration_bounds},
        {"large_buffer_reused", test_large_buffer_reused},
        {"large_budget_never_exceeded", test_large_budget_never_exceeded},
        {"large_returned_on_exit", test_large_returned_on_exit},
        {"large_buffers_sized_per_depth", test_large_buffers_sized_per_depth},
        {"readable_raw_fork", test_readable_raw_fork},
        {"readable_underscore_fork", test_readable_underscore_fork},
        {"readable_vm_child_outlives_parent", test_readable_vm_child_outlives_parent},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
