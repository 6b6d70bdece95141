/* What the bench programs share (bench_util.h). */
#include "bench_util.h"

#include <snapprof/snapprof.h> /* the version macros only: nothing is linked */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Async-signal-safe. */
uint64_t bench_clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Async-signal-safe. */
double bench_clock_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bench_cpu_times_t bench_read_cpu_times(void)
{
    bench_cpu_times_t t = {{0}};
    FILE *f = fopen("/proc/stat", "re");
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &t.v[0], &t.v[1], &t.v[2],
                   &t.v[3], &t.v[4], &t.v[5], &t.v[6], &t.v[7]) != 8)
            memset(&t, 0, sizeof t);
        fclose(f);
    }
    return t;
}

void bench_print_banner(const char *name, int quick)
{
    double load[3] = {0, 0, 0};
    FILE *f = fopen("/proc/loadavg", "re");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = load[1] = load[2] = 0;
        fclose(f);
    }
    printf("%s: snapprof %d.%d.%d, %ld CPUs, load %.2f %.2f %.2f%s\n", name, SNAPPROF_VERSION_MAJOR,
           SNAPPROF_VERSION_MINOR, SNAPPROF_VERSION_PATCH, sysconf(_SC_NPROCESSORS_ONLN), load[0],
           load[1], load[2], quick ? " (--quick: figures are not meaningful)" : "");
}

void bench_print_machine(const char *lead, const bench_cpu_times_t *a, const bench_cpu_times_t *b)
{
    unsigned long long d[8], total = 0;
    for (int i = 0; i < 8; i++) {
        d[i] = b->v[i] - a->v[i];
        total += d[i];
    }
    if (total == 0)
        return;
    printf("%s: busy %.0f%%, idle %.0f%%, steal %.0f%% of all CPUs\n", lead,
           100.0 * (double)(d[0] + d[1] + d[2] + d[5] + d[6]) / (double)total,
           100.0 * (double)(d[3] + d[4]) / (double)total, 100.0 * (double)d[7] / (double)total);
}

static const char *bench_usage_text = "usage: see the source\n";

void bench_usage(void)
{
    fputs(bench_usage_text, stderr);
    exit(2);
}

const char *bench_mode(int argc, char **argv, const char *usage)
{
    bench_usage_text = usage;
    if (argc < 2)
        bench_usage();
    return argv[1];
}

uint64_t bench_number(const char *v)
{
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*v == '\0' || *end != '\0')
        bench_usage();
    return n;
}

uint64_t bench_positive(const char *v)
{
    uint64_t n = bench_number(v);
    if (n == 0)
        bench_usage();
    return n;
}

uint64_t bench_seconds_ns(const char *v)
{
    char *end;
    double s = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || !(s > 0) || s > 1e5)
        bench_usage();
    return (uint64_t)(s * 1e9);
}

void bench_parse_opts(int argc, char **argv, int first, const bench_opt_t *opts, size_t n)
{
    for (int i = first; i < argc; i++) {
        const bench_opt_t *o = NULL;
        for (size_t k = 0; k < n && !o; k++)
            if (strcmp(argv[i], opts[k].name) == 0)
                o = &opts[k];
        if (!o)
            bench_usage();
        if (!o->parse) {
            *o->value = 1;
            continue;
        }
        if (i + 1 >= argc)
            bench_usage();
        *o->value = o->parse(argv[++i]);
        if (o->given)
            *o->given = 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
}

int bench_install_handler(int signo, void (*handler)(int, siginfo_t *, void *))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(signo, &sa, NULL) == 0 ? 0 : -errno;
}
