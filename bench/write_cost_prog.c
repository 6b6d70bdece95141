/* write_cost_prog: the program and the meter of bench_write_cost.sh.
 *   write_cost_prog work MS        burns MS ms of its own thread's CPU time
 *                                  in write_cost_work(), then exits
 *   write_cost_prog measure CMD... runs CMD and prints "cpu_us=N" on
 *                                  stderr: the user and system time of
 *                                  CMD's process (wait4()), which holds
 *                                  everything a preloaded profiler did in
 *                                  it, its start and its exit included */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double thread_cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

__attribute__((noinline)) static void write_cost_work(double ms)
{
    double start = thread_cpu_ms();
    do {
        for (int i = 0; i < 100000; i++)
            sink += (unsigned long)i * 7;
    } while (thread_cpu_ms() - start < ms);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "work") == 0) {
        write_cost_work(atof(argv[2]));
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "measure") == 0) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            execvp(argv[2], argv + 2);
            _exit(127);
        }
        int st;
        struct rusage ru;
        if (wait4(pid, &st, 0, &ru) != pid)
            return 1;
        long us = ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec +
                  ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec;
        fprintf(stderr, "cpu_us=%ld\n", us);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    fprintf(stderr, "usage: %s work MS | measure CMD...\n", argv[0]);
    return 2;
}
