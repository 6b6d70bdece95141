/* bench_pause: what one sample costs the target and the sampler, measured
 * side by side with a bare signal handshake (the floor) in the same run, and
 * whether the sampling thread delivers the rate it was asked for (issue 2).
 *
 * Usage: bench_pause [--quick] [--repeats N] [--seconds S] [--rate-seconds S]
 *                    [--floor-rebase]
 * Prints a table; it never judges the figures (see bench/README.md). */
#include "bench_util.h"

#include <snapprof/profile_builder.h>
#include <snapprof/snapprof.h>

#include <alloca.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Settings                                                                 */
/* ------------------------------------------------------------------------ */

/* The stack sizes issue 2 asks about: bytes of stack the target itself holds
 * below its thread entry while it is sampled. */
static const size_t k_sizes[] = {1024, 16 * 1024, 256 * 1024};
#define SIZE_COUNT (sizeof k_sizes / sizeof k_sizes[0])

/* What the snapprof handler copies below the interrupted sp (the System V
 * red zone, SNAPPROF_RED_ZONE in stack_copier/registers_x86_64.h); the
 * floor copies the same range so both move the same bytes. */
#define RED_ZONE 128u
/* Both copy into buffers of snapprof's default size, 8 MiB. */
#define BUFFER_SIZE (8u << 20)
/* A gap in the target's clock loop longer than this is logged: shorter than
 * any signal delivery, longer than one loop iteration (a vDSO clock read). */
#define GAP_MIN_NS 250u
#define GAP_CAP (1u << 18)
#define REPEAT_MAX 15

typedef struct config {
    int quick;
    int repeats;          /* each cell is measured this many times */
    double pause_seconds; /* per repeat, per mechanism, per stack size */
    double rate_seconds;  /* per requested rate */
    unsigned hz;          /* sampling rate of the pause measurements */
    int floor_rebase;     /* the floor rebases its copy in place, as snapprof does */
} config_t;

/* ------------------------------------------------------------------------ */
/* Clocks and small helpers                                                 */
/* ------------------------------------------------------------------------ */

