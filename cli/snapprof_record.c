/* `snapprof record [options] -- CMD ARGS...` runs CMD with
 * libsnapprof-preload.so, passes its exit status through and prints what
 * was collected. Everything is checked before CMD starts, so bad input
 * never leaves a program half-started. */
#include "cli/cli.h"
#include "cli/snapprof_http.h"
#include "preload/file_names.h"
#include "preload/preload_config.h"

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
#ifndef SNAPPROF_HEAP_NAME
#define SNAPPROF_HEAP_NAME "libsnapprof-heap.so"
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
    "      --loop T         also one profile per interval T (60s, 5m, 1h; at least\n"
    "                       1s), each file named BASE.<UTC start>EXT beside FILE\n"
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
    "      --lines WHERE    where source lines and inlined frames come from:\n"
    "                       program: each object's own DWARF, and separate debug\n"
    "                       files (/usr/lib/debug, .gnu_debuglink) except those of\n"
    "                       system libraries (/usr/lib, /lib), which name their\n"
    "                       functions without lines (default); all: every\n"
    "                       debug file (libc6-dbg's libc adds ~60 ms to the first\n"
    "                       profile); own: each object's own DWARF only\n"
    "      --heap           also sample allocations (malloc, new, ...): writes\n"
    "                       BASE.heap.pb.gz, the heap profile (in use at exit and\n"
    "                       all allocations), and BASE.heappeak.pb.gz, the same at\n"
    "                       the in-use peak, beside the first FILE\n"
    "      --heap-interval BYTES\n"
    "                       mean bytes allocated between heap samples (default\n"
    "                       524288); implies --heap\n"
    "      --jit-layout L   how frames of code named in /tmp/perf-PID.map are laid\n"
    "                       out: [PREFIX=]LAYOUT, comma-separated or repeated, for\n"
    "                       the lines whose names start with PREFIX (none: all\n"
    "                       other lines). LAYOUT: fp (frame pointers, the default),\n"
    "                       cpython (python -X perf's trampolines; py:: lines get\n"
    "                       it without this option) or fixed:SIZE[:RA[:FP]] (SIZE\n"
    "                       bytes with the return address, at RA (SIZE-8), rbp\n"
    "                       saved at FP (untouched)). E.g. py::=fp,fixed:32\n"
    "      --python         CPython 3.11: Python functions, files and lines in place\n"
    "                       of the interpreter's evaluation loop (docs/python.md)\n"
    "      --http ADDR:PORT serve the program's profiles as Go's net/http/pprof does\n"
    "                       (GET /debug/pprof/profile?seconds=N, /debug/pprof/; with\n"
    "                       --heap /heap and /allocs, with --wall /wall), from\n"
    "                       this process: 127.0.0.1:6060, [::1]:6060, or a PORT on\n"
    "                       127.0.0.1 (0: any free port); prints the URL to stderr.\n"
    "                       Without -o, --loop or --flight, threads are sampled only\n"
    "                       while a profile is requested (timed by each thread's\n"
    "                       CPU-time timer up to 100 Hz, unless --trigger says\n"
    "                       otherwise), and no whole-run CPU file is written\n"
    "      --http-token TOKEN\n"
    "                       the token requests must carry instead of a random one:\n"
    "                       16-128 letters, digits, - _ . ~; none: no token at all\n"
    "      --flight T       with --http: keep the last T of CPU profile in memory (5m,\n"
    "                       1h; 1s to 24h) and answer ?since=S at once with its last S;\n"
    "                       samples at 19 Hz, timed by each thread's CPU-time timer,\n"
    "                       unless -F or --trigger says otherwise\n"
    "  -q, --quiet          print no summary\n"
    "\n"
    "Open a pprof profile with: go tool pprof -http=: FILE; its counters with:\n"
    "snapprof stats FILE. Folded stacks open in speedscope or flamegraph.pl, trace\n"
    "events in ui.perfetto.dev.\n"
    "Without this command: LD_PRELOAD=libsnapprof-preload.so SNAPPROF_OUTPUT=FILE CMD\n"
    "(gperftools' CPUPROFILE and CPUPROFILE_FREQUENCY work too); heap profiles too:\n"
    "LD_PRELOAD=\"libsnapprof-heap.so libsnapprof-preload.so\" SNAPPROF_HEAP=1 ...\n";

