/* `snapprof record [options] -- CMD ARGS...` runs CMD with
 * libsnapprof-preload.so, passes its exit status through and prints what
 * was collected. Everything is checked before CMD starts, so bad input
 * never leaves a program half-started. */
#include "cli/cli.h"
#include "cli/debug_hint.h"
#include "preload/file_names.h"
#include "preload/preload_config.h"
#include "profile_builder/stats_text.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SNAPPROF_PRELOAD_NAME
#define SNAPPROF_PRELOAD_NAME "libsnapprof-preload.so"
#endif

#define EXIT_USAGE SNAPPROF_EXIT_USAGE
#define EXIT_NOT_FOUND 127
#define EXIT_NOT_EXECUTABLE 126

const char snapprof__record_usage[] =
    "usage: snapprof record [options] -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD with every thread sampled and writes its profile.\n"
    "\n"
    "  -F, --frequency HZ   samples per second of each thread (1-4000, default 100)\n"
    "  -o, --output FILE    profile to write (default snapprof.pb.gz), in the format\n"
    "                       its name says: .folded or .txt folded stacks, .json\n"
    "                       trace events, else pprof; repeat for several files\n"
    "                       (at most 4). Profiled child processes write FILE with\n"
    "                       their pid before the extension (prof.1234.pb.gz), if\n"
    "                       they took samples\n"
    "      --format LIST    pprof, folded, trace or gperftools (its legacy CPU\n"
    "                       profile), comma-separated or repeated: one per -o,\n"
    "                       or for one -o (or none) several files\n"
    "                       named after it (-o prof --format pprof,folded writes\n"
    "                       prof.pb.gz and prof.folded)\n"
    "      --cpu            sample threads while they use CPU (default)\n"
    "      --wall           sample every thread every tick, waiting ones too\n"
    "      --wall-blocked H how --wall samples a thread blocked in a system call:\n"
    "                       proc (no signal: read through /proc; default) or\n"
    "                       signal (the handshake: a signal can end its wait early)\n"
    "      --duration S     stop sampling after S seconds; CMD runs on\n"
    "      --signal SIG     signal that stops threads for a sample (default SIGURG)\n"
    "      --trigger T      what times samples in CPU mode: perf (a perf CPU-clock\n"
    "                       event per thread), timer (a CPU-time timer per thread,\n"
    "                       at most the kernel tick's rate), handshake (the sampling\n"
    "                       thread signals and waits), auto (the best that works,\n"
    "                       per thread; default)\n"
    "      --fork MODE      follow: children of fork(), and what they exec, are\n"
    "                       profiled too (default); stop: only CMD's own process\n"
    "      --crash MODE     write: a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL,\n"
    "                       SIGABRT) writes the profile, then the program dies of\n"
    "                       it (default); off: no handler of ours, no profile\n"
    "      --jit-layout L   how frames of code named in /tmp/perf-PID.map are laid\n"
    "                       out: [PREFIX=]LAYOUT, comma-separated or repeated, for\n"
    "                       the lines whose names start with PREFIX (none: all\n"
    "                       other lines). LAYOUT: fp (frame pointers, the default),\n"
    "                       cpython (python -X perf's trampolines; py:: lines get\n"
    "                       it without this option) or fixed:SIZE[:RA[:FP]] (SIZE\n"
    "                       bytes with the return address, at RA (SIZE-8), rbp\n"
    "                       saved at FP (untouched)). E.g. py::=fp,fixed:32\n"
    "  -q, --quiet          print no summary\n"
    "\n"
    "Open a pprof profile with: go tool pprof -http=: FILE; its counters with:\n"
    "snapprof stats FILE. Folded stacks open in speedscope or flamegraph.pl, trace\n"
    "events in ui.perfetto.dev.\n"
    "Without this command: LD_PRELOAD=libsnapprof-preload.so SNAPPROF_OUTPUT=FILE CMD\n"
    "(gperftools' CPUPROFILE and CPUPROFILE_FREQUENCY work too).\n";

static void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("snapprof: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(status);
}

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct options {
    unsigned hz;
    const char *paths[SNAPPROF_OUTPUTS_MAX]; /* -o, as given */
    unsigned n_paths;
    snapprof__format_t formats[SNAPPROF_OUTPUTS_MAX]; /* --format */
    unsigned n_formats;
    int wall;
    const char *duration; /* as given, checked */
    const char *signal;   /* as given, checked */
    const char *fork_mode;
    const char *crash_mode;
    int crash_off; /* --crash off */
    const char *trigger;
    const char *wall_blocked;
    char jit_layout[1024]; /* --jit-layout values, checked, joined by commas */
    unsigned n_jit_rules;
    int quiet;
    char **cmd;
} options_t;

/* Takes the value of an option that needs one: "-F 99", "-F99",
 * "--frequency 99" or "--frequency=99". */