static uint64_t mono_ns(void)
{
    return bench_clock_ns(CLOCK_MONOTONIC);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void sleep_until(uint64_t when)
{
    struct timespec ts = {(time_t)(when / 1000000000u), (long)(when % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static void die(const char *what, int err)
{
    fprintf(stderr, "bench_pause: %s: %s\n", what, snapprof_strerror(err));
    exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p)
        die("calloc", -ENOMEM);
    return p;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n). */
static uint64_t percentile(const uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)(q * (double)n + 0.999999);
    if (rank == 0)
        rank = 1;
    return v[rank - 1];
}

/* snapprof reports percentiles from a log-linear histogram (16 buckets per
 * power of two) as the bucket's upper bound, capped by the maximum. The
 * floor's exact percentiles are rounded the same way so the ratio compares
 * like with like rather than carrying up to 6 % of rounding. */
static uint64_t hist_round(uint64_t v, uint64_t max)
{
    if (v < 16)
        return v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    uint64_t up = ((v >> (e - 4)) + 1) << (e - 4);
    up -= 1;
    return up < max ? up : max;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ------------------------------------------------------------------------ */
/* The target thread                                                        */
/* ------------------------------------------------------------------------ */

/* A stretch of time the target's clock loop did not run. */
typedef struct gap {
    uint64_t start, end;
} gap_t;

typedef struct target {
    size_t hold_bytes; /* stack to hold below the thread's entry frame */
    pthread_t thread;
    pid_t tid;
    uintptr_t stack_base; /* top of the stack as pthread_getattr_np says */
    snapprof_thread_t *token;
    size_t held; /* bytes actually held: entry frame to the loop's frame */
    atomic_int ready;
    atomic_int stop;
    gap_t *gaps; /* written by the target only; read after join */
    size_t gap_count, gaps_dropped;
} target_t;

/* The target's work: read the clock in a tight loop and log every gap, the
 * time the thread was off its own work (our signals, and preemption). */
__attribute__((noinline)) static uint64_t spin(target_t *t, uintptr_t entry_frame)
{
    t->held = entry_frame - (uintptr_t)__builtin_frame_address(0);
    atomic_store_explicit(&t->ready, 1, memory_order_release);
    uint64_t prev = mono_ns(), sum = 0;
    while (!atomic_load_explicit(&t->stop, memory_order_relaxed)) {
        uint64_t now = mono_ns();
        if (now - prev > GAP_MIN_NS) {
            if (t->gap_count < GAP_CAP)
                t->gaps[t->gap_count++] = (gap_t){prev, now};
            else
                t->gaps_dropped++;
        }
        sum += now - prev;
        prev = now;
    }
    return sum;
}

/* Holds `bytes` of live stack (touched, so it is real memory) while the
 * target spins below it. The use of buf after spin() keeps the frame alive:
 * no tail call may pop it. */
__attribute__((noinline)) static uint64_t hold(target_t *t, uintptr_t entry_frame, size_t bytes)
{
    volatile uint8_t *buf = alloca(bytes + 16);
    for (size_t i = 0; i < bytes + 16; i += 64)
        buf[i] = (uint8_t)i;
    return spin(t, entry_frame) + buf[0];
}

static void *target_main(void *arg)
{
    target_t *t = arg;
    t->tid = (pid_t)syscall(SYS_gettid);
    pthread_attr_t attr;
    void *addr = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0 ||
        pthread_attr_getstack(&attr, &addr, &size) != 0)
        die("pthread_getattr_np", -EINVAL);
    pthread_attr_destroy(&attr);
    t->stack_base = (uintptr_t)addr + size;
    int rc = snapprof_thread_register(&t->token);
    if (rc != 0)
        die("snapprof_thread_register", rc);
    /* hold()'s and spin()'s own frames count towards the bytes held. */
    size_t frames = 128;
    size_t bytes = t->hold_bytes > frames ? t->hold_bytes - frames : 0;
    uint64_t r = hold(t, (uintptr_t)__builtin_frame_address(0), bytes);
    return (void *)(uintptr_t)(r & 1);
}

static target_t *target_start(size_t hold_bytes)
{
    target_t *t = xcalloc(1, sizeof *t);
    t->hold_bytes = hold_bytes;
    t->gaps = xcalloc(GAP_CAP, sizeof *t->gaps);
    int rc = pthread_create(&t->thread, NULL, target_main, t);
    if (rc != 0)
        die("pthread_create", -rc);
    while (!atomic_load_explicit(&t->ready, memory_order_acquire))
        sleep_ns(100000);
    return t;
}

static void target_stop(target_t *t)
{
    atomic_store(&t->stop, 1);
    pthread_join(t->thread, NULL);
}

static void target_free(target_t *t)
{
    snapprof_thread_release(t->token);
    free(t->gaps);
    free(t);
}

/* For each handler entry time (ascending), finds the target's gap that
 * holds it: how long the target was off its work for that sample (off), and
 * how much of that came after the handler started (resume: handler, signal
 * return, back in the loop). The part before the handler is the kernel's
 * delivery, or the wait for a CPU when the target was not running: on a
 * busy machine that dominates, so the two are shown apart. Returns how many
 * were found; both arrays come back sorted. */
static size_t match_gaps(const target_t *t, const uint64_t *entries, size_t n, uint64_t *off,
                         uint64_t *resume)
{
    size_t found = 0, g = 0;
    for (size_t i = 0; i < n; i++) {
        while (g < t->gap_count && t->gaps[g].end < entries[i])
            g++;
        if (g < t->gap_count && t->gaps[g].start <= entries[i]) {
            off[found] = t->gaps[g].end - t->gaps[g].start;
            resume[found++] = t->gaps[g].end - entries[i];
        }
    }
    qsort(off, found, sizeof *off, cmp_u64);
    qsort(resume, found, sizeof *resume, cmp_u64);
    return found;
}

/* ------------------------------------------------------------------------ */
/* One measurement                                                          */
/* ------------------------------------------------------------------------ */

typedef struct result {
    double pause_p50, pause_p99;     /* in the handler, ns */
    double rt_p50, rt_p99;           /* requester side, ns */
    double off_p50, off_p99;         /* off-work gap seen by the target, ns */
    double resume_p50, resume_p99;   /* handler entry to back at work, ns */
    double off_found;                /* fraction of samples whose gap was found */
    double cpu_per_sample;           /* sampler CPU, ns */
    double copied;                   /* mean bytes copied per sample */
    double held;                     /* bytes held by the target */
    double samples, failed, delayed; /* counts */
} result_t;

#define RESULT_FIELDS (sizeof(result_t) / sizeof(double))

static void fill_offwork(result_t *r, const target_t *t, uint64_t *entries, size_t n)
{
    uint64_t *off = xcalloc(n + 1, sizeof *off), *resume = xcalloc(n + 1, sizeof *resume);
    qsort(entries, n, sizeof *entries, cmp_u64);
    size_t found = match_gaps(t, entries, n, off, resume);
    r->off_p50 = (double)percentile(off, found, 0.50);
    r->off_p99 = (double)percentile(off, found, 0.99);
    r->resume_p50 = (double)percentile(resume, found, 0.50);
    r->resume_p99 = (double)percentile(resume, found, 0.99);
    r->off_found = n ? (double)found / (double)n : 0;
    free(off);
    free(resume);
}

/* --- snapprof ----------------------------------------------------------- */

/* A builder that only keeps each sample's timestamp (the handler's entry
 * time), so the target's gaps can be matched to snapprof's samples. It
 * costs the sampler next to nothing: the figures are the pipeline's own. */
typedef struct stamp_builder {
    uint64_t *stamps;
    size_t count, cap;
} stamp_builder_t;

static int stamp_on_sample(void *user_data, const snapprof_sample_t *sample)
{
    stamp_builder_t *b = user_data;
    if (b->count < b->cap)
        b->stamps[b->count++] = sample->timestamp_ns;
    return 0;
}

static const snapprof_builder_ops_t k_stamp_ops = {
    .version = 1, /* receives time samples only */
    .name = "bench_stamps",
    .xOnSample = stamp_on_sample,
};

/* A profiler of t's thread at hz, delivering to b (it owns b from here). */
static snapprof_profiler_t *profiler_of(target_t *t, unsigned hz, snapprof_builder_t *b)
{
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000000u / hz;
    snapprof_profiler_t *p;
    int rc = snapprof_profiler_create(&params, &t->token, 1, &p);
    if (rc == 0)
        rc = snapprof_profiler_add_builder(p, b);
    if (rc != 0)
        die("snapprof profiler", rc);
    return p;
}

/* Stops p (which delivers its profile), stops t and destroys p; p's stats. */
static snapprof_stats_t profiler_finish(snapprof_profiler_t *p, target_t *t)
{
    int rc = snapprof_profiler_stop(p);
    if (rc != 0)
        die("snapprof_profiler_stop", rc);
    snapprof_stats_t st;
    snapprof_profiler_get_stats(p, &st);
    target_stop(t);
    snapprof_profiler_destroy(p);
    return st;
}

static result_t run_snapprof(size_t hold_bytes, unsigned hz, double seconds)
{
    target_t *t = target_start(hold_bytes);
    stamp_builder_t sb = {.cap = (size_t)(seconds * hz) * 2 + 64};
    sb.stamps = xcalloc(sb.cap, sizeof *sb.stamps);

    snapprof_builder_t *b;
    int rc = snapprof_builder_create(&k_stamp_ops, &sb, &b);
    if (rc != 0)
        die("snapprof_builder_create", rc);
    snapprof_profiler_t *p = profiler_of(t, hz, b);
    rc = snapprof_profiler_start(p);
    if (rc != 0)
        die("snapprof_profiler_start", rc);
    sleep_ns((uint64_t)(seconds * 1e9));
    snapprof_stats_t st = profiler_finish(p, t);

    result_t r = {
        .pause_p50 = (double)st.pause_p50_ns,
        .pause_p99 = (double)st.pause_p99_ns,
        .rt_p50 = (double)st.roundtrip_p50_ns,
        .rt_p99 = (double)st.roundtrip_p99_ns,
        .cpu_per_sample = st.samples ? (double)st.sampler_cpu_ns / (double)st.samples : 0,
        .copied =
            st.samples_signalled ? (double)st.copy_bytes_total / (double)st.samples_signalled : 0,
        .held = (double)t->held,
        .samples = (double)st.samples,
        .failed = (double)st.failed_total,
        .delayed = (double)st.ticks_missed,
    };
    fill_offwork(&r, t, sb.stamps, sb.count);
    free(sb.stamps);
    target_free(t);
    return r;
}

/* --- the floor ---------------------------------------------------------- */

enum { FLOOR_IDLE = 0, FLOOR_PENDING = 1, FLOOR_DONE = 2 };

/* The one floor request in flight. The requester fills the fields, then
 * publishes PENDING (release); the handler reads them after seeing PENDING
 * (acquire) and publishes its results with DONE. */
static struct {
    _Atomic uint32_t state;
    uintptr_t stack_base;
    uint8_t *buffer;
    uint64_t entry_ns, pause_ns;
    uintptr_t copy_lo; /* live address of the first byte copied */
    size_t copied;
} g_floor;

static int floor_signal(void)
{
    return SIGRTMIN + 3;
}

/* Copies live stack memory. Sanitizers poison parts of live stacks and
 * intercept memcpy, so those builds copy word by word as snapprof does.
 * Async-signal-safe. */
#if defined(SNAPPROF_SANITIZER_BUILD)
__attribute__((no_sanitize_address, no_sanitize_thread)) static void
copy_stack(uint8_t *dst, const uint8_t *src, size_t n)
{
    volatile uint64_t *d = (volatile uint64_t *)(void *)dst;
    const uint64_t *s = (const uint64_t *)(const void *)src;
    for (size_t i = 0; i < n / 8; i++)
        d[i] = s[i];
}
#else
static void copy_stack(uint8_t *dst, const uint8_t *src, size_t n)
{
    memcpy(dst, src, n);
}
#endif

/* The interrupted stack pointer. Async-signal-safe. */
static uintptr_t interrupted_sp(const ucontext_t *uc)
{
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.sp;
#else
#error "bench_pause: add the stack pointer of this architecture"
#endif
}

/* The floor's handler: the least a stack-copying handshake can do. It
 * copies [sp - red zone, stack base) as snapprof does, and times itself as
 * snapprof does (entry clock to just before the wake). RUNS IN THE SIGNAL
 * HANDLER: no allocation, no locks, no logging. Async-signal-safe. */
static void floor_on_signal(int signo, siginfo_t *info, void *ucv)
{
    (void)signo;
    (void)info;
    int saved_errno = errno;
    uint64_t entry = mono_ns();
    if (atomic_load_explicit(&g_floor.state, memory_order_acquire) == FLOOR_PENDING) {
        uintptr_t sp = interrupted_sp(ucv);
        uintptr_t lo = (sp - RED_ZONE) & ~(uintptr_t)15;
        size_t size = sp < g_floor.stack_base ? g_floor.stack_base - lo : 0;
        if (size > BUFFER_SIZE)
            size = BUFFER_SIZE;
        copy_stack(g_floor.buffer, (const uint8_t *)lo, size);
        g_floor.copy_lo = lo;
        g_floor.copied = size;
        g_floor.entry_ns = entry;
        g_floor.pause_ns = mono_ns() - entry;
        atomic_store_explicit(&g_floor.state, FLOOR_DONE, memory_order_release);
        syscall(SYS_futex, &g_floor.state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
    errno = saved_errno;
}

static void floor_install(void)
{
    int rc = bench_install_handler(floor_signal(), floor_on_signal);
    if (rc != 0)
        die("sigaction", rc);
}

/* One tgkill -> handler -> futex round trip. Returns 0, or -1 when the
 * handler did not run within 50 ms (snapprof's default timeout). */
static int floor_request(pid_t tid, uint64_t *rt_ns)
{
    atomic_store_explicit(&g_floor.state, FLOOR_PENDING, memory_order_release);
    uint64_t sent = mono_ns(), deadline = sent + 50000000u;
    if (syscall(SYS_tgkill, getpid(), tid, floor_signal()) != 0)
        die("tgkill", -errno);
    for (;;) {
        uint32_t s = atomic_load_explicit(&g_floor.state, memory_order_acquire);
        if (s == FLOOR_DONE)
            break;
        uint64_t now = mono_ns();
        if (now >= deadline) {
            uint32_t expected = FLOOR_PENDING;
            if (atomic_compare_exchange_strong(&g_floor.state, &expected, FLOOR_IDLE))
                return -1;
            continue; /* the handler is copying: it is bounded work */
        }
        uint64_t left = deadline - now;
        struct timespec ts = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
        syscall(SYS_futex, &g_floor.state, FUTEX_WAIT_PRIVATE, s, &ts, NULL, 0);
    }
    *rt_ns = mono_ns() - sent;
    atomic_store_explicit(&g_floor.state, FLOOR_IDLE, memory_order_relaxed);
    return 0;
}

/* With --floor-rebase: after the target resumed, rewrite every word of the
 * copy that points into the copied range so it points into the copy, in
 * place, as snapprof's stack copier does. It leaves the buffer's cache lines
 * on this CPU, so the handler's next copy has to take them back: that, not
 * the memcpy, is what this option shows. */
static void floor_rebase(void)
{
    uintptr_t lo = g_floor.copy_lo, hi = lo + g_floor.copied;
    uintptr_t delta = (uintptr_t)g_floor.buffer - lo; /* modular arithmetic is intended */
    uintptr_t *words = (uintptr_t *)(void *)g_floor.buffer;
    for (size_t i = 0; i < g_floor.copied / sizeof *words; i++)
        if (words[i] >= lo && words[i] < hi)
            words[i] += delta;
}

/* Samples one target at hz for `seconds` from this thread, paced like the
 * sampling thread: absolute deadlines, missed ticks skipped, not burst. */
static result_t run_floor(size_t hold_bytes, unsigned hz, double seconds, int rebase)
{
    target_t *t = target_start(hold_bytes);
    /* A fresh mapping per run, as snapprof maps its buffer per profiler, so
     * both pay the same first-touch page faults. */
    g_floor.buffer = mmap(NULL, BUFFER_SIZE, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g_floor.buffer == MAP_FAILED)
        die("mmap", -errno);
    g_floor.stack_base = t->stack_base;

    size_t cap = (size_t)(seconds * hz) + 64, n = 0;
    uint64_t *pause = xcalloc(cap, sizeof *pause), *rt = xcalloc(cap, sizeof *rt);
    uint64_t *entries = xcalloc(cap, sizeof *entries);
    uint64_t interval = 1000000000u / hz, cpu = 0, copied = 0, failed = 0, missed = 0;
    uint64_t start = mono_ns(), end = start + (uint64_t)(seconds * 1e9), next = start;
    while (next < end && n < cap) {
        sleep_until(next);
        uint64_t c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        if (floor_request(t->tid, &rt[n]) == 0) {
            pause[n] = g_floor.pause_ns;
            entries[n] = g_floor.entry_ns;
            copied += g_floor.copied;
            if (rebase)
                floor_rebase();
            n++;
        } else {
            failed++;
        }
        cpu += bench_clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        next += interval;
        uint64_t now = mono_ns();
        if (next <= now) {
            uint64_t late = (now - next) / interval + 1;
            next += late * interval;
            missed += late;
        }
    }
    target_stop(t);
    munmap(g_floor.buffer, BUFFER_SIZE);
    g_floor.buffer = NULL;

    qsort(pause, n, sizeof *pause, cmp_u64);
    qsort(rt, n, sizeof *rt, cmp_u64);
    uint64_t pmax = n ? pause[n - 1] : 0, rmax = n ? rt[n - 1] : 0;
    result_t r = {
        .pause_p50 = (double)hist_round(percentile(pause, n, 0.50), pmax),
        .pause_p99 = (double)hist_round(percentile(pause, n, 0.99), pmax),
        .rt_p50 = (double)hist_round(percentile(rt, n, 0.50), rmax),
        .rt_p99 = (double)hist_round(percentile(rt, n, 0.99), rmax),
        .cpu_per_sample = n + failed ? (double)cpu / (double)(n + failed) : 0,
        .copied = n ? (double)copied / (double)n : 0,
        .held = (double)t->held,
        .samples = (double)n,
        .failed = (double)failed,
        .delayed = (double)missed,
    };
    fill_offwork(&r, t, entries, n);
    free(pause);
    free(rt);
    free(entries);
    target_free(t);
    return r;
}

/* Field-by-field median of n results. */
static result_t median_result(const result_t *rs, int n)
{
    result_t out;
    double *o = (double *)&out, v[REPEAT_MAX];
    for (size_t f = 0; f < RESULT_FIELDS; f++) {
        for (int i = 0; i < n; i++)
            v[i] = ((const double *)&rs[i])[f];
        o[f] = median(v, n);
    }
    return out;
}

/* ------------------------------------------------------------------------ */
/* Delivered rate                                                           */
/* ------------------------------------------------------------------------ */

typedef struct rate {
    unsigned hz;
    double seconds, ticks_per_s, samples_per_s, bare_per_s, cpu_per_sample;
    uint64_t ticks, missed, samples, failed;
} rate_t;

/* A bare timer loop paced as the sampling thread paces itself (absolute
 * deadlines, late ticks skipped, not burst), doing nothing per tick: the
 * rate this machine grants any sleeping thread right now. Returns the
 * ticks that fired in [first, end). */
static uint64_t run_ticker(uint64_t first, uint64_t interval, uint64_t end)
{
    uint64_t ticks = 0, next = first;
    while (next < end) {
        sleep_until(next);
        ticks++;
        next += interval;
        uint64_t now = mono_ns();
        if (next <= now)
            next += ((now - next) / interval + 1) * interval;
    }
    return ticks;
}

/* Here the profiler runs as a host would run it, with the pprof builder
 * (writing into a temporary directory removed afterwards), so the rate and
 * the sampler CPU per sample include aggregating into a profile. */
static rate_t run_rate(unsigned hz, double seconds)
{
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/bench_pause.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        die("mkdtemp", -errno);
    snprintf(path, sizeof path, "%s/rate.pb.gz", dir);

    target_t *t = target_start(k_sizes[0]);
    snapprof_builder_t *b;
    int rc = snapprof_pprof_builder_create(path, &b);
    if (rc != 0)
        die("snapprof_pprof_builder_create", rc);
    snapprof_profiler_t *p = profiler_of(t, hz, b);
    uint64_t start = mono_ns();
    rc = snapprof_profiler_start(p);
    if (rc != 0)
        die("snapprof_profiler_start", rc);
    /* The bare ticker runs meanwhile on this thread, half an interval out
     * of phase so the two do not wake at the same instant. */
    uint64_t interval = 1000000000u / hz, end = start + (uint64_t)(seconds * 1e9);
    uint64_t bare = run_ticker(start + interval / 2, interval, end);
    sleep_until(end);
    /* Taken before stop, which also writes the profile out. */
    uint64_t elapsed = mono_ns() - start;
    snapprof_stats_t st = profiler_finish(p, t);
    target_free(t);
    unlink(path);
    rmdir(dir);
    double s = (double)elapsed / 1e9;
    return (rate_t){
        .hz = hz,
        .seconds = s,
        .ticks_per_s = (double)st.ticks / s,
        .samples_per_s = (double)st.samples / s,
        .bare_per_s = (double)bare / seconds,
        .cpu_per_sample = st.samples ? (double)st.sampler_cpu_ns / (double)st.samples : 0,
        .ticks = st.ticks,
        .missed = st.ticks_missed,
        .samples = st.samples,
        .failed = st.failed_total,
    };
}

/* ------------------------------------------------------------------------ */
/* Report                                                                   */
/* ------------------------------------------------------------------------ */

static void size_label(char *out, size_t n, size_t bytes)
{
    snprintf(out, n, "%zu KiB", bytes / 1024);
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

/* How late a 1 ms sleep wakes up, p50 and max over n sleeps: how busy the
 * machine is while we measure. */
static void wake_latency(int n, uint64_t *p50, uint64_t *max)
{
    uint64_t late[64];
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++) {
        uint64_t t0 = mono_ns();
        sleep_until(t0 + 1000000u);
        late[i] = mono_ns() - t0 - 1000000u;
    }
    qsort(late, (size_t)n, sizeof *late, cmp_u64);
    *p50 = percentile(late, (size_t)n, 0.5);
    *max = late[n - 1];
}

static void print_header(const config_t *cfg)
{
    bench_print_banner("bench_pause", cfg->quick);
    uint64_t late50, late_max;
    wake_latency(cfg->quick ? 10 : 50, &late50, &late_max);
    printf("machine: a 1 ms sleep wakes %.0f us late (p50), %.1f ms (max)\n", late50 / 1e3,
           late_max / 1e6);
    printf("pause cells: %u Hz, %d repeat(s) x %.2f s per mechanism and size, "
           "snapprof and floor alternating; medians over repeats\n",
           cfg->hz, cfg->repeats, cfg->pause_seconds);
    printf("floor: bare tgkill(SIGRTMIN+3) -> handler memcpy of the same bytes -> futex wake%s; "
           "snapprof: SIGURG, no-op builder\n",
           cfg->floor_rebase ? ", then an in-place rebase of the copy (--floor-rebase)" : "");
}

/* The two columns that open a row of a print_p50_p99 table (19 chars). */
typedef void lead_fn(char *out, size_t size, const result_t *sp, const result_t *fl);

static void lead_none(char *out, size_t size, const result_t *sp, const result_t *fl)
{
    (void)sp, (void)fl;
    snprintf(out, size, "%9s %9s", "", "");
}

static void lead_bytes(char *out, size_t size, const result_t *sp, const result_t *fl)
{
    (void)fl;
    snprintf(out, size, "%9.0f %9.0f", sp->held, sp->copied);
}

static void lead_found(char *out, size_t size, const result_t *sp, const result_t *fl)
{
    snprintf(out, size, "%8.0f%% %8.0f%%", sp->off_found * 100, fl->off_found * 100);
}

/* A table of one measure per stack size: title, the header (h1 and h2 over
 * the columns lead writes), then a row named name a size: lead's columns,
 * snapprof's and the floor's p50 and p99, and their ratios. The measure is
 * the double at offset p50 of result_t, its p99 the next. */
static void print_p50_p99(const char *title, const char *h1, const char *h2, lead_fn *lead,
                          const char *name, const result_t *sp, const result_t *fl, size_t p50)
{
    char label[32], cols[64];
    size_t f = p50 / sizeof(double);
    printf("%s", title);
    printf("%-9s %-7s %9s %9s | %8s %8s | %8s %8s | %6s %6s\n", "", "stack", h1, h2, "snap p50",
           "p99", "floor p50", "p99", "x p50", "x p99");
    for (size_t i = 0; i < SIZE_COUNT; i++) {
        const double *s = (const double *)&sp[i], *l = (const double *)&fl[i];
        size_label(label, sizeof label, k_sizes[i]);
        lead(cols, sizeof cols, &sp[i], &fl[i]);
        printf("%-9s %-7s %s | %8.0f %8.0f | %8.0f %8.0f | %6.2f %6.2f\n", name, label, cols, s[f],
               s[f + 1], l[f], l[f + 1], ratio(s[f], l[f]), ratio(s[f + 1], l[f + 1]));
    }
}

static void print_pause(const result_t *sp, const result_t *fl)
{
    print_p50_p99(
        "\n1. Target pause per sample, in the handler (entry clock to the futex wake), ns\n",
        "held(B)", "copied(B)", lead_bytes, "pause", sp, fl, offsetof(result_t, pause_p50));
    print_p50_p99("\n   Round trip on the sampler's side (signal sent to handshake seen), ns\n", "",
                  "", lead_none, "roundtrip", sp, fl, offsetof(result_t, rt_p50));
    print_p50_p99(
        "\n   Target off its work, seen by its own clock loop (signal delivery + handler +\n"
        "   return; the gap around each handler entry), ns\n",
        "found", "found", lead_found, "offwork", sp, fl, offsetof(result_t, off_p50));
    print_p50_p99("\n   Of that, from handler entry until the target is back at work (handler +\n"
                  "   signal return), ns\n",
                  "", "", lead_none, "resume", sp, fl, offsetof(result_t, resume_p50));
}

static void print_cpu(const result_t *sp, const result_t *fl)
{
    char label[32];
    printf("\n2. Sampler CPU per sample, ns (snapprof: stats.sampler_cpu_ns / stats.samples;\n"
           "   floor: the requester thread's CPU per round trip)\n");
    printf("%-9s %-7s %10s %10s %7s | %8s %8s %8s | %8s %8s\n", "", "stack", "snapprof", "floor",
           "x", "samples", "failed", "missed", "floor n", "failed");
    for (size_t i = 0; i < SIZE_COUNT; i++) {
        size_label(label, sizeof label, k_sizes[i]);
        printf("%-9s %-7s %10.0f %10.0f %7.2f | %8.0f %8.0f %8.0f | %8.0f %8.0f\n", "cpu", label,
               sp[i].cpu_per_sample, fl[i].cpu_per_sample,
               ratio(sp[i].cpu_per_sample, fl[i].cpu_per_sample), sp[i].samples, sp[i].failed,
               sp[i].delayed, fl[i].samples, fl[i].failed);
    }
}

static void print_rates(const rate_t *r, size_t n)
{
    printf("\n3. Delivered / requested sample rate, CPU-bound target (1 KiB), snapprof stats\n"
           "   with the pprof builder (cpu/samp: sampler CPU per sample, ns); bare: a do-nothing\n"
           "   timer loop paced the same way, in the same window\n");
    printf("%-9s %-7s %7s %9s %9s %12s %8s %7s %8s | %9s %9s\n", "", "asked", "seconds", "ticks/s",
           "delivered", "ticks_missed", "samp/s", "failed", "cpu/samp", "bare/s", "bare del.");
    for (size_t i = 0; i < n; i++) {
        char label[32];
        snprintf(label, sizeof label, "%u Hz", r[i].hz);
        printf("%-9s %-7s %7.2f %9.1f %8.1f%% %12llu %8.1f %7llu %8.0f | %9.1f %8.1f%%\n", "rate",
               label, r[i].seconds, r[i].ticks_per_s, 100.0 * r[i].ticks_per_s / r[i].hz,
               (unsigned long long)r[i].missed, r[i].samples_per_s, (unsigned long long)r[i].failed,
               r[i].cpu_per_sample, r[i].bare_per_s, 100.0 * r[i].bare_per_s / r[i].hz);
    }
}

/* ------------------------------------------------------------------------ */
/* Main                                                                     */
/* ------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_pause [--quick] [--repeats N (1..%d)] [--seconds S] "
            "[--rate-seconds S] [--floor-rebase]\n",
            REPEAT_MAX);
    exit(2);
}

static void parse_args(int argc, char **argv, config_t *cfg)
{
    /* About 17 s in all: 3 sizes x 3 repeats x 2 mechanisms x 0.6 s, then
     * 2 x 3 s of rate. */
    *cfg = (config_t){.repeats = 3, .pause_seconds = 0.6, .rate_seconds = 3.0, .hz = 1000};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            cfg->quick = 1;
            cfg->repeats = 1;
            cfg->pause_seconds = 0.1;
            cfg->rate_seconds = 0.3;
        } else if (strcmp(argv[i], "--floor-rebase") == 0) {
            cfg->floor_rebase = 1;
        } else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
            cfg->repeats = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            cfg->pause_seconds = atof(argv[++i]);
        } else if (strcmp(argv[i], "--rate-seconds") == 0 && i + 1 < argc) {
            cfg->rate_seconds = atof(argv[++i]);
        } else {
            usage();
        }
    }
    if (cfg->repeats < 1 || cfg->repeats > REPEAT_MAX || !(cfg->pause_seconds > 0) ||
        !(cfg->rate_seconds > 0))
        usage();
}