int snapprof__cli_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("snapprof: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return status;
}

/* Prints the message (snapprof__cli_fail) and exits with status. */
#define die(...) exit(snapprof__cli_fail(__VA_ARGS__))

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct options {
    unsigned hz;
    const char *paths[SNAPPROF_OUTPUTS_ASKED_MAX]; /* -o, as given */
    unsigned n_paths;
    snapprof__format_t formats[SNAPPROF_OUTPUTS_ASKED_MAX]; /* --format */
    unsigned n_formats;
    int wall;
    const char *duration; /* as given, checked */
    const char *loop;     /* --loop as given, checked */
    const char *flight;   /* --flight as given, checked */
    const char *signal;   /* as given, checked */
    const char *fork_mode;
    const char *crash_mode;
    int crash_off;     /* --crash off */
    const char *lines; /* --lines all|own, or NULL */
    const char *trigger;
    const char *wall_blocked;
    char jit_layout[1024];     /* --jit-layout values, checked, joined by commas */
    int heap;                  /* --heap */
    const char *heap_interval; /* --heap-interval as given, checked */
    unsigned n_jit_rules;
    int python;             /* --python */
    const char *http;       /* --http ADDR:PORT, checked */
    const char *http_token; /* --http-token: "none" is "", else checked */
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
    int hz_given = 0;
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
            hz_given = 1;
        } else if (matches(a, "-o", "--output")) {
            const char *path = option_value(argc, argv, &i, "-o", "--output");
            if (!*path)
                die(EXIT_USAGE, "the output path is empty");
            /* SNAPPROF_OUTPUT separates the paths with commas. */
            if (strchr(path, ','))
                die(EXIT_USAGE, "output path %s has a ',', which snapprof cannot pass on", path);
            if (o->n_paths == SNAPPROF_OUTPUTS_ASKED_MAX)
                die(EXIT_USAGE, "more than %u outputs", SNAPPROF_OUTPUTS_ASKED_MAX);
            o->paths[o->n_paths++] = path;
        } else if (matches(a, NULL, "--format")) {
            const char *v = option_value(argc, argv, &i, NULL, "--format");
            if (snapprof__parse_formats(v, o->formats, SNAPPROF_OUTPUTS_ASKED_MAX, &o->n_formats,
                                        why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --format: %s", why);
        } else if (strcmp(a, "--cpu") == 0) {
            o->wall = 0;
        } else if (strcmp(a, "--wall") == 0) {
            o->wall = 1;
        } else if (strcmp(a, "--python") == 0) {
            o->python = 1;
        } else if (matches(a, NULL, "--http-token")) {
            const char *v = option_value(argc, argv, &i, NULL, "--http-token");
            if (strcmp(v, "none") == 0)
                o->http_token = "";
            else if (snapprof__http_check_token(v, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --http-token: %s", why);
            else
                o->http_token = v;
        } else if (matches(a, NULL, "--http")) {
            o->http = option_value(argc, argv, &i, NULL, "--http");
            if (snapprof__http_check(o->http, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --http: %s", why);
        } else if (matches(a, NULL, "--duration")) {
            uint64_t ns;
            o->duration = option_value(argc, argv, &i, NULL, "--duration");
            if (snapprof__parse_duration(o->duration, &ns, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad duration: %s", why);
        } else if (matches(a, NULL, "--loop")) {
            uint64_t ns;
            o->loop = option_value(argc, argv, &i, NULL, "--loop");
            if (snapprof__parse_loop(o->loop, &ns, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --loop: %s", why);
        } else if (matches(a, NULL, "--flight")) {
            uint64_t ns;
            o->flight = option_value(argc, argv, &i, NULL, "--flight");
            if (snapprof__parse_loop(o->flight, &ns, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --flight: %s", why);
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
        } else if (matches(a, NULL, "--lines")) {
            int lines;
            o->lines = option_value(argc, argv, &i, NULL, "--lines");
            if (snapprof__parse_lines(o->lines, &lines, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --lines: %s", why);
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
        } else if (strcmp(a, "--heap") == 0) {
            o->heap = 1;
        } else if (matches(a, NULL, "--heap-interval")) {
            size_t bytes;
            o->heap_interval = option_value(argc, argv, &i, NULL, "--heap-interval");
            if (snapprof__parse_heap_interval(o->heap_interval, &bytes, why, sizeof why) != 0)
                die(EXIT_USAGE, "bad --heap-interval: %s", why);
            o->heap = 1;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
        } else {
            die(EXIT_USAGE, "unknown option '%s' (see snapprof record --help)", a);
        }
    }
    if (i >= argc)
        die(EXIT_USAGE, "no command to run (snapprof record [options] -- CMD [ARGS...])");
    if (o->flight && !o->http)
        die(EXIT_USAGE, "--flight needs --http: the flight recorder answers ?since= there");
    /* The flight recorder runs as long as the service: parca-agent's
     * always-on rate unless -F says otherwise. */
    if (o->flight && !hz_given) {
        o->hz = SNAPPROF_FLIGHT_HZ;
        /* ... timed by each thread's CPU-time timer unless --trigger says
         * otherwise (SNAPPROF_FLIGHT_TRIGGER, preload_config.h: why). */
        if (!o->trigger && !o->wall)
            o->trigger = snapprof_trigger_name(SNAPPROF_FLIGHT_TRIGGER);
    }
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

/* The heap hooks (--heap): $SNAPPROF_HEAP_LIB, or beside the preload
 * library (an install tree), or in the preload's build tree
 * (preload/../preload_heap), or in this command's (cli/../preload_heap).
 * The preload's come first: with SNAPPROF_PRELOAD_LIB naming another
 * build (a sanitizer build's record serving a plain program), the two
 * libraries must come from the same one. */
static void find_heap_lib(const char *preload, char *out, size_t size)
{
    const char *env = getenv("SNAPPROF_HEAP_LIB");
    if (env && *env) {
        if (access(env, R_OK) != 0)
            die(EXIT_USAGE, "SNAPPROF_HEAP_LIB=%s: %s", env, strerror(errno));
        if (snapprof__absolute_path(env, out, size) != 0)
            die(EXIT_USAGE, "SNAPPROF_HEAP_LIB=%s: path too long", env);
        return;
    }
    char self[PATH_MAX], dir[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        die(EXIT_USAGE, "cannot find this command's own path: %s", strerror(errno));
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(dir, sizeof dir, "%s", preload);
    *strrchr(dir, '/') = '\0';
    const char *dirs[] = {dir, dir, self};
    const char *rel[] = {".", "../preload_heap", "../preload_heap"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[PATH_MAX], real[PATH_MAX];
        int len = snprintf(cand, sizeof cand, "%s/%s/%s", dirs[i], rel[i], SNAPPROF_HEAP_NAME);
        if (len > 0 && (size_t)len < sizeof cand && access(cand, R_OK) == 0 &&
            realpath(cand, real)) {
            snprintf(out, size, "%s", real);
            return;
        }
    }
    die(EXIT_USAGE,
        "--heap: cannot find %s beside %s nor in %s/../preload_heap (set SNAPPROF_HEAP_LIB)",
        SNAPPROF_HEAP_NAME, preload, self);
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

/* --loop: how many interval files of each output the program left
 * (BASE.<UTC start>EXT, file_names.h), in one line each. */
static void print_intervals(const snapprof__output_spec_t *outputs, unsigned n_outputs)
{
    for (unsigned i = 0; i < n_outputs; i++) {
        const char *path = outputs[i].path, *slash = strrchr(path, '/');
        size_t base = snapprof__name_base_length(path), dirlen = (size_t)(slash - path);
        const char *name = slash + 1, *ext = path + base;
        size_t nlen = base - dirlen - 1, elen = strlen(ext);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", (int)(dirlen ? dirlen : 1), path);
        DIR *d = opendir(dir);
        unsigned n = 0;
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            size_t len = strlen(de->d_name);
            n += len == nlen + 1 + 16 + elen && strncmp(de->d_name, name, nlen) == 0 &&
                 de->d_name[nlen] == '.' && de->d_name[nlen + 16] == 'Z' &&
                 strcmp(de->d_name + len - elen, ext) == 0;
        }
        if (d)
            closedir(d);
        fprintf(stderr, "snapprof: %u interval profiles: '%.*s'.*Z'%s'\n", n, (int)base, path, ext);
    }
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
    char heap_lib[PATH_MAX] = "";
    if (o->heap)
        find_heap_lib(preload, heap_lib, sizeof heap_lib);
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

    /* The heap hooks come first: they must be what the program's malloc
     * calls bind to, ahead of libsnapprof.so and everything else. */
    static char buf[PATH_MAX * 4 + 4];
    const char *old_preload = getenv("LD_PRELOAD");
    snprintf(buf, sizeof buf, "%s%s%s%s%s", heap_lib, heap_lib[0] ? ":" : "", preload,
             old_preload && *old_preload ? ":" : "", old_preload ? old_preload : "");
    set_env("LD_PRELOAD", buf);
    if (o->heap) {
        set_env(SNAPPROF_ENV_HEAP, "1");
        if (o->heap_interval)
            set_env(SNAPPROF_ENV_HEAP_INTERVAL, o->heap_interval);
        else
            unsetenv(SNAPPROF_ENV_HEAP_INTERVAL);
    } else {
        unsetenv(SNAPPROF_ENV_HEAP);
        unsetenv(SNAPPROF_ENV_HEAP_INTERVAL);
    }
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
    if (o->loop)
        set_env(SNAPPROF_ENV_LOOP, o->loop);
    else
        unsetenv(SNAPPROF_ENV_LOOP);
    if (o->flight)
        set_env(SNAPPROF_ENV_FLIGHT, o->flight);
    else
        unsetenv(SNAPPROF_ENV_FLIGHT);
    set_env(SNAPPROF_ENV_FORK, o->fork_mode ? o->fork_mode : "follow");
    set_env(SNAPPROF_ENV_CRASH, o->crash_mode ? o->crash_mode : "write");
    if (o->lines)
        set_env(SNAPPROF_ENV_LINES, o->lines);
    else
        unsetenv(SNAPPROF_ENV_LINES);
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
    if (o->python)
        set_env("SNAPPROF_PYTHON", "1");
    else
        unsetenv("SNAPPROF_PYTHON");
    if (summary_dir[0])
        set_env(SNAPPROF_ENV_SUMMARY_DIR, summary_dir);
    else
        unsetenv(SNAPPROF_ENV_SUMMARY_DIR);
    /* --http alone: nothing is armed until a request comes, and no
     * whole-run CPU file is written (issue 28). With -o or --format (a
     * file asked for), --loop or --flight (sampling all the time anyway),
     * or --wall (whose ticks read every thread), armed for the whole run. */
    if (o->http && o->n_paths == 0 && o->n_formats == 0 && !o->loop && !o->flight && !o->wall)
        set_env(SNAPPROF_ENV_ARM, "demand");
    else
        unsetenv(SNAPPROF_ENV_ARM);
    unsetenv(SNAPPROF_ENV_ROOT_PID);
    unsetenv("SNAPPROF_CONTROL_FD");
    unsetenv("SNAPPROF_CONTROL_DIR");
    /* Listening before the program starts: a port in use is said first. */
    snapprof__http_t *http =
        o->http ? snapprof__http_prepare(o->http, o->http_token, o->heap, o->wall) : NULL;
    snapprof__http_set_flight(http, o->flight != NULL);

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
    if (got != (ssize_t)sizeof exec_errno)
        snapprof__http_start(http, pid);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    g_child = 0; /* reaped: its pid may be reused */
    snapprof__http_finish(http);
    if (got == (ssize_t)sizeof exec_errno) {
        if (summary_dir[0])
            remove_dir(summary_dir);
        die(exec_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE, "%s: %s", o->cmd[0],
            strerror(exec_errno));
    }
    if (!o->quiet)
        snapprof__record_summary(summary_dir[0] ? summary_dir : NULL, pid, o->cmd[0], status,
                                 o->crash_off, preload);
    if (!o->quiet && o->loop)
        print_intervals(outputs, n_outputs);
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
