/* Settings of a whole-process profile and their parsing, shared by the
 * preload library (which reads them from the environment) and the
 * `snapprof` command (which checks them before it starts anything).
 * Internal; plain libc, no snapprof calls, so the command links it alone. */
#ifndef SNAPPROF_PRELOAD_CONFIG_H
#define SNAPPROF_PRELOAD_CONFIG_H

#include <snapprof/jit.h> /* the layout type only: nothing here calls the library */

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

/* The environment the preload library reads. SNAPPROF_* win over the
 * gperftools names, which are honoured so that existing scripts work. */
#define SNAPPROF_ENV_OUTPUT                                                                        \
    "SNAPPROF_OUTPUT" /* profile paths, comma-separated; enables profiling */
#define SNAPPROF_ENV_FORMAT                                                                        \
    "SNAPPROF_FORMAT" /* pprof | folded | trace | gperftools, per output                           \
                       */
#define SNAPPROF_ENV_FREQUENCY "SNAPPROF_FREQUENCY"       /* samples per second per thread */
#define SNAPPROF_ENV_MODE "SNAPPROF_MODE"                 /* cpu | wall */
#define SNAPPROF_ENV_SIGNAL "SNAPPROF_SIGNAL"             /* e.g. SIGURG, RTMIN+4, 23 */
#define SNAPPROF_ENV_DURATION "SNAPPROF_DURATION"         /* seconds of sampling, then stop */
#define SNAPPROF_ENV_LOOP "SNAPPROF_LOOP"                 /* a profile per interval: 60s, 1h */
#define SNAPPROF_ENV_FLIGHT "SNAPPROF_FLIGHT"             /* keep the last N for ?since=: 5m */
#define SNAPPROF_ENV_FORK "SNAPPROF_FORK"                 /* follow | stop */
#define SNAPPROF_ENV_CHECKPOINT "SNAPPROF_CHECKPOINT"     /* seconds between checkpoints; 0 off */
#define SNAPPROF_ENV_CRASH "SNAPPROF_CRASH"               /* write | off: the profile on a crash */
#define SNAPPROF_ENV_LINES "SNAPPROF_LINES"               /* all | own: where lines are read */
#define SNAPPROF_ENV_TRIGGER "SNAPPROF_TRIGGER"           /* auto | perf | timer | handshake */
#define SNAPPROF_ENV_WALL_BLOCKED "SNAPPROF_WALL_BLOCKED" /* signal | proc */
#define SNAPPROF_ENV_JIT_LAYOUT "SNAPPROF_JIT_LAYOUT"     /* [PREFIX=]LAYOUT,... of perf map code */
#define SNAPPROF_ENV_SUMMARY_DIR "SNAPPROF_SUMMARY_DIR"   /* set by `snapprof record` */
#define SNAPPROF_ENV_ROOT_PID "SNAPPROF_ROOT_PID"         /* the first profiled process */
#define SNAPPROF_ENV_HEAP "SNAPPROF_HEAP" /* 1: heap profiles too; 0 or unset: off */
#define SNAPPROF_ENV_HEAP_INTERVAL "SNAPPROF_HEAP_INTERVAL" /* mean bytes between heap samples */
#define SNAPPROF_ENV_ARM "SNAPPROF_ARM" /* always | demand: armed only for --http's requests */
#define SNAPPROF_ENV_CPUPROFILE "CPUPROFILE"
#define SNAPPROF_ENV_CPUPROFILE_FREQUENCY "CPUPROFILE_FREQUENCY"
#define SNAPPROF_ENV_CPUPROFILE_REALTIME "CPUPROFILE_REALTIME"

/* gperftools caps CPUPROFILE_FREQUENCY at 4000; so do we: above that the
 * handshake's own cost starts to show in what it measures. */
#define SNAPPROF_HZ_MIN 1u
#define SNAPPROF_HZ_MAX 4000u
#define SNAPPROF_HZ_DEFAULT 100u
/* The rate with SNAPPROF_FLIGHT and no rate given (parca-agent's). */
#define SNAPPROF_FLIGHT_HZ 19u
/* ... and timed by each thread's CPU-time timer (then the handshake where
 * that fails), not a perf event: a perf CPU-clock event is switched out
 * and in with its thread at every context switch, which a server's
 * threads do tens of times a second whatever the rate, while the timer is
 * looked at on the kernel's tick. At 19 Hz the tick's precision (4 ms at
 * 250 Hz) is a tenth of a period. bench_continuous.sh's server, twelve
 * rounds side by side: CPU per fixed work 1.010 x no profiler with perf
 * events, 1.004 with timers (issue 28's target for --flight: 1.01). Only
 * when neither -F nor --trigger (SNAPPROF_HZ, SNAPPROF_TRIGGER) is given,
 * in CPU mode. */
