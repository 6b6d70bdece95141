/* `snapprof record`'s summary: after the program ended, reads the
 * per-process summary files the preload library left in the summary
 * directory and prints what each process collected, what was lost, where
 * its files went, and the debug packages that would name its stripped
 * frames. */
#include "cli/cli.h"
#include "cli/debug_hint.h"
#include "preload/file_names.h"
#include "preload/preload_config.h"
#include "common/stats_text.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>
#include <sys/wait.h>

#define MAX_PROCS 256
/* "unnamed.N" keys read (the preload writes at most 4), and how long dpkg
 * may take for each: 3 s was not enough on a loaded machine (dpkg -S
 * scans every package's file list: 0.9 s of wall time for 0.12 s of CPU
 * at load 8, past 3 s at load 25, and record_stripped_module failed). After
 * one failure dpkg is not asked again in this summary. */
#define SNAPPROF_UNNAMED_KEYS_MAX 4
#define SNAPPROF_DPKG_TIMEOUT_MS 10000
#define MAX_KEYS 48

/* One process's summary file: its counters, read with the stats table
 * that wrote them (common/stats_text.h), and its own keys. */
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

/* SNAPPROF_ARM=demand (--http without -o): no whole-run CPU output. */
static int on_demand(const proc_summary_t *s)
{
    return !strcmp(get(s, "armed"), "demand");
}

/* Processes listed one by one in the summary; more are counted. */
#define SUMMARY_DETAIL 8

/* 1 for a process other than the program that took no sample and so
 * wrote no file (preload_control.c): such are counted in one line. */
static int without_files(const proc_summary_t *s)
{
    unsigned n = n_outputs(s);
    if (n == 0 && on_demand(s))
        return 1; /* it had no file to write */
    for (unsigned i = 0; i < n; i++)
        if (!*get_i(s, "skipped", i))
            return 0;
    return n > 0;
}

/* A process whose line says something went wrong is always listed. */
static int needs_detail(const proc_summary_t *s)
{
    unsigned n = n_outputs(s);
    int bad = n == 0 && !on_demand(s);
    for (unsigned i = 0; i < n; i++) {
        const char *out = get_i(s, "output", i);
        bad |= !*out || strcmp(out, get_i(s, "requested", i)) != 0;
    }
    return bad || num(s, "threads_skipped") != 0 || !strncmp(get(s, "stopped"), "SIG", 3) ||
           !strcmp(get(s, "stopped"), "checkpoint");
}

/* The index of the first output of s in format, or -1. */
static int first_of_format(const proc_summary_t *s, const char *format)
{
    for (unsigned i = 0; i < n_outputs(s); i++)
        if (!strcmp(get_i(s, "format", i), format))
            return (int)i;
    return -1;
}

/* The preload library, which `record` put first in its own LD_PRELOAD for
 * the program: dpkg runs without it. */
