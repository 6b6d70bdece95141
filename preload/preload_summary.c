/* The summary of the whole-process profile for `snapprof record`
 * (preload_control.c writes it at stop). */
#include "preload/file_names.h"
#include "preload/preload_process.h"
#include "common/stats_text.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int print_stat(void *arg, const char *key, const char *value)
{
    return fprintf((FILE *)arg, "%s=%s\n", key, value) < 0;
}

/* Writes "<summary_dir>/<pid>.summary" for `snapprof record`: key=value
 * lines, through a temporary file so the command never reads half. The
 * process's own keys come first, then every counter of the profile from
 * the stats table (common/stats_text.h), which the command reads
 * back with the same table; no process key is also a counter's. */
void snapprof__preload_write_summary(const snapprof__preload_profile_t *p, const char *note,
                                     const output_result_t *res, const snapprof_stats_t *st)
{
    const char *dir = p->cfg.summary_dir;
    if (!dir[0])
        return;
    char tmp[PATH_MAX], path[PATH_MAX];
    if (snapprof__name_record_file(dir, (int)getpid(), SNAPPROF__RECORD_SUMMARY_EXT, path,
                                   sizeof path) != 0 ||
        snapprof__preload_path_fmt(tmp, sizeof tmp, "%s/.%d.tmp", dir, (int)getpid()) != 0)
        return;
    FILE *f = fopen(tmp, "we");
    /* A process that dropped its privileges writes the file it opened at
     * start (preload_held.c), which `snapprof record` reads instead. */
    int held = 0;
    if (!f && (f = snapprof__preload_held_summary()) != NULL)
        held = 1;
    if (!f)
        return;
    char comm[64] = "", exe[PATH_MAX] = "", name[32];
    FILE *cf = fopen("/proc/self/comm", "re");
    if (cf) {
        if (fgets(comm, sizeof comm, cf))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(cf);
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    fprintf(f, "pid=%d\nppid=%d\ncomm=%s\nexe=%s\n", (int)getpid(), (int)getppid(), comm, exe);
    fprintf(f, "outputs=%u\n", p->cfg.n_outputs);
    for (unsigned i = 0; i < p->cfg.n_outputs; i++) {
        fprintf(f, "requested.%u=%s\nformat.%u=%s\n", i, p->cfg.outputs[i].path, i,
                snapprof__format_name(p->cfg.outputs[i].format));
        if (res[i].no_samples)
            fprintf(f, "skipped.%u=no samples\n", i);
        else if (res[i].written[0])
            fprintf(f, "output.%u=%s\n", i, res[i].written);
        else
            fprintf(f, "error.%u=%s\n", i, snapprof_strerror(res[i].err));
    }
    if (p->cfg.arm_demand)
        fprintf(f, "armed=demand\n"); /* no whole-run CPU output (SNAPPROF_ARM) */
    fprintf(f, "stopped=%s\n", note);
    fprintf(f, "signal=%s\n", snapprof__signal_name(p->signo, name, sizeof name));
    fprintf(f, "mode=%s\nperiod_ns=%u\n", p->cfg.wall ? "wall" : "cpu", 1000000000u / p->cfg.hz);
    if (p->cfg.heap_interval)
        fprintf(f, "heap_interval=%zu\n", p->cfg.heap_interval);
    uint64_t now = snapprof__monotonic_ns();
    fprintf(f, "duration_ns=%llu\nwritten_mono_ns=%llu\n",
            (unsigned long long)(now - p->start_mono), (unsigned long long)now);
    uint64_t seen, failed;
    unsigned skipped;
    snapprof__preload_threads_counts(&seen, &failed, &skipped);
    fprintf(f, "threads=%llu\nthreads_failed=%llu\nthreads_skipped=%u\n", (unsigned long long)seen,
            (unsigned long long)failed, skipped);
    /* Modules whose frames have no names: "share path" (the share first,
     * since a path may hold spaces). */
    const snapprof__unnamed_module_t *um = NULL;
    size_t n_um = p->unnamed ? snapprof__unnamed_modules(p->unnamed, &um) : 0;
    for (size_t i = 0; i < n_um; i++)
        fprintf(f, "unnamed.%zu=%.4f %s\n", i, um[i].share, um[i].path);
    snapprof__stats_for_each(st, print_stat, f);
    int bad = ferror(f);
    if (held)
        fclose(f);
    else if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
        unlink(tmp);
}