#define SNAPPROF_FLIGHT_TRIGGER SNAPPROF_TRIGGER_CPU_TIMER
/* The same for the profiles of `--http` alone (SNAPPROF_ARM=demand), at
 * rates up to this one, when SNAPPROF_TRIGGER is not given: those serve a
 * running service's scrapes and requests, as Go's net/http/pprof does with
 * the same per-thread CPU-time timers (runtime/pprof since Go 1.18). At
 * 100 Hz the tick's precision is 0.4 of a period; above it the perf event
 * stays, since a timer gives at most one sample a tick. bench_server at
 * 0.1 CPU with one 25 s request at 100 Hz, six rounds side by side: 1.018
 * x no profiler with perf events (1.013-1.023), 1.011 with timers
 * (0.999-1.015); issue 28's target for that row: 1.02. */
#define SNAPPROF_DEMAND_TIMER_MAX_HZ 100u
/* Longest --duration: a year, only to keep the arithmetic in range. */
#define SNAPPROF_DURATION_MAX_S 31536000.0
/* The heap sampling interval when SNAPPROF_HEAP_INTERVAL is not given
 * (Go's and jemalloc's), and the largest one taken (1 TiB). */
#define SNAPPROF_HEAP_INTERVAL_DEFAULT 524288u
#define SNAPPROF_HEAP_INTERVAL_MAX (1ull << 40)
/* How long a crashing thread waits for its profile to be written
 * (preload_crash.c); the `snapprof record` summary quotes it. Wall time. */
#define SNAPPROF__CRASH_WAIT_NS 2000000000u

/* The files one run writes: each in one format. */
typedef enum {
    SNAPPROF__FORMAT_PPROF = 0,      /* gzipped perftools.profiles.Profile */
    SNAPPROF__FORMAT_FOLDED = 1,     /* "root;...;leaf count" lines */
    SNAPPROF__FORMAT_TRACE = 2,      /* Chrome trace-event JSON */
    SNAPPROF__FORMAT_GPERFTOOLS = 3, /* gperftools' legacy binary CPU profile */
    /* The formats users ask for end here (SNAPPROF_FORMAT, --format); the
     * heap profiles are outputs the preload adds by itself under
     * SNAPPROF_HEAP=1 (snapprof__add_heap_outputs()). */
    SNAPPROF__FORMAT_HEAP = 4,      /* pprof heap profile (heap_profile.h), BASE.heap.pb.gz */
    SNAPPROF__FORMAT_HEAP_PEAK = 5, /* the same at the in-use peak, BASE.heappeak.pb.gz */
    SNAPPROF__FORMAT_COUNT
} snapprof__format_t;

#define SNAPPROF__FORMAT_USER_COUNT 4u /* formats a user may name */

static inline int snapprof__format_is_heap(snapprof__format_t f)
{
    return f == SNAPPROF__FORMAT_HEAP || f == SNAPPROF__FORMAT_HEAP_PEAK;
}

/* Outputs a user may ask for (-o, SNAPPROF_OUTPUT), at most; and outputs
 * of one run, at most: those and the two heap profiles. */
#define SNAPPROF_OUTPUTS_ASKED_MAX 4
#define SNAPPROF_OUTPUTS_MAX (SNAPPROF_OUTPUTS_ASKED_MAX + 2)

typedef struct snapprof__output_spec {
    char path[PATH_MAX];   /* absolute path of the file this process writes */
    char family[PATH_MAX]; /* the path as asked: every name of this output derives from
                              it (file_names.h) */
    snapprof__format_t format;
} snapprof__output_spec_t;

/* A frame layout for the perf map lines whose names start with prefix ("":
 * the default), as snapprof_jit_perf_map_set_layout() takes it. */
typedef struct snapprof__jit_rule {
    char prefix[64];
    snapprof_jit_layout_t layout;
} snapprof__jit_rule_t;

/* Rules one SNAPPROF_JIT_LAYOUT (or all --jit-layout options) may give. */
#define SNAPPROF_JIT_RULES_MAX 8u

