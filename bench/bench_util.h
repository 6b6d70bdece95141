/* What the bench programs share: clocks, the machine's CPU times around a
 * measurement, and the command line ("--name V" options, their numbers, the
 * usage message). Plain C and libc only: bench_trigger and bench_wall link
 * nothing of snapprof, so that every profiler sees the same program. */
#ifndef SNAPPROF_BENCH_BENCH_UTIL_H
#define SNAPPROF_BENCH_BENCH_UTIL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The clock's time in ns or s. Async-signal-safe (clock_gettime is on the
 * POSIX list). */
uint64_t bench_clock_ns(clockid_t clock);
double bench_clock_s(clockid_t clock);

/* The first line of /proc/stat: user nice system idle iowait irq softirq
 * steal, in clock ticks summed over all CPUs (all 0 when unreadable). */
typedef struct bench_cpu_times {
    unsigned long long v[8];
} bench_cpu_times_t;

bench_cpu_times_t bench_read_cpu_times(void);
/* How the machine's CPUs were spent from a to b: prints "<lead>: busy B%,
 * idle I%, steal S% of all CPUs" (nothing when no tick passed). Steal is
 * time the hypervisor gave our vCPUs to someone else: every wall-clock
 * figure, and thread CPU clocks too, can carry some of it. */
void bench_print_machine(const char *lead, const bench_cpu_times_t *a, const bench_cpu_times_t *b);

/* Prints "NAME: snapprof X.Y.Z, N CPUs, load L1 L5 L15" and, with quick,
 * that the figures are not meaningful, as a line. */
void bench_print_banner(const char *name, int quick);

/* Installs handler for signo (SA_SIGINFO | SA_RESTART, nothing blocked):
 * 0, or -errno with errno as sigaction left it. */
int bench_install_handler(int signo, void (*handler)(int, siginfo_t *, void *));

/* xorshift64*: the next pseudo-random number of the sequence *s (not 0). */
static inline uint64_t bench_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Prints the usage message (the one bench_mode was given) to stderr and
 * exits 2. */
void bench_usage(void) __attribute__((noreturn));
/* The start of a main() with modes: makes usage the usage message and
 * returns the mode, argv[1] (no mode is a usage error). */
const char *bench_mode(int argc, char **argv, const char *usage);

/* Parsers of an option's value; a bad one is a usage error. */
uint64_t bench_number(const char *v);     /* a whole number */
uint64_t bench_positive(const char *v);   /* a whole number > 0 */
uint64_t bench_seconds_ns(const char *v); /* seconds (> 0, <= 1e5) as ns */

/* An option: "--name V", V read by parse into *value, *given (if not
 * NULL) set to 1; or, with parse NULL, a flag "--name" that sets *value
 * to 1. */
typedef struct bench_opt {
    const char *name;
    uint64_t (*parse)(const char *v);
    uint64_t *value;
    int *given;
} bench_opt_t;

/* Reads argv[first..argc) as the options of opts[0..n); anything else is a
 * usage error. Then makes stdout line-buffered (the drivers read the
 * program's lines as they come). */
void bench_parse_opts(int argc, char **argv, int first, const bench_opt_t *opts, size_t n);

#endif
