/* A program that treats the fd table as its own, for the fd tests of
 * `snapprof record` (test_preload_record.c). It knows nothing of
 * snapprof; every mode checks itself and exits 0 only if all was well.
 *
 *   fds_prog closeall   two busy threads; mid-run main closes every fd
 *                       >= 3 (as daemons do), then keeps running, makes a
 *                       pipe, writes known bytes, lets the threads exit
 *                       (their triggers go), and reads the bytes back.
 *   fds_prog dup2       the same, but main dup2s the read end of one of
 *                       two pipes over every fd that is not its own: one
 *                       holds known bytes (a read() of it eats them), the
 *                       other is empty (a read() of it blocks for ever).
 *   fds_prog budget THREADS FILES
 *                       lowers RLIMIT_NOFILE to 1024, starts THREADS
 *                       threads that sleep and burn a little, then main
 *                       opens FILES files and prints
 *                       "opened=N failed=F highest=H others=O": how many
 *                       opens succeeded and failed, the highest fd it got,
 *                       and how many fds it holds that it did not open.
 *                       Past 2000 threads each sleeps longer, in
 *                       proportion, so that all of them together wake as
 *                       often as 2000 do (5000 at the 2000's rate took
 *                       over 120 s alone on 2 loaded cores), and the alarm
 *                       allows 60 s more per 1000 threads.
 *
 *   fds_prog lowest     prints "lowest=N": the fd its first open() gets
 *                       (3 when it starts with only stdin, stdout and
 *                       stderr open, and nothing else took a number).
 *
 * An alarm ends a run that hangs (SIGALRM: exit status 142). */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_stop;
static atomic_int g_started;
static unsigned g_sleep_scale = 1; /* budget: threads / 2000, at least 1 */

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void burn_ns(uint64_t ns)
{
    volatile uint64_t x = 1;
    uint64_t t0 = thread_cpu_ns();
    while (thread_cpu_ns() - t0 < ns)
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005u + 1;
}

static void *busy(void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_started, 1);
    while (!atomic_load(&g_stop))
        burn_ns(1000000);
    return NULL;
}

/* Sleeps and burns a little, until told to stop. */
static void *sleeper(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    atomic_fetch_add(&g_started, 1);
    while (!atomic_load(&g_stop)) {
        uint64_t ns = (50000000u + (uint64_t)(rand_r(&seed) % 100000000)) * g_sleep_scale;
        struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
        nanosleep(&ts, NULL);
        burn_ns(20000);
    }
    return NULL;
}

static const char DATA[] = "the program's own bytes, 0123456789";

/* Every fd of the process, from /proc/self/fd, into fds (at most max).
 * Returns the count. */
static int list_fds(int *fds, int max)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0, self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd != self)
            fds[n++] = fd;
    }
    closedir(d);
    return n;
}

static int hostile(int dup_over)
{
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, busy, NULL);
    burn_ns(300000000); /* everyone armed and sampled for a while */
    int data[2], empty[2];
    if (pipe(data) != 0 || pipe(empty) != 0)
        return 10;
    static int fds[65536];
    int n = list_fds(fds, 65536), replaced = 0;
    for (int i = 0; i < n; i++) {
        int fd = fds[i];
        if (fd <= 2 || fd == data[0] || fd == data[1] || fd == empty[0] || fd == empty[1])
            continue;
        if (dup_over) {
            if (dup2(replaced % 2 ? empty[0] : data[0], fd) == fd)
                replaced++;
        } else if (close(fd) == 0) {
            replaced++;
        }
    }
    if (!dup_over) {
        /* closefrom(3): our own pipes went too; new ones get low numbers. */
        close(data[0]);
        close(data[1]);
        close(empty[0]);
        close(empty[1]);
        if (pipe(data) != 0 || pipe(empty) != 0)
            return 11;
        if (data[0] != 3 || data[1] != 4) {
            fprintf(stderr, "fds_prog: pipe got %d and %d after closing all\n", data[0], data[1]);
            return 12;
        }
    }
    printf("fds_prog: %s %d fds\n", dup_over ? "replaced" : "closed", replaced);
    if (write(data[1], DATA, sizeof DATA) != (ssize_t)sizeof DATA)
        return 13;
    burn_ns(300000000); /* sampled on, with the fds gone */
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    /* Their triggers go at the sampler's next ticks. */
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    burn_ns(100000000);
    char buf[sizeof DATA + 16];
    int fl = fcntl(data[0], F_GETFL);
    fcntl(data[0], F_SETFL, fl | O_NONBLOCK);
    ssize_t got = read(data[0], buf, sizeof buf);
    if (got != (ssize_t)sizeof DATA || memcmp(buf, DATA, sizeof DATA) != 0) {
        fprintf(stderr, "fds_prog: the pipe gave %zd bytes, not the %zu written\n", got,
                sizeof DATA);
        return 14;
    }
    printf("fds_prog: pipe data intact\n");
    return 0;
}

static int budget(int threads, int files)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 20;
    if (rl.rlim_cur > 1024) {
        rl.rlim_cur = 1024; /* lowering only: the hard limit stays */
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return 21;
    }
    if (threads > 2000) {
        g_sleep_scale = (unsigned)(threads + 1999) / 2000;
        alarm(120 + 60 * (unsigned)((threads - 1000) / 1000));
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    int made = 0;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&th[i], &attr, sleeper, (void *)(uintptr_t)(i + 1)) == 0)
            made++;
        else
            th[i] = 0;
    while (atomic_load(&g_started) < made)
        usleep(1000);
    /* The sampler arms them meanwhile. */
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    int mine[65536];
    int opened = 0, failed = 0, highest = -1;
    for (int i = 0; i < files; i++) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) {
            failed++;
            continue;
        }
        mine[opened++] = fd;
        if (fd > highest)
            highest = fd;
        if (i % 100 == 99) {
            struct timespec pause = {0, 20000000};
            nanosleep(&pause, NULL);
        }
    }
    static int fds[65536];
    int n = list_fds(fds, 65536), others = 0;
    for (int i = 0; i < n; i++) {
        int own = fds[i] <= 2;
        for (int j = 0; j < opened && !own; j++)
            own = mine[j] == fds[i];
        others += !own;
    }
    printf("threads=%d opened=%d failed=%d highest=%d others=%d\n", made, opened, failed, highest,
           others);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < threads; i++)
        if (th[i])
            pthread_join(th[i], NULL);
    for (int i = 0; i < opened; i++)
        close(mine[i]);
    free(th);
    return 0;
}

int main(int argc, char **argv)
{
    /* The budget runs start 2000 threads: at a load of ~1000 (fresh-check
     * beside other jobs) one took over 120 s without hanging. */
    alarm(argc >= 2 && strcmp(argv[1], "budget") == 0 ? 300 : 120);
    if (argc >= 2 && strcmp(argv[1], "closeall") == 0)
        return hostile(0);
    if (argc >= 2 && strcmp(argv[1], "dup2") == 0)
        return hostile(1);
    if (argc >= 4 && strcmp(argv[1], "budget") == 0)
        return budget(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 2 && strcmp(argv[1], "lowest") == 0) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        printf("lowest=%d\n", fd);
        return fd >= 0 ? 0 : 1;
    }
    fprintf(stderr, "usage: fds_prog closeall|dup2|budget THREADS FILES|lowest\n");
    return 2;
}