int main(int argc, char **argv)
{
    config_t cfg;
    parse_args(argc, argv, &cfg);
    floor_install();
    /* Line-buffered so progress shows when piped (ctest, tee). */
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_cpu_times_t cpu_before = bench_read_cpu_times();
    print_header(&cfg);

    result_t sp[SIZE_COUNT], fl[SIZE_COUNT];
    for (size_t i = 0; i < SIZE_COUNT; i++) {
        result_t rs[REPEAT_MAX], rf[REPEAT_MAX];
        for (int k = 0; k < cfg.repeats; k++) {
            /* Alternate which goes first so a drift in machine load does
             * not always favour the same side. */
            if (k % 2 == 0) {
                rs[k] = run_snapprof(k_sizes[i], cfg.hz, cfg.pause_seconds);
                rf[k] = run_floor(k_sizes[i], cfg.hz, cfg.pause_seconds, cfg.floor_rebase);
            } else {
                rf[k] = run_floor(k_sizes[i], cfg.hz, cfg.pause_seconds, cfg.floor_rebase);
                rs[k] = run_snapprof(k_sizes[i], cfg.hz, cfg.pause_seconds);
            }
        }
        sp[i] = median_result(rs, cfg.repeats);
        fl[i] = median_result(rf, cfg.repeats);
    }
    print_pause(sp, fl);
    print_cpu(sp, fl);

    rate_t rates[2] = {run_rate(100, cfg.rate_seconds), run_rate(1000, cfg.rate_seconds)};
    print_rates(rates, 2);
    bench_cpu_times_t cpu_after = bench_read_cpu_times();
    bench_print_machine("\nmachine during the run", &cpu_before, &cpu_after);
    return 0;
}
