/* The package of a module without names, and where its debug files are
 * (cli/debug_hint.h). */
#include "cli/debug_hint.h"
#include "preload/preload_config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Packages of Debian 12 (bookworm) whose debug files are in the main
 * archive, by the package that owns the stripped file. Checked on a Debian
 * 12 machine with `apt-cache show PKG-dbg` and the file's build-id
 * (`readelf -n`) against the candidate's Build-Ids field:
 *   - libc6 -> libc6-dbg: "detached debugging symbols"; libc.so.6's
 *     build-id is listed.
 *   - python3.11(-minimal) -> python3.11-dbg: /usr/bin/python3.11's
 *     debug file, listed only when both packages have the same version
 *     (the installed 3.11.2-6+deb12u6 was not; the archive had u8, u9).
 * Found in main with no debug files for these: liblzma5 (no liblzma5-dbg),
 * libsqlite3-0 (no libsqlite3-0-dbg), perl-base and perl (perl-debug is a
 * separate -DDEBUGGING interpreter; /usr/bin/perl's build-id is not in
 * it). Those, like most, have only PKG-dbgsym in the debug archive. */
static const struct {
    const char *pkg, *dbg, *note;
} k_dbg[] = {
    {"libc6", "libc6-dbg", NULL},
    {"python3.11-minimal", "python3.11-dbg",
     " (it names the interpreter when it has the same version as python3.11-minimal: "
     "upgrade both)"},
    {"python3.11", "python3.11-dbg",
     " (it names the interpreter when it has the same version as python3.11: upgrade both)"},
};

static const char *dbg_note(const char *pkg)
{
    for (size_t i = 0; i < sizeof k_dbg / sizeof k_dbg[0]; i++)
        if (!strcmp(k_dbg[i].pkg, pkg))
            return k_dbg[i].note ? k_dbg[i].note : "";
    return NULL;
}

const char *snapprof__debug_package(const char *pkg)
{
    for (size_t i = 0; i < sizeof k_dbg / sizeof k_dbg[0]; i++)
        if (!strcmp(k_dbg[i].pkg, pkg))
            return k_dbg[i].dbg;
    return NULL;
}

void snapprof__debug_hint(const char *pkg, char *out, size_t size)
{
    const char *dbg = snapprof__debug_package(pkg);
    if (dbg)
        snprintf(out, size, "for names: apt-get install %s%s", dbg, dbg_note(pkg));
    else
        snprintf(out, size,
                 "its debug symbols (%s-dbgsym) are only in Debian's debug archive "
                 "(debian-debug), which must first be added to apt's sources",
                 pkg);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* LD_PRELOAD without the entry preload (the first, as `record` put it). */
static void restore_preload(const char *preload)
{
    const char *cur = getenv("LD_PRELOAD");
    size_t n = preload ? strlen(preload) : 0;
    if (!cur || !n || strncmp(cur, preload, n) != 0)
        return;
    if (cur[n] == ':' && cur[n + 1])
        setenv("LD_PRELOAD", cur + n + 1, 1);
    else
        unsetenv("LD_PRELOAD");
}

/* Runs `dpkg -S path` until deadline. Returns 1 with the package, 0 when
 * dpkg says no package has it, -1 otherwise. */
static int dpkg_search(const char *path, const char *preload, long long deadline, char *out,
                       size_t size)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        restore_preload(preload);
        unsetenv(SNAPPROF_ENV_OUTPUT);
        unsetenv(SNAPPROF_ENV_SUMMARY_DIR);
        unsetenv(SNAPPROF_ENV_ROOT_PID);
        dup2(pfd[1], STDOUT_FILENO);
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            dup2(null, STDERR_FILENO);
            dup2(null, STDIN_FILENO);
        }
        execlp("dpkg", "dpkg", "-S", "--", path, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    char buf[4096];
    size_t len = 0;
    int timed_out = 0;
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            timed_out = r == 0;
            break;
        }
        ssize_t got = read(pfd[0], buf + len, sizeof buf - 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
        if (len == sizeof buf - 1)
            break;
    }
    close(pfd[0]);
    buf[len] = '\0';
    if (timed_out)
        kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (timed_out || !WIFEXITED(st) || WEXITSTATUS(st) == 127)
        return -1;
    if (WEXITSTATUS(st) != 0)
        return WEXITSTATUS(st) == 1 ? 0 : -1; /* 1: no package has it */
    /* "pkg:arch: /path", or "pkg1, pkg2: /path"; "diversion by ..." lines
     * name no owner. */
    for (char *line = buf; *line;) {
        char *end = line + strcspn(line, "\n");
        char save = *end;
        *end = '\0';
        if (strncmp(line, "diversion ", 10) != 0) {
            size_t n = strcspn(line, ":, ");
            if (n > 0 && line[n] != '\0') {
                snprintf(out, size, "%.*s", (int)n, line);
                return 1;
            }
        }
        *end = save;
        line = save ? end + 1 : end;
    }
    return 0;
}

int snapprof__dpkg_owner(const char *path, const char *preload_to_drop, int timeout_ms, char *out,
                         size_t size)
{
    long long deadline = now_ms() + timeout_ms;
    char cand[3][PATH_MAX];
    int n = 0;
    snprintf(cand[n++], sizeof cand[0], "%s", path);
    if (!strncmp(path, "/usr/", 5))
        snprintf(cand[n++], sizeof cand[0], "%s", path + 4);
    char real[PATH_MAX];
    if (realpath(path, real) && strcmp(real, path) != 0)
        snprintf(cand[n++], sizeof cand[0], "%s", real);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        rc = dpkg_search(cand[i], preload_to_drop, deadline, out, size);
        if (rc != 0)
            return rc; /* found, or dpkg cannot answer */
    }
    return 0;
}
