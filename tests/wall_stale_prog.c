/* A thread that leaves stale frame records where its wait's frame will
 * be, for `record --wall` (test_preload_record.c, wall_stale_records).
 * Built with frame pointers, so each function's CFA is rbp-based: a
 * blocked copy (pc and sp from /proc, no rbp) of its wait needs a guessed
 * rbp for waiter(), whose 1 KiB of uninitialised locals still hold the
 * frame records of stale0()..stale5(), called earlier from the same
 * depth. A guess that takes one of those puts the stale functions between
 * waiter and thread_main. It knows nothing of snapprof.
 *
 *   wall_stale_prog MS   the thread burns a little in the stale chain,
 *                        then waits in read() until main writes, MS ms
 *                        later; prints "wall_stale_prog: done". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static int g_pipe[2];
static volatile unsigned long g_sink;

NOINLINE static void stale5(void)
{
    for (unsigned long i = 0; i < 2000000; i++)
        g_sink += i;
}

/* Each keeps a frame of its own (a local the compiler must place), so its
 * record sits below its caller's. */
#define STALE(name, next)                                                                          \
    NOINLINE static void name(void)                                                                \
    {                                                                                              \
        volatile char b[32];                                                                       \
        b[0] = 1;                                                                                  \
        next();                                                                                    \
        g_sink += (unsigned long)b[0];                                                             \
    }
STALE(stale4, stale5)
STALE(stale3, stale4)
STALE(stale2, stale3)
STALE(stale1, stale2)
STALE(stale0, stale1)

NOINLINE static void waiter(void)
{
    char pad[1024]; /* never written: the stale records stay in it */
    __asm__ volatile("" : : "r"(pad) : "memory");
    char c;
    if (read(g_pipe[0], &c, 1) != 1)
        perror("wall_stale_prog: read");
    __asm__ volatile("" : : "r"(pad) : "memory");
}

NOINLINE static void *thread_main(void *arg)
{
    (void)arg;
    stale0();
    waiter();
    return NULL;
}

int main(int argc, char **argv)
{
    long ms = argc > 1 ? atol(argv[1]) : 1000;
    alarm(60);
    if (pipe(g_pipe) != 0)
        return 1;
    pthread_t th;
    if (pthread_create(&th, NULL, thread_main, NULL) != 0)
        return 1;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    if (write(g_pipe[1], "x", 1) != 1)
        return 1;
    pthread_join(th, NULL);
    printf("wall_stale_prog: done\n");
    return 0;
}
