/* bench_server: the server-like workload of bench_continuous.sh (issue 28).
 * Worker threads block in read() on their end of a socketpair; the main
 * thread, the dispatcher, sends them requests at a fixed rate (absolute
 * deadlines, round robin), and each request is a burst of a fixed amount of
 * work (a number of loop iterations, not a time: a profiler's cost in the
 * worker shows as more CPU, never as less work). One more thread sits in
 * poll() on a pipe nobody writes, as a server's idle listener would.
 *
 *   bench_server serve --seconds S [--rate R] [--workers W] [--work N]
 *                [--no-pace]
 *
 * It sends S x R requests, W workers (default 4), R requests a second
 * (default 40), N iterations each (default 1000000). stdout: one line per
 * worker and a total, the counts and the checksums of the work: the same
 * for the same options whatever profiles the program, which is how the
 * driver checks that the program's own output is unchanged (--no-pace
 * sends at once: the same lines, quickly). stderr: "bench_server: pid P
 * ready" once the threads run, and at the end "cpu_us=N", the process's
 * user + system time (getrusage: every thread, a profiler's own included)
 * before exit, i.e. without a profile written at exit. */
#include "bench_util.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define WORKERS_MAX 64

typedef struct worker {
    int fd; /* the worker's end of its socketpair */
    pthread_t thread;
    uint64_t requests, checksum;
} worker_t;

/* One request's burst: N rounds of xorshift64* from the request number.
 * noinline, so that profiles name it. */
__attribute__((noinline)) static uint64_t bench_server_work(uint32_t request, uint64_t n)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)request + 1), acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc += bench_rand(&s);
    return acc;
}

static uint64_t g_work = 1000000;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    for (;;) {
        uint32_t request;
        ssize_t n = read(w->fd, &request, sizeof request);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof request)
            break; /* 0: the dispatcher shut its end down */
        w->requests++;
        w->checksum += bench_server_work(request, g_work);
    }
    return NULL;
}

static void *listener_main(void *arg)
{
    struct pollfd p = {.fd = *(int *)arg, .events = POLLIN};
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    return NULL;
}

static int run_serve(uint64_t run_ns, uint64_t rate, uint64_t workers, int pace)
{
    static worker_t w[WORKERS_MAX];
    int disp[WORKERS_MAX], idle[2];
    pthread_t listener;
    if (pipe(idle) != 0 || pthread_create(&listener, NULL, listener_main, &idle[0]) != 0) {
        perror("bench_server: listener");
        return 1;
    }
    for (uint64_t i = 0; i < workers; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            perror("bench_server: socketpair");
            return 1;
        }
        disp[i] = sv[0];
        w[i].fd = sv[1];
        if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "bench_server: pthread_create failed\n");
            return 1;
        }
    }
    fprintf(stderr, "bench_server: pid %d ready\n", (int)getpid());
    uint64_t total = run_ns / 1000000000ULL * rate + run_ns % 1000000000ULL * rate / 1000000000ULL;
    uint64_t period = 1000000000ULL / rate, start = bench_clock_ns(CLOCK_MONOTONIC);
    for (uint64_t r = 0; r < total; r++) {
        if (pace) {
            uint64_t at = start + r * period;
            struct timespec ts = {(time_t)(at / 1000000000ULL), (long)(at % 1000000000ULL)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
        }
        uint32_t request = (uint32_t)r;
        ssize_t n;
        while ((n = write(disp[r % workers], &request, sizeof request)) < 0 && errno == EINTR)
            ;
        if (n != (ssize_t)sizeof request) {
            perror("bench_server: write");
            return 1;
        }
    }
    uint64_t requests = 0, checksum = 0;
    for (uint64_t i = 0; i < workers; i++) {
        shutdown(disp[i], SHUT_WR);
        pthread_join(w[i].thread, NULL);
        printf("worker %llu: requests=%llu checksum=%016llx\n", (unsigned long long)i,
               (unsigned long long)w[i].requests, (unsigned long long)w[i].checksum);
        requests += w[i].requests;
        checksum += w[i].checksum;
    }
    printf("total: requests=%llu checksum=%016llx\n", (unsigned long long)requests,
           (unsigned long long)checksum);
    fflush(stdout);
    close(idle[1]); /* the listener's poll() sees the hang-up */
    pthread_join(listener, NULL);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr, "cpu_us=%lld\n",
            (long long)ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec +
                (long long)ru.ru_stime.tv_sec * 1000000LL + ru.ru_stime.tv_usec);
    return requests == total ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *mode = bench_mode(argc, argv,
                                  "usage: bench_server serve --seconds S [--rate R] "
                                  "[--workers W] [--work N] [--no-pace]\n");
    uint64_t run_ns = 0, rate = 40, workers = 4, no_pace = 0;
    const bench_opt_t opts[] = {
        {"--seconds", bench_seconds_ns, &run_ns, NULL},
        {"--rate", bench_positive, &rate, NULL},
        {"--workers", bench_positive, &workers, NULL},
        {"--work", bench_positive, &g_work, NULL},
        {"--no-pace", NULL, &no_pace, NULL},
    };
    bench_parse_opts(argc, argv, 2, opts, sizeof opts / sizeof opts[0]);
    if (strcmp(mode, "serve") != 0 || run_ns == 0 || workers > WORKERS_MAX || rate > 1000000)
        bench_usage();
    return run_serve(run_ns, rate, workers, !no_pace);
}