static const char *option_value(int argc, char **argv, int *i, const char *shortname,
                                const char *longname)
{
    const char *a = argv[*i];
    size_t ln = strlen(longname);
    if (shortname && strcmp(a, shortname) != 0 && strncmp(a, shortname, 2) == 0)
        return a + 2;
    if (strncmp(a, longname, ln) == 0 && a[ln] == '=')
        return a + ln + 1;
    if (*i + 1 >= argc)
        die(EXIT_USAGE, "%s needs a value (see snapprof record --help)", a);
    return argv[++*i];
}

static int matches(const char *a, const char *shortname, const char *longname)
{
    size_t ln = strlen(longname);
    if (shortname && strncmp(a, shortname, 2) == 0)
        return 1;
    return strcmp(a, longname) == 0 || (strncmp(a, longname, ln) == 0 && a[ln] == '=');
}

static void parse_options(int argc, char **argv, options_t *o)
{
    char why[256];
    memset(o, 0, sizeof *o);
    o->hz = SNAPPROF_HZ_DEFAULT;
    int i;
    for (i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* the command */
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(snapprof__record_usage, stdout);
            exit(0);
        } else if (matches(a, "-F", "--frequency")) {
            const char *v = option_value(argc, argv, &i, "-F", "--frequency");
            if (snapprof__parse_hz(v, &o->hz, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad frequency: %s", why);
        } else if (matches(a, "-o", "--output")) {
            const char *path = option_value(argc, argv, &i, "-o", "--output");
            if (!*path)
                die(EXIT_USAGE, "the output path is empty");
            /* SNAPPROF_OUTPUT separates the paths with commas. */
            if (strchr(path, ','))
                die(EXIT_USAGE, "output path %s has a ',', which snapprof cannot pass on", path);
            if (o->n_paths == SNAPPROF_OUTPUTS_MAX)
                die(EXIT_USAGE, "more than %u outputs", SNAPPROF_OUTPUTS_MAX);
            o->paths[o->n_paths++] = path;
        } else if (matches(a, NULL, "--format")) {
            const char *v = option_value(argc, argv, &i, NULL, "--format");
            if (snapprof__parse_formats(v, o->formats, SNAPPROF_OUTPUTS_MAX, &o->n_formats, why,
                                        sizeof why) != 0)
                die(EXIT_USAGE, "bad --format: %s", why);
        } else if (strcmp(a, "--cpu") == 0) {
            o->wall = 0;
        } else if (strcmp(a, "--wall") == 0) {
            o->wall = 1;
        } else if (matches(a, NULL, "--duration")) {
            uint64_t ns;
            o->duration = option_value(argc, argv, &i, NULL, "--duration");
            if (snapprof__parse_duration(o->duration, &ns, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad duration: %s", why);
        } else if (matches(a, NULL, "--signal")) {
            int signo;
            o->signal = option_value(argc, argv, &i, NULL, "--signal");
            if (snapprof__parse_signal(o->signal, &signo, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad signal: %s", why);
        } else if (matches(a, NULL, "--fork")) {
            int follow;
            o->fork_mode = option_value(argc, argv, &i, NULL, "--fork");
            if (snapprof__parse_fork(o->fork_mode, &follow, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --fork: %s", why);
        } else if (matches(a, NULL, "--crash")) {
            int write;
            o->crash_mode = option_value(argc, argv, &i, NULL, "--crash");
            if (snapprof__parse_crash(o->crash_mode, &write, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --crash: %s", why);
            o->crash_off = !write;
        } else if (matches(a, NULL, "--trigger")) {
            int trigger;
            o->trigger = option_value(argc, argv, &i, NULL, "--trigger");
            if (snapprof__parse_trigger(o->trigger, &trigger, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --trigger: %s", why);
        } else if (matches(a, NULL, "--wall-blocked")) {
            int how;
            o->wall_blocked = option_value(argc, argv, &i, NULL, "--wall-blocked");
            if (snapprof__parse_wall_blocked(o->wall_blocked, &how, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --wall-blocked: %s", why);
        } else if (matches(a, NULL, "--jit-layout")) {
            snapprof__jit_rule_t rules[SNAPPROF_JIT_RULES_MAX];
            const char *v = option_value(argc, argv, &i, NULL, "--jit-layout");
            if (snapprof__parse_jit_layouts(v, rules, SNAPPROF_JIT_RULES_MAX, &o->n_jit_rules, why,
                                            sizeof why) != 0)
                die(EXIT_USAGE, "bad --jit-layout: %s", why);
            size_t len = strlen(o->jit_layout);
            if (len + 1 + strlen(v) >= sizeof o->jit_layout)
                die(EXIT_USAGE, "--jit-layout: too long");
            snprintf(o->jit_layout + len, sizeof o->jit_layout - len, "%s%s", len ? "," : "", v);
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
        } else {
            die(EXIT_USAGE, "unknown option '%s' (see snapprof record --help)", a);
        }
    }
    if (i >= argc)
        die(EXIT_USAGE, "no command to run (snapprof record [options] -- CMD [ARGS...])");
    o->cmd = argv + i;
}

/* ------------------------------------------------------------------------ */
/* Checks before anything starts                                            */
/* ------------------------------------------------------------------------ */

/* The preload library: $SNAPPROF_PRELOAD_LIB, or next to this command in
 * an install tree (bin/../lib) or the build tree (cli/../preload). */
static void find_preload(char *out, size_t size)
{
    const char *env = getenv("SNAPPROF_PRELOAD_LIB");
    if (env && *env) {
        if (access(env, R_OK) != 0)
            die(EXIT_USAGE, "SNAPPROF_PRELOAD_LIB=%s: %s", env, strerror(errno));
        if (snapprof__absolute_path(env, out, size) != 0)
            die(EXIT_USAGE, "SNAPPROF_PRELOAD_LIB=%s: path too long", env);
        return;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        die(EXIT_USAGE, "cannot find this command's own path: %s", strerror(errno));
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    const char *rel[] = {
#ifdef SNAPPROF_PRELOAD_REL
        SNAPPROF_PRELOAD_REL,
#endif
        "../lib",
        "../preload",
    };
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[PATH_MAX], real[PATH_MAX];
        int len = snprintf(cand, sizeof cand, "%s/%s/%s", self, rel[i], SNAPPROF_PRELOAD_NAME);
        if (len > 0 && (size_t)len < sizeof cand && access(cand, R_OK) == 0 &&
            realpath(cand, real)) {
            snprintf(out, size, "%s", real);
            return;
        }
    }
    die(EXIT_USAGE,
        "cannot find %s next to %s (looked in ../lib and ../preload; set "
        "SNAPPROF_PRELOAD_LIB)",
        SNAPPROF_PRELOAD_NAME, self);
}

/* Finds the program as execvp() would; exits 127 or 126 like a shell. */
static void resolve_command(const char *name, char *out, size_t size)
{
    struct stat st;
    if (strchr(name, '/')) {
        if (stat(name, &st) != 0)
            die(EXIT_NOT_FOUND, "%s: %s", name, strerror(errno));
        if (S_ISDIR(st.st_mode))
            die(EXIT_NOT_EXECUTABLE, "%s: is a directory", name);
        if (access(name, X_OK) != 0)
            die(EXIT_NOT_EXECUTABLE, "%s: %s", name, strerror(errno));
        snprintf(out, size, "%s", name);
        return;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    int found_not_executable = 0;
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char cand[PATH_MAX];
        int n = snprintf(cand, sizeof cand, "%.*s%s%s", (int)len, p, len ? "/" : "", name);
        if (n > 0 && (size_t)n < size && (size_t)n < sizeof cand && stat(cand, &st) == 0 &&
            S_ISREG(st.st_mode)) {
            if (access(cand, X_OK) == 0) {
                memcpy(out, cand, (size_t)n + 1);
                return;
            }
            found_not_executable = 1;
        }
        if (!end)
            break;
        p = end;
    }
    if (found_not_executable)
        die(EXIT_NOT_EXECUTABLE, "%s: permission denied", name);
    die(EXIT_NOT_FOUND, "%s: command not found", name);
}

/* LD_PRELOAD cannot reach a program without a dynamic loader, nor a
 * set-user-ID one run by someone else: say so rather than write nothing. */
static void check_loadable(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && ((st.st_mode & S_ISUID) && st.st_uid != geteuid()))
        die(EXIT_USAGE, "%s is set-user-ID: the dynamic loader ignores LD_PRELOAD for it", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return; /* execute-only: let exec decide */
    Elf64_Ehdr eh;
    int is_static = 0;
    if (read(fd, &eh, sizeof eh) == (ssize_t)sizeof eh &&
        memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
        eh.e_phentsize == sizeof(Elf64_Phdr)) {
        is_static = 1;
        for (unsigned i = 0; i < eh.e_phnum; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != sizeof ph)
                break;
            /* Without PT_INTERP the kernel starts it with no dynamic
             * loader (static and static-pie programs alike). */
            if (ph.p_type == PT_INTERP)
                is_static = 0;
        }
    }
    close(fd);
    if (is_static)
        die(EXIT_USAGE, "%s is statically linked: the preload library cannot be loaded into it",
            path);
}

/* ------------------------------------------------------------------------ */
/* The summary                                                              */
/* ------------------------------------------------------------------------ */

#define MAX_PROCS 256
/* "unnamed.N" keys read (the preload writes at most 4), and how long dpkg
 * may take for each. */
#define SNAPPROF_UNNAMED_KEYS_MAX 4
#define SNAPPROF_DPKG_TIMEOUT_MS 3000
#define MAX_KEYS 48

/* One process's summary file: its counters, read with the stats table
 * that wrote them (profile_builder/stats_text.h), and its own keys. */
typedef struct proc_summary {
    int pid;
    char keys[MAX_KEYS][40];
    char vals[MAX_KEYS][PATH_MAX];
    int n;
    snapprof_stats_t st;
} proc_summary_t;

static const char *get(const proc_summary_t *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->keys[i], key) == 0)
            return s->vals[i];
    return "";
}

/* The value of "key.i", for the keys of output i. */
static const char *get_i(const proc_summary_t *s, const char *key, unsigned i)
{
    char k[48];
    snprintf(k, sizeof k, "%s.%u", key, i);
    return get(s, k);
}

static unsigned long long num(const proc_summary_t *s, const char *key)
{
    return strtoull(get(s, key), NULL, 10);
}

static unsigned n_outputs(const proc_summary_t *s)
{
    unsigned long long n = num(s, "outputs");
    return n > SNAPPROF_OUTPUTS_MAX ? SNAPPROF_OUTPUTS_MAX : (unsigned)n;
}

static int read_summary(const char *path, proc_summary_t *s)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[PATH_MAX + 64];
    s->n = 0;
    memset(&s->st, 0, sizeof s->st);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        if (snapprof__stats_set(&s->st, line, eq + 1) != -ENOENT)
            continue; /* a counter */
        if (eq - line >= (ptrdiff_t)sizeof s->keys[0] || s->n == MAX_KEYS)
            continue;
        memcpy(s->keys[s->n], line, (size_t)(eq - line) + 1);
        snprintf(s->vals[s->n], sizeof s->vals[0], "%s", eq + 1);
        s->n++;
    }
    fclose(f);
    s->pid = atoi(get(s, "pid"));
    return s->pid > 0 ? 0 : -1;
}

static int cmp_pid(const void *a, const void *b)
{
    return ((const proc_summary_t *)a)->pid - ((const proc_summary_t *)b)->pid;
}

/* Processes listed one by one in the summary; more are counted. */
#define SUMMARY_DETAIL 8

/* 1 for a process other than the program that took no sample and so
 * wrote no file (preload_control.c): such are counted in one line. */
static int without_files(const proc_summary_t *s)
{
    unsigned n = n_outputs(s);
    for (unsigned i = 0; i < n; i++)
        if (!*get_i(s, "skipped", i))
            return 0;
    return n > 0;
}

/* A process whose line says something went wrong is always listed. */
static int needs_detail(const proc_summary_t *s)
{
    unsigned n = n_outputs(s);
    int bad = n == 0;
    for (unsigned i = 0; i < n; i++) {
        const char *out = get_i(s, "output", i);
        bad |= !*out || strcmp(out, get_i(s, "requested", i)) != 0;
    }
    return bad || num(s, "threads_skipped") != 0 || !strncmp(get(s, "stopped"), "SIG", 3);
}

/* The index of the first pprof output of s, or -1. */
static int first_pprof(const proc_summary_t *s)
{
    for (unsigned i = 0; i < n_outputs(s); i++)
        if (!strcmp(get_i(s, "format", i), "pprof"))
            return (int)i;
    return -1;
}

/* The preload library, which `record` put first in its own LD_PRELOAD for
 * the program: dpkg runs without it. */
static char g_preload[PATH_MAX];

/* Modules that hold a good share of the self time in frames without
 * names (preload_unnamed.c), the package of each and where its debug
 * files are. dpkg runs here, after the program ended. */
static void print_unnamed(const proc_summary_t *s, const char *in)
{
    for (unsigned i = 0; i < SNAPPROF_UNNAMED_KEYS_MAX; i++) {
        const char *v = get_i(s, "unnamed", i);
        char *path;
        double share = strtod(v, &path);
        if (!*v || *path != ' ')
            break;
        path++;
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        fprintf(stderr,
                "snapprof: %s  %.0f%% of the samples stop in %s, which has no symbols there "
                "(self time, as pprof -top shows it: [%s]): %s\n",
                in, share * 100, base, base, path);
        char pkg[128], hint[512];
        int owner =
            snapprof__dpkg_owner(path, g_preload, SNAPPROF_DPKG_TIMEOUT_MS, pkg, sizeof pkg);
        if (owner > 0) {
            snapprof__debug_hint(pkg, hint, sizeof hint);
            fprintf(stderr, "snapprof: %s    it is from Debian package %s; %s\n", in, pkg, hint);
        } else if (owner == 0) {
            fprintf(stderr,
                    "snapprof: %s    it is not from a Debian package: build it with -g and "
                    "without strip (or -s) for names\n",
                    in);
        } else {
            fprintf(stderr, "snapprof: %s    (dpkg could not say which package owns it)\n", in);
        }
    }
}

/* The lines of one process: what it collected, at what rate, what was
 * lost, and where its files went when that is not where they were asked
 * for. */
static void print_process(const proc_summary_t *s, int several)
{
    const char *in = several ? "  " : "";
    const snapprof_stats_t *st = &s->st;
    char rate[96], trigger[96], losses[256];
    snapprof__stats_rate_text(st, num(s, "period_ns"), !strcmp(get(s, "mode"), "wall"), rate,
                              sizeof rate);
    snapprof__stats_trigger_text(st, trigger, sizeof trigger);
    snapprof__stats_losses_text(st, losses, sizeof losses);
    fprintf(stderr,
            "snapprof: %s%s (pid %d): %llu sample%s from %llu thread%s in %.2f s, %s%s%s; %s; "
            "target pause p50 %.1f us, p99 %.1f us\n",
            in, get(s, "comm"), s->pid, (unsigned long long)st->samples,
            st->samples == 1 ? "" : "s", num(s, "threads"), num(s, "threads") == 1 ? "" : "s",
            (double)num(s, "duration_ns") / 1e9, rate, trigger[0] ? ", " : "", trigger,
            losses[0] ? losses : SNAPPROF__STATS_NO_LOSS, (double)st->pause_p50_ns / 1e3,
            (double)st->pause_p99_ns / 1e3);
    const char *timer = snapprof__stats_timer_note(st, !strcmp(get(s, "mode"), "wall"));
    if (timer)
        fprintf(stderr, "snapprof: %s  %s\n", in, timer);
    if (snapprof__stats_unplaced_share(st, num(s, "period_ns")) > SNAPPROF__UNPLACED_NOTE) {
        char unplaced[256];
        snapprof__stats_unplaced_text(st, unplaced, sizeof unplaced);
        fprintf(stderr, "snapprof: %s  %s\n", in, unplaced);
    }
    if (st->trigger_fallback_errno != 0)
        fprintf(stderr, "snapprof: %s  trigger %s was refused (%s); threads fell back\n", in,
                snapprof_trigger_name(st->trigger_fallback_from),
                strerror(st->trigger_fallback_errno));
    if (st->wall_proc_errno != 0)
        fprintf(stderr,
                "snapprof: %s  /proc/self/task/TID/syscall could not be read (%s); blocked "
                "threads kept their last stack, unsignalled\n",
                in, strerror(st->wall_proc_errno));
    const char *stopped = get(s, "stopped");
    if (!strcmp(stopped, "duration"))
        fprintf(stderr, "snapprof: %s  sampling stopped after --duration; the program ran on\n",
                in);
    else if (!strncmp(stopped, "SIG", 3))
        fprintf(stderr, "snapprof: %s  profile written on %s\n", in, stopped);
    if (num(s, "threads_skipped"))
        fprintf(stderr, "snapprof: %s  %llu thread(s) not sampled: they block %s\n", in,
                num(s, "threads_skipped"), get(s, "signal"));
    print_unnamed(s, in);
    char all[PATH_MAX * 2] = "";
    size_t len = 0;
    for (unsigned i = 0; i < n_outputs(s); i++) {
        const char *out = get_i(s, "output", i), *asked = get_i(s, "requested", i);
        if (*out && strcmp(out, asked) != 0)
            fprintf(stderr, "snapprof: %s  could not write %s; the profile is in %s\n", in, asked,
                    out);
        else if (!*out)
            fprintf(stderr, "snapprof: %s  no profile written to %s: %s\n", in, asked,
                    get_i(s, "error", i));
        if (*out && len < sizeof all)
            len += (size_t)snprintf(all + len, sizeof all - len, "%s%s", len ? ", " : "", out);
    }
    if (several && len)
        fprintf(stderr, "snapprof:     -> %s\n", all);
}

/* Where the program's own files went, and what opens each. */
static void print_outputs(const proc_summary_t *s)
{
    for (unsigned i = 0; i < n_outputs(s); i++) {
        const char *out = get_i(s, "output", i), *format = get_i(s, "format", i);
        if (!*out)
            continue;
        if (!strcmp(format, "folded")) {
            fprintf(stderr, "snapprof: folded stacks written to %s\n", out);
            /* The counts are microseconds of CPU (or wall) time. */
            fprintf(stderr,
                    "snapprof: view them in speedscope, or: flamegraph.pl --countname=us %s > "
                    "flame.svg\n",
                    out);
        } else if (!strcmp(format, "trace")) {
            fprintf(stderr, "snapprof: trace events written to %s\n", out);
            fprintf(stderr, "snapprof: view them in ui.perfetto.dev or chrome://tracing\n");
        } else {
            fprintf(stderr, "snapprof: profile written to %s\n", out);
            fprintf(stderr, "snapprof: view it with: go tool pprof -http=: %s\n", out);
        }
    }
}

/* "12 more processes with no samples, so no files (sh x9, python3 x3)":
 * the processes for which skip[i] is set, by name, the commonest first. */
#define NO_SAMPLE_NAMES 6
static void print_without_files(const proc_summary_t *procs, const unsigned char *skip, int n)
{
    static struct {
        const char *comm;
        int count;
    } names[MAX_PROCS];
    int n_names = 0, total = 0;
    for (int i = 0; i < n; i++) {
        if (!skip[i])
            continue;
        total++;
        const char *comm = *get(&procs[i], "comm") ? get(&procs[i], "comm") : "?";
        int j = 0;
        while (j < n_names && strcmp(names[j].comm, comm) != 0)
            j++;
        if (j == n_names) {
            names[j].comm = comm;
            names[j].count = 0;
            n_names++;
        }
        names[j].count++;
    }
    if (total == 0)
        return;
    /* Commonest first, then by name; a few entries: insertion sort. */
    for (int i = 1; i < n_names; i++)
        for (int j = i; j > 0 && (names[j].count > names[j - 1].count ||
                                  (names[j].count == names[j - 1].count &&
                                   strcmp(names[j].comm, names[j - 1].comm) < 0));
             j--) {
            const char *c = names[j].comm;
            int k = names[j].count;
            names[j] = names[j - 1];
            names[j - 1].comm = c;
            names[j - 1].count = k;
        }
    char list[512] = "";
    size_t len = 0;
    for (int i = 0; i < n_names && i < NO_SAMPLE_NAMES && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s x%d", i ? ", " : "",
                                names[i].comm, names[i].count);
    if (n_names > NO_SAMPLE_NAMES && len < sizeof list)
        snprintf(list + len, sizeof list - len, ", ...");
    fprintf(stderr, "snapprof:   %d %sprocess%s with no samples, so no file%s (%s)\n", total,
            total < n ? "more " : "", total == 1 ? "" : "es", total == 1 ? "" : "s", list);
}

/* Why the program itself left no summary. A crash handler that could not
 * have the profile written in time left "<pid>.crash" (preload_crash.c). */
static void print_no_profile(const char *dir, pid_t root, int status, int crash_off)
{
    int signo = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    char sig[32], path[PATH_MAX], line[128] = "";
    snapprof__signal_name(signo, sig, sizeof sig);
    int named = dir && snapprof__name_record_file(dir, (int)root, SNAPPROF__RECORD_CRASH_EXT, path,
                                                  sizeof path) == 0;
    FILE *f = named ? fopen(path, "re") : NULL;
    double wait_s = SNAPPROF__CRASH_WAIT_NS / 1e9;
    if (f) {
        char more[64];
        if (!fgets(line, sizeof line, f))
            line[0] = '\0';
        if (fgets(more, sizeof more, f) && !strncmp(more, "wait_ms=", 8))
            wait_s = atof(more + 8) / 1e3;
        fclose(f);
    }
    if (!strncmp(line, "crash=own_lock", 14))
        fprintf(stderr,
                "snapprof: pid %d wrote no profile: it died of %s inside snapprof's own lock, "
                "which the profile's writer needs\n",
                (int)root, sig);
    else if (line[0])
        fprintf(stderr,
                "snapprof: pid %d wrote no summary: it died of %s, and its profile was not "
                "finished within %g s of the crash (the crashed thread held something the "
                "writer needs, such as the allocator's lock, or the machine was too busy)\n",
                (int)root, sig, wait_s);
    else if (crash_off && (signo == SIGSEGV || signo == SIGBUS || signo == SIGFPE ||
                           signo == SIGILL || signo == SIGABRT))
        fprintf(stderr, "snapprof: pid %d wrote no profile: it died of %s (--crash off)\n",
                (int)root, sig);
    else if (signo == SIGSEGV || signo == SIGBUS || signo == SIGFPE || signo == SIGILL ||
             signo == SIGABRT)
        fprintf(stderr,
                "snapprof: pid %d wrote no profile: it died of %s where snapprof could not act "
                "(a handler of the program's own, the signal blocked or ignored, or a stack "
                "overflow on a thread without an alternate signal stack)\n",
                (int)root, sig);
    else
        fprintf(stderr,
                "snapprof: pid %d wrote no profile: it ended without running exit handlers "
                "(killed by SIGKILL, _exit(), or exec of a program snapprof cannot load into)\n",
                (int)root);
}

static void print_summary(const char *dir, pid_t root, const char *cmd, int status, int crash_off)
{
    static proc_summary_t procs[MAX_PROCS];
    int n = 0;
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL && n < MAX_PROCS) {
        /* "<pid>.held": the summary of a process that dropped its
         * privileges, written into a file it opened at start (empty if
         * it never got that far). */
        const char *dot = strrchr(de->d_name, '.');
        if (de->d_name[0] == '.' || !dot ||
            (strcmp(dot, SNAPPROF__RECORD_SUMMARY_EXT) != 0 &&
             strcmp(dot, SNAPPROF__RECORD_HELD_EXT) != 0))
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (read_summary(path, &procs[n]) == 0)
            n++;
    }
    if (d)
        closedir(d);
    qsort(procs, (size_t)n, sizeof procs[0], cmp_pid);
    /* The program itself first, then its descendants by pid. */
    for (int i = 0; i < n; i++) {
        if (procs[i].pid == root && i > 0) {
            proc_summary_t tmp = procs[i];
            memmove(&procs[1], &procs[0], (size_t)i * sizeof procs[0]);
            procs[0] = tmp;
        }
    }

    char how[64], sig[32];
    if (WIFEXITED(status))
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "was killed by %s",
                 snapprof__signal_name(WTERMSIG(status), sig, sizeof sig));
    else
        snprintf(how, sizeof how, "ended");
    fprintf(stderr, "snapprof: %s (pid %d) %s\n", cmd, (int)root, how);
    if (n == 0 || procs[0].pid != root)
        print_no_profile(dir, root, status, crash_off);

    /* With many processes (a shell script, a build) the detail lines are
     * the program's own and its busiest descendants', plus any process
     * whose profile went wrong; the rest are counted in one line. */
    static unsigned char shown[MAX_PROCS], skip[MAX_PROCS];
    memset(shown, 0, sizeof shown);
    int shown_n = 0, n_files = 0;
    for (int i = 0; i < n; i++) {
        /* Those that took no sample wrote no file: one line for them all. */
        skip[i] = procs[i].pid != root && without_files(&procs[i]);
        n_files += !skip[i];
    }
    for (int i = 0; i < n; i++) {
        shown[i] = !skip[i] && (n_files <= SUMMARY_DETAIL || i == 0 || needs_detail(&procs[i]));
        shown_n += shown[i];
    }
    for (; shown_n < SUMMARY_DETAIL; shown_n++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!shown[i] && !skip[i] && (best < 0 || procs[i].st.samples > procs[best].st.samples))
                best = i;
        if (best < 0)
            break;
        shown[best] = 1;
    }
    unsigned long long samples = 0, threads = 0, failed = 0, rest_samples = 0;
    int rest = 0;
    for (int i = 0; i < n; i++) {
        const proc_summary_t *s = &procs[i];
        samples += s->st.samples;
        threads += num(s, "threads");
        failed += s->st.failed_total;
        if (skip[i])
            continue;
        if (!shown[i]) {
            rest++;
            rest_samples += s->st.samples;
            continue;
        }
        print_process(s, n > 1);
        if (s->pid == root && s->st.samples == 0)
            fprintf(stderr,
                    "snapprof: %s  no samples in this process itself; its file%s written "
                    "all the same%s\n",
                    n > 1 ? "  " : "", n_outputs(s) == 1 ? " is" : "s are",
                    n_files > 1 ? " (the samples are in those of its child processes)" : "");
    }
    if (rest > 0)
        fprintf(stderr, "snapprof:   ... and %d more process%s with %llu samples in all\n", rest,
                rest == 1 ? "" : "es", rest_samples);
    print_without_files(procs, skip, n);
    if (n > 1)
        fprintf(stderr, "snapprof: %d processes, %llu samples from %llu threads, %llu failures\n",
                n, samples, threads, failed);
    int have_main = n > 0 && procs[0].pid == root;
    if (have_main)
        print_outputs(&procs[0]);
    /* The pprof files of all processes open together (folded stacks and
     * trace events do not merge that way). */
    int k = have_main ? first_pprof(&procs[0]) : -1;
    if (n_files > 1 && k >= 0) {
        const char *main_out = get_i(&procs[0], "output", (unsigned)k);
        fprintf(stderr, "snapprof: all processes together: go tool pprof -http=:");
        /* Many files of other processes are named by one pattern
         * (file_names.h). */
        char glob[PATH_MAX + 16];
        int pattern = *main_out && n_files > SUMMARY_DETAIL &&
                      snapprof__name_pid_glob(main_out, glob, sizeof glob) == 0;
        for (int i = 0; i < n; i++) {
            int j = first_pprof(&procs[i]);
            const char *out = j >= 0 ? get_i(&procs[i], "output", (unsigned)j) : "";
            int child_file = pattern && snapprof__name_is_pid_file(main_out, out);
            if (*out && !child_file)
                fprintf(stderr, " %s", out);
        }
        if (pattern)
            fprintf(stderr, " %s", glob);
        fputc('\n', stderr);
    }
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* ------------------------------------------------------------------------ */
/* Running                                                                  */
/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t g_child;

/* Signals sent to us by another process go on to the program; those the
 * terminal sends reach the program by themselves (same process group). */
static void forward_signal(int signo, siginfo_t *info, void *uc)
{
    (void)uc;
    if (g_child > 0 && info && info->si_code <= 0)
        kill((pid_t)g_child, signo);
}

static void set_env(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0)
        die(EXIT_USAGE, "cannot set %s: %s", name, strerror(errno));
}

static int record(options_t *o)
{
    char preload[PATH_MAX], program[PATH_MAX], why[256];
    static snapprof__output_spec_t outputs[SNAPPROF_OUTPUTS_MAX];
    unsigned n_outputs;
    if (snapprof__plan_outputs(o->paths, o->n_paths, o->formats, o->n_formats, outputs, &n_outputs,
                               why, sizeof why) != 0)
        die(EXIT_USAGE, "%s", why);
    /* The preload library gets them as two comma-separated lists, a format
     * for each path, so it decides nothing by itself. */
    static char paths[SNAPPROF_OUTPUTS_MAX * (PATH_MAX + 1)];
    char formats[SNAPPROF_OUTPUTS_MAX * 8] = "";
    for (unsigned i = 0; i < n_outputs; i++) {
        int err = snapprof__check_output(outputs[i].path);
        if (err != 0)
            die(EXIT_USAGE, "cannot write the profile to %s: %s", outputs[i].path, strerror(err));
        if (strchr(outputs[i].path, ','))
            die(EXIT_USAGE, "output path %s has a ',', which snapprof cannot pass on",
                outputs[i].path);
        strcat(i ? strcat(paths, ",") : paths, outputs[i].path);
        strcat(i ? strcat(formats, ",") : formats, snapprof__format_name(outputs[i].format));
    }
    find_preload(preload, sizeof preload);
    snprintf(g_preload, sizeof g_preload, "%s", preload);
    resolve_command(o->cmd[0], program, sizeof program);
    check_loadable(program);

    char summary_dir[PATH_MAX] = "";
    const char *tmp = getenv("TMPDIR");
    snprintf(summary_dir, sizeof summary_dir, "%s/snapprof-record.XXXXXX",
             tmp && tmp[0] == '/' ? tmp : "/tmp");
    if (!mkdtemp(summary_dir)) {
        snprintf(summary_dir, sizeof summary_dir, "/tmp/snapprof-record.XXXXXX");
        if (!mkdtemp(summary_dir))
            summary_dir[0] = '\0';
    }

    char buf[PATH_MAX * 2 + 2];
    const char *old_preload = getenv("LD_PRELOAD");
    if (old_preload && *old_preload)
        snprintf(buf, sizeof buf, "%s:%s", preload, old_preload);
    else
        snprintf(buf, sizeof buf, "%s", preload);
    set_env("LD_PRELOAD", buf);
    set_env(SNAPPROF_ENV_OUTPUT, paths);
    set_env(SNAPPROF_ENV_FORMAT, formats);
    snprintf(buf, sizeof buf, "%u", o->hz);
    set_env(SNAPPROF_ENV_FREQUENCY, buf);
    set_env(SNAPPROF_ENV_MODE, o->wall ? "wall" : "cpu");
    if (o->signal)
        set_env(SNAPPROF_ENV_SIGNAL, o->signal);
    else
        unsetenv(SNAPPROF_ENV_SIGNAL);
    if (o->duration)
        set_env(SNAPPROF_ENV_DURATION, o->duration);
    else
        unsetenv(SNAPPROF_ENV_DURATION);
    set_env(SNAPPROF_ENV_FORK, o->fork_mode ? o->fork_mode : "follow");
    set_env(SNAPPROF_ENV_CRASH, o->crash_mode ? o->crash_mode : "write");
    if (o->trigger)
        set_env(SNAPPROF_ENV_TRIGGER, o->trigger);
    else
        unsetenv(SNAPPROF_ENV_TRIGGER);
    if (o->wall_blocked)
        set_env(SNAPPROF_ENV_WALL_BLOCKED, o->wall_blocked);
    else
        unsetenv(SNAPPROF_ENV_WALL_BLOCKED);
    if (o->jit_layout[0])
        set_env(SNAPPROF_ENV_JIT_LAYOUT, o->jit_layout);
    else
        unsetenv(SNAPPROF_ENV_JIT_LAYOUT);
    if (summary_dir[0])
        set_env(SNAPPROF_ENV_SUMMARY_DIR, summary_dir);
    else
        unsetenv(SNAPPROF_ENV_SUMMARY_DIR);
    unsetenv(SNAPPROF_ENV_ROOT_PID);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaction(forwarded[i], &sa, NULL);

    /* A close-on-exec pipe tells a failed exec from a started program. */
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        die(EXIT_USAGE, "pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die(EXIT_USAGE, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(pfd[0]);
        char me[32];
        snprintf(me, sizeof me, "%d", (int)getpid());
        setenv(SNAPPROF_ENV_ROOT_PID, me, 1);
        execv(program, o->cmd);
        int e = errno;
        ssize_t w = write(pfd[1], &e, sizeof e);
        (void)w;
        _exit(e == ENOENT ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE);
    }
    g_child = pid;
    close(pfd[1]);
    int exec_errno = 0;
    ssize_t got;
    do
        got = read(pfd[0], &exec_errno, sizeof exec_errno);
    while (got < 0 && errno == EINTR);
    close(pfd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    g_child = 0; /* reaped: its pid may be reused */
    if (got == (ssize_t)sizeof exec_errno) {
        if (summary_dir[0])
            remove_dir(summary_dir);
        die(exec_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE, "%s: %s", o->cmd[0],
            strerror(exec_errno));
    }
    if (!o->quiet)
        print_summary(summary_dir[0] ? summary_dir : NULL, pid, o->cmd[0], status, o->crash_off);
    if (summary_dir[0])
        remove_dir(summary_dir);

    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
        /* End the way the program did, so a calling shell sees it. */
        int signo = WTERMSIG(status);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(signo, SIG_DFL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, signo);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        raise(signo);
        return 128 + signo;
    }
    return EXIT_USAGE;
}

int snapprof__cli_record(int argc, char **argv)
{
    options_t o;
    parse_options(argc, argv, &o);
    return record(&o);
}
