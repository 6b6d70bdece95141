/* Settings of a whole-process profile and their parsing, shared by the
 * preload library (which reads them from the environment) and the
 * `snapprof` command (which checks them before it starts anything).
 * Internal; plain libc, no snapprof calls, so the command links it alone. */
#ifndef SNAPPROF_PRELOAD_CONFIG_H
#define SNAPPROF_PRELOAD_CONFIG_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

/* The environment the preload library reads. SNAPPROF_* win over the
 * gperftools names, which are honoured so that existing scripts work. */
#define SNAPPROF_ENV_OUTPUT "SNAPPROF_OUTPUT"           /* profile path; enables profiling */
#define SNAPPROF_ENV_FREQUENCY "SNAPPROF_FREQUENCY"     /* samples per second per thread */
#define SNAPPROF_ENV_MODE "SNAPPROF_MODE"               /* cpu | wall */
#define SNAPPROF_ENV_SIGNAL "SNAPPROF_SIGNAL"           /* e.g. SIGURG, RTMIN+4, 23 */
#define SNAPPROF_ENV_DURATION "SNAPPROF_DURATION"       /* seconds of sampling, then stop */
#define SNAPPROF_ENV_FORK "SNAPPROF_FORK"               /* follow | stop */
#define SNAPPROF_ENV_TRIGGER "SNAPPROF_TRIGGER"         /* auto | perf | timer | handshake */
#define SNAPPROF_ENV_SUMMARY_DIR "SNAPPROF_SUMMARY_DIR" /* set by `snapprof record` */
#define SNAPPROF_ENV_ROOT_PID "SNAPPROF_ROOT_PID"       /* the first profiled process */
#define SNAPPROF_ENV_CPUPROFILE "CPUPROFILE"
#define SNAPPROF_ENV_CPUPROFILE_FREQUENCY "CPUPROFILE_FREQUENCY"
#define SNAPPROF_ENV_CPUPROFILE_REALTIME "CPUPROFILE_REALTIME"

/* gperftools caps CPUPROFILE_FREQUENCY at 4000; so do we: above that the
 * handshake's own cost starts to show in what it measures. */
#define SNAPPROF_HZ_MIN 1u
#define SNAPPROF_HZ_MAX 4000u
#define SNAPPROF_HZ_DEFAULT 100u
/* Longest --duration: a year, only to keep the arithmetic in range. */
#define SNAPPROF_DURATION_MAX_S 31536000.0

typedef struct snapprof__preload_config {
    char output[PATH_MAX]; /* absolute path of the profile */
    char family[PATH_MAX]; /* the path profiled children add ".<pid>" to */
    unsigned hz;
    int wall;            /* 1: wall-clock mode */
    int signo;           /* sampling signal */
    int signal_explicit; /* chosen by the user: never swapped for another */
    uint64_t duration_ns;
    int follow_fork; /* children of fork() and what they exec are profiled */
    int trigger;     /* snapprof_trigger_t: 0 auto, 1 perf, 2 timer, 3 handshake */
    char summary_dir[PATH_MAX];
} snapprof__preload_config_t;

/* Each parser returns 0, or -1 with a one-line reason in why[0..why_size). */
int snapprof__parse_hz(const char *s, unsigned *out, char *why, size_t why_size);
int snapprof__parse_duration(const char *s, uint64_t *out_ns, char *why, size_t why_size);
int snapprof__parse_mode(const char *s, int *wall, char *why, size_t why_size);
int snapprof__parse_fork(const char *s, int *follow, char *why, size_t why_size);
/* "auto", "perf", "timer" or "handshake", as snapprof_trigger_t's values. */
int snapprof__parse_trigger(const char *s, int *trigger, char *why, size_t why_size);
/* What CPU mode uses unless told otherwise (the handshake, until the
 * CPU-clock triggers are the proven default). */
#define SNAPPROF_TRIGGER_DEFAULT 3
/* Signal names with or without "SIG", any case; "RTMIN+n", "RTMAX-n"; or a
 * number. Refuses signals that cannot stop a thread for a sample without
 * changing what the program sees (see snapprof__signal_usable()). */
int snapprof__parse_signal(const char *s, int *out, char *why, size_t why_size);

/* 1 when signo may be the sampling signal: not one the kernel or libc
 * reserves (KILL, STOP, glibc's two internal real-time signals), not one
 * that reports a fault, and not one of job control or termination, whose
 * meaning to the program must stay untouched. */
int snapprof__signal_usable(int signo);

/* "SIGURG", "SIGRTMIN+4", ... into buf; returns buf. */
const char *snapprof__signal_name(int signo, char *buf, size_t size);

/* Makes path absolute against the current directory into out. Returns 0 or
 * -1 (too long, or no current directory). */
int snapprof__absolute_path(const char *path, char *out, size_t size);

/* Checks that a profile can be created at path: its directory exists, is a
 * directory and is writable, and path itself is not a directory. Returns 0
 * or a positive errno value. */
int snapprof__check_output(const char *path);

#endif