static const char *g_preload;
/* CLOCK_MONOTONIC when the summary is read, just after the program ended. */
static unsigned long long g_ended_ns;

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
        static int dpkg_failed;
        int owner = dpkg_failed ? -1
                                : snapprof__dpkg_owner(path, g_preload, SNAPPROF_DPKG_TIMEOUT_MS,
                                                       pkg, sizeof pkg);
        dpkg_failed |= owner < 0;
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
    if (num(s, "heap_interval")) {
        /* --heap: what the heap profile rests on, and what it lost. */
        unsigned long long dropped =
            st->heap_dropped_no_slot + st->heap_dropped_set_full + st->heap_dropped_no_stack;
        fprintf(stderr,
                "snapprof: %s  heap: %llu sampled allocation%s (one per %llu bytes on average), "
                "%llu of their frees seen",
                in, (unsigned long long)st->heap_samples, st->heap_samples == 1 ? "" : "s",
                num(s, "heap_interval"), (unsigned long long)st->heap_frees);
        if (st->heap_samples_no_slot)
            fprintf(stderr, "; %llu of them without a stack (no free capture slot: under \"%s\")",
                    (unsigned long long)st->heap_samples_no_slot, "[heap: no capture slot]");
        if (dropped)
            fprintf(stderr,
                    "; %llu dropped (no free capture slot %llu, live set full %llu, no stack "
                    "bounds %llu)",
                    dropped, (unsigned long long)st->heap_dropped_no_slot,
                    (unsigned long long)st->heap_dropped_set_full,
                    (unsigned long long)st->heap_dropped_no_stack);
        fputc('\n', stderr);
    }
    const char *timer = snapprof__stats_timer_note(st, !strcmp(get(s, "mode"), "wall"));
    if (timer)
        fprintf(stderr, "snapprof: %s  %s\n", in, timer);
    /* On demand most CPU time is unsampled by design: between requests. */
    if (!on_demand(s) &&
        snapprof__stats_unplaced_share(st, num(s, "period_ns")) > SNAPPROF__UNPLACED_NOTE) {
        char unplaced[256];
        snapprof__stats_unplaced_text(st, unplaced, sizeof unplaced);
        fprintf(stderr, "snapprof: %s  %s\n", in, unplaced);
    }
    if (st->trigger_fallback_errno != 0)
        fprintf(stderr, "snapprof: %s  trigger %s was refused (%s); threads fell back\n", in,
                snapprof_trigger_name(st->trigger_fallback_from),
                strerror(st->trigger_fallback_errno));
    if (st->python_layout_unknown > 1)
        fprintf(stderr,
                "snapprof: %s  --python: Python %u.%u's frame layout unknown, native frames "
                "only\n",
                in, (unsigned)(st->python_layout_unknown >> 24),
                (unsigned)(st->python_layout_unknown >> 16) & 0xffu);
    else if (st->python_layout_unknown == 1)
        fprintf(stderr,
                "snapprof: %s  --python: this Python's frame layout unknown, native frames "
                "only\n",
                in);
    if (st->python_read_errno != 0)
        fprintf(stderr,
                "snapprof: %s  --python: process_vm_readv on our own memory was refused (%s: a "
                "seccomp filter?), native frames only\n",
                in, strerror((int)st->python_read_errno));
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
    else if (!strcmp(stopped, "checkpoint"))
        fprintf(stderr,
                "snapprof: %s  the process ended without running exit handlers (a bare "
                "exit_group system call, as Go's return from main and os.Exit are, or _exit()): "
                "its profile is the last checkpoint, written %.2f s before the end "
                "(SNAPPROF_CHECKPOINT)\n",
                in,
                g_ended_ns > num(s, "written_mono_ns")
                    ? (double)(g_ended_ns - num(s, "written_mono_ns")) / 1e9
                    : 0.0);
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
    if (on_demand(s))
        fprintf(stderr, "snapprof: no whole-run CPU profile: with --http and no -o, threads are "
                        "sampled only while a profile is requested\n");
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
        } else if (!strcmp(format, "heap")) {
            /* In use at exit (the default index) is the leak report. */
            fprintf(stderr, "snapprof: heap profile written to %s\n", out);
            fprintf(stderr,
                    "snapprof: view it with: go tool pprof -sample_index=inuse_space (or "
                    "alloc_space) -http=: %s\n",
                    out);
        } else if (!strcmp(format, "heappeak")) {
            fprintf(stderr, "snapprof: heap profile at its in-use peak written to %s\n", out);
        } else {
            fprintf(stderr, "snapprof: profile written to %s\n", out);
            fprintf(stderr, "snapprof: view it with: go tool pprof -http=: %s\n", out);
        }
    }
}

/* One line: the files of format of every process (procs[0] the program),
 * for one `go tool pprof`. */
static void print_together(const proc_summary_t *procs, int n, int n_files, const char *format,
                           const char *what)
{
    int k = first_of_format(&procs[0], format);
    if (k < 0)
        return;
    const char *main_out = get_i(&procs[0], "output", (unsigned)k);
    fprintf(stderr, "snapprof: %s: go tool pprof -http=:", what);
    /* Many files of other processes are named by one pattern
     * (file_names.h). */
    char glob[PATH_MAX + 16];
    int pattern = *main_out && n_files > SUMMARY_DETAIL &&
                  snapprof__name_pid_glob(main_out, glob, sizeof glob) == 0;
    for (int i = 0; i < n; i++) {
        int j = first_of_format(&procs[i], format);
        const char *out = j >= 0 ? get_i(&procs[i], "output", (unsigned)j) : "";
        int child_file = pattern && snapprof__name_is_pid_file(main_out, out);
        if (*out && !child_file)
            fprintf(stderr, " %s", out);
    }
    if (pattern)
        fprintf(stderr, " %s", glob);
    fputc('\n', stderr);
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

void snapprof__record_summary(const char *dir, pid_t root, const char *cmd, int status,
                              int crash_off, const char *preload)
{
    g_preload = preload;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    g_ended_ns = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
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
        if (s->pid == root && s->st.samples == 0 && n_outputs(s) > 0)
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
     * trace events do not merge that way); and the heap profiles. */
    if (have_main && n_files > 1) {
        print_together(procs, n, n_files, "pprof", "all processes together");
        print_together(procs, n, n_files, "heap", "their heap profiles together");
    }
}