typedef struct snapprof__preload_config {
    snapprof__output_spec_t outputs[SNAPPROF_OUTPUTS_MAX];
    unsigned n_outputs; /* at least 1, except with arm_demand (heap outputs only) */
    unsigned hz;
    int hz_explicit;      /* SNAPPROF_FREQUENCY or CPUPROFILE_FREQUENCY was given */
    int trigger_explicit; /* SNAPPROF_TRIGGER was given (and understood) */
    int wall;             /* 1: wall-clock mode */
    int signo;            /* sampling signal */
    int signal_explicit;  /* chosen by the user: never swapped for another */
    uint64_t duration_ns;
    /* SNAPPROF_CHECKPOINT: at most this long between writes of the profile
     * so far (checkpoint_here() in preload_control.c); 0: only at the end. */
    uint64_t checkpoint_ns;
    int checkpoint_set;   /* SNAPPROF_CHECKPOINT was given (else Go programs get 1 s) */
    uint64_t loop_ns;     /* rolling profiles: one file per output per interval; 0: off */
    uint64_t flight_ns;   /* SNAPPROF_FLIGHT: the last flight_ns kept for ?since=; 0: off */
    int follow_fork;      /* children of fork() and what they exec are profiled */
    int child;            /* not the first process profiled: files named with the pid, and
                             none when it took no sample */
    int gperftools_names; /* CPUPROFILE: children write FILE_<pid>, as gperftools names them */
    int crash_off;        /* SNAPPROF_CRASH=off: crashes are left alone (preload_crash.c) */
    int lines;            /* SNAPPROF_LINES: a snapprof_lines_t (default PROGRAM) */
    int trigger;          /* snapprof_trigger_t: 0 auto, 1 perf, 2 timer, 3 handshake */
    int wall_blocked;     /* snapprof_wall_blocked_t: 0 signal, 1 proc */
    char summary_dir[PATH_MAX];
    snapprof__jit_rule_t jit_rules[SNAPPROF_JIT_RULES_MAX]; /* SNAPPROF_JIT_LAYOUT, in order */
    unsigned n_jit_rules;
    /* SNAPPROF_HEAP=1: the profiler's heap_interval (bytes); 0: no heap
     * sampling (the default). The heap outputs are then in outputs[]. */
    size_t heap_interval;
    /* SNAPPROF_ARM=demand: the threads' triggers are armed only while a
     * profile is requested (snapprof_params_t.arm_on_demand; `snapprof
     * record --http` without -o), and the run's own CPU outputs are not
     * written (only its heap outputs are in outputs[], maybe none). */
    int arm_demand;
} snapprof__preload_config_t;

/* Each parser returns 0, or -1 with a one-line reason in why[0..why_size). */
int snapprof__parse_hz(const char *s, unsigned *out, char *why, size_t why_size);
int snapprof__parse_duration(const char *s, uint64_t *out_ns, char *why, size_t why_size);
/* A duration as snapprof__parse_duration(), or "0" / "off" (any case): 0. */
int snapprof__parse_checkpoint(const char *s, uint64_t *out_ns, char *why, size_t why_size);
/* The interval of rolling profiles (and the flight recorder's span): a
 * whole number of seconds, minutes or hours ("60s", "5m", "1h"; a bare
 * number is seconds; the grammar of snapprof__parse_whole_duration() in
 * common/duration.h), at least 1 s (files are named to the second), at
 * most SNAPPROF_DURATION_MAX_S. */
int snapprof__parse_loop(const char *s, uint64_t *out_ns, char *why, size_t why_size);
int snapprof__parse_mode(const char *s, int *wall, char *why, size_t why_size);
int snapprof__parse_fork(const char *s, int *follow, char *why, size_t why_size);
/* "write" (or "on", "1") or "off" (or "0"), any case: whether a crash
 * writes the profile before the program dies of it. */
int snapprof__parse_crash(const char *s, int *write, char *why, size_t why_size);
/* "program" (DWARF of separate debug files except the system libraries'),
 * "all" (of every separate debug file) or "own" (only each object's own
 * DWARF): *lines a snapprof_lines_t. Returns 0, or -1 with why. */
int snapprof__parse_lines(const char *s, int *lines, char *why, size_t why_size);
/* "auto", "perf", "timer" or "handshake", as snapprof_trigger_t's values. */
int snapprof__parse_trigger(const char *s, int *trigger, char *why, size_t why_size);
/* "signal" or "proc", as snapprof_wall_blocked_t's values. */
int snapprof__parse_wall_blocked(const char *s, int *out, char *why, size_t why_size);
/* Layouts of perf map code: a comma-separated list of [PREFIX=]LAYOUT,
 * LAYOUT one of "fp" (frame pointer), "cpython" (CPython's perf
 * trampolines) or "fixed:SIZE[:RA[:FP]]" (a fixed frame of SIZE bytes,
 * return address at RA, default SIZE - 8, rbp saved at FP, default left
 * alone; multiples of 8, SIZE at most 1 MiB), any case. A rule without
 * PREFIX (or with an empty one) sets the default, which lines no prefix
 * matches get. Appends to out[*n..max). Returns 0, or -1 with a reason. */
