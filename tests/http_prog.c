/* A program for the `snapprof record --http` tests: it knows nothing of
 * snapprof. It burns CPU in http_burn until the file STOP exists, prints
 * "burned" and exits 0. With "closefds" first it burns until STOP.close
 * exists, then closes every fd above 2 (close_range), opens /dev/null at
 * the freed numbers (so the control socket's number now names a file of
 * its own), prints "closed", then burns as above and exits 3. With "heap"
 * first it allocates before it burns: HOLD_N blocks of HOLD_BYTES in
 * http_hold, kept to the end, and CHURN_N of CHURN_BYTES in http_churn,
 * freed at once, and prints "allocated" (a run with --heap-interval 1
 * records each, so a heap profile's totals are exact). With "block" first
 * a second thread sleeps in http_block (a wall profile sees it; a CPU
 * profile does not) while the main thread burns.
 *
 *   http_prog [closefds|heap|block] STOP */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOLD_N 64
#define HOLD_BYTES 100000
#define CHURN_N 64
#define CHURN_BYTES 50000

static void *volatile g_held[HOLD_N];

__attribute__((noinline)) static void http_burn(const char *stop)
{
    volatile uint64_t x = 1;
    while (access(stop, F_OK) != 0)
        for (int i = 0; i < 2000000; i++)
            x = x * 6364136223846793005u + 1;
}

__attribute__((noinline)) static void http_hold(void)
{
    for (int i = 0; i < HOLD_N; i++) {
        g_held[i] = malloc(HOLD_BYTES);
        memset(g_held[i], 1, HOLD_BYTES);
    }
}

__attribute__((noinline)) static void http_churn(void)
{
    for (int i = 0; i < CHURN_N; i++) {
        void *volatile p = malloc(CHURN_BYTES);
        memset(p, 2, CHURN_BYTES);
        free(p);
    }
}

__attribute__((noinline)) static void http_block(const char *stop)
{
    while (access(stop, F_OK) != 0) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
}

static void *block_main(void *stop)
{
    http_block(stop);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc == 3 ? argv[1] : "";
    int closefds = strcmp(mode, "closefds") == 0;
    int heap = strcmp(mode, "heap") == 0, block = strcmp(mode, "block") == 0;
    if (argc != 2 + (closefds || heap || block)) {
        fprintf(stderr, "usage: http_prog [closefds|heap|block] STOP\n");
        return 2;
    }
    if (heap) {
        http_hold();
        http_churn();
        printf("allocated\n");
        fflush(stdout);
    }
    pthread_t th;
    if (block && pthread_create(&th, NULL, block_main, argv[2]) != 0)
        return 2;
    if (closefds) {
        char first[4096];
        snprintf(first, sizeof first, "%s.close", argv[2]);
        http_burn(first);
        if (close_range(3, ~0u, 0) != 0) {
            perror("close_range");
            return 2;
        }
        for (int i = 0; i < 16; i++)
            if (open("/dev/null", O_RDONLY) < 0)
                return 2;
        printf("closed\n");
        fflush(stdout);
    }
    http_burn(argv[argc - 1]);
    if (block)
        pthread_join(th, NULL);
    printf("burned\n");
    return closefds ? 3 : 0;
}
