/* A program that crashes, for the crash tests of `snapprof record`
 * (test_preload_crash.c). It knows nothing of snapprof: it burns CPU in
 * burn_before_crash() (MS ms of work, and on until a loaded profiler has 5
 * samples of it), prints "crashing at N ns" (CLOCK_MONOTONIC), then ends as
 * its mode says:
 *
 *   segv MS      writes through a null pointer
 *   bus MS       reads a page of a file mapped past the file's end
 *   fpe MS       divides an integer by zero
 *   ill MS       runs an undefined instruction (__builtin_trap)
 *   abrt MS      abort()
 *   recover MS   installs its own SIGSEGV handler, faults, recovers with
 *                siglongjmp, checks sigaction() shows its handler, prints
 *                "recovered" and exits 0
 *   reraise MS   its SIGSEGV handler prints "own handler", restores SIG_DFL
 *                with signal() and raises SIGSEGV again
 *   resethand MS its SIGSEGV handler, installed with SA_RESETHAND, prints
 *                "oneshot handler, reset" when sigaction() shows SIG_DFL
 *                in it, and raises SIGSEGV again
 *   query MS     checks that sigaction(SIGSEGV, NULL, &old) shows SIG_DFL
 *                (exits 3 if not), then writes through a null pointer
 *   heap_abort MS  frees a block twice, so that glibc aborts inside free()
 *                with the malloc arena's lock held (see mode_heap_abort)
 *   overflow MS  recurses until the stack overflows
 *   overflow_altstack MS  the same, with an alternate signal stack of its
 *                own (sigaltstack), no handler */
#include <dlfcn.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "test_prog.h"

/* Fixed work, about ms milliseconds on an idle machine (as in
 * test_preload_prog.c: work, not time). */
HOT(burn_before_crash)

/* burn_before_crash(ms), then more of it until the profiler has 5 more
 * samples (at most 60 s). */
static void burn(uint64_t ms)
{
    tp_burn_sampled(burn_before_crash, ms, 5);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(stderr, "burnt; crashing at %lld ns\n", (long long)ts.tv_sec * 1000000000 + ts.tv_nsec);
}

static volatile int *volatile g_null;

__attribute__((noinline)) static void null_write(void)
{
    *g_null = 1;
}

static int mode_bus(uint64_t ms)
{
    char path[] = "/tmp/snapprof-crash-bus-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 2;
    unlink(path);
    long page = sysconf(_SC_PAGESIZE);
    if (ftruncate(fd, page) != 0)
        return 2;
    volatile char *p = mmap(NULL, (size_t)page * 2, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return 2;
    burn(ms);
    return p[page]; /* past the end of the file: SIGBUS */
}

static sigjmp_buf g_jump;

static void on_segv_recover(int signo)
{
    (void)signo;
    siglongjmp(g_jump, 1);
}

static int mode_recover(uint64_t ms)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_segv_recover;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0)
        return 2;
    burn(ms);
    for (int i = 0; i < 3; i++)
        if (sigsetjmp(g_jump, 1) == 0)
            null_write();
    if (sigaction(SIGSEGV, NULL, &old) != 0 || old.sa_handler != on_segv_recover) {
        fprintf(stderr, "sigaction does not show the program's own SIGSEGV handler\n");
        return 3;
    }
    printf("recovered\n");
    return 0;
}

static void on_segv_reraise(int signo)
{
    static const char msg[] = "own handler\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    signal(signo, SIG_DFL);
    raise(signo);
}

/* A double free that glibc finds with the arena's lock held: it aborts
 * there. Run with the tunables glibc.malloc.tcache_count=0 (so the free
 * reaches the arena) and glibc.malloc.arena_max=1 (so every thread,
 * snapprof's writer too, allocates from that arena). */
static int mode_heap_abort(uint64_t ms)
{
    char *volatile a = malloc(4096);
    char *volatile guard = malloc(64); /* keeps a from merging into the top */
    if (!a || !guard)
        return 2;
    burn(ms);
    free(a);
    free(a);
    return 4; /* glibc did not notice */
}

/* SA_RESETHAND: the disposition is SIG_DFL again while it runs. */
static void on_segv_oneshot(int signo)
{
    struct sigaction now;
    const char *msg = sigaction(signo, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
                              now.sa_handler == SIG_DFL
                          ? "oneshot handler, reset\n"
                          : "oneshot handler, NOT reset\n";
    ssize_t w = write(2, msg, strlen(msg));
    (void)w;
    raise(signo);
}

/* Deep enough to overflow any stack; volatile, so it is not a loop. */
static volatile unsigned long g_depth_limit = ~0ul;

__attribute__((noinline)) static int recurse(volatile char *prev)
{
    volatile char buf[512];
    buf[0] = (char)(prev ? prev[0] + 1 : 0);
    if (g_depth_limit-- == 0)
        return 0;
    return recurse(buf) + buf[1];
}

/* A stack overflow in main, with an alternate signal stack of the
 * program's own or none. */
static int mode_overflow(uint64_t ms, int altstack)
{
    if (altstack) {
        stack_t ss = {.ss_sp = malloc(1u << 16), .ss_size = 1u << 16, .ss_flags = 0};
        if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0)
            return 2;
    }
    burn(ms);
    return recurse(NULL);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    uint64_t ms = argc > 2 ? strtoull(argv[2], NULL, 10) : 300;
    if (!strcmp(mode, "segv")) {
        burn(ms);
        null_write();
    } else if (!strcmp(mode, "bus")) {
        return mode_bus(ms);
    } else if (!strcmp(mode, "fpe")) {
        volatile int zero = 0, one = 1;
        burn(ms);
        return one / zero;
    } else if (!strcmp(mode, "ill")) {
        burn(ms);
        __builtin_trap();
    } else if (!strcmp(mode, "abrt")) {
        burn(ms);
        abort();
    } else if (!strcmp(mode, "recover")) {
        return mode_recover(ms);
    } else if (!strcmp(mode, "reraise")) {
        signal(SIGSEGV, on_segv_reraise);
        burn(ms);
        null_write();
    } else if (!strcmp(mode, "query")) {
        struct sigaction old;
        if (sigaction(SIGSEGV, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
            old.sa_handler != SIG_DFL) {
            fprintf(stderr, "sigaction does not show SIGSEGV at SIG_DFL\n");
            return 3;
        }
        burn(ms);
        null_write();
    } else if (!strcmp(mode, "resethand")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_segv_oneshot;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, NULL) != 0)
            return 2;
        burn(ms);
        null_write();
    } else if (!strcmp(mode, "overflow")) {
        return mode_overflow(ms, 0);
    } else if (!strcmp(mode, "overflow_altstack")) {
        return mode_overflow(ms, 1);
    } else if (!strcmp(mode, "heap_abort")) {
        return mode_heap_abort(ms);
    }
    fprintf(stderr,
            "usage: %s "
            "segv|bus|fpe|ill|abrt|recover|reraise|resethand|query|heap_abort|overflow|overflow_"
            "altstack MS\n",
            argv[0]);
    return 2;
}