int snapprof__parse_jit_layouts(const char *s, snapprof__jit_rule_t *out, unsigned max, unsigned *n,
                                char *why, size_t why_size);
/* "always" (armed from start to stop, the default) or "demand", any case:
 * *demand 0 or 1. */
int snapprof__parse_arm(const char *s, int *demand, char *why, size_t why_size);
/* SNAPPROF_HEAP_INTERVAL, --heap-interval: a decimal number of bytes, 1
 * to SNAPPROF_HEAP_INTERVAL_MAX. */
int snapprof__parse_heap_interval(const char *s, size_t *out, char *why, size_t why_size);
/* Appends the heap profile and the peak heap profile to cfg's outputs,
 * named after the first output as file_names.h says (BASE.heap.pb.gz and
 * BASE.heappeak.pb.gz, whatever the first output's format), and sets
 * cfg->heap_interval to interval. Returns 0, or -1 with a reason (no
 * room, a name too long or taken by another output); cfg is then
 * unchanged. */
int snapprof__add_heap_outputs(snapprof__preload_config_t *cfg, size_t interval, char *why,
                               size_t why_size);
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

/* "pprof", "folded", "trace", "gperftools". */
const char *snapprof__format_name(snapprof__format_t format);

/* The extension a format's files get: ".pb.gz", ".folded", ".json",
 * ".prof". */
const char *snapprof__format_ext(snapprof__format_t format);

/* The format a file name asks for: ".folded" or ".txt" folded, ".json"
 * trace, anything else pprof. */
snapprof__format_t snapprof__format_of_path(const char *path);

/* Appends the formats of a comma-separated list ("pprof,folded") to
 * out[*n..max). Returns 0, or -1 with a reason (a name that is no format,
 * more than max in all). */
int snapprof__parse_formats(const char *s, snapprof__format_t *out, unsigned max, unsigned *n,
                            char *why, size_t why_size);

/* Decides the files of a run from the paths and the formats asked for:
 *   - no format: each path in the format its name asks for (no path:
 *     snapprof.pb.gz);
 *   - as many formats as paths: the i-th path in the i-th format;
 *   - one path (or none) and several formats: the path, less a known
 *     extension, names them all: "-o prof --format pprof,folded" writes
 *     prof.pb.gz and prof.folded (no path: snapprof.pb.gz, ...).
 * Paths are made absolute (path and family alike). Returns 0, or -1 with a
 * reason (counts that do not pair, a path named twice, a path too long). */
int snapprof__plan_outputs(const char *const *paths, unsigned n_paths,
                           const snapprof__format_t *formats, unsigned n_formats,
                           snapprof__output_spec_t *out, unsigned *n_out, char *why,
                           size_t why_size);

/* Sets cfg's rate, mode, signal, trigger, wall_blocked, JIT layouts and crash mode from the
 * environment (through get), or to the defaults above; warns (through warn)
 * of each value it ignores. Both the preloaded start and gperftools'
 * ProfilerStart() read these the same way. */
void snapprof__sampling_from_env(snapprof__preload_config_t *cfg, char *(*get)(const char *name),
                                 void (*warn)(const char *fmt, ...));

/* Reads a process's settings from its environment into cfg, as the preload
 * library does when it loads: get looks a variable up (getenv), warn
 * reports a bad value in one line (the setting then keeps its default).
 * SNAPPROF_* win over the gperftools names. Returns 1 when the environment
 * asks for a profile (SNAPPROF_OUTPUT or CPUPROFILE names a usable path),
 * else 0. */
int snapprof__config_from_env(snapprof__preload_config_t *cfg, char *(*get)(const char *name),
                              void (*warn)(const char *fmt, ...));

/* Makes path absolute against the current directory into out. Returns 0 or
 * -1 (too long, or no current directory). */
int snapprof__absolute_path(const char *path, char *out, size_t size);

/* Checks that a profile can be created at path: its directory exists, is a
 * directory and is writable, and path itself is not a directory. Returns 0
 * or a positive errno value. */
int snapprof__check_output(const char *path);

#endif
